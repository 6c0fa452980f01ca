"""Query results on the terminal or in a file: a table, CSV, JSON or Parquet."""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

import qengine
from qengine.api.json_rows import json_rows
from qengine.api.table_text import print_table
from qengine.errors import first_line
from qengine.planner.frontend import deduplicated
from qengine.sandbox.carried_types import restoring_query
from qengine.sandbox.quoting import string_literal


def write_result(table: pa.Table, fmt: str, output: str | None) -> None:
    """Write ``table`` as ``fmt``. CSV and Parquet are written by DuckDB (in this process,
    over the result alone), so that their text is DuckDB's: lists as ``[1, 2]``, intervals as
    ``1 day``, doubles as ``1.0``; pyarrow's CSV writer refused nested and interval columns.
    A file that cannot be written is an OperationalError, not a traceback."""
    if fmt == "parquet" and not output:
        raise qengine.ProgrammingError("--format parquet needs --output FILE")
    if fmt in ("csv", "parquet"):
        _copy(table, fmt, output)
        return
    try:
        with _open_output(output) as out:
            if fmt == "json":  # as DuckDB writes rows: decimals as numbers, dates as text
                out.write("[" + ", ".join(json_rows(table)) + "]\n")
            else:
                print_table(table, out)
    except OSError as e:
        raise qengine.OperationalError(f"cannot write {output}: {e.strerror or e}") from e


def _copy(table: pa.Table, fmt: str, output: str | None) -> None:
    """DuckDB's ``COPY`` of ``table`` to ``output``; for standard output, to a temporary file
    whose bytes are then written there (DuckDB opens a path anew, which truncated a file the
    shell's ``>>`` appended to, and each statement's result overwrote the one before)."""
    import duckdb

    names = deduplicated(table.column_names)  # DuckDB's own names for a repeated one: k, k_1
    options = "FORMAT csv, HEADER" if fmt == "csv" else "FORMAT parquet"
    con = duckdb.connect()
    try:
        renamed = pa.schema([f.with_name(n) for f, n in zip(table.schema, names, strict=True)])
        con.register("result", pa.Table.from_arrays(table.columns, schema=renamed))
        # the DuckDB types the result carries as tags (a UUID, JSON, a HUGEINT) written as such
        restoring = restoring_query("result", renamed)
        source = f"({restoring})" if restoring else "result"
        if output:
            con.execute(f"COPY {source} TO {string_literal(output)} ({options})")
            return
        with tempfile.TemporaryDirectory(prefix="qengine-out-") as scratch:
            path = os.path.join(scratch, f"result.{fmt}")
            con.execute(f"COPY {source} TO {string_literal(path)} ({options})")
            sys.stdout.flush()
            with open(path, "rb") as f:
                binary = getattr(sys.stdout, "buffer", None)  # None: a text stream put in its place
                if binary is not None:
                    shutil.copyfileobj(f, binary)
                    binary.flush()
                else:
                    sys.stdout.write(f.read().decode("utf-8", errors="replace"))
    except duckdb.Error as e:
        raise qengine.OperationalError(f"cannot write {fmt} to {output or 'standard output'}: {first_line(str(e))}") from e
    finally:
        con.close()


@contextlib.contextmanager
def _open_output(output: str | None) -> Iterator[Any]:
    if output:
        with open(output, "w") as f:
            yield f
    else:
        yield sys.stdout
