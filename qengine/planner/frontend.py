"""SQL text → optimized sqlglot AST: parse, bind parameters, expand views, optimize.

sqlglot's optimizer qualifies every column, decorrelates subqueries into joins and pushes
projections down; the logical planner then only sees fully qualified, mostly flat SELECTs.
Every sqlglot failure is turned into a qengine ProgrammingError in the user's terms: syntax errors
say what was expected and where (line and column), unknown and ambiguous names are named with
the tables in reach, and no token or class of sqlglot's shows through.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import re
from collections.abc import Iterator
from typing import Any

import duckdb
import sqlglot
import sqlglot.errors
import sqlglot.expressions as exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.optimizer import RULES, optimize
from sqlglot.optimizer.annotate_types import annotate_types
from sqlglot.optimizer.canonicalize import canonicalize
from sqlglot.optimizer.eliminate_joins import eliminate_joins as sqlglot_eliminate_joins
from sqlglot.optimizer.eliminate_subqueries import eliminate_subqueries as sqlglot_eliminate_subqueries
from sqlglot.optimizer.merge_subqueries import merge_subqueries as sqlglot_merge_subqueries
from sqlglot.optimizer.optimize_joins import optimize_joins as sqlglot_optimize_joins
from sqlglot.optimizer.pushdown_predicates import pushdown_predicates
from sqlglot.optimizer.qualify import qualify
from sqlglot.optimizer.scope import Scope, traverse_scope
from sqlglot.optimizer.simplify import simplify
from sqlglot.optimizer.unnest_subqueries import unnest_subqueries as sqlglot_unnest_subqueries
from sqlglot.tokens import Token, TokenType

from qengine.catalog.catalog import Catalog
from qengine.errors import Error, NotSupportedError, ProgrammingError
from qengine.planner import table_sources
from qengine.planner.column_aliases import check_alias_widths, cte_aliases_as_derived_tables, cte_of, is_listed_star
from qengine.planner.eliminate_joins import eliminate_joins
from qengine.planner.eliminate_subqueries import eliminate_subqueries
from qengine.planner.grouping_syntax import parse_tokens
from qengine.planner.join_order import optimize_joins
from qengine.planner.merge_derived import merge_subqueries
from qengine.planner.named_windows import inline_named_windows
from qengine.planner.parameters import OPERAND_END, PLACEHOLDER, QUESTION_MARKS, counted, numbered_placeholders
from qengine.planner.struct_fields import name_struct_fields
from qengine.planner.unnest import unnest_subqueries
from qengine.planner.unsupported import is_order_by_all, refuse_unmodelled
from qengine.planner.using_columns import qualify_with_using_sides


class _Rule:
    """An optimizer rule with its signature worked out once. ``optimize`` asks each rule for its
    parameters on every call, and for sqlglot's compiled rules ``inspect`` gets them by parsing
    a text signature: 5 ms a query. A ``__signature__`` answers at once."""

    def __init__(self, rule: Any) -> None:
        self.rule = rule
        self.__signature__ = inspect.signature(rule)

    def __call__(self, expression: exp.Expression, **kwargs: Any) -> exp.Expression:
        return self.rule(expression, **kwargs)


# sqlglot's simplify folds constants with its own typing (DATE + INTERVAL becomes a DATE where
# DuckDB returns a TIMESTAMP), so it is left out: DuckDB folds constants itself, with its types.
# Its predicate pushdown is left to qengine's own (planner/pushdown.py), which does all it did
# (comma joins' WHERE conditions become join keys there too) and more; it took a sixth of
# planning time. Type annotation and canonicalize, which needs the types, rewrite SQL for
# engines that lack DuckDB's implicit casts (string literals compared with dates, integers as
# booleans); the fragments run on DuckDB itself, which reads the query the way the user meant
# it, so they are left out too, and no node carries a type for every copy to deep-copy.
# Subqueries are unnested, joins ordered, derived tables merged and unused joins dropped by
# qengine's wrappers of sqlglot's rules (planner/unnest.py, planner/join_order.py,
# planner/merge_derived.py, planner/eliminate_joins.py, planner/eliminate_subqueries.py), which
# keep each rule off those it would answer wrongly for.
_WRAPPED = {
    qualify: qualify_with_using_sides,
    sqlglot_unnest_subqueries: unnest_subqueries,
    sqlglot_optimize_joins: optimize_joins,
    sqlglot_merge_subqueries: merge_subqueries,
    sqlglot_eliminate_joins: eliminate_joins,
    sqlglot_eliminate_subqueries: eliminate_subqueries,
}
_RULES = tuple(
    _Rule(_WRAPPED.get(rule, rule))
    for rule in RULES
    if rule not in (simplify, pushdown_predicates, annotate_types, canonicalize)
)


# How deep parentheses (and brackets) may nest. sqlglot's parser recurses a few Python frames a
# level, and the optimizer and the planner recurse over the tree it builds: a query nested past
# this is refused where the nesting goes too deep, before the parser runs out of stack (at about
# 500 levels). Most shapes plan to about 300 levels; what is nested less deeply but still too
# deeply to plan (scalar subqueries, long chains of operators) is refused by ``user_terms``.
MAX_NESTING = 256
TOO_DEEP = "query too deeply nested"
_OPENING = {TokenType.L_PAREN, TokenType.L_BRACKET, TokenType.L_BRACE}
_CLOSING = {TokenType.R_PAREN, TokenType.R_BRACKET, TokenType.R_BRACE}


class _CommandNotice(logging.Filter):
    """Drops sqlglot's stderr notice that it read a statement as a bare Command (RESET, PRAGMA,
    ...): qengine takes such statements itself, or refuses them in the user's terms."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Falling back to parsing as a 'Command'" not in record.getMessage()


logging.getLogger("sqlglot").addFilter(_CommandNotice())


def parse(sql: str, dialect: str) -> list[exp.Expression]:
    """Parse one or more statements, saying what was expected where on a syntax error, and
    refuse those with a construct the planner does not model (see :mod:`qengine.planner.unsupported`).

    The text is tokenized here rather than inside ``sqlglot.parse`` (which does the same), so
    that nesting is checked before the parser recurses, and syntax errors can be told in tokens
    the user wrote."""
    try:
        reader = Dialect.get_or_raise(dialect)
    except ValueError as e:
        raise ProgrammingError(f"unknown SQL dialect {dialect!r}") from e
    try:
        tokens = reader.tokenize(sql)
    except sqlglot.errors.TokenError as e:
        raise ProgrammingError(_token_error(sql, e)) from e
    _check_nesting(sql, tokens)
    _check_operators(sql, tokens)
    _check_clauses(sql, tokens)
    _check_escape_strings(sql, tokens)
    _check_empty_identifiers(sql, tokens)
    numbered = numbered_placeholders(tokens)
    question_marks, tokens = numbered is not tokens, numbered
    tokens = _bracket_typed_literals(tokens, reader)
    tokens = _interval_strings_as_casts(tokens)
    tokens = _leading_point_numbers(tokens)
    tokens = _quoted_all_apart(tokens)
    try:
        statements = [s for s in parse_tokens(reader, tokens, sql) if s is not None]
    except sqlglot.errors.ParseError as e:
        raise ProgrammingError(_syntax_error(sql, tokens, e)) from e
    if not statements:
        raise ProgrammingError("empty statement")
    for statement in statements:
        _restore_quoted_all(statement)
        _check_aliases(sql, tokens, statement)
        inline_named_windows(statement)
        refuse_unmodelled(statement)
        _keep_struct_key_case(statement)
        _within_group_as_ordered(statement)
        _empty_maps_as_calls(statement)
        _date_add_as_plus(statement)
        if question_marks:
            statement.meta[QUESTION_MARKS] = True
    return statements


def _date_add_as_plus(statement: exp.Expression) -> None:
    """DuckDB's two-argument ``date_add(a, b)`` is ``a + b``: sqlglot reads it as a number of
    days and writes ``a + INTERVAL b DAY``, which made ``date_add(DATE, 5)`` a TIMESTAMP where
    DuckDB's answer is a DATE."""
    for node in list(statement.find_all(exp.DateAdd)):
        if node.args.get("unit") is not None or isinstance(node.expression, exp.Interval):
            continue
        added = exp.Add(this=exp.paren(node.this.copy(), copy=False), expression=exp.paren(node.expression.copy(), copy=False))
        if isinstance(node.parent, exp.Select) and node.arg_key == "expressions":  # unaliased: named as DuckDB names it
            name = f"date_add({_output_name(node.this)}, {_output_name(node.expression)})"
            added = exp.Alias(this=added, alias=exp.to_identifier(name, quoted=True))
        node.replace(added)


