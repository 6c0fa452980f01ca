"""The fuzzer's tables: a few TPC-DS SF 0.01 tables plus tables of edge-case values, as Parquet.

Every table is written with small row groups (and some as several files), so that a scan with a
small ``split_size`` runs as several tasks and the distributed paths (partial aggregates,
shuffles, broadcasts) are exercised even on this little data. The data is deterministic and built
once into the cache directory; a manifest records each column's type, join domain and distinct
count, which the generator uses to keep joins type-correct and their results small.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import os
import shutil
import tempfile
from dataclasses import dataclass

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from qengine.cli.common import cache_dir

# Bump when the tables change, so a cache built by an older fuzzer is rebuilt rather than reused.
VERSION = 2

INT, FLOAT, DEC, STR, DATE, BOOL = "int", "float", "dec", "str", "date", "bool"


@dataclass(frozen=True)
class Column:
    """A column as the generator sees it.

    ``domain`` groups columns whose values overlap, so that joining on them matches rows;
    ``safe`` is False for columns holding int64 extremes, on which arithmetic would overflow;
    ``samples`` are values the column holds, so that predicates on it select some rows.
    """

    name: str
    type: str
    domain: str
    ndv: int = 1
    safe: bool = True
    samples: tuple = ()


@dataclass(frozen=True)
class Table:
    """A Parquet directory with its columns, row count and the columns that make a row unique."""

    name: str
    path: str
    rows: int
    columns: tuple[Column, ...]
    key: tuple[str, ...]


# name -> (columns as (name, type, domain[, safe]), unique key)
_SPECS: dict[str, tuple[list[tuple], tuple[str, ...]]] = {
    "store_sales": (
        [
            ("ss_sold_date_sk", INT, "date_sk"),
            ("ss_item_sk", INT, "item_sk"),
            ("ss_customer_sk", INT, "cust_sk"),
            ("ss_store_sk", INT, "store_sk"),
            ("ss_ticket_number", INT, "ticket"),
            ("ss_quantity", INT, "small"),
            ("ss_sales_price", DEC, "price"),
            ("ss_net_profit", DEC, "profit"),
        ],
        ("ss_item_sk", "ss_ticket_number"),
    ),
    "item": (
        [
            ("i_item_sk", INT, "item_sk"),
            ("i_item_id", STR, "item_id"),
            ("i_brand", STR, "brand"),
            ("i_category", STR, "label"),
            ("i_current_price", DEC, "price"),
            ("i_manufact_id", INT, "manufact"),
        ],
        ("i_item_sk",),
    ),
    "date_dim": (
        [
            ("d_date_sk", INT, "date_sk"),
            ("d_date", DATE, "date"),
            ("d_year", INT, "year"),
            ("d_moy", INT, "small"),
            ("d_dow", INT, "small"),
            ("d_day_name", STR, "day_name"),
            ("d_weekend", STR, "flag"),
        ],
        ("d_date_sk",),
    ),
    "customer": (
        [
            ("c_customer_sk", INT, "cust_sk"),
            ("c_customer_id", STR, "cust_id"),
            ("c_first_name", STR, "name"),
            ("c_birth_year", INT, "year"),
            ("c_birth_country", STR, "country"),
            ("c_preferred_cust_flag", STR, "flag"),
        ],
        ("c_customer_sk",),
    ),
    "store": (
        [
            ("s_store_sk", INT, "store_sk"),
            ("s_store_name", STR, "name"),
            ("s_state", STR, "state"),
            ("s_number_employees", INT, "small"),
            ("s_tax_percentage", DEC, "price"),
        ],
        ("s_store_sk",),
    ),
    "nums": (
        [
            ("rid", INT, "rid"),
            ("k", INT, "small"),
            ("g", STR, "label"),
            ("i", INT, "big", False),
            ("f", FLOAT, "float"),
            ("d", DEC, "price"),
            ("dt", DATE, "date"),
            ("b", BOOL, "bool"),
            ("s", STR, "text"),
        ],
        ("rid",),
    ),
    "dups": (
        [
            ("rid", INT, "rid"),
            ("k", INT, "small"),
            ("g", STR, "label"),
            ("i", INT, "big", False),
            ("f", FLOAT, "float"),
            ("d", DEC, "price"),
            ("dt", DATE, "date"),
        ],
        ("rid",),
    ),
    "tiny": (
        [
            ("rid", INT, "rid"),
            ("k", INT, "small"),
            ("g", STR, "label"),
            ("f", FLOAT, "float"),
            ("dt", DATE, "date"),
        ],
        ("rid",),
    ),
    "empty": (
        [
            ("rid", INT, "rid"),
            ("k", INT, "small"),
            ("g", STR, "label"),
            ("f", FLOAT, "float"),
        ],
        ("rid",),
    ),
}

# TPC-DS projections: store_sales is sampled (a quarter of the tickets) and date_dim cut to the
# years the sales fall in, so that joins stay small and fast.
_TPCDS_FILTERS = {"store_sales": "ss_ticket_number % 4 = 0", "date_dim": "d_year BETWEEN 1998 AND 2003"}
SAMPLES = 8  # sample values kept per column
_ROW_GROUP_ROWS = {"store_sales": 600, "date_dim": 300, "customer": 200, "item": 60, "store": 10}


def data_dir() -> str:
    """Where the fuzzer's tables live: under the cache directory, never in git."""
    return os.path.join(cache_dir(), "fuzz", f"data-v{VERSION}")


