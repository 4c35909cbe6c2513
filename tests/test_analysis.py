"""Time-to-target, seed summaries and the verdict: the numbers a sceptic reads."""

from __future__ import annotations

import pytest

from siftcli.analysis.stats import compare_pair, paired, summarise_seeds, target_for, time_to_target
from siftcli.analysis.verdict import verdict


def _run(arm: str, curve: list[tuple[float, float]], seconds: float, keep: float | None = None) -> dict:
    return {
        "arm": arm, "metric": "accuracy", "higher_is_better": True, "train_seconds": seconds, "total_seconds": seconds + 5,
        "final": {"accuracy": curve[-1][1], "loss": 0.3}, "optimizer_steps": 100,
        "curve": [{"train_seconds": t, "accuracy": a, "step": i} for i, (t, a) in enumerate(curve)],
        "keep": {"achieved": keep, "target": 0.5} if keep else None, "scoring_cost": 0.2 if keep else None,
        "predicted_ratio": 0.2 + keep if keep else None, "sift": {"beta": 1.0} if keep else None,
    }


def test_time_to_target_uses_the_first_evaluation_at_or_above_it() -> None:
    base = _run("baseline", [(10, 0.80), (20, 0.90), (30, 0.91), (40, 0.90)], 40)
    assert target_for(base, 0.5) == pytest.approx(0.895)
    assert time_to_target(base, 0.895) == 20
    assert time_to_target(base, 0.95) is None


def test_loss_like_metrics_count_lower_as_better() -> None:
    run = {"metric": "perplexity", "higher_is_better": False, "final": {"perplexity": 10.0},
           "curve": [{"train_seconds": 5, "perplexity": 12.0}, {"train_seconds": 9, "perplexity": 10.04}]}
    target = target_for(run, 0.5)
    assert target == pytest.approx(10.05)
    assert time_to_target(run, target) == 9


def test_ratio_is_against_the_baselines_own_time_to_target() -> None:
    base = _run("baseline", [(10, 0.85), (20, 0.90), (100, 0.90)], 100)
    sift = _run("sifted", [(15, 0.85), (30, 0.90), (70, 0.90)], 70, keep=0.5)
    pair = compare_pair({"baseline": base, "sifted": sift})
    assert pair["equal_epoch_ratio"] == pytest.approx(0.7)
    assert pair["time_to_target_ratio"] == pytest.approx(1.5)  # not 30/100: that would flatter sifting
    text = verdict(pair, sift["sift"])
    assert "did not reach the target sooner" in text and "got there at 0.2 of its run" in text


def test_verdict_reports_a_real_win_and_a_never_reached_target() -> None:
    base = _run("baseline", [(10, 0.85), (40, 0.90), (100, 0.90)], 100)
    fast = _run("sifted", [(10, 0.87), (20, 0.90), (60, 0.901)], 60, keep=0.5)
    assert "reached the target in 0.50x" in verdict(compare_pair({"baseline": base, "sifted": fast}), fast["sift"])
    slow = _run("sifted", [(10, 0.80), (60, 0.85)], 60, keep=0.5)
    assert "never reached the target" in verdict(compare_pair({"baseline": base, "sifted": slow}), slow["sift"])


def test_equal_time_baseline_that_matches_is_called_out() -> None:
    base = _run("baseline", [(10, 0.85), (40, 0.90), (100, 0.90)], 100)
    sift = _run("sifted", [(10, 0.87), (20, 0.90), (60, 0.90)], 60, keep=0.5)
    eq = _run("equal-time", [(30, 0.88), (60, 0.901)], 60)
    pair = compare_pair({"baseline": base, "sifted": sift, "equal-time": eq})
    assert pair["vs"]["equal-time"]["diff"] == pytest.approx(-0.1)
    assert verdict(pair, sift["sift"]).startswith("Train less: a baseline given the sifted run's time did as well")


