"""Query results on the terminal or in a file: a table, CSV, JSON or Parquet."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

import qengine
from qengine.api.json_rows import json_rows
from qengine.api.table_text import print_table


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