def _output_name(e: exp.Expression) -> str:
    """An unaliased expression as DuckDB names its result column ("count(x)", "(a + 1)"); a
    bound parameter as it was written."""
    def shown_as(n: exp.Expression) -> exp.Expression:
        if n.meta and PLACEHOLDER in n.meta:
            return exp.Var(this=n.meta[PLACEHOLDER])
        if isinstance(n, exp.Count) and isinstance(n.this, exp.Star):
            return exp.Anonymous(this="count_star")
        return n

    shown = e.transform(shown_as)
    text = shown.sql(dialect="duckdb", normalize_functions="lower", comments=False)
    return f"({text})" if isinstance(e, exp.Binary) else text


def _empty_maps_as_calls(statement: exp.Expression) -> None:
    """``MAP {}`` as ``map()``, the same empty MAP: sqlglot spells the literal cast to a type
    (``MAP {}::MAP(VARCHAR, INTEGER)``) as ``MAP MAP()``, which DuckDB cannot parse."""
    for node in list(statement.find_all(exp.ToMap)):
        if isinstance(node.this, exp.Struct) and not node.this.expressions:
            node.replace(exp.Anonymous(this="map"))


@contextlib.contextmanager
def user_terms(sql: str, dialect: str) -> Iterator[None]:
    """Plan and run a statement with its failures told in the user's terms.

    DuckDB names a function by what qengine sent it (the user's substr() arrives as
    substring()): such names are turned back into the user's. A query nested deeply enough
    for the optimizer or the planner to recurse past Python's limit, short of
    :data:`MAX_NESTING` levels of parentheses (a long chain of ANDs, say), is refused as
    such rather than reported as a bug.
    """
    try:
        yield
    except Error as e:
        e.args = (_user_functions(str(e), sql, dialect),)
        raise
    except RecursionError as e:
        raise ProgrammingError(f"{TOO_DEEP} for qengine to plan") from e


_CALLED = re.compile(r"\b(\w+)\(")


def _user_functions(message: str, sql: str, dialect: str) -> str:
    """``message`` with each function the user did not write named as the user wrote it.

    Each call in the text is read alone and written back as DuckDB reads it; a name in the
    message that only a call's DuckDB form has is that call's. Only done on failure: it
    re-parses the calls."""
    named = {m.group(1).lower() for m in _CALLED.finditer(message)}
    if not named:
        return message
    try:
        tokens = Dialect.get_or_raise(dialect).tokenize(sql)
    except (ValueError, sqlglot.errors.TokenError):
        return message
    written = {t.text.lower() for t in tokens}
    renames: dict[str, str] = {}
    for i, token in enumerate(tokens[:-1]):
        if tokens[i + 1].token_type != TokenType.L_PAREN or token.text.lower() in named:
            continue
        end = _closing(tokens, i + 1)
        try:
            call = sqlglot.parse_one(sql[token.start:tokens[end].end + 1], read=dialect)
        except (sqlglot.errors.SqlglotError, RecursionError):
            continue
        sent = call.sql(dialect="duckdb").split("(")[0].lower()
        if sent in named and sent not in written:
            renames[sent] = token.text
    if not renames:
        return message
    return _CALLED.sub(lambda m: f"{renames.get(m.group(1).lower(), m.group(1))}(", message)


def _closing(tokens: list[Token], opening: int) -> int:
    """The index of the token that closes the parenthesis at ``opening`` (the last if none does)."""
    depth = 0
    for i in range(opening, len(tokens)):
        depth += {TokenType.L_PAREN: 1, TokenType.R_PAREN: -1}.get(tokens[i].token_type, 0)
        if depth == 0:
            return i
    return len(tokens) - 1


def _position(sql: str, offset: int) -> str:
    """'line L, column C' (both from 1) of a character offset into ``sql``."""
    line = sql.count("\n", 0, offset) + 1
    column = offset - sql.rfind("\n", 0, offset)  # rfind is -1 on the first line
    return f"line {line}, column {column}"


def _check_nesting(sql: str, tokens: list[Token]) -> None:
    """Refuse the query where its parentheses first nest past :data:`MAX_NESTING`."""
    depth = 0
    for token in tokens:
        if token.token_type in _OPENING:
            depth += 1
            if depth > MAX_NESTING:
                raise ProgrammingError(
                    f"{TOO_DEEP}: more than {MAX_NESTING} levels of parentheses at {_position(sql, token.start)}"
                )
        elif token.token_type in _CLOSING:
            depth -= 1


# Operators sqlglot's tokenizer cuts into tokens of one character and its parser joins again:
# ``>>`` and ``<<`` (GT GT, LT LT) and DuckDB's ``!~``, ``!~~``, ``!~*`` and ``!~~*`` (a NOT
# written ``!`` and a ~ operator). DuckDB reads an operator only from adjacent characters, so
# ``> >`` is a syntax error there, not a shift.
_JOINED = {(TokenType.GT, TokenType.GT), (TokenType.LT, TokenType.LT)}


def _check_operators(sql: str, tokens: list[Token]) -> None:
    """Refuse what sqlglot reads as an operator that DuckDB reads differently, or not at all.

    Two tokens sqlglot joins into one operator are a syntax error where something separates
    them, as in DuckDB. A ``!`` that begins no ~ operator is DuckDB's factorial (``5 !`` is
    120, ``x ! IN (...)`` tests the factorial), which sqlglot reads as NOT; and ``<=>``, which
    sqlglot reads as a NULL-safe equality, is no operator of DuckDB's."""
    for i, token in enumerate(tokens):
        after = tokens[i + 1] if i + 1 < len(tokens) else None
        adjacent = after is not None and after.start == token.end + 1
        if after is not None and (token.token_type, after.token_type) in _JOINED and not adjacent:
            raise ProgrammingError(f"syntax error at {_position(sql, after.start)}: unexpected {after.text!r}")
        if token.token_type == TokenType.NOT and token.text == "!" and not (adjacent and after.text.startswith("~")):
            raise NotSupportedError(f"the factorial operator '!' at {_position(sql, token.start)} is not supported: write factorial(x)")
        if token.token_type in (TokenType.COMMA, TokenType.L_PAREN) and after is not None and after.token_type == TokenType.COMMA:
            # sqlglot skips an empty list item: (1,, 2) read as (1, 2)
            raise ProgrammingError(f"syntax error at {_position(sql, after.start)}: unexpected ','")
        if token.token_type == TokenType.NULLSAFE_EQ and token.text == "<=>":
            raise ProgrammingError(f"operator '<=>' at {_position(sql, token.start)} does not exist: write IS NOT DISTINCT FROM")
        if token.token_type == TokenType.TILDE and i > 0 and (tokens[i - 1].token_type in OPERAND_END or tokens[i - 1].text == "!"):
            # DuckDB's x ~ p is a full match (regexp_full_match); sqlglot reads it as a partial one
            operator = "!~" if tokens[i - 1].text == "!" else "~"
            raise NotSupportedError(
                f"the operator '{operator}' at {_position(sql, token.start)} is not supported: write "
                f"{'NOT ' if operator == '!~' else ''}regexp_full_match(x, pattern)"
            )


# Tokens that end a clause: after one of these, a clause that needs an expression has none.
_CLAUSE_END = {
    TokenType.SEMICOLON, TokenType.R_PAREN, TokenType.COMMA, TokenType.WHERE, TokenType.GROUP_BY, TokenType.HAVING,
    TokenType.QUALIFY, TokenType.WINDOW, TokenType.ORDER_BY, TokenType.LIMIT, TokenType.OFFSET, TokenType.FETCH,
    TokenType.UNION, TokenType.EXCEPT, TokenType.INTERSECT, TokenType.JOIN,
}
# Tokens that end an item of a list: AS before one of these has no name after it.
_LIST_END = {TokenType.SEMICOLON, TokenType.R_PAREN, TokenType.COMMA}
# Clauses sqlglot reads as empty when nothing follows them (GROUP BY then groups by nothing).
_NEEDS_EXPRESSION = {TokenType.GROUP_BY, TokenType.HAVING, TokenType.QUALIFY, TokenType.ON}
_JOIN_WORDS = {
    TokenType.LEFT, TokenType.RIGHT, TokenType.FULL, TokenType.INNER, TokenType.OUTER, TokenType.SEMI,
    TokenType.ANTI, TokenType.NATURAL, TokenType.CROSS, TokenType.POSITIONAL, TokenType.ASOF,
}
# Joins that take no ON or USING; every other needs one.
_UNCONDITIONED = {TokenType.CROSS, TokenType.NATURAL, TokenType.POSITIONAL}


