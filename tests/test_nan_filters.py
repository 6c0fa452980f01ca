"""NaN and -0.0 in filters and join keys, against DuckDB: DuckDB orders NaN above every number
and equal to itself, and takes -0.0 for 0.0, while the filters DuckDB 1.5.5 pushes into Arrow
scans use IEEE comparisons, and Arrow's ``is_in`` hashes -0.0 apart from 0.0.
qengine's fragments read exchanged data as Arrow, so without the workaround in
``sandbox.pool.filters_mishandle`` these queries lose or gain rows."""

from __future__ import annotations

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from qengine.sandbox.pool import filters_mishandle
from tests.conftest import assert_same, duckdb_over, engine_over

NAN = float("nan")


@pytest.fixture(scope="module")
def nan_tables(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """big: 3,000 rows in 200-row groups, ``d`` NaN in about 5%; big2: ``d`` reversed, two row
    groups; small: 1, NaN and NULL."""
    root = tmp_path_factory.mktemp("nan")
    values = [NAN if i % 19 == 0 else float(i % 97) for i in range(3000)]
    paths = {name: str(root / f"{name}.parquet") for name in ("big", "big2", "small")}
    pq.write_table(pa.table({"id": range(3000), "d": values}), paths["big"], row_group_size=200)
    pq.write_table(pa.table({"id": range(3000), "d": values[::-1]}), paths["big2"], row_group_size=1500)
    pq.write_table(pa.table({"id": [1, 2, 3], "b": [1.0, NAN, None]}), paths["small"])
    paths["zeros"] = str(root / "zeros.parquet")
    pq.write_table(pa.table({"id": range(8), "x": [-0.0, 0.0, 1.0, -0.0, 2.0, -0.0, 0.0, 3.0]}), paths["zeros"])
    return paths


@pytest.fixture(scope="module", params=["default", "bc0"])
def nan_engine(request: pytest.FixtureRequest, nan_tables: dict[str, str]):
    con = engine_over(nan_tables, "64KB", **({"broadcast_threshold": 0} if request.param == "bc0" else {}))
    try:
        con.register("mem", pa.table({"b": [1.0, NAN, None, 2.0]}))
        yield con
    finally:
        con.close()


@pytest.fixture(scope="module")
def nan_oracle(nan_tables: dict[str, str]) -> duckdb.DuckDBPyConnection:
    con = duckdb_over(nan_tables)
    con.execute("CREATE TABLE mem AS SELECT * FROM (VALUES (1.0::DOUBLE), ('nan'::DOUBLE), (NULL), (2.0)) t(b)")
    return con


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT count(*) FROM big a JOIN big2 b ON a.d = b.d",
        "SELECT count(*) FROM big a JOIN big2 b ON a.id = b.id WHERE a.d >= (SELECT -500)",
        "SELECT a.d, count(*) FROM big a JOIN big2 b ON a.d = b.d GROUP BY a.d",
        "SELECT count(*) FROM big a LEFT JOIN big2 b ON a.d = b.d WHERE b.id IS NULL",
        "SELECT count(*) FROM big WHERE d IN (SELECT d FROM big2 WHERE id < 500)",
        "SELECT count(*) FROM big a JOIN small s ON a.d = s.b",
    ],
)
def test_nan_join_keys_match_duckdb(nan_engine, nan_oracle, sql: str) -> None:
    assert_same(nan_engine, nan_oracle, sql)


@pytest.mark.parametrize("op", ["<", "<=", ">", ">=", "=", "<>"])
@pytest.mark.parametrize("constant", ["1.0", "'nan'::DOUBLE"])
def test_nan_comparisons_on_arrow_input(nan_engine, nan_oracle, op: str, constant: str) -> None:
    """``mem`` is a session table, scanned as Arrow: the filter reaches an Arrow scan."""
    assert_same(nan_engine, nan_oracle, f"SELECT b FROM mem WHERE b {op} {constant}")


@pytest.mark.parametrize("sql", [
    "SELECT id FROM zeros WHERE x IN (0.0, 2.0)",
    "SELECT id FROM zeros WHERE x IN (0, 2)",
    "SELECT z.id FROM zeros z WHERE z.x IN (SELECT CAST(id - 1 AS DOUBLE) FROM small)",
    "SELECT z.id, s.id FROM zeros z JOIN small s ON z.x = CAST(s.id - 1 AS DOUBLE)",
])
def test_negative_zero_is_zero_in_filters_and_join_keys(nan_engine, nan_oracle, sql: str) -> None:
    """Rows holding -0.0 were dropped by an IN list and by a join's key filter pushed into the
    Arrow scan (3 of 6 rows for ``x IN (0.0, 2.0)``)."""
    assert_same(nan_engine, nan_oracle, sql)


def test_only_inputs_that_would_filter_wrongly_are_copied() -> None:
    plain = pa.table({"d": [1.0, 2.0, None], "i": [1, 2, 3]})
    assert not filters_mishandle(plain, "SELECT * FROM t WHERE d > 1")
    assert filters_mishandle(pa.table({"d": [1.0, NAN]}), "SELECT * FROM t")
    assert filters_mishandle(plain, "SELECT * FROM t WHERE d <= 'NaN'::DOUBLE")
    assert not filters_mishandle(pa.table({"i": [1, 2]}), "SELECT * FROM t WHERE i <= 'nan'::DOUBLE")
    assert filters_mishandle(pa.table({"d": [1.0, -0.0, None]}), "SELECT * FROM t")
    assert not filters_mishandle(pa.table({"d": [1.0, 0.0, None]}), "SELECT * FROM t")
