"""A training source read as a stream in (``siftcli filter --stream``: a hub dataset never downloaded whole, a file
never converted to Arrow), the kept rows written by a second pass over it out.

The stream is read twice: once in chunks for the passes of :mod:`siftcli.curate.pipeline` (the same jobs as from an
Arrow table, so the same rows are kept), once to write the kept rows, chosen by their position in the stream. Neither
pass holds more than a chunk of text. What needs every row at once cannot stream and is refused before anything is
read: evaluation rows held out of the training source by ``data.eval_fraction`` (give ``data.eval_source`` or
``data.eval_split``), a holdout drawn from it (``sift.reference.holdout_fraction``; give ``holdout_source``),
``data.max_train_samples`` (a shuffle of the whole source).
"""

from __future__ import annotations

import csv
import json
import math
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from siftcli.curate import pipeline
from siftcli.curate.engines import Engine
from siftcli.curate.pipeline import Chunks, CurateResult, curate, recipe_tokenizer
from siftcli.errors import SiftcliError, first_line
from siftcli.recipe.schema import Recipe
from siftcli.runio import TABLE_KINDS, atomic_write
from siftcli.workload.data import label_id


def stream_refusal(recipe: Recipe, keep: float | None) -> str | None:
    """Why this recipe's filter cannot read its source as a stream, or None."""
    d, ref = recipe.data, recipe.sift.reference
    if not (d.eval_source or d.eval_split):
        return ("data.eval_fraction holds evaluation rows out of the training source, which needs every row at once; "
                "give data.eval_source or data.eval_split")
    if keep is not None and ref.holdout_fraction:
        return "sift.reference.holdout_fraction draws the holdout from every row; give sift.reference.holdout_source"
    if d.max_train_samples:
        return "data.max_train_samples shuffles the whole source; leave it out"
    return None


def _labels(recipe: Recipe, needed: bool) -> Callable[[list], np.ndarray]:
    """Each chunk's labels as class ids by training's own rule (:func:`~siftcli.workload.data.label_id`): names through
    ``data.label_names``, whole numbers within its range (only the naive-Bayes reference reads them; otherwise zeros)."""
    names = recipe.data.label_names
    lookup = {n: i for i, n in enumerate(names or [])}

    def ids(values: list) -> np.ndarray:
        if not needed:
            return np.zeros(len(values), dtype=np.int64)
        return np.array([label_id(v, names, lookup, "training") for v in values], dtype=np.int64)
    return ids


def _batches(stream: Any, source: str, chunk: int) -> Iterator[dict[str, list]]:
    """The stream's rows a chunk at a time (columns to lists); a source that breaks mid-way is one line naming it."""
    it = iter(stream.iter(batch_size=chunk))
    while True:
        try:
            batch = next(it)
        except StopIteration:
            return
        except SiftcliError:
            raise
        except Exception as exc:  # noqa: BLE001  (a parser's or the hub's error: name the source, keep one line)
            raise SiftcliError(f"data.source: cannot read {source!r} as a stream: {first_line(exc, limit=None)}") from None
        yield batch


def stream_chunks(batches: Iterator[dict[str, list]], column: str, pair_column: str | None, label_column: str,
                  labels: Callable[[list], np.ndarray]) -> Iterator[tuple]:
    """Scan jobs from a stream's batches: the same tuples :func:`siftcli.curate.pipeline.read_chunks` makes."""
    at = 0
    for k, batch in enumerate(batches):
        for name in (column, pair_column):
            if name and name not in batch:
                raise SiftcliError(f"data: column {name!r} not found in the train data; available columns: "
                                   f"{', '.join(batch)}")
        texts = batch[column]
        pipeline.check_texts(texts, column)
        n = len(texts)
        lab = labels(batch[label_column]) if label_column in batch else np.zeros(n, dtype=np.int64)
        yield k, np.arange(at, at + n, dtype=np.int64), texts, batch[pair_column] if pair_column else None, lab
        at += n


def _cell(v: Any) -> Any:
    return "" if v is None or (isinstance(v, float) and math.isnan(v)) else v