def _check_clauses(sql: str, tokens: list[Token]) -> None:
    """Refuse, as DuckDB does, clauses sqlglot's parser lets go without what they need.

    sqlglot reads ``a JOIN b`` without ON or USING (or with an empty ON) as a cross join, and
    ``GROUP BY`` with nothing after it as no grouping; it takes ON after a CROSS or NATURAL
    JOIN as the join's condition. To DuckDB each is a syntax error. Joins are followed at each
    depth of parentheses: a join that needs a condition must get its ON or USING (after any
    joins nested in it) before its FROM item ends."""
    pending: dict[int, list[Token]] = {}  # depth → joins still waiting for their ON or USING
    unconditioned: dict[int, bool] = {}  # depth → whether its last join takes no condition
    callers: list[str] = []  # the word before each open parenthesis (CAST's has an AS of its own)
    depth = 0
    for i, token in enumerate(tokens):
        kind = token.token_type
        after = tokens[i + 1] if i + 1 < len(tokens) else None
        if kind in _NEEDS_EXPRESSION and (after is None or after.token_type in _CLAUSE_END):
            raise ProgrammingError(_nothing_after(sql, token, after, "an expression"))
        if pending.get(depth) and (kind in _CLAUSE_END - {TokenType.JOIN}):
            raise ProgrammingError(_missing_condition(sql, token, kind == TokenType.SEMICOLON))
        if kind == TokenType.ALIAS and (after is None or after.token_type in _LIST_END) and callers[-1:] not in (["CAST"], ["TRY_CAST"]):
            raise ProgrammingError(_nothing_after(sql, token, after, "a name"))
        if kind == TokenType.L_PAREN:
            depth += 1
            callers.append(tokens[i - 1].text.upper() if i else "")
        elif kind == TokenType.R_PAREN:
            pending.pop(depth, None)
            unconditioned.pop(depth, None)
            depth -= 1
            callers = callers[:-1]
        elif kind == TokenType.JOIN:
            words = set()
            for before in reversed(tokens[:i]):
                if before.token_type not in _JOIN_WORDS:
                    break
                words.add(before.token_type)
            unconditioned[depth] = bool(words & _UNCONDITIONED)
            if not unconditioned[depth]:
                pending.setdefault(depth, []).append(token)
        elif kind in (TokenType.ON, TokenType.USING) and not (after is not None and after.text.upper() == "SAMPLE"):
            if pending.get(depth):
                pending[depth].pop()
            elif unconditioned.get(depth):
                raise ProgrammingError(f"syntax error at {_position(sql, token.start)}: unexpected {token.text!r}")
        elif kind in _CLAUSE_END:
            unconditioned.pop(depth, None)
    if pending.get(depth):
        raise ProgrammingError(_missing_condition(sql, tokens[-1], True))


def _nothing_after(sql: str, token: Token, after: Token | None, wanted: str) -> str:
    """A clause with nothing after it: at the clause if the statement ends, else at what follows."""
    if after is None or after.token_type == TokenType.SEMICOLON:
        return f"syntax error at {_position(sql, token.start)}: expected {wanted} after {token.text!r}, but the statement ends there"
    return f"syntax error at {_position(sql, after.start)}: expected {wanted} after {token.text!r}, found {after.text!r}"


def _missing_condition(sql: str, token: Token, ends: bool) -> str:
    """A join without ON or USING, found at ``token`` (or, if the statement ``ends``, after it)."""
    found = "but the statement ends there" if ends else f"found {token.text!r}"
    return f"syntax error at {_position(sql, token.start)}: expected ON or USING after the joined table, {found}"


@functools.cache
def _keywords() -> tuple[frozenset[str], frozenset[str]]:
    """DuckDB's keywords (lower case), and those of them it refuses as a table alias.

    Asked of a scratch DuckDB, once: its list of keywords, and for each whether its parser
    takes ``FROM t AS keyword`` (a few hundred parses, a few milliseconds)."""
    con = duckdb.connect()
    try:
        words = frozenset(r[0].lower() for r in con.execute("SELECT keyword_name FROM duckdb_keywords()").fetchall())
        refused = set()
        for word in words:
            try:
                con.extract_statements(f"SELECT 1 FROM t AS {word}")
            except duckdb.Error:
                refused.add(word)
    finally:
        con.close()
    return words, frozenset(refused)


def _check_aliases(sql: str, tokens: list[Token], statement: exp.Expression) -> None:
    """Refuse an unquoted alias that DuckDB reads as a keyword, where sqlglot takes it as a name.

    A table alias (also a CTE's name, a column's in ``t(a, b)``, a column's in ``* REPLACE
    (... AS name)`` and a prefix alias ``name: expr``) may be no reserved keyword and few of
    the type and function names: ``FROM sales ORDER`` is a syntax error to DuckDB, an alias to
    sqlglot. A column alias without AS may be no keyword at all (``SELECT x name``); with AS,
    any keyword, as in DuckDB."""
    index = {token.start: i for i, token in enumerate(tokens)}
    for node in statement.walk():
        if isinstance(node, exp.TableAlias):
            names = [node.this, *node.columns]
        elif isinstance(node, exp.Alias):
            names = [node.args.get("alias")]
        else:
            continue
        for name in names:
            at = index.get(name.meta.get("start", -1)) if isinstance(name, exp.Identifier) and not name.quoted else None
            if at is None:
                continue
            prefixed = at + 1 < len(tokens) and tokens[at + 1].token_type == TokenType.COLON
            # the keywords are asked of DuckDB on first need: a statement without an alias
            # (``SELECT 1`` from the command line) does not wait for them
            if isinstance(node, exp.TableAlias) or isinstance(node.parent, exp.Star) or prefixed:
                refused, why = _keywords()[1], "cannot be an alias unless quoted"
            elif at > 0 and tokens[at - 1].token_type == TokenType.ALIAS:
                continue
            else:
                refused, why = _keywords()[0], "names a column only after AS, or quoted"
            word = tokens[at].text
            if word.lower() in refused:
                raise ProgrammingError(f'syntax error at {_position(sql, tokens[at].start)}: the keyword {word!r} {why} ("{word}")')


_QUOTES = {"'": "string literal", '"': "quoted identifier", "`": "quoted identifier"}


def _token_error(sql: str, error: sqlglot.errors.TokenError) -> str:
    """The text cannot be cut into tokens: nearly always a quote or comment left open."""
    i = 0
    while i < len(sql):
        if sql.startswith("--", i):  # a comment to the end of its line, or of the text
            i = sql.find("\n", i) if "\n" in sql[i:] else len(sql)
        elif sql.startswith("/*", i):
            end = sql.find("*/", i + 2)
            if end < 0:
                return f"syntax error at {_position(sql, i)}: unterminated comment (/* without */)"
            i = end + 2
        elif sql[i] in _QUOTES:
            end = i
            while True:
                end = sql.find(sql[i], end + 1)
                if end < 0:
                    return f"syntax error at {_position(sql, i)}: unterminated {_QUOTES[sql[i]]} (the {sql[i]} here is never closed)"
                if not sql.startswith(sql[i], end + 1):  # a doubled quote stands for itself
                    break
                end += 1
            i = end + 1
        else:
            i += 1
    start = error.start or 0
    return f"syntax error: cannot read the SQL text near {sql[start:error.end or len(sql)]!r}"


_TOKEN_REPR = re.compile(r"<Token token_type: TokenType\.(\w+), text: (.*?), line: \d+, col: \d+, start: \d+, end: \d+, comments: \[.*?\]>")
_CLASS_REPR = re.compile(r"<class '(?:\w+\.)*(\w+)'>")
_MISSING = re.compile(r"Required keyword: '\w+' missing for <class '(?:\w+\.)*(\w+)'>")
_TOO_MANY = re.compile(r"The number of provided arguments \((\d+)\) is greater than the maximum number of supported arguments \((\d+)\)")
_EXPECTED = re.compile(r"Expected (.+?) but got (<Token .*>)")
_EXPECTING = re.compile(r"Expecting (\S+)$")


