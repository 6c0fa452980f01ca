"""Every error message in the user's terms: a corpus of bad inputs, each with the class it must
raise and the wording it must have.

A message names what the user wrote (their tables, columns, functions, the line and column of
a syntax error) and says what was wrong; it never shows qengine's or sqlglot's insides (token
or class reprs, internal column names like c0, placeholder tables like __sq0, tracebacks, the
SQL qengine sent to DuckDB) and is one line, as it must be to cross the wire from a remote
coordinator. Every plain-SQL input is also checked against DuckDB: what DuckDB answers is not a
bad input, so it has no place here (unless qengine refuses it as unsupported, by name).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

import pytest

import qengine
from tests.conftest import assert_same

SYNTAX = qengine.ProgrammingError
P = qengine.ProgrammingError
D = qengine.DataError
N = qengine.NotSupportedError

CSV_ROWS = 300_000  # past the block Arrow infers a CSV file's types from


@dataclass(frozen=True)
class Bad:
    """A bad input: ``sql`` (with ``params``), or with ``csv`` the registration of that CSV file
    (see :func:`csv_files`), and the class and message (a regex, searched for) it must fail with.
    ``supported`` is False for what qengine refuses to run although DuckDB runs it."""

    id: str
    sql: str
    cls: type[qengine.Error]
    message: str
    params: list | None = None
    csv: str | None = None
    supported: bool = True

    @property
    def plain_sql(self) -> bool:
        """Whether DuckDB can be asked the same: SQL over the shared tables only."""
        return self.csv is None and "{" not in self.sql and "err_" not in self.sql and "csv_" not in self.sql


def deep(levels: int) -> str:
    return "SELECT " + "(" * levels + "1" + ")" * levels + " AS x"


CORPUS = [
    # ---- unknown names --------------------------------------------------------------------------
    Bad("unknown-table", "SELECT * FROM no_such_table", P, r"^Table 'no_such_table' does not exist$"),
    Bad("unknown-column", "SELECT nope FROM sales", P, r"^column 'nope' not found in sales at line 1, column 8$"),
    Bad("unknown-qualified-column", "SELECT s.nope FROM sales s", P, r"^table 's' has no column 'nope' at line 1, column 10$"),
    Bad("unknown-alias", "SELECT x.qty FROM sales s", P, r"^table or alias 'x' of x\.qty not found in the FROM clause at line 1, column 10$"),
    Bad("unknown-star-table", "SELECT nope.* FROM sales", P, r"^table or alias 'nope' not found in the FROM clause$"),
    Bad("exclude-unknown-column", "SELECT * EXCLUDE (nope) FROM sales", P, r"^column 'nope' in EXCLUDE list not found in the FROM clause$"),
    Bad("exclude-unknown-column-of-table", "SELECT s.* EXCLUDE (qty, nope) FROM sales s", P, r"^column 'nope' in EXCLUDE list not found in s$"),
    Bad("exclude-excluded-column", "WITH t AS (SELECT * EXCLUDE (qty) FROM sales) SELECT * EXCLUDE (qty) FROM t", P,
        r"^column 'qty' in EXCLUDE list not found in the FROM clause$"),
    Bad("replace-unknown-column", "SELECT * REPLACE (1 AS nope) FROM sales", P, r"^column 'nope' in REPLACE list not found in the FROM clause$"),
    Bad("column-without-from", "SELECT qty + 1 AS x", P, r"^column 'qty' not found at line 1, column 8: the query has no FROM clause$"),
    Bad("unknown-column-in-subquery", "SELECT * FROM sales WHERE EXISTS (SELECT nope FROM customers)", P,
        r"^column 'nope' not found in customers at line 1, column 42$"),
    Bad("unknown-column-multiline", "SELECT cust_id FROM sales\nWHERE qty > 3\n  AND city = 'Oslo'", P,
        r"^column 'city' not found in sales at line 3, column 7$"),
    Bad("unknown-column-in-window", "SELECT sum(qty) OVER (PARTITION BY nope) FROM sales", P, r"^column 'nope' not found in sales at line 1, column 36$"),
    Bad("unknown-function", "SELECT no_such_fn(qty) FROM sales", P, r"Scalar Function with name no_such_fn does not exist"),
    Bad("unknown-table-function", "SELECT * FROM no_such_fn(1) f", N, r"^table function no_such_fn\(\) is not supported$"),
    Bad("unknown-type", "SELECT CAST(qty AS no_such_type) FROM sales", P, r"Type with name no_such_type does not exist"),
    # ---- ambiguous names ------------------------------------------------------------------------
    Bad("ambiguous-comma-join", "SELECT cust_id FROM sales, customers", P,
        r"^column 'cust_id' is ambiguous at line 1, column 8: sales and customers both have it; qualify it, e\.g\. sales\.cust_id$"),
    Bad("ambiguous-join-on", "SELECT cust_id FROM customers JOIN sales ON customers.cust_id = sales.cust_id", P,
        r"^column 'cust_id' is ambiguous .*: customers and sales both have it"),
    Bad("ambiguous-self-join", "SELECT city FROM customers k1 JOIN customers k2 ON k1.cust_id = k2.cust_id", P,
        r"^column 'city' is ambiguous at line 1, column 8: k1 \(customers\) and k2 \(customers\) both have it; qualify it, e\.g\. k1\.city$"),
    Bad("ambiguous-with-subquery", "SELECT qty FROM sales s, (SELECT cust_id, qty FROM sales) t WHERE s.cust_id = t.cust_id", P,
        r"^column 'qty' is ambiguous .*: s \(sales\) and t both have it"),
    Bad("ambiguous-three-tables", "SELECT item_id FROM sales s JOIN items i ON s.item_id = i.item_id JOIN sales t ON t.sale_id = s.sale_id", P,
        r"^column 'item_id' is ambiguous .*: s \(sales\), i \(items\) and t \(sales\) all have it"),
    Bad("duplicate-alias", "SELECT qty FROM sales s JOIN sales s ON true", P, r"^table alias 's' is used twice in one FROM clause"),
    Bad("using-column-missing", "SELECT cust_id FROM sales JOIN customers USING (item_id)", P,
        r"^column 'item_id' of USING is not a column of both joined tables$"),
    # ---- syntax ---------------------------------------------------------------------------------
    Bad("syntax-from-at-end", "SELECT * FROM", SYNTAX,
        r"^syntax error at line 1, column 10: expected table name after 'FROM', but the statement ends there$"),
    Bad("syntax-where-at-end", "SELECT 1 FROM sales WHERE", SYNTAX,
        r"^syntax error at line 1, column 21: expected an expression after 'WHERE', but the statement ends there$"),
    Bad("syntax-where-then-group", "SELECT 1 FROM sales WHERE GROUP BY 1", SYNTAX,
        r"^syntax error at line 1, column 27: expected an expression after 'WHERE', found 'GROUP BY'$"),
    Bad("syntax-operator-at-end", "SELECT 1 +", SYNTAX, r"^syntax error at line 1, column 10: expected an expression after '\+', but the statement ends there$"),
    Bad("syntax-like-at-end", "SELECT note FROM sales WHERE note LIKE", SYNTAX,
        r"^syntax error at line 1, column 35: expected an expression after 'LIKE', but the statement ends there$"),
    Bad("syntax-order-by-at-end", "SELECT qty FROM sales ORDER BY", SYNTAX, r"^syntax error at line 1, column 23: expected an expression after 'ORDER BY'"),
    Bad("syntax-unclosed-paren", "SELECT (qty FROM sales", SYNTAX, r"^syntax error at line 1, column 13: expected '\)', found 'FROM'$"),
    Bad("syntax-unclosed-values", "SELECT * FROM (VALUES (1, 2) t", SYNTAX, r"^syntax error at line 1, column \d+: expected '\)'"),
    Bad("syntax-stray-paren", "SELECT qty) FROM sales", SYNTAX, r"^syntax error at line 1, column 11: unexpected '\)'$"),
    Bad("syntax-misspelt-keyword", "SELEC qty FROM sales", SYNTAX, r"^syntax error at line 1, column 1: 'SELEC' does not begin an SQL statement$"),
    Bad("syntax-second-statement", "SELECT 1 AS a;\nSELEC 2", SYNTAX, r"^syntax error at line 2, column 1: 'SELEC' does not begin an SQL statement$"),
    # a word alone was read as an expression, and refused as an unsupported statement
    Bad("syntax-misspelt-keyword-alone", "SELEC", SYNTAX, r"^syntax error: 'SELEC' does not begin an SQL statement$"),
    Bad("syntax-two-words", "HELLO WORLD", SYNTAX, r"^syntax error: 'HELLO' does not begin an SQL statement$"),
    # DuckDB's own, read by sqlglot as a bare word too: not supported, not mistyped
    Bad("unsupported-end", "END", qengine.NotSupportedError, r"^END statements are not supported$"),
    Bad("syntax-multiline-operator", "SELECT sale_id,\n       qty\nFROM sales\nWHERE qty >> > 3", SYNTAX, r"^syntax error at line 4, column 1[0-4]: "),
    Bad("syntax-multiline-trailing-comma", "SELECT 1 AS a,\n  2 AS b,\n  FROM", SYNTAX,
        r"^syntax error at line 3, column 3: expected table name after 'FROM', but the statement ends there$"),
    Bad("syntax-case-without-end", "SELECT CASE WHEN qty > 1 THEN 1 FROM sales", SYNTAX, r"^syntax error at line 1, column \d+: Expected END after CASE$"),
    Bad("syntax-cast-without-type", "SELECT CAST(qty AS) FROM sales", SYNTAX, r"^syntax error at line 1, column 19: Expected TYPE after CAST$"),
    Bad("syntax-unterminated-string", "SELECT 'abc FROM sales", SYNTAX,
        r"^syntax error at line 1, column 8: unterminated string literal \(the ' here is never closed\)$"),
    Bad("syntax-unterminated-string-multiline", "SELECT 'it''s',\n  qty, 'oops\nFROM sales", SYNTAX,
        r"^syntax error at line 2, column 8: unterminated string literal"),
    Bad("syntax-unterminated-identifier", "SELECT 1 AS a,\n  \"abc FROM sales", SYNTAX, r"^syntax error at line 2, column 3: unterminated quoted identifier"),
    # DuckDB's parser refuses it; qengine answered, naming the column 4
    Bad("syntax-empty-quoted-name", 'SELECT 4 AS ""', SYNTAX, r'^syntax error at line 1, column 13: an empty name \(""\) is not a name'),
    Bad("syntax-empty-quoted-table", 'SELECT 1 AS a FROM range(1) ""', SYNTAX, r'an empty name \(""\) is not a name'),
    Bad("syntax-unterminated-comment", "SELECT 1 /* a comment", SYNTAX, r"^syntax error at line 1, column 10: unterminated comment"),
    Bad("syntax-in-explain", "EXPLAIN ANALYZE\nSELECT * FROM", SYNTAX, r"^syntax error at line 2, column 10: expected table name after 'FROM'"),
    # sqlglot joins > > into >>, and reads a join without ON, GROUP BY without keys or a keyword as an alias
    Bad("syntax-spaced-right-shift", "SELECT * FROM sales WHERE qty > > 3", SYNTAX, r"^syntax error at line 1, column 33: unexpected '>'$"),
    Bad("syntax-empty-list-item", "SELECT * FROM sales WHERE qty IN (1,, 2)", SYNTAX, r"^syntax error at line 1, column 37: unexpected ','$"),
    Bad("syntax-list-opens-with-comma", "SELECT (, qty) FROM sales", SYNTAX, r"^syntax error at line 1, column 9: unexpected ','$"),
    Bad("syntax-spaced-left-shift", "SELECT * FROM sales WHERE qty < < 3", SYNTAX, r"^syntax error at line 1, column 33: unexpected '<'$"),
    Bad("factorial-operator", "SELECT count(*) FROM sales WHERE qty ! IN (1, 2)", N,
        r"^the factorial operator '!' at line 1, column 38 is not supported: write factorial\(x\)$"),
    Bad("spaced-not-regex-match", "SELECT note ! ~ 'p' AS x FROM sales", N, r"^the factorial operator '!' at line 1, column 13 is not supported"),
    Bad("null-safe-equals-operator", "SELECT qty <=> 3 AS x FROM sales", P, r"^operator '<=>' at line 1, column 12 does not exist: write IS NOT DISTINCT FROM$"),
    Bad("syntax-join-without-on", "SELECT count(*) FROM sales JOIN customers", SYNTAX,
        r"^syntax error at line 1, column 33: expected ON or USING after the joined table, but the statement ends there$"),
    Bad("syntax-join-empty-on", "SELECT count(*) FROM sales JOIN customers ON", SYNTAX,
        r"^syntax error at line 1, column 43: expected an expression after 'ON', but the statement ends there$"),
    Bad("syntax-left-join-without-on", "SELECT count(*) FROM sales s LEFT JOIN customers c, items i", SYNTAX,
        r"^syntax error at line 1, column 51: expected ON or USING after the joined table, found ','$"),
    Bad("syntax-semi-join-without-on", "SELECT count(*) FROM sales SEMI JOIN customers WHERE qty > 1", SYNTAX,
        r"^syntax error at line 1, column 48: expected ON or USING after the joined table, found 'WHERE'$"),
    Bad("syntax-cross-join-with-on", "SELECT count(*) FROM sales CROSS JOIN customers ON true", SYNTAX, r"^syntax error at line 1, column 49: unexpected 'ON'$"),
    Bad("syntax-group-by-at-end", "SELECT count(*) FROM sales GROUP BY", SYNTAX,
        r"^syntax error at line 1, column 28: expected an expression after 'GROUP BY', but the statement ends there$"),
    Bad("syntax-group-by-then-order-by", "SELECT count(*) FROM sales GROUP BY ORDER BY 1", SYNTAX,
        r"^syntax error at line 1, column 37: expected an expression after 'GROUP BY', found 'ORDER BY'$"),
    Bad("syntax-as-without-name", "SELECT count(*) FROM sales s AS, items", SYNTAX, r"^syntax error at line 1, column 32: expected a name after 'AS', found ','$"),
    Bad("syntax-reserved-table-alias", "SELECT * FROM sales ORDER", SYNTAX,
        r"""^syntax error at line 1, column 21: the keyword 'ORDER' cannot be an alias unless quoted \("ORDER"\)$"""),
    Bad("syntax-reserved-cte-name", "WITH order AS (SELECT 1 AS a) SELECT a FROM order", SYNTAX,
        r"^syntax error at line 1, column 6: the keyword 'order' cannot be an alias unless quoted"),
    Bad("syntax-keyword-column-alias-without-as", "SELECT qty year FROM sales", SYNTAX,
        r"""^syntax error at line 1, column 12: the keyword 'year' names a column only after AS, or quoted \("year"\)$"""),
    Bad("empty-statement", "  ;  ", P, r"^empty statement$"),
    # ---- wrong argument counts ------------------------------------------------------------------
    Bad("too-many-arguments", "SELECT abs(qty, 1) FROM sales", SYNTAX, r"^syntax error at line 1, column 18: abs\(\) takes at most 1 argument, but 2 were given$"),
    Bad("too-many-arguments-plural", "SELECT lower(note, note, note) FROM sales", SYNTAX, r"lower\(\) takes at most 1 argument, but 3 were given$"),
    Bad("missing-argument", "SELECT round() FROM sales", SYNTAX, r"^syntax error at line 1, column 14: round\(\) is missing an argument$"),
    Bad("missing-argument-of-two", "SELECT date_diff('day', sold_date) FROM sales", SYNTAX, r"date_diff\(\) is missing an argument$"),
    # DuckDB is sent substring(): the message names the function as the user wrote it
    Bad("no-overload-user-spelling", "SELECT substr(note) FROM sales", P, r"argument types 'substr\(VARCHAR\)'"),
    Bad("window-function-arguments", "SELECT row_number(qty) OVER () FROM sales", P, r"ROW_NUMBER needs 0 parameters, got 1"),
    # ---- types ----------------------------------------------------------------------------------
    Bad("type-int-plus-string", "SELECT qty + 'abc' FROM sales", P, r'function call "\+\(INTEGER, STRING_LITERAL\)"'),
    Bad("type-date-plus-date", "SELECT sold_date + sold_date FROM sales", P, r"argument types '\+\(DATE, DATE\)'"),
    Bad("type-strftime-format", "SELECT strftime(sold_date, 42) FROM sales", P, r"argument types 'strftime\(DATE, INTEGER_LITERAL\)'"),
    Bad("type-decimal-width", "SELECT CAST(price AS DECIMAL(40, 2)) FROM sales", P, r"DECIMAL type width must be between 1 and 38"),
    Bad("type-in-subquery-columns", "SELECT * FROM sales WHERE qty IN (SELECT cust_id, city FROM customers)", P, r"Subquery returns 2 columns - expected 1"),
    Bad("type-unimplemented-cast", "SELECT CAST(sold_date AS INTEGER) FROM sales", D,
        r"Unimplemented type for cast \(DATE -> INTEGER\) when casting from source column sold_date$"),
    # ---- bad data: casts, overflow, division ----------------------------------------------------
    Bad("cast-column", "SELECT CAST(name AS INTEGER) FROM customers", D,
        r"^Conversion Error: Could not convert string 'Customer#\d+' to INT32 when casting from source column name$"),
    Bad("cast-computed-column", "SELECT CAST(x AS INTEGER) FROM (SELECT name || 'a' AS x FROM customers) t", D,
        r"Could not convert string 'Customer#\d+a' to INT32"),
    Bad("cast-after-join", "SELECT c.city, sum(CAST(s.note AS INTEGER)) FROM sales s JOIN customers c ON s.cust_id = c.cust_id GROUP BY c.city", D,
        r"Could not convert string '\w+' to INT32 when casting from source column note$"),
    Bad("cast-aggregate", "SELECT city, CAST(min(name) AS INTEGER) FROM customers GROUP BY city", D,
        r"Could not convert string 'Customer#\d+' to INT32 when casting from source column min\(name\)$"),
    Bad("cast-decimal-range", "SELECT CAST(price AS DECIMAL(3, 2)) FROM sales", D,
        r'Casting value "[\d.]+" to type DECIMAL\(3,2\) failed: value is out of range! when casting from source column price$'),
    Bad("cast-narrow-integer", "SELECT CAST(sale_id AS TINYINT) FROM sales", D,
        r"can't be cast because the value is out of range for the destination type INT8 when casting from source column sale_id$"),
    Bad("cast-date-text", "SELECT CAST(note AS DATE) FROM sales WHERE note IS NOT NULL", D, r'invalid date field format: "\w+"'),
    Bad("cast-literal", "SELECT CAST('2020-13-45' AS DATE) AS d", D, r'date field value out of range: "2020-13-45"'),
    Bad("compare-with-bad-date", "SELECT * FROM sales WHERE sold_date > 'not a date'", D, r'invalid date field format: "not a date"'),
    Bad("overflow-multiplication", "SELECT qty * 2147483647 * 2147483647 FROM sales", D, r"Overflow in multiplication of INT32"),
    Bad("overflow-in-aggregate", "SELECT sum(sale_id * 4611686018427387904) FROM sales", D, r"Overflow in multiplication of INT64"),
    Bad("overflow-division", "SELECT (-9223372036854775807 - 1) // -1 AS q", D, r"Overflow in division of -9223372036854775808 / -1"),
    Bad("overflow-abs", "SELECT abs(-9223372036854775807 - 1) AS a", D, r"Overflow on abs\(-9223372036854775808\)"),
    Bad("log-of-negative", "SELECT ln(-1.0 * qty) FROM sales", D, r"cannot take logarithm of a negative number"),
    Bad("scalar-subquery-rows", "SELECT (SELECT cust_id FROM customers) AS c FROM sales", D, r"More than one row returned by a subquery"),
    Bad("scalar-subquery-rows-in-where", "SELECT city FROM customers WHERE cust_id = (SELECT cust_id FROM sales)", D,
        r"More than one row returned by a subquery"),
    Bad("scalar-subquery-rows-correlated", "SELECT city FROM customers c WHERE cust_id = (SELECT s.cust_id FROM sales s WHERE s.cust_id = c.cust_id)", D,
        r"More than one row returned by a subquery"),
    Bad("scalar-subquery-rows-correlated-item", "SELECT (SELECT s.qty FROM sales s WHERE s.cust_id = c.cust_id) AS q FROM customers c", D,
        r"More than one row returned by a subquery"),
    Bad("bad-regex", "SELECT regexp_matches(name, '(') FROM customers", D, r"missing \)"),
    Bad("error-function", "SELECT error('boom') AS e", D, r"boom"),
    # ---- GROUP BY, aggregates -------------------------------------------------------------------
    Bad("group-by-missing-column", "SELECT name FROM customers GROUP BY city", P,
        r'column "customers"\."name" must appear in the GROUP BY clause or be used in an aggregate function'),
    Bad("having-ungrouped-column", "SELECT sum(qty) FROM sales HAVING qty > 1", P, r'"qty" must appear in the GROUP BY clause'),
    Bad("group-by-position", "SELECT city, count(*) FROM customers GROUP BY 5", P,
        r"^GROUP BY position 5 is not in the select list \(1 to 2\)$"),
    Bad("aggregate-in-where", "SELECT qty FROM sales WHERE sum(qty) > 1", P, r"WHERE clause cannot contain aggregates"),
    Bad("nested-aggregate", "SELECT sum(sum(qty)) FROM sales", P, r"aggregate function calls cannot be nested"),
    # ---- windows --------------------------------------------------------------------------------
    Bad("window-in-where", "SELECT qty FROM sales WHERE row_number() OVER () > 1", P, r"WHERE clause cannot contain window functions"),
    Bad("window-in-aggregate", "SELECT avg(row_number() OVER ()) FROM sales", P, r"aggregate function calls cannot contain window function calls"),
    Bad("window-undefined", "SELECT sum(qty) OVER w FROM sales", P, r'window "w" does not exist'),
    Bad("window-function-without-over", "SELECT rank() FROM sales", P, r"Scalar Function with name rank does not exist"),
    Bad("ntile-zero", "SELECT ntile(0) OVER (ORDER BY sale_id) FROM sales", D, r"Argument for ntile must be greater than zero"),
    # ---- set operations, VALUES, LIMIT ----------------------------------------------------------
    Bad("union-width", "SELECT 1 UNION SELECT 1, 2", P, r"^the two sides of UNION have 1 and 2 columns; they must have as many$"),
    Bad("except-width", "SELECT qty FROM sales EXCEPT SELECT cust_id, city FROM customers", P, r"^the two sides of EXCEPT have 1 and 2 columns"),
    Bad("values-width", "SELECT x FROM (VALUES (1), (2, 3)) t(x)", P, r"^VALUES rows must all have the same number of columns$"),
    Bad("negative-limit", "SELECT qty FROM sales LIMIT -1", P, r"^LIMIT must not be negative$"),
    # ---- nesting --------------------------------------------------------------------------------
    Bad("nested-parentheses", deep(10_000), P, r"^query too deeply nested: more than 256 levels of parentheses at line 1, column 264$"),
    Bad("nested-subqueries", "SELECT * FROM\n" + "(SELECT * FROM " * 10_000 + "sales" + ") t" * 10_000, P,
        r"^query too deeply nested: more than 256 levels of parentheses at line 2, column 3841$"),
    Bad("long-operator-chain", "SELECT qty" + " + qty" * 1500 + " AS x FROM sales", P, r"^query too deeply nested for qengine to plan$"),
    # ---- parameters -----------------------------------------------------------------------------
    Bad("too-few-parameters", "SELECT ? AS a, ? AS b", P, r"^statement takes 2 parameters but 1 were given$", params=[1]),
    Bad("missing-parameter", "SELECT ? AS a", P, r"^statement takes 1 parameter but 0 were given$", params=[]),
    Bad("unwanted-parameter", "SELECT 1 AS a", P, r"^statement takes no parameters but 1 were given$", params=[5]),
    Bad("unused-numbered-parameter", "SELECT $1 + $3 AS a", P, r"^parameter \$2 is given but not in the statement$", params=[1, 2, 3]),
    Bad("numbered-parameter-missing", "SELECT $2 AS a", P, r"^no value for parameter \$2$", params=[1]),
    Bad("unbindable-parameter", "SELECT ? AS a", P, r"^cannot bind a parameter of type object$", params=[object()]),
    # ---- statements: COPY, CREATE, INSERT, DROP, unsupported ------------------------------------
    Bad("copy-to-number", "COPY (SELECT 1 AS a) TO 42", P, r"^COPY \.\.\. TO takes one output file or directory as a string literal$"),
    Bad("copy-format", "COPY (SELECT 1 AS a) TO '{out}' (FORMAT xml)", N, r"^COPY format 'xml' is not supported \(parquet, csv, json\)$"),
    Bad("copy-option", "COPY (SELECT 1 AS a) TO '{out}' (FORMAT parquet, NO_SUCH_OPTION 1)", N, r"^COPY option NO_SUCH_OPTION is not supported$"),
    Bad("copy-from", "COPY sales FROM 'x.parquet'", N, r"^COPY \.\.\. FROM is not supported: use register_parquet or register_csv$"),
    Bad("create-bad-type", "CREATE TABLE err_bad_type (a NO_SUCH_TYPE)", P,
        r"^bad column type in CREATE TABLE: Catalog Error: Type with name NO_SUCH_TYPE does not exist!$"),
    Bad("create-existing", "CREATE TABLE err_target AS SELECT 1 AS a", P, r"^table 'err_target' already exists$"),
    Bad("create-without-columns", "CREATE TABLE err_no_columns", P, r"^CREATE TABLE needs a column list or AS SELECT"),
    Bad("create-view-unknown-column", "CREATE VIEW err_view AS SELECT nope FROM sales", P, r"^column 'nope' not found in sales at line 1, column 32$"),
    Bad("insert-into-file-table", "INSERT INTO sales SELECT * FROM sales", N, r"^INSERT into 'sales' is not supported: only session tables take inserts$"),
    Bad("insert-unknown-table", "INSERT INTO no_such_table VALUES (1)", P, r"^Table 'no_such_table' does not exist$"),
    Bad("insert-width", "INSERT INTO err_target VALUES (1, 2)", P, r"^INSERT has 1 target columns but the query returns 2$"),
    Bad("insert-unknown-column", "INSERT INTO err_target (nope) VALUES (1)", P, r"^table 'err_target' has no column 'nope'$"),
    Bad("insert-bad-value", "INSERT INTO err_target VALUES ('abc')", D, r"^Conversion Error: Could not convert string 'abc' to INT32$"),
    Bad("drop-unknown", "DROP TABLE no_such_table", P, r"^table 'no_such_table' does not exist$"),
    Bad("recursive-cte", "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 3) SELECT * FROM r", N,
        r"^WITH RECURSIVE is not supported$", supported=False),
    Bad("asof-join", "SELECT * FROM sales s ASOF JOIN customers k ON s.cust_id >= k.cust_id", N, r"^ASOF JOIN is not supported$", supported=False),
    Bad("range-of-dates", "SELECT * FROM range(DATE '2020-01-01', DATE '2020-01-05', INTERVAL 1 DAY) r", N,
        r"^range\(\) over DATE, INTERVAL is not supported \(integers are\)$", supported=False),
    Bad("unnest-in-from", "SELECT * FROM unnest([1, 2])", N, r"^table function unnest\(\) is not supported", supported=False),
    # a STRUCT unnest()ed makes a column of each field, where every SELECT item is planned as one
    # column: it failed with an internal error ("zip() argument 2 is shorter than argument 1")
    Bad("unnest-of-a-struct", "SELECT unnest(struct_pack(q := qty, p := price)) FROM sales", N,
        r"^unnest\(\) of a STRUCT \(select its fields one by one: s\.a, s\.b\) is not supported$", supported=False),
    # Arrow holds a TIME WITH TIME ZONE as a time without its offset: '10:00:00+02' came back as 10:00
    Bad("time-with-time-zone", "SELECT DISTINCT TIMETZ '10:00:00+02' AS t FROM sales", N,
        r"^the TIME WITH TIME ZONE type is not supported in a query's columns \(cast it to VARCHAR\)$", supported=False),
    Bad("update", "UPDATE sales SET qty = 1", N, r"^UPDATE statements are not supported$"),
    Bad("install", "INSTALL httpfs", N, r"^INSTALL statements are not supported$"),
    Bad("collate", "SELECT name COLLATE nocase AS n, count(*) FROM customers GROUP BY 1", N,
        r"^COLLATE \(compare lower\(x\) or strip_accents\(x\) instead\) is not supported$", supported=False),
    # DuckDB's ~ is a full match; sqlglot reads it as a partial one
    Bad("regexp-operator", "SELECT name ~ 'b' FROM customers", N,
        r"^the operator '~' at line 1, column 13 is not supported: write regexp_full_match\(x, pattern\)$", supported=False),
    Bad("not-regexp-operator", "SELECT name !~ 'b' FROM customers", N,
        r"^the operator '!~' at line 1, column 14 is not supported: write NOT regexp_full_match\(x, pattern\)$", supported=False),
    # sqlglot cannot spell it back in DuckDB's dialect as written: refused, not run changed
    Bad("approx-top-k", "SELECT approx_top_k(qty, 2) FROM sales", N, r"^APPROX_TOP_K cannot be transpiled to DuckDB", supported=False),
    # an outer column beside an aggregate in a subquery's select list: not "must appear in the GROUP BY clause"
    Bad("correlated-beside-an-aggregate", "SELECT count(*) FROM sales a WHERE (SELECT max(b.qty) > a.qty FROM sales b)", N,
        r'^correlated reference to "a"\."qty" in a subquery is not supported$', supported=False),
    Bad("within-group-two-keys", "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY qty, price) FROM sales", N,
        r"^PERCENTILE_CONT\(\) WITHIN GROUP takes one ORDER BY key in qengine, as in DuckDB$"),
    # were "Table is not supported as a query" and sqlglot's "projection_reachability requires star-free selections"
    Bad("parenthesized-join", "SELECT count(*) FROM customers c LEFT JOIN (sales s JOIN items i ON s.item_id = i.item_id) ON c.cust_id = s.cust_id", N,
        r'^a parenthesized join in FROM \("sales" AS "s" JOIN "items" AS "i" ON .+\) is not supported: write it as a subquery', supported=False),
    Bad("star-of-repeated-names", "SELECT * FROM (SELECT s.*, i.* FROM sales s JOIN items i ON s.item_id = i.item_id) q", N,
        r"^a star over a derived table or CTE whose stars select two columns of one name", supported=False),
    # DuckDB refuses it; it was answered as a WHERE
    Bad("qualify-without-a-window", "SELECT qty FROM sales QUALIFY qty > 5", P, r"^QUALIFY needs a window function"),
    Bad("read-parquet-of-number", "SELECT * FROM read_parquet(42)", P, r"^read_parquet\(\) takes a path or a list of paths as a string literal$"),
    # ---- CSV data -------------------------------------------------------------------------------
    Bad("csv-ragged-row-late", "SELECT sum(v) FROM csv_ragged", D, r"^bad row in CSV file \S+ragged\.csv, line 300002: expected 2 columns, found 3: 300000,1,2$"),
    Bad("csv-short-row-late", "SELECT count(*) FROM csv_short", D, r"^bad row in CSV file \S+short\.csv, line 300003: expected 2 columns, found 1: 300001$"),
    Bad("csv-bad-value-late", "SELECT max(v) FROM csv_badvalue", D,
        r"^bad value in CSV file \S+badvalue\.csv, line 300002, column 'v': Could not convert string \"many\" to 'BIGINT'$"),
    Bad("csv-ragged-row-registered", "", D, r"^bad CSV file \S+ragged_head\.csv: It was not possible to automatically detect the CSV parsing dialect$", csv="ragged_head"),
]

# Messages must not show any of these: qengine's and sqlglot's insides.
LEAKS = re.compile(
    r"<class|<Token|Token\(|TokenType|sqlglot|Traceback|File \"|\bc\d+\b|__\w+|s_whole\d|\bLINE \d+:|Required keyword|"
    r"could not be resolved|projection_reachability"
)


@pytest.fixture(scope="module")
def csv_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """CSV files whose bad rows lie past the block their types are inferred from (found when a
    query reads them), and one whose bad row is in that block (found when it is registered)."""
    root = tmp_path_factory.mktemp("csv")
    good = "".join(f"{i},{i}\n" for i in range(CSV_ROWS))
    bodies = {
        "ragged": good + f"{CSV_ROWS},1,2\n",
        "short": good + f"{CSV_ROWS},1\n{CSV_ROWS + 1}\n",
        "badvalue": good + f"{CSV_ROWS},many\n",
        "ragged_head": "1,x\n2,y,extra\n3,z\n",
    }
    paths = {}
    for name, body in bodies.items():
        path = root / f"{name}.csv"
        path.write_text(("k,v\n" if name == "ragged_head" else "id,v\n") + body)
        paths[name] = str(path)
    return paths


@pytest.fixture(scope="module")
def con(default_engine, csv_files):
    """The shared engine with the corpus's extra tables: CSV tables and a session table to insert into."""
    for name in ("ragged", "short", "badvalue"):
        default_engine.register_csv(f"csv_{name}", csv_files[name])
    default_engine.execute("CREATE TABLE err_target (a INTEGER)")
    yield default_engine
    for name in ("csv_ragged", "csv_short", "csv_badvalue", "err_target"):
        default_engine.execute(f"DROP TABLE IF EXISTS {name}")


