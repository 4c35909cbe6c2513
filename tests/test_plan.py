"""siftcli plan: which strategies apply, the search on the validation half, the confirmation on the other half, the
recipe it writes, an interrupted plan resumed, and bad options in one line."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from siftcli.arms.context import SeedContext
from siftcli.arms.run import run_one
from siftcli.arms.table import check_arms
from siftcli.cli import app
from siftcli.errors import RunInterrupted, SiftcliError
from siftcli.plan import costs
from siftcli.plan.record import Candidate, Confirmation, PlanRecord, Trial, Versus, load_record
from siftcli.plan.run import PlanSettings, run_plan
from siftcli.plan.settings import split_eval
from siftcli.plan.strategies import strategies
from siftcli.plan.verdict import conclude
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
    assert "sifted:mode=probabilistic,beta=1,score=reference,scoring=fresh" in arms  # the holdout's score, online
    by_arm = {c.arm: c for c in found}
    assert by_arm["sifted:mode=probabilistic,beta=1,score=reference,scoring=fresh"].extra_cost == 0.0  # no forward
    calibrated = validate_recipe(tiny_recipe_dict(text_csv, **{"sift.mode": "calibrated", "sift.keep_fraction": 0.25}), "t")
    priced = {c.arm: c.pool_fraction for c in strategies(calibrated)[0]}  # a probabilistic member keeps 1/(1+beta), not
    assert priced["sifted:mode=probabilistic,beta=2,score=loss,scoring=memory"] == pytest.approx(1 / 3)  # the 0.25 left
    assert len(arms) == len(set(arms))
    same = validate_recipe(tiny_recipe_dict(text_csv, **{"sift.mode": "probabilistic", "sift.beta": 2.0,
                                                         "sift.score": "loss", "sift.scoring": "memory"}), "t")
    online = [c.arm for c in strategies(same)[0] if c.family == "online"]
    assert "sifted" in online and not any("beta=2,score=loss,scoring=memory" in a for a in online)  # not twice
    # a setting that is invalid over the recipe's own sift section is skipped with why, never a traceback
    renewing = validate_recipe(tiny_recipe_dict(text_csv, **{"sift.scoring": "memory", "sift.memory_refresh": "train"}), "t")
    found, skipped = strategies(renewing)
    assert not any("entropy" in c.arm for c in found) and any(c.family == "online" for c in found)
    assert any("score=entropy" in s.family and "memory_refresh" in s.why for s in skipped)
    for c in found:
        if c.family == "online":
            check_arms(renewing, [c.arm], "baseline")
    check_arms(held, arms, "baseline")  # every strategy is a runnable row of the arms table
    assert by_arm["filter:fraction=0.25,reference=holdout"].reference == "holdout"  # its build is priced, once a seed
    assert by_arm["sifted:mode=probabilistic,beta=1,score=reference,scoring=fresh"].reference == "ngram"
    assert any(s.family == "target-only" and "target group" in s.why for s in skipped)
    grouped = validate_recipe(tiny_recipe_dict(text_csv, **{"data.group_column": "domain", "data.target_group": "a"}), "t")
    assert "target-only" in {c.family for c in strategies(grouped)[0]}
    uncached = validate_recipe(tiny_recipe_dict(text_csv, **{"distill": {"teacher": "t", "cache": False}}), "t")
    cache = next(c for c in strategies(uncached)[0] if c.family == "teacher-cache")
    assert cache.arm == "variant:distill.cache=true,sift.enabled=false"  # the baseline with the cache, never sifted
    assert cache.pool_fraction == 1.0 and -0.5 < cache.extra_cost < 0  # all of the pool, less the teacher's forward
    assert cache.exact  # after the first epoch; with fixed inputs, the baseline's own training (nothing to confirm)
    augmented = validate_recipe(tiny_recipe_dict(text_csv, **{"distill": {"teacher": "t", "cache": False},
                                                               "data.augment": {"kind": "mask"}}), "t")
    assert not next(c for c in strategies(augmented)[0] if c.family == "teacher-cache").exact  # inputs change


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
    first = 0.30 if sift["scoring"] == "memory" else 0.0  # memory scores everything afresh in its first epoch
    assert own.first_epoch_cost == pytest.approx(first)
    assert predicted_cost(own, 100.0, 1.0, epochs=recipe.epochs) == pytest.approx(100 * (keep + extra + first / recipe.epochs))
    online = [c for c in breadth_first(found, 100.0) if c.family == "online"]
    assert len(online) >= 4 and own in online and fresh in online  # searched over score and beta, the recipe's own too
    costs = [predicted_cost(c, 100.0, 1.0) for c in online]
    assert costs == sorted(costs)  # the family's cheapest first


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
    conclude(record)
    assert record.pick == "baseline" and record.payback_runs is None and record.answer.startswith("train on everything")
    worse = Versus("baseline", -3.0, 0.5, 3, (-5.0, -1.5), [-3.0, -3.5, -2.5])
    record.confirmations = [Confirmation("filter:fraction=0.25", [1, 2, 3], [0.8] * 3, [0.83] * 3, 0.3, 5.0, [worse], False,
                                         stopped="worse")]
    conclude(record)
    assert record.pick == "baseline" and "worse than the tolerance" in record.answer and "inconclusive" not in record.answer
    unsure = Versus("baseline", 0.07, 0.47, 5, (-1.95, 2.08), [0.5, -0.4, 0.1, 0.3, -0.2])
    record.confirmations = [Confirmation("sifted:beta=2", [1, 2, 3, 4, 5], [0.94] * 5, [0.94] * 5, 0.63, 5.0, [unsure],
                                         False, stopped="inconclusive")]
    conclude(record)
    assert record.pick == "baseline" and "sifted:beta=2: +0.07 ± 0.47 points over 5 seeds" in record.answer
    assert "inconclusive after 5 seeds" in record.answer and "--seeds 8" in record.answer


def test_where_no_other_family_tied_a_tied_member_of_the_best_family_is_confirmed_beside_it() -> None:
    """pretrained-clean: the screen tied two online settings and no other family; the cheaper was confirmed alone and
    was worse, where the other was the truth's pick. Both are confirmed now; a member beyond the noise, or dropped, is
    not; a tie across families still comes first."""
    from siftcli.plan import search
    from siftcli.plan.record import Candidate, Trial

    def cand(arm: str, family: str, signal: float, ratio: float, fraction: float | None) -> Candidate:
        t = Trial(arm, 1 / 8, 1.0, 0.8, 0.8, ratio, "complete", gap=signal * 10, noise=0.4, predicted_ratio=ratio,
                  signal_gap=signal, signal_noise=0.004)
        return Candidate(arm, family, "", fraction, trials=[t])

    memory = cand("sifted:beta=2,scoring=memory", "online", -0.027, 0.45, None)
    calibrated = cand("sifted:mode=calibrated", "online", -0.024, 0.71, None)
    entropy = cand("sifted:score=entropy", "online", -0.060, 0.80, None)
    record = PlanRecord("running", "r", "accuracy", 2, 1.0, 5, baseline_seconds=100.0, screen_fidelity=1 / 8,
                        candidates=[memory, calibrated, entropy, cand("dedup", "dedup", -0.2, 0.5, 0.9)])
    assert [c.arm for c in search.contenders(record)] == [memory.arm, calibrated.arm]  # tied: the cheaper first
    calibrated.trials[0].signal_gap = -0.040  # beyond two noises of the best
    assert [c.arm for c in search.contenders(record)] == [memory.arm]
    calibrated.trials[0].signal_gap = -0.024
    calibrated.trials[0].gap = -5.0  # dropped on evidence (worse than the tolerance and its noise by accuracy)
    assert [c.arm for c in search.contenders(record)] == [memory.arm]
    calibrated.trials[0].gap = -0.24
    record.candidates.append(cand("target-only", "target-only", -0.025, 0.3, 1 / 3))
    assert [c.arm for c in search.contenders(record)] == ["target-only", memory.arm]  # another family's tie first


def test_the_looks_spend_at_most_five_percent_and_an_extension_only_the_reserve() -> None:
    from siftcli.plan.confirm import MAIN_ALPHA, RESERVE_ALPHA, look_alpha

    for horizons in ([2], [5], [5, 8], [5, 8, 12], [3, 4, 5, 6, 7]):
        spent = [look_alpha(n, horizons) for n in range(2, horizons[-1] + 1)]
        assert all(a > 0 for a in spent) and sum(spent) <= MAIN_ALPHA + RESERVE_ALPHA + 1e-12
        assert sum(spent[: horizons[0] - 1]) == pytest.approx(MAIN_ALPHA)  # the planned looks spend the main alpha
    assert look_alpha(2, [5]) < look_alpha(5, [5])  # early looks need a clearer difference


def test_the_confirmation_stops_a_clear_win_at_three_seeds_a_clear_loser_at_two_and_a_close_call_takes_five() -> None:
    from siftcli.plan.confirm import sequential

    looks, stopped = sequential([15.2, 13.9, 16.4, 15.0, 14.1], [5], 1.0)
    assert (stopped, len(looks), looks[-1].n) == ("within", 2, 3)  # a clear win: after 3 seeds
    looks, stopped = sequential([-9.5, -11.0, -10.2], [5], 1.0)
    assert stopped == "worse" and looks[-1].n == 2  # a clear loser: after 2 (its own 80% interval below -1)
    # the memory-scoring pick of the long regime's plan, -13.2 points over 3 seeds at 95%: stopped at its second now
    looks, stopped = sequential([-10.0, -17.8, -11.7], [5], 1.0)
    assert stopped == "worse" and looks[-1].n == 2
    # a pick within the tolerance whose first two seeds disagree is not called worse: another seed is trained
    assert sequential([-0.5, -3.0], [5], 1.0)[1] == ""
    looks, stopped = sequential([0.4, -0.9, 0.6, -0.3, 0.1], [5], 1.0)
    assert looks[-1].n == 5 and stopped in ("within", "inconclusive")  # a close call: every seed
    assert sequential([0.4, -0.9, 0.6], [5], 1.0)[1] == ""  # not yet: another seed


def test_a_runner_up_the_search_could_not_tell_from_its_best_is_confirmed_beside_it_on_the_same_baselines() -> None:
    """A tie at the last rung is broken by the predicted time, which says nothing of accuracy: the tied runner-up is
    confirmed too, on the same seeds' baselines (one baseline job a seed), each at half the error; the answer is the
    objective's on the confirmed means (the best, the fastest within the tolerance of it). A runner-up beyond the
    noise of the best is not confirmed."""
    from siftcli.plan import confirm, search
    from siftcli.plan.record import Candidate, Trial
    from siftcli.plan.study import Job, Result
    from siftcli.tasks import metric

    def cand(arm: str, family: str, gap: float, ratio: float, fraction: float) -> Candidate:
        t = Trial(arm, 1 / 4, 1.0, 0.8, 0.8, ratio, "complete", gap=gap, noise=1.0, predicted_ratio=ratio,
                  signal_gap=gap / 100, signal_noise=0.01)
        return Candidate(arm, family, "", fraction, trials=[t])

    record = PlanRecord("running", "r", "accuracy", 2, 1.0, 5, baseline_seconds=100.0, screen_fidelity=1 / 4,
                        candidates=[cand("filter:fraction=0.25", "filter", +0.5, 0.20, 0.25),
                                    cand("target-only", "target-only", +0.6, 0.30, 1 / 3),
                                    cand("sifted", "online", -1.5, 0.45, None)])
    assert [c.arm for c in search.contenders(record)] == ["filter:fraction=0.25", "target-only"]  # tied: cheaper first
    record.candidates[1].trials[0].signal_gap = 0.04  # beyond two noises of the best: not confirmed beside it
    assert [c.arm for c in search.contenders(record)] == ["target-only"]
    record.candidates[1].trials[0].signal_gap = 0.006
    picks = search.contenders(record)
    first, second = search.confirm_phases(0)
    assert confirm.seed_jobs(picks, 0, 11, baseline=True) == [Job(first, "baseline", 1.0, 11, "evaluation")]
    assert [j.arm for j in confirm.seed_jobs(picks, 0, 11, baseline=False)] == [
        "filter:fraction=0.25", "random-subset:fraction=0.25", "target-only", "random-subset:fraction=0.3333"]
    # two tested together spend half the error each: a difference one pick alone confirms is open for two
    diffs = [1.2, 0.1, 0.9, 0.4]
    alone, both = confirm.sequential(diffs, [5], 1.0), confirm.sequential(diffs, [5], 1.0, tested=2)
    assert [k.alpha for k in both[0]] == pytest.approx([k.alpha / 2 for k in alone[0][:len(both[0])]])
    assert both[0][-1].low < alone[0][len(both[0]) - 1].low
    # the verdict on two confirmed picks: the best, unless a faster one is within the tolerance of it
    acc = metric("accuracy")
    results: dict = {}
    for seed in (1, 2, 3):
        for arm, value, seconds in (("baseline", 0.80, 10.0), ("filter:fraction=0.25", 0.80, 2.0),
                                    ("target-only", 0.85, 3.0)):
            results[len(results)] = Result(Job(8, arm, 1.0, seed, "evaluation"), seconds, {
                "metric": "accuracy", "final": {"accuracy": value + 0.001 * seed * (arm != "baseline")},
                "train_seconds": seconds})
    record.confirmations = [confirm.confirmation(c, [1, 2, 3, 4, 5], results, acc, 1.0, [5], 2) for c in picks]
    assert [c.stopped for c in record.confirmations] == ["within", "within"]
    conclude(record)
    assert record.pick == "target-only"  # +5 points against +0: beyond the tolerance of the faster filter
    assert "beside it, filter:fraction=0.25: +0.20" in record.answer


def test_a_confirmation_stops_once_two_seeds_show_the_pick_is_not_faster() -> None:
    """A close call would take every seed; a pick that took over 0.95 of its baseline's time on each of two seeds cannot
    pay whatever its accuracy, so the seeds stop there."""
    from siftcli.plan.confirm import confirmation
    from siftcli.plan.record import Candidate
    from siftcli.plan.study import Job, Result
    from siftcli.tasks import metric

    def results(times: list[float]) -> dict:
        out = {}
        for k, (seed, t) in enumerate(zip((1, 2), times)):
            for arm, value, seconds in (("baseline", 0.80, 10.0), ("dedup", 0.80 + 0.004 * (-1) ** k, t)):
                out[len(out)] = Result(Job(6 + 2 * k, arm, 1.0, seed, "evaluation"), seconds,
                                       {"metric": "accuracy", "final": {"accuracy": value}, "train_seconds": seconds})
        return out

    pick = Candidate("dedup", "dedup-other", "", None)  # (a family without a random-subset opponent)
    slow = confirmation(pick, [1, 2, 3, 4, 5], results([9.7, 9.9]), metric("accuracy"), 1.0, [5])
    assert slow.stopped == "slower" and len(slow.seeds) == 2 and not slow.within_tolerance
    fast = confirmation(pick, [1, 2, 3, 4, 5], results([9.7, 9.0]), metric("accuracy"), 1.0, [5])
    assert fast.stopped == ""  # one seed under 0.95: the interval decides, another seed is trained


def test_the_sequential_rule_keeps_its_error_rate_where_the_pick_is_exactly_at_the_tolerance() -> None:
    """Simulated paired differences whose true mean is the tolerance's edge (-1 point), normal noise: the looks may
    stop anywhere, and the rule still confirms such a pick in at most 5% of plans (the union bound's promise)."""
    import random

    from siftcli.plan.confirm import sequential

    rng = random.Random(0)
    wrong = 0
    for _ in range(2000):
        diffs = [-1.0 + rng.gauss(0, 1.5) for _ in range(5)]
        wrong += sequential(diffs, [5], 1.0)[1] == "within"
    assert wrong / 2000 <= 0.05
    # two picks at the edge confirmed together, each at half the error: either one confirmed in at most 5% of plans
    either = 0
    for _ in range(2000):
        pair = [[-1.0 + rng.gauss(0, 1.5) for _ in range(5)] for _ in range(2)]
        either += any(sequential(d, [5], 1.0, tested=2)[1] == "within" for d in pair)
    assert either / 2000 <= 0.05


def test_an_inconclusive_pick_whose_seeds_lean_within_the_tolerance_is_the_answer_said_to_be_unconfirmed() -> None:
    """compose: ``target-only`` at +3.50 ± 2.64 over 5 seeds and 0.26 of the time was inconclusive (the confirming
    bound spends its alpha over every look) and the answer was "train on everything"; its 10-seed truth is the regime's
    best. Its seeds' 80% interval lies within the tolerance: favoured, answered with "not confirmed". A confirmed pick
    and the exact teacher cache come before a favoured one; a pick whose interval reaches below the tolerance is not
    favoured."""
    from siftcli.plan.confirm import lean, sequential
    from siftcli.plan.record import Candidate

    compose = [2.8, -1.3, 8.0, -2.9, 10.9]
    looks, stopped = sequential(compose, [5], 1.0)
    assert stopped == "inconclusive" and looks[-1].low < -1.0
    leaning = lean(compose, 1.0)
    assert leaning.says == "favoured" and leaning.low >= -1.0 and leaning.alpha == pytest.approx(0.2)
    assert lean(compose, 1.0, tested=2).low < leaning.low  # two picks at once: a wider interval each
    assert lean([0.5, -2.5, 1.0, -3.0, 0.2], 1.0).says == "open"  # -0.76 ± 0.8: could be beyond the tolerance
    v = Versus("baseline", 3.5, 2.64, 5, (-3.83, 10.83), compose)
    record = PlanRecord("running", "r", "accuracy", 2, 1.0, 5, baseline_seconds=10.0,
                        candidates=[Candidate("target-only", "target-only", "", 0.26)])
    record.confirmations = [Confirmation("target-only", [1, 2, 3, 4, 5], [0.5] * 5, [0.46] * 5, 0.26, 20.0, [v], False,
                                         stopped="inconclusive", lean=leaning)]
    conclude(record)
    assert record.pick == "target-only" and record.pick_evidence == "favoured" and record.pick_versus_baseline == v
    assert "favoured, not confirmed" in record.answer and "--seeds 8" in record.answer and "confirmed after" not in record.answer
    from siftcli.plan.view import plan_html, stopping

    assert "favoured, not confirmed (80% interval -0.55 to +7.55)" in stopping(record.confirmations[0])
    assert "favoured, not confirmed" in plan_html(record)
    # the record says so after a round trip through plan.json (and a record written before it loads)
    saved = dataclasses.asdict(record)
    assert load_record(json.loads(json.dumps(saved))).confirmations[0].favoured
    old = {**saved, "confirmations": [{k: w for k, w in saved["confirmations"][0].items() if k != "lean"}]}
    old.pop("pick_evidence")
    assert not load_record(old).confirmations[0].favoured
    # not leaning: training on everything, as before
    record.confirmations[0].lean = lean([0.5, -2.5, 1.0, -3.0, 0.2], 1.0)
    conclude(record)
    assert record.pick == "baseline" and record.pick_evidence == "" and "inconclusive after 5 seeds" in record.answer
    # a confirmed pick comes first, though the favoured one is faster
    record.confirmations[0].lean = leaning
    sure = Versus("baseline", 0.5, 0.2, 3, (-0.3, 1.3), [0.4, 0.6, 0.5])
    record.candidates.append(Candidate("dedup", "dedup", "", 0.8))
    record.confirmations.append(Confirmation("dedup", [1, 2, 3], [0.5] * 3, [0.5] * 3, 0.8, 9.0, [sure], True,
                                             stopped="within"))
    conclude(record)
    assert record.pick == "dedup" and record.pick_evidence == "confirmed"
    assert "beside it, target-only" in record.answer and "favoured" in record.answer


def test_a_pick_at_the_tolerance_s_edge_is_favoured_in_at_most_a_tenth_of_plans() -> None:
    """Simulated paired differences whose true mean is -1 point (the tolerance's edge): the plans that end inconclusive
    and favoured are at most 10% (the interval's lower side, one-sided 90%), and at most 10% for either of two picks
    confirmed together."""
    import random

    from siftcli.plan.confirm import lean, sequential

    rng = random.Random(1)
    favoured = either = 0
    for _ in range(2000):
        diffs = [-1.0 + rng.gauss(0, 1.5) for _ in range(5)]
        favoured += sequential(diffs, [5], 1.0)[1] == "inconclusive" and lean(diffs, 1.0).says == "favoured"
        pair = [[-1.0 + rng.gauss(0, 1.5) for _ in range(5)] for _ in range(2)]
        either += any(sequential(d, [5], 1.0, tested=2)[1] == "inconclusive" and lean(d, 1.0, tested=2).says == "favoured"
                      for d in pair)
    assert 0.02 < favoured / 2000 <= 0.10 and either / 2000 <= 0.10


def test_more_room_never_screens_fewer_candidates() -> None:
    """The screen's room after rung 2's reserve grows with the room (pretrained-clean: 44 s of room screened with 23
    where 41 would have screened with all 41); the screen keeps at least twice the reserve, the whole reserve is kept
    once the room is three times it, and nothing is kept with no second rung."""
    from siftcli.plan.search import screen_room

    rooms = [i / 4 for i in range(0, 400)]
    kept = [screen_room(r, 21.0) for r in rooms]
    assert all(b >= a for a, b in zip(kept, kept[1:]))
    assert screen_room(41.0, 21.0) == 41.0 and screen_room(44.5, 21.0) == pytest.approx(42.0)
    assert screen_room(63.0, 21.0) == 42.0 and screen_room(90.0, 21.0) == 69.0 and screen_room(30.0, 0.0) == 30.0


def test_the_confirming_bound_is_one_sided() -> None:
    """Only a pick that loses more than the tolerance is an error, so each look spends its whole alpha below: a subset
    5 seeds at +9.2 ± 2.8 points (the relevance regime's ``target-only``) is confirmed, where
    the two-sided interval left it inconclusive."""
    import statistics

    from scipy.stats import t

    from siftcli.plan.confirm import look_alpha, sequential

    diffs = [2.0, 16.0, 4.0, 15.0, 9.0]  # +9.2 ± 2.8
    looks, stopped = sequential(diffs, [5], 1.0)
    assert stopped == "within"
    last = looks[-1]
    se = statistics.stdev(diffs[:last.n]) / last.n ** 0.5
    assert last.low == pytest.approx(statistics.fmean(diffs[:last.n]) - t.ppf(1 - look_alpha(last.n, [5]), last.n - 1) * se)
    two_sided = statistics.fmean(diffs) - t.ppf(1 - look_alpha(5, [5]) / 2, 4) * statistics.stdev(diffs) / 5 ** 0.5
    assert two_sided < -1.0  # what the earlier rule said at its last look: open, so inconclusive


def test_a_family_leaves_the_search_only_beyond_the_tolerance_and_its_noise_and_ties_go_to_the_cheaper() -> None:
    from siftcli.plan.record import Candidate, Trial
    from siftcli.plan.search import SCREEN, dropped, promoted, ranked

    def cand(arm: str, family: str, gap: float, noise: float, ratio: float) -> Candidate:
        t = Trial(arm, SCREEN, 1.0, 0.8, 0.8, ratio, "complete", gap=gap, noise=noise, predicted_ratio=ratio)
        return Candidate(arm, family, "", 0.5, trials=[t])

    record = PlanRecord("running", "r", "accuracy", 2, 1.0, 5, baseline_seconds=100.0, candidates=[
        cand("filter:a", "filter", +2.0, 1.0, 0.30), cand("filter:b", "filter", +2.5, 1.0, 0.55),
        cand("dedup", "dedup", -2.5, 1.0, 0.60),  # 2.5 points worse, but within tolerance + 2 x noise (3.0): kept
        cand("online", "online", -3.5, 1.0, 0.40),  # beyond 3.0: dropped
        cand("train-less", "fewer-epochs", +1.2, 1.0, 0.35),
        cand("slow", "teacher-cache", +3.0, 1.0, 1.10)])  # better, but not faster: never promoted
    by = {c.arm: c for c in record.candidates}
    assert not dropped(by["dedup"].trials[0], 1.0) and dropped(by["online"].trials[0], 1.0)
    # filter's members tie (2.0 and 2.5, within 2 x noise): the cheaper represents the family; train-less ties with it
    # and is slower; dedup is outside the tie, after them
    assert [c.arm for c in ranked(record, SCREEN)] == ["filter:a", "train-less", "dedup"]
    assert [c.arm for c in promoted(record)] == ["filter:a", "train-less"]  # the better half of three, rounded up


def _result(phase: int, arm: str, fidelity: float, value: float, seconds: float = 1.0, seed: int = 0,
            **run: object) -> object:
    from siftcli.plan.study import Job, Result

    return Result(Job(phase, arm, fidelity, seed, "validation"), seconds,
                  {"metric": "accuracy", "final": {"accuracy": value}, "train_seconds": seconds * 0.9, **run})


def test_the_screen_deepens_while_its_baseline_has_not_learned_and_a_short_trial_is_no_evidence() -> None:
    """A from-scratch model answers one class for the first part of its schedule: a rung there ties every candidate
    with the baseline. The screen's baseline is probed deeper (one probe a phase) while it sits at the untrained level
    and the budget keeps half of itself for the candidates; a family that trains fewer steps by design is screened at
    as many steps as the baseline there, and a trial with fewer steps than the baseline had when it first learned is
    too short to tell, never dropped for it."""
    from siftcli.plan import evidence, search
    from siftcli.plan.record import Candidate
    from siftcli.tasks import metric

    acc = metric("accuracy")
    record = PlanRecord("running", "r", "accuracy", 2, 1.0, 5, baseline_seconds=80.0, validation_rows=500)
    untrained = 0.26
    assert not search.learned(0.27, untrained, acc, 500) and search.learned(0.60, untrained, acc, 500)
    results = {0: _result(0, "baseline", 1 / 8, 0.27, 10.0)}
    deeper = search.deepen_jobs(record, results, 0, search.DEEPENING[0], untrained, acc, 10.0)
    assert [(j.arm, j.fidelity) for j in deeper] == [("baseline", 1 / 4)]
    # the next probe and its noise baseline (2 x 20 s) would leave less than a third of the 160 s budget: not taken
    assert search.deepen_jobs(record, results, 0, search.DEEPENING[0], untrained, acc, 70.0) == []
    results[1] = _result(1, "baseline", 1 / 4, 0.61, 20.0)
    assert search.deepen_jobs(record, results, 0, search.DEEPENING[1], untrained, acc, 30.0) == []  # it learned
    assert search.screen_rung(search.probe_values(results, 0), untrained, acc, 500) == 1 / 4
    # the screen at a quarter, where the baseline learned in 20 steps: a filter at a quarter of the pool and a sifted
    # arm keeping two thirds train as many steps as it (their whole schedule; 3/8 of it), training less does not
    results[1] = _result(1, "baseline", 1 / 4, 0.61, 20.0, optimizer_steps=20)
    results[2] = _result(search.SCREENING, "baseline", 1 / 4, 0.63, 20.0, seed=search.NOISE_SEED, optimizer_steps=20)
    record.candidates = [Candidate("filter", "filter", "", 0.25), Candidate("sifted", "online", "", 2 / 3),
                         Candidate("less", "fewer-epochs", "", 0.35)]
    assert [search.trial_fidelity(c, 1 / 4) for c in record.candidates] == [1.0, 0.375, 1 / 4]
    results[3] = _result(search.SCREENING, "filter", 1.0, 0.26, 5.0, optimizer_steps=20)
    results[4] = _result(search.SCREENING, "sifted", 0.375, 0.26, 15.0, optimizer_steps=19)
    results[5] = _result(search.SCREENING, "less", 1 / 4, 0.26, 5.0, optimizer_steps=7)
    record.epochs = 4
    evidence.fill_search(record, [], results, {"untrained": untrained}, 0, acc)
    assert record.screen_fidelity == 1 / 4 and record.promotion_fidelity == 1 / 2  # rung 2: twice the screen
    assert record.probes == [[1 / 8, 0.27], [1 / 4, 0.61]] and record.screen_learned
    matched, sifted, short = (c.trials[0] for c in record.candidates)
    assert (matched.fidelity, matched.rung, matched.steps) == (1.0, 1 / 4, 20)  # held against the rung's baseline
    assert matched.informative and search.dropped(matched, 1.0)  # the steps the baseline learned in, and nothing
    assert sifted.informative and search.dropped(sifted, 1.0)  # 19 of 20 steps: its kept share varies
    assert not short.informative and not search.dropped(short, 1.0)  # 36 points down in 7 steps: no evidence
    assert "dropped" in record.candidates[0].outcome and "too short to tell" in record.candidates[2].outcome
    # a trial with fewer steps that beats the baseline is evidence for it (training less where the schedule over-trains)
    results[5] = _result(search.SCREENING, "less", 1 / 4, 0.70, 5.0, optimizer_steps=7)
    evidence.fill_search(record, [], results, {"untrained": untrained}, 0, acc)
    assert record.candidates[2].trials[0].informative


def test_the_screen_ranks_by_the_validation_loss_and_a_whole_small_experiment_is_not_trained_again() -> None:
    """Accuracy over a few hundred rows moves only when a row crosses the boundary: two families within its noise are
    told apart by the validation loss (the confirmation still decides on accuracy). A subset whose step-matched screen
    trained its whole schedule is held against rung 2's baseline as it is, not trained again."""
    from siftcli.plan import evidence, search
    from siftcli.plan.record import Candidate
    from siftcli.tasks import metric

    acc = metric("accuracy")
    record = PlanRecord("running", "r", "accuracy", 2, 1.0, 5, baseline_seconds=80.0, validation_rows=400)

    def run(value: float, loss: float, steps: int = 10) -> dict:
        return {"final": {"accuracy": value, "loss": loss, "loss_sd": 0.4}, "optimizer_steps": steps}

    results = {0: _result(0, "baseline", 1 / 8, 0.80, 10.0, **run(0.80, 0.50)),
               1: _result(search.SCREENING, "baseline", 1 / 8, 0.80, 10.0, seed=search.NOISE_SEED, **run(0.80, 0.52)),
               2: _result(search.SCREENING, "filter:fraction=0.5", 1 / 4, 0.81, 6.0, **run(0.81, 0.55)),
               3: _result(search.SCREENING, "target-only", 1.0, 0.745, 6.0, **run(0.745, 0.40, 12))}
    record.candidates = [Candidate("filter:fraction=0.5", "filter", "", 0.5), Candidate("target-only", "target-only", "", 0.1)]
    evidence.fill_search(record, [], results, {"untrained": 0.5}, 0, acc)
    f, t = (c.trials[0] for c in record.candidates)
    assert f.gap == pytest.approx(1.0) and t.gap == pytest.approx(-5.5)  # beyond accuracy's noise (2 x 2.45 points)
    assert f.signal_gap == pytest.approx(-0.04) and t.signal_gap == pytest.approx(0.11)  # loss 0.51 at the baselines
    assert t.signal_noise == pytest.approx(0.4 / 20 * math.sqrt(1.5))  # one row's pull on the mean loss, paired
    arms = ["target-only", "filter:fraction=0.5"]
    assert [c.arm for c in search.ranked(record, 1 / 8)] == arms  # by the loss, which accuracy's few rows turn around
    from siftcli.plan.view import search_rows

    shown = {row[0]: row for row in search_rows(record)}
    assert shown["target-only"][6] == "-5.50 ± 2.45 (loss -0.110 ± 0.024)"  # what it was ranked by, beside accuracy
    assert shown["target-only"][2] == "1.00 of its own, 12 steps (vs 0.12)"
    f.signal_gap = t.signal_gap = None  # a record written before the signal: ranked by accuracy
    assert [c.arm for c in search.ranked(record, 1 / 8)] == arms[::-1]
    # rung 2 (a quarter): target-only trained its whole schedule at the screen, so it is held there as it is, once
    # rung 2's baseline exists (before, it has no trial there: none to drop it on)
    assert [len(c.trials) for c in record.candidates] == [1, 1]
    assert search.promotion_job(record.candidates[1], record, 0) is None
    assert search.promotion_job(record.candidates[0], record, 0).fidelity == 1 / 2  # twice the steps: half of its own
    results[4] = _result(search.PROMOTION_BASELINE, "baseline", 1 / 4, 0.84, 20.0, **run(0.84, 0.45, 20))
    evidence.fill_search(record, [], results, {"untrained": 0.5}, 0, acc)
    again = record.candidates[1].trials[1]
    assert (again.rung, again.fidelity, again.metric) == (1 / 4, 1.0, 0.745) and again.gap == pytest.approx(-9.5)
    assert again.informative and again.steps == 12  # more steps than the 10 the baseline first learned in


def test_the_search_falls_back_to_the_screens_families_and_an_exact_candidate_needs_no_confirmation() -> None:
    from siftcli.plan import search
    from siftcli.plan.record import Candidate, Trial

    def cand(arm: str, family: str, fidelity: float, gap: float, ratio: float, exact: bool = False) -> Candidate:
        t = Trial(arm, fidelity, 1.0, 0.8, 0.8, ratio, "complete", gap=gap, noise=1.0, predicted_ratio=ratio)
        return Candidate(arm, family, "", 1.0, trials=[t], exact=exact)

    # the teacher's forwards were a third of the baseline's first job: caching saves them on 3 of 4 epochs
    first = {"train_seconds": 9.0, "phases": {"teacher": 3.0}, "teacher": {"cached": False}}
    assert costs.teacher_share(first) == pytest.approx(1 / 3)
    assert costs.teacher_share({**first, "teacher": {"cached": True}}) is None and costs.teacher_share({"train_seconds": 9.0}) is None
    saving = costs.teacher_saving(1 / 3, 4)
    assert saving == pytest.approx(0.25)
    cache = Candidate("cache", "teacher-cache", "", 1.0, extra_cost=-saving, exact=True)  # never trained: priced
    record = PlanRecord("running", "r", "accuracy", 2, 1.0, 5, baseline_seconds=100.0, promotion_fidelity=1 / 3,
                        candidates=[cand("train-less", "fewer-epochs", 1 / 3, -40.0, 0.35),  # dropped at rung 2
                                    cand("online", "online", 1 / 8, +0.5, 0.60), cache])
    assert search.exact_pick(record) is None  # the saving not measured on the baseline yet: a guess is no answer
    record.teacher_share = 1 / 3
    assert search.exact_pick(record) is cache and costs.full_time(cache, 100.0) == pytest.approx(75.0)
    assert [c.arm for c in search.contenders(record)] == ["online"]  # rung 2 left none: the screen's best of the families it did not try
    record.candidates[1].trials[0].predicted_ratio = 0.8  # slower than the exact cache (0.75, the baseline's results):
    assert search.contenders(record) == []  # no confirmation can make it the better answer
    record.candidates[1].trials[0].predicted_ratio = 0.6
    record.candidates[1].trials[0].informative = False  # too short to tell: no evidence, so nothing to confirm
    assert search.contenders(record) == [] and search.promoted(record) == []  # (one family left: no rung 2 either)
    conclude(record)  # no confirmation (or a failed one): the exact candidate is the answer, with nothing to confirm
    assert record.pick == "cache" and record.pick_family == "teacher-cache" and record.pick_time_ratio == pytest.approx(0.75)
    assert "nothing to confirm" in record.answer and record.pick_versus_baseline is None
    # a cached teacher runs on every step inside the first epoch only: a rung at half an epoch is priced so
    run = {"train_seconds": 8.0, "phases": {"teacher": 3.0}, "teacher": {"cached": True}}
    assert costs.full_seconds(run, 1 / 8, 4) == pytest.approx((8 - 3) * 8 + 3 * 2)  # (one epoch of the teacher)
    assert costs.full_seconds({**run, "teacher": {"cached": False}}, 1 / 8, 4) == pytest.approx(64)
    # scoring from memory scores every sample in its first epoch, then refreshes a share of them in each later one
    scored = {"train_seconds": 10.0, "phases": {"scoring": 2.0}}
    assert costs.full_seconds(scored, 1 / 2, 4, 0.25) == pytest.approx(8 * 2 + 2 / 1.25 * (1 + 3 * 0.25))
    memory = Candidate("sifted:m", "online", "", 0.5, first_epoch_cost=0.3)
    assert costs.predicted_cost(memory, 100.0, 1 / 8, epochs=4) == pytest.approx(100 * (0.5 / 8 + 0.3 / 8))
    assert costs.predicted_cost(memory, 100.0, 1 / 2, epochs=4) == pytest.approx(100 * (0.5 / 2 + 0.3 / 4))


def test_every_family_that_applies_is_screened_with_the_default_settings(tmp_path: Path, monkeypatch) -> None:
    """The tiny recipe with a holdout and a target group, ``siftcli plan`` with its defaults (the budget's floor in
    seconds raised): every candidate of every family has a screened number; predicted costs priced the references;
    the record says how the confirmation stopped. (The tiny model on 30 validation rows never leaves the untrained
    level by the rows' own noise, so the screen would deepen: here the first rung is taken as one that learned, as on
    a recipe whose model learns early; the deepening has its own test.)"""
    from siftcli.plan import costs, search

    monkeypatch.setattr(search, "learned", lambda *a: True)
    # the budget's floor in seconds (the tiny recipe's run takes about one, so --budget 2 is the floor): raised so that
    # every job fits on a busy machine too; how far a budget reaches is the machine's speed, measured in benchmarks
    monkeypatch.setattr(costs, "MIN_BUDGET_SECONDS", 600.0)
    data = tmp_path / "text.csv"
    data.write_text("\n".join(["text,label,domain"] + [f"{t},{y},{'a' if i % 3 else 'b'}"
                                                         for i, (t, y) in enumerate(make_text_rows(240))]) + "\n")
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(tiny_recipe_dict(data, **{
        "sift.reference": {"kind": "ngram", "holdout_fraction": 0.15}, "data.group_column": "domain",
        "data.target_group": "a"})))
    out = runner.invoke(app, ["plan", str(path), "-o", str(tmp_path / "p"), "--json"])
    assert out.exit_code == 0, out.output
    record = json.loads((tmp_path / "p" / "plan.json").read_text())
    families = {c["family"] for c in record["candidates"]}
    assert {"fewer-epochs", "filter", "dedup", "dedup+filter", "online", "target-only"} <= families
    assert all(c["trials"] for c in record["candidates"]), [c["outcome"] for c in record["candidates"]]
    assert all(t["gap"] is not None and t["noise"] > 0 for c in record["candidates"] for t in c["trials"])
    target = next(c for c in record["candidates"] if c["family"] == "target-only")
    assert target["pool_fraction"] == pytest.approx(2 / 3, abs=0.1)  # counted before the screen
    assert record["seeds"] == 5 and record["budget"] == 2 and record["horizons"] == [5]
    for c in record["confirmations"]:
        assert c["stopped"] in ("within", "worse", "inconclusive", "failed") and len(c["seeds"]) <= 5
        assert [k["n"] for k in c["looks"]] == list(range(2, len(c["looks"]) + 2))