def _syntax_error(sql: str, tokens: list[Token], error: sqlglot.errors.ParseError) -> str:
    """sqlglot's first complaint, told with the user's tokens: what was expected, where, and
    what came instead (or that the statement ended). sqlglot reports the token it stopped at
    (by its line and last column), and describes what is missing with reprs of its own classes
    and tokens; those are translated, never shown."""
    info = error.errors[0] if error.errors else {}
    description = info.get("description") or str(error)
    index = next((i for i, t in enumerate(tokens) if t.line == info.get("line") and t.col == info.get("col")), None)
    if index is None:
        return f"syntax error: {_plain(description)}"
    token = tokens[index]
    ends = index + 1 == len(tokens) or tokens[index + 1].token_type == TokenType.SEMICOLON
    instead = ", but the statement ends there" if ends else f", found {token.text!r}"
    where = token.start
    if match := _MISSING.search(description):
        node = getattr(exp, match.group(1), None)
        if isinstance(node, type) and issubclass(node, exp.Func):
            text = f"{_called(tokens, index)} is missing an argument"
        else:  # an operator or clause without its operand: name the word it follows
            after = token if ends else tokens[index - 1]
            text = f"expected an expression after {after.text!r}{instead}"
    elif match := _TOO_MANY.search(description):
        given, most = match.groups()
        text = f"{_called(tokens, index)} takes at most {counted(int(most), 'argument')}, but {given} were given"
    elif match := _EXPECTED.search(description):
        wanted, got = match.groups()
        text = f"expected {wanted} after {token.text!r}{instead}" if "SENTINEL" in got else f"expected {wanted}, found {_plain(got)!r}"
    elif match := _EXPECTING.search(description):
        text = f"expected {match.group(1)!r}{instead}"
    elif description.startswith("Invalid expression / Unexpected token"):
        first = _statement_start(tokens, index)
        if tokens[first].token_type == TokenType.VAR:  # "SELEC 1": sqlglot stumbles only later
            token, where = tokens[first], tokens[first].start
            text = f"{token.text!r} does not begin an SQL statement"
        else:
            text = f"unexpected {token.text!r}"
    else:
        text = _plain(description)
    return f"syntax error at {_position(sql, where)}: {text}"


def _plain(description: str) -> str:
    """A sqlglot description with its token and class reprs replaced by what they stand for."""
    description = _TOKEN_REPR.sub(lambda m: "end of input" if m.group(1) == "SENTINEL" else m.group(2), description)
    return _CLASS_REPR.sub(lambda m: m.group(1).upper(), description)


def _called(tokens: list[Token], index: int) -> str:
    """'name()' of the function whose argument list holds (or is closed by) token ``index``."""
    depth = 0
    for i in range(index, 0, -1):
        kind = tokens[i].token_type
        if kind == TokenType.R_PAREN:
            depth += 1
        elif kind == TokenType.L_PAREN:
            depth -= 1
            if depth <= 0:
                return f"{tokens[i - 1].text}()"
    return "a function call"


def _statement_start(tokens: list[Token], index: int) -> int:
    """The index of the first token of the statement that token ``index`` is in."""
    for i in range(index - 1, -1, -1):
        if tokens[i].token_type == TokenType.SEMICOLON:
            return i + 1
    return 0


def _bracket_typed_literals(tokens: list[Token], reader: Dialect) -> list[Token]:
    """``DATE '2021-06-01'::VARCHAR`` as ``(DATE '2021-06-01')::VARCHAR``: sqlglot binds the
    ``::`` to the string, making ``DATE CAST('2021-06-01' AS VARCHAR)``, a DATE where DuckDB
    gives the VARCHAR (and ``TIMESTAMP '…'::DATE`` a TIMESTAMP)."""
    types = reader.parser_class.TYPE_TOKENS
    starts = {
        i for i in range(len(tokens) - 2)
        if tokens[i].token_type in types and tokens[i + 1].token_type == TokenType.STRING and tokens[i + 2].token_type == TokenType.DCOLON
        and (i == 0 or tokens[i - 1].token_type != TokenType.DCOLON)
    }
    if not starts:
        return tokens
    out: list[Token] = []
    for i, t in enumerate(tokens):
        if i in starts:
            out.append(Token(TokenType.L_PAREN, "(", t.line, t.col, t.start, t.start))
        out.append(t)
        if i - 1 in starts:
            out.append(Token(TokenType.R_PAREN, ")", t.line, t.col, t.end, t.end))
    return out


# An interval string sqlglot reads whole: a number and at most a unit ('2', '3 days')
_SIMPLE_INTERVAL = re.compile(r"\s*[+-]?\d+(\.\d*)?\s*[A-Za-z]*\s*")
_INTERVAL_UNITS = frozenset(
    u + s for u in ("YEAR", "MONTH", "WEEK", "DAY", "HOUR", "MINUTE", "SECOND", "MILLISECOND", "MICROSECOND", "QUARTER", "DECADE")
    for s in ("", "S")
) | {"CENTURY", "CENTURIES", "MILLENNIUM", "MILLENNIA"}


def _interval_strings_as_casts(tokens: list[Token]) -> list[Token]:
    """``INTERVAL '1 day 02:00:00'`` as ``CAST('1 day 02:00:00' AS INTERVAL)``, which is what
    DuckDB reads it as: sqlglot keeps only the string's first number and unit (``INTERVAL '1'
    DAY``), dropping the hours, and the sign of ``'1 day ago'``."""
    if not any(t.token_type == TokenType.INTERVAL for t in tokens):
        return tokens
    out: list[Token] = []
    skip = False
    for i, t in enumerate(tokens):
        if skip:
            skip = False
            continue
        after = tokens[i + 2] if i + 2 < len(tokens) else None
        if (t.token_type == TokenType.INTERVAL and i + 1 < len(tokens) and tokens[i + 1].token_type == TokenType.STRING
                and not _SIMPLE_INTERVAL.fullmatch(tokens[i + 1].text)
                and not (after is not None and after.token_type == TokenType.VAR and after.text.upper() in _INTERVAL_UNITS)):
            text = tokens[i + 1]
            out += [Token(TokenType.VAR, "CAST", t.line, t.col, t.start, t.end), Token(TokenType.L_PAREN, "(", t.line, t.col, t.end, t.end),
                    text, Token(TokenType.ALIAS, "AS", text.line, text.col, text.end, text.end),
                    Token(TokenType.INTERVAL, "INTERVAL", text.line, text.col, text.end, text.end),
                    Token(TokenType.R_PAREN, ")", text.line, text.col, text.end, text.end)]
            skip = True
            continue
        out.append(t)
    return out


_UNICODE_ESCAPE = re.compile(r"(?<!\\)(?:\\\\)*\\[uU]")


def _check_escape_strings(sql: str, tokens: list[Token]) -> None:
    """Refuse a ``\\u`` escape in an ``E'...'`` string, as DuckDB does: sqlglot's tokenizer
    dropped its backslash, and ``e'\\u00e9'`` was the text ``u00e9``."""
    for token in tokens:
        if token.token_type == TokenType.BYTE_STRING and _UNICODE_ESCAPE.search(sql[token.start:token.end + 1]):
            raise ProgrammingError(f"a \\u escape in an E'...' string is not supported, as in DuckDB (at {_position(sql, token.start)})")


def _check_empty_identifiers(sql: str, tokens: list[Token]) -> None:
    """Refuse ``""``, a name of no characters, anywhere, as DuckDB's parser does: ``SELECT 4 AS ""``
    was answered, its column named ``4`` (only CREATE refused it)."""
    for token in tokens:
        if token.token_type == TokenType.IDENTIFIER and token.text == "":
            raise ProgrammingError(f'syntax error at {_position(sql, token.start)}: an empty name ("") is not a name: DuckDB refuses it too')


_QUOTED_ALL = "\x00qengine quoted all\x00"  # no name a statement can spell: SQL text holds no NUL


def _quoted_all_apart(tokens: list[Token]) -> list[Token]:
    """A quoted ``"all"`` under another name while sqlglot parses: it reads ``ORDER BY "all"``
    as ``ORDER BY ALL`` (every select item), where the user named a column."""
    return [Token(t.token_type, _QUOTED_ALL + t.text, t.line, t.col, t.start, t.end, t.comments)
            if t.token_type == TokenType.IDENTIFIER and t.text.upper() == "ALL" else t for t in tokens]


def _restore_quoted_all(statement: exp.Expression) -> None:
    for node in statement.find_all(exp.Identifier):
        if isinstance(node.this, str) and node.this.startswith(_QUOTED_ALL):
            node.set("this", node.this.removeprefix(_QUOTED_ALL))


