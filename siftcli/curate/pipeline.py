"""A recipe's training data in, the kept rows written out (``siftcli filter``): two passes over the pool in chunks, the
per-row state small, every core (or a Dask cluster) working on the chunks.

1. **Scan** each chunk of rows (jobs on the engine): tokenize it as training would (the fast tokenizer, batched),
   save its token ids to a chunk file, and return its near-copy sketches (196 bytes a row: the 16 band keys of its MinHash
   signature, bigram bit map, bigram count) and its summed n-gram counts.
2. **Near-copies** (this process): candidate pairs from the sketches' bands, those the bit maps leave within reach
   of the threshold confirmed by the exact Jaccard similarity of the two rows' bigrams, read back from the chunk files
   (jobs on the engine) for those rows only.
3. **Score** each chunk (jobs on the engine) with the reference fitted on the holdout and the pool's summed counts.
4. **Cut and write**: the exact lowest fraction over the whole pool (every row's score, 4 bytes, comes back to this
   process, which sorts them once: the cut is global, never per chunk or per worker); the kept rows are written with
   the data's own columns by the ``datasets`` writer, which streams them in batches.

Memory grows with the sketches (and goes once the near-copies are found) and the scores, not with the text: the text
stays in the memory-mapped Arrow file ``datasets`` keeps, and the tokens on disk. Every job is a pure function of its
chunk, so one process, many, and a cluster keep exactly the same rows. The rows a cheap reference can rank this way
are those of ``sift.reference.kind`` ``ngram`` and ``naive-bayes``; a reference that trains a model takes the
in-memory path of :mod:`siftcli.commands`.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from siftcli.curate import dedup as dd
from siftcli.curate.chunks import Context, Scan, chunk_bigrams, scan_chunk, score_chunk
from siftcli.curate.engines import Engine
from siftcli.curate.ngram import BUCKETS, Fitted, LabelFit, Relevance
from siftcli.curate.report import Fates, FilterSummary, plot_histogram, summarize, write_report
from siftcli.curate.tokens import backend, distinct, from_texts, markers, strip_markers
from siftcli.errors import SiftcliError
from siftcli.recipe.schema import Recipe, empty_holdout

#: Rows per chunk: large enough that the per-job overhead is small, small enough that a job's text, tokens and
#: hashing buffers stay in megabytes and the last chunks do not leave a core idle for long.
CHUNK_ROWS = 10_000
#: The references this path ranks by (no model to train).
STREAMED_REFERENCES = ("ngram", "naive-bayes")


@dataclass
class CurateResult:
    """What ``siftcli filter`` kept and what choosing it cost (``phases``: seconds per step, on one clock)."""

    output: str
    kept: int
    of: int
    keep: float
    dedup_similarity: float | None = None
    dedup_by: str | None = None  # minhash (token bigrams) or semantic (a sentence encoder's embeddings)
    dedup_kept: int | None = None
    dedup_search: dd.SearchCounts | None = None  # pairs that shared a band, were checked exactly, were near-copies
    reference_kind: str | None = None
    reference_cached: bool | None = None  # a trained reference read from the cache (the in-memory path)
    groups: dict[str, float] | None = None
    engine: str = "processes"
    workers: int = 1
    source: str = "table"  # "stream": read as a stream (--stream), twice, never held whole
    phases: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0
    summary: FilterSummary | None = None  # with --report: why rows went, the scores against the cut, the clusters


def _column(train: Any, batch: Any, column: str, lo: int, hi: int) -> list:
    """Rows ``[lo, hi)`` of a column: through Arrow for plain values, decoded by ``datasets`` for a feature that stores an
    encoding (``Json``: a file whose column mixes types), so a number among texts is seen as a number."""
    import datasets

    if isinstance(train.features.get(column), datasets.Value):
        return batch[column].to_pylist()
    return list(train[lo:hi][column])


def check_texts(texts: list, column: str) -> None:
    """A chunk's texts are all strings (a number or an empty cell among them is one line naming the column)."""
    bad = next((i for i, t in enumerate(texts) if not isinstance(t, str)), None)  # an index: None is a bad value too
    if bad is not None:
        value = texts[bad]
        raise SiftcliError(f"data: column {column!r} must hold text; found {type(value).__name__} ({value!r:.40})")