def write_kept(batches: Iterator[dict[str, list]], kept: np.ndarray, path: Path, group_column: str | None) -> dict[str, int]:
    """The rows at positions ``kept`` (ascending) written with the source's own columns, a batch at a time, atomically;
    returns how many kept rows each ``group_column`` value has."""
    kind = TABLE_KINDS[path.suffix.lower()]
    groups: dict[str, int] = {}

    def write(tmp: Path) -> None:
        with open(tmp, "w", newline="", encoding="utf-8") as fh:
            table = None
            at = 0
            for batch in batches:
                names = list(batch)
                if group_column and group_column not in batch:
                    raise SiftcliError(f"data.group_column: column {group_column!r} not found in the training data; "
                                       f"available columns: {', '.join(names)}")
                n = len(batch[names[0]]) if names else 0
                lo, hi = np.searchsorted(kept, [at, at + n])
                if kind != "jsonl" and table is None:
                    table = csv.writer(fh, delimiter="\t" if kind == "tsv" else ",", lineterminator="\n")
                    table.writerow(names)
                for i in (kept[lo:hi] - at).tolist():
                    row = {c: batch[c][i] for c in names}
                    if group_column:
                        g = str(row.get(group_column))
                        groups[g] = groups.get(g, 0) + 1
                    if kind == "jsonl":
                        fh.write(json.dumps(row, ensure_ascii=False, default=str) + "\n")
                    else:
                        table.writerow([_cell(row[c]) for c in names])
                at += n

    atomic_write(path, write)
    return groups


def filter_stream(recipe: Recipe, keep: float | None, similarity: float | None, output: Path,
                  engine: Engine, encoder: str | None = None) -> CurateResult:
    """``siftcli filter --stream``: the training source read as a stream, filtered in chunks on ``engine`` exactly as the
    Arrow path filters it, the kept rows written by a second pass."""
    from siftcli.tasks import TASKS
    from siftcli.workload.data import stream_train
    from siftcli.workload.rows import holdout_split

    why = stream_refusal(recipe, keep)
    if why is not None:
        raise SiftcliError(f"--stream: {why}")
    started = time.perf_counter()
    d = recipe.data
    column = d.text_column
    kind = recipe.sift.reference.kind if keep is not None else None

    def open_stream() -> Iterator[dict[str, list]]:
        stream = stream_train(d.source, fmt=d.format, config_name=d.config_name, train_split=d.train_split,
                              column_names=d.column_names, revision=d.revision)
        return _batches(stream, d.source, pipeline.CHUNK_ROWS)

    t0 = time.perf_counter()
    tokenizer = recipe_tokenizer(recipe)
    holdout = holdout_split(recipe, d.label_names) if keep is not None else None
    labels = _labels(recipe, kind == "naive-bayes" and TASKS[recipe.task].labels == "class")
    phases = {"read": time.perf_counter() - t0}
    jobs = stream_chunks(open_stream(), column, d.text_pair_column, d.label_column, labels)
    with engine:
        done = curate(recipe, Chunks(jobs, column), holdout, tokenizer, keep=keep, similarity=similarity, engine=engine,
                      encoder=encoder)
    kept, n = done.rows, done.pool
    if n == 0:
        raise SiftcliError(f"data: the training data from {d.source!r} is empty")
    phases.update(done.phases)
    t0 = time.perf_counter()
    output.parent.mkdir(parents=True, exist_ok=True)
    groups = write_kept(open_stream(), kept, output, d.group_column)
    phases["write"] = time.perf_counter() - t0
    result = CurateResult(output=str(output), kept=len(kept), of=n, keep=len(kept) / max(1, n), dedup_similarity=similarity,
                          dedup_kept=done.dedup_kept, dedup_search=done.search, reference_kind=kind, engine=engine.kind,
                          dedup_by=done.dedup_by,
                          workers=engine.workers, phases=phases, source="stream")
    if d.group_column:
        result.groups = {g: c / max(1, len(kept)) for g, c in sorted(groups.items())}
    result.seconds = time.perf_counter() - started
    return result