_ACCESSED = {TokenType.VAR, TokenType.IDENTIFIER, TokenType.R_PAREN, TokenType.R_BRACKET, TokenType.R_BRACE, TokenType.STRING}


def _leading_point_numbers(tokens: list[Token]) -> list[Token]:
    """``.5`` as the one number it is: sqlglot reads it as ``0.5``, a DECIMAL(2,1) where
    DuckDB's is a DECIMAL(1,1), whose text is ``.5``. A point after a name, a closing bracket
    or a string is a field access, and stays one."""
    out: list[Token] = []
    for t in tokens:
        if (out and out[-1].token_type == TokenType.DOT and out[-1].end + 1 == t.start and t.token_type == TokenType.NUMBER
                and t.text[:1].isdigit() and (len(out) == 1 or out[-2].token_type not in _ACCESSED)):
            point = out.pop()
            t = Token(TokenType.NUMBER, "." + t.text, point.line, point.col, point.start, t.end)
        out.append(t)
    return out


def _keep_struct_key_case(statement: exp.Expression) -> None:
    """Keep a struct's field names as written: sqlglot parses ``{'Ab': 1}`` and
    ``struct_pack(Ab := 1)`` with the names as identifiers, which its normalization lowercases,
    and the struct came out as ``{'ab': 1}`` where DuckDB keeps ``Ab``."""
    for node in statement.find_all(exp.Struct, exp.Anonymous, exp.DataType):
        if isinstance(node, exp.Anonymous) and node.name.lower() != "struct_insert":
            continue
        if isinstance(node, exp.DataType) and not node.is_type(exp.DataType.Type.STRUCT):
            continue
        for field in node.expressions:  # a struct type's fields too: CAST(x AS STRUCT("Key" INT))
            if isinstance(field, exp.PropertyEQ | exp.ColumnDef) and isinstance(field.this, exp.Identifier):
                field.this.meta["case_sensitive"] = True


def _within_group_as_ordered(statement: exp.Expression) -> None:
    """``percentile_cont(p) WITHIN GROUP (ORDER BY x)`` (and ``percentile_disc``, ``mode()``) as
    the ordered aggregate DuckDB makes of it, ``quantile_cont(x, p ORDER BY x)``: the planner
    knows that form, where the WITHIN GROUP one hid the aggregate's argument from it, and the
    query failed with ``x`` "must appear in the GROUP BY clause"."""
    for node in list(statement.find_all(exp.WithinGroup)):
        function, order = node.this, node.expression
        name = function.sql_name() if isinstance(function, exp.Func) else function.sql()
        if not isinstance(order, exp.Order) or len(order.expressions) != 1:
            raise NotSupportedError(f"{name}() WITHIN GROUP takes one ORDER BY key in qengine, as in DuckDB")
        key = order.expressions[0]
        if isinstance(function, exp.PercentileCont | exp.PercentileDisc) and function.expression is None:
            rewritten: exp.Expression = function.__class__(this=key.this.copy(), expression=exp.Order(this=function.this, expressions=[key]))
        elif isinstance(function, exp.Mode) and function.this is None:
            rewritten = exp.Mode(this=exp.Order(this=key.this.copy(), expressions=[key]))
        else:
            raise NotSupportedError(f"{name}() WITHIN GROUP is not supported: DuckDB orders percentile_cont, percentile_disc and mode so")
        node.replace(rewritten)


def name_outputs(statement: exp.Expression, dialect: str) -> None:
    """Name unaliased result expressions the way DuckDB does ("count(x)", "(a + 1)"), rather
    than the optimizer's "_col_0": the statement's, and those of every derived table, CTE and
    (expanded) view, whose names ``SELECT *`` over them shows."""
    for query in [statement, *(node.this for node in statement.find_all(exp.Subquery, exp.CTE) if node is not statement)]:
        _name_select_outputs(query)


def _name_select_outputs(query: exp.Expression) -> None:
    while isinstance(query, exp.SetOperation):
        query = query.this
    if not isinstance(query, exp.Select):
        return
    for e in list(query.expressions):
        if isinstance(e, exp.Alias | exp.Column | exp.Star) or _expands_a_star(e):
            continue
        name = _output_name(e)
        # an Alias node even around a subquery, which ``alias_`` would give a table alias of
        # its own: sqlglot's ORDER BY and GROUP BY positions take only an Alias for a name
        e.replace(exp.Alias(this=e.copy(), alias=exp.to_identifier(name, quoted=True)))


def _expands_a_star(e: exp.Expression) -> bool:
    """Whether a select item holds a star that stands for columns, not ``count(*)`` or a star
    of a subquery inside it: a scalar subquery of ``count(*)`` went unnamed, and ORDER BY its
    position failed inside sqlglot."""
    inner = {id(star) for query in e.find_all(exp.Subquery) for star in query.find_all(exp.Star)}
    return any(id(star) not in inner and not isinstance(star.parent, exp.Count) for star in e.find_all(exp.Star))


def written_aliases(statement: exp.Expression) -> dict[int, str]:
    """Output position → the alias as the user wrote it, for the result's column names.

    The optimizer lower-cases unquoted names, but DuckDB names a result column after its alias
    as written (``AS "A"``, ``AS TotalSales``). Positions hold only where no ``*`` expands."""
    query = statement
    while isinstance(query, exp.SetOperation):
        query = query.this
    if not isinstance(query, exp.Select) or any(isinstance(e.unalias(), exp.Star) or e.unalias().is_star for e in query.expressions):
        return {}
    return {i: e.args["alias"].this for i, e in enumerate(query.expressions) if isinstance(e, exp.Alias) and e.args.get("alias")}


def normalize_null_ordering(statement: exp.Expression, dialect: str) -> None:
    """Make NULLS FIRST/LAST explicit everywhere, so range partitioning and DuckDB agree."""
    ordering = Dialect.get_or_raise(dialect).NULL_ORDERING
    for ordered in statement.find_all(exp.Ordered):
        if ordered.args.get("nulls_first") is None:
            desc = bool(ordered.args.get("desc"))
            if ordering == "nulls_are_small":
                first = not desc
            elif ordering == "nulls_are_large":
                first = desc
            else:
                first = ordering == "nulls_are_first"
            ordered.set("nulls_first", first)


def expand_sources(statement: exp.Expression, catalog: Catalog, dialect: str, depth: int = 0) -> exp.Expression:
    """Inline views and turn read_parquet()/read_csv() in FROM into catalog tables, and the
    tables ``planner.table_sources`` reads (file names, read_json(), range()) too; a name the
    catalog does not have is the query ``catalog.unknown_table`` finds for it, if any."""
    if depth > 32:
        raise ProgrammingError("views nest more than 32 deep (a view that refers to itself?)")
    if any(isinstance(u.parent, exp.From | exp.Join) for u in statement.find_all(exp.Unnest)):
        raise NotSupportedError("table function unnest() is not supported (unnest() in the select list is)")
    for table in list(statement.find_all(exp.Table)):
        func = table.this
        if isinstance(func, exp.Func):
            # The name as the user wrote it: sqlglot reads range() as a GenerateSeries node, and
            # writes it back (in the dialect it was read in) as range() again.
            fname = func.sql(dialect=dialect).split("(")[0].lower()
            if not table_sources.expand_call(table, fname, catalog, dialect):
                raise NotSupportedError(f"table function {fname}() is not supported")
            continue
        if not isinstance(table.this, exp.Identifier) or not _unqualified(table):
            continue
        view = catalog.views.get(table.name.lower())
        if _is_cte_reference(table):
            continue
        written = table.args.get("alias")
        if view is not None:
            body = expand_sources(view.query.copy(), catalog, dialect, depth + 1)
        elif table.name.lower() in catalog.tables:
            if written is not None and written.columns:
                # t AS x(a, b) renames t's first columns: sqlglot's qualifier shows the new
                # names but binds them to the old columns, so a swap (x(k, uid)) read k as uid
                source = table.copy()
                source.set("alias", None)
                names = catalog.table(table.name).schema.names
                if len(written.columns) > len(names):
                    raise ProgrammingError(f'table "{written.name}" has {len(names)} columns available but {len(written.columns)} columns specified')
                columns = [exp.column(c, quoted=True) for c in names]
                table.replace(exp.Subquery(this=exp.select(*columns).from_(source), alias=written.copy()))
            continue
        elif (
            table_sources.expand_file(table, catalog)  # a file named as a table
            or (body := catalog.unknown_table(table.name)) is None  # a DataFrame the caller holds, or none
        ):
            continue
        alias = written.copy() if written is not None and written.columns else exp.TableAlias(this=exp.to_identifier(table.alias or table.name))
        inlined = exp.Subquery(this=body, alias=alias)
        if view is not None:
            inlined.meta[_VIEW] = view.name
        table.replace(inlined)
    if depth == 0:
        _check_no_cte_hides_a_views_table(statement)
    return statement


