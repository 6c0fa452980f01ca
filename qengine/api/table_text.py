"""A result as a box table on a terminal: what the CLI prints and a relation's ``show()``."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from qengine.catalog.types import NUMBER, column_type

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
    for row in zip(*[c.to_pylist() for c in shown.columns], strict=True):
        view.add_row(*[Text("NULL" if v is None else str(v)) for v in row])
    console.print(view)
    total = table.num_rows if total is None else total
    more = f" (first {shown.num_rows} shown)" if shown.num_rows < total else ""
    console.print(f"{total} row(s){more}")
