"""The TPC-DS harness: data generation, the 99 queries, distributed runs checked against DuckDB."""
