"""Paired statistics in, one sentence of advice out: which opponent sifting beat, lost to or tied, and what to try next."""

from __future__ import annotations

import math
from typing import Any

from siftcli.analysis.stats import MIN_SEEDS, Pair, Paired, SeedsSummary
from siftcli.tasks import metric


def verdict(pair: Pair, sift: dict[str, Any] | None, seeds: SeedsSummary | None = None) -> str:
    """Plain sentences a user can act on: first against the honest opponents that ran (a baseline given the same
    time, random keep at the same rate, a static filter), then time-to-target; says what to do instead where
    sifting did not win."""
    ratio = pair.get("time_to_target_ratio")
    eq = pair.get("equal_epoch_ratio")
    pred = pair.get("predicted_ratio")
    m = metric(pair["metric"])
    parts: list[str] = []
    who = "sifting" if pair.get("subject", "sifted").startswith("sifted") else pair["subject"]
    over = (seeds or {}).get("vs", {})
    outcomes = {arm: _outcome(v.get("diff"), over.get(arm), m.unit) for arm, v in pair.get("vs", {}).items() if arm != "baseline"}
    for arm, (status, text) in outcomes.items():
        parts.append(f"against {_opponent_name(arm)}: {status} ({text})")
    # an opponent that beat sifting, else one it could not be told from (the simpler path did as well): say what to do
    lost = [arm for arm, (status, _) in outcomes.items() if status in ("lost", "matched or beat it")]
    lost += [arm for arm, (status, _) in outcomes.items() if status == "within noise"]
    if lost:  # rows known to be on target beat any ranking: say that first where it ran
        first = "target-only" if "target-only" in lost else lost[0]
        parts.insert(0, _instead(first, pair.get("achieved_keep")))
    teacher = _teacher_advice(pair, seeds, sift)
    if teacher:
        parts.insert(0, teacher)
    reached = (seeds or {}).get("time_to_target_ratio") or {}
    if seeds and reached and reached["n"] < seeds["seeds"]:  # some seeds got there, some never did
        parts.append(f"{who} reached the target in only {reached['n']} of {seeds['seeds']} seeds (time-to-target ratio "
                     f"{reached['mean']:.2f} where it did): not a reliable saving here")
    elif pair.get("sifted_time_to_target") is None:
        parts.append(f"{who} never reached the target ({_fmt(pair.get('target'))}): it did not pay here")
    elif ratio is not None and ratio <= 0.95:
        parts.append(f"{who} reached the target in {ratio:.2f}x the baseline's time to it")
    else:
        parts.append(f"{who} did not reach the target sooner (time-to-target ratio {_fmt(ratio)}); the baseline got there "
                     f"at {_fmt(pair.get('baseline_target_fraction_of_run'))} of its run")
    if pred is not None and pred >= 1.0:
        parts.append(f"at this beta the scoring pass costs more than it saves (s + a = {pred:.2f} >= 1): raise beta, "
                     "or use sift.scoring memory (remembered losses need no scoring forward)")
    elif eq is not None and eq > 0.97:
        parts.append(f"the epochs took {eq:.2f}x the baseline's time, so there was little to save")
    delta = (seeds or {}).get("metric_delta")
    if isinstance(delta, dict):
        parts.append(f"against the full baseline over {delta['n']} seeds: {_STATUS_WORDS[delta['status']]} "
                     f"({delta['mean']:+.2f}{m.unit} ± {_se(delta)})")
    elif pair.get("metric_delta") is not None:
        parts.append(f"it ended {pair['metric_delta']:+.2f}{m.unit} from the full baseline (one seed)")
    if not lost and (sift is not None or who == "sifting"):  # a variant that does not sift has no beta to tune
        parts.append(_next_step(pair, sift))
    text = "; ".join(parts) + "."
    return text[0].upper() + text[1:]


#: How the verdict names each opponent.
OPPONENT_NAMES = {"equal-time": "a baseline given the same time", "random-keep": "keeping the same fraction at random",
                  "dedup": "dropping near-copies once", "target-only": "training on the target group's rows alone",
                  "static-filter": "the same fraction chosen once by the reference (static filter)"}


_STATUS_WORDS = {"beats": "ahead beyond two paired standard errors", "loses": "behind beyond two paired standard errors",
                 "within noise": "within the noise", "too few seeds": f"too few seeds to tell (needs {MIN_SEEDS}, with spread)"}


def _opponent_name(arm: str) -> str:
    """How the verdict names an opponent; a variant (``static-filter:fraction=0.33``) by its row, with its settings."""
    base, _, spec = arm.partition(":")
    if base == "static-filter" and spec:
        return f"a wider fraction chosen once by the reference and trained for the same steps ({spec})"
    return OPPONENT_NAMES.get(base, arm) + (f" ({spec})" if spec and base in OPPONENT_NAMES else "")


