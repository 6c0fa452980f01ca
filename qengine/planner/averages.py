"""The final step of an average split into a partial sum and count, rounded as DuckDB rounds it.

DuckDB's ``avg`` of an integer or DECIMAL keeps an exact HUGEINT sum and a count, and divides
them in the C compiler's ``long double`` (x86-64: 64 significant bits), rounding the sum to that
type first; the quotient is then rounded to DOUBLE. SMALLINT, TINYINT, UTINYINT and DECIMAL of
at most 4 digits divide in DOUBLE instead. A final step of ``CAST(sum AS DOUBLE) / count``
rounded the sum to 53 bits before dividing: the average of BIGINTs near 2^62 came out a few
units off in its last place. DuckDB SQL has no ``long double``, so :func:`final_average` does
the division in UHUGEINT arithmetic, each rounding to nearest, ties to even, exactly where
DuckDB's finalize rounds (``avg.cpp``: ``Hugeint::Cast<long double>(sum) / (count * 10^scale)``).
Floating-point arguments are summed in DOUBLE by DuckDB too, and divide as before.
"""

from __future__ import annotations

import functools

import numpy as np
import sqlglot
import sqlglot.expressions as exp

from qengine.planner.static_types import built_type, decimal_parts

# Significant bits of this platform's long double, which DuckDB's average divides in: 64 on
# x86-64, 53 where it is a double, 113 on aarch64 Linux (too wide to emulate in 128-bit integers).
_LONG_DOUBLE_BITS = int(np.finfo(np.longdouble).nmant) + 1
# Where DuckDB's avg(x) keeps an int64 sum and divides in DOUBLE (its INT16 overload, which
# TINYINT and UTINYINT are cast to); DECIMAL(p <= 4) is stored as INT16 too.
_DOUBLE_DIVIDED = {"TINYINT", "SMALLINT", "UTINYINT"}
_LONG_DOUBLE_DIVIDED = {"INT", "BIGINT", "INT128", "USMALLINT", "UINT", "UBIGINT"}
# The largest DECIMAL scale whose count * 10^scale keeps within a HUGEINT.
_MAX_SCALE = 18


def final_average(total: exp.Expression, count: exp.Expression, argument_type: str | None) -> exp.Expression | None:
    """``total / count`` as DuckDB's ``avg`` of an argument of ``argument_type`` finalizes it:
    ``total`` the summed partial sums (DOUBLE, HUGEINT, or DECIMAL(38, scale)), ``count`` the
    summed partial counts. None where the type is unknown or not divided exactly here."""
    t = built_type(argument_type)
    if t is None:
        return None
    if t.is_type(*exp.DataType.FLOAT_TYPES):
        return exp.Div(this=exp.cast(total, "DOUBLE"), expression=exp.Nullif(this=count, expression=exp.Literal.number(0)))
    if t.this.name in _DOUBLE_DIVIDED:
        bits, scale = 53, 0
    elif t.this.name in _LONG_DOUBLE_DIVIDED:
        bits, scale = _LONG_DOUBLE_BITS, 0
    elif t.is_type(exp.DataType.Type.DECIMAL):
        precision, scale = decimal_parts(t)
        bits = 53 if precision <= 4 else _LONG_DOUBLE_BITS
    else:
        return None
    if bits > 64 or scale > _MAX_SCALE:
        return None
    template = _template(bits, scale)
    return template.transform(lambda n: (total if n.name == "_total" else count).copy() if isinstance(n, exp.Column) and n.name in ("_total", "_count") else n)


def _let(value: str, name: str, body: str) -> str:
    """``body`` with ``name`` bound to ``value``, evaluated once: DuckDB has no LET, a lambda
    applied to a list of one element is one."""
    return f"list_transform([{value}], lambda {name}: {body})[1]"


def _u(n: str | int) -> str:
    return f"CAST({n} AS UHUGEINT)"


def _odd(n: str) -> str:
    # not n % 2: a UHUGEINT's modulo is a long division, 7 µs a row
    return f"({n} & CAST(1 AS UHUGEINT)) = 1"


def _normalized(x: str, bits: int, prefix: str) -> str:
    """``x`` (a positive UHUGEINT) rounded to ``bits`` significant bits, as a struct of its
    significand ``m`` (with exactly ``bits`` bits) and exponent ``e``: ``x ≈ m * 2^e``."""
    b0, b, q, up = (f"{prefix}{s}" for s in ("b0", "b", "q", "up"))
    # log2 of the DOUBLE nearest x is exact at powers of two and rounds up at most to the next
    # one, so the bit length it gives is one too many at most
    shift = _u(f"{b} - {bits}")
    dropped = f"({x} - ({q} << {shift}))"
    rounded = _let(
        f"{q} + CAST({dropped} * 2 > (CAST(1 AS UHUGEINT) << {shift}) OR ({dropped} * 2 = (CAST(1 AS UHUGEINT) << {shift}) AND {_odd(q)}) AS UHUGEINT)",
        up,
        f"CASE WHEN {up} = (CAST(1 AS UHUGEINT) << {_u(bits)}) THEN struct_pack(m := {up} >> CAST(1 AS UHUGEINT), e := {b} - {bits} + 1) "
        f"ELSE struct_pack(m := {up}, e := {b} - {bits}) END",
    )
    return _let(
        f"CAST(floor(log2(CAST({x} AS DOUBLE))) AS INTEGER) + 1", b0,
        _let(
            f"{b0} - CAST({x} < (CAST(1 AS UHUGEINT) << {_u(f'{b0} - 1')}) AS INTEGER)", b,
            f"CASE WHEN {b} <= {bits} THEN struct_pack(m := {x} << {_u(f'{bits} - {b}')}, e := {b} - {bits}) "
            f"ELSE {_let(f'{x} >> {shift}', q, rounded)} END",
        ),
    )


