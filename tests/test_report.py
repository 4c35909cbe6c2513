"""The tables the CLI prints: every number comes from the result it is given."""

from __future__ import annotations

from rich.console import Console

from siftcli.analysis.stats import summarise_seeds
from siftcli.report.tables import compare_view, run_table, sweep_view


def _render(renderable) -> str:  # noqa: ANN001
    console = Console(width=200, record=True)
    console.print(renderable)
    return console.export_text()


def _run(arm: str, seconds: float, acc: float, keep: float | None = None, noise: float | None = None) -> dict:
    return {"arm": arm, "status": "completed", "metric": "accuracy", "train_seconds": seconds, "total_seconds": seconds + 3,
            "optimizer_steps": 10, "samples_scored": 80 if keep else 0, "samples_trained": 40, "raw_samples": 80,
            "final": {"accuracy": acc, "loss": 0.5}, "phases": {"data": 1.0, "scoring": 0.5},
            "keep": {"target": 0.5, "achieved": keep, "achieved_after_delay": keep} if keep else None,
            "label_noise": {"rate": 0.2, "kept_share": noise, "kept_share_after_delay": noise} if noise is not None else None,
            "scoring_cost": 0.2 if keep else None, "predicted_ratio": 0.7 if keep else None}


def test_run_table_shows_the_run() -> None:
    text = _render(run_table(_run("sifted", 12.34, 0.8765, keep=0.55), "runs/x"))
    for expected in ("siftcli train — sifted (completed)", "0.8765", "12.3 s", "50.0% / 55.0% / 55.0%", "runs/x"):
        assert expected in text


def test_compare_view_has_every_arm_and_the_two_values() -> None:
    runs = {"baseline": _run("baseline", 20.0, 0.80, noise=0.2), "sifted": _run("sifted", 11.0, 0.84, keep=0.3, noise=0.05),
            "equal-time": _run("equal-time", 11.5, 0.82, noise=0.2), "random-keep": _run("random-keep", 10.5, 0.79, keep=0.3, noise=0.2)}
    pair = {"seed": 0, "target_drop": 0.5, "speedup": 1.8, "equal_epoch_ratio": 0.55, "metric_delta": 4.0, "target": 0.795,
            "vs": {"equal-time": {"diff": 2.0}, "random-keep": {"diff": 5.0}}}
    summary = summarise_seeds([dict(pair, vs={"equal-time": {"diff": e}, "random-keep": {"diff": r}})
                               for e, r in ((2.0, 4.0), (1.0, 5.0), (-1.0, 6.0), (0.5, 5.5), (1.5, 4.5))])
    text = _render(compare_view({"runs": [runs], "pairs": [pair] * 5, "seeds_summary": summary, "verdict": "v."}))
    for expected in ("random-keep", "sifted − equal-time (value of the trade)", "+2.00 points", "value of selection", "+5.00 points",
                     "flipped labels among kept", "5.0%", "+5.00 ± 0.35 points", "beats", "within noise", "Verdict: v."):
        assert expected in text, expected


def test_sweep_view_marks_the_recommendation_the_front_and_the_frontier() -> None:
    trials = [{"number": 0, "state": "complete", "params": {"beta": 2.0}, "value": 0.8, "train_seconds": 9.0, "time_to_target": 5.0},
              {"number": 1, "state": "pruned", "params": {"beta": 0.5}, "value": 0.6, "train_seconds": 3.0, "time_to_target": None,
               "pruned_at_raw_batch": 12},
              {"number": 2, "state": "fail", "params": {"beta": 9.0}, "value": None, "train_seconds": None, "error": "boom"}]
    frontier = [{"fraction": 0.5, "value": 0.7, "train_seconds": 10.0}, {"fraction": 1.0, "value": 0.82, "train_seconds": 20.0}]
    result = {"mode": "budget", "metric": "accuracy", "target": 0.815, "counts": {"complete": 1, "pruned": 1, "fail": 1},
              "trials": trials, "front": [0], "frontier": frontier, "sweep_seconds": 40.0, "trial_process_seconds": 30.0,
              "study": "s", "storage": "j", "recommendation": {"kind": "trial", "number": 0, "text": "sift with beta 2"}}
    text = _render(sweep_view(result))
    starred = [line for line in text.splitlines() if "★" in line]
    assert len(starred) == 1 and starred[0].split("│")[1].strip() == "0"
    assert "pruned at raw batch 12" in text and "failed: boom" in text and text.count("frontier") == 2
    assert "sift with beta 2" in text and "optuna-dashboard" in text


