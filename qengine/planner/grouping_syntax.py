"""Conditions in ROLLUP, CUBE and GROUPING SETS lists: ``GROUP BY ROLLUP (k IS NOT NULL)``.

sqlglot's parser reads each element of these lists as an arithmetic expression, so a
comparison, IS, IN, BETWEEN, LIKE, NOT, AND or OR there is a syntax error to it, where DuckDB
takes the element whole; put in parentheses, the same element is read whole by sqlglot too. A
statement that does not parse is parsed once more with each element of such a list put in
parentheses (but for those that are already, the empty set and nested lists); if that fails
as well, the first error stands. Statements that parse are left exactly as they were.
"""

from __future__ import annotations

import sqlglot.errors
import sqlglot.expressions as exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.tokens import Token, TokenType

_LISTS = (TokenType.ROLLUP, TokenType.CUBE, TokenType.GROUPING_SETS)


def parse_tokens(reader: Dialect, tokens: list[Token], sql: str) -> list[exp.Expression | None]:
    """``reader``'s parse of ``tokens``, retried with grouping list elements in parentheses."""
    try:
        return reader.parser().parse(tokens, sql)
    except sqlglot.errors.ParseError as error:
        wrapped = _parenthesized(tokens)
        if wrapped is None:
            raise
        try:
            return reader.parser().parse(wrapped, sql)
        except sqlglot.errors.ParseError:
            raise error from None


def _parenthesized(tokens: list[Token]) -> list[Token] | None:
    """``tokens`` with every grouping list element in parentheses, or None if there is none."""
    opening = {i + 1 for i, t in enumerate(tokens[:-1]) if t.token_type in _LISTS and tokens[i + 1].token_type == TokenType.L_PAREN}
    if not opening:
        return None
    out: list[Token] = []
    lists: list[int] = []  # the depth of each open list
    starts: list[int] = []  # where in ``out`` the element being read in each open list starts
    depth = 0
    for i, token in enumerate(tokens):
        kind = token.token_type
        ends_element = bool(lists) and depth == lists[-1] and kind in (TokenType.COMMA, TokenType.R_PAREN)
        if ends_element:
            _wrap(out, starts.pop())
        if kind == TokenType.R_PAREN:
            if lists and depth == lists[-1]:
                lists.pop()
            depth -= 1
        out.append(token)
        if kind == TokenType.L_PAREN:
            depth += 1
            if i in opening:
                lists.append(depth)
        if (i in opening or ends_element and kind == TokenType.COMMA) and lists:
            starts.append(len(out))
    return out


def _wrap(out: list[Token], start: int) -> None:
    """Put ``out[start:]``, one list element, in parentheses unless it needs none."""
    element = out[start:]
    if not element or element[0].token_type in _LISTS or _one_group(element):
        return
    first, last = element[0], element[-1]
    out.insert(start, Token(TokenType.L_PAREN, "(", first.line, first.col, first.start, first.start))
    out.append(Token(TokenType.R_PAREN, ")", last.line, last.col, last.end, last.end))


def _one_group(element: list[Token]) -> bool:
    """Whether the element is one parenthesised group: ``(a)``, ``(a, b)`` or ``()``."""
    depth = 0
    for i, token in enumerate(element):
        depth += {TokenType.L_PAREN: 1, TokenType.R_PAREN: -1}.get(token.token_type, 0)
        if depth == 0:
            return i == len(element) - 1
    return False
