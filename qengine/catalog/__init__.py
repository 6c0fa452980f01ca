"""The data layer: tables and views, their sources (Parquet, CSV, records, memory), scan splits and the PEP 249 type codes of their columns."""
