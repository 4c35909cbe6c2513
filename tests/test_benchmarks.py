"""The benchmark harness: entries, its report and section writer, and a driver end to end on a tiny model (speed numbers
are never asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _variants(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "benchmarks", "variants", *args],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)


def test_variants_trains_every_variant_and_short_baseline_against_one_baseline(tiny_recipe, tmp_path: Path) -> None:
    out = tmp_path / "v"
    proc = _variants(str(tiny_recipe()), "--seeds", "2", "--variant", "b2=sift.beta=2,sift.mode=calibrated",
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
    (["--seeds", "0"], "--seeds must be at least 1, got 0"),
    (["--short", "1.5"], "--short 1.5: expected a fraction"),
])
def test_variants_bad_input_is_one_line_and_exit_2(tiny_recipe, tmp_path: Path, args: list[str], expected: str) -> None:
    proc = _variants(str(tiny_recipe()), *args, "-o", str(tmp_path / "v"))
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().startswith("variants: error:") and expected in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "v").exists(), "bad input must not leave a run folder"


def _result(diffs: list[float], share: float = 0.5) -> dict:
    def run(arm: str, acc: float, seconds: float, **extra) -> dict:  # noqa: ANN003
        return {"arm": arm, "metric": "accuracy", "final": {"accuracy": acc}, "train_seconds": seconds, "samples_trained": 10,
                "raw_samples": 40, "groups": {"mr": {"share_of_kept": share}}, **extra}

    runs = [{"baseline": run("baseline", 0.70, 100.0), "sifted": run("sifted", 0.70 + d / 100, 30.0,
             reference={"paid_seconds": 0.0, "build_seconds": 15.0, "cached": True}, keep={"achieved": 0.25}),
             "equal-time": run("equal-time", 0.70, 45.0)} for d in diffs]
    return {"entry": "t", "recipe": "r.yaml", "overrides": [], "arms": list(runs[0]), "subjects": ["sifted"],
            "seeds": list(range(len(diffs))),
            "runs": runs, "machine": "test machine", "started": "today", "minutes": 1.0}


def test_report_pairs_each_seed_and_says_beats_only_beyond_the_t_interval(tmp_path: Path) -> None:
    from benchmarks.harness import Entry, report, write_section

    entry = Entry("t", "Test regime", "r.yaml", ("baseline", "sifted", "equal-time"), extra={"target_group": "mr"})
    clear = report(entry, _result([3.0, 4.0, 5.0, 3.5, 4.5]))
    text = "\n".join(clear)
    assert "| sifted | 0.30 ± 0.00 | 0.45 ± 0.00 | 74.00 ± 0.79 | 0.25 ± 0.00 | 50% ± 0% |" in text  # reference paid: +15 s
    assert "- − equal-time: +4.00 ± 0.35 → **beats**" in text
    assert "**not measured** (missing random-keep, static-filter; time 0.45)" in text  # the aim needs every opponent
    few = "\n".join(report(entry, _result([3.0, 4.0, 5.0])))
    assert "**too few seeds**" in few and "beats**" not in few
    flat = "\n".join(report(entry, _result([25.0] * 5)))
    assert "**too few seeds**" in flat  # no spread: never "beats"
    doc = tmp_path / "b.md"
    doc.write_text("# Benchmarks\n\n## Other\n\nkeep me\n\n## Test regime\n\nold\n\n## Last\n\nme too\n")
    write_section(doc, "Test regime", clear)
    out = doc.read_text()
    assert "old" not in out and "keep me" in out and "me too" in out and out.count("## Test regime") == 1
    assert out.index("## Other") < out.index("## Test regime") < out.index("## Last")


def test_unknown_entries_and_missing_results_are_one_line_and_exit_2(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "benchmarks", "nope"], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert proc.returncode == 2 and "unknown entry 'nope'; known: relevance" in proc.stderr
    listing = subprocess.run([sys.executable, "-m", "benchmarks"], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert listing.returncode == 0 and "relevance" in listing.stdout and "distill" in listing.stdout


def _fake_shared(tmp_path: Path, monkeypatch) -> list[str]:
    """A stand-in for ../shared/data: AG News files of numbered texts (topic i % 4, plus a malformed line) and MR
    files of numbered sentences; the benchmark data builders read it and write under tmp_path/out."""
    from benchmarks import data

    (tmp_path / "ag_news").mkdir()
    topics = list(data.NEXT_TOPIC)
    for name, n in (("alps_train_subset_10k.tsv", 400), ("alps_test.tsv", 80)):
        lines = [f"{name} text {i}\t{topics[i % 4]}" for i in range(n)] + ["a malformed line without a topic"]
        (tmp_path / "ag_news" / name).write_text("\n".join(lines) + "\n")
    (tmp_path / "mr_sentence_polarity").mkdir()
    for name in ("rt-polarity.neg", "rt-polarity.pos"):
        (tmp_path / "mr_sentence_polarity" / name).write_text("".join(f"{name} sentence {i}\n" for i in range(150)))
    monkeypatch.setattr(data, "SHARED", tmp_path)
    monkeypatch.setattr(data, "DATA", tmp_path / "out")
    return topics


def test_structured_noise_flips_exactly_the_rate_of_each_topic_to_the_next_and_keeps_eval_clean(tmp_path: Path,
                                                                                                monkeypatch) -> None:
    import csv

    from benchmarks import data

    topics = _fake_shared(tmp_path, monkeypatch)
    folder = data.structured_noise(pool=200, rate=0.4, holdout=40, evaluation=60)
    read = {f: list(csv.DictReader((folder / f"{f}.csv").open())) for f in ("pool", "holdout", "eval")}
    truth = {f"alps_train_subset_10k.tsv text {i}": topics[i % 4] for i in range(400)}
    assert len(read["pool"]) == 200 and len(read["holdout"]) == 40 and len(read["eval"]) == 60
    for topic in topics:  # exactly 40% of each topic's pool texts, all to the next topic
        mine = [r for r in read["pool"] if truth[r["text"]] == topic]
        flipped = [r for r in mine if r["domain"] == "flipped"]
        assert len(flipped) == round(0.4 * len(mine))
        assert all(r["label"] == data.NEXT_TOPIC[topic] for r in flipped)
        assert all(r["label"] == topic for r in mine if r["domain"] == "clean")
    assert all(truth[r["text"]] == r["label"] for r in read["holdout"])  # the trusted set is clean
    assert all(r["text"].startswith("alps_test.tsv") for r in read["eval"])  # tested on the test split only
    assert not {r["text"] for r in read["pool"]} & {r["text"] for r in read["holdout"]}
    before = (folder / "pool.csv").read_bytes()
    assert data.structured_noise(pool=200, rate=0.4, holdout=40, evaluation=60) == folder  # made once, reused
    assert (folder / "pool.csv").read_bytes() == before


def test_relevance_news_mixes_target_texts_with_off_target_sentences_under_random_topics(tmp_path: Path,
                                                                                        monkeypatch) -> None:
    import csv
    from collections import Counter

    from benchmarks import data

    topics = _fake_shared(tmp_path, monkeypatch)
    folder = data.relevance_news(in_domain=100, off_target=200, holdout=40, evaluation=60)
    read = {f: list(csv.DictReader((folder / f"{f}.csv").open())) for f in ("pool", "holdout", "eval")}
    truth = {f"alps_train_subset_10k.tsv text {i}": topics[i % 4] for i in range(400)}
    domains = Counter(r["domain"] for r in read["pool"])
    assert domains == {"agnews": 100, "mr": 200} and len(read["holdout"]) == 40 and len(read["eval"]) == 60
    assert all(truth[r["text"]] == r["label"] for r in read["pool"] if r["domain"] == "agnews")  # target rows clean
    off = [r for r in read["pool"] if r["domain"] == "mr"]
    assert all(r["text"].startswith("rt-polarity.") for r in off)
    assert len({r["text"] for r in off}) == 200  # distinct sentences, both polarities
    assert {r["text"].split(".")[1].split()[0] for r in off} == {"neg", "pos"}
    counts = Counter(r["label"] for r in off)  # a topic at random: every topic, none dominant
    assert set(counts) == set(topics) and max(counts.values()) < 0.4 * len(off)
    assert all(truth[r["text"]] == r["label"] for r in read["holdout"])  # the reference's holdout: target, clean
    assert not {r["text"] for r in read["pool"]} & {r["text"] for r in read["holdout"]}
    assert all(r["text"].startswith("alps_test.tsv") for r in read["eval"])
    before = (folder / "pool.csv").read_bytes()
    assert data.relevance_news(in_domain=100, off_target=200, holdout=40, evaluation=60) == folder
    assert (folder / "pool.csv").read_bytes() == before


def test_an_interrupted_entry_resumes_after_its_finished_seeds_and_never_mixes_runs(tiny_recipe, tmp_path: Path,
                                                                                     monkeypatch) -> None:
    from benchmarks import harness
    from siftcli.errors import SiftcliError

    monkeypatch.setattr(harness, "OUT", tmp_path / "bench")
    ran: list[int] = []
    real = harness.run_arms

    def spy(recipe, arms, seeds, folder, **kw):  # noqa: ANN001, ANN003, ANN202
        ran.extend(seeds)
        return real(recipe, arms, seeds, folder, **kw)

    monkeypatch.setattr(harness, "run_arms", spy)
    entry = harness.Entry("t", "Test", str(tiny_recipe(epochs=1)), ("baseline", "sifted"))
    first = harness.run_entry(entry, 1, [])  # as if stopped after seed 0
    saved = json.loads((tmp_path / "bench" / "t" / "results.json").read_text())
    second = harness.run_entry(entry, 2, [])
    assert ran == [0, 1] and second["seeds"] == [0, 1]
    assert json.dumps(second["runs"][0]) == json.dumps(saved["runs"][0]) and second["minutes"] >= first["minutes"]
    with pytest.raises(SiftcliError, match=r"its overrides is \[\].*pass --fresh"):
        harness.run_entry(entry, 2, ["sift.beta=2"])
    assert json.loads((tmp_path / "bench" / "t" / "results.json").read_text())["seeds"] == [0, 1]  # nothing lost
    again = harness.run_entry(entry, 1, ["sift.beta=2"], fresh=True)
    assert ran == [0, 1, 0] and again["seeds"] == [0] and again["overrides"] == ["sift.beta=2"]
    saved_path = tmp_path / "bench" / "t" / "results.json"
    for text, expected in (("[]", "not a results document the harness wrote; move it away or pass --fresh"),
                           ("{", "not valid JSON")):
        saved_path.write_text(text)
        with pytest.raises(SiftcliError, match=expected):
            harness.run_entry(entry, 1, [])
        assert saved_path.read_text() == text  # a file it cannot read is left as it is


@pytest.mark.parametrize("target", ["mr", "agnews"])
def test_fixed_splits_are_disjoint_labelled_and_test_agnews_on_its_test_split(tmp_path: Path, monkeypatch,
                                                                              target: str) -> None:
    import csv

    from benchmarks import data

    _fake_shared(tmp_path, monkeypatch)
    folder = data.fixed(target, train=80, evaluation=50)
    read = {f: list(csv.DictReader((folder / f"{f}.csv").open())) for f in ("pool", "eval")}
    assert len(read["pool"]) == 80 and len(read["eval"]) == 50
    assert not {r["text"] for r in read["pool"]} & {r["text"] for r in read["eval"]}
    if target == "agnews":
        assert all(r["text"].startswith("alps_train_subset_10k.tsv") for r in read["pool"])
        assert all(r["text"].startswith("alps_test.tsv") for r in read["eval"])
    else:  # both polarities, each label the file it came from
        assert all(r["label"] == ("negative" if ".neg" in r["text"] else "positive") for r in read["pool"] + read["eval"])
        assert {r["label"] for r in read["pool"]} == {"negative", "positive"}
    with pytest.raises(ValueError, match="mr or agnews"):
        data.fixed("sst2", train=10)


def test_gpu_step_smoke_runs_every_row_side_by_side(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``python -m benchmarks gpu-step --smoke``: every row (the plain loop first, siftcli's baseline, sifted by memory and
    fresh, compiled, the Trainer pair) and the compare, on a tiny model; dynamo's eager backend keeps it fast here."""
    import json

    from benchmarks.scripts import gpu_step
    from siftcli.training import compiling

    monkeypatch.setattr(compiling, "BACKEND", "eager")
    monkeypatch.setattr(gpu_step, "OUT", tmp_path / "gpu-step")
    assert gpu_step.main(["--smoke", "--copy-to", str(tmp_path / "out")]) == 0
    result = json.loads((tmp_path / "gpu-step" / "results.json").read_text())
    names = [r["name"] for r in result["rows"]]
    assert names[0] == "plain PyTorch loop" and "siftcli baseline" in names and "SiftingTrainer (remembered losses)" in names
    assert {"siftcli baseline, compiled", "plain PyTorch loop, compiled"} <= set(names)
    rows = {r["name"]: r for r in result["rows"]}
    assert all(r["ms_step"] > 0 for r in result["rows"])
    assert 0 < rows["siftcli sifted, fresh scoring"]["kept"] < 1 and rows["siftcli sifted, fresh scoring"]["scoring_share"] > 0
    assert rows["siftcli baseline, compiled"]["steady_compilations"] == 0  # every bucket compiled before the window
    held = result["equal_time"]
    assert held["held_against"] == "sifted" and held["train_seconds"] >= held["budget_seconds"]
    section = (tmp_path / "out" / "section.md").read_text()
    assert "| plain PyTorch loop |" in section and "equal-time opponent trained" in section


