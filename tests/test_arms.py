"""The table of arms: what each opponent copies from the sifted run, and how a plan runs per seed."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from siftcli.arms.context import SeedContext
from siftcli.arms.run import run_arms, run_one
from siftcli.arms.table import ARMS, arm_row, check_arms, default_arms, ordered, random_keep_changes
from siftcli.errors import SiftcliError
from siftcli.recipe.schema import validate_recipe
from siftcli.training.state import Reference
from siftcli.workload.build import build_workload
from tests.conftest import tiny_recipe_dict


def test_random_keep_copies_the_kept_fraction_and_an_auto_delay_start() -> None:
    fixed = {"sift": {"sift_delay": 5}, "keep": {"achieved_after_delay": 0.4, "target": 0.5}}
    assert random_keep_changes(fixed) == {"mode": "random", "score": "loss", "keep_fraction": 0.4, "sift_delay": 5}
    infobatch = {"sift": {"sift_delay": 94, "anneal_fraction": 0.125}, "keep": {"achieved_after_delay": 0.7}}
    assert random_keep_changes(infobatch) == {"mode": "random", "score": "loss", "keep_fraction": 0.7, "sift_delay": 94,
                                              "anneal_fraction": 0.125}  # the variant's own delay and anneal
    auto = {"sift": {"sift_delay": "auto"}, "keep": {"achieved_after_delay": 0.45, "sift_started_at": 37}}
    assert random_keep_changes(auto) == {"mode": "random", "score": "loss", "keep_fraction": 0.45, "sift_delay": 37}
    never = {"sift": {"sift_delay": "auto"}, "keep": {"achieved_after_delay": None, "target": 0.5, "sift_started_at": None}}
    assert random_keep_changes(never)["keep_fraction"] == 1.0  # the sifted run never sifted: neither does its control


def test_needs_come_first_once_and_unknown_arms_are_one_line() -> None:
    assert ordered(["equal-time"]) == ["baseline", "sifted", "equal-time"]
    assert ordered(["static-filter", "random-keep", "baseline"], subject="sifted:beta=2") == [
        "sifted:beta=2", "static-filter", "random-keep", "baseline"]
    with pytest.raises(SiftcliError, match="unknown arm; known: baseline, sifted"):
        arm_row("cheap")
    with pytest.raises(SiftcliError, match="expected NAME or NAME:key=value"):
        ARMS["sifted"].derive(SeedContext(None, None, {}), "sifted:beta")  # type: ignore[arg-type]


def test_honest_opponents_are_the_default(text_csv: Path) -> None:
    plain = validate_recipe(tiny_recipe_dict(text_csv))
    assert default_arms(plain) == ["baseline", "sifted", "equal-time", "random-keep"]
    assert default_arms(plain, quick=True) == ["baseline", "sifted"]
    ranked = validate_recipe(tiny_recipe_dict(text_csv, **{"sift.score": "reducible"}))
    assert default_arms(ranked)[-1] == "static-filter"
    random = validate_recipe(tiny_recipe_dict(text_csv, **{"sift.mode": "random", "sift.keep_fraction": 0.5}))
    assert "random-keep" not in default_arms(random)


def test_static_filter_keeps_the_lowest_reference_losses_at_the_sifted_fraction(text_csv: Path) -> None:
    recipe = validate_recipe(tiny_recipe_dict(text_csv, **{"sift.score": "reducible"}))
    workload = build_workload(recipe)
    n = len(workload.train_data)
    ctx = SeedContext(recipe, workload, {})
    ctx._references[recipe.sift.reference.kind] = (Reference(torch.arange(n, 0, -1).float(), 3.0), "sifted")  # sample i: loss n - i
    ctx.runs["sifted"] = {"keep": {"achieved": 0.25}}
    plan = ARMS["static-filter"].derive(ctx, "static-filter")
    k = round(0.25 * n)
    assert plan.subset == list(range(n - k, n)) and plan.pays_reference and plan.sift is None
    paid = ctx.reference("static-filter")
    assert paid.seconds == 0.0 and paid.cached and paid.summary()["build_seconds"] == 3.0  # amortised, cost kept beside


def test_a_wider_static_filter_trains_for_the_subjects_steps_and_bad_fractions_are_one_line(text_csv: Path) -> None:
    recipe = validate_recipe(tiny_recipe_dict(text_csv, **{"sift.score": "reducible"}))
    workload = build_workload(recipe)
    n = len(workload.train_data)
    ctx = SeedContext(recipe, workload, {})
    ctx._references[recipe.sift.reference.kind] = (Reference(torch.arange(n, 0, -1).float(), 3.0), "sifted")
    ctx.runs["sifted"] = {"keep": {"achieved": 0.25}, "optimizer_steps": 7}
    plan = ARMS["static-filter"].derive(ctx, "static-filter:fraction=0.5")
    k = round(0.5 * n)
    assert plan.subset == list(range(n - k, n)) and plan.pays_reference  # the lowest half, not the subject's quarter
    assert plan.recipe.max_steps == 7  # the same compute as the subject
    assert plan.recipe.epochs * (k // recipe.batch_size) >= 7  # enough epochs to reach those steps
    assert ARMS["static-filter"].derive(ctx, "static-filter").recipe.max_steps is None  # the default: full schedule
    for bad, said in (("fraction=1.5", "fraction must be a number in"), ("fraction=yes", "fraction must be a number in"),
                      ("keep=0.3", "takes only fraction=F")):
        with pytest.raises(SiftcliError, match=said):
            ARMS["static-filter"].check(recipe, f"static-filter:{bad}")  # type: ignore[misc]


def test_a_plan_gives_each_seed_its_own_weights_and_every_arm_of_a_seed_the_same(text_csv: Path, tmp_path: Path) -> None:
    recipe = validate_recipe(tiny_recipe_dict(text_csv, epochs=1, **{"eval.every_steps": None}))
    starts: dict[tuple[int, str], torch.Tensor] = {}
    import siftcli.arms.run as train_mod  # where run_one looks train up

    real = train_mod.train

    def spy(workload, r, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        starts[(r.seed, kwargs["arm"])] = workload.model.classifier.weight.detach().clone()
        return real(workload, r, *args, **kwargs)

    import pytest as _pytest

    with _pytest.MonkeyPatch.context() as mp:
        mp.setattr(train_mod, "train", spy)
        runs = run_arms(recipe, ["baseline", "random-keep", "train-less:fraction=0.5"], [0, 1], tmp_path)
    assert list(runs[0]) == ["baseline", "sifted", "random-keep", "train-less:fraction=0.5"]
    for seed in (0, 1):
        first = starts[(seed, "baseline")]
        assert all(torch.equal(first, starts[(seed, arm)]) for arm in runs[0])
    assert not torch.equal(starts[(0, "baseline")], starts[(1, "baseline")])
    assert runs[0]["train-less:fraction=0.5"]["optimizer_steps"] == round(0.5 * runs[0]["baseline"]["optimizer_steps"])
    assert (tmp_path / "seed1" / "train-less-fraction0.5" / "metrics.json").exists()


def test_target_only_trains_on_the_target_group_and_every_arm_reports_group_shares(tmp_path: Path) -> None:
    from tests.conftest import make_text_rows

    rows = make_text_rows(120)
    path = tmp_path / "pool.csv"
    path.write_text("text,label,domain\n" + "\n".join(f"{t},{y},{'in' if i % 3 == 0 else 'off'}" for i, (t, y) in enumerate(rows)))
    recipe = validate_recipe(tiny_recipe_dict(path, epochs=1, **{"data.group_column": "domain", "data.target_group": "in"}))
    runs = run_arms(recipe, ["baseline", "target-only"], [0], tmp_path / "out")[0]
    only, base = runs["target-only"], runs["baseline"]
    assert only["groups"]["in"]["share_of_kept"] == 1.0 and only["groups"]["off"]["kept"] == 0
    assert only["subset"]["samples"] == base["groups"]["in"]["samples"]
    assert base["groups"]["in"]["share_of_kept"] == pytest.approx(base["groups"]["in"]["share_of_data"])
    bad = tiny_recipe_dict(path, **{"data.group_column": "domain", "data.target_group": "elsewhere"})
    with pytest.raises(SiftcliError, match="data.target_group: 'elsewhere' is not a value of column 'domain'"):
        build_workload(validate_recipe(bad))


WORDS = ("the film story actor music scene light river house garden paper window city table morning evening winter "
         "summer doctor teacher market road bridge mountain island forest letter history science village water").split()


def _redundant_csv(tmp_path: Path, seed: int = 0) -> tuple[Path, int]:
    """40 distinct sentences of 8-12 words, then 10 of them again 3 times each: 70 rows, 40 distinct."""
    import random

    rng = random.Random(seed)
    rows = [(" ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 12))), i % 2) for i in range(40)]
    rows += [rows[i] for i in range(10) for _ in range(3)]
    path = tmp_path / "redundant.csv"
    path.write_text("text,label\n" + "\n".join(f"{t},{y}" for t, y in rows) + "\n")
    return path, 40


def test_dedup_trains_on_one_of_each_near_copy_with_its_search_on_the_arms_clock(tmp_path: Path) -> None:
    path, _ = _redundant_csv(tmp_path)
    recipe = validate_recipe(tiny_recipe_dict(path, epochs=1, **{"data.eval_fraction": 0.2, "eval.every_steps": None}))
    workload = build_workload(recipe)
    texts = [tuple(t) for t in (s["input_ids"].tolist() if hasattr(s["input_ids"], "tolist") else s["input_ids"]
                                for s in workload.train_data)]
    ctx = SeedContext(recipe, workload, {k: v.clone() for k, v in workload.model.state_dict().items()})
    plan = ARMS["dedup"].derive(ctx, "dedup")
    assert sorted({texts[i] for i in plan.subset}) == sorted(set(texts))  # one of each, no sentence lost
    assert len(plan.subset) == len(set(texts)) < len(texts) and plan.upfront["dedup"] > 0
    metrics = run_one(ctx, "dedup", tmp_path / "dedup")
    assert metrics["phases"]["dedup"] > 0  # the search is a phase of its clock
    assert metrics["train_seconds"] >= metrics["phases"]["dedup"] and metrics["subset"]["samples"] == len(set(texts))
    with pytest.raises(SiftcliError, match="threshold must be a similarity"):
        arm_row("dedup").check(recipe, "dedup:threshold=2")


@pytest.mark.parametrize("arm,expected", [
    ("sifted:beta=0", "beta must be a positive number"),
    ("sifted:beta=1e999", "beta must be a positive number"),
    ("sifted:nope=1", "unknown sift setting nope"),
    ("sifted:mode=sometimes", "mode must be one of"),
    ("train-less:fraction=abc", "fraction must be a number in (0, 1]"),
    ("train-less:steps=3", "train-less takes fraction=F only"),
])
def test_bad_arm_settings_are_refused_before_anything_trains(text_csv: Path, arm: str, expected: str) -> None:
    recipe = validate_recipe(tiny_recipe_dict(text_csv), "t")
    with pytest.raises(SiftcliError) as err:
        check_arms(recipe, [arm])
    assert expected in str(err.value) and arm in str(err.value)


def test_an_arm_name_becomes_one_safe_folder_inside_the_comparison() -> None:
    from siftcli.arms.run import folder_name

    assert folder_name("sifted:score=reducible,beta=2") == "sifted-scorereducible-beta2"  # as before: folders stay put
    for hostile in ("variant:name=../../../X", "../..", "/etc/passwd", "a\\b", "..", ""):
        name = folder_name(hostile)
        assert name and "/" not in name and "\\" not in name and name not in (".", "..") and not name.startswith(".")


def test_train_less_under_wsd_is_read_from_forks_of_the_baseline_and_equals_the_run_apart(
        text_csv: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A ``wsd`` comparison trains each train-less arm's decay alone, from the baseline's checkpoint at its fork point;
    its result is the one the arm trained from its start gives (the recipe's linear schedule gets no forks)."""
    import siftcli.arms.run as run_module

    recipe = validate_recipe(tiny_recipe_dict(text_csv, **{"optim.schedule": "wsd"}))
    arms = ["baseline", "train-less:fraction=0.5"]
    forked = run_arms(recipe, arms, [0], tmp_path / "forked")[0]
    monkeypatch.setattr(run_module, "trunk_forks", lambda *args: {})
    apart = run_arms(recipe, arms, [0], tmp_path / "apart")[0]
    for arm in arms[1:]:
        assert "forked_from" in forked[arm] and "forked_from" not in apart[arm]
        assert forked[arm]["optimizer_steps"] == apart[arm]["optimizer_steps"] < forked["baseline"]["optimizer_steps"]
        assert forked[arm]["curve"][-1]["loss"] == apart[arm]["curve"][-1]["loss"]
    assert forked["baseline"]["curve"][-1]["loss"] == apart["baseline"]["curve"][-1]["loss"]  # writing forks is off it
    assert not list((tmp_path / "forked").glob("**/forks/step*/checkpoint.pt"))  # each spent once its fork trained
    from siftcli.arms.forks import trunk_forks

    assert len(trunk_forks(recipe, 400, [0.35, 0.5], tmp_path)) == 2  # 100 steps: forks at 28 and 40
    assert trunk_forks(validate_recipe(tiny_recipe_dict(text_csv)), 40, [0.35, 0.5], tmp_path) == {}  # linear: apart
