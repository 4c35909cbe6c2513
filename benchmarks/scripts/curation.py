"""Filtering at scale, side by side: ``siftcli filter`` (one process, every core, a Dask cluster of 2 local workers)
against datatrove's MinHash deduplication and siftcli before its streamed path, on the same pools.

For each pool shape and size (100k, 300k, 1M rows; ``benchmarks.data.curation_pool``: ``three``, three SST-2/MR
sentences a row, and ``shared``, two SST-2 sentences a row that other rows share, each with 10% planted near-copies
and their original's id in ``copy_of``) every tool runs as its own process, one after another, with a fresh
``datasets`` cache (its Arrow conversion is on the clock, as a user's first run pays it); its wall-clock, the peak
resident memory of its whole process tree and of its largest single process (the driver, or a worker) (psutil,
sampled every 0.1 s) are recorded, and for siftcli the near-copy search's pairs per row. Rows:

- ``siftcli filter --dedup --keep 0.5`` (near-copies out, then the n-gram reference's lowest half of the rest) with
  ``--workers 1``, ``--workers 2`` and ``--engine dask --workers 2``, and ``--workers 1`` with the evaluation rows
  split off the pool (``data.eval_fraction: 0.001``) instead of read from ``eval.csv``;
- ``siftcli filter --stream`` (``--workers 2``): the source read as a stream, twice, as a hub dataset would be;
- ``siftcli filter --dedup`` alone (``--workers 2``): the job datatrove does, and the precision and recall of the rows
  it dropped against the planted copies;
- datatrove's four-stage MinHash dedup (its default configuration: word 5-grams, 14 buckets of 8 hashes) on the same
  rows as 2 JSONL shards, ``LocalPipelineExecutor`` with 2 workers: the same precision and recall (datatrove 0.10
  needs ``pip install datatrove spacy "xxhash<4"``: its English word tokenizer is spaCy's, and it hashes ``str``,
  which xxhash 4 refuses);
- with ``--previous COMMIT``, ``siftcli filter --workers 2`` as that earlier commit had it (what a change bought,
  measured in the same run);
- siftcli before the streamed path (``--before``, a commit; run from a git worktree), up to 300k rows (it holds
  every row in memory: 8 GB and about nine minutes at a million).

MB/s per core is the pool's CSV size over the wall-clock over the cores the tool used.

    python -m benchmarks curation [--sizes 100000 300000 1000000] [--pools three shared] [--runs LABEL ...]
                                  [--before 0c9139a] [--previous COMMIT] [--report-only]
    python -m benchmarks curation --libraries   # the hand-written steps against datasketch and scikit-learn
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.entry import DOC, ROOT

TITLE = "Filtering at scale: siftcli filter beside datatrove"
RESULTS = ROOT / "runs" / "bench-curation" / "results.json"
BEFORE = "0c9139a"  # the last commit whose siftcli filter held every row in memory


def _recipe(folder: Path, out: Path, split_eval: bool = False) -> Path:
    """The benchmark's recipe over ``folder``'s pool: evaluation rows from ``eval.csv``, or (``split_eval``) the
    pool's own 0.1% split off as a recipe without an evaluation file does."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{folder.name}{'-split' if split_eval else ''}.yaml"
    evaluation = "eval_fraction: 0.001" if split_eval else f"eval_source: {folder / 'eval.csv'}"
    path.write_text(f"""# python -m benchmarks curation: the pool {folder.name}
name: {folder.name}
task: text-classification
model:
  source: builtin:minilm
data:
  source: {folder / 'pool.csv'}
  {evaluation}
  label_names: [negative, positive]
max_length: 128
sift:
  reference:
    kind: ngram
    holdout_source: {folder / 'target.csv'}
""")
    return path


@dataclass
class Measured:
    """One command's cost: wall-clock seconds, the peak resident MB of its process tree and of its largest single
    process, its stdout and exit code."""

    wall: float
    peak_mb: float
    process_mb: float
    text: str
    code: int


