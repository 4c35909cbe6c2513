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
