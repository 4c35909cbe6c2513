"""A chunk of pool rows in, its pass's result out: the jobs ``siftcli filter`` sends to worker processes or a Dask
cluster (:mod:`.engines`). Each is a pure function of its chunk and a shared, read-only :class:`Context`; none imports
torch, transformers or datasets (``tests/test_curate.py`` checks), so a worker starts in a fraction of a second and
holds megabytes, not a deep-learning stack: only near-copies by meaning (``Context.encoder``) load a sentence encoder,
in the worker that embeds (:mod:`.semantic`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from siftcli.curate import dedup as dd
from siftcli.curate.ngram import Fitted, pool_counts
from siftcli.curate.tokens import Tokens, from_texts, strip_markers


@dataclass
class Context:
    """What every job reads, sent once to each worker: how to tokenize (the Rust tokenizer alone: a worker imports
    neither ``transformers`` nor ``datasets``), where chunk files go, the markers to strip for n-grams."""

    tokenizer: Any  # tokenizers.Tokenizer, truncating at max_length (or a transformers tokenizer)
    max_length: int
    folder: str
    head: int | None = None
    tail: int | None = None
    want_sketches: bool = True
    want_counts: bool = True
    encoder: str | None = None  # near-copies by meaning: the sentence encoder's folder or hub id (embeddings returned)
    threads: int = 0  # torch threads an embedding worker uses (its share of the cores; 0: torch's default)


@dataclass
class Scan:
    """One chunk's pass-1 result."""

    rows: np.ndarray  # the training rows of the pool in this chunk (source row numbers)
    labels: np.ndarray
    sketches: dd.Sketches | None
    counts: np.ndarray | None
    tokens: int
    embeddings: np.ndarray | None = None  # float16, one row a pool row (with Context.encoder)


def chunk_path(folder: str, k: int) -> Path:
    return Path(folder) / f"chunk-{k:06d}.npz"


def scan_chunk(ctx: Context, job: tuple[int, np.ndarray, list[str], list[str] | None, np.ndarray]) -> Scan:
    """Pass 1 on one chunk (its pool rows' source numbers, texts, pair texts and labels, read by the driving process):
    tokens saved, near-copy sketches and n-gram counts returned."""
    k, rows, texts, pairs, labels = job
    tokens = from_texts(ctx.tokenizer, texts, ctx.max_length, pairs)
    tokens.save(chunk_path(ctx.folder, k))
    embeddings = None
    if ctx.encoder is not None:
        from siftcli.curate.semantic import embed_chunk

        joined = texts if pairs is None else [f"{a} {b}" for a, b in zip(texts, pairs)]
        embeddings = embed_chunk(ctx.folder, k, joined, ctx.encoder, ctx.max_length, ctx.threads)
    return Scan(rows=rows, labels=labels, sketches=dd.sketch(tokens) if ctx.want_sketches else None,
                counts=pool_counts(strip_markers(tokens, ctx.head, ctx.tail)) if ctx.want_counts else None,
                tokens=int(tokens.ids.size), embeddings=embeddings)


def score_chunk(ctx: Context, job: tuple[int, np.ndarray, Fitted]) -> np.ndarray:
    """Pass 3: the fitted reference's score of every pool row in chunk ``k`` (``labels``: the rows' labels, for naive
    Bayes; the reference's arrays, a few megabytes, travel with each job)."""
    k, labels, reference = job
    return reference.score(strip_markers(Tokens.load(chunk_path(ctx.folder, k)), ctx.head, ctx.tail), labels)


def chunk_bigrams(ctx: Context, job: tuple[int, int, np.ndarray]) -> dd.Sets:
    """The distinct bigram hashes of the rows within reach (pool positions) that chunk ``k`` holds."""
    k, first, rows = job
    return dd.bigram_sets(Tokens.load(chunk_path(ctx.folder, k)), rows, first)
