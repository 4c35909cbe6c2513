"""Why each row was kept or removed (``siftcli filter --report``): the filter's per-row decisions in, a table one row
per input row (Parquet, or JSON lines) and a summary a person can read out.

A threshold is trusted once it has been checked on one's own data: the report says, for every pool row, whether it was
kept and why not (``near-copy`` of a kept representative, with their exact similarity; ``below-cut``, its reference
score against the cut it was held to), so a user can read the rows ``--keep 0.5`` or ``--similarity 0.7`` threw away in
pandas, DuckDB or ``datasets`` before training on what is left. The table is written a chunk at a time (memory stays
the per-row arrays the filter already holds), atomically; the summary (reasons, the score distribution against the
cut, the largest near-copy clusters with one sample each, the kept share per label and per group) is a typed record the
CLI prints and ``--json`` returns.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from siftcli.errors import SiftcliError
from siftcli.runio import atomic_write, ensure_file_writable

#: What a report file may be, by suffix.
REPORT_KINDS = {".parquet": "parquet", ".jsonl": "jsonl"}
#: Why a row was removed, or that it was kept: one name each.
KEPT, NEAR_COPY, BELOW_CUT = "kept", "near-copy", "below-cut"
#: Report rows per written chunk.
CHUNK_ROWS = 65_536
#: Bins of the score histogram in the summary.
BINS = 12
#: Largest near-copy clusters the summary shows.
TOP_CLUSTERS = 5


@dataclass
class Fates:
    """The filter's decision for every pool row, in pool order (ascending source rows).

    ``representative``: the pool position of the row's near-copy representative (itself when it is one or has no
    near-copy); ``similarity``: its exact similarity to that representative (NaN for a representative); ``score``: the
    reference's score (``None`` without ``--keep``); ``cut``: the highest score kept; ``labels``: each row's label."""

    rows: np.ndarray
    kept: np.ndarray
    representative: np.ndarray | None = None
    similarity: np.ndarray | None = None
    score: np.ndarray | None = None
    cut: float | None = None
    labels: np.ndarray | None = None

    def reasons(self) -> np.ndarray:
        """Each row's reason (``kept``, ``near-copy``, ``below-cut``) as an array of strings."""
        out = np.full(len(self.rows), BELOW_CUT, dtype=object)
        if self.representative is not None:
            out[self.representative != np.arange(len(self.rows))] = NEAR_COPY
        out[self.kept] = KEPT
        return out


@dataclass
class Histogram:
    """Reference scores of the rows the cut was made over (near-copies aside): ``counts`` per bin between ``edges``."""

    edges: list[float]
    counts: list[int]
    cut: float | None


@dataclass
class Cluster:
    """One near-copy cluster: its rows, its kept representative's source row and that row's text (or first field)."""

    size: int
    representative: int
    sample: str


@dataclass
class FilterSummary:
    """What a person reads after ``siftcli filter``: rows per reason, the score distribution against the cut, the
    largest near-copy clusters, the kept share per label and per group, and the files written."""

    reasons: dict[str, int]
    histogram: Histogram | None = None
    clusters: list[Cluster] = field(default_factory=list)
    kept_by_label: dict[str, float] | None = None
    kept_by_group: dict[str, float] | None = None
    report: str | None = None
    plot: str | None = None


def check_report_path(report: str, taken: dict[str, str | None]) -> Path:
    """``--report``'s path, checked before any work: a ``.parquet`` or ``.jsonl`` file, not a folder, not one of the
    files the filter reads or writes (``taken``: what each is, by name), in a folder that can be written."""
    path = Path(report)
    if path.suffix.lower() not in REPORT_KINDS:
        raise SiftcliError(f"--report {report}: expected a .parquet or .jsonl file (one row per input row)")
    if path.is_dir():
        raise SiftcliError(f"--report {report}: is a folder; expected a file name")
    for what, other in taken.items():
        if other and Path(other).resolve() == path.resolve():
            raise SiftcliError(f"--report {report}: is the {what}; the report would overwrite it: name a file of its own")
    ensure_file_writable(report, flag="--report")
    return path


def _columns(fates: Fates, lo: int, hi: int, reasons: np.ndarray, sizes: np.ndarray | None,
             ids: Sequence | None) -> dict[str, object]:
    """Report columns for pool rows ``[lo, hi)``: plain Python/NumPy values, nulls where a value does not apply."""
    import pyarrow as pa

    n = hi - lo
    cols: dict[str, object] = {"row": pa.array(fates.rows[lo:hi], pa.int64())}
    if ids is not None:
        cols["id"] = pa.array(list(ids))
    cols["kept"] = pa.array(fates.kept[lo:hi], pa.bool_())
    cols["reason"] = pa.array(reasons[lo:hi].tolist(), pa.string())
    score = None if fates.score is None else fates.score[lo:hi].astype(np.float32)
    cols["score"] = pa.array(score if score is not None else np.zeros(n, np.float32), pa.float32(),
                             mask=None if score is not None else np.ones(n, bool))
    cols["cut"] = pa.array(np.full(n, np.nan if fates.cut is None else fates.cut, np.float32), pa.float32(),
                           mask=np.full(n, fates.cut is None))
    if fates.representative is not None:
        rep = fates.representative[lo:hi]
        copy = rep != np.arange(lo, hi)
        in_cluster = sizes[rep] > 1
        cols["cluster"] = pa.array(fates.rows[rep], pa.int64(), mask=~in_cluster)  # its representative's source row
        cols["representative"] = pa.array(fates.rows[rep], pa.int64(), mask=~copy)
        cols["similarity"] = pa.array(np.nan_to_num(fates.similarity[lo:hi]).astype(np.float32), pa.float32(), mask=~copy)
    return cols