def test_an_inconclusive_confirmation_is_extended_by_a_resumed_plan_with_more_seeds(tmp_path: Path, monkeypatch) -> None:
    from siftcli.plan import confirm, search
    from siftcli.plan.record import Look

    monkeypatch.setattr(search, "learned", lambda *a: True)  # the first rung said something (the tiny model's cannot)

    monkeypatch.setattr(confirm, "look", lambda diffs, alpha, tol, *futility: Look(len(diffs), alpha, 0.0, -5.0, 5.0, "open"))
    monkeypatch.setattr(confirm, "lean", lambda diffs, tol, *rest: Look(len(diffs), 0.2, 0.0, -5.0, 5.0, "open"))  # not favoured
    # the pick's seconds do not decide here: on the tiny recipe a dedup that keeps nearly every row takes about its
    # baseline's time, and two seeds over 0.95 of it would stop the seeds as "slower" (its own test) on a busy machine
    monkeypatch.setattr(confirm, "FASTER", math.inf)
    recipe = load_recipe(_recipe(tmp_path))
    lines: list[dict] = []
    _, first = run_plan(recipe, PlanSettings(budget=30, tolerance=100, seeds=2), output=str(tmp_path / "plan"),
                        on_event=lambda k, d: lines.append(d) if k == "plan" else None)
    # the progress lines and the record tell of one budget: the search's, in seconds as it was decided; the
    # confirmation's lines none (a plan once said "-826 s left in the budget" where its record said 1,684 of 1,733)
    budget = first.search_budget_seconds
    searched = [d["left"] for d in lines if d["phase"] == "search" and d["left"] is not None]
    assert budget and searched and all(left <= budget for left in searched)
    assert all(d["left"] is None for d in lines if d["phase"] == "confirm")
    assert first.confirmations and first.confirmations[0].stopped == "inconclusive" and first.pick == "baseline"
    assert "inconclusive after 2 seeds" in first.answer
    with pytest.raises(SiftcliError, match="confirms up to 2 seeds already"):
        run_plan(None, resume=str(tmp_path / "plan"), extend_seeds=2)
    trained: list[str] = []
    _, more = run_plan(None, resume=str(tmp_path / "plan"), extend_seeds=3,
                       on_event=lambda k, d: trained.append(d["arm"]) if k == "plan" and d["phase"] == "confirm" else None)
    conf = more.confirmations[0]
    assert more.horizons == [2, 3] and len(conf.seeds) == 3 and conf.stopped == "inconclusive"
    assert conf.looks[-1].alpha == pytest.approx(0.005)  # the reserve's first half, on the one extra look
    assert trained and all(a in ("baseline", conf.arm) or a.startswith("random-subset") for a in trained)
    assert len(trained) <= 3  # only the third seed trained: the first two were kept


