"""The tuning script runs end to end on a tiny model (its speed numbers are never asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _variants(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "variants.py"), *args],
                          capture_output=True, text=True, timeout=300)


def test_variants_trains_every_variant_and_short_baseline_against_one_baseline(tiny_recipe, tmp_path: Path) -> None:
    out = tmp_path / "v"
    proc = _variants(str(tiny_recipe()), "--seeds", "0,1", "--variant", "b2=sift.beta=2,sift.mode=calibrated",
                     "--variant", "plain=sift.enabled=false", "--short", "0.5", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    rows = json.loads((out / "variants.json").read_text())["rows"]
    assert [(r["seed"], r["run"]) for r in rows] == [(s, n) for s in (0, 1) for n in ("baseline x0.5", "b2", "plain")]
    assert rows[1]["target_keep"] == 1 / 3 and rows[1]["achieved_keep"] < 1.0
    assert rows[2]["achieved_keep"] is None and rows[2]["equal_epoch_ratio"] > 0
    short = json.loads((out / "seed0" / "short-0.5" / "metrics.json").read_text())
    base = json.loads((out / "seed0" / "baseline" / "metrics.json").read_text())
    assert short["optimizer_steps"] == round(0.5 * base["optimizer_steps"])
    assert "| 0 | b2 |" in proc.stdout and "| 1 | b2 |" in proc.stdout
    assert "| b2 | " in proc.stdout  # the mean over seeds


@pytest.mark.parametrize("args,expected", [
    (["--variant", "x=sift.bta=2"], "did you mean 'sift.beta'"),
    (["--variant", "=sift.beta=2"], "expected NAME=key=value"),
    (["--seeds", "a,b"], "--seeds 'a,b': expected comma-separated integers"),
    (["--short", "1.5"], "--short 1.5: expected a fraction"),
])
def test_variants_bad_input_is_one_line_and_exit_2(tiny_recipe, tmp_path: Path, args: list[str], expected: str) -> None:
    proc = _variants(str(tiny_recipe()), *args, "-o", str(tmp_path / "v"))
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().startswith("variants: error:") and expected in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "v").exists(), "bad input must not leave a run folder"