def read_chunks(train: Any, column: str, pair_column: str | None, held: np.ndarray, chunk: int) -> Iterator[tuple]:
    """Scan jobs: each chunk's pool rows (the holdout's left out) read through Arrow only when its job is sent."""
    for k, lo in enumerate(range(0, len(train), chunk)):
        hi = min(lo + chunk, len(train))
        batch = train.with_format("arrow")[lo:hi]
        pool = np.flatnonzero(~held[lo:hi])
        texts = _column(train, batch, column, lo, hi)
        pairs = _column(train, batch, pair_column, lo, hi) if pair_column else None
        if len(pool) < len(texts):
            texts = [texts[i] for i in pool]
            pairs = None if pairs is None else [pairs[i] for i in pool]
        check_texts(texts, column)
        labels = np.asarray(batch["label"].to_pylist(), dtype=np.int64)[pool] if "label" in batch.column_names else \
            np.zeros(len(pool), dtype=np.int64)
        yield k, pool + lo, texts, pairs, labels


@dataclass
class Curated:
    """What :func:`curate` chose: the training rows to keep (source row numbers, ascending), the seconds of each step,
    how many pool rows there were, and, with a near-copy search, how many it kept and the pairs it looked at."""

    rows: np.ndarray
    phases: dict[str, float]
    pool: int
    dedup_kept: int | None = None
    search: dd.SearchCounts | None = None
    fates: Fates | None = None  # every pool row's decision, where a report was asked for
    dedup_by: str | None = None  # minhash or semantic, where near-copies were searched


@dataclass
class Chunks:
    """The pool as the engine reads it: each chunk's rows (``jobs``: :func:`read_chunks` from an Arrow table,
    ``siftcli.curate.stream.stream_chunks`` from a stream), the text ``column``, and where known the ``count`` of
    chunks and the pool's rows (``rows_hint``: the sketch table is then filled in place instead of joined at the end)."""

    jobs: Iterator[tuple]
    column: str
    count: int | None = None
    rows_hint: int | None = None


