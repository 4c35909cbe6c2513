"""torchrun through the real CLI: 2 CPU processes (gloo), sifted and not, interrupted on one rank and resumed.

Every launch runs under a timeout and with ``SIFTCLI_DIST_TIMEOUT`` short, so a deadlock fails the test
instead of hanging CI.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from siftcli.cli import app
from tests.conftest import tiny_recipe_dict

TESTS = Path(__file__).parent
SIFTCLI = shutil.which("siftcli") or str(Path(sys.executable).parent / "siftcli")


def torchrun(*args: str, cwd: Path, stop_at: int | None = None, nan_at: int | None = None,
             nproc: int = 2) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
           "SIFTCLI_DIST_TIMEOUT": "60", "OMP_NUM_THREADS": "1"}
    if stop_at is not None:
        env["SIFTCLI_TEST_STOP_AT"] = str(stop_at)
    if nan_at is not None:
        env["SIFTCLI_TEST_NAN_AT"] = str(nan_at)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}", "--no-python",
           SIFTCLI, *args]
    try:
        return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=240)
    except subprocess.TimeoutExpired as exc:  # a hang is a failure, never a stuck CI job
        raise AssertionError(f"torchrun {' '.join(args)} hung (killed after 240 s)\n{exc.stderr}") from None


def _recipe(tmp_path: Path, text_csv: Path, **changes) -> Path:
    path = tmp_path / "recipe.yaml"
    path.write_text("# tiny torchrun test recipe\n" + yaml.safe_dump(tiny_recipe_dict(text_csv, **changes)))
    return path


def _ranks_of_script(script: str, *args: str, cwd: Path, what: str) -> list[dict]:
    """Run ``tests/<script>`` under torchrun on 2 processes (it writes rank<N>.json in ``cwd``); each rank's record.
    ``what`` names the run in the hang message."""
    env = {**os.environ, "SIFTCLI_DIST_TIMEOUT": "60", "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", str(TESTS / script), *args]
    try:
        out = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=240)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"{what} hung") from None
    assert out.returncode == 0, out.stderr[-3000:]
    return [json.loads((cwd / f"rank{r}.json").read_text()) for r in range(2)]


def _metrics(folder: Path) -> dict:
    return json.loads((folder / "metrics.json").read_text())


@pytest.mark.slow
def test_sifted_zero_run_interrupted_on_one_rank_resumes_to_the_uninterrupted_weights(tmp_path: Path, text_csv: Path) -> None:
    # rank 1's losses are 100x smaller (dist_losses.skewed): against the one global ranking it keeps far fewer
    from concurrent.futures import ThreadPoolExecutor

    recipe = str(_recipe(tmp_path, text_csv, loss="dist_losses:skewed", **{"optim.zero": True}))
    with ThreadPoolExecutor(2) as pool:  # the uninterrupted run and the interrupted one at once: 4 processes, 2 cores
        running = pool.submit(torchrun, "train", recipe, "-o", "full", "-q", cwd=tmp_path)
        # SIGTERM reaches rank 1 alone, inside its 5th training step: both ranks stop after that step, together
        part = torchrun("train", recipe, "-o", "part", "-q", cwd=tmp_path, stop_at=1 + 5)  # after the warm-up's forward
        full = running.result()
    assert full.returncode == 0, full.stderr[-3000:]
    m = _metrics(tmp_path / "full")
    par = m["parallel"]
    assert par["world_size"] == 2 and par["global_batch"] == 16 and par["zero"] and par["ranks_in_sync"]
    r0, r1 = par["ranks"]
    assert r0["optimizer_steps"] == r1["optimizer_steps"] == m["optimizer_steps"]  # equal steps: no rank waited
    assert r0["kept_fraction"] > r1["kept_fraction"] + 0.15, (r0, r1)
    assert m["raw_samples"] == r0["raw_samples"] + r1["raw_samples"] == 2 * 60 * 2  # 120 training rows, 2 epochs
    assert m["samples_trained"] == r0["samples_trained"] + r1["samples_trained"]
    assert (tmp_path / "full" / "model" / "config.json").exists()

    assert part.returncode != 0
    assert part.stderr.count("siftcli: interrupted (SIGTERM)") == 1 and "torchrun, 2 processes" in part.stderr
    assert _metrics(tmp_path / "part")["status"] == "interrupted" and _metrics(tmp_path / "part")["optimizer_steps"] == 5

    one = subprocess.run([SIFTCLI, "train", recipe, "--resume", "part", "-q"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=120, env={**os.environ, "PYTHONPATH": str(TESTS)})
    assert one.returncode == 2 and "checkpointed by 2 processes and this is 1" in one.stderr
    assert len(one.stderr.strip().splitlines()) == 1

    # the printed line, run as printed under the same launcher
    printed = part.stderr.split("continue with: ", 1)[1].splitlines()[0]
    command, launcher = printed.split(", launched as before ")
    assert launcher == "(torchrun, 2 processes)" and shlex.split(command)[:2] == ["siftcli", "train"]
    resumed = torchrun(*shlex.split(command)[1:], "-q", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    again = _metrics(tmp_path / "part")
    assert again["status"] == "completed" and again["optimizer_steps"] == m["optimizer_steps"]
    assert [r["weights_sha1"] for r in again["parallel"]["ranks"]] == [r["weights_sha1"] for r in par["ranks"]]
    assert again["samples_trained"] == m["samples_trained"]
    # one run folder each, written by rank 0 alone
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == ["full", "part"]
    steps = [json.loads(line)["step"] for line in (tmp_path / "full" / "log.jsonl").read_text().splitlines()
             if '"event": "step"' in line]
    assert steps and len(steps) == len(set(steps))  # one writer: no step logged twice


@pytest.mark.slow
def test_compare_under_torchrun_runs_every_arm_in_step(tmp_path: Path, text_csv: Path) -> None:
    recipe = str(_recipe(tmp_path, text_csv))
    out = torchrun("compare", recipe, "-o", "cmp", "-q", "--equal-time", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.count("siftcli compare") == 1  # rank 0 prints, the others do not
    result = json.loads((tmp_path / "cmp" / "compare.json").read_text())
    assert result["status"] == "completed"
    for arm in ("baseline", "sifted", "equal-time"):
        par = _metrics(tmp_path / "cmp" / arm)["parallel"]
        assert par["world_size"] == 2 and par["ranks_in_sync"], arm
    baseline = _metrics(tmp_path / "cmp" / "baseline")
    assert baseline["samples_trained"] == baseline["raw_samples"] == 240 and baseline["keep"] is None


def test_sweep_refuses_torchrun_and_a_half_set_environment_is_one_line(tiny_recipe, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    out = CliRunner().invoke(app, ["sweep-beta", str(tiny_recipe()), "--betas", "1"])
    assert out.exit_code == 2 and "launch it without torchrun" in out.output
    out = CliRunner().invoke(app, ["train", str(tiny_recipe()), "-q"])
    assert out.exit_code == 2 and "MASTER_ADDR, MASTER_PORT are not" in out.output
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "29500")
    monkeypatch.setenv("SIFTCLI_DIST_TIMEOUT", "soon")
    out = CliRunner().invoke(app, ["train", str(tiny_recipe()), "-q"])
    assert out.exit_code == 2 and "SIFTCLI_DIST_TIMEOUT='soon': expected a finite number of seconds" in out.output


@pytest.mark.parametrize("mode", ["probabilistic", "infobatch", "calibrated"])
@pytest.mark.slow
def test_hf_trainer_under_torchrun_steps_together(mode: str, tmp_path: Path) -> None:
    """SiftingTrainer launched on 2 processes: accelerate's sharded loader, sifted, memory scoring, no hang."""
    ranks = _ranks_of_script("dist_hf_trainer.py", mode, cwd=tmp_path, what="SiftingTrainer under torchrun")
    assert ranks[0]["steps"] == ranks[1]["steps"] and ranks[0]["weights"] == ranks[1]["weights"]
    assert all(r["raw"] == 96 and 0 < r["kept"] < 96 and r["indices"] for r in ranks)  # 48 rows per rank, 2 epochs
    # len() counts each rank's share, averaged over the run (the delay included), and every epoch yields exactly that
    # many batches whatever the draw, so the Trainer runs the schedule it planned and the linear decay reaches 0
    r = ranks[0]
    assert r["steps"] == r["planned"] and r["lr"] == 0.0, r


