"""Near-duplicate removal: near-copies go, distinct samples and the first of each cluster stay."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from siftcli.curate.dedup import bigram_sets, jaccard, near_duplicates, token_sequences
from siftcli.curate.tokens import from_sequences
from siftcli.errors import SiftcliError


def _sentences(n: int, rng: random.Random) -> list[list[int]]:
    return [[rng.randrange(1000, 30000) for _ in range(rng.randrange(12, 30))] for _ in range(n)]


def test_near_copies_are_dropped_and_the_first_of_each_cluster_is_kept() -> None:
    rng = random.Random(0)
    distinct = _sentences(300, rng)
    pool = list(distinct)
    for i in range(0, 300, 10):  # 30 of them come back 5 times each, one token dropped or doubled
        for _ in range(5):
            copy = list(distinct[i])
            j = rng.randrange(len(copy))
            copy.insert(j, copy[j]) if rng.random() < 0.5 else copy.pop(j)
            pool.append(copy)
    kept = near_duplicates(pool)
    assert kept == list(range(300))  # every copy found; every distinct sentence (the first of its cluster) kept
    assert len(near_duplicates(pool, threshold=1.0)) > 300  # exact copies only: the edited copies stay
    exact = distinct[:50] + distinct[:50]
    assert near_duplicates(exact, threshold=1.0) == list(range(50))


def test_similarity_is_of_token_bigrams_and_the_threshold_is_checked() -> None:
    sets = bigram_sets(from_sequences([[1, 2, 3, 4], [1, 2, 3, 5]]), np.array([0, 1]))
    a, b = sets[0], sets[1]
    assert jaccard(a, b) == pytest.approx(2 / 4) and jaccard(a, a) == 1.0
    one_off = [list(range(1, 11)), [*range(1, 10), 99]]  # 8 of 10 bigrams shared: similarity 0.8
    assert near_duplicates(one_off, threshold=0.8) == [0]
    assert near_duplicates(one_off, threshold=0.85) == [0, 1]
    assert near_duplicates([[7], [7], [8]]) == [0, 2]  # one-token samples compare by the token
    with pytest.raises(SiftcliError, match="expected a similarity in"):
        near_duplicates([[1, 2]], threshold=0)


def test_token_sequences_leave_out_padding_and_refuse_samples_without_text() -> None:
    samples = [{"input_ids": torch.tensor([5, 6, 0]), "attention_mask": torch.tensor([1, 1, 0])}, {"input_ids": [7, 8]}]
    assert token_sequences(samples) == [[5, 6], [7, 8]]
    with pytest.raises(SiftcliError, match="needs text samples"):
        token_sequences([{"pixel_values": torch.zeros(3)}])


def _shared_text_pool(rng: random.Random, rows: int = 2000, sentences: int = 150) -> tuple[list[list[int]], set[int]]:
    """Rows of two sentences each from a few (so every sentence is in ~25 rows, and a row whose long sentence another
    shares is similar to it without being a copy), 10% of them copies of an earlier row with one token inserted."""
    said = [[rng.randrange(1000, 30000) for _ in range(rng.choice((6, 8, 30, 40)))] for _ in range(sentences)]
    pool: list[list[int]] = []
    planted = set()
    for i in range(rows):
        if pool and rng.random() < 0.1:
            copy = list(pool[rng.randrange(len(pool))])
            copy.insert(rng.randrange(len(copy) + 1), rng.randrange(1000, 30000))
            pool.append(copy)
            planted.add(i)
        else:
            pool.append(rng.choice(said) + rng.choice(said))
    return pool, planted


def test_the_bit_map_bound_never_drops_a_pair_at_the_threshold_and_the_exact_check_is_jaccard() -> None:
    from siftcli.curate.dedup import similarities, sketch, within_reach

    rng = random.Random(3)
    base = _sentences(60, rng)
    rows = list(base)
    for r in base:  # each base row with a share of its tokens replaced: similarities spread over (0, 1]
        for swap in (1, 3, 6, 10, 20):
            copy = list(r)
            for j in rng.sample(range(len(copy)), min(swap, len(copy))):
                copy[j] = rng.randrange(1000, 30000)
            rows.append(copy)
    rows += [[], [], [5]]
    tokens = from_sequences(rows)
    n = len(rows)
    pairs = np.array([(i, j) for i in range(n) for j in range(i + 1, n)], dtype=np.int64)
    sets = bigram_sets(tokens, np.arange(n))
    exact = np.array([jaccard(sets[i], sets[j]) for i, j in pairs.tolist()])
    assert np.array_equal(similarities(sets, pairs), exact)
    sk = sketch(tokens)
    for t in (0.3, 0.5, 0.7, 0.9, 1.0):
        reach = within_reach(sk, sk.spare(), pairs[:, 0] * n + pairs[:, 1], t)
        assert reach[exact >= t].all()
        assert (~reach[exact < t - 0.15]).mean() > 0.95  # and the bound is sharp: few pairs well below are left in
    assert (exact >= 0.7).sum() >= 50 and ((exact > 0.3) & (exact < 0.6)).sum() >= 100, np.histogram(exact, 10)


def test_rows_that_share_text_cost_checks_in_proportion_to_their_copies() -> None:
    from siftcli.curate.dedup import SearchCounts, candidates, clusters, sketch

    pool, planted = _shared_text_pool(random.Random(5))
    tokens = from_sequences(pool)
    counts = SearchCounts()
    pairs = candidates(sketch(tokens), 0.7, counts)
    parent = clusters(pairs, len(pool), lambda rows: bigram_sets(tokens, rows), 0.7, counts)
    assert counts.band_pairs > 3 * counts.checked, counts  # sentences shared by ~25 rows put many pairs in each band
    assert counts.checked <= 1.25 * counts.near_copies  # the exact checks follow the near-copies, not the shared text
    removed = set(np.flatnonzero(parent != np.arange(len(pool))).tolist())
    assert planted <= removed  # every planted copy found
    assert near_duplicates(pool) == sorted(set(range(len(pool))) - removed)