@functools.cache
def _template(bits: int, scale: int) -> exp.Expression:
    """The final average over the placeholders ``_total`` and ``_count``. The quotient of the
    two normalized significands is taken to ``bits`` bits with its remainder deciding the
    rounding, then rounded again to DOUBLE's 53, as DuckDB's ``long double`` division and its
    conversion to ``double`` round."""
    numerator = "_total" if scale == 0 else f"(CAST(trunc(_total) AS HUGEINT) * {10 ** scale} + CAST((_total - trunc(_total)) * {10 ** scale} AS HUGEINT))"
    denominator = f"CAST(_count AS HUGEINT) * {10 ** scale}"
    m_t, m_d = "struct_extract(avg_t, 'm')", "struct_extract(avg_d, 'm')"
    remainder = f"(avg_r - avg_e * {m_d})"
    rounded = _let(
        f"avg_q + avg_e + CAST({remainder} * 2 > {m_d} OR ({remainder} * 2 = {m_d} AND {_odd('avg_q + avg_e')}) AS UHUGEINT)", "avg_m",
        _to_double("avg_m", bits, "struct_extract(avg_t, 'e') - struct_extract(avg_d, 'e') - avg_k"),
    )
    # avg_n // m_d is a long division, 9 µs a row for UHUGEINT; a quotient from DOUBLEs is within
    # 2^(bits - 51) of it, so one taken 2^(bits - 50) lower is at most the true one, and the
    # remainder's own quotient (below 2^15) from DOUBLEs is off by one at most.
    below = _let(
        f"CAST(floor(CAST(avg_r AS DOUBLE) / CAST({m_d} AS DOUBLE)) AS UHUGEINT)", "avg_e0",
        f"CASE WHEN avg_e0 * {m_d} > avg_r THEN avg_e0 - 1 WHEN avg_r - avg_e0 * {m_d} >= {m_d} THEN avg_e0 + 1 ELSE avg_e0 END",
    )
    quotient = _let(
        f"CAST(CAST(avg_n AS DOUBLE) / CAST({m_d} AS DOUBLE) AS UHUGEINT) - {_u(1 << (bits - 50))}", "avg_q",
        _let(f"avg_n - avg_q * {m_d}", "avg_r", _let(below, "avg_e", rounded)),
    )
    body = _let(
        _normalized(f"CAST(abs({numerator}) AS UHUGEINT)", bits, "avg_t"), "avg_t",
        _let(
            _normalized(f"CAST({denominator} AS UHUGEINT)", bits, "avg_d"), "avg_d",
            _let(f"{bits - 1} + CAST({m_t} < {m_d} AS INTEGER)", "avg_k", _let(f"{m_t} << {_u('avg_k')}", "avg_n", quotient)),
        ),
    )
    # The rounding to ``bits`` bits first changes nothing where both operands are exact DOUBLEs
    # and no quotient of them lies within half a ``bits``-bit unit of a point halfway between
    # two DOUBLEs without being one: for a sum below 2^53 that holds when count * 5^scale is
    # below 2^11 (a quotient off such a point is off by 2^-53 of it over that count at least).
    # That case, most groups of a GROUP BY, divides in DOUBLE: the path above costs about 6 µs
    # a row, mostly in DuckDB's lambdas.
    exact = 1 << (11 if bits > 53 else 53)
    sql = (
        f"CASE WHEN coalesce(_count, 0) = 0 THEN CAST(NULL AS DOUBLE) "
        f"WHEN abs({numerator}) < {1 << 53} AND CAST(_count AS HUGEINT) * {5 ** scale} < {exact} "
        f"THEN CAST({numerator} AS DOUBLE) / CAST({denominator} AS DOUBLE) "
        f"WHEN _total = 0 THEN CAST(0 AS DOUBLE) "
        f"ELSE sign({numerator}) * {body} END"
    )
    return sqlglot.parse_one(sql, dialect="duckdb")


def _to_double(m: str, bits: int, exponent: str) -> str:
    """The DOUBLE nearest ``m * 2^exponent`` (``m`` of ``bits`` bits, at most 2^bits), ties to even."""
    drop = bits - 53
    if drop == 0:
        return f"CAST({m} AS DOUBLE) * pow(2, {exponent})"
    half = 1 << (drop - 1)
    low = f"({m} - (avg_h << {_u(drop)}))"
    return _let(
        f"{m} >> {_u(drop)}", "avg_h",
        f"CAST(avg_h + CAST({low} > {half} OR ({low} = {half} AND {_odd('avg_h')}) AS UHUGEINT) AS DOUBLE) * pow(2, {exponent} + {drop})",
    )
