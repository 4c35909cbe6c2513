"""Token rows in, the rows to keep once near-copies are dropped out: MinHash over token bigrams, locality-sensitive
bands for candidates, exact Jaccard similarity to confirm them.

Where a pool holds many near-copies of a few samples, the cheapest fix is to drop the copies once, before training
(as SemDeDup and the text-dedup tools do), not to learn at every batch that they are easy. The search runs on what
the model sees, the token ids, so it works for every text workload without
knowing its columns: each row's set of token bigrams (its token alone when it has one) is summarised by 64 MinHash
values; rows that agree on all 4 values of any of 16 bands are candidates; a candidate is a near-copy only when the
exact Jaccard similarity of the two bigram sets reaches the threshold. The first row of each cluster (lowest index) is
kept, so the choice is deterministic, never depends on a seed, and is the same whether the signatures were computed in
one process, many, or on a cluster (they are a pure function of each row).

Split for streaming: :func:`signatures` per chunk of rows (256 bytes a row are all that is kept), then
:func:`candidates` over every signature (sorting 16 band keys per row), then :func:`clusters`, which reads back the
bigrams of the candidate rows only (a function of the row number: :func:`near_duplicates` holds them, the pipeline
re-reads its chunk files) and confirms each candidate pair exactly. Measured against ``datasketch`` on the same rows
(``python -m benchmarks curation``; docs/benchmarks.md): the vectorized signatures here are many times faster than
its per-row ``MinHash.update_batch``, and its LSH index estimates similarity where this confirms it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np

from siftcli.curate.tokens import Tokens, distinct, from_sequences
from siftcli.errors import SiftcliError

_PRIME = np.uint64((1 << 31) - 1)  # a Mersenne prime: (a * x + b) mod p over 32-bit shingle hashes stays inside uint64
_HASHES, _BANDS = 64, 16
_BLOCK = 4096  # bigrams hashed at a time (see signatures)
_ROWS = _HASHES // _BANDS
#: The Jaccard similarity of token bigrams that makes a near-copy, unless told otherwise (arm, ``siftcli filter``).
DEFAULT_SIMILARITY = 0.7  # 16 bands of 4 rows: pairs at Jaccard 0.7 share a band with probability > 0.99
#: How far below the threshold a candidate pair's signature agreement may be and still be checked exactly.
MARGIN = 0.25
#: Buckets up to this many rows give every pair of their rows to check (see :func:`candidates`).
SMALL_BUCKET = 32
_EMPTY = np.uint32(0xFFFFFFFF)  # the signature of a row with no tokens: equal to every other empty row's


def _permutations(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    a = rng.integers(1, int(_PRIME), size=_HASHES, dtype=np.uint64)
    b = rng.integers(0, int(_PRIME), size=_HASHES, dtype=np.uint64)
    return a, b


_A, _B = _permutations()


def shingle_hashes(tokens: Tokens) -> tuple[np.ndarray, np.ndarray]:
    """Every row's bigram hashes (32-bit) and the row each belongs to; a one-token row hashes its token alone."""
    ids = tokens.ids.astype(np.uint64)
    rows = tokens.rows_of()
    lengths = tokens.lengths
    same_row = rows[:-1] == rows[1:]
    pair = ((ids[:-1] * np.uint64(1_000_003)) ^ (ids[1:] * np.uint64(2_654_435_761))) & np.uint64(0xFFFFFFFF)
    single = lengths[rows] == 1
    one = (ids[single] * np.uint64(2_654_435_761)) & np.uint64(0xFFFFFFFF)
    hashes = np.concatenate([pair[same_row], one])
    owner = np.concatenate([rows[:-1][same_row], rows[single]])
    order = np.argsort(owner, kind="stable")
    return hashes[order], owner[order]


def signatures(tokens: Tokens) -> np.ndarray:
    """``uint32[rows, 64]`` MinHash signatures of each row's bigram set (an empty row: all ``0xFFFFFFFF``).

    ``(a * x + b) mod (2**31 - 1)`` for 64 ``(a, b)`` pairs, the minimum per row: computed a block of about
    ``_BLOCK`` bigrams at a time into one preallocated buffer, which stays in the CPU cache (measured on 4 million
    bigrams: 1.9 s in blocks of 4,000, 3.2 s in blocks of 20,000 and 9.5 s in one pass through memory)."""
    hashes, owner = shingle_hashes(tokens)
    out = np.full((len(tokens), _HASHES), _EMPTY, dtype=np.uint32)
    if hashes.size == 0:
        return out
    starts = np.flatnonzero(np.r_[True, owner[1:] != owner[:-1]])  # where each row's bigrams begin
    at = np.minimum(np.searchsorted(starts, np.arange(0, hashes.size, _BLOCK)), len(starts) - 1)  # a block starts a row
    cuts = np.unique(np.r_[starts[at], hashes.size])
    buf = np.empty((int(np.diff(cuts).max()), _HASHES), dtype=np.uint64)
    for lo, hi in zip(cuts[:-1].tolist(), cuts[1:].tolist()):
        v = buf[:hi - lo]
        np.multiply(hashes[lo:hi, None], _A, out=v)
        v += _B
        np.remainder(v, _PRIME, out=v)
        first = starts[(starts >= lo) & (starts < hi)]
        out[owner[first]] = np.minimum.reduceat(v, first - lo, axis=0)
    return out


