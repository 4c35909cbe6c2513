"""One run, written out: Workload and recipe in, a trained model and its RunMetrics (metrics.json) out."""