def test_a_plan_searches_confirms_writes_a_runnable_recipe_and_resumes(tmp_path: Path, monkeypatch) -> None:
    from siftcli.plan import search

    monkeypatch.setattr(search, "learned", lambda *a: True)  # the first rung said something (the tiny model's cannot)
    recipe = load_recipe(_recipe(tmp_path))
    seen: list[str] = []

    def stop_after_a_few(kind: str, data: dict) -> None:  # stopped as the second candidate starts training
        if kind == "plan" and data["phase"] == "search" and data["arm"] != "baseline":
            seen.append(data["arm"])
            if len(seen) == 2:
                raise KeyboardInterrupt

    with pytest.raises(RunInterrupted):
        run_plan(recipe, PlanSettings(budget=30, tolerance=100, seeds=2), output=str(tmp_path / "plan"), on_event=stop_after_a_few)
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
    # tolerance 100 points: the search hands its best to the confirmation, which trains the fresh seeds in order and
    # says why it stopped (two seeds of a model this small may leave even 100 points undecided)
    assert record.confirmations
    conf = record.confirmations[0]
    assert conf.seeds == [recipe.seed + 1, recipe.seed + 2] and conf.versus[0].opponent == "baseline"
    assert conf.versus[0].n == 2 and conf.stopped in ("within", "inconclusive") and conf.looks[-1].n == 2
    assert (record.pick != "baseline") == (conf.stopped == "within" and conf.time_ratio <= search.FASTER)
    assert record.payback_runs is not None or record.pick == "baseline"
    assert not list(folder.rglob("checkpoint.pt"))  # a finished job keeps its metrics, not twenty models' weights
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
    (["--tolerance", "-1"], "--tolerance -1.0: expected metric points from 0 to 100"),
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
    old = tmp_path / "old-plan"  # a plan folder from before the search probed its rung: its study's phases differ
    old.mkdir()
    saved = dataclasses.asdict(PlanRecord("interrupted", "r", "accuracy", 2, 1.0, 5, study="plan"))
    del saved["screen_fidelity"]
    (old / "plan.json").write_text(json.dumps(saved))
    out = runner.invoke(app, ["plan", "--resume", str(old)])
    assert out.exit_code == 2 and "earlier siftcli whose search ran other phases" in out.output
    assert len(out.output.strip().splitlines()) == 1


