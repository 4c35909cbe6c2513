"""The n-gram relevance reference: target-like texts score low, it trains nothing, and recipes that cannot use it are
refused in one line."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

import siftcli.arms.reference as reference_mod
from siftcli.curate.ngram import counts, cross_entropy_difference
from siftcli.curate.tokens import from_sequences
from siftcli.errors import SiftcliError
from siftcli.recipe.schema import validate_recipe
from siftcli.workload.build import build_workload
from tests.conftest import NEG, POS, make_text_rows, tiny_recipe_dict

NEWS = ["stocks", "market", "shares", "bank", "profit", "league", "match", "season", "election", "minister"]


def _row(ids: list[int]) -> dict:
    return {"input_ids": [101, *ids, 102], "labels": 0}


def test_pool_texts_drawn_like_the_target_score_below_every_other_text() -> None:
    rng = random.Random(0)
    target_words, other_words = list(range(1000, 1050)), list(range(2000, 2050))
    target = [_row(rng.choices(target_words, k=8)) for _ in range(40)]
    pool = [_row(rng.choices(target_words if i % 3 == 0 else other_words, k=rng.randint(3, 12))) for i in range(60)]
    scores = cross_entropy_difference(target, pool)
    inside = scores[[i for i in range(60) if i % 3 == 0]]
    outside = scores[[i for i in range(60) if i % 3]]
    assert scores.dtype == torch.float32 and inside.max() < outside.min()
    assert cross_entropy_difference(target, [_row([])]).tolist() == [0.0]  # markers only: no evidence either way
    with pytest.raises(ValueError, match="needs target texts"):
        cross_entropy_difference([], pool)


def test_bigrams_are_hashed_apart_from_unigrams_so_word_order_counts() -> None:
    row = counts(from_sequences([[5, 6]]))
    assert row[0, 5] == 1 and row[0, 6] == 1 and row.sum() == 3  # two unigrams and one bigram, in its own bucket
    forward = _row([7, 8, 7, 8, 7, 8])
    scores = cross_entropy_difference([forward] * 5, [forward, _row([8, 7, 8, 7, 8, 7])])
    assert scores[0] < scores[1]  # the same words, in the target's order, look more like it


def _two_domain_data(tmp_path: Path) -> tuple[Path, Path]:
    rng = random.Random(1)
    pool = tmp_path / "pool.csv"
    lines = ["text,label"]
    for i, (text, label) in enumerate(make_text_rows(120, seed=2)):  # a third like the target, two thirds news
        lines.append(f"{text},{label}" if i % 3 == 0 else f"{' '.join(rng.choices(NEWS, k=5))},{label}")
    pool.write_text("\n".join(lines) + "\n")
    holdout = tmp_path / "holdout.csv"
    holdout.write_text("\n".join(["text,label"] + [f"{t},{y}" for t, y in make_text_rows(30, seed=3)]) + "\n")
    return pool, holdout


def test_an_ngram_reference_ranks_target_texts_first_and_trains_nothing(tmp_path: Path, monkeypatch) -> None:
    from siftcli.curate.pipeline import lowest

    pool, holdout = _two_domain_data(tmp_path)
    monkeypatch.setattr(reference_mod, "train", lambda *a, **k: pytest.fail("an n-gram reference trains no model"))
    recipe = validate_recipe(tiny_recipe_dict(pool, **{
        "sift.score": "reference",
        "sift.reference.kind": "ngram", "sift.reference.holdout_source": str(holdout)}))
    workload = build_workload(recipe)
    built, runs = reference_mod.reference_for(workload, recipe)
    assert runs == [] and built.kind == "ngram" and not built.cached
    texts = workload.train_data
    kept = lowest(built.losses, 0.3)
    news_ids = set(workload.processor(" ".join(NEWS), add_special_tokens=False)["input_ids"])
    on_target = [not (set(texts[i]["input_ids"][1:-1]) <= news_ids) for i in kept]
    assert sum(on_target) == len(kept)  # a perfect filter on this pool: every kept text is the target's kind
    again, _ = reference_mod.reference_for(build_workload(recipe), recipe)
    assert again.cached and torch.equal(again.losses, built.losses)


def test_recipes_that_cannot_use_an_ngram_reference_are_refused(text_csv: Path) -> None:
    for changes, expected in (({"sift.reference.kind": "ngram"}, "kind ngram needs exactly one of holdout_source"),
                              ({"sift.reference.kind": "ngram", "sift.reference.holdout_fraction": 0.2,
                                "sift.score": "reducible"}, "not a loss that score reducible can subtract"),
                              ({"task": "image-classification", "loss": "auto", "model.source": "config:vit",
                                "sift.reference.kind": "ngram", "sift.reference.holdout_fraction": 0.2},
                               "counts token n-grams; task 'image-classification' has image inputs")):
        with pytest.raises(SiftcliError, match=expected):
            validate_recipe(tiny_recipe_dict(text_csv, **changes))


def test_naive_bayes_gives_a_label_that_fits_its_words_a_low_loss_and_a_flipped_one_a_high_loss() -> None:
    import math

    from siftcli.curate.ngram import label_losses

    rng = random.Random(0)
    words = {0: list(range(1000, 1030)), 1: list(range(2000, 2030))}

    def row(ids: list[int], y: int) -> dict:
        return {"input_ids": [101, *ids, 102], "labels": torch.tensor(y)}

    holdout = [row(rng.choices(words[y], k=6), y) for y in (0, 1) for _ in range(15)]
    pool = [row(rng.choices(words[i % 2], k=rng.randint(2, 9)), (i % 2) ^ (i % 5 == 0)) for i in range(40)]
    losses = label_losses(holdout, pool)
    flipped = [i for i in range(40) if i % 5 == 0]
    kept = [i for i in range(40) if i % 5]
    assert losses.dtype == torch.float32 and losses[kept].max() < losses[flipped].min()
    assert losses[kept].max() < 0.5 < 1.0 < losses[flipped].min()  # a real loss of the label, in nats
    assert label_losses(holdout, [row([], 1)]).item() == pytest.approx(math.log(2))  # no words: no evidence
    assert label_losses(holdout, [row(words[0][:3], 2)]).item() > 1.0  # a class the holdout lacks: flat, never chosen first
    with pytest.raises(ValueError, match="needs labelled holdout texts"):
        label_losses([], pool)


def test_a_naive_bayes_reference_ranks_mislabelled_texts_last_trains_nothing_and_is_cached(tmp_path: Path,
                                                                                           monkeypatch) -> None:
    from siftcli.curate.pipeline import lowest

    rng = random.Random(4)

    def clean(n: int) -> list[tuple[str, int]]:  # each text's words all say its label
        return [(" ".join(rng.choices(POS if y else NEG, k=rng.randint(2, 5))), y) for y in (rng.randint(0, 1) for _ in range(n))]

    rows = clean(160)
    pool = tmp_path / "pool.csv"
    flipped = {i for i in range(160) if i % 4 == 0}  # a quarter of the labels flipped
    pool.write_text("\n".join(["text,label"] + [f"{t},{1 - y if i in flipped else y}" for i, (t, y) in enumerate(rows)]) + "\n")
    holdout = tmp_path / "holdout.csv"
    holdout.write_text("\n".join(["text,label"] + [f"{t},{y}" for t, y in clean(60)]) + "\n")
    monkeypatch.setattr(reference_mod, "train", lambda *a, **k: pytest.fail("a naive Bayes reference trains no model"))
    recipe = validate_recipe(tiny_recipe_dict(pool, **{
        "sift.score": "reference", "sift.reference.kind": "naive-bayes", "sift.reference.holdout_source": str(holdout)}))
    workload = build_workload(recipe)
    built, runs = reference_mod.reference_for(workload, recipe)
    assert runs == [] and built.kind == "naive-bayes" and not built.cached
    bad = {(t, 1 - y) for i, (t, y) in enumerate(rows) if i in flipped} - {(t, y) for t, y in rows}
    def pair(i: int) -> tuple[str, int]:
        row = workload.train_data[i]
        return workload.processor.decode(row["input_ids"], skip_special_tokens=True), int(row["labels"])

    share = sum(pair(i) in bad for i in range(len(workload.train_data))) / len(workload.train_data)
    kept = lowest(built.losses, 0.5)
    assert share > 0.15 and sum(pair(i) in bad for i in kept) == 0  # a quarter flipped; none in the lowest half
    again, _ = reference_mod.reference_for(build_workload(recipe), recipe)
    assert again.cached and torch.equal(again.losses, built.losses)


def test_recipes_that_cannot_use_a_naive_bayes_reference_are_refused(text_csv: Path) -> None:
    for changes, expected in (({"sift.reference.kind": "naive-bayes"}, "kind naive-bayes needs exactly one of"),
                              ({"task": "image-classification", "loss": "auto", "model.source": "config:vit",
                                "sift.reference.kind": "naive-bayes", "sift.reference.holdout_fraction": 0.2},
                               "naive-bayes counts token n-grams per class; task 'image-classification' has image")):
        with pytest.raises(SiftcliError, match=expected):
            validate_recipe(tiny_recipe_dict(text_csv, **changes))