@pytest.mark.slow
def test_a_nan_loss_on_one_rank_and_a_folder_error_on_rank_0_end_every_rank_with_one_line(tmp_path: Path, text_csv: Path) -> None:
    recipe = str(_recipe(tmp_path, text_csv, loss="dist_losses:skewed"))
    warm = 1  # the warm-up's training forward on a CPU (off the clock, update discarded) comes first
    nan = torchrun("train", recipe, "-o", "nan", "-q", cwd=tmp_path, nan_at=warm + 4)  # rank 1's 4th step's loss only
    assert nan.returncode != 0
    assert nan.stderr.count("siftcli: error: training loss became nan at step 4") == 1, nan.stderr[-2000:]
    # the loss is read at log steps (every 2 here), not every step: the run stops at step 4's log line, naming step 4
    assert _metrics(tmp_path / "nan")["status"] == "failed" and _metrics(tmp_path / "nan")["optimizer_steps"] == 4
    taken = torchrun("train", recipe, "-o", "nan", "-q", cwd=tmp_path)  # rank 0 finds a run there; every rank stops
    assert taken.returncode != 0 and taken.stderr.count("siftcli: error: --output nan: already holds a run") == 1


@pytest.mark.parametrize("env,expected", [
    ({"WORLD_SIZE": "abc"}, "WORLD_SIZE='abc': expected a whole number"),
    ({"WORLD_SIZE": "2", "RANK": "5", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29999"}, "RANK=5 with WORLD_SIZE=2"),
    ({"SIFTCLI_DIST_TIMEOUT": "nan"}, "expected a finite number of seconds above 0"),
    ({"SIFTCLI_DIST_TIMEOUT": "-5"}, "expected a finite number of seconds above 0"),
])
def test_launch_variables_are_checked_before_anything_loads(text_csv: Path, tmp_path: Path, monkeypatch,
                                                           env: dict[str, str], expected: str) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump(tiny_recipe_dict(text_csv)))
    result = CliRunner().invoke(app, ["train", str(recipe), "-q", "-o", str(tmp_path / "o")])
    assert result.exit_code == 2 and expected in result.output and "Traceback" not in result.output, result.output
    assert not (tmp_path / "o").exists()


def test_a_rank_whose_peers_never_come_says_so_within_the_timeout(text_csv: Path, tmp_path: Path, monkeypatch) -> None:
    import socket
    import time

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for key, value in {"WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
                       "MASTER_PORT": str(port), "SIFTCLI_DIST_TIMEOUT": "3"}.items():
        monkeypatch.setenv(key, value)
    from siftcli import parallel

    monkeypatch.setattr(parallel, "WAIT_NOTICE_S", 0.5)
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump(tiny_recipe_dict(text_csv)))
    t0 = time.perf_counter()
    result = CliRunner().invoke(app, ["train", str(recipe), "-q", "-o", str(tmp_path / "o")])
    assert result.exit_code == 2 and "did not form within 3 s" in result.output, result.output
    assert f"rank 0 of 2: waiting for the other ranks at 127.0.0.1:{port} (gives up after 3 s" in result.output
    assert time.perf_counter() - t0 < 60


