"""Arm names and seeds in, each seed's run records out: the arms table, one seed's context, running the arms; the
references, n-gram scores and near-copy removal that choose data."""