def _se(stat: Paired) -> str:
    return "n/a" if not math.isfinite(stat.get("se", math.nan)) else f"{stat['se']:.2f} SE"


def _outcome(single: float | None, over_seeds: Paired | None, unit: str) -> tuple[str, str]:
    """``(word, numbers)`` for one opponent: from the paired statistics over seeds, or from one seed (never "beat")."""
    if isinstance(over_seeds, dict) and over_seeds.get("n", 0) > 1:
        word = {"beats": "beat it", "loses": "lost", "within noise": "within noise",
                "too few seeds": "too few seeds to tell"}[over_seeds["status"]]
        return word, f"{over_seeds['mean']:+.2f}{unit} ± {_se(over_seeds)} over {over_seeds['n']} seeds"
    if single is None:
        return "no value", "n/a"
    word = "matched or beat it" if single <= 0 else "ahead on one seed, too few seeds to tell"
    return word, f"{single:+.2f}{unit}"


def _instead(arm: str, keep: float | None) -> str:
    """What to do instead of sifting, from the opponent that matched or beat it."""
    base, _, spec = arm.partition(":")
    if base == "static-filter" and spec.startswith("fraction="):
        f = spec.partition("=")[2]
        return (f"Filter once, wider, and train less: the fraction {f} chosen once by the reference and trained for the "
                f"sifted run's steps did as well; siftcli filter RECIPE --keep {f} -o kept.csv writes it, then train on "
                "kept.csv with max_steps set to the sifted run's optimizer steps")
    k = f"{keep:.2g}" if keep else "F"
    return {"equal-time": "Train less: a baseline given the sifted run's time did as well",
            "random-keep": "Selection did not pay: keeping the same fraction at random did as well; train on a random subset",
            "static-filter": f"Filter once instead: the same fraction chosen once by the reference did as well; "
                             f"siftcli filter RECIPE --keep {k} -o kept.csv writes it, then train on kept.csv",
            "dedup": "Drop the near-copies instead: removing them once before training did as well; "
                     "siftcli filter RECIPE --dedup -o kept.csv writes the rest, then train on kept.csv",
            "target-only": "Train on the target rows alone: the rows of data.target_group (by data.group_column) did "
                           "as well as sifting the whole pool; when the pool says which rows are on target, filtering by "
                           "that beats any ranking",
            }.get(arm, f"{arm} did as well as sifting")


def _teacher_advice(pair: Pair, seeds: SeedsSummary | None, sift: dict[str, Any] | None = None) -> str | None:
    """Distillation's first advice, from docs/benchmarks.md (SST-2, MR and AG News, 5 seeds each): a teacher that sees
    fixed inputs is cached 2.6-2.7x faster than plain distillation at the same accuracy, and sifting on top of the
    cache saves only the student's share while it loses accuracy on all three; so say "cache it" before anything
    about sifting. Where inputs change and sifting fell behind, gating the teacher kept 3.5 more points in less time
    (distill-augmented-gate)."""
    teacher = pair.get("teacher")
    if not teacher:
        return None
    delta = (seeds or {}).get("metric_delta")
    behind = delta["status"] in ("loses", "within noise") if isinstance(delta, dict) else (pair.get("metric_delta") or 0) < 0
    if teacher.get("inputs_change"):
        if sift is None or not behind:
            return None
        return ("Gate the teacher instead of sifting the samples: distill.teacher_fraction: 0.25 (sift.enabled: false) "
                "trains every sample and runs the teacher only on the quarter the student is least sure of")
    if not teacher.get("cached"):
        return ("Cache the teacher first: its inputs do not change between epochs, so distill.cache (leave it out: it is "
                "on by default there) runs it once per sample instead of once per kept sample per epoch, "
                "and gives the same result")
    if behind:
        return ("Distill with the cached teacher and without sifting: the teacher already runs once per sample, so "
                "sifting saved only the student's share of the time and did not keep the accuracy")
    return None


def _next_step(pair: Pair, sift: dict[str, Any] | None) -> str:
    """The one change worth trying next, from where the time went."""
    beta = (sift or {}).get("beta")
    ratio = pair.get("time_to_target_ratio")
    if beta is None:
        return "next: enable sifting"
    if pair.get("sifted_time_to_target") is None:
        return f"next: try beta {beta / 2:g} or a longer sift_delay"
    if ratio is not None and ratio <= 0.95:
        return f"next: try beta {beta * 2:g} for a bigger saving, and --seeds 5 to confirm"
    return "next: a shorter sift_delay (sifting cannot speed up the part of the run it does not sift) or sift.mode calibrated"


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3g}"