def test_plan_accuracy_takes_the_plans_objective_on_the_truth_and_judges_a_pick_within_its_paired_noise() -> None:
    from benchmarks.scripts.plan_accuracy import ArmTruth, best, judge

    def row(arm: str, family: str, mean: float, ratio: float) -> ArmTruth:
        return ArmTruth(arm, family, mean, 0.3, mean - 0.8, mean + 0.8, ratio, [mean] * 5)

    rows = [row("filter:a", "filter", +0.5, 0.30), row("target-only", "target-only", +6.0, 0.33),
            row("dedup", "dedup", -3.0, 0.60), row("train-less", "fewer-epochs", +5.5, 0.40)]
    assert best(rows, 1.0).arm == "target-only"  # the best metric; train-less is within 1 point of it but slower
    assert best([row("dedup", "dedup", -3.0, 0.6)], 1.0) is None  # nothing within the tolerance: everything

    def runs(values: dict[str, list[float]]) -> list[dict]:
        return [{"runs": {arm: {"metric": "accuracy", "final": {"accuracy": v[i]}} for arm, v in values.items()}}
                for i in range(5)]

    seeds = runs({"target-only": [0.80, 0.81, 0.79, 0.80, 0.82], "train-less": [0.80, 0.80, 0.80, 0.79, 0.82],
                  "filter:a": [0.70, 0.71, 0.69, 0.70, 0.71], "dedup": [0.6] * 5})
    assert judge("target-only", "target-only", rows, seeds, 1.0) == (True, False)
    assert judge("train-less", "fewer-epochs", rows, seeds, 1.0)[0]  # within its paired noise of the best
    assert not judge("filter:a", "filter", rows, seeds, 1.0)[0]  # ten points below the best
    assert judge("dedup", "dedup", rows, seeds, 1.0) == (False, True)  # and worse than the tolerance
    assert not judge("baseline", "everything", rows, seeds, 1.0)[0]  # a strategy paid: everything misses it
    assert judge("baseline", "everything", [row("dedup", "dedup", -3.0, 0.6)], seeds, 1.0) == (True, False)


