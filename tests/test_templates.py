"""Execution templates (``planner.templates``): a query planned once is filled in again for
other constants, and every answer still equals DuckDB's; a change to the catalog, or a constant
the plan depended on, makes it plan afresh."""

from __future__ import annotations

import datetime as dt
import decimal

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import qengine
from tests.conftest import assert_same, plan_lines

# (SQL with parameters, three sets of values): every set plans to the same shape
SHAPES = [
    ("SELECT count(*), sum(qty) FROM sales WHERE qty > ? AND store_id = ?", [[10, 3], [90, 1], [-5, 7]]),
    ("SELECT item_id, count(*) AS n FROM sales WHERE sold_date BETWEEN ? AND ? GROUP BY item_id ORDER BY n DESC, item_id LIMIT 5",
     [[dt.date(2020, 1, 1), dt.date(2020, 3, 1)], [dt.date(2021, 6, 1), dt.date(2021, 6, 30)], [dt.date(2030, 1, 1), dt.date(2030, 2, 1)]]),
    ("SELECT c.city, sum(s.amount) FROM sales s JOIN customers c ON s.cust_id = c.cust_id AND c.segment = ? "
     "WHERE s.note IN (?, ?) GROUP BY c.city ORDER BY 1", [["retail", "promo", "gift"], ["gov", "bulk", "bulk"], ["none", "x", "y"]]),
    ("SELECT brand, count(*) FROM items WHERE category <> ? GROUP BY brand HAVING count(*) >= ? ORDER BY brand",
     [["Books", 10], ["Music", 15], ["Home", 0]]),
    ("SELECT count(*) FROM sales WHERE item_id IN (SELECT item_id FROM items WHERE list_price < ?) AND qty <> ?",
     [[decimal.Decimal("20.00"), 3], [decimal.Decimal("85.50"), 50], [decimal.Decimal("1.00"), 0]]),
    ("SELECT sale_id, amount FROM sales WHERE amount >= ? ORDER BY amount DESC, sale_id LIMIT 3", [[100.5], [0.25], [1e9]]),
    ("SELECT customers.name FROM customers WHERE cust_id = -? OR cust_id = ? ORDER BY 1", [[-3, 4], [-400, 0], [1, 499]]),
]


@pytest.mark.parametrize(("sql", "value_sets"), SHAPES)
def test_a_shape_is_planned_once_and_answers_every_set_of_values(default_engine, oracle, sql, value_sets) -> None:
    templates = default_engine.session.templates
    assert_same(default_engine, oracle, sql, value_sets[0])
    before = templates.reused
    for values in value_sets[1:]:
        assert_same(default_engine, oracle, sql, values)
    assert templates.reused == before + len(value_sets) - 1


def test_literals_written_in_the_text_share_one_template(default_engine, oracle) -> None:
    templates = default_engine.session.templates
    assert_same(default_engine, oracle, "SELECT count(*) FROM sales WHERE qty = 17 AND note = 'gift'")
    before = templates.reused
    for qty, note in ((3, "promo"), (99, "bulk"), (1000, "none")):
        assert_same(default_engine, oracle, f"SELECT count(*) FROM sales WHERE qty = {qty} AND note = '{note}'")
    assert templates.reused == before + 3


def test_a_union_branch_dropped_for_one_constant_is_not_dropped_for_another(default_engine, oracle) -> None:
    """The planner folds ``'c' = 's'`` to FALSE and reads one branch only: that plan holds for
    's' alone, so 'c' plans again rather than reusing it (which would answer 0 rows)."""
    sql = (
        "SELECT kind, count(*), sum(id) FROM (SELECT 's' AS kind, sale_id AS id FROM sales UNION ALL "
        "SELECT 'c' AS kind, cust_id AS id FROM customers) WHERE kind = ? GROUP BY kind"
    )
    templates = default_engine.session.templates
    before = templates.reused
    for kind in ("s", "c", "x", "c"):
        assert_same(default_engine, oracle, sql, [kind])
    assert templates.reused == before + 1  # only the second 'c'


def test_numbers_and_strings_of_the_same_text_plan_apart(default_engine, oracle) -> None:
    assert_same(default_engine, oracle, "SELECT count(*) FROM items WHERE item_id = 5")
    assert_same(default_engine, oracle, "SELECT count(*) FROM items WHERE item_id = '7'")
    assert_same(default_engine, oracle, "SELECT count(*) FROM items WHERE brand = '7'")


def test_decimal_parameters_of_other_scales(default_engine, oracle) -> None:
    sql = "SELECT count(*), min(price) FROM sales WHERE price > ?"
    for value in (decimal.Decimal("100.5"), decimal.Decimal("100.25"), decimal.Decimal("100.255"), decimal.Decimal("7")):
        assert_same(default_engine, oracle, sql, [value])