def test_seed_summary_flags_noise() -> None:
    pairs = [{"metric_delta": d, "time_to_target_ratio": r} for d, r in ((0.3, 0.7), (-0.4, 0.9), (0.1, 0.8), (0.2, 0.8), (-0.1, 0.8))]
    summary = summarise_seeds(pairs)
    assert summary["metric_delta"]["status"] == "within noise" and summary["metric_delta"]["within_noise"] is True
    assert summary["time_to_target_ratio"]["mean"] == pytest.approx(0.8)


def test_paired_statistics_need_five_seeds_and_a_spread() -> None:
    # identical per-seed results (std 0) used to make any positive mean "beat": now it is too few seeds to say
    assert paired([25.0] * 5)["status"] == "too few seeds" and not paired([25.0] * 5)["beats"]
    assert paired([3.0, 4.0, 5.0])["status"] == "too few seeds"  # clear, but only 3 seeds
    clear = paired([3.0, 4.0, 5.0, 3.5, 4.5])
    assert clear["status"] == "beats" and clear["se"] == pytest.approx(0.3536, abs=1e-3)
    # 95% Student-t with 4 degrees of freedom: 2.776 SE, wider than 2 SE
    assert clear["ci95"][0] == pytest.approx(4.0 - 2.776 * clear["se"], abs=1e-3)
    assert paired([-3.0, -4.0, -5.0, -3.5, -4.5])["status"] == "loses"
    # beyond two SE but not beyond the t interval: within noise
    edge = [1.0, 0.1, 2.0, 0.3, 1.6]
    stat = paired(edge)
    assert stat["mean"] > 2 * stat["se"] and stat["ci95"][0] < 0 and stat["status"] == "within noise"


def test_verdict_over_seeds_says_when_only_some_seeds_reached_the_target() -> None:
    pairs = [{"metric_delta": d, "time_to_target_ratio": r} for d, r in ((0.1, 1.4), (-0.8, None), (0.5, 0.6))]
    summary = summarise_seeds(pairs)
    pair = {"metric": "accuracy", "sifted_time_to_target": None, "target": 0.88, "time_to_target_ratio": None, "vs": {}}
    text = verdict(pair, {"beta": 1.0}, summary)
    assert "only 2 of 3 seeds (time-to-target ratio 1.00 where it did)" in text
    assert "never reached" not in text
    assert "never reached the target" in verdict(pair, {"beta": 1.0}, summarise_seeds(pairs[1:2]))


def test_verdict_leads_with_the_honest_opponents() -> None:
    base = _run("baseline", [(10, 0.70), (40, 0.64)], 40)  # peaked early, then fell (label noise)
    sift = _run("sifted", [(20, 0.60), (30, 0.77)], 30, keep=0.25)
    equal = _run("equal-time", [(30, 0.63)], 30)
    rand = _run("random-keep", [(28, 0.55)], 28, keep=0.25)
    pair = compare_pair({"baseline": base, "sifted": sift, "equal-time": equal, "random-keep": rand}, 0.5)
    assert pair["vs"]["equal-time"]["diff"] == pytest.approx(14.0) and pair["vs"]["random-keep"]["diff"] == pytest.approx(22.0)
    text = verdict(pair, sift["sift"])
    # one seed is never a win, however large
    assert text.startswith("Against a baseline given the same time: ahead on one seed, too few seeds to tell (+14.00 points)")
    assert "against keeping the same fraction at random: ahead on one seed, too few seeds to tell (+22.00 points)" in text
    assert "it ended +13.00 points from the full baseline (one seed)" in text
    # over five seeds, "beat" needs the paired t interval above zero
    noisy = [dict(pair, vs={**pair["vs"], "equal-time": {"diff": v}}) for v in (3.0, -2.0, 2.0, 1.0, -1.0)]
    summary = summarise_seeds(noisy)
    assert summary["vs"]["equal-time"]["status"] == "within noise"
    said = verdict(noisy[0], sift["sift"], summary)
    assert "gainst a baseline given the same time: within noise (+0.60 points ± 0.93 SE over 5 seeds)" in said
    assert said.startswith("Train less")  # not told apart from the simpler path: the simpler path is the advice
    clear = [dict(pair, vs={**pair["vs"], "equal-time": {"diff": v}}) for v in (-3.0, -2.0, -2.5, -3.5, -2.8)]
    assert verdict(clear[0], sift["sift"], summarise_seeds(clear)).startswith("Train less")