def test_the_confirmable_truth_leaves_out_a_best_by_its_mean_that_no_five_seed_confirmation_could_confirm() -> None:
    """compose's shape: the truth's best by the means is a subset at +1.1 ± 2.5 points (seeds from -5 to +9), which the
    plan's own confirmation, fed those very seeds in any order, never calls within a 1-point tolerance; a steady
    +1.5 ± 0.4 is confirmable. Against the confirmable truth "everything" is right where only the noisy one was best."""
    from benchmarks.scripts.plan_accuracy import ArmTruth, best, confirmable, judge

    def row(arm: str, family: str, values: list[float], ratio: float) -> ArmTruth:
        mean = sum(values) / len(values)
        return ArmTruth(arm, family, mean, 0.0, mean - 1, mean + 1, ratio, values)

    noisy = row("target-only", "target-only", [-5.0, 9.0, 4.0, -4.0, 1.5], 0.27)
    steady = row("train-less", "fewer-epochs", [1.0, 2.0, 1.5, 1.0, 2.0], 0.50)
    assert best([noisy, steady], 1.0) is noisy  # the best metric within the tolerance is the fastest within 1 of it
    assert confirmable([noisy, steady], 1.0) == [steady]
    assert confirmable([noisy], 1.0) == []

    seeds = [{"runs": {"target-only": {"metric": "accuracy", "final": {"accuracy": 0.8 + v / 100}},
                       "baseline": {"metric": "accuracy", "final": {"accuracy": 0.8}}}} for v in noisy.values]
    assert not judge("baseline", "everything", [noisy], seeds, 1.0)[0]  # by the means a subset paid
    assert judge("baseline", "everything", [noisy], seeds, 1.0, among=confirmable([noisy], 1.0))[0]


