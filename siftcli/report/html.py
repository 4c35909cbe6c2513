"""``report.html``: a comparison as one self-contained page (no server, no network, no library): the verdict, the
table of arms, and interactive curves of the metric against training wall-clock for every arm with the time-to-target
marked, plus the keep rate over raw batches. The data sits in the page as JSON; a few lines of plain JavaScript draw
SVG from it, so the file opens from disk in any browser and stays the record of the run."""

from __future__ import annotations

import html
import json

from siftcli.analysis.stats import CompareResult
from siftcli.runio import json_safe


def _page() -> str:
    from importlib.resources import files

    return files("siftcli.report").joinpath("templates", "report.html").read_text(encoding="utf-8")


def report_html(result: CompareResult, traces: dict[str, list[list[int]]] | None = None) -> str:
    """The page for a ``compare.json`` result; ``traces`` adds each arm's keep trace ([raw batch, n, kept] rows)."""
    runs = [{arm: {**run, "keep_trace": (traces or {}).get(arm)} for arm, run in seed.items()} for seed in result["runs"]]
    first = result["runs"][0]
    base = first.get("baseline") or next(iter(first.values()))
    data = {**result, "runs": runs, "metric": base["metric"], "higher_is_better": base["higher_is_better"]}
    text = json.dumps(json_safe(data), default=str).replace("</", "<\\/")  # nothing in the data can close the script
    return (_page().replace("__DATA__", text).replace("__NAME__", html.escape(str(result.get("recipe", ""))))
            .replace("__METRIC__", html.escape(base["metric"])))