def test_an_interrupted_training_inside_a_trial_stops_the_plan_not_just_the_trial(tmp_path: Path, monkeypatch) -> None:
    """train() turns Ctrl-C or SIGTERM into RunInterrupted after saving; a trial must not record that as a failed
    candidate and go on."""
    from siftcli.plan import trials as plan_trials

    recipe = load_recipe(_recipe(tmp_path))
    real = plan_trials.run_one

    def interrupted(ctx, arm, folder, on_event=None):  # noqa: ANN001, ANN202
        if arm != "baseline":
            raise RunInterrupted(str(folder), signal="SIGTERM")
        return real(ctx, arm, folder, on_event)

    monkeypatch.setattr(plan_trials, "run_one", interrupted)
    with pytest.raises(RunInterrupted) as exc:
        run_plan(recipe, PlanSettings(budget=100, seeds=2), output=str(tmp_path / "plan"))  # room for a candidate on a
    assert "siftcli plan --resume" in exc.value.resume_command and exc.value.signal == "SIGTERM"  # busy machine
    saved = json.loads((tmp_path / "plan" / "plan.json").read_text())
    assert saved["status"] == "interrupted" and not any(t["status"] == "failed" for c in saved["candidates"] for t in c["trials"])


def test_a_full_disk_in_a_trial_stops_the_plan_resumable_not_the_candidate(tmp_path: Path, monkeypatch) -> None:
    """A full disk is the machine's fault: a trial that meets it is no evidence against its strategy. The plan stops
    (exit 1, as a disk error is elsewhere), plan.json says interrupted, and the printed command continues it."""
    import errno

    from siftcli.plan import trials as plan_trials

    real, full = plan_trials.run_one, {"once": True}

    def no_space(ctx, arm, folder, on_event=None):  # noqa: ANN001, ANN202
        if arm != "baseline" and full["once"]:
            full["once"] = False
            raise OSError(errno.ENOSPC, "No space left on device", str(folder / "log.jsonl"))
        return real(ctx, arm, folder, on_event)

    monkeypatch.setattr(plan_trials, "run_one", no_space)
    folder = tmp_path / "plan"
    out = runner.invoke(app, ["plan", str(_recipe(tmp_path)), "-o", str(folder), "--budget", "100", "--seeds", "2"])
    assert out.exit_code == 1 and "No space left on device" in out.output, out.output
    assert f"continue with: siftcli plan --resume {folder}" in out.output and "Traceback" not in out.output
    saved = json.loads((folder / "plan.json").read_text())
    assert saved["status"] == "interrupted" and not any(t["status"] == "failed" for c in saved["candidates"]
                                                        for t in c["trials"])
    out = runner.invoke(app, ["plan", "--resume", str(folder)])
    assert out.exit_code == 0, out.output
    assert json.loads((folder / "plan.json").read_text())["status"] == "completed"