def test_the_screens_order_is_counted_against_the_truths_by_the_loss_and_by_accuracy() -> None:
    """Pairs of candidates screened at the screen's rung whose truths differ: how many each screen signal orders as the
    truth does (a tie at the screen counts half); candidates screened elsewhere or missing from the truth are left out."""
    from benchmarks.scripts.plan_accuracy import ArmTruth, screen_agreement

    truths = [ArmTruth(arm, "f", mean, 0.3, 0, 0, 0.5, []) for arm, mean in (("a", 3.0), ("b", 1.0), ("c", -2.0))]

    def trial(signal: float, gap: float, rung: float = 0.25) -> dict:
        return {"status": "complete", "fidelity": 1.0, "rung": rung, "signal_gap": signal, "gap": gap}

    plan = {"screen_fidelity": 0.25, "candidates": [
        {"arm": "a", "trials": [trial(0.10, -1.0)]},  # the loss orders a > b > c; accuracy b > c > a
        {"arm": "b", "trials": [trial(0.05, 2.0)]},
        {"arm": "c", "trials": [trial(-0.20, 2.0)]},  # accuracy ties b and c: half a pair
        {"arm": "d", "trials": [trial(0.30, 5.0)]},  # no truth
        {"arm": "e", "trials": [trial(0.30, 5.0, rung=0.5)]}]}  # rung 2
    assert screen_agreement(plan, truths) == (3.0, 0.5, 3)


