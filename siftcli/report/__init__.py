"""Records in, what people read out: terminal tables, report.html, plots, experiment trackers."""
