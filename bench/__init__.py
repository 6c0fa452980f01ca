"""Benchmarks and the TeraSort harness (``qengine terasort``)."""