@pytest.mark.slow
def test_lightning_ddp_each_rank_trains_its_own_shard_and_validates_every_epoch(tmp_path: Path) -> None:
    """The tutorial's DataModule shape under Lightning DDP on 2 processes: each rank offers its own half of the rows
    every epoch (as a plain DataLoader would get from Lightning), both step together and validate every epoch."""
    ranks = _ranks_of_script("dist_lightning.py", cwd=tmp_path, what="Lightning DDP with a sifting loader")
    per_epoch = [[r["rows"][:64], r["rows"][64:]] for r in ranks]  # 2 epochs of 64 rows per rank
    assert all(len(r["rows"]) == 128 for r in ranks)
    for epoch in range(2):
        a, b = set(per_epoch[0][epoch]), set(per_epoch[1][epoch])
        assert len(a) == len(b) == 64 and not a & b  # disjoint halves that together are every row
    assert ranks[0]["steps"] == ranks[1]["steps"] and ranks[0]["weights"] == ranks[1]["weights"]
    assert ranks[0]["validated"] == ranks[1]["validated"] == 2


@pytest.mark.slow
def test_the_compat_loader_under_lightning_ddp_reads_each_ranks_own_shard(tmp_path: Path) -> None:
    """The SageMaker smart-sifting Lightning shape (the compat SiftingDataloader made in a DataModule, given the module)
    under DDP on 2 processes: each rank offers its own half of the rows every epoch, as the Lightning helper's does."""
    ranks = _ranks_of_script("dist_lightning.py", "compat", cwd=tmp_path, what="Lightning DDP with the compat loader")
    assert all(len(r["rows"]) == r["raw"] == 128 for r in ranks)  # 2 epochs of 64 rows per rank, not 2 of 128
    for epoch in range(2):
        a, b = (set(r["rows"][64 * epoch:64 * (epoch + 1)]) for r in ranks)
        assert len(a) == len(b) == 64 and not a & b
    assert ranks[0]["steps"] == ranks[1]["steps"] and ranks[0]["weights"] == ranks[1]["weights"]