_VIEW = "qengine_view"  # the meta key of an inlined view's subquery: the view's name


def _check_no_cte_hides_a_views_table(statement: exp.Expression) -> None:
    """Refuse a WITH query named like a table an inlined view reads.

    DuckDB binds a view's body on its own, where the query's WITH names are not seen; inlined
    here, the body's ``t`` would read the query's ``WITH t AS (...)`` instead of table ``t``."""
    views = [s for s in statement.find_all(exp.Subquery) if s.meta.get(_VIEW)]
    if not views:
        return
    inside = {id(n) for v in views for n in v.this.walk()}
    ctes = {cte.alias_or_name.lower() for cte in statement.find_all(exp.CTE) if id(cte) not in inside}
    for view in views:
        for table in view.this.find_all(exp.Table):
            name = table.name.lower()
            if name in ctes and isinstance(table.this, exp.Identifier) and not _is_cte_reference(table, within=view):
                raise NotSupportedError(
                    f"the WITH query {table.name!r} hides table {table.name!r}, which view {view.meta[_VIEW]!r} reads: "
                    "give the WITH query another name"
                )


# Where every table and view is, in DuckDB's names for its in-memory database (as
# information_schema and the Flight SQL metadata report them).
CATALOG, SCHEMA = "memory", "main"


def _unqualified(table: exp.Table) -> bool:
    """Drop a table name's ``main.`` or ``memory.main.`` (what BI tools write); whether it now
    names a catalog table or view. ``information_schema`` keeps its name; any other catalog or
    schema holds nothing, and saying so beats reading the table of the same name elsewhere."""
    schema, database = table.db, table.catalog
    if not schema and not database:
        return True
    if schema.lower() == "information_schema" and not database:  # api.system_tables' to fill in
        return False
    if schema.lower() != SCHEMA or database.lower() not in ("", CATALOG):
        where = f"{database}.{schema}" if database else schema
        raise ProgrammingError(f"no schema {where!r}: tables and views are in {CATALOG}.{SCHEMA} (or named without a schema)")
    table.set("db", None)
    table.set("catalog", None)
    return True


def _is_cte_reference(table: exp.Table, within: exp.Expression | None = None) -> bool:
    """Whether ``table`` names a WITH query of a query around it (below ``within``, if given)."""
    return cte_of(table, within) is not None


def factor_disjunctions(statement: exp.Expression) -> exp.Expression:
    """Rewrite (A AND B) OR (A AND C) as A AND (B OR C) in every predicate.

    Pulling a shared correlated equality out of an OR lets the optimizer turn the subquery
    into a join (TPC-DS q41 needs this).
    """

    def visit(node: exp.Expression) -> exp.Expression:
        if not isinstance(node, exp.Or):
            return node
        branches = [list(b.flatten()) if isinstance(b, exp.And) else [b] for b in unparen(node).flatten()]
        if len(branches) < 2:
            return node
        keys = [{c.sql(): c for c in (unparen(x) for x in b)} for b in branches]
        common = set(keys[0]).intersection(*keys[1:])
        if not common:
            return node
        shared = [keys[0][k] for k in keys[0] if k in common]
        rests = [[c for k, c in kb.items() if k not in common] for kb in keys]
        if any(not r for r in rests):
            return exp.paren(exp.and_(*[c.copy() for c in shared]))
        either = exp.or_(*[exp.paren(exp.and_(*[c.copy() for c in r])) for r in rests])
        return exp.paren(exp.and_(*[c.copy() for c in shared], exp.paren(either)))

    return statement.transform(visit, copy=False)


def spell_out_null_safe(statement: exp.Expression) -> exp.Expression:
    """Rewrite ``x IS [NOT] DISTINCT FROM <constant>`` as ``(x IS NULL OR x <> c)`` and
    ``(x IS NOT NULL AND x = c)``, which mean the same for a constant that is not NULL.

    DuckDB 1.5.5 prunes an OR of filters on one column by that column's statistics and takes
    IS DISTINCT FROM for a comparison that NULL fails: over a column with only NULLs,
    ``c IS DISTINCT FROM ' ' OR c < 'a'`` keeps no row (every row qualifies). A partition of an
    exchange often holds only NULLs in a column (a ROLLUP's total rows), so fragments met it
    where DuckDB's own plan did not.
    """

    def visit(node: exp.Expression) -> exp.Expression:
        if not isinstance(node, exp.NullSafeEQ | exp.NullSafeNEQ):
            return node
        value, constant = node.this, node.expression
        if _non_null_constant(value):
            value, constant = constant, value
        if not _non_null_constant(constant):
            return node
        if isinstance(node, exp.NullSafeNEQ):
            return exp.paren(exp.or_(exp.Is(this=value.copy(), expression=exp.null()), exp.NEQ(this=value.copy(), expression=constant.copy())))
        return exp.paren(exp.and_(exp.not_(exp.Is(this=value.copy(), expression=exp.null())), exp.EQ(this=value.copy(), expression=constant.copy())))

    return statement.transform(visit, copy=False)


def _non_null_constant(e: exp.Expression) -> bool:
    e = unparen(e)
    if isinstance(e, exp.Cast) and not isinstance(e, exp.TryCast):  # TRY_CAST('B' AS BIGINT) is NULL
        e = unparen(e.this)
    if isinstance(e, exp.Neg):
        e = e.this
    return isinstance(e, exp.Literal | exp.Boolean)


def deduplicated(names: list[str]) -> list[str]:
    """Column names made unique as DuckDB makes a new table's (QueryResult::DeduplicateColumns):
    a repeated name, compared without case, gets the suffix _1 (or the first _n not taken).
    ``CREATE TABLE t AS SELECT 1 AS a, 2 AS a`` makes columns a and a_1 there; so it does here."""
    taken: dict[str, int] = {}
    out = []
    for name in names:
        low = name.lower()
        if low not in taken:
            taken[low] = 1
            out.append(name)
            continue
        new = f"{name}_{taken[low]}"
        while new.lower() in taken:
            taken[low] += 1
            new = f"{name}_{taken[low]}"
        taken[new.lower()] = 1
        out.append(new)
    return out


def unique_inner_columns(statement: exp.Expression) -> exp.Expression:
    """Rename repeated output names of derived tables, CTEs and views as DuckDB does (a, a_1):
    ``SELECT * FROM (SELECT 1 AS a, 2 AS a)`` has columns a and a_1 there, where sqlglot's
    optimizer cannot plan a derived table with two columns of one name."""
    for node in list(statement.find_all(exp.Subquery, exp.CTE)):
        query = node.this
        while isinstance(query, exp.SetOperation):
            query = query.this
        if not isinstance(query, exp.Select) or any(e.is_star for e in query.expressions):
            continue
        names = [e.alias_or_name for e in query.expressions]
        unique = deduplicated(names)
        for e, name, new in zip(list(query.expressions), names, unique, strict=True):
            if new != name:
                e.replace(exp.alias_(e.unalias().copy(), new, quoted=True))
    return statement


def _semi_join_aliases_apart(statement: exp.Expression, schema: dict[str, dict[str, str]]) -> None:
    """Give the right side of a SEMI or ANTI JOIN an alias no column has, where its own does:
    sqlglot's qualifier does not see that side as a table, and read ``p.q`` in its ON as field q
    of a STRUCT column p of the left side (DuckDB reads column q of p). Its columns are visible
    in its ON alone, so nothing else reads the alias."""
    columns = {c.lower() for table in schema.values() for c in table}
    for n, join in enumerate(statement.find_all(exp.Join)):
        if (join.kind or "").upper() not in ("SEMI", "ANTI") or join.args.get("on") is None:
            continue
        alias = join.this.alias_or_name
        if alias.lower() not in columns:
            continue
        apart = f"{alias}_semi{n}"
        join.this.set("alias", exp.TableAlias(this=exp.to_identifier(apart)))
        for column in join.args["on"].find_all(exp.Column):
            if column.table.lower() == alias.lower():
                column.set("table", exp.to_identifier(apart))


