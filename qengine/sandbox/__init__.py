"""Where DuckDB runs: connections with external access off, their per-task pool, and SQL quoting of names and paths."""
