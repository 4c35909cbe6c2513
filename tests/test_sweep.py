"""sweep-beta on Optuna: pruning, the baseline frontier, the front, resume, crashed trials, bad search spaces."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from siftcli import studies
from siftcli.analysis.sweep import non_dominated
from siftcli.cli import app
from siftcli.errors import RunInterrupted, SiftcliError
from siftcli.recipe.schema import validate_recipe
from siftcli.sweep import run as sweep
from siftcli.sweep import workers
from siftcli.sweep.run import run_sweep
from siftcli.sweep.settings import SweepSettings
from siftcli.sweep.space import apply_params, parse_space
from siftcli.sweep.study import open_study
from tests.conftest import tiny_recipe_dict

pytest.importorskip("optuna")
runner = CliRunner()


def _regression(tmp_path: Path, **changes):
    """A tiny regression recipe: its metric (mse) is continuous, so pruning decisions never hinge on ties."""
    data = tmp_path / "reg.jsonl"
    data.write_text("".join(json.dumps({"text": f"{'good ' * (i % 4)}x", "score": float(i % 4)}) + "\n" for i in range(96)))
    return validate_recipe(tiny_recipe_dict(data, task="regression", loss="mse", **{
        "epochs": 2, "data.label_column": "score", "eval.every_steps": 2, "sift.sift_delay": 0, **changes}))


@pytest.mark.slow
def test_budget_sweep_prunes_trials_early_and_answers_against_the_baseline_frontier(tmp_path: Path,
                                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SIFTCLI_PLOTS", "1")  # its sweep.png
    recipe = _regression(tmp_path)
    space, grid = parse_space(recipe, betas="0.25,0.5,1,2,4,8,16", beta_range=None, params=None)
    out, result = run_sweep(recipe, SweepSettings(space=space, grid=grid), output=str(tmp_path / "s"), jobs=0)
    trials = {t["number"]: json.loads((out / f"trial-{t['number']}" / "trial.json").read_text()) for t in result["trials"]}
    pruned = [n for n, t in trials.items() if t["state"] == "pruned"]
    complete = [n for n, t in trials.items() if t["state"] == "complete"]
    assert len(trials) == 7 and pruned and complete
    full_steps = max(trials[n]["optimizer_steps"] for n in complete)
    for n in pruned:  # stopped at once: fewer optimizer steps than any trial that ran to the end
        assert trials[n]["optimizer_steps"] < min(trials[c]["optimizer_steps"] for c in complete) <= full_steps
        assert trials[n]["pruned_at_raw_batch"] < 18  # 9 raw batches an epoch, 2 epochs
    fractions = [p["fraction"] for p in result["frontier"]]
    assert fractions == [0.25, 0.5, 0.75, 1.0]
    steps = [p["optimizer_steps"] for p in result["frontier"]]
    assert steps == sorted(steps) and steps[0] < steps[-1]  # a smaller fraction of the baseline takes fewer steps
    rec = result["recommendation"]
    assert rec["kind"] in ("trial", "baseline") and rec["text"]
    if rec["kind"] == "baseline" and rec["fraction"] < 1:
        assert rec["text"].startswith("Train less")
    assert (out / "sweep.png").exists() and (out / "optuna.journal").exists()
    saved = json.loads((out / "sweep.json").read_text())
    assert saved["counts"]["pruned"] == len(pruned) and saved["front"] == result["front"]


def test_pareto_front_is_non_dominated() -> None:
    rows = [{"number": i, "value": v, "train_seconds": s} for i, (v, s) in enumerate([(0.9, 10), (0.8, 5), (0.85, 12), (0.7, 5),
                                                                                        (0.95, 20), (0.9, 10)])]
    front = {r["number"] for r in non_dominated(rows, higher=True)}
    assert front == {0, 1, 4, 5}  # 2 is beaten by 0 on both; 3 by 1; equal points both stay
    low = {r["number"] for r in non_dominated(rows, higher=False)}
    assert low == {3}


@pytest.mark.slow
def test_a_killed_sweep_resumes_without_redoing_finished_trials(tmp_path: Path) -> None:
    recipe = _regression(tmp_path)
    space, _ = parse_space(recipe, betas=None, beta_range="0.5:4", params=["sift_delay_fraction=0:0.3"])
    settings = SweepSettings(mode="pareto", trials=3, space=space)

    def kill_at_trial_two(kind: str, data: dict) -> None:
        if kind == "trial" and data["number"] == 2:  # asked for, not yet run: left RUNNING in the storage
            raise KeyboardInterrupt

    with pytest.raises(RunInterrupted) as exc:
        run_sweep(recipe, settings, output=str(tmp_path / "s"), jobs=0, on_event=kill_at_trial_two)
    out = Path(exc.value.run_dir)
    assert "--resume" in exc.value.resume_command
    first = {n: (out / f"trial-{n}" / "trial.json").stat().st_mtime_ns for n in (0, 1)}
    asked = open_study(SweepSettings(**json.loads((out / "sweep_settings.json").read_text())), out, False, 24)
    params_two = asked.trials[2].params
    _, result = run_sweep(None, None, resume=str(out), jobs=0)
    assert {n: (out / f"trial-{n}" / "trial.json").stat().st_mtime_ns for n in (0, 1)} == first  # not run again
    numbers = sorted(t["number"] for t in result["trials"])
    assert numbers == [0, 1, 3] and result["counts"]["complete"] == 3  # the interrupted trial 2 ran again as 3
    assert next(t for t in result["trials"] if t["number"] == 3)["params"] == params_two
    front = [t for t in result["trials"] if t["number"] in result["front"]]
    for f in front:  # the pareto answer: nothing beats a front trial on both the metric (mse, lower) and time
        assert not any(o["value"] < f["value"] and o["train_seconds"] < f["train_seconds"] for o in result["trials"])


def test_ctrl_c_inside_an_in_process_trial_stops_the_sweep(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With --jobs 0 a trial trains in the sweep's own process: the training turns Ctrl-C (or SIGTERM) into
    RunInterrupted after saving, and the sweep must stop there, resumable, not record a failed trial and go on."""
    recipe = _regression(tmp_path)
    space, _ = parse_space(recipe, betas=None, beta_range="0.5:4", params=None)
    calls: list[int] = []

    def interrupted(sweep_dir: Path, number: int, **kwargs: object) -> None:
        calls.append(number)
        raise RunInterrupted(str(sweep_dir / f"trial-{number}"), signal="SIGTERM")

    monkeypatch.setattr(sweep, "run_trial", interrupted)
    with pytest.raises(RunInterrupted) as exc:
        run_sweep(recipe, SweepSettings(mode="pareto", trials=3, space=space), output=str(tmp_path / "s"), jobs=0)
    assert calls == [0] and exc.value.signal == "SIGTERM" and "--resume" in exc.value.resume_command
    assert json.loads((Path(exc.value.run_dir) / "sweep.json").read_text())["status"] == "interrupted"


