"""Token rows in, the rows to keep once near-copies are dropped out: MinHash over token bigrams, locality-sensitive
bands for candidates, an exact-safe bound to discard the pairs that cannot reach the threshold, exact Jaccard
similarity to confirm the rest.

Where a pool holds many near-copies of a few samples, the cheapest fix is to drop the copies once, before training
(as SemDeDup and the text-dedup tools do), not to learn at every batch that they are easy. The search runs on what
the model sees, the token ids, so it works for every text workload without knowing its columns. Each row's set of
token bigrams (its token alone when it has one) is kept as a :class:`Sketches` row of 196 bytes: the keys of the 16
bands of its 64 MinHash values, a 512-bit map of its bigram hashes and how many distinct bigrams it has. Rows that
agree on all 4 values of any band (equal band keys) are candidates; the bit maps bound each candidate pair's
similarity from above (:func:`within_reach`), so a pair that cannot reach the threshold is dropped without reading its
bigrams and no near-copy is ever lost to an estimate; the pairs left are near-copies only when the exact Jaccard
similarity of the two bigram sets reaches the threshold (:func:`similarities`, all pairs at once). The first row of
each cluster (lowest index) is kept, so the choice is deterministic, never depends on a seed, and is the same whether
the sketches were computed in one process, many, or on a cluster (they are a pure function of each row).

Why the bound: rows that share a long part (a sentence, boilerplate) share bands by chance and are similar, but not
near-copies. Measured on a million rows of two SST-2 sentences each (every sentence in about 57 rows), 11.8 million
pairs shared a band and 6.4 million of them had MinHash agreement above the old prefilter's 0.45 (counted with that
version's ``candidates``), each then checked exactly by a Python call: the near-copy search took 82 s and the driver
1,987 MB; the bit maps leave 0.27 million to check, of which 0.20 million are near-copies, in 8.8 s and 993 MB
(``python -m benchmarks curation --pools shared --previous cae140d``, docs/curation.md).

Split for streaming: :func:`sketch` per chunk of rows, then :func:`candidates` over every row's sketch (sorting 16
band keys), then :func:`clusters`, which reads back the bigrams of the rows of the pairs within reach only (a function
of the row number: :func:`near_duplicates` holds them, the pipeline re-reads its chunk files) and confirms each pair
exactly. Measured against ``datasketch`` on the same rows (``python -m benchmarks curation --libraries``;
docs/benchmarks.md): the vectorized signatures here are many times faster than its per-row ``MinHash.update_batch``,
and its LSH index estimates similarity where this confirms it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from siftcli.curate.tokens import Tokens, distinct, from_sequences
from siftcli.errors import SiftcliError

_PRIME = np.uint64((1 << 31) - 1)  # a Mersenne prime: (a * x + b) mod p over 32-bit shingle hashes stays inside uint64
_HASHES, _BANDS = 64, 16
_BLOCK = 4096  # bigrams hashed at a time (see signatures)
_ROWS = _HASHES // _BANDS
_WORDS = 8  # 512 bits a row: the bigram map (see Sketches)
#: The Jaccard similarity of token bigrams that makes a near-copy, unless told otherwise (arm, ``siftcli filter``).
DEFAULT_SIMILARITY = 0.7  # 16 bands of 4 rows: pairs at Jaccard 0.7 share a band with probability 0.988
#: Buckets up to this many rows give every pair of their rows to check (see :func:`candidates`).
SMALL_BUCKET = 32
#: Pair codes gathered from the bands before their distinct values are taken and bounded: 32 MB of ``int64`` (twice
#: while they are joined), whatever the pool; pairs that share several bands of one batch are bounded once. Measured on
#: a million rows of shared text (12 million distinct pairs in 18.5 million band pairs), batches of 16.7 million codes
#: took the driver to 1,382 MB against 993 MB with these, for 0.4 s less of near-copy search.
PAIR_BATCH = 1 << 22
_EMPTY = np.uint32(0xFFFFFFFF)  # the signature of a row with no tokens: equal to every other empty row's
_LOW = np.uint64(0xFFFFFFFF)
_U32 = np.uint64(32)


def _permutations(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    a = rng.integers(1, int(_PRIME), size=_HASHES, dtype=np.uint64)
    b = rng.integers(0, int(_PRIME), size=_HASHES, dtype=np.uint64)
    return a, b


_A, _B = _permutations()


@dataclass
class Sketches:
    """What the search keeps of each row, 196 bytes: ``bands`` (``uint64[rows, 16]``, each band's 4 MinHash values of
    the bigram set mixed into one key, :func:`band_keys`: the search compares bands, never single values, so the 64
    values themselves stay in the worker), ``bits`` (``uint64[rows, 8]``: bit ``h * 0x9E3779B1 >> 23`` set for each
    bigram hash ``h``) and ``sizes`` (``int32[rows]``: distinct bigrams). Two rows share at most
    ``popcount(bits_a & bits_b) + min(spare_a, spare_b)`` bigrams, ``spare`` being a row's bigrams beyond its set bits
    (each shared bigram sets a common bit, and a common bit holds more than one only where both rows spend spare
    bigrams on it): an upper bound on the pair's Jaccard similarity that the bit maps give without the bigrams."""

    bands: np.ndarray
    bits: np.ndarray
    sizes: np.ndarray

    def __len__(self) -> int:
        return len(self.sizes)

    @staticmethod
    def empty(rows: int) -> Sketches:
        return Sketches(np.empty((rows, _BANDS), np.uint64), np.empty((rows, _WORDS), np.uint64), np.empty(rows, np.int32))

    def put(self, at: int, part: Sketches) -> None:
        """Fill rows ``at`` onward with ``part`` (a table allocated once when the row count is known)."""
        hi = at + len(part)
        self.bands[at:hi], self.bits[at:hi], self.sizes[at:hi] = part.bands, part.bits, part.sizes

    def spare(self) -> np.ndarray:
        """Each row's bigrams beyond its set bits (``int32``): what the bound adds for bits holding more than one."""
        return (self.sizes - _popcount(self.bits)).astype(np.int32)

    def head(self, rows: int) -> Sketches:
        return Sketches(self.bands[:rows], self.bits[:rows], self.sizes[:rows])

    @staticmethod
    def join(parts: Sequence[Sketches]) -> Sketches:
        if not parts:
            return Sketches.empty(0)
        return Sketches(*(np.concatenate([getattr(p, f) for p in parts]) for f in ("bands", "bits", "sizes")))