def test_a_seeds_contexts_share_one_workload_and_start_from_its_untrained_weights(tmp_path: Path) -> None:
    """Every fidelity of the search is the same seed: one workload, built once; a context made after a run trained the
    shared model still starts from the seed's initial weights."""
    import torch

    from siftcli.plan.trials import Trials

    recipe = load_recipe(_recipe(tmp_path))
    first = build_workload(recipe)
    trials = Trials(recipe, {"validation": [0, 1, 2], "evaluation": [3, 4]}, {recipe.seed: first})
    full = trials.context(recipe.seed, "validation", 1.0)
    with torch.no_grad():
        for p in full.workload.model.parameters():
            p.add_(1.0)  # what a training run leaves in the shared model
    low = trials.context(recipe.seed, "validation", 1 / 3)
    assert low.workload.model is first.model and len(low.workload.eval_data) == 3 and low.recipe.epochs < recipe.epochs
    assert low._references is full._references  # a seed's references are built once for all its fidelities
    assert len(trials.context(recipe.seed, "evaluation", 1.0).workload.eval_data) == 2
    assert all(torch.equal(low.initial[k], full.initial[k]) for k in full.initial)
    assert not torch.equal(low.initial[next(iter(low.initial))], first.model.state_dict()[next(iter(low.initial))])