def _raised(con, case: Bad, csv_files: dict[str, str], out: str) -> qengine.Error:
    """What ``case`` raises on qengine (fails if it raises nothing, or not a qengine error);
    ``out`` is where a COPY may write (none of the corpus's does)."""
    try:
        if case.csv is not None:
            con.register_csv(f"err_{case.csv}", csv_files[case.csv], delimiter=",")  # ',' or nothing: no dialect fits
        else:
            con.execute(case.sql.format(out=out), case.params)
    except qengine.Error as e:
        return e
    except Exception as e:  # noqa: BLE001 - a non-qengine exception is exactly what this reports
        pytest.fail(f"{case.id} raised a non-qengine {type(e).__name__}: {e}")
    pytest.fail(f"{case.id} did not fail")


def test_the_corpus_is_large_and_its_ids_unique() -> None:
    assert len(CORPUS) >= 60
    assert len({c.id for c in CORPUS}) == len(CORPUS)


@pytest.mark.parametrize("case", CORPUS, ids=[c.id for c in CORPUS])
def test_error_message(con, csv_files, tmp_path, caplog, case: Bad) -> None:
    with caplog.at_level(logging.WARNING, logger="sqlglot"):
        e = _raised(con, case, csv_files, str(tmp_path / "out"))
    # nothing besides the error reaches the user: sqlglot's notices go to stderr
    assert not [r.getMessage() for r in caplog.records if r.name.startswith("sqlglot")], case.id
    message = str(e)
    assert type(e) is case.cls, f"{case.id}: {type(e).__name__}: {message}"
    assert re.search(case.message, message), f"{case.id}: {message!r} does not match {case.message!r}"
    assert not LEAKS.search(message), f"{case.id}: {message!r} shows qengine's insides ({LEAKS.search(message).group()!r})"
    assert "\n" not in message, f"{case.id}: {message!r} is more than one line"


