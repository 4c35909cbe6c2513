"""Run records in, numbers a sceptic accepts out: paired statistics over seeds, and the verdict."""
