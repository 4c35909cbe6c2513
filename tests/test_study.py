"""One study, many machines: two sweep commands on a real PostgreSQL server (pgserver ships its binaries on PyPI)
share the frontier and the trials, survive one of them being killed, and print the same answer."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from siftcli import studies
from siftcli.errors import SiftcliError
from siftcli.recipe.schema import validate_recipe
from siftcli.sweep.settings import SweepSettings
from siftcli.sweep.study import SHARED, open_study
from tests.conftest import tiny_recipe_dict

optuna = pytest.importorskip("optuna")


def _recipe(tmp_path: Path) -> Path:
    data = tmp_path / "reg.jsonl"
    data.write_text("".join(json.dumps({"text": f"{'good ' * (i % 4)}x", "score": float(i % 4)}) + "\n" for i in range(96)))
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(tiny_recipe_dict(data, task="regression", loss="mse", **{
        "epochs": 2, "data.label_column": "score", "eval.every_steps": 2, "sift.sift_delay": 0})))
    return path


def _sweep(*args: str) -> subprocess.Popen:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    return subprocess.Popen([sys.executable, "-m", "siftcli", "sweep-beta", *args, "--json", "-q"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _trials(url: str, name: str) -> list:
    try:
        return optuna.load_study(study_name=name, storage=url).get_trials(deepcopy=False)
    except KeyError:  # not created yet
        return []


@pytest.mark.slow
def test_two_machines_share_one_postgresql_study_and_one_survives_being_killed(postgres_url: str, tmp_path: Path) -> None:
    recipe = _recipe(tmp_path)
    betas = [0.5, 1, 2, 4, 8, 16]
    common = [str(recipe), "--betas", ",".join(map(str, betas)), "--frontier", "0.5,1", "--storage", postgres_url,
              "--study", "shared", "--stale-seconds", "60"]  # longer than a's resume takes to start on a busy
    # 2-core machine (with 15, b sometimes requeued a's killed trial as stale first, and nothing was marked interrupted)
    a, b = tmp_path / "a", tmp_path / "b"
    first = _sweep(*common, "-o", str(a))
    second = _sweep(*common, "-o", str(b))
    # machine a is killed outright (SIGKILL: no chance to tidy up) while it trains a trial of its own
    me = studies.owner_of(a)
    deadline = 240
    while deadline > 0:
        trials = _trials(postgres_url, "shared")
        mine = [t for t in trials if t.state.name == "RUNNING" and t.user_attrs.get(studies.OWNER) == me]
        if mine and any(t.state.name == "COMPLETE" for t in trials):
            # frozen, then read again: a trial seen running a moment ago may have ended since (the race that once left
            # nothing interrupted); while a is stopped, what the store says of its trials cannot change
            first.send_signal(signal.SIGSTOP)
            trials = _trials(postgres_url, "shared")
            if any(t.state.name == "RUNNING" and t.user_attrs.get(studies.OWNER) == me for t in trials):
                break
            first.send_signal(signal.SIGCONT)
        assert first.poll() is None, first.stderr.read() if first.stderr else ""
        try:
            first.wait(timeout=0.25)  # the poll's pace, and an early end is seen at once
        except subprocess.TimeoutExpired:
            deadline -= 0.25
    assert deadline > 0, "machine a never ran a trial while another was complete"
    first.send_signal(signal.SIGKILL)  # a stopped process dies of SIGKILL at once
    first.wait()
    resumed = _sweep("--resume", str(a))
    outputs = [p.communicate(timeout=300) for p in (resumed, second)]
    assert resumed.returncode == 0 and second.returncode == 0, outputs
    results = [json.loads(out) for out, _ in outputs]
    for r in results:
        for local in ("sweep_seconds", "run_dir", "plot"):
            r.pop(local, None)
    assert results[0] == results[1]  # one study, one answer, whichever machine prints it
    result = results[0]
    ran = [t for t in result["trials"]]
    assert sorted(t["params"]["beta"] for t in ran) == betas  # every grid point once: none lost, none twice
    assert all(t["state"] in ("complete", "pruned") for t in ran)
    owners = {t["owner"] for t in ran}
    assert owners == {studies.owner_of(a), studies.owner_of(b)}  # both machines trained trials
    for t in ran:  # each trial's record is on the machine that ran it, and only there
        assert sum((d / f"trial-{t['number']}" / "trial.json").exists() for d in (a, b)) == 1
    everything = _trials(postgres_url, "shared")
    interrupted = [t for t in everything if t.user_attrs.get(studies.INTERRUPTED)]
    assert interrupted and all(t.user_attrs[studies.OWNER] == me for t in interrupted)  # a's, run again
    # the frontier was trained once: by one machine, read by the other
    assert sum((d / "baseline-1").exists() for d in (a, b)) == 1
    assert json.loads((a / "frontier.json").read_text()) == json.loads((b / "frontier.json").read_text())


def test_a_machine_with_another_recipe_or_other_settings_is_refused(tmp_path: Path) -> None:
    settings = SweepSettings(study="s", trials=4)
    study = open_study(settings, tmp_path, True, None)
    recipe = validate_recipe(tiny_recipe_dict(tmp_path / "d.jsonl"))
    other = validate_recipe(tiny_recipe_dict(tmp_path / "d.jsonl", epochs=3))
    assert studies.join(study, recipe, settings.shared(), SHARED) is True
    assert studies.join(study, recipe, settings.shared(), SHARED) is False  # a second machine joins
    with pytest.raises(SiftcliError, match="started with another recipe"):
        studies.join(study, other, settings.shared(), SHARED)
    with pytest.raises(SiftcliError, match=r"other settings \(trials\)"):
        studies.join(study, recipe, SweepSettings(study="s", trials=5).shared(), SHARED)


def _older(dump: dict, path: tuple[str, ...]) -> tuple[str, dict]:
    """A recipe's hash and dump as a siftcli without the field at ``path`` wrote them."""
    import copy

    old = copy.deepcopy(dump)
    node = old
    for key in path[:-1]:
        node = node[key]
    del node[path[-1]]
    return studies.dump_sha256(old), old