def band_key(sigs: np.ndarray, band: int) -> np.ndarray:
    """``uint64[rows]``: band ``band``'s 4 values of each signature mixed into one key (equal bands, equal keys; unequal
    ones collide with probability about 2**-64, and a collision only adds a candidate the exact check then rejects).
    One band at a time, so a million rows need 8 MB here, not the 128 MB of every band's keys at once."""
    key = np.zeros(len(sigs), dtype=np.uint64)
    for r, mult in enumerate((0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0xD6E8FEB86659FD93)):
        key ^= sigs[:, band * _ROWS + r].astype(np.uint64) * np.uint64(mult)
        key *= np.uint64(0xFF51AFD7ED558CCD)
        key ^= key >> np.uint64(29)
    return key


def agreement(sigs: np.ndarray, a: np.ndarray, b: np.ndarray, step: int = 65536) -> np.ndarray:
    """How many of their signature values rows ``a[i]`` and ``b[i]`` share (``int64``), a block of pairs at a time."""
    out = np.empty(len(a), dtype=np.int64)
    for i in range(0, len(a), step):
        out[i:i + step] = (sigs[a[i:i + step]] == sigs[b[i:i + step]]).sum(axis=1)
    return out


def _band_pairs(order: np.ndarray, sorted_keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The pairs one band's buckets give (rows as ``order`` holds them, sorted by key, ties in row order)."""
    edges = np.flatnonzero(np.r_[True, sorted_keys[1:] != sorted_keys[:-1], True])
    sizes = np.diff(edges)
    shared = sizes > 1
    starts, sizes = edges[:-1][shared], sizes[shared]
    if starts.size == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    first = np.repeat(starts, sizes)  # each position's bucket start
    pos = first + np.arange(int(sizes.sum())) - np.repeat(np.cumsum(sizes) - sizes, sizes)
    later = pos > first
    chain = later & (pos - 1 > first)
    a = [order[first[later]], order[pos[chain] - 1]]  # each row with its bucket's first, and with the row before it
    b = [order[pos[later]], order[pos[chain]]]
    for size in np.unique(sizes[(sizes > 2) & (sizes <= SMALL_BUCKET)]).tolist():  # every bucket of a size at once
        members = order[starts[sizes == size][:, None] + np.arange(size)]
        i, j = np.triu_indices(size, 1)
        a.append(members[:, i].ravel())
        b.append(members[:, j].ravel())
    return np.concatenate(a), np.concatenate(b)


def candidates(sigs: np.ndarray, threshold: float = DEFAULT_SIMILARITY) -> np.ndarray:
    """Pairs of rows that share a band of their signatures (``int64[m, 2]``, lower row first, each once however many
    bands they share, ascending), fewest first checks: in a bucket of up to ``SMALL_BUCKET`` rows every pair; in a
    larger one each row with the bucket's first and with the row before it (a bucket of a thousand copies costs two
    thousand pairs, not half a million).

    A pair whose signatures agree on fewer than ``threshold - MARGIN`` of their 64 values is dropped before any exact
    check: the share of agreeing values estimates the Jaccard similarity with a standard error of at most 0.0625, so
    a pair at the threshold falls that far below it with probability about 1e-5. Pools whose rows share long parts
    (a sentence in common) put millions of such pairs into some band; measured on a million rows, confirming each
    exactly took 372 s of a 475 s filter. The prefilter runs band by band, each band's pairs coded as one ``int64``
    (``lower * rows + higher``), so only the pairs that pass are kept, never every band's pairs at once (millions on a
    large pool; with the signature table freed after this search, a million rows went from 74.7 s and 1,677 MB to
    68.9 s and 1,367 MB: ``python -m benchmarks curation --previous 905e546``)."""
    n = len(sigs)
    if n >= 3_000_000_000:  # lower * n + higher must fit in int64
        raise SiftcliError(f"near-duplicate search: {n} rows; at most 3 billion in one search")
    need = int(np.ceil((threshold - MARGIN) * _HASHES - 1e-9))
    kept: list[np.ndarray] = []
    for band in range(_BANDS):
        col = band_key(sigs, band)
        order = np.argsort(col, kind="stable")  # ties in row order: a bucket's rows ascend
        a, b = _band_pairs(order, col[order])
        if a.size == 0:
            continue
        code = distinct(np.minimum(a, b) * n + np.maximum(a, b))
        lo, hi = np.divmod(code, n)
        kept.append(code[agreement(sigs, lo, hi) >= need])
    code = distinct(np.concatenate(kept)) if kept else np.zeros(0, dtype=np.int64)
    lo, hi = np.divmod(code, n) if n else (code, code)
    return np.stack([lo, hi], axis=1).astype(np.int64)


def clusters(pairs: np.ndarray, n: int, bigrams: Callable[[np.ndarray], dict[int, np.ndarray]],
             threshold: float) -> np.ndarray:
    """Each row's cluster representative (the lowest row of its cluster): the connected components (scipy's
    ``connected_components``) of the candidate ``pairs`` whose exact Jaccard similarity of bigrams, from
    ``bigrams(rows)`` (the sorted bigram hashes of the rows asked for), reaches ``threshold``."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    rows = distinct(pairs.ravel())
    sets = bigrams(rows)
    ok = np.fromiter((jaccard(sets[i], sets[j]) >= threshold for i, j in pairs.tolist()), dtype=bool, count=len(pairs))
    edges = pairs[ok]
    graph = coo_matrix((np.ones(len(edges)), (edges[:, 0], edges[:, 1])), shape=(n, n))
    _, label = connected_components(graph, directed=False)
    lowest_of = np.full(label.max() + 1 if n else 0, n, dtype=np.int64)
    np.minimum.at(lowest_of, label, np.arange(n))
    return lowest_of[label]


def jaccard(a: np.ndarray, b: np.ndarray) -> float:
    """Jaccard similarity of two sorted arrays of distinct hashes (two empty rows are the same row)."""
    if a.size == 0 and b.size == 0:
        return 1.0
    inter = np.intersect1d(a, b, assume_unique=True).size
    return inter / (a.size + b.size - inter)


def bigram_sets(tokens: Tokens, rows: np.ndarray, first: int = 0) -> dict[int, np.ndarray]:
    """The sorted distinct bigram hashes of ``rows`` (numbered from ``first``, the chunk's first row) in ``tokens``:
    one sort of (row, hash) codes for all of them, not one ``np.unique`` per row."""
    hashes, owner = shingle_hashes(tokens)
    wanted = rows[(rows >= first) & (rows < first + len(tokens))] - first
    if wanted.size == 0:
        return {}
    pick = np.isin(owner, wanted)
    code = distinct((owner[pick].astype(np.uint64) << np.uint64(32)) | hashes[pick])
    rows_of = (code >> np.uint64(32)).astype(np.int64)
    values = (code & np.uint64(0xFFFFFFFF)).astype(np.uint32)  # 32-bit hashes: half the memory of a million sets
    cuts = np.flatnonzero(np.r_[True, rows_of[1:] != rows_of[:-1], True])
    out = {int(rows_of[lo]) + first: values[lo:hi] for lo, hi in zip(cuts[:-1].tolist(), cuts[1:].tolist())}
    for r in wanted.tolist():  # a row with no bigrams (no tokens) is the empty set
        out.setdefault(r + first, np.zeros(0, dtype=np.uint32))
    return out


def check_threshold(threshold: float) -> None:
    if not 0 < threshold <= 1:
        raise SiftcliError(f"near-duplicate threshold {threshold}: expected a similarity in (0, 1]")


def keep_of(tokens: Tokens, threshold: float = DEFAULT_SIMILARITY) -> list[int]:
    """Rows to keep of ``tokens`` (all in memory): each cluster of near-copies reduced to its first row."""
    check_threshold(threshold)
    pairs = candidates(signatures(tokens), threshold)
    parent = clusters(pairs, len(tokens), lambda rows: bigram_sets(tokens, rows), threshold)
    return np.flatnonzero(parent == np.arange(len(tokens))).tolist()


def near_duplicates(sequences: Sequence[Sequence[int]], threshold: float = DEFAULT_SIMILARITY) -> list[int]:
    """Indices of the samples to keep: each cluster of near-duplicates (Jaccard similarity of token bigrams at least
    ``threshold``) reduced to its first member, in index order. ``threshold`` 1.0 removes exact copies only."""
    return keep_of(from_sequences(sequences), threshold)


def drop_near_copies(samples: Sequence[dict], threshold: float = DEFAULT_SIMILARITY) -> tuple[list[int], float]:
    """The training samples kept once near-copies (token-bigram similarity ``threshold`` or more) are dropped, and the
    seconds the search took: what the dedup arm, a filter and ``siftcli filter --dedup`` put on their clock."""
    t0 = time.perf_counter()
    kept = near_duplicates(token_sequences(samples), threshold)
    return kept, time.perf_counter() - t0


def token_sequences(samples: Sequence[dict]) -> list[list[int]]:
    """The token ids of tokenized samples, padding excluded; refuses samples without text."""
    out = []
    for sample in samples:
        ids = sample.get("input_ids") if isinstance(sample, dict) else None
        if ids is None:
            raise SiftcliError("near-duplicate removal needs text samples (input_ids); this task's samples have none")
        mask = sample.get("attention_mask")
        ids = [int(t) for t in (ids.tolist() if hasattr(ids, "tolist") else ids)]
        if mask is not None:
            m = mask.tolist() if hasattr(mask, "tolist") else mask
            ids = [t for t, k in zip(ids, m) if k]
        out.append(ids)
    return out
