"""A result as a box table on a terminal: what the CLI prints and a relation's ``show()``."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from qengine.catalog.types import NUMBER, column_type
from qengine.sandbox.carried_types import restoring_query
from qengine.sandbox.connection import scratch_connection
from qengine.sandbox.quoting import identifier

MAX_ROWS = 1000


def print_table(table: pa.Table, out: Any, total: int | None = None) -> None:
    """``table`` as a box table, at most :data:`MAX_ROWS` of its rows; ``total`` is the rows of the whole
    result when ``table`` holds only its first ones."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console(file=out, width=None if out.isatty() else 250)
    shown = table.slice(0, MAX_ROWS)
    view = Table(show_header=True, header_style="bold")
    for f in table.schema:
        kind = column_type(f)
        view.add_column(Text(f"{f.name}\n{kind.lower()}"), justify="right" if kind == NUMBER else "left")
    for row in _cells(shown):
        view.add_row(*[Text("NULL" if v is None else v) for v in row])
    console.print(view)
    total = table.num_rows if total is None else total
    more = f" (first {shown.num_rows} shown)" if shown.num_rows < total else ""
    console.print(f"{total} row(s){more}")


def _cells(table: pa.Table) -> list[tuple[str | None, ...]]:
    """Each value of ``table`` as DuckDB's text of it (its tagged types restored first): Python's
    own text of Arrow's values printed TIME '24:00:00' as 00:00:00, an interval as
    ``MonthDayNano(...)``, and failed on an infinite or BC date."""
    names = [f"c{i}" for i in range(table.num_columns)]  # a result may repeat a column's name
    renamed = pa.schema([f.with_name(n) for f, n in zip(table.schema, names, strict=True)])
    con = scratch_connection()
    try:
        con.register("__qengine_shown", pa.Table.from_arrays(table.columns, schema=renamed))
        source = restoring_query("__qengine_shown", renamed) or "SELECT * FROM __qengine_shown"
        texts = ", ".join(f"CAST({identifier(n)} AS VARCHAR)" for n in names)
        return con.execute(f"SELECT {texts} FROM ({source})").fetchall() if names else [()] * table.num_rows
    finally:
        con.close()
