"""A recipe and a search space in, sweep.json out: sweep-beta on Optuna (settings, trials, warm workers, the study, the space)."""