def test_a_wsd_recipes_train_less_jobs_train_their_decays_from_the_baselines_forks(tmp_path: Path) -> None:
    """Under ``optim.schedule: wsd`` a train-less job after its baseline, in the same process, starts from the
    baseline's checkpoint at its fork point (the same run, exactly: tests/test_train.py); the fork checkpoints go once
    the plan needs no more runs."""
    from siftcli.plan.search import CONFIRMING
    from siftcli.plan.study import Job
    from siftcli.plan.trials import Trials, drop_forks, job_folder

    recipe = load_recipe(_recipe(tmp_path, **{"optim.schedule": "wsd"}))
    trials = Trials(recipe, {"validation": [0, 1, 2], "evaluation": [3, 4, 5]}, {recipe.seed: build_workload(recipe)})
    seed = recipe.seed + 1
    base = trials.run(Job(CONFIRMING, "baseline", 1.0, seed, "evaluation"), tmp_path / "plan", None, None)
    assert base.run is not None and list((tmp_path / "plan").glob("**/forks/step*/checkpoint.pt"))
    less = Job(CONFIRMING + 1, "train-less:fraction=0.5", 1.0, seed, "evaluation")
    out = trials.run(less, tmp_path / "plan", base.run, None)
    assert out.run is not None and out.run["optimizer_steps"] == round(0.5 * base.run["optimizer_steps"])
    assert "forked_from" in json.loads((job_folder(tmp_path / "plan", less) / "metrics.json").read_text())
    drop_forks(tmp_path / "plan")
    assert not list((tmp_path / "plan").glob("**/forks"))


# -- one study, many processes and machines -------------------------------------------------------------------------
def _trials(storage: str, study: str) -> list:
    import optuna

    return optuna.load_study(study_name=study, storage=storage).get_trials(deepcopy=False)