def build(root: str | None = None) -> dict[str, Table]:
    """Build the tables under ``root`` (default :func:`data_dir`) unless already there; return them by name.

    The tables are written to a temporary directory and renamed into place, so a concurrent or
    interrupted build never leaves a half-written cache that a later run would trust.
    """
    root = root or data_dir()
    manifest = os.path.join(root, "manifest.json")
    if not os.path.exists(manifest):
        parent = os.path.dirname(root)
        os.makedirs(parent, exist_ok=True)
        tmp = tempfile.mkdtemp(prefix="build-", dir=parent)
        try:
            _write_tables(tmp)
            try:
                os.rename(tmp, root)
            except OSError:  # another process built it first
                shutil.rmtree(tmp)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return load(root)


def load(root: str) -> dict[str, Table]:
    """The tables recorded in ``root``'s manifest."""
    with open(os.path.join(root, "manifest.json")) as f:
        stats = json.load(f)
    tables = {}
    for name, (cols, key) in _SPECS.items():
        columns = tuple(
            Column(c[0], c[1], c[2], max(1, stats[name]["ndv"][c[0]]), c[3] if len(c) > 3 else True, _parse(c[1], stats[name]["samples"][c[0]]))
            for c in cols
        )
        tables[name] = Table(name, os.path.join(root, name), stats[name]["rows"], columns, key)
    return tables


def _write_tables(root: str) -> None:
    from tpcds.gen import generate

    with tempfile.TemporaryDirectory(prefix="qengine-fuzz-tpcds-") as raw:
        generate(0.01, raw, force=True)
        con = duckdb.connect()
        try:
            for name in ("store_sales", "item", "date_dim", "customer", "store"):
                cols = ", ".join(c[0] for c in _SPECS[name][0])
                where = f"WHERE {_TPCDS_FILTERS[name]}" if name in _TPCDS_FILTERS else ""
                table = con.execute(f"SELECT {cols} FROM read_parquet('{raw}/{name}/*.parquet') {where} ORDER BY ALL").to_arrow_table()
                _write(table, os.path.join(root, name), 1, _ROW_GROUP_ROWS[name])
        finally:
            con.close()
    for name, (table, files, row_group) in _edge_tables().items():
        _write(table, os.path.join(root, name), files, row_group)
    _write_manifest(root)


