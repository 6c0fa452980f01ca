"""Names and strings spliced into generated DuckDB SQL come back from DuckDB as they went in."""

from __future__ import annotations

import duckdb
import pytest

from qengine.sandbox.quoting import identifier, string_literal


@pytest.mark.parametrize("text", ["plain", 'with "quotes"', "it's", "back\\slash", "ünïcode", "a;b -- c", ""])
def test_quoted_text_round_trips_through_duckdb(text: str) -> None:
    con = duckdb.connect()
    try:
        if text:  # DuckDB has no empty identifiers
            rel = con.sql(f"SELECT 1 AS {identifier(text)}")
            assert rel.columns == [text]
        assert con.sql(f"SELECT {string_literal(text)}").fetchone()[0] == text
    finally:
        con.close()