def test_a_second_machine_finishes_what_an_interrupted_one_left_and_nothing_trains_twice(tmp_path: Path) -> None:
    """Machine A stops after a few jobs (its running job goes back to the queue); machine B, on the same storage and
    study, trains only what is left; A resumed then trains nothing and reaches B's decision."""
    recipe = load_recipe(_recipe(tmp_path))
    url, study = f"sqlite:///{tmp_path / 'plan.db'}", "shared"
    trained: dict[str, list[str]] = {"a": [], "b": [], "a2": []}

    def counting(name: str, stop_after: int | None = None):  # noqa: ANN202
        def on_event(kind: str, data: dict) -> None:
            if kind == "plan" and data["phase"] in ("search", "confirm"):
                trained[name].append(data["arm"])
                if stop_after is not None and len(trained[name]) == stop_after:
                    raise KeyboardInterrupt
        return on_event

    common = PlanSettings(budget=30, tolerance=100, seeds=2, storage=url, study=study)
    with pytest.raises(RunInterrupted):
        run_plan(recipe, common, output=str(tmp_path / "a"), on_event=counting("a", 4))
    from siftcli.studies import INTERRUPTED

    interrupted = [t for t in _trials(url, study) if t.user_attrs.get(INTERRUPTED)]
    assert len(interrupted) == 1  # the job A was training when it stopped, given back

    _, b = run_plan(recipe, common, output=str(tmp_path / "b"), on_event=counting("b"))
    trials = [t for t in _trials(url, study) if t.state.name == "COMPLETE"]
    jobs = [t.params["job"] for t in trials]
    assert len(jobs) == len(set(jobs))  # every job trained once
    owners = {t.user_attrs["siftcli_owner"].rsplit(":", 1)[-1] for t in trials}
    assert owners == {str((tmp_path / "a").resolve()), str((tmp_path / "b").resolve())}
    assert len(trained["b"]) == len(jobs) - 3  # A finished 3 jobs; B trained the rest, A's interrupted one included

    folder, a = run_plan(None, resume=str(tmp_path / "a"), on_event=counting("a2"))
    assert trained["a2"] == [] and a.status == b.status == "completed"
    assert (a.pick, a.answer, a.search_seconds) == (b.pick, b.answer, b.search_seconds)
    assert [c.outcome for c in a.candidates] == [c.outcome for c in b.candidates]


def test_a_machine_joining_with_other_settings_is_refused_in_one_line(tmp_path: Path) -> None:
    path = _recipe(tmp_path)
    url = f"sqlite:///{tmp_path / 'plan.db'}"
    runner.invoke(app, ["plan", str(path), "--storage", url, "--study", "s", "--budget", "30", "--tolerance", "100",
                        "--seeds", "2", "-o", str(tmp_path / "a"), "-q"])
    out = runner.invoke(app, ["plan", str(path), "--storage", url, "--study", "s", "--budget", "5", "--seeds", "2",
                              "-o", str(tmp_path / "b"), "-q"])
    assert out.exit_code == 2 and "started with other settings (budget, tolerance)" in out.output, out.output
    (tmp_path / "other.yaml").write_text(path.read_text().replace("epochs: 2", "epochs: 3"))
    out = runner.invoke(app, ["plan", str(tmp_path / "other.yaml"), "--storage", url, "--study", "s", "--budget", "30",
                              "--tolerance", "100", "--seeds", "2", "-o", str(tmp_path / "c"), "-q"])
    assert out.exit_code == 2 and "started with another recipe" in out.output, out.output


def test_a_job_whose_machine_fell_silent_is_queued_again_for_another(tmp_path: Path) -> None:
    import time

    from siftcli.plan.study import Job as PlanJob
    from siftcli.plan.study import PlanStudy, Result
    from siftcli.studies import ALIVE

    url = f"sqlite:///{tmp_path / 'plan.db'}"
    a = PlanStudy(url, tmp_path / "a", "s", higher=True)
    a.queue_phase(0, lambda: ([PlanJob(0, "baseline", 1.0, 0, "validation"), PlanJob(0, "baseline", 0.5, 0, "validation")],
                              {}), lambda: None)
    trial, index = a.take()
    a.study._storage.set_trial_user_attr(trial._trial_id, ALIVE, time.time() - 3600)  # its machine died an hour ago
    b = PlanStudy(url, tmp_path / "b", "s", higher=True)
    b.recover(resumed=False)
    taken = [b.take(), b.take()]
    assert sorted(i for _, i in taken) == [0, 1] and b.take() is None  # the dead machine's job and the other one
    for t, i in taken:
        b.finish(t, Result(b.jobs()[i], 1.0, {"final": {}}), 0.5)
    done, pending = b.results()
    assert sorted(done) == [0, 1] and pending == 0


@pytest.mark.parametrize("args,expected", [
    (["--workers", "0"], "--workers 0: expected 1 to 64"),
    (["--study", "x"], "--study names a study in a shared --storage; give --storage too"),
    (["--storage", "sqlite:///plan.db", "--study", " "], "--study: expected a name shared by every machine of the plan"),
    (["--storage", "sqlite:///:memory:"], "an in-memory database lives in one process"),
    (["--storage", "nonsense"], "expected an Optuna storage URL"),
])
def test_bad_sharing_options_are_one_line(tmp_path: Path, args: list[str], expected: str) -> None:
    out = runner.invoke(app, ["plan", str(_recipe(tmp_path)), "-o", str(tmp_path / "p"), *args])
    assert out.exit_code == 2 and expected in out.output and "Traceback" not in out.output, out.output
    assert not (tmp_path / "p").exists()


@pytest.mark.slow
def test_workers_on_one_machine_share_the_jobs(tmp_path: Path) -> None:
    """``--workers 2``: a second process takes jobs from the plan's study; every job trains once, the answer is written."""
    path = _recipe(tmp_path, **{"epochs": 40})
    out = runner.invoke(app, ["plan", str(path), "--workers", "2", "--budget", "30", "--tolerance", "100", "--seeds", "2",
                              "-o", str(tmp_path / "p"), "--json"])
    assert out.exit_code == 0, out.output
    from optuna.storages.journal import JournalFileBackend, JournalStorage

    storage = JournalStorage(JournalFileBackend(str(tmp_path / "p" / "optuna.journal")))
    done = [t for t in _trials(storage, "siftcli-plan") if t.state.name == "COMPLETE"]
    assert len({t.params["job"] for t in done}) == len(done)
    assert len({t.user_attrs["process"] for t in done}) == 2  # both processes trained
    record = json.loads((tmp_path / "p" / "plan.json").read_text())
    assert record["status"] == "completed" and record["workers"] == 2 and (tmp_path / "p" / "plan.yaml").exists()


@pytest.mark.slow
def test_two_machines_started_together_on_postgresql_share_one_plan(postgres_url: str, tmp_path: Path) -> None:
    """Two plan commands at once on one PostgreSQL study: each job trains on one of them, both write the same answer."""
    import os
    import subprocess
    import sys

    path = _recipe(tmp_path, **{"epochs": 6})
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    procs = [subprocess.Popen([sys.executable, "-m", "siftcli", "plan", str(path), "--storage", postgres_url, "--study",
                               "plan-together", "--budget", "30", "--tolerance", "100", "--seeds", "2",
                               "-o", str(tmp_path / name), "-q", "--json"], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for name in ("m1", "m2")]
    outs = [p.communicate(timeout=600) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1][-2000:] for o in outs]
    records = [json.loads(o[0]) for o in outs]
    assert records[0]["answer"] == records[1]["answer"] and records[0]["pick"] == records[1]["pick"]
    done = [t for t in _trials(postgres_url, "plan-together") if t.state.name == "COMPLETE"]
    assert len({t.params["job"] for t in done}) == len(done)


def test_a_subsets_time_is_its_share_of_the_baselines_not_one_short_jobs_seconds() -> None:
    """A strategy that trains a third of the pool on the same schedule costs a third of the baseline's training plus
    its measured work before training, whatever its screen job measured on a busy machine (once 1.45 of the
    baseline's, and the best strategy of the regime was stopped as slower); online sifting's cost is measured."""
    from siftcli.plan.record import Candidate, Trial
    from siftcli.plan.search import SCREEN, full_time, ranked

    def cand(arm: str, family: str, pool: float, ratio: float, extra: float = 0.0) -> Candidate:
        t = Trial(arm, SCREEN, 1.0, 0.8, 0.7, ratio, "complete", gap=+6.9, noise=1.0, predicted_ratio=ratio)
        return Candidate(arm, family, "", pool, trials=[t], extra_cost=extra, fixed_cost=0.02)

    target = cand("target-only", "target-only", 1 / 3, 1.45)
    online = cand("sifted:m", "online", 0.5, 1.45, extra=0.05)
    assert full_time(target, 100.0) == pytest.approx(100 * (1 / 3 + 0.02))
    assert full_time(online, 100.0) == pytest.approx(145.0)  # measured: its scoring is not known from structure
    record = PlanRecord("running", "r", "accuracy", 2, 1.0, 5, baseline_seconds=100.0, candidates=[target, online])
    assert [c.arm for c in ranked(record, SCREEN)] == ["target-only"]  # the slow measurement no longer stops it