def measure(cmd: list[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> Measured:
    """Run ``cmd`` and sample its process tree's memory every 0.1 s."""
    import psutil

    t0 = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.PIPE, text=True, env=env, cwd=cwd)
        root, peak, single = psutil.Process(proc.pid), 0, 0
        while proc.poll() is None:
            try:
                sizes = [p.memory_info().rss for p in [root, *root.children(recursive=True)] if p.is_running()]
                peak, single = max(peak, sum(sizes)), max(single, *sizes)
            except (psutil.Error, ValueError):
                pass
            time.sleep(0.1)
        wall = time.perf_counter() - t0
        err = proc.stderr.read() if proc.stderr else ""
        out.seek(0)
        text = out.read()
    if proc.returncode:
        print(f"failed ({proc.returncode}): {' '.join(cmd)}\n{err[-2000:]}", file=sys.stderr)
    return Measured(wall, peak / 2**20, single / 2**20, text, proc.returncode)


def _env(cache: Path) -> dict[str, str]:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "HF_DATASETS_CACHE": str(cache)}


def _planted(folder: Path) -> tuple[set[int], int]:
    """The planted copies' ids and the pool's row count."""
    with (folder / "pool.csv").open(encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    return {i for i, r in enumerate(rows) if int(r["copy_of"]) >= 0}, len(rows)


def _pr(removed: set[int], planted: set[int]) -> tuple[float, float]:
    hit = len(removed & planted)
    return hit / max(1, len(removed)), hit / max(1, len(planted))


def _recall_by_kind(folder: Path, removed: set[int]) -> dict[str, float]:
    """The paraphrase pool's planted copies found, per kind of paraphrase (told from the copy and its original: a
    template around it, the same words in another order, or else words swapped for synonyms)."""
    from benchmarks.data import TEMPLATES

    with (folder / "pool.csv").open(encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    found: dict[str, list[bool]] = {}
    for i, r in enumerate(rows):
        j = int(r["copy_of"])
        if j < 0:
            continue
        copy, original = r["text"], rows[j]["text"]
        kind = "template" if any(t.format(original) == copy for t in TEMPLATES) else \
            "reordered" if sorted(copy.split()) == sorted(original.split()) else "synonyms"
        found.setdefault(kind, []).append(i in removed)
    return {kind: sum(hits) / len(hits) for kind, hits in sorted(found.items())}


def _kept_texts(path: Path) -> list[str]:
    if path.suffix == ".csv":
        with path.open(encoding="utf-8") as f:
            return [r["text"] for r in csv.DictReader(f)]
    return [json.loads(line)["text"] for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _removed_ids(folder: Path, kept: list[str]) -> set[int]:
    """Pool rows not among the kept (a text kept once keeps its first row: later identical rows count as removed)."""
    with (folder / "pool.csv").open(encoding="utf-8") as f:
        texts = [r["text"] for r in csv.DictReader(f)]
    left: dict[str, int] = {}
    for t in kept:
        left[t] = left.get(t, 0) + 1
    removed = set()
    for i, t in enumerate(texts):
        if left.get(t, 0) > 0:
            left[t] -= 1
        else:
            removed.add(i)
    return removed


def siftcli_run(folder: Path, work: Path, args: list[str], label: str, python: list[str] | None = None,
                cwd: Path | None = None, split_eval: bool = False) -> dict[str, Any]:
    recipe = _recipe(folder, work, split_eval)
    out = work / f"{folder.name}-{label}.csv"
    with tempfile.TemporaryDirectory() as cache:
        args = [a.replace("{report}", str(out.with_suffix(".report.parquet"))) for a in args]
        cmd = [*(python or [sys.executable, "-m", "siftcli"]), "filter", str(recipe), "-o", str(out), "--json", *args]
        got = measure(cmd, _env(Path(cache)), cwd)
    doc = json.loads(got.text.strip().splitlines()[-1]) if got.code == 0 and got.text.strip() else {}
    return {"wall": got.wall, "peak_mb": got.peak_mb, "process_mb": got.process_mb, "code": got.code, "result": doc,
            "output": str(out)}


def datatrove_run(folder: Path, work: Path, workers: int = 2) -> dict[str, Any]:
    """datatrove's MinHash dedup in a process of its own (``python -m benchmarks.scripts.curation datatrove ...``)."""
    shards = work / f"{folder.name}-shards"
    if not shards.exists():  # the same rows as JSONL shards, one per worker (datatrove reads a file per task)
        shards.mkdir(parents=True)
        with (folder / "pool.csv").open(encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
        per = -(-len(rows) // workers)
        for k in range(workers):
            with (shards / f"part-{k}.jsonl").open("w", encoding="utf-8") as out:
                for i in range(k * per, min(len(rows), (k + 1) * per)):
                    out.write(json.dumps({"id": str(i), "text": rows[i]["text"]}) + "\n")
    dt = work / f"{folder.name}-datatrove"
    subprocess.run(["rm", "-rf", str(dt)], check=True)
    cmd = [sys.executable, "-m", "benchmarks.scripts.curation", "datatrove", str(shards), str(dt), str(workers)]
    got = measure(cmd, _env(work / "cache"), ROOT)
    removed: set[int] = set()
    for path in (dt / "removed").glob("*.jsonl*"):
        import gzip

        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt", encoding="utf-8") as f:
            removed |= {int(json.loads(line)["id"]) for line in f if line.strip()}
    return {"wall": got.wall, "peak_mb": got.peak_mb, "process_mb": got.process_mb, "code": got.code,
            "removed": sorted(removed)}


def _datatrove_main(shards: str, out: str, workers: int) -> None:
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.dedup import MinhashDedupBuckets, MinhashDedupCluster, MinhashDedupFilter, MinhashDedupSignature
    from datatrove.pipeline.dedup.minhash import MinhashConfig
    from datatrove.pipeline.readers import JsonlReader
    from datatrove.pipeline.writers import JsonlWriter

    cfg = MinhashConfig()
    base = Path(out)
    read = lambda: JsonlReader(shards)  # noqa: E731
    steps = [
        ([read(), MinhashDedupSignature(output_folder=str(base / "sigs"), config=cfg)], workers),
        ([MinhashDedupBuckets(input_folder=str(base / "sigs"), output_folder=str(base / "buckets"), config=cfg)],
         cfg.num_buckets),
        ([MinhashDedupCluster(input_folder=str(base / "buckets"), output_folder=str(base / "remove_ids"), config=cfg)], 1),
        ([read(), MinhashDedupFilter(input_folder=str(base / "remove_ids"),
                                     exclusion_writer=JsonlWriter(str(base / "removed"))),
          JsonlWriter(str(base / "kept"))], workers),
    ]
    for k, (pipeline, tasks) in enumerate(steps):
        LocalPipelineExecutor(pipeline=pipeline, tasks=tasks, workers=workers, logging_dir=str(base / f"logs{k}"),
                              skip_completed=False).run()


def _worktree(work: Path, commit: str) -> Path:
    """A checkout of ``commit`` to run siftcli as it was (``python -m siftcli`` from there)."""
    worktree = work / f"before-{commit}"
    if not worktree.exists():
        subprocess.run(["git", "worktree", "add", "-f", "--detach", str(worktree), commit], check=True, cwd=ROOT,
                       capture_output=True)
    return worktree


#: The siftcli rows of every pool, by label (``--runs`` picks some; ``datatrove``, ``previous`` and ``before`` too).
RUNS = {"siftcli x1": ["--dedup", "--keep", "0.5", "--workers", "1"],
        "siftcli x1 eval_fraction": ["--dedup", "--keep", "0.5", "--workers", "1"],
        "siftcli x2": ["--dedup", "--keep", "0.5", "--workers", "2"],
        "siftcli dask x2": ["--dedup", "--keep", "0.5", "--engine", "dask", "--workers", "2"],
        "siftcli dedup x2": ["--dedup", "--workers", "2"],
        "siftcli stream x2": ["--dedup", "--keep", "0.5", "--workers", "2", "--stream"],
        "siftcli report x2": ["--dedup", "--keep", "0.5", "--workers", "2", "--report", "{report}"],
        "siftcli semantic 0.95 x2": ["--dedup", "--dedup-by", "semantic", "--similarity", "0.95", "--workers", "2"],
        "siftcli semantic 0.9 x2": ["--dedup", "--dedup-by", "semantic", "--similarity", "0.9", "--workers", "2"]}


def _key(shape: str, n: int) -> str:
    """A pool's key in the results (the ``three`` pools keep their bare size, as before the ``shared`` ones)."""
    return str(n) if shape == "three" else f"{shape}-{n}"


def _run(sizes: list[int], before: str | None, previous: str | None = None, pools: tuple[str, ...] = ("three",),
         runs: list[str] | None = None, path: Path = RESULTS) -> dict[str, Any]:
    from benchmarks.data import curation_pool

    work = ROOT / "runs" / "bench-curation"
    results: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
    wanted = set(runs) if runs else {*RUNS, "datatrove", "previous", "before"}
    worktree = _worktree(work, before) if before and "before" in wanted else None
    earlier = _worktree(work, previous) if previous and "previous" in wanted else None
    for shape in pools:
        for n in sizes:
            folder = curation_pool(n, shape=shape)
            planted, rows = _planted(folder)
            size_mb = (folder / "pool.csv").stat().st_size / 2**20
            got: dict[str, Any] = {**results.get(_key(shape, n), {}), "rows": rows, "mb": size_mb,
                                   "planted": len(planted), "shape": shape}
            for label, args in RUNS.items():
                if label in wanted:
                    print(f"{shape} {n} rows: {label}", file=sys.stderr, flush=True)
                    got[label] = siftcli_run(folder, work, args, label.replace(" ", "-"),
                                             split_eval=label.endswith("eval_fraction"))
            for label, args in RUNS.items():  # the same commands on an earlier version: what a change bought
                if earlier is not None and label in (wanted if runs else {"siftcli x2"}):
                    print(f"{shape} {n} rows: {label} ({previous})", file=sys.stderr, flush=True)
                    got[f"{label} ({previous})"] = siftcli_run(
                        folder, work, args, f"previous-{label.replace(' ', '-')}", [sys.executable, "-m", "siftcli"],
                        earlier, split_eval=label.endswith("eval_fraction"))
            for label in ("siftcli dedup x2", "siftcli semantic 0.95 x2", "siftcli semantic 0.9 x2"):  # dedup only: precision
                # and recall of the planted copies
                dedup_out = Path(got.get(label, {}).get("output", "/nonexistent"))
                if label in wanted and dedup_out.exists():
                    removed = _removed_ids(folder, _kept_texts(dedup_out))
                    got[label]["pr"] = _pr(removed, planted)
                    if shape == "paraphrase":
                        got[label]["recall_by_kind"] = _recall_by_kind(folder, removed)
            if "datatrove" in wanted:
                print(f"{shape} {n} rows: datatrove", file=sys.stderr, flush=True)
                dt = datatrove_run(folder, work)
                dt["pr"] = _pr(set(dt.pop("removed")), planted)
                got["datatrove minhash x2"] = dt
            if worktree is not None and n <= 300_000 and shape == "three":
                print(f"{n} rows: siftcli before ({before})", file=sys.stderr, flush=True)
                got[f"siftcli before ({before})"] = siftcli_run(
                    folder, work, ["--dedup", "--keep", "0.5"], "before", [sys.executable, "-m", "siftcli"], worktree)
            results[_key(shape, n)] = got
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(results, indent=1))
    return results


def _timed(fn: Any, repeats: int = 3) -> tuple[float, Any]:
    """The best of ``repeats`` wall-clock seconds of ``fn()`` (the machine is shared: the least disturbed run), and its
    result."""
    best, out = float("inf"), None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def libraries(rows: int = 20_000) -> dict[str, Any]:
    """The hand-written steps against the libraries for the same jobs, on the first ``rows`` rows of the 100k pool,
    in this process: MinHash signatures and LSH candidates (datasketch), the n-gram and naive-Bayes references (the
    hand-written torch counting siftcli used before against scikit-learn's MultinomialNB; HashingVectorizer), and
    numpy's ``np.unique`` against the sort-based ``distinct`` the near-copy search uses."""
    import numpy as np
    from datasketch import MinHash, MinHashLSH
    from sklearn.feature_extraction.text import HashingVectorizer

    from benchmarks.data import curation_pool
    from siftcli.curate import dedup, ngram
    from siftcli.curate.tokens import distinct, from_texts, markers, strip_markers
    from siftcli.workload.models import load_tokenizer

    folder = curation_pool(100_000)
    with (folder / "pool.csv").open(encoding="utf-8") as f:
        data = [r for _, r in zip(range(rows), csv.DictReader(f))]
    texts = [r["text"] for r in data]
    labels = np.array([int(r["label"] == "positive") for r in data])
    with (folder / "target.csv").open(encoding="utf-8") as f:
        target = [r for r in csv.DictReader(f)]
    tok = load_tokenizer("builtin:minilm")
    t_tok, tokens = _timed(lambda: from_texts(tok, texts, 128))
    out: dict[str, Any] = {"rows": rows, "tokenize": t_tok}
    out["siftcli signatures"], _ = _timed(lambda: dedup.signatures(tokens))
    out["siftcli sketches (signatures, bit maps, sizes)"], sk = _timed(lambda: dedup.sketch(tokens))
    hashes, owner = dedup.shingle_hashes(tokens)
    starts = np.r_[0, np.flatnonzero(owner[1:] != owner[:-1]) + 1, len(owner)]
    per_row = [hashes[a:b].tolist() for a, b in zip(starts[:-1], starts[1:])]
    ident = lambda x: x  # noqa: E731  (the same 32-bit bigram hashes: datasketch is timed on its permutations alone)

    def sketch() -> list[Any]:
        found = []
        for h in per_row:
            m = MinHash(num_perm=64, hashfunc=ident)
            m.update_batch(h)
            found.append(m)
        return found

    out["datasketch MinHash.update_batch"], sketches = _timed(sketch, 1)
    out["siftcli candidates"], pairs = _timed(lambda: dedup.candidates(sk, 0.7))

    def lsh() -> int:
        index = MinHashLSH(threshold=0.7, num_perm=64)
        for i, m in enumerate(sketches):
            index.insert(i, m)
        return sum(len(index.query(m)) - 1 for m in sketches) // 2

    out["datasketch MinHashLSH insert+query"], lsh_pairs = _timed(lsh, 1)
    out["pairs"] = {"siftcli (within reach by the bit maps)": int(len(pairs)), "datasketch": int(lsh_pairs)}
    head, tail = markers(tok)
    bare = strip_markers(tokens, head, tail)
    tgt = strip_markers(from_texts(tok, [r["text"] for r in target], 128), head, tail)

    def relevance() -> Any:
        ref = ngram.Relevance(tgt)
        ref.add(bare)
        return ref.scores(bare)

    out["siftcli n-gram relevance (MultinomialNB)"], new = _timed(relevance)
    before = _before_ngram()
    if before is not None:
        rows_t = [{"input_ids": bare.row(i).tolist()} for i in range(len(bare))]
        tgt_t = [{"input_ids": tgt.row(i).tolist()} for i in range(len(tgt))]
        out["hand-written n-gram relevance (before)"], old = _timed(lambda: before.cross_entropy_difference(tgt_t, rows_t), 1)
        out["relevance max abs difference"] = float(np.abs(old.numpy() - new).max())
        held = np.array([int(r["label"] == "positive") for r in target])
        fit = lambda: ngram.LabelFit(tgt, held, [0, 1]).losses(bare, labels)  # noqa: E731
        out["siftcli naive Bayes (MultinomialNB)"], nb_new = _timed(fit)
        tgt_l = [{**r, "labels": int(y)} for r, y in zip(tgt_t, held)]
        rows_l = [{**r, "labels": int(y)} for r, y in zip(rows_t, labels)]
        out["hand-written naive Bayes (before)"], nb_old = _timed(lambda: before.label_losses(tgt_l, rows_l), 1)
        out["naive Bayes max abs difference"] = float(np.abs(nb_old.numpy() - nb_new).max())
    vec = HashingVectorizer(ngram_range=(1, 2), n_features=ngram.BUCKETS, alternate_sign=False, norm=None)
    out["HashingVectorizer on the texts"], _ = _timed(lambda: vec.transform(texts))
    out["siftcli counts on the tokens"], _ = _timed(lambda: ngram.counts(bare))
    codes = np.random.default_rng(0).integers(0, 2**40, 5_000_000)  # pair codes, as many as a million rows' bands give
    out["np.unique on 5M int64"], _ = _timed(lambda: np.unique(codes))
    out["siftcli distinct (a sort) on 5M int64"], _ = _timed(lambda: distinct(codes))
    return out


def _before_ngram() -> Any:
    """siftcli's hand-written n-gram module as it was before scikit-learn took the model (from git), or None."""
    import importlib.util

    done = subprocess.run(["git", "show", f"{BEFORE}:siftcli/arms/ngram.py"], cwd=ROOT, capture_output=True, text=True)
    if done.returncode:
        return None
    path = ROOT / "runs" / "bench-curation" / "before_ngram.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(done.stdout)
    spec = importlib.util.spec_from_file_location("before_ngram", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _section(results: dict[str, Any]) -> list[str]:
    from benchmarks.common import _cpu

    lines = [f"## {TITLE}", "",
             f"`python -m benchmarks curation` ({_cpu()}; every tool a process of its own, one at a time, a fresh "
             "`datasets` cache each; peak = resident memory of the whole process tree). Pools: three SST-2/MR sentences "
             "a row, 10% planted near-copies. `siftcli` rows run `siftcli filter --dedup --keep 0.5` (near-copies out, "
             "then the n-gram reference's lowest half; the tokenizer is MiniLM's, `max_length` 128) unless marked "
             "`dedup`; `stream` adds `--stream` (the CSV read as a stream, twice, as a hub dataset would be); a commit "
             "in brackets is that earlier version, run in the same session; datatrove runs its four-stage MinHash dedup "
             "(word 5-grams, 14 buckets of 8 hashes). Precision and recall are of the dropped rows against the planted copies.", "",
             "| rows | tool | wall s | rows/s | MB/s per core | peak MB | dedup precision | dedup recall | kept |",
             "|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    sizes = {n: got for n, got in results.items() if n.isdigit()}
    for n, got in sorted(sizes.items(), key=lambda kv: int(kv[0])):
        for label, run in got.items():
            if not isinstance(run, dict):
                continue
            cores = 1 if ("x1" in label or "before" in label) else 2
            if run.get("code"):
                lines.append(f"| {int(n):,} | {label} | failed ({run['code']}) | | | | | | |")
                continue
            pr = run.get("pr")
            kept = run.get("result", {}).get("kept")
            lines.append(f"| {int(n):,} | {label} | {run['wall']:.1f} | {got['rows'] / run['wall']:,.0f} | "
                         f"{got['mb'] / run['wall'] / cores:.2f} | {run['peak_mb']:,.0f} | "
                         f"{'' if pr is None else f'{pr[0]:.3f}'} | {'' if pr is None else f'{pr[1]:.3f}'} | "
                         f"{'' if kept is None else f'{kept:,}'} |")
    phases = [(n, got["siftcli x2"]["result"].get("phases")) for n, got in sorted(sizes.items(), key=lambda kv: int(kv[0]))
              if got.get("siftcli x2", {}).get("result")]
    if phases:
        lines += ["", "Where `siftcli filter --workers 2` spends its time (seconds):", "",
                  "| rows | " + " | ".join(phases[0][1]) + " |", "|---:|" + "---:|" * len(phases[0][1])]
        lines += [f"| {int(n):,} | " + " | ".join(f"{v:.1f}" for v in p.values()) + " |" for n, p in phases]
    lib = results.get("libraries")
    if lib:
        lines += ["", f"Hand-written against the libraries for the same jobs, on {lib['rows']:,} rows of the 100k pool "
                  "(`python -m benchmarks curation --libraries`, one process, best of 3 where repeated; tokenizing them "
                  f"took {lib['tokenize']:.1f} s):", "", "| step | seconds |", "|---|---:|"]
        lines += [f"| {k} | {v:.3f} |" for k, v in lib.items() if isinstance(v, float) and "difference" not in k
                  and k != "tokenize"]
        diffs = "; ".join(f"{k}: {v:.2g}" for k, v in lib.items() if "difference" in k)
        lines += ["", f"Candidate pairs: {lib['pairs']}. Scores, scikit-learn against hand-written: {diffs}."]
    return lines


SEARCH_TITLE = "Filtering when rows share text: the near-copy search"
SEARCH_RESULTS = ROOT / "runs" / "bench-curation" / "search.json"


def _search_section(results: dict[str, Any]) -> list[str]:
    """The ``--pools`` runs: each pool shape's rows with the near-copy search's phase, pairs and memory per process."""
    from benchmarks.common import _cpu

    lines = [f"## {SEARCH_TITLE}", "",
             f"`python -m benchmarks curation --pools three shared --sizes 1000000 --runs ... --previous COMMIT` "
             f"({_cpu()}; every tool a process of its own, one at a time, a fresh `datasets` cache each). Pools: "
             "`three`, three SST-2/MR sentences of 8-20 words a row, copies by a small edit (the pool of the section "
             "above); `shared`, two SST-2 sentences of at least six words a row (34,821 distinct, each in about 57 "
             "rows of a million), copies by one inserted word; 10% planted near-copies each. `siftcli` rows run "
             "`siftcli filter --dedup --keep 0.5` unless marked `dedup`; `eval_fraction` splits 0.1% of the pool off "
             "for evaluation instead of reading `eval.csv`; a commit in brackets is that earlier version, in the same "
             "run. Peak: the process tree; process: its largest single process (the driver). Pairs a row: the distinct "
             "pairs that shared a band / were checked exactly / were near-copies.", "",
             "| pool | rows | tool | wall s | near-copies s | peak MB | process MB | pairs a row | dedup precision | "
             "dedup recall | kept |", "|---|---:|---|---:|---:|---:|---:|---|---:|---:|---:|"]
    for got in results.values():
        if not isinstance(got, dict) or "shape" not in got:
            continue
        for label, run in got.items():
            if not isinstance(run, dict):
                continue
            head = f"| {got['shape']} | {got['rows']:,} | {label} |"
            if run.get("code"):
                lines.append(f"{head} failed ({run['code']}) | | | | | | | |")
                continue
            doc = run.get("result", {})
            near = doc.get("phases", {}).get("near-copies")
            search = doc.get("dedup_search")
            per = "" if not search else " / ".join(f"{search[k] / got['rows']:.2f}" for k in ("band_pairs", "checked",
                                                                                            "near_copies"))
            pr = run.get("pr")
            kept = doc.get("kept")
            lines.append(f"{head} {run['wall']:.1f} | {'' if near is None else f'{near:.1f}'} | {run['peak_mb']:,.0f} | "
                         f"{run.get('process_mb', 0):,.0f} | {per} | {'' if pr is None else f'{pr[0]:.3f}'} | "
                         f"{'' if pr is None else f'{pr[1]:.3f}'} | {'' if kept is None else f'{kept:,}'} |")
    kinds = [(got["rows"], label, run["recall_by_kind"]) for got in results.values() if isinstance(got, dict)
             for label, run in got.items() if isinstance(run, dict) and run.get("recall_by_kind")]
    if kinds:
        names = list(dict.fromkeys(k for _, _, r in kinds for k in r))
        lines += ["", "The paraphrase pool: planted copies found per kind of paraphrase (recall):", "",
                  "| rows | tool | " + " | ".join(names) + " | rows a second |", "|---:|---|" + "---:|" * (len(names) + 1)]
        for rows, label, recall in kinds:
            wall = next(g[label]["wall"] for g in results.values() if isinstance(g, dict) and g.get("rows") == rows
                        and g.get("shape") == "paraphrase")
            lines.append(f"| {rows:,} | {label} | " + " | ".join(f"{recall.get(k, 0):.3f}" for k in names)
                         + f" | {rows / wall:,.0f} |")
    phases = [(got["shape"], label, run["result"]["phases"]) for got in results.values() if isinstance(got, dict)
              and "shape" in got for label, run in got.items() if isinstance(run, dict) and run.get("result", {}).get("phases")
              and label.startswith("siftcli x")]
    if phases:
        names = list(dict.fromkeys(k for _, _, p in phases for k in p))
        lines += ["", "Where the time goes (seconds):", "", "| pool | tool | " + " | ".join(names) + " |",
                  "|---|---|" + "---:|" * len(names)]
        lines += [f"| {shape} | {label} | " + " | ".join(f"{p[k]:.1f}" if k in p else "" for k in names) + " |"
                  for shape, label, p in phases]
    return lines


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["datatrove"]:
        _datatrove_main(argv[1], argv[2], int(argv[3]))
        return 0
    parser = argparse.ArgumentParser(prog="python -m benchmarks curation", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 300_000, 1_000_000])
    parser.add_argument("--pools", nargs="+", default=None, choices=["three", "shared", "paraphrase"],
                        help="pool shapes side by side (their own section and results file); default: the three-sentence "
                             "pool's section")
    parser.add_argument("--runs", nargs="+", default=None,
                        help=f"only these rows: {', '.join(RUNS)}, datatrove, previous, before (default: all)")
    parser.add_argument("--before", default=BEFORE, help="a commit of siftcli to time as it was (empty: skip)")
    parser.add_argument("--previous", default="", help="an earlier streamed commit to time with --workers 2 beside HEAD")
    parser.add_argument("--report-only", action="store_true")
    parser.add_argument("--libraries", action="store_true", help="only the hand-written steps against the libraries")
    parser.add_argument("--out", default=str(DOC))
    opts = parser.parse_args(argv)
    from benchmarks.harness import write_section

    if opts.pools:
        if not opts.report_only:
            # the pools' runs keep their own file: the three-sentence pool's section is not rewritten by them
            _run(opts.sizes, None, opts.previous or None, tuple(opts.pools), opts.runs, SEARCH_RESULTS)
        section = _search_section(json.loads(SEARCH_RESULTS.read_text()))
        write_section(Path(opts.out), SEARCH_TITLE, section)
        print("\n".join(section))
        return 0
    if opts.libraries:
        results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
        results["libraries"] = libraries()
        RESULTS.write_text(json.dumps(results, indent=1))
    elif not opts.report_only:
        results = _run(opts.sizes, opts.before or None, opts.previous or None, ("three",), opts.runs)
    else:
        results = json.loads(RESULTS.read_text())
    section = _section(results)
    write_section(Path(opts.out), TITLE, section)
    print("\n".join(section))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