def test_wsd_forks_pairs_each_seed_with_its_truth_and_says_equivalent_only_inside_the_tolerance() -> None:
    """The wsd-forks report: each wsd run paired with the truth's run of its seed (its baseline with the recipe's, each
    fork with the train-less run apart, each gap with its own baseline's), in points; 'equivalent' only where the
    95% interval lies inside plus or minus a point, 'within noise' where it holds 0."""
    from benchmarks.scripts.wsd_forks import FRACTIONS, _within, less, rows

    def run(acc: float, wall: float = 1.0) -> dict:
        return {"metric": "accuracy", "final": {"accuracy": acc}, "wall_seconds": wall}

    seeds = []
    for i, shift in enumerate((0.010, 0.012, 0.008)):  # the wsd baseline a point above the recipe's, tightly
        truth = {"baseline": run(0.80 + i / 100), **{less(f): run(0.70 + i / 100) for f in FRACTIONS[:2]}}
        wsd = {"baseline": run(0.80 + i / 100 + shift, 10.0), **{less(f): run(0.75 + i / 100, 1.0) for f in FRACTIONS}}
        seeds.append({"truth": {"runs": truth}, "wsd": {"runs": wsd}})
    r = rows("x", seeds)
    assert r["base"] == pytest.approx([1.0, 1.2, 0.8])
    assert r["forks"][0.5] == pytest.approx([5.0] * 3) and r["gaps_linear"][0.5] == pytest.approx([-10.0] * 3)
    assert r["gaps_wsd"][0.35] == pytest.approx([-6.0, -6.2, -5.8]) and r["added"] == pytest.approx([0.3] * 3)
    assert _within([0.1, -0.1, 0.05]) == "equivalent" and _within([2.0, -2.5, 1.0]) == "within noise"
    assert _within(r["base"]) == "wsd better" and _within([-3.0, -3.2, -2.9]) == "wsd worse"


