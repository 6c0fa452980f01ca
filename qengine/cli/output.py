"""Query results on the terminal or in a file: a table, CSV, JSON or Parquet."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

import qengine
from qengine.api.json_rows import json_rows
from qengine.catalog.types import type_code


def write_result(table: pa.Table, fmt: str, output: str | None) -> None:
    if fmt == "parquet":
        if not output:
            raise qengine.ProgrammingError("--format parquet needs --output FILE")
        import pyarrow.parquet as pq

        pq.write_table(table, output)
        return
    with _open_output(output) as out:
        if fmt == "csv":
            import pyarrow.csv as pacsv

            buf = pa.BufferOutputStream()
            pacsv.write_csv(table, buf)
            out.write(buf.getvalue().to_pybytes().decode())
        elif fmt == "json":  # as DuckDB writes rows: decimals as numbers, dates as text
            out.write("[" + ", ".join(json_rows(table)) + "]\n")
        else:
            print_table(table, out)


@contextlib.contextmanager
def _open_output(output: str | None) -> Iterator[Any]:
    if output:
        with open(output, "w") as f:
            yield f
    else:
        yield sys.stdout


def print_table(table: pa.Table, out: Any, total: int | None = None) -> None:
    """``table`` as a box table, at most 1000 rows of it; ``total`` is the rows of the whole
    result when ``table`` holds only its first ones."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console(file=out, width=None if out.isatty() else 250)
    shown = table.slice(0, 1000)
    view = Table(show_header=True, header_style="bold")
    for f in table.schema:
        view.add_column(Text(f"{f.name}\n{type_code(f.type).lower()}"), justify="right" if type_code(f.type) == qengine.NUMBER else "left")
    for row in zip(*[c.to_pylist() for c in shown.columns], strict=True):
        view.add_row(*[Text("NULL" if v is None else str(v)) for v in row])
    console.print(view)
    total = table.num_rows if total is None else total
    more = f" (first {shown.num_rows} shown)" if shown.num_rows < total else ""
    console.print(f"{total} row(s){more}")
