"""The Sort Benchmark harness (``qengine terasort gen|run|validate``): gensort records, a distributed sort, valsort checks."""