def curate(recipe: Recipe, pool: Chunks, holdout: Any | None, tokenizer: Any, *, keep: float | None,
           similarity: float | None, engine: Engine, on_phase: Any = None, report: bool = False,
           encoder: str | None = None, work_dir: Path | None = None) -> Curated:
    """The rows to keep of the pool and what choosing them took. ``holdout``: the holdout's rows (a
    ``datasets.Dataset``) when the recipe's reference ranks by one; ``report``: also every pool row's decision
    (:class:`~siftcli.curate.report.Fates`: its near-copy representative and their similarity, its score, the cut);
    ``encoder``: near-copies by meaning (:mod:`.semantic`, cosine ``similarity`` of that encoder's embeddings) instead
    of by shared token bigrams; ``work_dir``: the chunk files' folder, kept after the run (its embeddings are read back
    by the next run over the same texts: an interrupted semantic filter goes on), instead of a temporary one."""
    jobs, count, rows_hint, column = pool.jobs, pool.count, pool.rows_hint, pool.column
    phases: dict[str, float] = {}
    kind = recipe.sift.reference.kind if keep is not None else None
    if kind is not None and kind not in STREAMED_REFERENCES:
        raise SiftcliError(f"sift.reference.kind {kind}: the streamed filter ranks by ngram or naive-bayes")
    head, tail = markers(tokenizer)
    folder = str(work_dir) if work_dir is not None else tempfile.mkdtemp(prefix="siftcli-curate-")
    if work_dir is not None:
        Path(folder).mkdir(parents=True, exist_ok=True)
    try:
        ctx = Context(backend(tokenizer, recipe.max_length) or tokenizer, recipe.max_length, folder, head, tail,
                      want_sketches=similarity is not None and encoder is None, want_counts=kind == "ngram",
                      encoder=encoder, threads=max(1, (os.cpu_count() or 1) // max(1, engine.workers)) if encoder else 0)
        t0 = time.perf_counter()
        engine.share(ctx)
        filled = dd.Sketches.empty(rows_hint) if similarity is not None and rows_hint is not None else None
        parts: list[dd.Sketches] = []
        embedded: list[np.ndarray] = []
        total = np.zeros(BUCKETS) if kind == "ngram" else None
        scans: list[Scan] = []
        at = 0
        for scan in engine.map(scan_chunk, jobs, count):  # results in chunk order; each folded in and let go
            if scan.sketches is not None:
                if filled is not None:
                    filled.put(at, scan.sketches)
                else:
                    parts.append(scan.sketches)
            if total is not None:
                total += scan.counts
            if scan.embeddings is not None:
                embedded.append(scan.embeddings)
            at += len(scan.rows)
            scan.sketches = scan.counts = scan.embeddings = None
            scans.append(scan)
        n = at
        sketches = None if similarity is None or encoder is not None else \
            filled.head(n) if filled is not None else dd.Sketches.join(parts)
        parts, filled = [], None  # sketches is now the only reference: dropping it frees the table
        phases["tokenize+sign"] = time.perf_counter() - t0
        if on_phase:
            on_phase("scanned", phases)
        firsts = np.cumsum([0] + [len(s.rows) for s in scans])
        rows = np.concatenate([s.rows for s in scans]) if scans else np.zeros(0, dtype=np.int64)
        chosen = np.arange(n)
        out = Curated(rows, phases, n, dedup_by=None if similarity is None else "semantic" if encoder else "minhash")
        parent = near = scores = None  # each pool row's near-copy representative and similarity, reference score
        if encoder is not None and similarity is not None:
            t0 = time.perf_counter()
            from siftcli.curate.semantic import near_copies

            vectors = np.concatenate(embedded) if embedded else np.zeros((0, 1), np.float16)
            embedded = []
            parent, near, compared = near_copies(vectors, similarity, recipe.seed)
            out.search = dd.SearchCounts(rows=n, checked=compared, near_copies=int((parent != np.arange(n)).sum()))
            chosen = np.flatnonzero(parent == np.arange(n))
            phases["near-copies"] = time.perf_counter() - t0
            out.dedup_kept = len(chosen)
        if sketches is not None:
            t0 = time.perf_counter()
            out.search = dd.SearchCounts()
            pairs = dd.candidates(sketches, similarity, out.search)
            sketches = None

            def bigrams(wanted: np.ndarray) -> dd.Sets:
                per_chunk = [(k, int(firsts[k]), wanted[(wanted >= firsts[k]) & (wanted < firsts[k + 1])])
                             for k in range(len(scans))]
                todo = [j for j in per_chunk if len(j[2])]
                return dd.Sets.join(list(engine.map(chunk_bigrams, todo, len(todo))))

            near = np.full(n, np.nan, dtype=np.float32) if report else None
            parent = dd.clusters(pairs, n, bigrams, similarity, out.search, similarity=near)
            chosen = np.flatnonzero(parent == np.arange(n))
            phases["near-copies"] = time.perf_counter() - t0
            out.dedup_kept = len(chosen)
        if kind is not None:
            t0 = time.perf_counter()
            reference = _fit(kind, recipe, holdout, column, tokenizer, scans, total)
            jobs3 = [(k, scan.labels, reference) for k, scan in enumerate(scans)]
            scores = np.concatenate(list(engine.map(score_chunk, jobs3, len(jobs3)))) if scans else np.zeros(0, np.float32)
            chosen = chosen[lowest(scores[chosen], keep)]
            phases["reference"] = time.perf_counter() - t0
        out.rows = rows[chosen]
        if report:
            kept = np.zeros(n, bool)
            kept[chosen] = True
            finite = scores[chosen][np.isfinite(scores[chosen])] if scores is not None else np.zeros(0)
            out.fates = Fates(rows, kept, parent, near, scores, float(finite.max()) if len(finite) else None,
                              np.concatenate([s.labels for s in scans]) if scans else np.zeros(0, np.int64))
        return out
    finally:
        if work_dir is None:
            shutil.rmtree(folder, ignore_errors=True)


def _fit(kind: str, recipe: Recipe, holdout: Any, column: str, tokenizer: Any, scans: list[Scan],
         total: np.ndarray | None) -> Fitted:
    """The reference fitted on the holdout (and, for relevance, the pool's summed n-gram counts)."""
    if holdout is None or len(holdout) == 0:
        raise empty_holdout(kind)
    from siftcli.workload.data import column_values

    pair = column_values(holdout, recipe.data.text_pair_column) if recipe.data.text_pair_column else None
    head, tail = markers(tokenizer)
    target = strip_markers(from_texts(tokenizer, column_values(holdout, column), recipe.max_length, pair), head, tail)
    try:
        if kind == "ngram":
            ref = Relevance(target, BUCKETS)
            ref.add_counts(total)
            return ref.fitted()
        held_labels = np.asarray(column_values(holdout, "label"), dtype=np.int64)
        pool_labels = distinct(np.concatenate([s.labels for s in scans])) if scans else np.zeros(0, np.int64)
        return LabelFit(target, held_labels, sorted(set(held_labels.tolist()) | set(pool_labels.tolist())), BUCKETS).fitted()
    except ValueError as exc:
        raise SiftcliError(f"sift.reference.kind {kind}: {exc}") from None


def lowest(scores: Any, keep: float) -> np.ndarray:
    """Positions of the ``keep`` fraction (at least one) with the lowest score, ties by position, non-finite last, in
    position order. The one rule of every static filter: the streamed filter's scores (numpy), the in-memory filter's
    and the arms' reference losses (a CPU tensor)."""
    scores = np.asarray(scores)
    if len(scores) == 0:
        return np.zeros(0, dtype=np.int64)
    k = max(1, int(round(keep * len(scores))))
    ranked = np.where(np.isfinite(scores), scores.astype(np.float32), np.float32(np.inf))
    return np.sort(np.argsort(ranked, kind="stable")[:k])


def streamable(recipe: Recipe, keep: float | None) -> str | None:
    """Why the recipe's filter cannot take the streamed path (then it takes the in-memory one), or None when it can."""
    from siftcli.tasks import TASKS

    if TASKS[recipe.task].inputs != "text" or TASKS[recipe.task].labels == "tokens":
        return f"task {recipe.task} is not text classification or regression"
    if keep is not None and recipe.sift.reference.kind not in STREAMED_REFERENCES:
        return f"sift.reference.kind {recipe.sift.reference.kind} trains or loads a model"
    if recipe.data.label_noise:
        return "data.label_noise flips labels in memory"
    if recipe.data.augment is not None:
        return "data.augment"
    return None


def recipe_tokenizer(recipe: Recipe) -> Any:
    """The tokenizer training uses (``model.tokenizer``, else the model's source): the filter ranks what the model sees."""
    from siftcli.workload.models import load_tokenizer

    m = recipe.model
    tok_source = m.tokenizer or m.source
    if tok_source.startswith("config:"):
        raise SiftcliError("model.tokenizer: a model built from config: needs a tokenizer source (e.g. builtin:minilm)")
    return load_tokenizer(tok_source)


def filter_pool(recipe: Recipe, keep: float | None, similarity: float | None, output: Path, engine: Engine,
                write: Any, report: Path | None = None, encoder: str | None = None,
                work_dir: Path | None = None) -> CurateResult:
    """``siftcli filter`` on the streamed path: the recipe's training rows (as ``siftcli train`` splits them: the same
    evaluation and holdout rows set aside) filtered in chunks on ``engine``; the kept rows written by ``write(rows,
    path)`` with the data's own columns; ``report``: every pool row's decision written there, and its summary."""
    from siftcli.workload.build import splits_from_recipe
    from siftcli.workload.data import column_values
    from siftcli.workload.rows import holdout_split, split_off

    started = time.perf_counter()
    t0 = time.perf_counter()
    splits = splits_from_recipe(recipe)
    tokenizer = recipe_tokenizer(recipe)
    ref = recipe.sift.reference
    held = np.zeros(len(splits.train), dtype=bool)
    holdout = None
    if ref.holdout_fraction:
        _, held_rows = split_off(len(splits.train), ref.holdout_fraction, recipe.seed)
        held[held_rows] = True
        holdout = splits.train.select(held_rows)
    elif ref.holdout_source and keep is not None:
        holdout = holdout_split(recipe, splits.label_names)
    phases = {"read": time.perf_counter() - t0}
    n = int((~held).sum())
    jobs = read_chunks(splits.train, splits.input_column, recipe.data.text_pair_column, held, CHUNK_ROWS)
    with engine:
        done = curate(recipe, Chunks(jobs, splits.input_column, -(-len(splits.train) // CHUNK_ROWS), n), holdout, tokenizer,
                      keep=keep, similarity=similarity, engine=engine, report=report is not None, encoder=encoder,
                      work_dir=work_dir)
    kept = done.rows
    phases.update(done.phases)
    t0 = time.perf_counter()
    output.parent.mkdir(parents=True, exist_ok=True)
    write(splits.train.select(kept.tolist()), output)
    phases["write"] = time.perf_counter() - t0
    result = CurateResult(output=str(output), kept=len(kept), of=n, keep=len(kept) / max(1, n),
                          dedup_similarity=similarity, dedup_kept=done.dedup_kept, dedup_search=done.search,
                          dedup_by=done.dedup_by, reference_kind=ref.kind if keep is not None else None, engine=engine.kind,
                          workers=engine.workers, phases=phases)
    if recipe.data.group_column:
        names = column_values(splits.train.select(kept.tolist()), recipe.data.group_column)
        result.groups = {str(g): names.count(g) / max(1, len(names)) for g in sorted(set(names), key=str)}
    if report is not None and done.fates is not None:
        t0 = time.perf_counter()
        result.summary = report_pool(recipe, splits, done.fates, report)
        phases["report"] = time.perf_counter() - t0
    result.seconds = time.perf_counter() - started
    return result


def report_pool(recipe: Recipe, splits: Any, fates: Fates, path: Path) -> FilterSummary:
    """The report of a pool filtered from a ``datasets`` table (``splits.train``): its id column and texts read from
    the table for the rows asked (a chunk at a time), the summary and the histogram's PNG beside the report."""
    from siftcli.workload.data import column_values

    train, d = splits.train, recipe.data
    if d.id_column is not None and d.id_column not in train.column_names:
        raise SiftcliError(f"data.id_column {d.id_column!r}: no such column in {d.source} (columns: "
                           f"{', '.join(train.column_names)})")
    ids = (lambda rows: column_values(train.select(rows.tolist()), d.id_column)) if d.id_column else None  # noqa: E731
    write_report(path, fates, ids)
    texts = lambda rows: [str(t) for t in column_values(train.select(rows), splits.input_column)]  # noqa: E731
    groups = column_values(train.select(fates.rows.tolist()), d.group_column) if d.group_column else None
    if splits.label_names is None:
        fates.labels = None  # a regression target: no share per label
    summary = summarize(fates, texts, groups, splits.label_names)
    summary.report = str(path)
    summary.plot = plot_histogram(summary, path.with_suffix(".png"))
    return summary