def test_a_result_column_named_after_its_expression_names_this_runs_constant(default_engine, oracle) -> None:
    for value in (5, 6):
        got = default_engine.execute(f"SELECT item_id = {value}, count(*) FROM items GROUP BY 1 ORDER BY 1")
        expected = oracle.execute(f"SELECT item_id = {value}, count(*) FROM items GROUP BY 1 ORDER BY 1")
        assert [d[0] for d in got.description] == [d[0] for d in expected.description]
        assert got.fetchall() == expected.fetchall()


def test_explain_and_errors_show_the_constants_as_written(default_engine) -> None:
    default_engine.execute("SELECT count(*) FROM sales WHERE qty = 41").fetchall()
    lines = "\n".join(plan_lines(default_engine, "SELECT count(*) FROM sales WHERE qty = 43"))
    assert "43" in lines and "slot" not in lines.lower()
    with pytest.raises(qengine.ProgrammingError) as info:
        default_engine.execute("SELECT count(*) FROM sales WHERE no_such_column = 43")
    assert "no_such_column" in str(info.value) and "slot" not in str(info.value).lower()
    with pytest.raises(qengine.Error) as info:
        default_engine.execute("SELECT count(*) FROM sales WHERE sold_date = 'not a date'")
    assert "not a date" in str(info.value) and "slot" not in str(info.value).lower()


@pytest.fixture
def own_engine(tmp_path):
    con = qengine.connect(workers=2, split_size="64KB", allowed_roots=[str(tmp_path)])
    try:
        yield con
    finally:
        con.close()


def test_a_re_registered_table_is_planned_again(own_engine, tmp_path) -> None:
    """Same name, same query text, other data and another type: the plan made for the first
    file must not be reused."""
    first, second = tmp_path / "first.parquet", tmp_path / "second.parquet"
    pq.write_table(pa.table({"x": list(range(100)), "g": [i % 3 for i in range(100)]}), first)
    pq.write_table(pa.table({"x": [i / 2 for i in range(5000)], "g": [str(i % 4) for i in range(5000)]}), second, row_group_size=500)
    sql = "SELECT g, count(*), sum(x) FROM t WHERE x > ? GROUP BY g ORDER BY g"
    oracle = duckdb.connect()
    for path in (first, second, first):
        own_engine.register_parquet("t", str(path))
        oracle.execute(f"CREATE OR REPLACE VIEW t AS SELECT * FROM read_parquet('{path}')")
        for value in (10, 40):
            assert_same(own_engine, oracle, sql, [value])


def test_views_and_inserts_change_what_a_shape_reads(own_engine, tmp_path) -> None:
    path = tmp_path / "base.parquet"
    pq.write_table(pa.table({"x": list(range(1000))}), path)
    own_engine.register_parquet("base", str(path))
    oracle = duckdb.connect()
    oracle.execute(f"CREATE VIEW base AS SELECT * FROM read_parquet('{path}')")
    for bound in (100, 900):
        view = f"CREATE OR REPLACE VIEW v AS SELECT x FROM base WHERE x < {bound}"
        own_engine.execute(view)
        oracle.execute(view)
        assert_same(own_engine, oracle, "SELECT count(*), sum(x) FROM v WHERE x > ?", [50])
    for statement in ("CREATE TABLE s AS SELECT x FROM base WHERE x < 10", "INSERT INTO s SELECT x FROM base WHERE x > 990",
                      "INSERT INTO s VALUES (5000)"):
        own_engine.execute(statement)
        oracle.execute(statement)
        assert_same(own_engine, oracle, "SELECT count(*), sum(x) FROM s WHERE x > ?", [3])


def test_a_text_run_again_skips_the_parser(default_engine, oracle, monkeypatch) -> None:
    """Once a text has run, the same text with new parameters of the same types is filled
    straight into its template; parameters that went anywhere but a comparison must match."""
    import qengine.api.session as session_module

    sql = "SELECT note, count(*) FROM sales WHERE qty BETWEEN ? AND ? AND price > ? GROUP BY note ORDER BY note NULLS FIRST LIMIT ?"
    assert_same(default_engine, oracle, sql, [1, 20, decimal.Decimal("10.50"), 3])
    parsed = []
    real_parse = session_module.parse
    monkeypatch.setattr(session_module, "parse", lambda *a: parsed.append(a) or real_parse(*a))
    assert_same(default_engine, oracle, sql, [30, 99, decimal.Decimal("99.5"), 3])  # another scale: parsed
    assert len(parsed) == 1
    assert_same(default_engine, oracle, sql, [5, 60, decimal.Decimal("0.75"), 3])
    assert_same(default_engine, oracle, sql, [-10, 5, decimal.Decimal("400.00"), 3])
    assert len(parsed) == 1
    assert_same(default_engine, oracle, sql, [5, 60, decimal.Decimal("0.75"), 2])  # LIMIT changed: parsed
    assert len(parsed) == 2
    for values in ([3, -3], [-7, 7], [0, 0]):  # a parameter negated in the text is not filled in
        assert_same(default_engine, oracle, "SELECT count(*) FROM sales WHERE qty > -? AND store_id <> ?", values)
    assert len(parsed) == 5