@pytest.mark.parametrize("case", [c for c in CORPUS if c.plain_sql], ids=[c.id for c in CORPUS if c.plain_sql])
def test_duckdb_agrees_the_input_is_bad(oracle, case: Bad) -> None:
    """DuckDB fails on the same input (or qengine refuses it as unsupported, by name): the
    corpus holds no query that DuckDB answers and qengine reports as a mistake."""
    try:
        oracle.execute(case.sql, case.params if case.params is not None else []).fetchall()
    except Exception:  # noqa: BLE001 - any DuckDB failure agrees the input is bad
        assert case.supported, f"{case.id}: DuckDB fails on it too, so it is not merely unsupported"
        return
    assert not case.supported, f"{case.id}: DuckDB answers it, so qengine's error is a bug, not a bad input"
    assert case.cls is qengine.NotSupportedError


def test_division_by_zero_is_null_as_in_duckdb(con, oracle) -> None:
    """Not an error: DuckDB divides by zero to NULL (/, // and %, integers and floats), and so does qengine."""
    assert_same(con, oracle, "SELECT sale_id, qty / 0 AS a, qty // 0 AS b, qty % 0 AS c, amount / 0 AS d FROM sales ORDER BY sale_id LIMIT 5")
    assert_same(con, oracle, "SELECT store_id, sum(qty) / 0 AS a, sum(qty) // 0 AS b FROM sales GROUP BY store_id")