def test_confirm_replay_counts_a_losers_seeds_and_a_good_picks_wrong_stops_at_each_futility_level() -> None:
    """The futility replay: every order of a candidate's 5 truth seeds through the plan's looks. A pick 10 to 18 points
    worse stops sooner at the looser level and is always called worse; a pick within the tolerance is confirmed in
    every order at both levels, never called worse, and none is lost to the looser level."""
    from benchmarks.scripts.confirm_replay import replay
    from benchmarks.scripts.plan_accuracy import ArmTruth

    loser = ArmTruth("sifted:memory", "online", -13.0, 1.3, -16.6, -9.4, 0.4, [-10.0, -17.8, -11.7, -12.5, -14.0])
    good = ArmTruth("target-only", "target-only", 4.0, 0.2, 3.4, 4.6, 0.3, [4.1, 3.8, 4.4, 3.9, 4.2])
    strict, loose = replay([("x", loser), ("x", good)], [0.05, 0.2])
    assert (strict.within_orders, strict.beyond_orders) == (120, 120)
    assert strict.within_confirmed == loose.within_confirmed == 120 and loose.within_worse == 0 and loose.lost == 0
    assert strict.beyond_worse == loose.beyond_worse == 120
    assert loose.beyond_seeds == 2.0 < strict.beyond_seeds
    assert strict.within_favoured == loose.within_favoured == loose.beyond_favoured == 0  # nothing left inconclusive
    # a close call (compose's target-only, +3.50 ± 2.64) is inconclusive in every order and favoured at 80%, not 95%
    close = ArmTruth("target-only", "target-only", 3.5, 2.64, -3.8, 10.8, 0.26, [2.8, -1.3, 8.0, -2.9, 10.9])
    edge = ArmTruth("filter", "filter", -1.2, 1.5, -5.4, 3.0, 0.5, [0.5, -4.0, 1.5, -3.5, -0.5])
    strict, loose = replay([("x", close), ("x", edge)], [0.05, 0.2])
    assert loose.within_favoured == 120 and strict.within_favoured == 0 and loose.beyond_favoured == 0


def test_a_truths_time_ratio_is_the_median_over_seeds_so_one_seed_timed_on_a_busy_machine_moves_it_little(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The truth's time ratio decides "faster" and the fastest within a point: the long regime's first timing had one
    seed's arms 10 to 18 times its baseline (a busy machine), which moved the mean of the ratios to 3.98; the median
    over seeds stays at the idle seeds' ratio."""
    from benchmarks.entry import ROOT
    from benchmarks.scripts.plan_accuracy import truth_table

    monkeypatch.chdir(ROOT)  # the regimes' recipes are read relative to the repository's root
    arm = "train-less:fraction=0.5"

    def run(acc: float, seconds: float) -> dict:
        return {"metric": "accuracy", "final": {"accuracy": acc}, "train_seconds": seconds}

    seeds = [{"runs": {"baseline": run(0.70, 10.0), arm: run(0.71, s)}} for s in (4.0, 5.0, 5.0, 6.0, 180.0)]
    row = next(r for r in truth_table("long", seeds) if r.arm == arm)
    assert row.ratio == pytest.approx(0.5) and row.mean == pytest.approx(1.0)


def test_truth_check_looks_at_the_close_calls_again_and_says_when_more_seeds_change_the_best(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The long regime's shape: half the schedule leads on the truth's seeds (+1.5 points at 0.5 of the time) and loses
    4 on the next five; the close calls are the arms within a point and faster; over all ten the best is another arm,
    and the plan's "everything", a miss by the truth's seeds, is judged against the ten."""
    from benchmarks.entry import ROOT
    from benchmarks.scripts.plan_accuracy import truth_table
    from benchmarks.scripts.truth_check import close_calls, look_again, section

    monkeypatch.chdir(ROOT)
    less, calib, memory = ("train-less:fraction=0.5", "sifted:mode=calibrated,keep_fraction=0.5,score=loss,scoring=fresh",
                           "sifted:mode=probabilistic,beta=2,score=loss,scoring=memory")

    def run(acc: float, seconds: float) -> dict:
        return {"metric": "accuracy", "final": {"accuracy": acc}, "train_seconds": seconds}

    def seed(less_gap: float, calib_gap: float) -> dict:
        return {"runs": {"baseline": run(0.70, 10.0), less: run(0.70 + less_gap / 100, 5.0),
                         calib: run(0.70 + calib_gap / 100, 7.0), memory: run(0.55, 4.0)}}

    stored = [seed(g, 0.2) for g in (1.0, 2.0, 1.5, 1.0, 2.0)]
    check = [seed(g, 0.4) for g in (-4.0, -5.0, -3.0, -4.5, -3.5)]
    assert close_calls(truth_table("long", stored)) == [less, calib]  # memory sifting is 15 points down: not a call
    plan = {"status": "completed", "pick": "baseline", "pick_family": "everything"}
    c = look_again("long", stored, check, plan)
    assert [r.arm for r in c.both] == [less, calib] and len(c.both[0].values) == 10
    assert c.agrees_stored is False  # half the schedule paid by the truth's seeds
    text = "\n".join(section([c], "a machine"))
    assert f"| **best** | `{less}` | `{calib}` | `{calib}` |" in text  # the best changes with five more seeds
    assert "misses by the truth's seeds, misses over all of them" in text  # calibrated sifting is within a point