def test_report_html_is_one_self_contained_page_holding_every_arm_and_the_verdict() -> None:
    import json
    import re

    from siftcli.report.html import report_html

    runs = {"baseline": _run("baseline", 20.0, 0.80), "sifted": _run("sifted", 11.0, 0.84, keep=0.3),
            "equal-time": _run("equal-time", 11.5, 0.82)}
    for r in runs.values():
        r["higher_is_better"] = True
        r["curve"] = [{"step": 5, "train_seconds": 4.0, "accuracy": 0.7}, {"step": 10, "train_seconds": r["train_seconds"],
                                                                            "accuracy": r["final"]["accuracy"]}]
    result = {"recipe": "tiny</script><b>", "runs": [runs], "verdict": "Train less </script> now.",
              "pairs": [{"seed": 0, "target": 0.795, "vs": {"equal-time": {"diff": 2.0}}}], "seeds_summary": None}
    page = report_html(result, {"sifted": [[0, 32, 10], [1, 32, 9]]})
    assert not re.search(r"""(src|href)\s*=\s*["']?https?:""", page)  # opens from disk: nothing fetched
    assert page.count("</script>") == 2  # the data cannot close its script element early
    data = json.loads(re.search(r'<script id="data" type="application/json">(.*?)</script>', page, re.S).group(1))
    assert set(data["runs"][0]) == {"baseline", "sifted", "equal-time"} and data["verdict"] == result["verdict"]
    assert data["runs"][0]["sifted"]["keep_trace"] == [[0, 32, 10], [1, 32, 9]] and data["metric"] == "accuracy"
    assert "tiny&lt;/script&gt;&lt;b&gt;" in page  # the recipe name is escaped in the title


def test_report_html_draws_in_a_real_headless_browser(tmp_path) -> None:  # noqa: ANN001
    """Chromium (Debian's package, installed by .ci/run where it can be) runs the page's script: the table and every
    arm's curve exist in the DOM it dumps. Skipped where no browser is installed."""
    import shutil
    import subprocess

    import pytest

    from siftcli.report.html import report_html

    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("no chromium on this machine")
    crafted = 'variant:x=<img src=x onerror="document.title=1">'  # an arm name is the user's text, never markup
    runs = {a: {**_run(a, 10.0 + i, 0.8 + i / 100), "higher_is_better": True,
                "curve": [{"step": s, "train_seconds": 2.0 * s, "accuracy": 0.5 + s / 100 + i / 100} for s in (1, 5, 9)]}
            for i, a in enumerate(("baseline", "sifted", crafted))}
    page = tmp_path / "report.html"
    page.write_text(report_html({"recipe": "t", "runs": [runs], "verdict": "v.", "seeds_summary": None,
                                 "pairs": [{"seed": 0, "target": 0.55, "vs": {crafted: {"diff": 1.0}}}]}))
    dom = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                          "--disable-background-networking", "--disable-component-update", "--disable-sync",
                          f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", page.as_uri()],
                         capture_output=True, text=True, timeout=120).stdout
    assert "<table>" in dom and dom.count("<polyline") == 3  # the script ran: the table and one curve per arm
    assert "Verdict: v." in dom
    import re

    shown = re.sub(r'<script id="data".*?</script>', "", dom, flags=re.S)  # the JSON data holds the name as text
    assert "<img" not in shown and shown.count("&lt;img src=x") >= 3  # table head, difference row, legend: text, not run
