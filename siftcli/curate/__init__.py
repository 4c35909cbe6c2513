"""A pool of texts in, the rows worth training on out: near-copies dropped and the rest ranked once by a cheap
reference, chunk by chunk, on every core or a cluster, with memory bounded by the per-row state (signatures, scores).

``tokens`` (texts or tokenized rows as flat id arrays), ``dedup`` (MinHash, bands, exact verification), ``ngram`` (the
n-gram and naive-Bayes references), ``chunks`` (the jobs a worker runs on one chunk: no torch, transformers or datasets),
``pipeline`` (the chunked passes ``siftcli filter`` runs) and ``engines`` (where the chunks run: this process, a pool of
processes, a Dask cluster).
"""