def test_sigterm_stops_the_workers_and_keeps_the_sweep(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A scheduler's SIGTERM while a worker trains: the worker is stopped and waited for (never orphaned), its trial
    is queued again, the sweep's status says interrupted, and the error carries SIGTERM (exit code 143)."""
    import os
    import signal

    before = signal.getsignal(signal.SIGTERM)
    pools: list[workers.Pool] = []
    real_start = workers.Pool.start

    def start(self: workers.Pool, number: int) -> None:
        real_start(self, number)
        pools.append(self)
        os.kill(os.getpid(), signal.SIGTERM)  # the scheduler stops the sweep once a worker has its trial

    monkeypatch.setattr(workers.Pool, "start", start)
    recipe = _regression(tmp_path, epochs=1)
    space, grid = parse_space(recipe, betas="1,2", beta_range=None, params=None)
    with pytest.raises(RunInterrupted) as exc:
        run_sweep(recipe, SweepSettings(space=space, grid=grid, frontier=[1.0]), output=str(tmp_path / "s"), jobs=1)
    assert exc.value.signal == "SIGTERM" and exc.value.exit_code == 143
    assert pools and not pools[0].workers  # stopped and reaped, not left running
    assert json.loads((tmp_path / "s" / "sweep.json").read_text())["status"] == "interrupted"
    assert signal.getsignal(signal.SIGTERM) is before  # the caller's handler is back
    monkeypatch.undo()
    _, result = run_sweep(None, None, resume=str(tmp_path / "s"), jobs=1)
    assert result["counts"]["complete"] == 2 and sorted(t["params"]["beta"] for t in result["trials"]) == [1, 2]


def test_a_crashed_worker_fails_its_trial_and_is_replaced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first worker dies inside trial 0 (exit code 3, as a segfault or the OOM killer would end it); the trial
    is failed with that, a new worker trains trial 1, and the sweep ends normally."""
    crash_on_zero = ("import itertools, json, sys; from pathlib import Path; from siftcli.sweep import workers; "
                     "line = sys.stdin.readline(); sys.exit(3) if json.loads(line)['number'] == 0 else "
                     "sys.exit(workers.serve(Path(sys.argv[1]), itertools.chain([line], sys.stdin), sys.stdout))")
    monkeypatch.setattr(workers, "WORKER_COMMAND", ["-c", crash_on_zero])
    recipe = _regression(tmp_path, epochs=1)
    space, grid = parse_space(recipe, betas="1,2", beta_range=None, params=None)
    _, result = run_sweep(recipe, SweepSettings(space=space, grid=grid, frontier=[1.0]), output=str(tmp_path / "s"), jobs=1)
    states = {t["number"]: t["state"] for t in result["trials"]}
    assert states == {0: "fail", 1: "complete"}  # a real worker after the crashed one
    assert "exit code 3" in result["trials"][0]["error"]
    assert len(list((tmp_path / "s" / "workers").glob("worker-*.log"))) == 2


@pytest.mark.parametrize("args,expected", [
    (["--param", "nope=1:2"], "'nope' cannot be searched"),
    (["--param", "beta=1:2"], "beta is given twice"),
    (["--beta-range", "4:1"], "expected LOW < HIGH"),
    (["--beta-range", "0:1"], "a log scale needs LOW > 0"),
    (["--param", "mode=probabilistic,bogus"], "mode='bogus' makes an invalid recipe"),
    (["--param", "loss_history_length=a:b"], "expected LOW:HIGH integers"),
    (["--betas", "1,2", "--param", "sift_delay_fraction=0:0.5"], "every --param lists values"),
    (["--betas", "1,x"], "expected comma-separated numbers"),
    (["--betas", "1,-2"], "every beta must be positive"),
    (["--betas", "1,1.0"], "a value is given twice"),
    (["--mode", "fast"], "expected budget or pareto"),
    (["--frontier", "0,1"], "expected fractions in (0, 1]"),
    (["--storage", "sweep.db"], "expected an Optuna storage URL"),
    (["--storage", "sqlite:///:memory:"], "an in-memory database lives in one process"),
    (["--storage", "sqlite:///no/such/folder/s.db"], "does not exist"),
    (["--storage", "postgresql+nosuchdriver://u@localhost/db"], "--storage 'postgresql+nosuchdriver://u@localhost/db'"),
    (["--storage", "postgresql://u@127.0.0.1:1/db"], "--storage 'postgresql://u@127.0.0.1:1/db': "),  # no driver or no server
    (["--param", "prune_fraction=0.2:1.5"], "prune_fraction=1.5 makes an invalid recipe"),
    (["--param", "reference=cross-fit,holdout:x"], "reference='holdout:x' makes an invalid recipe"),
    (["--param", "reference=nearest"], "reference='nearest' makes an invalid recipe"),
    (["--study", "a:b"], "expected a name without ':'"),
    (["--stale-seconds", "0"], "--stale-seconds must be positive"),
])
def test_bad_search_space_is_one_line_and_exit_2(tiny_recipe, tmp_path: Path, args: list[str], expected: str) -> None:
    result = runner.invoke(app, ["sweep-beta", str(tiny_recipe()), *args, "-q", "-o", str(tmp_path / "s")])
    text = result.output.strip()
    assert result.exit_code == 2 and len(text.splitlines()) == 1 and "Traceback" not in text, text
    assert expected in text, text
    assert not (tmp_path / "s").exists()  # bad input leaves no sweep folder


def test_resume_refuses_flags_it_would_ignore_and_a_frontier_of_another_recipe(tiny_recipe, tmp_path: Path) -> None:
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "sweep_settings.json").write_text("{}")
    result = runner.invoke(app, ["sweep-beta", "--resume", str(tmp_path / "s"), "--trials", "3", "--storage", "sqlite:///x.db"])
    assert result.exit_code == 2 and "--trials, --storage would be ignored" in result.output
    recipe = validate_recipe(tiny_recipe_dict(tmp_path / "d.csv"))
    (tmp_path / "f").mkdir()
    (tmp_path / "f" / "frontier.json").write_text(json.dumps({"points": [], "recipe_sha256": "another"}))
    with pytest.raises(SiftcliError, match="trained for another recipe"):
        sweep.run_frontier(recipe, SweepSettings(), tmp_path / "f", None, None, lambda *a: None)


def test_resume_of_a_folder_that_is_not_a_sweep_and_a_missing_optuna(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result = runner.invoke(app, ["sweep-beta", "--resume", str(tmp_path), "-q"])
    assert result.exit_code == 2 and "not a sweep folder" in result.output
    monkeypatch.setitem(sys.modules, "optuna", None)  # import optuna now raises ImportError
    with pytest.raises(SiftcliError, match=r'need Optuna: pip install "optuna>=4.0"'):
        studies.optuna_module()


def test_the_search_space_reaches_the_reference_and_the_memory_refresh(tmp_path: Path) -> None:
    recipe = validate_recipe(tiny_recipe_dict(tmp_path / "d.csv"))
    space, _ = parse_space(recipe, betas=None, beta_range=None, params=[
        "score=loss,reducible", "reference=cross-fit,holdout:0.2,model:builtin:minilm", "reference_epochs=0.5:2",
        "memory_refresh=score,train", "scoring=fresh,memory"])
    assert space["reference"]["values"] == ["cross-fit", "holdout:0.2", "model:builtin:minilm"]
    trial = apply_params(recipe, {"score": "reducible", "reference": "holdout:0.2", "reference_epochs": 2.0,
                                        "memory_refresh": "train", "scoring": "memory"})
    ref = trial.sift.reference
    assert (ref.kind, ref.holdout_fraction, ref.model, ref.epochs) == ("holdout", 0.2, None, 2.0)
    assert trial.sift.memory_refresh == "train" and trial.sift.scoring == "memory"
    model = apply_params(recipe, {"reference": "model:builtin:minilm"}).sift.reference
    assert (model.kind, model.model, model.holdout_fraction) == ("model", "builtin:minilm", None)
    bayes = apply_params(recipe, {"score": "reference", "reference": "naive-bayes:0.1"}).sift.reference
    assert (bayes.kind, bayes.holdout_fraction) == ("naive-bayes", 0.1)
    with pytest.raises(SiftcliError, match="expected ngram:FRACTION such as ngram:0.1"):
        apply_params(recipe, {"score": "reference", "reference": "ngram"})


def test_settings_check_themselves_for_a_python_caller_too() -> None:
    for bad, expected in (({"mode": "fast"}, "expected budget or pareto"), ({"frontier": [0.0, 1.0]}, "expected fractions"),
                          ({"max_time_ratio": 0}, "--max-time-ratio must be positive"), ({"trials": 0}, "--trials 0"),
                          ({"stale_seconds": -1}, "--stale-seconds must be positive"), ({"study": "a:b"}, "without ':'")):
        with pytest.raises(SiftcliError, match=re.escape(expected)):
            SweepSettings(**bad)


def test_resume_refuses_every_option_it_would_ignore(tmp_path: Path) -> None:
    """Generated from the command's own parameters: an option added later is refused with --resume unless it is one
    a resume accepts (cli.RESUME_ACCEPTS)."""
    import inspect

    from siftcli import cli

    (tmp_path / "s").mkdir()
    values = {"param": "beta=1:2", "set_": "epochs=1", "output": str(tmp_path / "o"), "mode": "pareto", "betas": "1,2",
              "beta_range": "1:2", "frontier": "1", "storage": "sqlite:///x.db", "study": "x"}
    for name, p in inspect.signature(cli.sweep_beta).parameters.items():
        if name in cli.RESUME_ACCEPTS:
            continue
        flag = "--" + name.rstrip("_").replace("_", "-")
        args = [flag] if p.annotation in (bool, "bool") or "bool" in str(p.annotation) and "Optional" not in str(p.annotation) \
            else [flag, str(values.get(name, 3))]
        result = runner.invoke(app, ["sweep-beta", "--resume", str(tmp_path / "s"), *args])
        assert result.exit_code == 2 and f"{flag} would be ignored" in result.output, (flag, result.output)
