"""Arm names and seeds in, each seed's run records out: the arms table (:mod:`.table`), one seed's context
(:mod:`.context`), running the arms (:mod:`.run`) and the reference losses an arm ranks or filters by
(:mod:`.reference`). Near-copy removal and the cheap n-gram references live in :mod:`siftcli.curate`."""
