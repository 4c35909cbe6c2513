"""siftcli plan: which strategies apply, the search on the validation half, the confirmation on the other half, the
recipe it writes, an interrupted plan resumed, and bad options in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from siftcli.arms.context import SeedContext
from siftcli.arms.run import run_one
from siftcli.arms.table import check_arms
from siftcli.cli import app
from siftcli.errors import RunInterrupted, SiftcliError
from siftcli.plan.record import Confirmation, Paired, PlanRecord
from siftcli.plan.run import _decide, run_plan, split_eval
from siftcli.plan.strategies import strategies
from siftcli.recipe.reader import load_recipe
from siftcli.recipe.schema import validate_recipe
from siftcli.workload.build import build_workload
from tests.conftest import make_text_rows, tiny_recipe_dict

runner = CliRunner()


def _recipe(tmp_path: Path, rows: int = 240, **changes: object) -> Path:
    data = tmp_path / "text.csv"
    data.write_text("\n".join(["text,label"] + [f"{t},{y}" for t, y in make_text_rows(rows)]) + "\n")
    path = tmp_path / "r.yaml"
    recipe = tiny_recipe_dict(data, **{"sift.reference": {"kind": "ngram", "holdout_fraction": 0.15}, **changes})
    path.write_text(yaml.safe_dump(recipe))
    return path


def test_strategies_apply_by_recipe_and_say_why_the_rest_do_not(text_csv: Path) -> None:
    plain = validate_recipe(tiny_recipe_dict(text_csv), "t")
    found, skipped = strategies(plain)
    families = {c.family for c in found}
    assert {"fewer-epochs", "dedup", "online"} <= families and "filter" not in families
    assert "sifted" in {c.arm for c in found}  # the recipe sifts: its own settings are a candidate as written
    unsifted, _ = strategies(validate_recipe(tiny_recipe_dict(text_csv, **{"sift.enabled": False}), "t"))
    assert "sifted" not in {c.arm for c in unsifted}
    assert any(s.family == "filter" and "holdout" in s.why for s in skipped)
    assert any(s.family == "teacher-cache" for s in skipped)
    held = validate_recipe(tiny_recipe_dict(text_csv, **{"sift.reference": {"kind": "ngram", "holdout_fraction": 0.2}}), "t")
    found, _ = strategies(held)
    arms = [c.arm for c in found]
    assert "filter:fraction=0.25,reference=naive-bayes" in arms and "filter:fraction=0.5,reference=holdout" in arms
    assert any(c.family == "dedup+filter" for c in found)
    check_arms(held, arms, "baseline")  # every strategy is a runnable row of the arms table


@pytest.mark.parametrize("sift,keep,extra", [
    ({"mode": "probabilistic", "beta": 1.0, "scoring": "memory"}, 0.5, 0.05),
    ({"mode": "calibrated", "keep_fraction": 0.3, "scoring": "fresh"}, 0.3, 0.35),
    ({"mode": "infobatch", "prune_fraction": 0.5, "scoring": "memory"}, 0.75, 0.05),
])
def test_the_recipes_own_sifting_is_priced_by_its_kept_share_and_scoring(text_csv: Path, sift: dict, keep: float,
                                                                         extra: float) -> None:
    from siftcli.plan.search import breadth_first, predicted_cost

    recipe = validate_recipe(tiny_recipe_dict(text_csv, **{f"sift.{k}": v for k, v in sift.items()}), "t")
    found, _ = strategies(recipe)
    own = next(c for c in found if c.arm == "sifted")
    fresh = next(c for c in found if c.family == "online" and c.arm != "sifted")
    assert (own.pool_fraction, own.extra_cost) == (pytest.approx(keep), extra)
    assert predicted_cost(own, 100.0, 1.0) == pytest.approx(100 * (keep + extra))
    online = [c.arm for c in breadth_first(found, 100.0) if c.family == "online"]
    cheaper_first = predicted_cost(own, 100.0, 1.0) < predicted_cost(fresh, 100.0, 1.0)
    assert online == (["sifted", fresh.arm] if cheaper_first else [fresh.arm, "sifted"])


def test_the_filter_and_random_subset_rows_check_their_settings(text_csv: Path) -> None:
    plain = validate_recipe(tiny_recipe_dict(text_csv), "t")
    for arm, expected in (("filter:fraction=2", "fraction must be a number in (0, 1]"),
                          ("filter:fraction=0.5,reference=ngram", "reads a holdout"),
                          ("filter:reference=ngram", "give one"),
                          ("filter:nope=1", "filter takes fraction=F"),
                          ("random-subset:fraction=0", "fraction must be"),
                          ("random-subset:size=3", "random-subset takes fraction=F only")):
        with pytest.raises(SiftcliError, match=expected.replace("(", r"\(").replace(")", r"\)").replace("]", r"\]")):
            check_arms(plain, [arm], "baseline")


def test_a_filter_keeps_its_fraction_by_the_named_reference_and_a_random_subset_its_size(tmp_path: Path) -> None:
    recipe = load_recipe(_recipe(tmp_path))
    w = build_workload(recipe)
    ctx = SeedContext(recipe, w, {k: v.clone() for k, v in w.model.state_dict().items()}, "baseline")
    nb = run_one(ctx, "filter:fraction=0.25,reference=naive-bayes", tmp_path / "nb")
    rnd = run_one(ctx, "random-subset:fraction=0.25", tmp_path / "rnd")
    n = len(w.train_data)
    assert nb["subset"]["samples"] == rnd["subset"]["samples"] == round(0.25 * n)
    assert nb["reference"]["kind"] == "naive-bayes" and nb["reference"]["paid_seconds"] >= 0
    assert ctx.reference("x", kind="naive-bayes").cached  # built once per seed, reused by later arms


def test_split_eval_halves_are_disjoint_fixed_and_refuse_tiny_data() -> None:
    val, ev = split_eval(41)
    assert not set(val) & set(ev) and len(val) + len(ev) == 41 and split_eval(41) == (val, ev)
    with pytest.raises(SiftcliError, match="at least 4"):
        split_eval(3)


def test_nothing_confirmed_means_train_on_everything() -> None:
    record = PlanRecord("running", "r", "accuracy", 3, 1, 3, baseline_seconds=10.0)
    _decide(record)
    assert record.pick == "baseline" and record.payback_runs is None and record.answer.startswith("train on everything")
    worse = Paired("baseline", -3.0, 0.5, 3, (-5.0, -1.0), [-3.0, -3.5, -2.5])
    record.confirmations = [Confirmation("filter:fraction=0.25", [1, 2, 3], [0.8] * 3, [0.83] * 3, 0.3, 5.0, [worse], False)]
    _decide(record)
    assert record.pick == "baseline"


def test_a_plan_searches_confirms_writes_a_runnable_recipe_and_resumes(tmp_path: Path) -> None:
    recipe = load_recipe(_recipe(tmp_path))
    seen: list[str] = []

    def stop_after_a_few(kind: str, data: dict) -> None:
        if kind == "plan":
            seen.append(data["arm"])
            if len(seen) == 4:
                raise KeyboardInterrupt

    with pytest.raises(RunInterrupted):
        run_plan(recipe, budget=30, tolerance=100, seeds=2, output=str(tmp_path / "plan"), on_event=stop_after_a_few)
    saved = json.loads((tmp_path / "plan" / "plan.json").read_text())
    assert saved["status"] == "interrupted"
    done_before = {c["arm"] for c in saved["candidates"] if c["trials"]}
    assert done_before  # the trials finished before the interruption are kept

    resumed: list[tuple[str, str]] = []
    folder, record = run_plan(None, resume=str(tmp_path / "plan"),
                              on_event=lambda k, d: resumed.append((d["arm"], d["phase"])) if k == "plan" else None)
    assert record.status == "completed"
    assert all(c.outcome != "waiting" for c in record.candidates)  # every candidate has a fate
    assert record.validation_rows + record.evaluation_rows > 0 and record.baseline_metric is not None
    # tolerance 100 points: something cheaper is within it, so a strategy is picked, confirmed over 2 seeds, and pays back
    assert record.pick != "baseline" and record.confirmations and record.payback_runs is not None
    conf = record.confirmations[0]
    assert conf.seeds == [recipe.seed + 1, recipe.seed + 2] and conf.versus[0].opponent == "baseline"
    assert conf.versus[0].n == 2
    plan_yaml = load_recipe(folder / "plan.yaml")  # a valid recipe, runnable with siftcli train
    if record.pick_family in ("filter", "dedup", "dedup+filter"):
        assert Path(plan_yaml.data.source).exists() and plan_yaml.data.eval_source and not plan_yaml.sift.enabled
    page = (folder / "report.html").read_text()
    assert record.pick in page and "Confirmation" in page and "<script" not in page
    out = runner.invoke(app, ["train", str(folder / "plan.yaml"), "-q", "-o", str(tmp_path / "trained")])
    assert out.exit_code == 0, out.output


@pytest.mark.parametrize("args,expected", [
    (["--budget", "1"], "--budget 1.0: expected a number of full baseline runs above 1"),
    (["--budget", "nan"], "--budget nan"),
    (["--tolerance", "-1"], "--tolerance -1.0: expected metric points, 0 or more"),
    (["--seeds", "1"], "--seeds 1: the confirmation needs 2 to 50 paired seeds"),
])
def test_bad_options_are_one_line_and_exit_2_before_anything_loads(tmp_path: Path, args: list[str], expected: str) -> None:
    out = runner.invoke(app, ["plan", str(_recipe(tmp_path)), "-o", str(tmp_path / "p"), *args])
    assert out.exit_code == 2 and expected in out.output and "Traceback" not in out.output, out.output
    assert not (tmp_path / "p").exists()


def test_resume_errors_are_one_line(tmp_path: Path) -> None:
    out = runner.invoke(app, ["plan", "--resume", str(tmp_path)])
    assert out.exit_code == 2 and "not a plan folder (no plan.json)" in out.output
    out = runner.invoke(app, ["plan", str(_recipe(tmp_path)), "--resume", str(tmp_path)])
    assert out.exit_code == 2 and "give no RECIPE" in out.output


def test_an_interrupted_training_inside_a_trial_stops_the_plan_not_just_the_trial(tmp_path: Path, monkeypatch) -> None:
    """train() turns Ctrl-C or SIGTERM into RunInterrupted after saving; a trial must not record that as a failed
    candidate and go on."""
    from siftcli.plan import search as plan_search

    recipe = load_recipe(_recipe(tmp_path))
    real = plan_search.run_one

    def interrupted(ctx, arm, folder, on_event=None):  # noqa: ANN001, ANN202
        if arm != "baseline":
            raise RunInterrupted(str(folder), signal="SIGTERM")
        return real(ctx, arm, folder, on_event)

    monkeypatch.setattr(plan_search, "run_one", interrupted)
    with pytest.raises(RunInterrupted) as exc:
        run_plan(recipe, budget=30, seeds=2, output=str(tmp_path / "plan"))
    assert "siftcli plan --resume" in exc.value.resume_command and exc.value.signal == "SIGTERM"
    saved = json.loads((tmp_path / "plan" / "plan.json").read_text())
    assert saved["status"] == "interrupted" and not any(t["status"] == "failed" for c in saved["candidates"] for t in c["trials"])


def test_a_seeds_contexts_share_one_workload_and_start_from_its_untrained_weights(tmp_path: Path) -> None:
    """Every fidelity of the search is the same seed: one workload, built once; a context made after a run trained the
    shared model still starts from the seed's initial weights."""
    import torch

    from siftcli.plan.run import _make_context
    from siftcli.plan.search import at_fidelity

    recipe = load_recipe(_recipe(tmp_path))
    first = build_workload(recipe)
    make = _make_context([0, 1, 2], {recipe.seed: first})
    full = make(recipe)
    with torch.no_grad():
        for p in full.workload.model.parameters():
            p.add_(1.0)  # what a training run leaves in the shared model
    low = make(at_fidelity(recipe, 1 / 3))
    assert low.workload is full.workload and low.workload.model is first.model and len(low.workload.eval_data) == 3
    assert all(torch.equal(low.initial[k], full.initial[k]) for k in full.initial)
    assert not torch.equal(low.initial[next(iter(low.initial))], first.model.state_dict()[next(iter(low.initial))])