def _write(table: pa.Table, directory: str, files: int, row_group: int) -> None:
    """``table`` as ``files`` Parquet files of ``row_group`` rows per row group.

    pyarrow rather than DuckDB's COPY writes them: DuckDB rounds row groups up to thousands of
    rows, too many for these tables to split into several scan tasks.
    """
    os.makedirs(directory)
    per_file = max(1, -(-table.num_rows // files))
    for i in range(files):
        pq.write_table(table.slice(i * per_file, per_file), os.path.join(directory, f"part-{i}.parquet"), row_group_size=row_group)


def _parse(type_: str, values: list[str]) -> tuple:
    """Sample values from the manifest's text back into Python values of the column's type."""
    parse = {INT: int, FLOAT: float, DEC: decimal.Decimal, DATE: dt.date.fromisoformat, BOOL: lambda v: v == "true"}.get(type_, str)
    return tuple(dict.fromkeys(parse(v) for v in values))


def _write_manifest(root: str) -> None:
    con = duckdb.connect()
    try:
        stats = {}
        for name, (cols, _) in _SPECS.items():
            names = [c[0] for c in cols]
            counts = ", ".join(f'count(DISTINCT "{c}")' for c in names)
            row = con.execute(f"SELECT count(*), {counts} FROM read_parquet('{root}/{name}/*.parquet')").fetchone()
            samples = {}
            for c in names:
                values = [v for (v,) in con.execute(f'SELECT DISTINCT CAST("{c}" AS VARCHAR) AS v FROM read_parquet(\'{root}/{name}/*.parquet\') WHERE v IS NOT NULL ORDER BY v').fetchall()]
                step = max(1, len(values) // SAMPLES)
                samples[c] = values[::step][:SAMPLES] + values[-1:]
            stats[name] = {"rows": row[0], "ndv": dict(zip(names, row[1:], strict=True)), "samples": samples}
    finally:
        con.close()
    with open(os.path.join(root, "manifest.json"), "w") as f:
        json.dump({"version": VERSION, **stats}, f, indent=1)


INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
_LABELS = ["a", "b", "B", "", " ", "ü", "Books", "Music", None]
_TEXTS = ["", " ", "abc", "ab%", "a_b", "it's", "ÄÖÜ", "x" * 40, "NULL", None]
_SPECIAL_FLOATS = [float("nan"), -0.0, 0.0, float("inf"), float("-inf"), None, 1.5, -2.25]
_SPECIAL_INTS = [INT64_MIN, INT64_MAX, 0, -1, 1, None]
_SPECIAL_DATES = [dt.date(1970, 1, 1), dt.date(1969, 12, 31), dt.date(2000, 2, 29), dt.date(1900, 1, 1), None]


def _pick(rng: np.random.Generator, pool: list, n: int) -> list:
    return [pool[i] for i in rng.integers(0, len(pool), n)]


def _mixed(rng: np.random.Generator, n: int, special: list, regular: list, share: float) -> list:
    """``regular`` values with a ``share`` of them replaced by edge values from ``special``."""
    out = list(regular)
    for i in np.flatnonzero(rng.random(n) < share):
        out[i] = special[rng.integers(0, len(special))]
    return out


def _edge_columns(rng: np.random.Generator, n: int, k_range: int) -> dict[str, pa.Array]:
    base = dt.date(1998, 1, 1)
    k = [None if rng.random() < 0.1 else int(v) for v in rng.integers(0, k_range, n)]
    # multiples of 2.5, so that float join keys and groups repeat
    floats = _mixed(rng, n, _SPECIAL_FLOATS, [float(v) * 2.5 for v in np.round(rng.normal(0, 40, n))], 0.25)
    ints = _mixed(rng, n, _SPECIAL_INTS, [int(v) for v in rng.integers(-1000, 1000, n)], 0.15)
    decs = [None if rng.random() < 0.08 else decimal.Decimal(int(v)) / 100 for v in rng.integers(-5000, 5000, n)]
    dates = _mixed(rng, n, _SPECIAL_DATES, [base + dt.timedelta(days=int(v)) for v in rng.integers(0, 2000, n)], 0.1)
    return {
        "rid": pa.array(np.arange(n, dtype=np.int64)),
        "k": pa.array(k, pa.int32()),
        "g": pa.array(_pick(rng, _LABELS, n), pa.string()),
        "i": pa.array(ints, pa.int64()),
        "f": pa.array(floats, pa.float64()),
        "d": pa.array(decs, pa.decimal128(12, 2)),
        "dt": pa.array(dates, pa.date32()),
    }


def _edge_tables() -> dict[str, tuple[pa.Table, int, int]]:
    """name -> (table, files, rows per row group) for the hand-made tables."""
    rng = np.random.default_rng(20260101)
    nums = _edge_columns(rng, 2000, 20)
    nums["b"] = pa.array(_pick(rng, [True, False, None], 2000), pa.bool_())
    nums["s"] = pa.array(_pick(rng, _TEXTS, 2000), pa.string())
    dups = _edge_columns(rng, 600, 30)
    dups["d"] = dups["d"].cast(pa.decimal128(8, 3))  # another decimal type, to join across types
    tiny = _edge_columns(rng, 12, 6)
    tables = {
        "nums": (pa.table(nums), 2, 250),
        "dups": (pa.table(dups), 1, 100),
        "tiny": (pa.table({c: tiny[c] for c in ("rid", "k", "g", "f", "dt")}), 1, 12),
        "empty": (pa.table({c: nums[c].slice(0, 0) for c in ("rid", "k", "g", "f")}), 1, 100),
    }
    return tables
