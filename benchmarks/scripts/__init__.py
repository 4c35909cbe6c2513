"""Benchmark drivers that measure something other than arms of one recipe (processes, compilation, precision,
sweeps); each is reached as ``python -m benchmarks NAME`` and writes its own section of docs/benchmarks.md."""