@dataclass(frozen=True)
class Sets:
    """Some rows' distinct bigram hashes, flat: row ``rows[k]`` holds ``values[offsets[k]:offsets[k + 1]]`` (ascending
    ``uint32``); ``rows`` ascend. Four bytes a bigram, not a Python object a row."""

    rows: np.ndarray
    offsets: np.ndarray
    values: np.ndarray

    def __getitem__(self, row: int) -> np.ndarray:
        k = int(np.searchsorted(self.rows, row))
        if k == len(self.rows) or self.rows[k] != row:
            raise KeyError(row)
        return self.values[self.offsets[k]:self.offsets[k + 1]]

    @staticmethod
    def join(parts: Sequence[Sets]) -> Sets:
        """One set of sets from parts over disjoint rows (in any order)."""
        parts = sorted((p for p in parts if len(p.rows)), key=lambda p: int(p.rows[0]))
        if not parts:
            return Sets(np.zeros(0, np.int64), np.zeros(1, np.int64), np.zeros(0, np.uint32))
        sizes = np.concatenate([np.diff(p.offsets) for p in parts])
        return Sets(np.concatenate([p.rows for p in parts]), np.r_[0, np.cumsum(sizes)].astype(np.int64),
                    np.concatenate([p.values for p in parts]))


def _shingles(tokens: Tokens) -> tuple[np.ndarray, np.ndarray]:
    """Every row's bigram hashes (32-bit) and the row each belongs to, in no particular order; a one-token row hashes
    its token alone."""
    ids = tokens.ids.astype(np.uint64)
    rows = tokens.rows_of()
    same_row = rows[:-1] == rows[1:]
    pair = ((ids[:-1] * np.uint64(1_000_003)) ^ (ids[1:] * np.uint64(2_654_435_761))) & _LOW
    single = tokens.lengths[rows] == 1
    one = (ids[single] * np.uint64(2_654_435_761)) & _LOW
    return np.concatenate([pair[same_row], one]), np.concatenate([rows[:-1][same_row], rows[single]])


def shingle_hashes(tokens: Tokens) -> tuple[np.ndarray, np.ndarray]:
    """Every row's bigram hashes (32-bit) and the row each belongs to, in row order."""
    hashes, owner = _shingles(tokens)
    order = np.argsort(owner, kind="stable")
    return hashes[order], owner[order]