def test_failed_statements_leave_no_tables_behind(con) -> None:
    tables = set(con.tables())
    assert not {"err_bad_type", "err_no_columns", "err_view", "err_ragged_head"} & tables


@pytest.mark.parametrize(
    "sql",
    [
        deep(200),
        "SELECT count(*) AS n FROM " + "(SELECT * FROM " * 150 + "sales" + ") t" * 150,
    ],
    ids=["parentheses-200", "subqueries-150"],
)
def test_deep_nesting_within_the_limit_runs_as_in_duckdb(con, oracle, sql: str) -> None:
    """The nesting limit refuses only what is too deep to plan: DuckDB answers these, and so does qengine."""
    assert_same(con, oracle, sql)


def test_any_value_runs_without_a_notice(con, oracle, caplog) -> None:
    """sqlglot reads any_value(x) as IGNORE NULLS around it; the wrapper left around the
    aggregate's column was dropped from the SQL with a notice on the user's stderr."""
    sql = "SELECT store_id, any_value(qty) IS NOT NULL AS has_qty FROM sales GROUP BY 1 ORDER BY 1"
    with caplog.at_level(logging.WARNING, logger="sqlglot"):
        rows = con.execute(sql).fetchall()
    assert not [r.getMessage() for r in caplog.records if r.name.startswith("sqlglot")]
    assert rows == oracle.execute(sql).fetchall()


