"""Data sources: the built-in lexicon, local files, label mapping, and seeded label noise."""

from __future__ import annotations

from pathlib import Path

import pytest

from siftcli.errors import SiftcliError
from siftcli.recipe.schema import DataSpec, validate_recipe
from siftcli.workload.build import build_workload
from siftcli.workload.data import load_splits, vader_words
from tests.conftest import tiny_recipe_dict


def test_vader_words_are_real_labelled_and_split_by_seed() -> None:
    train, ev = vader_words(0.15, seed=0)
    assert len(train["text"]) > 5000 and 0.13 < len(ev["text"]) / (len(ev["text"]) + len(train["text"])) < 0.17
    assert set(train["label"]) == {0, 1} and not set(train["text"]) & set(ev["text"])
    assert vader_words(0.15, seed=1)[1]["text"] != ev["text"]


def test_csv_with_string_labels_maps_to_sorted_ids(tmp_path: Path) -> None:
    path = tmp_path / "d.csv"
    path.write_text("sentence,y\n" + "".join(f"w{i},{'pos' if i % 3 else 'neg'}\n" for i in range(40)))
    splits = load_splits(DataSpec(source=str(path), text_column="sentence", label_column="y", eval_fraction=0.25),
                         task="text-classification")
    assert splits.label_names == ["neg", "pos"] and splits.input_column == "sentence"
    assert len(splits.train) == 30 and len(splits.eval) == 10
    assert set(splits.train["label"]) <= {0, 1}


def test_tsv_without_header_and_caps(tmp_path: Path) -> None:
    path = tmp_path / "d.tsv"
    path.write_text("".join(f"text {i}\t{i % 2}\n" for i in range(50)))
    splits = load_splits(DataSpec(source=str(path), column_names=["text", "label"], max_train_samples=10, max_eval_samples=5,
                                  eval_fraction=0.2), task="text-classification")
    assert (len(splits.train), len(splits.eval)) == (10, 5)


def test_regression_needs_numbers(tmp_path: Path) -> None:
    path = tmp_path / "d.csv"
    path.write_text("text,label\n" + "".join(f"t{i},high\n" for i in range(10)))
    with pytest.raises(SiftcliError, match="regression needs numeric labels"):
        load_splits(DataSpec(source=str(path)), task="regression")


def test_label_noise_flips_a_seeded_fraction_of_training_labels_only(text_csv: Path) -> None:
    clean = build_workload(validate_recipe(tiny_recipe_dict(text_csv)))
    noisy = build_workload(validate_recipe(tiny_recipe_dict(text_csv, **{"data.label_noise": 0.25})))
    again = build_workload(validate_recipe(tiny_recipe_dict(text_csv, **{"data.label_noise": 0.25})))
    assert clean.noisy is None
    flipped = noisy.noisy.nonzero().flatten().tolist()
    assert len(flipped) == round(0.25 * len(clean.train_data))
    for i, (a, b) in enumerate(zip(clean.train_data, noisy.train_data)):
        assert (a["labels"] != b["labels"]) == (i in flipped)
    assert [r["labels"] for r in noisy.eval_data] == [r["labels"] for r in clean.eval_data]
    assert again.noisy.tolist() == noisy.noisy.tolist()
