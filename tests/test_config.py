"""Recipe validation called directly: defaults, overrides, one-line errors that name the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from siftcli.errors import SiftcliError
from siftcli.recipe.reader import apply_override, load_recipe
from siftcli.recipe.schema import recipe_to_yaml, validate_recipe
from siftcli.training.setup import sift_config
from tests.conftest import tiny_recipe_dict


def test_defaults_and_resolved_metric(tmp_path: Path) -> None:
    r = validate_recipe({})
    assert r.task == "text-classification" and r.resolved_metric == "accuracy" and r.max_steps is None
    assert r.sift.mode == "probabilistic" and r.sift.score == "loss" and r.sift.reference.epochs == 1.0
    assert validate_recipe({"task": "causal-lm"}).resolved_metric == "perplexity"


def test_unknown_key_suggests_the_nearest(tmp_path: Path) -> None:
    with pytest.raises(SiftcliError, match="unknown key 'sift.reference.epoch'; did you mean 'sift.reference.epochs'"):
        validate_recipe({"sift": {"reference": {"epoch": 1}}})
    with pytest.raises(SiftcliError, match="key 'data.label_noise'"):
        validate_recipe({"data": {"label_noise": 1.0}})
    with pytest.raises(SiftcliError, match="key 'sift.keep_fraction'"):
        validate_recipe({"sift": {"keep_fraction": 0}})


def test_override_parses_yaml_values_and_creates_sections() -> None:
    raw: dict = {}
    apply_override(raw, "sift.beta=2")
    apply_override(raw, "sift.reference.config_overrides={num_hidden_layers: 1}")
    apply_override(raw, "eval.every_steps=")
    assert raw == {"sift": {"beta": 2, "reference": {"config_overrides": {"num_hidden_layers": 1}}}, "eval": {"every_steps": None}}
    with pytest.raises(SiftcliError, match="expected key.sub=value"):
        apply_override(raw, "sift.beta")
    with pytest.raises(SiftcliError, match="'beta' is not a section"):
        apply_override(raw, "sift.beta.x=1")


def test_saved_recipe_round_trips(tmp_path: Path) -> None:
    r = validate_recipe(tiny_recipe_dict(tmp_path / "d.csv", **{"sift.score": "reducible", "max_steps": 7}))
    path = tmp_path / "r.yaml"
    path.write_text(recipe_to_yaml(r))
    assert load_recipe(path) == r


def test_sift_section_becomes_the_engine_config_by_name(tmp_path: Path) -> None:
    r = validate_recipe(tiny_recipe_dict(tmp_path / "d.csv", seed=3, **{
        "sift.sift_delay": 0, "sift.sift_delay_fraction": 0.25, "sift.mode": "calibrated", "sift.beta": 3.0,
        "sift.keep_fraction": 0.3, "sift.score": "reducible"}))
    cfg = sift_config(r, n_train=80)  # 10 raw batches of 8 per epoch, 2 epochs
    assert (cfg.beta, cfg.mode, cfg.score, cfg.keep_fraction, cfg.seed) == (3.0, "calibrated", "reducible", 0.3, 3)
    from dataclasses import fields

    section = r.sift.model_dump()
    copied = [f.name for f in fields(cfg) if f.name in section and f.name != "sift_delay"]
    assert len(copied) == len(fields(cfg)) - 2  # every engine field but the delay (in batches) and the seed, by name
    for name in copied:
        assert getattr(cfg, name) == section[name], name
    assert cfg.sift_delay == 5 and cfg.target_keep_fraction == 0.3
    assert sift_config(r, 80, mode="random", keep_fraction=0.5).mode == "random"
    # keep_fraction is calibrated's and random's: a probabilistic rule keeps 1/(1+beta) whatever is left in it
    assert sift_config(r, 80, mode="probabilistic", beta=1.0).target_keep_fraction == 0.5