def test_a_type_arrow_cannot_shuffle_is_named_with_what_to_do(tmp_path) -> None:
    """A GROUP BY on a UNION key failed with the bare message "sparse_union" (an empty partition
    of the key could not be made); it runs now. Sampling the key for a range sort still cannot
    be done, and an InternalError said "ArrowNotImplementedError: sparse_union"."""
    import duckdb

    for f in range(4):
        duckdb.execute(f"COPY (SELECT (i % 13)::INTEGER AS k FROM range({f * 300}, {f * 300 + 300}) r(i)) "
                       f"TO '{tmp_path}/p{f}.parquet' (FORMAT parquet, ROW_GROUP_SIZE 60)")
    oracle = duckdb.connect()
    oracle.execute(f"CREATE VIEW t AS SELECT * FROM read_parquet('{tmp_path}/*.parquet')")
    with qengine.connect(workers=2, allowed_roots=[str(tmp_path)], broadcast_threshold=0, partitions=4,
                         split_size="1KB", coalesce_size=0) as con:
        con.register_parquet("t", str(tmp_path))
        grouped = "SELECT union_value(n := k) AS v, count(*) AS c FROM t GROUP BY v ORDER BY c, v"
        assert con.execute(grouped).fetchall() == oracle.execute(grouped).fetchall()
        with pytest.raises(qengine.NotSupportedError, match=r"not supported where this query needs it \(Arrow: sparse_union\); cast the column"):
            con.execute("SELECT a.v, count(*) FROM (SELECT union_value(n := k) AS v FROM t) a "
                        "JOIN (SELECT union_value(n := k) AS v FROM t WHERE k < 3) b USING (v) GROUP BY ALL ORDER BY ALL")
        assert len(con.execute("SELECT k, count(*) FROM t GROUP BY k").fetchall()) == 13  # the connection goes on
