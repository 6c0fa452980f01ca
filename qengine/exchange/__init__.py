"""The exchange: partitioning map output, predicting partition sizes, storing and moving blocks."""