def test_a_recipe_is_the_same_after_siftcli_gains_a_field_it_does_not_set(tmp_path: Path) -> None:
    """The hash covers every default, so a recipe file left untouched hashed otherwise once siftcli gained a field and
    ``--resume`` refused it: the dump the study started with tells a new field at its default (the same recipe) from
    a value that changed, a new field off its default, or a field that went away (another recipe)."""
    recipe = validate_recipe(tiny_recipe_dict(tmp_path / "d.jsonl"))
    dump = studies.recipe_dump(recipe)
    assert studies.same_recipe(studies.recipe_sha256(recipe), None, recipe)
    sha, old = _older(dump, ("optim", "warmup_fraction"))  # a field the recipe leaves at its default
    assert sha != studies.recipe_sha256(recipe)
    assert not studies.same_recipe(sha, None, recipe)  # a study without the dump (written before it was kept)
    assert studies.same_recipe(sha, old, recipe)
    base = tiny_recipe_dict(tmp_path / "d.jsonl")
    spelled = validate_recipe({**base, "optim": {**base["optim"], "warmup_fraction": dump["optim"]["warmup_fraction"]}})
    assert studies.same_recipe(sha, old, spelled)  # written out at its default (a plan's saved recipe writes them all)
    other = validate_recipe({**base, "optim": {**base["optim"], "warmup_fraction": 0.3}})
    assert not studies.same_recipe(sha, old, other)  # the new field off its default: not what the study trained
    changed = validate_recipe(tiny_recipe_dict(tmp_path / "d.jsonl", epochs=3))
    assert not studies.same_recipe(sha, old, changed)
    gone = {**dump, "retired": 1}
    assert not studies.same_recipe("0" * 64, gone, recipe)  # a field this siftcli no longer has


