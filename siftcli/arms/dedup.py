"""Near-duplicate removal before training: the static opponent of sifting where the data repeats itself.

Where a pool holds many near-copies of a few samples, the cheapest fix is to drop the copies once, before training
(as SemDeDup and the text-dedup tools do), not to learn at every batch that they are easy. This module finds them on
what the model sees, the token ids, so it works for every text workload without knowing its columns: each sample's
set of token bigrams (its tokens alone when it has one) is summarised by MinHash, candidate pairs come from
locality-sensitive bands, and a candidate is a duplicate only when its exact Jaccard similarity reaches the
threshold. The first sample of each cluster (lowest index) is kept, so the choice is deterministic and never
depends on the seed. Near-linear in the number of samples; a few seconds for 100,000 short texts on one core.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from siftcli.errors import SiftcliError

_PRIME = (1 << 31) - 1  # a Mersenne prime: (a * x + b) mod p over 32-bit shingle hashes stays inside uint64
_HASHES, _BANDS = 64, 16
#: The Jaccard similarity of token bigrams that makes a near-copy, unless told otherwise (arm, ``siftcli filter``).
DEFAULT_SIMILARITY = 0.7  # 16 bands of 4 rows: pairs at Jaccard 0.7 share a band with probability > 0.99


def shingles(tokens: Sequence[int]) -> frozenset[int]:
    """The 32-bit hashes of a token sequence's bigrams (a one-token sequence: the token itself)."""
    t = [int(x) for x in tokens]
    if len(t) < 2:
        return frozenset((x * 2_654_435_761) & 0xFFFFFFFF for x in t)
    return frozenset(((a * 1_000_003) ^ (b * 2_654_435_761)) & 0xFFFFFFFF for a, b in zip(t, t[1:]))


def jaccard(a: frozenset[int], b: frozenset[int]) -> float:
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


def _signatures(sets: list[frozenset[int]], seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    a = rng.integers(1, _PRIME, size=_HASHES, dtype=np.uint64)
    b = rng.integers(0, _PRIME, size=_HASHES, dtype=np.uint64)
    out = np.full((len(sets), _HASHES), _PRIME, dtype=np.uint64)
    for i, s in enumerate(sets):
        if s:
            x = np.fromiter(s, dtype=np.uint64, count=len(s))[:, None]
            out[i] = ((a * x + b) % _PRIME).min(axis=0)
    return out


def near_duplicates(sequences: Sequence[Sequence[int]], threshold: float = DEFAULT_SIMILARITY) -> list[int]:
    """Indices of the samples to keep: each cluster of near-duplicates (Jaccard similarity of token bigrams at least
    ``threshold``) reduced to its first member, in index order. ``threshold`` 1.0 removes exact copies only."""
    if not 0 < threshold <= 1:
        raise SiftcliError(f"near-duplicate threshold {threshold}: expected a similarity in (0, 1]")
    sets = [shingles(s) for s in sequences]
    sigs = _signatures(sets)
    rows = _HASHES // _BANDS
    parent = list(range(len(sets)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for band in range(_BANDS):
        buckets: dict[bytes, list[int]] = {}
        for i, sig in enumerate(sigs[:, band * rows:(band + 1) * rows]):
            buckets.setdefault(sig.tobytes(), []).append(i)
        for members in buckets.values():
            heads: list[int] = []  # one sample per cluster met in this bucket: a bucket of n copies costs n checks
            for i in members:
                for h in heads:
                    if root(i) == root(h) or jaccard(sets[i], sets[h]) >= threshold:
                        ri, rh = root(i), root(h)
                        parent[max(ri, rh)] = min(ri, rh)
                        break
                else:
                    heads.append(i)
    return [i for i in range(len(sets)) if root(i) == i]


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