def test_pairs_compare_against_every_arm_that_ran_and_metrics_with_their_direction() -> None:
    base = _run("baseline", [(10, 0.80)], 40)
    sift = _run("sifted", [(10, 0.82)], 20, keep=0.5)
    static = _run("static-filter", [(10, 0.83)], 18)
    static["reference"] = {"paid_seconds": 0.0, "build_seconds": 6.0, "cached": True}
    pair = compare_pair({"baseline": base, "sifted": sift, "static-filter": static})
    assert set(pair["vs"]) == {"baseline", "static-filter"}
    assert pair["vs"]["static-filter"]["diff"] == pytest.approx(-1.0)
    assert pair["vs"]["static-filter"]["paid_ratio"] == pytest.approx(24 / 40)  # the cached reference, paid in full
    assert verdict(pair, sift["sift"]).startswith("Filter once instead")
    wide = verdict(compare_pair({"baseline": base, "sifted": sift, "static-filter:fraction=0.33": static}), sift["sift"])
    assert wide.startswith("Filter once, wider, and train less") and "siftcli filter RECIPE --keep 0.33" in wide
    assert "a wider fraction chosen once by the reference and trained for the same steps (fraction=0.33)" in wide
    dedup = _run("dedup", [(10, 0.84)], 23)
    text = verdict(compare_pair({"baseline": base, "sifted": sift, "dedup": dedup}), sift["sift"])
    assert text.startswith("Drop the near-copies instead") and "siftcli filter RECIPE --dedup -o kept.csv" in text
    assert "against dropping near-copies once: matched or beat it (-2.00 points)" in text
    target = _run("target-only", [(10, 0.85)], 15)
    text = verdict(compare_pair({"baseline": base, "sifted": sift, "static-filter": static, "target-only": target}), sift["sift"])
    assert text.startswith("Train on the target rows alone")  # before the static filter, which also beat it
    assert "against training on the target group's rows alone: matched or beat it (-3.00 points)" in text
    ppl = {**base, "metric": "perplexity", "higher_is_better": False, "final": {"perplexity": 10.0}}
    better = {**sift, "metric": "perplexity", "higher_is_better": False, "final": {"perplexity": 9.0}}
    assert compare_pair({"baseline": ppl, "sifted": better})["metric_delta"] == pytest.approx(1.0)  # lower is better: +1


def test_a_distillation_verdict_says_cache_the_teacher_before_anything_about_sifting() -> None:
    base = _run("baseline", [(10, 0.85), (40, 0.90), (100, 0.90)], 100)
    sift = _run("sifted", [(10, 0.86), (30, 0.89), (60, 0.895)], 60, keep=0.5)

    def said(cached: bool, inputs_change: bool, metric_delta: float = -0.5) -> str:
        teacher = {"cached": cached, "inputs_change": inputs_change}
        pair = compare_pair({"baseline": base, "sifted": {**sift, "teacher": teacher}})
        return verdict({**pair, "metric_delta": metric_delta}, sift["sift"])

    assert said(False, False).startswith("Cache the teacher first: its inputs do not change")
    assert said(True, False).startswith("Distill with the cached teacher and without sifting")
    assert "teacher" not in said(True, False, metric_delta=0.4)  # cached and ahead: nothing to say about the teacher
    assert said(False, True).startswith("Gate the teacher instead of sifting")  # inputs change: no cache, and sifting lost
    assert "teacher" not in said(False, True, metric_delta=0.4)  # inputs change and sifting ahead: nothing to add
    plain = compare_pair({"baseline": base, "sifted": sift})
    assert "teacher" not in plain and "teacher" not in verdict(plain, sift["sift"])  # not a distillation
