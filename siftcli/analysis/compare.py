"""Each seed's arm records in, ``compare.json`` out: the per-seed pairs, paired statistics over seeds and the verdict,
for a comparison that trained (``siftcli compare RECIPE``) and for two finished run folders (``siftcli compare A B``)."""

from __future__ import annotations

from pathlib import Path

from siftcli.analysis.stats import CompareResult, compare_pair, summarise_seeds
from siftcli.analysis.verdict import verdict
from siftcli.errors import SiftcliError
from siftcli.runio import read_json
from siftcli.training.record import RunMetrics, brief, final_value


def tracked(result: CompareResult) -> dict[str, str | float]:
    """A comparison's record for the trackers: the verdict, and each arm's metric and time against the baseline."""
    out: dict[str, str | float] = {"verdict": str(result["verdict"])}
    first = result["runs"][0]
    base = first.get("baseline")
    for arm, run in first.items():
        value = final_value(run)
        if value is not None:
            out[f"{arm}/{run['metric']}"] = value
        if base and base.get("train_seconds"):
            out[f"{arm}/time_ratio"] = run["train_seconds"] / base["train_seconds"]
    return out


def summarise_compare(all_runs: list[dict[str, RunMetrics]], drop_points: float, name: str, seeds: list[int],
                      subject: str = "sifted") -> CompareResult:
    """compare.json: every seed's arms (brief), the per-seed pairs, paired statistics over seeds and the verdict."""
    pairs = []
    for seed, runs in zip(seeds, all_runs):
        pair = compare_pair(runs, drop_points, subject)
        pair["seed"] = seed
        pairs.append(pair)
    summary = summarise_seeds(pairs) if len(pairs) > 1 else None
    return {"status": "completed", "recipe": name, "runs": [{a: brief(m) for a, m in r.items()} for r in all_runs],
            "pairs": pairs, "seeds_summary": summary,
            "verdict": verdict(pairs[0], all_runs[0][subject].get("sift"), summary)}


_RUN_FIELDS = {"metric": str, "higher_is_better": bool, "final": dict, "train_seconds": (int, float),
               "total_seconds": (int, float), "curve": list}


def compare_run_dirs(dir_a: str, dir_b: str, drop_points: float = 0.5) -> CompareResult:
    """Compare two finished run folders (baseline first) without training."""
    runs = []
    for d in (dir_a, dir_b):
        path = Path(d)
        if not path.is_dir():
            raise SiftcliError(f"{d}: run folder not found")
        m = read_json(path / "metrics.json")
        if not isinstance(m, dict) or not all(isinstance(m.get(k), t) for k, t in _RUN_FIELDS.items()):
            raise SiftcliError(f"{d}/metrics.json: not the metrics of a siftcli run (expected {', '.join(_RUN_FIELDS)})")
        if m.get("status") != "completed":
            raise SiftcliError(f"{d}: the run did not finish (status {m.get('status')!r}); a verdict needs two completed runs")
        runs.append(m)
    a, b = runs
    if a.get("metric") != b.get("metric"):
        raise SiftcliError(f"{dir_b}: measures {b.get('metric')!r} but {dir_a} measures {a.get('metric')!r}; cannot compare")
    pair = compare_pair({"baseline": a, "sifted": b}, drop_points)
    return {"runs": [{"baseline": brief(a), "sifted": brief(b)}], "pairs": [pair], "seeds_summary": None,
            "pilot_warning": None, "verdict": verdict(pair, b.get("sift")), "plots": []}