def test_a_parameter_used_twice(default_engine, oracle) -> None:
    sql = "SELECT sale_id FROM sales WHERE qty = $1 ORDER BY sale_id LIMIT $1"
    for value in (4, 7, 4, 2):
        assert_same(default_engine, oracle, sql, [value])


def test_equal_constants_share_a_slot_and_must_stay_equal(default_engine, oracle) -> None:
    """Two subqueries with the same constant are one expression to the planner; with two
    different constants they are two, and the first plan must not answer for them."""
    sql = ("SELECT (SELECT count(*) FROM sales WHERE qty = {a}) AS x, (SELECT sum(qty) FROM sales WHERE qty = {b}) AS y, "
           "(SELECT max(amount) FROM sales WHERE qty = {c}) AS z")
    for a, b, c in ((5, 5, 5), (6, 6, 6), (5, 7, 5), (8, 8, 9), (9, 9, 9)):
        assert_same(default_engine, oracle, sql.format(a=a, b=b, c=c))
    params = "SELECT count(*) FROM sales WHERE qty = ? OR store_id = ?"
    for values in ([3, 3], [4, 4], [4, 5], [6, 6], [7, 2]):
        assert_same(default_engine, oracle, params, values)


def test_a_negative_constant_in_a_text_run_again(default_engine, oracle) -> None:
    for _ in range(3):
        assert_same(default_engine, oracle, "SELECT count(*) FROM sales WHERE qty > -1 AND store_id NOT IN (-3, 2)")


def test_a_baked_parameter_must_be_the_same_value_not_an_equal_one(default_engine, oracle) -> None:
    """A parameter outside a comparison is baked into the plan and must bind as before; it was
    compared with Python's ``==``, for which -0.0 is 0.0 and two instants an hour apart (one
    wall time, ``fold`` apart) are one: the first run's value answered for the second."""
    from zoneinfo import ZoneInfo

    for values in ([0.0], [-0.0], [0.0]):
        assert_same(default_engine, oracle, "SELECT 1 / ? AS p", values)
    first = dt.datetime(2020, 11, 1, 1, 30, tzinfo=ZoneInfo("America/New_York"))
    for stamp in (first, first.replace(fold=1), first):  # DuckDB binds these only with pytz, which is not installed
        assert default_engine.execute("SELECT epoch(?) AS p", [stamp]).fetchall() == [(stamp.timestamp(),)]
    assert first.replace(fold=1).timestamp() == first.timestamp() + 3600


@pytest.mark.parametrize(("sql", "values"), [
    # sqlglot takes 1 off an index of a list or of what it does not know, and adds it back only
    # for those: bound to a string, the parameter read the character before
    ("SELECT ?[1] AS c", ["abc"]),
    ("SELECT ?[2] AS c, ?[1:2] AS s", ["abc", "abcd"]),
    ("SELECT ?[?] AS c", ["abc", 3]),
    ("SELECT ?[2] AS c", [[10, 20, 30]]),
    ("SELECT ?[1] AS c", [None]),  # DuckDB cannot parse NULL[1]
])
def test_an_indexed_parameter(default_engine, oracle, sql: str, values: list) -> None:
    assert_same(default_engine, oracle, sql, values)


def test_a_result_column_named_after_a_parameter_names_it_as_written(default_engine, oracle) -> None:
    """Texts differing only in how a value is written shared one template, and the first run's
    names: ``$a + qty`` after ``$b + qty`` was named ``($b + qty)``, ``6 + qty`` too; a compared
    parameter was named by its value, ``(qty = 1)`` for ``qty = ?``."""
    runs = [
        ("SELECT $b + qty FROM sales ORDER BY 1 LIMIT 2", {"b": 6}),
        ("SELECT $a + qty FROM sales ORDER BY 1 LIMIT 2", {"a": 6}),
        ("SELECT ? + qty FROM sales ORDER BY 1 LIMIT 2", [6]),
        ("SELECT 6 + qty FROM sales ORDER BY 1 LIMIT 2", None),
        ("SELECT qty = ? FROM sales ORDER BY 1 LIMIT 2", [1]),
        ("SELECT qty = ? FROM sales ORDER BY 1 LIMIT 2", [2]),
        ("SELECT qty > $lo FROM sales ORDER BY 1 LIMIT 2", {"lo": 0}),
        ("SELECT qty > $hi FROM sales ORDER BY 1 LIMIT 2", {"hi": 0}),
    ]
    for sql, params in runs:
        got = [d[0] for d in default_engine.execute(sql, params).description]
        expected = [d[0] for d in (oracle.execute(sql, params) if params is not None else oracle.execute(sql)).description]
        assert got == expected, sql