def exists_select_one(statement: exp.Expression) -> exp.Expression:
    """Rewrite EXISTS (SELECT * ...) as EXISTS (SELECT 1 ...): the subquery's columns are never
    read, but once it is decorrelated into a join its star would carry every column of its
    tables along (TPC-DS q10, q35 and q69 read all 28 of date_dim's, three times each)."""
    for node in statement.find_all(exp.Exists):
        select = node.this
        if isinstance(select, exp.Select) and len(select.expressions) == 1 and isinstance(select.expressions[0], exp.Star):
            select.set("expressions", [exp.Literal.number(1)])
    return statement


def subquery_conditions_in_parentheses(statement: exp.Expression) -> exp.Expression:
    """Put a scalar subquery that is the whole of a JOIN's ON in parentheses: as a child of the
    join, sqlglot's scopes take it for a joined table, and its optimizer failed on it (an
    internal KeyError). In parentheses it is an expression, as it is in DuckDB."""
    for join in statement.find_all(exp.Join):
        condition = join.args.get("on")
        if isinstance(condition, exp.Subquery):
            join.set("on", exp.Paren(this=condition))
    return statement


def position(term: exp.Expression) -> int | None:
    """The number an integer constant in GROUP BY or ORDER BY (or inside ROLLUP, CUBE and
    GROUPING SETS) stands for, a select item's position if it is in range; None for a term that
    is no integer constant. Parentheses and a minus sign count: ``(2)`` is 2, ``-1`` is -1."""
    term = unparen(term)
    literal = term.this if isinstance(term, exp.Neg) else term
    if not (isinstance(literal, exp.Literal) and literal.is_int):
        return None
    return int(literal.name) if term is literal else -int(literal.name)


def unparen(e: exp.Expression) -> exp.Expression:
    """``e`` without enclosing parentheses (sqlglot's ``unnest`` would also open a subquery)."""
    while isinstance(e, exp.Paren):
        e = e.this
    return e


def referenced_tables(statement: exp.Expression) -> set[str]:
    return {t.name.lower() for t in statement.find_all(exp.Table) if isinstance(t.this, exp.Identifier)}


def optimize_query(query: exp.Expression, catalog: Catalog, dialect: str) -> exp.Expression:
    """Qualify, decorrelate and push down; unknown tables and columns become ProgrammingErrors."""
    cte_aliases_as_derived_tables(query)
    query = subquery_conditions_in_parentheses(exists_select_one(factor_disjunctions(spell_out_null_safe(unique_inner_columns(query)))))
    query = _values_of_subqueries_as_selects(query)
    _name_values_columns(query)
    ctes = {cte.alias_or_name.lower() for cte in query.find_all(exp.CTE)}
    schema = {}
    for name in referenced_tables(query) - ctes:
        schema[name] = catalog.table(name).sql_schema()
    check_alias_widths(query, schema)
    _semi_join_aliases_apart(query, schema)
    name_struct_fields(query, schema, dialect)
    _check_star_lists(query, schema, dialect)
    _order_by_all_as_positions(query, schema, dialect)
    _order_by_the_alias_of_a_repeated_name(query)
    _check_positions(query)
    # optimize() would have qualify wrap every joined table in a subquery of its own, for the
    # rules after it to prune and merge back: with qengine's own pushdown that only tripled the
    # rules' time (without it, TPC-DS's 99 plans have the same stages, scans, joins and
    # aggregates; column numbers and renaming projections differ). The query is
    # the planner's own copy (views are copied as they are expanded), so it is not copied again.
    try:
        optimized = optimize(
            query, schema=schema, dialect=dialect, infer_schema=False, rules=_RULES, isolate_tables=False, copy=False
        )
    except sqlglot.errors.OptimizeError as e:
        raise _optimizer_error(str(e).splitlines()[0], query, schema) from e
    except sqlglot.errors.SqlglotError as e:
        raise ProgrammingError(_plain(str(e).splitlines()[0])) from e
    _refuse_rows_as_values(optimized)
    # The parser's positions on every identifier are not used past this point, and every copy
    # of a node deep-copies them in Python: dropping them makes the planner's copies cheaper.
    for node in optimized.walk():
        node._meta = None
    return optimized


def _refuse_rows_as_values(query: exp.Expression) -> None:
    """Refuse a table's name used as a value (``to_json(t)``, ``first(t)``), which DuckDB reads
    as the whole row, a STRUCT of every column: sqlglot's qualifier marks it (a TableColumn),
    and DuckDB then read the planner's own relation of that name, with its internal columns."""
    node = query.find(exp.TableColumn)
    if node is not None:
        raise NotSupportedError(f"a table's name as a value ({node.name!r}, its whole row) is not supported: "
                                "name its columns, as in struct_pack(a, b) or {'a': a}")


def _check_star_lists(query: exp.Expression, schema: dict[str, dict[str, str]], dialect: str) -> None:
    """Refuse a column in a star's EXCLUDE or REPLACE list that the star does not select.

    sqlglot's qualification skips such a name silently, where DuckDB fails. What a star
    selects is found by qualifying a copy of the query (once for each such star, in the rare
    query that has one) in which that star is without its lists and between two markers."""
    count = sum(1 for node in query.find_all(exp.Star) if is_listed_star(node))
    for i in range(count):
        copy = query.copy()
        star = [node for node in copy.find_all(exp.Star) if is_listed_star(node)][i]
        excluded = [e.name for e in star.args.get("except_") or []]
        replaced = [e.alias for e in star.args.get("replace") or []]
        item = star.parent if isinstance(star.parent, exp.Column) else star
        select = item.parent
        if not isinstance(select, exp.Select):
            continue
        star.set("except_", None)
        star.set("replace", None)
        begin, end = exp.Literal.string("__qengine_star_begin"), exp.Literal.string("__qengine_star_end")
        at = select.expressions.index(item)
        select.set("expressions", [*select.expressions[:at], begin, item, end, *select.expressions[at + 1:]])
        try:
            qualified = qualify(copy, schema=schema, dialect=dialect, isolate_tables=False)
        except sqlglot.errors.SqlglotError:
            return  # the query itself fails as it would have
        for select in qualified.find_all(exp.Select):
            items = [e.unalias() for e in select.expressions]
            if begin in items:
                break
        selected = {e.alias_or_name.lower() for e in select.expressions[items.index(begin) + 1:items.index(end)]}
        for kind, names in (("EXCLUDE", excluded), ("REPLACE", replaced)):
            missing = next((n for n in names if n.lower() not in selected), None)
            if missing is not None:
                where = item.table if isinstance(item, exp.Column) else "the FROM clause"
                raise ProgrammingError(f"column {missing!r} in {kind} list not found in {where}")


def _order_by_all_as_positions(query: exp.Expression, schema: dict[str, dict[str, str]], dialect: str) -> None:
    """``ORDER BY ALL [DESC] [NULLS …]`` as DuckDB means it: by every select item, left to
    right, each in the direction and null order given. Written here as the items' positions.
    A select list with a star is counted on a qualified copy of the query, where its stars are
    expanded (the copy's own ORDER BY ALL left out, which its qualifier would take for a column)."""
    holders = list(query.find_all(exp.Select, exp.SetOperation))
    targets = [i for i, node in enumerate(holders) if _ordered_by_all(node)]
    if not targets:
        return
    widths: dict[int, int] = {}
    starred = [i for i in targets if any(e.unalias().is_star for e in holders[i].selects)]
    if starred:
        copy = query.copy()
        copies = list(copy.find_all(exp.Select, exp.SetOperation))
        for i in targets:
            copies[i].set("order", None)
        try:
            qualify(copy, schema=schema, dialect=dialect, isolate_tables=False)
        except sqlglot.errors.SqlglotError:
            return  # the query itself fails as it would have
        widths = {i: len(copies[i].selects) for i in starred}
    for i in targets:
        node = holders[i]
        term = node.args["order"].expressions[0]
        width = widths.get(i, len(node.selects))
        node.args["order"].set("expressions", [
            exp.Ordered(this=exp.Literal.number(n), desc=term.args.get("desc"), nulls_first=term.args.get("nulls_first"))
            for n in range(1, width + 1)
        ])


def _order_by_the_alias_of_a_repeated_name(query: exp.Expression) -> None:
    """``SELECT -k AS k, k ... ORDER BY k`` orders by the item named by ``AS``, as DuckDB
    does; sqlglot took the plain column of that name. Written as that item's position."""
    for select in query.find_all(exp.Select):
        order = select.args.get("order")
        if order is None:
            continue
        items = select.expressions
        for term in order.expressions:
            if not isinstance(term.this, exp.Column) or term.this.table:
                continue
            name = term.this.name.lower()
            named = [i for i, e in enumerate(items) if isinstance(e, exp.Alias) and e.alias.lower() == name]
            plain = [e for e in items if not isinstance(e, exp.Alias) and e.alias_or_name.lower() == name]
            if len(named) == 1 and plain:
                term.set("this", exp.Literal.number(named[0] + 1))