def test_a_silent_machines_trial_is_queued_again_once(tmp_path: Path) -> None:
    settings = SweepSettings(study="s")
    study = open_study(settings, tmp_path, True, None)
    dist = {"beta": optuna.distributions.FloatDistribution(0.5, 4, log=True)}
    trial = study.ask(dist)
    trial.set_user_attr(studies.OWNER, "elsewhere:/x")
    trial.set_user_attr(studies.ALIVE, 0.0)  # silent since 1970
    studies.tend(study, [], "here:/y", stale_seconds=60)
    studies.tend(study, [], "there:/z", stale_seconds=60)  # a third machine notices too: nothing more happens
    states = [t.state.name for t in study.get_trials(deepcopy=False)]
    assert states == ["FAIL", "WAITING"]
    count = studies.counted(study)
    assert (count.finished, count.running, count.waiting, count.taken) == (0, 0, 1, 1)  # counted once, as its copy
    assert study.ask(dist).params == trial.params  # the next trial asked for is that copy


def test_between_a_requeues_two_writes_the_interrupted_trial_still_holds_its_place(tmp_path: Path,
                                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # the race CI met: a machine counting after the failure and before the copy was queued saw a free place, asked,
    # got a fresh sample (a grid point run twice) and the copy never ran
    study = open_study(SweepSettings(study="s"), tmp_path, True, None)
    dist = {"beta": optuna.distributions.FloatDistribution(0.5, 4, log=True)}
    trial = study.ask(dist)
    trial.set_user_attr(studies.ALIVE, 0.0)
    seen = []
    queue = study.enqueue_trial
    monkeypatch.setattr(study, "enqueue_trial", lambda *a, **k: (seen.append(studies.counted(study)), queue(*a, **k)))
    studies.tend(study, [], "here:/y", stale_seconds=60)
    # failed, not yet copied: still taken, and counted running, so a machine with nothing left to run does not end its
    # sweep (and print a summary without the copy) in that moment
    assert [(c.running, c.waiting, c.taken) for c in seen] == [(1, 0, 1)]
    assert studies.counted(study).taken == 1
    monkeypatch.setattr(study, "enqueue_trial", lambda *a, **k: None)  # a requeue whose process died before the copy
    lost = study.ask(dist)
    lost.set_user_attr(studies.ALIVE, 0.0)
    studies.tend(study, [], "here:/y", stale_seconds=60)
    assert studies.counted(study).running == 1  # within the grace
    monkeypatch.setattr(studies, "REQUEUE_SECONDS", 0.0)
    assert studies.counted(study).running == 0  # past it, never counted running forever: no machine waits on it


def test_a_fresh_trial_that_overfills_the_study_gives_way_and_a_queued_one_never_does(tmp_path: Path) -> None:
    dist = {"beta": optuna.distributions.CategoricalDistribution([0.5, 1.0])}
    study = open_study(SweepSettings(study="g"), tmp_path, True, None)
    studies.enqueue(study, {"beta": 1.0})
    queued, fresh = study.ask(dist), study.ask(dist)  # the second machine lost the race for the one queued trial
    assert not studies.surplus(study, queued, trials=1, grid=True)
    assert studies.surplus(study, fresh, trials=1, grid=True)  # a grid runs its points only, each once
    assert studies.counted(study).numbers == (queued.number,)
    study = open_study(SweepSettings(study="t"), tmp_path, True, None)
    first, second = study.ask(dist), study.ask(dist)  # two machines both saw the last free place
    assert not studies.surplus(study, first, trials=1, grid=False)
    assert studies.surplus(study, second, trials=1, grid=False)
    assert [t.state.name for t in study.get_trials()] == ["RUNNING", "FAIL"]


def test_machines_sharing_a_storage_sample_apart_and_one_machine_reproducibly(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    dist = {"beta": optuna.distributions.FloatDistribution(0.25, 8, log=True)}
    settings = SweepSettings(study="s", storage=url)
    first = [open_study(settings, tmp_path / m, True, None).ask(dist).params["beta"] for m in ("a", "b")]
    assert first[0] != first[1]  # two machines' first proposals differ
    for i in range(2):
        (tmp_path / f"j{i}").mkdir()
    alone = [open_study(SweepSettings(study=f"j{i}"), tmp_path / f"j{i}", True, None).ask(dist).params["beta"]
             for i in range(2)]
    assert alone[0] == alone[1]  # a one-machine sweep's proposals follow the recipe's seed, wherever its folder is
