"""siftcli's benchmark harness: a registry of workloads × arms, run as ``python -m benchmarks NAME``.

Every entry runs its arms through :func:`siftcli.arms.run.run_arms` (each seed its own initial weights, arms within a
seed sharing them and the data order), keeps every arm's metrics in one JSON per benchmark
(``runs/bench/NAME/results.json``), and writes its section of ``docs/benchmarks.md`` through one writer with the
statistics of :func:`siftcli.analysis.stats.paired`. ``--report-only`` re-renders the section from the saved results.
Benchmarks may read ``../shared/data``; siftcli itself never does.
"""
