"""Near-copies by meaning (``siftcli filter --dedup --dedup-by semantic``): texts in, each row's near-copy
representative and their cosine similarity out, by SemDeDup's method.

MinHash of token bigrams finds rows that share their wording; a paraphrase (words reordered, a synonym, a template
around the same sentence) shares little of it. Here every row is embedded by a sentence encoder (``builtin:minilm``,
or any Hugging Face encoder: mean-pooled last hidden states, L2-normalised), the embeddings are clustered by k-means
(scikit-learn's ``MiniBatchKMeans``, seeded: not hand-written), and within each cluster a row whose cosine similarity to
an earlier row (by position) reaches the threshold is a near-copy of it: the first row of each group is kept, as the
MinHash search keeps the lowest row of a cluster. Pairs in different k-means clusters are never compared (SemDeDup's
trade: the search is linear in the rows, the few near-copies split across clusters are missed).

Embedding is the cost (a forward of the encoder per row); it runs in the chunk jobs of :mod:`.chunks`, on every core
or a Dask cluster, and each chunk's embeddings are kept in the job's folder, so a chunk embedded once is read back
instead of embedded again.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from siftcli.errors import SiftcliError

#: Rows a k-means cluster holds on average: large enough that near-copies fall into one cluster, small enough that a
#: cluster's similarity matrix (rows squared, float32) stays in megabytes.
ROWS_PER_CLUSTER = 1000
#: Rows a forward of the encoder takes at a time.
EMBED_BATCH = 128
#: The cosine similarity that makes a near-copy by meaning, unless ``--similarity`` says otherwise: on the paraphrase
#: pool of docs/curation.md, 0.9 found 0.845 of the planted paraphrases at precision 0.998, 0.95 only 0.729.
DEFAULT_COSINE = 0.9

_ENCODERS: dict[tuple[str, int], Any] = {}  # a worker's encoder, loaded once per process


def encoder_path(source: str) -> str:
    """The encoder's folder or hub id, checked before any work (``builtin:minilm`` needs its package; a hub id needs the
    hub or the local cache)."""
    from siftcli.workload.models import resolve_source

    return resolve_source(source, key="--encoder")


def _encoder(path: str, threads: int) -> Any:
    key = (path, threads)
    if key not in _ENCODERS:
        import torch
        from transformers import AutoModel, AutoTokenizer

        if threads:
            torch.set_num_threads(threads)
        try:
            tokenizer, model = AutoTokenizer.from_pretrained(path), AutoModel.from_pretrained(path).eval()
        except (OSError, ValueError, KeyError) as exc:  # no weights, no tokenizer, a config it cannot read
            raise SiftcliError(f"--encoder {path}: cannot load a sentence encoder there ({str(exc).splitlines()[0]}); "
                               "give builtin:minilm, a local model folder, or a hub id reachable from here") from None
        _ENCODERS[key] = (tokenizer, model)
    return _ENCODERS[key]


def embed(texts: list[str], path: str, max_length: int = 128, threads: int = 0) -> np.ndarray:
    """``float16[len(texts), dim]``: each text's mean-pooled, L2-normalised embedding by the encoder at ``path``."""
    import torch

    tokenizer, model = _encoder(path, threads)
    out = []
    with torch.inference_mode():
        for lo in range(0, len(texts), EMBED_BATCH):
            batch = tokenizer(texts[lo:lo + EMBED_BATCH], padding=True, truncation=True, max_length=max_length,
                              return_tensors="pt")
            hidden = model(**batch).last_hidden_state
            mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1)
            out.append(torch.nn.functional.normalize(pooled, dim=-1).to(torch.float16).numpy())
    return np.concatenate(out) if out else np.zeros((0, 0), np.float16)


def embed_chunk(folder: str, k: int, texts: list[str], path: str, max_length: int, threads: int = 0) -> np.ndarray:
    """A chunk's embeddings, read back from ``folder`` where a job embedded the same texts with the same encoder before
    (the file is named by a hash of both: a changed source or encoder never reads stale vectors), else embedded and
    kept there. With ``siftcli filter --work-dir`` the folder outlives the run, so an interrupted filter embeds only the
    chunks it had not reached."""
    import hashlib

    key = hashlib.sha256("\x00".join([path, str(max_length), *texts]).encode()).hexdigest()[:16]
    saved = Path(folder) / f"embeddings-{k:06d}-{key}.npy"
    if saved.exists():
        return np.load(saved)
    got = embed(texts, path, max_length, threads)
    tmp = saved.with_suffix(".tmp.npy")
    np.save(tmp, got)
    tmp.replace(saved)
    return got


def near_copies(embeddings: np.ndarray, threshold: float = DEFAULT_COSINE, seed: int = 0,
                rows_per_cluster: int = ROWS_PER_CLUSTER) -> tuple[np.ndarray, np.ndarray, int]:
    """Each row's representative (itself where it is kept), its cosine similarity to the earlier row it repeats (NaN
    where kept), and the number of pairs compared. Rows are clustered by k-means; within a cluster, in position order,
    a row at ``threshold`` or more from an earlier row of it is a near-copy, represented by that row's representative."""
    from sklearn.cluster import MiniBatchKMeans

    n = len(embeddings)
    parent = np.arange(n, dtype=np.int64)
    similarity = np.full(n, np.nan, dtype=np.float32)
    if n < 2:
        return parent, similarity, 0
    x = embeddings.astype(np.float32)
    clusters = max(1, min(n // 2, round(n / rows_per_cluster)))
    label = np.zeros(n, dtype=np.int64) if clusters == 1 else MiniBatchKMeans(
        n_clusters=clusters, random_state=seed, n_init=3, batch_size=4096).fit_predict(x)
    order = np.argsort(label, kind="stable")  # each cluster's rows together, in position order
    bounds = np.flatnonzero(np.diff(label[order])) + 1
    compared = 0
    for members in np.split(order, bounds):
        if len(members) < 2:
            continue
        sims = x[members] @ x[members].T
        compared += len(members) * (len(members) - 1) // 2
        sims[np.tril_indices(len(members))] = -np.inf  # only earlier rows (by position) represent later ones
        best = sims.argmax(axis=0)
        top = sims[best, np.arange(len(members))]
        for j in np.flatnonzero(top >= threshold):  # in position order: an earlier row's representative is final
            row, match = members[j], members[best[j]]
            parent[row], similarity[row] = parent[match], top[j]
    return parent, similarity, compared
