"""Differential SQL fuzzing of qengine against DuckDB.

Random queries (joins of every kind, subqueries, aggregates, grouping sets, windows, set
operations, ...) run on qengine in two modes (default settings, and broadcast_threshold=0) and on
DuckDB over the same Parquet files; answers are compared as multisets, in order where ORDER BY
fixes it. Modules, one job each:

- ``schema``: builds the tables (TPC-DS SF 0.01 extracts and edge-case tables) into the cache;
- ``generator``: the seeded, type-aware query generator;
- ``compare``: the comparison of two answers;
- ``runner``: runs one case on every mode and on DuckDB, and says what it came to;
- ``minimize``: shrinks a failing query while it keeps failing the same way;
- ``report``: the run's tally and the reproducer files;
- ``__main__``: ``python -m tests.fuzz --cases N [--seed S] [--out DIR]``.

``test_fuzz.py`` runs a seeded slice of a few hundred cases as part of the test suite.
"""