def _ordered_by_all(node: exp.Expression) -> bool:
    order = node.args.get("order")
    return order is not None and len(order.expressions) == 1 and is_order_by_all(order.expressions[0])


def _values_of_subqueries_as_selects(query: exp.Expression) -> exp.Expression:
    """VALUES whose rows hold a subquery, as the UNION ALL of one SELECT per row, as DuckDB reads
    them (the columns' types each row's common type): a VALUES list is run as it is written, where
    a subquery's tables are not found. Returns the query (a new one if it was such VALUES)."""
    for values in list(query.find_all(exp.Values)):
        rows = values.expressions
        if not rows or not any(row.find(exp.Query) for row in rows):
            continue
        items = [row.expressions if isinstance(row, exp.Tuple) else [row] for row in rows]
        if any(len(i) != len(items[0]) for i in items):
            raise ProgrammingError("VALUES rows must all have the same number of columns")
        alias = values.args.get("alias")
        named = [c.name for c in alias.columns] if alias is not None else []
        names = named + [f"col{i}" for i in range(len(named), len(items[0]))]
        selects = [exp.select(*(exp.Alias(this=e.copy(), alias=exp.to_identifier(n, quoted=True)) for e, n in zip(i, names, strict=True)))
                   for i in items]
        union = functools.reduce(lambda a, b: exp.union(a, b, distinct=False), selects)
        if values is query:
            return union
        table = alias.this.copy() if alias is not None and alias.this else exp.to_identifier("valueslist")
        values.replace(exp.Subquery(this=union, alias=exp.TableAlias(this=table)))
    return query


def _name_values_columns(query: exp.Expression) -> None:
    """VALUES in FROM names its columns col0, col1, … beyond those its alias names, as DuckDB
    does; left to sqlglot they were _col_0, and ``SELECT col0`` was not found."""
    for values in query.find_all(exp.Values):
        if not isinstance(values.parent, exp.From | exp.Join) or not values.expressions:
            continue
        width = len(values.expressions[0].expressions) if isinstance(values.expressions[0], exp.Tuple) else 1
        alias = values.args.get("alias") or exp.TableAlias(this=exp.to_identifier("valueslist"))
        named = list(alias.columns)
        alias.set("columns", named + [exp.to_identifier(f"col{i}") for i in range(len(named), width)])
        values.set("alias", alias)


def _check_positions(query: exp.Expression) -> None:
    """Refuse GROUP BY and ORDER BY positions outside the select list, as DuckDB does: sqlglot
    looks position 0 up as Python's index -1, so ``ORDER BY 0`` ordered by the last item."""
    for select in query.find_all(exp.Select, exp.SetOperation):  # a set operation's ORDER BY too
        items = select.selects
        count = None if any(e.unalias().is_star for e in items) else len(items)
        for clause in ("group", "order"):
            holder = select.args.get(clause)
            for term in holder.expressions if holder is not None else []:
                number = position(term.this if isinstance(term, exp.Ordered) else term)
                if number is not None and (number < 1 or (count is not None and number > count)):
                    within = f" (1 to {count})" if count is not None else ""
                    raise ProgrammingError(f"{clause.upper()} BY position {number} is not in the select list{within}")


_UNRESOLVED = re.compile(r"Column '(.+?)' could not be resolved(?: for table: '(.+?)')?\.(?: Line: (\d+), Col: (\d+))?")
_AMBIGUOUS = re.compile(r"Ambiguous column '(.+?)'(?: \(Line: (\d+), Col: (\d+)\))?")


def _optimizer_error(message: str, query: exp.Expression, schema: dict[str, dict[str, str]]) -> Error:
    """What sqlglot's optimizer could not make of the query, said with the user's names.

    sqlglot reports a column it cannot place as "could not be resolved" whether no table in
    reach has it or several do; the two are told apart here from the tables in its scope.
    """
    if match := _UNRESOLVED.match(message):
        name, table, line, col = match.groups()
        return _unresolved(query, schema, name, table, line, col)
    if match := _AMBIGUOUS.match(message):
        name, line, col = match.groups()
        return _unresolved(query, schema, name, None, line, col)
    if match := re.match(r"Unknown column: (.+)", message):
        name = match.group(1)
        column = next((c for c in query.find_all(exp.Column) if c.name == name and c.table), None)
        owner = f"table {column.table!r}" if column is not None else "its table"
        return ProgrammingError(f"{owner} has no column {name!r}{_at(column)}")
    if match := re.match(r"Unknown table: (.+)", message):
        return ProgrammingError(f"table or alias {match.group(1)!r} not found in the FROM clause")
    if match := re.match(r"Unknown output column: (.+)", message):
        return ProgrammingError(f"position {match.group(1)} in GROUP BY or ORDER BY is not a column of the select list")
    if match := re.match(r"Alias already used: (.+)", message):
        return ProgrammingError(f"table alias {match.group(1)!r} is used twice in one FROM clause; give each its own alias")
    if match := re.match(r"Cannot automatically join: (.+)", message):
        return ProgrammingError(f"column {match.group(1)!r} of USING is not a column of both joined tables")
    if message.startswith("Invalid set operation due to column mismatch"):
        for op in query.find_all(exp.SetOperation):
            left, right = len(op.left.named_selects), len(op.right.named_selects)
            if left != right:
                return ProgrammingError(f"the two sides of {op.key.upper()} have {left} and {right} columns; they must have as many")
    if "projection_reachability requires star-free" in message:
        return NotSupportedError("a star over a derived table or CTE whose stars select two columns of one name "
                                 "(SELECT * FROM (SELECT a.*, b.* FROM a JOIN b USING ...)) is not supported: alias one of them inside")
    return NotSupportedError(f"cannot plan this query: {_plain(message)}")


def _unresolved(
    query: exp.Expression, schema: dict[str, dict[str, str]], name: str, table: str | None, line: str | None, col: str | None
) -> ProgrammingError:
    """An unknown or ambiguous column, named with the tables of the scope it appears in."""
    candidates = [c for c in query.find_all(exp.Column) if c.name == name and (c.table or None) == table]
    column = next((c for c in candidates if str(c.this.meta.get("line")) == line and str(c.this.meta.get("col")) == col), None)
    column = column or next(iter(candidates), None)
    at = _at(column)
    if table is not None:
        return ProgrammingError(f"table or alias {table!r} of {table}.{name} not found in the FROM clause{at}")
    scope = next((s for s in traverse_scope(query) if any(c is column for c in s.columns)), None) if column is not None else None
    sources = scope.selected_sources if scope is not None else {}
    if not sources:
        return ProgrammingError(f"column {name!r} not found{at}: the query has no FROM clause")
    shown = {alias: _shown(alias, source) for alias, (_, source) in sources.items()}
    owners = [alias for alias, (_, source) in sources.items() if name.lower() in _columns_of(source, schema)]
    if len(owners) > 1:
        tables = ", ".join(shown[a] for a in owners[:-1]) + f" and {shown[owners[-1]]}"
        have = "both have it" if len(owners) == 2 else "all have it"
        return ProgrammingError(f"column {name!r} is ambiguous{at}: {tables} {have}; qualify it, e.g. {owners[0]}.{name}")
    return ProgrammingError(f"column {name!r} not found in {', '.join(shown.values())}{at}")


def _at(column: exp.Column | None) -> str:
    """' at line L, column C' of a column as written, if the parser left its position."""
    meta = column.this.meta if column is not None else {}
    if not {"line", "col", "start", "end"} <= meta.keys():
        return ""
    return f" at line {meta['line']}, column {meta['col'] - (meta['end'] - meta['start'])}"


def _shown(alias: str, source: exp.Table | Scope) -> str:
    """A FROM item as the user knows it: its alias, with the table's name when they differ."""
    if isinstance(source, exp.Table) and source.name.lower() != alias.lower() and not source.name.startswith("__"):
        return f"{alias} ({source.name})"
    return alias


def _columns_of(source: exp.Table | Scope, schema: dict[str, dict[str, str]]) -> set[str]:
    """The lower-cased columns of a FROM item: a catalog table's, or a subquery's or CTE's outputs."""
    names = schema.get(source.name.lower(), {}) if isinstance(source, exp.Table) else source.expression.named_selects
    return {n.lower() for n in names}
