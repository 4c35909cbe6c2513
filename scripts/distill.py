"""Distillation with sifting (issue #13): teacher forwards, time and accuracy with and without sifting.

Trains the teacher once (pretrained MiniLM fine-tuned by siftcli on SST-2, recipes/benchmarks/sst2-distill-teacher.yaml,
into runs/distill-teacher; reused when it is there), then per seed, from the same initial weights and data order:

  distill      the student distilled from the teacher on every sample (the baseline of this comparison)
  sifted       the same with sifting: scored by the student alone, the teacher runs on kept samples only
  equal-time   distillation without sifting, given the sifted run's wall-clock (learning rate fully decayed)
  random-keep  the sifted run's kept fraction chosen at random (no scoring; the teacher on kept samples only): the
               value of selection itself

The teacher's forwards are on every arm's clock (phase "teacher"); its fine-tune is a prerequisite of all three and is
reported beside them. Finally the sifted student of the first seed is saved with save_pretrained, reloaded with
from_pretrained and its evaluation predictions compared with the trained model's. Writes the "Distillation with
sifting" section of docs/benchmarks.md.

    python scripts/distill.py             # 3 seeds (about 20 min on 2 CPU cores)
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchmark import _cpu, mean_sd, write_section  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def teacher(out: Path) -> dict[str, Any]:
    from siftcli.config import load_recipe
    from siftcli.runio import read_json
    from siftcli.runner import run_train

    if (out / "model" / "config.json").exists() and (out / "metrics.json").exists():
        return read_json(out / "metrics.json")
    _, metrics = run_train(load_recipe(ROOT / "recipes" / "benchmarks" / "sst2-distill-teacher.yaml"), output=str(out))
    return metrics


def reload_identical(workload: Any, folder: Path) -> bool:
    import torch
    from transformers import AutoModelForSequenceClassification

    from siftcli.builders import save_model

    save_model(workload, folder)
    reloaded = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    model = workload.model.to("cpu").eval()
    same = True
    with torch.no_grad():
        for start in range(0, len(workload.eval_data), 256):
            batch = workload.collate(workload.eval_data[start:start + 256])
            inputs = {k: v for k, v in batch.items() if k != "labels"}
            same &= bool(torch.equal(reloaded(**inputs).logits, model(**inputs).logits))
    return same


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--out", default=str(ROOT / "docs" / "benchmarks.md"))
    args = parser.parse_args()
    os.chdir(ROOT)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from siftcli.config import load_recipe
    from siftcli.runio import atomic_write_json
    from siftcli.runner import equal_time_recipe, prepare, random_keep_changes, run_arm

    started = time.perf_counter()
    teacher_dir = ROOT / "runs" / "distill-teacher"
    t = teacher(teacher_dir)
    recipe = load_recipe(ROOT / "recipes" / "benchmarks" / "sst2-distill.yaml", [f"distill.teacher={teacher_dir}"])
    workload, run_dir, initial = prepare(recipe, None, "-bench")
    runs: list[dict[str, Any]] = []
    identical = None
    for seed in range(args.seeds):
        r = recipe.model_copy(update={"seed": seed})
        folder = run_dir / f"seed{seed}"
        arms = {"distill": run_arm(workload, initial, r, folder / "distill", "baseline")}
        arms["sifted"] = run_arm(workload, initial, r, folder / "sifted", "sifted", sift=True)
        if identical is None:
            identical = reload_identical(workload, folder / "sifted" / "model")
        arms["equal-time"] = run_arm(workload, initial, equal_time_recipe(r, arms["distill"], arms["sifted"]),
                                     folder / "equal-time", "equal-time")
        arms["random-keep"] = run_arm(workload, initial, r, folder / "random-keep", "random-keep", sift=True,
                                      **random_keep_changes(arms["sifted"]))  # same kept fraction, no selection
        runs.append({a: {k: m.get(k) for k in ("final", "train_seconds", "samples_teacher", "samples_trained", "raw_samples",
                                                 "phases", "scoring_cost", "samples_scored")} for a, m in arms.items()})
        print(f"  seed {seed}: " + ", ".join(f"{a} {m['final']['accuracy']:.4f} ({m['train_seconds']:.0f} s, "
                                             f"teacher {m['samples_teacher']})" for a, m in arms.items()), flush=True)
    result = {"teacher": {"final": t["final"], "train_seconds": t["train_seconds"]}, "runs": runs, "reload_identical": identical}
    atomic_write_json(run_dir / "results.json", result)
    minutes = (time.perf_counter() - started) / 60
    section = report(result, minutes)
    write_section(Path(args.out), "## Distillation with sifting", section)
    print("\n".join(section))
    return 0


def report(result: dict[str, Any], minutes: float) -> list[str]:
    import torch

    runs = result["runs"]
    lines = [
        "## Distillation with sifting: the teacher runs on kept samples only",
        "",
        f"Produced by `python scripts/distill.py` ({minutes:.0f} min) on {platform.machine()}, {os.cpu_count()} CPU cores "
        f"({_cpu()}), torch {torch.__version__}, {time.strftime('%Y-%m-%d')}. Teacher: pretrained MiniLM fine-tuned by "
        f"siftcli on 4,000 SST-2 sentences (`recipes/benchmarks/sst2-distill-teacher.yaml`): accuracy "
        f"{100 * result['teacher']['final']['accuracy']:.2f} on 2,000 dev sentences, {result['teacher']['train_seconds']:.0f} s "
        "to fine-tune (a prerequisite of every arm, not on their clocks). Student: a 2-layer, 128-wide BERT from config "
        "(`recipes/benchmarks/sst2-distill.yaml`: T = 2, alpha = 0.5, 4 epochs). Every arm's clock holds the teacher's "
        f"forwards; {len(runs)} seeds, mean ± std.",
        "",
        "| arm | train s | time / distill | teacher forwards | teacher s | student accuracy (pts) |",
        "|---|---|---|---|---|---|",
    ]
    for arm in ("distill", "sifted", "equal-time", "random-keep"):
        lines.append(
            f"| {arm} | {mean_sd([r[arm]['train_seconds'] for r in runs], fmt='{:.0f}')} | "
            f"{mean_sd([r[arm]['train_seconds'] / r['distill']['train_seconds'] for r in runs], fmt='{:.2f}')} | "
            f"{mean_sd([r[arm]['samples_teacher'] for r in runs], fmt='{:.0f}')} | "
            f"{mean_sd([r[arm]['phases'].get('teacher', 0.0) for r in runs], fmt='{:.0f}')} | "
            f"{mean_sd([100 * r[arm]['final']['accuracy'] for r in runs], fmt='{:.2f}')} |")
    diffs = {rival: [100 * (r["sifted"]["final"]["accuracy"] - r[rival]["final"]["accuracy"]) for r in runs]
             for rival in ("distill", "equal-time", "random-keep")}
    lines.append("")
    for rival, d in diffs.items():
        se = (statistics.stdev(d) / math.sqrt(len(d))) if len(d) > 1 else math.inf
        mean = statistics.fmean(d)
        lines.append(f"- sifted − {rival}: {mean:+.2f} pts (2 SE {2 * se:.2f}{', **beats**' if mean > 2 * se else ''}; "
                     f"per seed {', '.join(f'{x:+.2f}' for x in d)})")
    lines += [f"- the sifted student of seed 0, saved with `save_pretrained` and reloaded with `from_pretrained`, gives "
              f"{'identical' if result['reload_identical'] else 'DIFFERENT'} logits on all 2,000 dev sentences", ""]
    return lines


if __name__ == "__main__":
    raise SystemExit(main())
