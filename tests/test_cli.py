"""The CLI end to end on a tiny model, and its fast --help."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from siftcli.cli import app

runner = CliRunner()


def test_help_is_fast_because_torch_is_lazy() -> None:
    code = "import sys; from siftcli.cli import app; assert 'torch' not in sys.modules and 'transformers' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    for command in ("train", "compare", "sweep-beta", "validate"):
        assert command in result.output


def test_python_dash_m_runs() -> None:
    out = subprocess.run([sys.executable, "-m", "siftcli", "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "compare" in out.stdout


def test_train_writes_a_run_folder(tiny_recipe, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SIFTCLI_PLOTS")  # the default: plots drawn (the suite turns them off)
    out = tmp_path / "run"
    result = runner.invoke(app, ["train", str(tiny_recipe()), "--output", str(out), "-q"])
    assert result.exit_code == 0, result.output
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["status"] == "completed" and metrics["arm"] == "sifted"
    assert 0 < metrics["keep"]["achieved"] < 1
    assert (out / "recipe.yaml").exists()
    events = [json.loads(line)["event"] for line in (out / "log.jsonl").read_text().splitlines()]
    assert "step" in events and "eval" in events
    assert (out / "metric_vs_time.png").exists()


def test_train_no_sift_forces_the_baseline(tiny_recipe, tmp_path: Path) -> None:
    out = tmp_path / "run"  # SIFTCLI_PLOTS=0 (the suite's): no PNG is drawn
    result = runner.invoke(app, ["train", str(tiny_recipe()), "--no-sift", "-o", str(out), "-q"])
    assert result.exit_code == 0, result.output
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["arm"] == "baseline" and metrics["samples_trained"] == metrics["raw_samples"]
    assert (out / "metrics.json").exists() and not list(out.glob("*.png"))


def test_compare_table_matches_compare_json(tiny_recipe, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SIFTCLI_PLOTS", "1")
    out = tmp_path / "cmp"
    result = runner.invoke(app, ["compare", str(tiny_recipe()), "-o", str(out), "-q", "--equal-time"])
    assert result.exit_code == 0, result.output
    data = json.loads((out / "compare.json").read_text())
    runs = data["runs"][0]
    assert set(runs) == {"baseline", "sifted", "equal-time"}
    assert f"{runs['baseline']['train_seconds']:.1f}" in result.output
    assert f"{runs['sifted']['train_seconds']:.1f}" in result.output
    assert runs["baseline"]["optimizer_steps"] > runs["sifted"]["optimizer_steps"]
    table = result.output[: result.output.index("what sifting bought")]
    for arm, run in runs.items():  # every arm's column holds its own numbers, as in compare.json
        for shown in (f"{run['train_seconds']:.1f}", str(run["optimizer_steps"]), f"{run['final']['accuracy']:.4f}",
                      str(run["samples_trained"])):
            assert shown in table, (arm, shown)
    diff = 100 * (runs["sifted"]["final"]["accuracy"] - runs["equal-time"]["final"]["accuracy"])
    assert f"{diff:+.2f} points" in result.output and data["pairs"][0]["vs"]["equal-time"]["diff"] == pytest.approx(diff)
    # the equal-time baseline gets the sifted run's wall-clock in seconds, and trains until its own clock reaches it
    per_step = runs["equal-time"]["train_seconds"] / runs["equal-time"]["optimizer_steps"]
    held = data["pairs"][0]["equal_time"]
    assert held["budget_seconds"] == pytest.approx(runs["sifted"]["train_seconds"])
    assert held["budget_seconds"] <= runs["equal-time"]["train_seconds"] <= held["budget_seconds"] + 3 * per_step + 0.05
    assert held["ratio"] == pytest.approx(runs["equal-time"]["train_seconds"] / held["budget_seconds"])
    assert "Verdict:" in result.output and data["verdict"]
    assert (out / "metric_vs_time.png").exists()
    again = runner.invoke(app, ["compare", str(out / "baseline"), str(out / "sifted")])
    assert again.exit_code == 0, again.output
    assert f"{runs['sifted']['train_seconds']:.1f}" in again.output


def test_compare_over_seeds_gives_each_seed_its_own_weights_and_split(tiny_recipe, tmp_path: Path) -> None:
    out = tmp_path / "cmp"
    result = runner.invoke(app, ["compare", str(tiny_recipe(epochs=1)), "-o", str(out), "-q", "--seeds", "2", "--quick"])
    assert result.exit_code == 0, result.output
    data = json.loads((out / "compare.json").read_text())
    assert data["seeds_summary"]["seeds"] == 2 and len(data["pairs"]) == 2 and data["arms"] == ["baseline", "sifted"]
    first_eval = [json.loads((out / f"seed{s}" / "baseline" / "log.jsonl").read_text().splitlines()[0]) for s in (0, 1)]
    losses = [[m["curve"][0]["loss"] for m in (json.loads((out / f"seed{s}" / a / "metrics.json").read_text())
                                                for a in ("baseline", "sifted"))] for s in (0, 1)]
    assert first_eval[0]["loss"] != first_eval[1]["loss"]  # seed 1 starts from other weights (or another split)
    assert losses[0][0] != losses[1][0]
    values = data["seeds_summary"]["metric_delta"]["values"]
    assert len(values) == 2 and data["seeds_summary"]["metric_delta"]["status"] == "too few seeds"
    assert "over 2 seeds" in result.output and "too few seeds" in result.output


def test_sweep_beta_grid_through_the_cli(tiny_recipe, tmp_path: Path) -> None:
    pytest.importorskip("optuna")
    out = tmp_path / "sweep"
    result = runner.invoke(app, ["sweep-beta", str(tiny_recipe(epochs=1)), "--betas", "0.5,2", "--frontier", "0.5,1",
                                 "--jobs", "0", "-o", str(out), "-q"])
    assert result.exit_code == 0, result.output
    data = json.loads((out / "sweep.json").read_text())
    assert sorted(t["params"]["beta"] for t in data["trials"]) == [0.5, 2.0]
    assert [p["fraction"] for p in data["frontier"]] == [0.5, 1.0]
    starred = [line for line in result.output.splitlines() if "★" in line]
    assert len(starred) == 1 and data["recommendation"]["text"][:30] in result.output
def test_set_overrides_and_are_stored(tiny_recipe, tmp_path: Path) -> None:
    out = tmp_path / "run"
    result = runner.invoke(app, ["train", str(tiny_recipe()), "--set", "sift.beta=3", "--set", "epochs=1",
                                 "--set", "sift.precision=fp32", "-o", str(out), "-q"])
    assert result.exit_code == 0, result.output
    assert "beta: 3.0" in (out / "recipe.yaml").read_text()
    sift = json.loads((out / "metrics.json").read_text())["sift"]
    assert sift["beta"] == 3.0 and sift["scoring_precision"] == "fp32"


def test_validate_resolves_columns_and_model(tiny_recipe) -> None:
    from siftcli.recipe.reader import load_recipe
    from siftcli.workload.build import build_workload

    result = runner.invoke(app, ["validate", str(tiny_recipe())])
    assert result.exit_code == 0, result.output
    assert "120 train / 40 eval rows, labels ['0', '1']" in result.output
    model = build_workload(load_recipe(tiny_recipe())).model  # the model it resolved: built from config, its own size
    n = sum(p.numel() for p in model.parameters())
    assert f"model: config:bert built from config (random init), bert, {n:,} parameters" in result.output


def _interrupt_after(monkeypatch, calls: int) -> None:
    """Simulate Ctrl-C at a given training step (the LR schedule is called once per step)."""
    import siftcli.training.loop as train_module

    real = train_module.lr_factor
    count = {"n": 0}

    def flaky(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        count["n"] += 1
        if count["n"] == calls:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(train_module, "lr_factor", flaky)


def test_ctrl_c_in_train_keeps_results_and_resume_finishes(tiny_recipe, tmp_path: Path, monkeypatch) -> None:
    out = tmp_path / "run"
    recipe = str(tiny_recipe(checkpoint_every_steps=4))
    _interrupt_after(monkeypatch, 7)
    result = runner.invoke(app, ["train", recipe, "-o", str(out), "-q"])
    assert result.exit_code == 130
    assert "interrupted" in result.output and f"--resume {out}" in result.output
    assert json.loads((out / "metrics.json").read_text())["status"] == "interrupted"
    assert (out / "checkpoint.pt").exists()
    monkeypatch.undo()
    import shlex

    printed = result.output.replace("\n", "").split("continue with: ")[1].strip()  # run the line exactly as printed
    assert printed == f"siftcli train {recipe} --resume {out}"
    resumed = runner.invoke(app, [*shlex.split(printed)[1:], "-q"])
    assert resumed.exit_code == 0, resumed.output
    assert json.loads((out / "metrics.json").read_text())["status"] == "completed"


def test_ctrl_c_in_compare_keeps_finished_arms_and_the_printed_resume_continues_the_interrupted_one(tiny_recipe, tmp_path: Path,
                                                                                   monkeypatch) -> None:
    """An interrupted comparison continues with the command it prints: the finished baseline is read back, not trained
    again; the interrupted arm continues from the checkpoint its Ctrl-C left; the rest train from their seed's initial
    weights; the result is the uninterrupted comparison's (arms that train by steps, so the numbers are exact)."""
    import os
    import shlex
    import signal

    import siftcli.arms.run as arms_run
    import siftcli.training.loop as train_module

    recipe = str(tiny_recipe())
    whole = runner.invoke(app, ["compare", recipe, "-o", str(tmp_path / "whole"), "--arm", "random-keep", "-q", "--json"])
    assert whole.exit_code == 0, whole.output
    out = tmp_path / "cmp"
    real, count = train_module.lr_factor, {"n": 0}

    def ctrl_c_at_step_40(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        count["n"] += 1
        if count["n"] == 40:  # the baseline has 30 steps: this lands in the sifted arm; a real SIGINT stops the arm at
            os.kill(os.getpid(), signal.SIGINT)  # the step's end, with a checkpoint
        return real(*args, **kwargs)

    monkeypatch.setattr(train_module, "lr_factor", ctrl_c_at_step_40)
    result = runner.invoke(app, ["compare", recipe, "-o", str(out), "--arm", "random-keep", "-q"])
    assert result.exit_code == 130 and "continue with: siftcli compare --resume" in result.output.replace("\n", "")
    data = json.loads((out / "compare.json").read_text())
    assert data["status"] == "interrupted" and "baseline" in data["runs"][0] and data["seeds"] == [0]
    assert json.loads((out / "sifted" / "metrics.json").read_text())["status"] == "interrupted"
    baseline_written = (out / "baseline" / "metrics.json").stat().st_mtime_ns
    monkeypatch.undo()
    resumes: dict[str, bool] = {}
    train = arms_run.train
    monkeypatch.setattr(arms_run, "train", lambda *a, **k: resumes.update({k["arm"]: k["resume"]}) or train(*a, **k))
    printed = result.output.replace("\n", "").split("continue with: ")[1].strip()
    resumed = runner.invoke(app, [*shlex.split(printed)[1:], "-q", "--json"])
    assert resumes == {"sifted": True, "random-keep": False}  # the baseline read back, the sifted arm continued
    assert resumed.exit_code == 0, resumed.output
    assert (out / "baseline" / "metrics.json").stat().st_mtime_ns == baseline_written  # read back, not trained again
    a, b = json.loads(whole.stdout), json.loads(resumed.stdout)
    final = lambda doc: {arm: run["final"] for arm, run in doc["runs"][0].items()}  # noqa: E731
    assert final(a) == final(b) and a["arms"] == b["arms"]
    again = runner.invoke(app, ["compare", "--resume", str(out)])
    assert again.exit_code == 2 and "this comparison finished" in again.output
    extra = runner.invoke(app, ["compare", "--resume", str(out), "--seeds", "3"])
    assert extra.exit_code == 2 and "--seeds would be ignored" in extra.output


def test_json_output_is_one_document_with_the_files_content_and_errors_are_json_too(tiny_recipe, tmp_path: Path) -> None:
    out = tmp_path / "cmp"
    result = runner.invoke(app, ["compare", str(tiny_recipe(epochs=1)), "-o", str(out), "--quick", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)  # the whole of stdout is one JSON document: no table, no progress
    saved = json.loads((out / "compare.json").read_text())
    assert doc["run_dir"] == str(out) and doc["pairs"] == saved["pairs"] and doc["verdict"] == saved["verdict"]
    trained = runner.invoke(app, ["train", str(tiny_recipe(epochs=1)), "-o", str(tmp_path / "t"), "--json"])
    assert trained.exit_code == 0 and json.loads(trained.stdout)["metrics"]["status"] == "completed"
    bad = runner.invoke(app, ["compare", str(tiny_recipe()), "--json", "--set", "sift.beta=-1"])
    err = json.loads(bad.stdout)
    assert bad.exit_code == 2 and err["exit_code"] == 2 and "sift.beta" in err["error"]
    plain = runner.invoke(app, ["validate", str(tmp_path / "missing.yaml")])  # --json does not stick to later commands
    assert plain.exit_code == 2 and plain.output.startswith("siftcli: error:")


def test_filter_writes_the_kept_rows_with_the_datas_own_columns(tmp_path: Path) -> None:
    import csv

    import yaml

    from tests.conftest import make_text_rows, tiny_recipe_dict

    pool = tmp_path / "pool.csv"
    pool.write_text("text,label,domain\n" + "\n".join(f"{t},{y},{'in' if i % 2 else 'off'}"
                                                      for i, (t, y) in enumerate(make_text_rows(120))) + "\n")
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump(tiny_recipe_dict(pool, epochs=1, **{
        "data.group_column": "domain", "sift.reference.kind": "holdout", "sift.reference.holdout_fraction": 0.2})))
    out = tmp_path / "kept.csv"
    result = runner.invoke(app, ["filter", str(recipe), "--keep", "0.25", "-o", str(out), "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    with out.open() as f:
        kept = list(csv.DictReader(f))
    assert doc["kept"] == len(kept) == round(0.25 * doc["of"]) and set(kept[0]) == {"text", "label", "domain"}
    originals = {r.split(",")[0] for r in pool.read_text().splitlines()[1:]}
    assert all(r["text"] in originals for r in kept) and abs(sum(doc["groups"].values()) - 1) < 1e-9
    again = runner.invoke(app, ["filter", str(recipe), "--keep", "0.25", "-o", str(tmp_path / "k2.jsonl"), "--json"])
    assert json.loads(again.stdout)["reference_cached"] is True  # the reference is built once, then reused
    before = pool.read_text()
    for args, expected in ((["--keep", "0", "-o", str(out)], "--keep 0.0: expected a fraction"),
                           (["--keep", "0.5", "-o", str(tmp_path / "k.txt")], "expected a .csv, .tsv or .jsonl file"),
                           (["--keep", "0.5", "-o", str(pool)], "is the recipe's data.source; writing the kept rows there")):
        bad = runner.invoke(app, ["filter", str(recipe), *args])
        assert bad.exit_code == 2 and expected in bad.output, bad.output
    assert pool.read_text() == before  # the data is untouched


def test_filter_dedup_writes_one_row_of_each_near_copy(tmp_path: Path) -> None:
    import csv

    import yaml

    from tests.conftest import tiny_recipe_dict
    from tests.test_arms import _redundant_csv

    path, distinct = _redundant_csv(tmp_path)
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump(tiny_recipe_dict(path, **{"data.eval_source": str(path)})))
    out = tmp_path / "kept.csv"
    result = runner.invoke(app, ["filter", str(recipe), "--dedup", "-o", str(out), "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    with out.open() as f:
        kept = [r["text"] for r in csv.DictReader(f)]
    assert doc["kept"] == len(kept) == len(set(kept)) == distinct and doc["of"] == 70 and doc["reference_kind"] is None
    none = runner.invoke(app, ["filter", str(recipe), "-o", str(out)])
    assert none.exit_code == 2 and "give --keep F" in none.output


def test_arms_are_checked_before_anything_trains_or_a_folder_exists(tiny_recipe, tmp_path: Path) -> None:
    for args, expected in ((["--arm", "cheap"], "unknown arm; known: baseline, sifted"),
                           (["--arm", "target-only"], "needs data.group_column and data.target_group"),
                           (["--arm", "variant:sift.bta=2"], "did you mean 'sift.beta'"),
                           (["--arm", "static-filter:fraction=2"], "fraction must be a number in (0, 1]"),
                           (["--arm", "equal-time", "--quick"], "give it or --arm, not both")):
        result = runner.invoke(app, ["compare", str(tiny_recipe()), "-o", str(tmp_path / "o"), "-q", *args])
        assert result.exit_code == 2 and expected in result.output, (args, result.output)
        assert not (tmp_path / "o").exists()