def test_a_job_slowed_three_times_on_a_busy_machine_flips_no_faster_or_slower_call() -> None:
    """The time model prices every candidate from structure: a subset by its share of the baseline's steps, online
    sifting by the rows it kept and scored, a scoring forward priced against a training row inside its own job. A CPU
    hog that slows one candidate's whole job threefold moves neither; its seconds alone, scaled up, would have called
    the better online candidate slower than the baseline."""
    from siftcli.plan import evidence, search
    from siftcli.plan.costs import full_seconds, full_time
    from siftcli.plan.record import Candidate
    from siftcli.tasks import metric

    acc = metric("accuracy")

    def run(seconds: float, trained: int, raw: int, scored: int, scoring: float, slow: float = 1.0) -> dict:
        train = seconds * slow
        return {"final": {"accuracy": 0.8, "loss": 0.5, "loss_sd": 0.4}, "optimizer_steps": 10,
                "train_seconds": train, "samples_trained": trained, "raw_samples": raw, "samples_scored": scored,
                "phases": {"scoring": scoring * slow, "forward_backward": train - scoring * slow}}

    def calls(slow: float) -> list[bool]:
        results = {0: _result(0, "baseline", 1 / 8, 0.8, 10.0, **run(9.0, 320, 320, 0, 0.0)),
                   1: _result(search.SCREENING, "baseline", 1 / 8, 0.8, 10.0, seed=search.NOISE_SEED,
                              **run(9.0, 320, 320, 0, 0.0)),
                   2: _result(search.SCREENING, "sifted:a", 1 / 4, 0.8, 13.0 * slow, **run(12.0, 320, 640, 640, 3.0, slow)),
                   3: _result(search.SCREENING, "sifted:b", 1 / 8 / 0.9, 0.8, 12.0, **run(11.0, 320, 355, 355, 1.6)),
                   4: _result(search.SCREENING, "target-only", 3 / 8, 0.8, 10.0 * slow, **run(9.0, 320, 320, 0, 0.0, slow))}
        record = PlanRecord("running", "r", "accuracy", 2, 1.0, 5, validation_rows=400, epochs=4,
                            candidates=[Candidate("sifted:a", "online", "", 0.5), Candidate("sifted:b", "online", "", 0.9),
                                        Candidate("target-only", "target-only", "", 1 / 3)])
        evidence.fill_search(record, [], results, {"untrained": 0.5}, 0, acc)
        unit = record.baseline_seconds
        assert unit == pytest.approx(10.0 + 9.0 * 7)  # the screen's baseline at an eighth, its training scaled up
        return [full_time(c, unit) <= search.FASTER * unit for c in record.candidates]

    assert calls(1.0) == [True, False, True]  # keeps half and scores all (+0.17): faster; keeps 0.9: not
    assert calls(3.0) == [True, False, True]  # the same calls with the first and the third job slowed threefold
    slowed = run(12.0, 320, 640, 640, 3.0, 3.0)  # what the job's own seconds, scaled up, would have said
    assert full_seconds(slowed, 1 / 4, 4) * (1 / 8) / 9.0 > search.FASTER


def test_the_search_stops_training_candidates_once_its_budget_is_spent(tmp_path: Path, monkeypatch) -> None:
    """Jobs run over their predictions on a busy machine: once the search has spent 10% beyond its budget it trains no
    more candidates (baselines still train: the rungs need them), and those it did not reach say so."""
    from siftcli.plan import search
    from siftcli.plan import trials as plan_trials

    real, seen = plan_trials.Trials.run, []

    def run(self, job, root, baseline, on_event):  # noqa: ANN001, ANN202
        result = real(self, job, root, baseline, on_event)
        seen.append((job.arm, job.split))
        if [a for a, split in seen if a != "baseline" and split == "validation"] == [job.arm]:
            return dataclasses.replace(result, seconds=result.seconds + 10_000)  # the first candidate ran far over
        return result

    monkeypatch.setattr(plan_trials.Trials, "run", run)
    _, record = run_plan(load_recipe(_recipe(tmp_path)), PlanSettings(budget=30, seeds=2), output=str(tmp_path / "p"))
    assert len([a for a, split in seen if a != "baseline" and split == "validation"]) == 1
    skipped = [c for c in record.candidates if c.outcome.startswith("over budget: not run: the search's budget would be spent")]
    assert skipped and all(t.status == "skipped" for c in skipped for t in c.trials)
    assert record.search_seconds > search.BUDGET_SLACK * record.search_budget_seconds  # the one job that ran over


def test_no_search_job_is_trained_whose_prediction_would_take_the_search_past_its_slack(tmp_path: Path,
                                                                                          monkeypatch) -> None:
    """Every baseline job takes 1 s and every candidate's 3 s, about three times what the plan predicts for it (a busy
    machine the first probe did not see): the guard adds each job's prediction, scaled by the most a finished job ran
    over its own, to what was spent, so the search ends within 10% of its budget (1.003 at most in 3 runs), where
    checking only what was spent before a job ended it at 1.104 to 1.304 and the mean of the jobs' over-runs at up to
    1.104; the candidates it did not reach say so."""
    from siftcli.plan import search
    from siftcli.plan import trials as plan_trials

    real, seen = plan_trials.Trials.run, []

    def run(self, job, root, baseline, on_event):  # noqa: ANN001, ANN202
        result = real(self, job, root, baseline, on_event)
        seen.append(job)
        if job.split == "validation":
            return dataclasses.replace(result, seconds=1.0 if job.arm == "baseline" else 3.0)
        return result

    monkeypatch.setattr(plan_trials.Trials, "run", run)
    _, record = run_plan(load_recipe(_recipe(tmp_path)), PlanSettings(budget=4, seeds=2), output=str(tmp_path / "p"))
    assert record.search_budget_seconds == costs.MIN_BUDGET_SECONDS  # a tiny recipe: the budget's floor, 10 s
    assert record.search_seconds <= search.BUDGET_SLACK * record.search_budget_seconds
    trained = [j for j in seen if j.arm != "baseline" and j.split == "validation"]
    skipped = [c for c in record.candidates if "would be spent" in c.outcome]
    assert trained and skipped  # some ran, the rest are listed as not reached
    assert all(t.status == "skipped" for c in skipped for t in c.trials)


def test_a_candidates_prediction_is_scaled_by_the_most_a_finished_job_ran_over_its_own() -> None:
    """The guard's prediction: the plan's own times the most a finished job ran over its own (the drift, never below
    1: a fast machine does not lend the budget seconds); a candidate trained at a lower rung from that trial alone
    (measured on the machine as it is)."""
    from siftcli.plan import search

    record = PlanRecord("running", "r", "accuracy", 2, 1.0, 5, validation_rows=400, epochs=1, baseline_seconds=80.0,
                        candidates=[Candidate("target-only", "target-only", "", 0.5)])
    first = _result(0, "baseline", 1 / 8, 0.8, 10.0, train_seconds=10.0)
    assert search.drift(record, {0: first}) == 1.0
    slow = _result(search.SCREENING, "baseline", 1 / 8, 0.8, 15.0, seed=search.NOISE_SEED, train_seconds=15.0)
    assert search.drift(record, {0: first, 1: slow}) == pytest.approx(1.5)  # the most any job ran over
    job = search.Job(search.SCREENING, "target-only", 1 / 4, 0, "validation")
    assert search.job_prediction(record, {0: first, 1: slow}, job) == pytest.approx(80 * 0.25 * 0.5 * 1.5)
    record.candidates[0].trials = [Trial("target-only", 1 / 4, 6.0, 0.8, 0.8, 0.6, "complete")]
    rung2 = search.Job(search.PROMOTING, "target-only", 1 / 2, 0, "validation")
    assert search.job_prediction(record, {0: first, 1: slow}, rung2) == pytest.approx(12.0)