def write_report(path: Path, fates: Fates, ids: Callable[[np.ndarray], Sequence] | None = None) -> None:
    """One row per pool row, a chunk at a time, atomically: ``row`` (its position in the source), ``id`` (the recipe's
    ``data.id_column``, where named: ``ids(rows)`` reads it), ``kept``, ``reason``, ``score`` and ``cut``, and with
    near-copy search ``cluster`` (its representative's row, for clusters of two or more), ``representative`` and
    ``similarity`` (for a removed near-copy)."""
    import pyarrow as pa

    kind = REPORT_KINDS[path.suffix.lower()]
    reasons = fates.reasons()
    sizes = None if fates.representative is None else np.bincount(fates.representative, minlength=len(fates.rows))
    chunks = range(0, max(1, len(fates.rows)), CHUNK_ROWS)

    def table(lo: int) -> pa.Table:
        hi = min(lo + CHUNK_ROWS, len(fates.rows))
        return pa.table(_columns(fates, lo, hi, reasons, sizes, None if ids is None else ids(fates.rows[lo:hi])))

    def write(tmp: Path) -> None:
        if kind == "parquet":
            import pyarrow.parquet as pq

            writer = None
            try:
                for lo in chunks:
                    part = table(lo)
                    writer = writer or pq.ParquetWriter(str(tmp), part.schema)
                    writer.write_table(part)
            finally:
                if writer is not None:
                    writer.close()
        else:
            with open(tmp, "w", encoding="utf-8") as fh:
                for lo in chunks:
                    text = table(lo).to_pandas().to_json(orient="records", lines=True, force_ascii=False)
                    fh.write(text if not text or text.endswith("\n") else text + "\n")

    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, write)


def summarize(fates: Fates, texts: Callable[[list[int]], list[str]] | None = None,
              groups: Sequence | None = None, label_names: Sequence[str] | None = None) -> FilterSummary:
    """The summary of :func:`write_report`'s table without reading it back: ``texts(rows)`` gives the samples of the
    largest clusters; ``groups``: each pool row's group (the recipe's ``data.group_column``)."""
    reasons = fates.reasons()
    summary = FilterSummary(reasons={r: int((reasons == r).sum()) for r in (KEPT, NEAR_COPY, BELOW_CUT)})
    if fates.score is not None:
        ranked = reasons != NEAR_COPY
        scores = fates.score[ranked]
        scores = scores[np.isfinite(scores)]
        if len(scores):
            counts, edges = np.histogram(scores, bins=BINS)
            summary.histogram = Histogram([float(e) for e in edges], [int(c) for c in counts], fates.cut)
    if fates.representative is not None and len(fates.rows):
        sizes = np.bincount(fates.representative, minlength=len(fates.rows))
        top = [int(i) for i in np.argsort(-sizes, kind="stable")[:TOP_CLUSTERS] if sizes[i] > 1]
        samples = texts([int(fates.rows[i]) for i in top]) if texts is not None and top else [""] * len(top)
        summary.clusters = [Cluster(int(sizes[i]), int(fates.rows[i]), str(s)) for i, s in zip(top, samples)]
    if fates.labels is not None:
        summary.kept_by_label = _shares(fates.labels, fates.kept, label_names)
    if groups is not None:
        summary.kept_by_group = _shares(np.asarray([str(g) for g in groups], dtype=object), fates.kept, None)
    return summary


def _shares(values: np.ndarray, kept: np.ndarray, names: Sequence[str] | None) -> dict[str, float]:
    """The kept share of each value's rows (kept / rows with that value)."""
    out = {}
    for value in sorted(set(values.tolist()), key=str):
        of = values == value
        name = names[value] if names is not None and isinstance(value, (int, np.integer)) and 0 <= value < len(names) \
            else str(value)
        out[str(name)] = float(kept[of].sum() / max(1, of.sum()))
    return out


def plot_histogram(summary: FilterSummary, path: Path) -> str | None:
    """The score histogram against the cut as a PNG at ``path`` (``None`` without matplotlib or scores)."""
    if summary.histogram is None:
        return None
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    h = summary.histogram
    fig, ax = plt.subplots(figsize=(6, 3.2))
    ax.stairs(h.counts, h.edges, fill=True, alpha=0.6, label="rows")
    if h.cut is not None:
        ax.axvline(h.cut, color="crimson", label=f"cut {h.cut:.3g}")
    ax.set_xlabel("reference score (lower is kept)")
    ax.set_ylabel("rows")
    ax.legend()
    fig.tight_layout()
    atomic_write(path, lambda tmp: fig.savefig(tmp, format="png", dpi=110))
    plt.close(fig)
    return str(path)


def histogram_lines(h: Histogram, width: int = 30) -> list[str]:
    """The histogram in text: one line a bin, a bar of ``#`` (``|`` marks the bin the cut falls in)."""
    most = max(h.counts) or 1
    lines = []
    for lo, hi, count in zip(h.edges[:-1], h.edges[1:], h.counts):
        mark = " <- cut" if h.cut is not None and lo <= h.cut <= hi else ""
        lines.append(f"{lo:9.3g} .. {hi:<9.3g} {'#' * max(1 if count else 0, round(width * count / most)):<{width}} {count}{mark}")
    return lines