def _distinct_shingles(tokens: Tokens, rows: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Each row's distinct bigram hashes (``uint64``, ascending within a row) and their rows (``int64``, ascending),
    of every row or of ``rows`` only: one sort of ``row << 32 | hash`` codes."""
    hashes, owner = _shingles(tokens)
    if rows is not None:
        pick = np.isin(owner, rows)
        hashes, owner = hashes[pick], owner[pick]
    code = distinct((owner.astype(np.uint64) << _U32) | hashes)
    return code & _LOW, (code >> _U32).astype(np.int64)


def _minhash(hashes: np.ndarray, owner: np.ndarray, rows: int) -> np.ndarray:
    """``uint32[rows, 64]``: the minimum of ``(a * x + b) mod (2**31 - 1)`` over each row's hashes for 64 ``(a, b)``
    pairs, computed a block of about ``_BLOCK`` bigrams at a time into one preallocated buffer, which stays in the CPU
    cache (measured on 4 million bigrams: 1.9 s in blocks of 4,000, 3.2 s in blocks of 20,000 and 9.5 s in one pass
    through memory)."""
    out = np.full((rows, _HASHES), _EMPTY, dtype=np.uint32)
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


def signatures(tokens: Tokens) -> np.ndarray:
    """``uint32[rows, 64]`` MinHash signatures of each row's bigram set (an empty row: all ``0xFFFFFFFF``)."""
    hashes, owner = shingle_hashes(tokens)
    return _minhash(hashes, owner, len(tokens))


def _bit_maps(hashes: np.ndarray, owner: np.ndarray, rows: int) -> np.ndarray:
    """``uint64[rows, 8]``: each row's 512-bit map of its (distinct, row-sorted) bigram hashes."""
    out = np.zeros((rows, _WORDS), dtype=np.uint64)
    if hashes.size == 0:
        return out
    bit = ((hashes * np.uint64(0x9E3779B1)) & _LOW) >> np.uint64(23)  # the top 9 bits of a 32-bit multiplicative hash
    code = np.sort((owner.astype(np.uint64) << np.uint64(9)) | bit)  # row, then bit: each row's words in order
    word = (code >> np.uint64(6)).astype(np.int64)
    starts = np.flatnonzero(np.r_[True, word[1:] != word[:-1]])
    out.reshape(-1)[word[starts]] = np.bitwise_or.reduceat(np.uint64(1) << (code & np.uint64(63)), starts)
    return out


def sketch(tokens: Tokens) -> Sketches:
    """Each row's :class:`Sketches` row: a pure function of the row, so chunks, processes and machines agree."""
    hashes, owner = _distinct_shingles(tokens)
    rows = len(tokens)
    return Sketches(band_keys(_minhash(hashes, owner, rows)), _bit_maps(hashes, owner, rows),
                    np.bincount(owner, minlength=rows).astype(np.int32))


def band_keys(sigs: np.ndarray) -> np.ndarray:
    """``uint64[rows, 16]``: each band's 4 values of each signature mixed into one key (equal bands, equal keys;
    unequal ones collide with probability about 2**-64, and a collision only adds a candidate the bound or the exact
    check then rejects). Half the bytes of the signature, and all the search reads of it."""
    key = np.zeros((len(sigs), _BANDS), dtype=np.uint64)
    values = sigs.reshape(len(sigs), _BANDS, _ROWS)
    for r, mult in enumerate((0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0xD6E8FEB86659FD93)):
        key ^= values[:, :, r].astype(np.uint64) * np.uint64(mult)
        key *= np.uint64(0xFF51AFD7ED558CCD)
        key ^= key >> np.uint64(29)
    return key


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


@dataclass
class SearchCounts:
    """How much work the near-copy search did: the distinct pairs that shared a band (``band_pairs``, counted per
    batch of :data:`PAIR_BATCH`), those the bit maps left within reach of the threshold and checked exactly
    (``checked``), and those confirmed (``near_copies``). Per row, they say whether the search grew with the pool's
    shared text or with its copies."""

    rows: int = 0
    band_pairs: int = 0
    checked: int = 0
    near_copies: int = 0


def within_reach(sk: Sketches, spare: np.ndarray, code: np.ndarray, threshold: float, step: int = 1 << 18) -> np.ndarray:
    """Whether each pair (coded ``lower * rows + higher``) may reach ``threshold``: the bit maps' upper bound on its
    Jaccard similarity (see :class:`Sketches`; ``spare``: :meth:`Sketches.spare`, computed once per search).
    Exact-safe: a pair this rejects is below the threshold (the bound is computed with the same float division as the
    exact similarity, which is monotone), so no near-copy is lost to it."""
    out = np.empty(len(code), dtype=bool)
    for i in range(0, len(code), step):
        a, b = np.divmod(code[i:i + step], len(sk))
        size_a, size_b = sk.sizes[a], sk.sizes[b]
        shared = np.minimum(_popcount(sk.bits[a] & sk.bits[b]) + np.minimum(spare[a], spare[b]), np.minimum(size_a, size_b))
        union = size_a + size_b - shared
        out[i:i + step] = np.where(union > 0, shared / np.maximum(union, 1), 1.0) >= threshold
    return out


def _popcount(words: np.ndarray) -> np.ndarray:
    """Set bits per row of ``uint64[m, 8]`` (``int32``): eight column sums, which numpy runs faster than a reduction
    along a short axis."""
    count = np.bitwise_count(words)
    total = count[:, 0].astype(np.int32)
    for k in range(1, words.shape[1]):
        total += count[:, k]
    return total


def candidates(sk: Sketches, threshold: float = DEFAULT_SIMILARITY, counts: SearchCounts | None = None) -> np.ndarray:
    """Pairs of rows that share a band of their signatures and are within reach of ``threshold`` by the bit maps
    (``int64[m, 2]``, lower row first, each once however many bands they share, ascending), fewest first checks: in a
    bucket of up to ``SMALL_BUCKET`` rows every pair; in a larger one each row with the bucket's first and with the row
    before it (a bucket of a thousand copies costs two thousand pairs, not half a million).

    Each band's rows are sorted once as ``key | row`` codes (the key's top bits above the row number: ties in row order
    without a stable argsort); the pairs, each coded as one ``int64`` (``lower * rows + higher``), are gathered over
    bands up to :data:`PAIR_BATCH` codes, made distinct and bounded, so only the pairs within reach are kept."""
    n = len(sk)
    if n >= 3_000_000_000:  # lower * n + higher must fit in int64
        raise SiftcliError(f"near-duplicate search: {n} rows; at most 3 billion in one search")
    counts = counts if counts is not None else SearchCounts()
    counts.rows = n
    shift = np.uint64(max(1, (n - 1).bit_length()))
    row_ids = np.arange(n, dtype=np.uint64)
    spare = sk.spare()
    kept: list[np.ndarray] = []
    batch: list[np.ndarray] = []
    held = 0

    def settle() -> None:
        nonlocal batch, held
        if held:
            code = np.concatenate(batch)
            batch = []
            code.sort()  # in place: distinct without a second copy of the batch
            code = code[np.r_[True, code[1:] != code[:-1]]]
            counts.band_pairs += len(code)
            kept.append(code[within_reach(sk, spare, code, threshold)])
        batch, held = [], 0

    for band in range(_BANDS):
        packed = np.sort((sk.bands[:, band] >> shift << shift) | row_ids)
        a, b = _band_pairs((packed & ((np.uint64(1) << shift) - np.uint64(1))).astype(np.int64), packed >> shift)
        if a.size:
            batch.append(np.minimum(a, b) * n + np.maximum(a, b))
            held += a.size
        if held >= PAIR_BATCH:
            settle()
    settle()
    code = distinct(np.concatenate(kept)) if kept else np.zeros(0, dtype=np.int64)
    counts.checked = len(code)
    lo, hi = np.divmod(code, n) if n else (code, code)
    return np.stack([lo, hi], axis=1).astype(np.int64)


def similarities(sets: Sets, pairs: np.ndarray, step: int = 1 << 16) -> np.ndarray:
    """The exact Jaccard similarity of each pair's bigram sets (two empty rows: 1.0), a block of pairs at a time: each
    pair's two sets tagged with the pair's number, sorted together, and the equal neighbours counted (one sort of a
    few million ``uint64`` per block, not a Python call per pair; 65,536 pairs a block keep its arrays near 50 MB)."""
    out = np.empty(len(pairs), dtype=np.float64)
    sizes = np.diff(sets.offsets)
    for s in range(0, len(pairs), step):
        at = np.searchsorted(sets.rows, pairs[s:s + step])
        size_a, size_b = sizes[at[:, 0]], sizes[at[:, 1]]
        tag = np.arange(len(at), dtype=np.uint64) << _U32
        both = np.concatenate([np.repeat(tag, size_a) | _gather(sets, at[:, 0], size_a),
                               np.repeat(tag, size_b) | _gather(sets, at[:, 1], size_b)])
        both.sort()
        same = both[1:] == both[:-1]
        inter = np.bincount((both[1:][same] >> _U32).astype(np.int64), minlength=len(at))
        union = size_a + size_b - inter
        out[s:s + step] = np.where(union > 0, inter / np.maximum(union, 1), 1.0)
    return out


def _gather(sets: Sets, at: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """The values of rows ``at`` (positions in ``sets``), one after another, as ``uint64``."""
    total = int(sizes.sum())
    if total == 0:
        return np.zeros(0, dtype=np.uint64)
    ends = np.cumsum(sizes)
    index = np.arange(total, dtype=np.int64) + np.repeat(sets.offsets[at] - (ends - sizes), sizes)
    return sets.values[index].astype(np.uint64)


def clusters(pairs: np.ndarray, n: int, bigrams: Callable[[np.ndarray], Sets], threshold: float,
             counts: SearchCounts | None = None, similarity: np.ndarray | None = None) -> np.ndarray:
    """Each row's cluster representative (the lowest row of its cluster): the connected components (scipy's
    ``connected_components``) of the candidate ``pairs`` whose exact Jaccard similarity of bigrams, from
    ``bigrams(rows)`` (the sets of the rows asked for), reaches ``threshold``. ``similarity`` (``float32[n]``, filled
    in place where given): each row's exact similarity to its representative (NaN for a representative), what a report
    shows beside it; a row joined through others may sit below the threshold, and then says so."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    sets = bigrams(distinct(pairs.ravel())) if len(pairs) else None
    edges = pairs[similarities(sets, pairs) >= threshold] if len(pairs) else pairs
    if counts is not None:
        counts.near_copies = len(edges)
    graph = coo_matrix((np.ones(len(edges)), (edges[:, 0], edges[:, 1])), shape=(n, n))
    _, label = connected_components(graph, directed=False)
    lowest_of = np.full(label.max() + 1 if n else 0, n, dtype=np.int64)
    np.minimum.at(lowest_of, label, np.arange(n))
    parent = lowest_of[label]
    if similarity is not None:
        similarity[:] = np.nan
        copies = np.flatnonzero(parent != np.arange(n))
        if len(copies):  # every row of a cluster of two or more is in some pair: its set is in ``sets``
            similarity[copies] = similarities(sets, np.stack([copies, parent[copies]], axis=1))
    return parent


def jaccard(a: np.ndarray, b: np.ndarray) -> float:
    """Jaccard similarity of two sorted arrays of distinct hashes (two empty rows are the same row)."""
    if a.size == 0 and b.size == 0:
        return 1.0
    inter = np.intersect1d(a, b, assume_unique=True).size
    return inter / (a.size + b.size - inter)


def bigram_sets(tokens: Tokens, rows: np.ndarray, first: int = 0) -> Sets:
    """The distinct bigram hashes of ``rows`` (numbered from ``first``, the chunk's first row) in ``tokens``: one sort
    of (row, hash) codes for all of them; a row with no tokens holds the empty set."""
    wanted = distinct(rows[(rows >= first) & (rows < first + len(tokens))] - first)
    hashes, owner = _distinct_shingles(tokens, wanted)
    sizes = np.bincount(owner, minlength=len(tokens))[wanted]
    return Sets(wanted.astype(np.int64) + first, np.r_[0, np.cumsum(sizes)].astype(np.int64), hashes.astype(np.uint32))


def check_threshold(threshold: float) -> None:
    if not 0 < threshold <= 1:
        raise SiftcliError(f"near-duplicate threshold {threshold}: expected a similarity in (0, 1]")


def keep_of(tokens: Tokens, threshold: float = DEFAULT_SIMILARITY) -> list[int]:
    """Rows to keep of ``tokens`` (all in memory): each cluster of near-copies reduced to its first row."""
    check_threshold(threshold)
    pairs = candidates(sketch(tokens), threshold)
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
