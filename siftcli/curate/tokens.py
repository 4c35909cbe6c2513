"""Texts or tokenized rows in, one flat id array with row offsets out: the form every curation step reads.

A list of Python lists costs about 40 bytes a token and a loop per row; a flat ``int32`` array with ``n + 1``
offsets costs 4 and lets hashing, counting and scoring run as a handful of numpy operations per chunk of rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Tokens:
    """Rows of token ids: row ``i`` is ``ids[offsets[i]:offsets[i + 1]]``."""

    ids: np.ndarray  # int32 (or int64), every row's ids one after another
    offsets: np.ndarray  # int64, len(rows) + 1, starting at 0

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def row(self, i: int) -> np.ndarray:
        return self.ids[self.offsets[i]:self.offsets[i + 1]]

    def rows_of(self) -> np.ndarray:
        """Each id's row number."""
        return np.repeat(np.arange(len(self), dtype=np.int64), self.lengths)

    def save(self, path: Path) -> None:
        np.savez(path, ids=self.ids, offsets=self.offsets)

    @staticmethod
    def load(path: Path) -> Tokens:
        with np.load(path) as f:
            return Tokens(f["ids"], f["offsets"])


def distinct(values: np.ndarray) -> np.ndarray:
    """The sorted distinct values of a 1-D array. ``np.unique`` does the same, but numpy 2's hashing implementation took
    4.3 s on 5 million int64 where a sort and a comparison take 0.3 s (``python -m benchmarks curation --libraries``,
    numpy 2.4)."""
    s = np.sort(values)
    return s[np.r_[True, s[1:] != s[:-1]]] if s.size else s


def from_sequences(sequences: Sequence[Sequence[int]]) -> Tokens:
    """Rows given as sequences of ids (lists, tensors, arrays)."""
    seqs = [s.tolist() if hasattr(s, "tolist") else s for s in sequences]
    lengths = np.fromiter((len(s) for s in seqs), dtype=np.int64, count=len(seqs))
    offsets = np.zeros(len(seqs) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    ids = np.fromiter(chain.from_iterable(seqs), dtype=np.int64, count=int(offsets[-1]))
    return Tokens(ids, offsets)


def from_texts(tokenizer: Any, texts: list[str], max_length: int, pairs: list[str] | None = None) -> Tokens:
    """Texts through a fast tokenizer exactly as training tokenizes them (markers, truncation). The Rust tokenizer is
    called directly (``encode_batch_fast``, no offsets), with its own truncation set on a copy: the ``transformers``
    wrapper converts every row into Python lists and dicts first, measured here at twice the time for the same ids."""
    rust = backend(tokenizer, max_length)
    if rust is None:
        enc = tokenizer(texts, pairs, truncation=True, max_length=max_length, return_attention_mask=False,
                        return_token_type_ids=False)
        return from_sequences(enc["input_ids"])
    inputs = texts if pairs is None else list(zip(texts, pairs))
    encode = getattr(rust, "encode_batch_fast", rust.encode_batch)
    return from_sequences([e.ids for e in encode(inputs)])


_BACKENDS: dict[tuple[int, int], Any] = {}


def backend(tokenizer: Any, max_length: int) -> Any:
    """A copy of the fast tokenizer's Rust tokenizer truncating at ``max_length`` and never padding (None for a slow
    tokenizer; a Rust tokenizer itself is taken as it is); one per tokenizer and length, so the caller's own tokenizer
    is never changed."""
    if hasattr(tokenizer, "encode_batch") and not hasattr(tokenizer, "backend_tokenizer"):
        return tokenizer
    rust = getattr(tokenizer, "backend_tokenizer", None)
    if rust is None:
        return None
    key = (id(tokenizer), max_length)
    if key not in _BACKENDS:
        import copy

        copied = copy.deepcopy(rust)
        copied.enable_truncation(max_length)
        copied.no_padding()
        _BACKENDS[key] = copied
    return _BACKENDS[key]


def markers(tokenizer: Any) -> tuple[int | None, int | None]:
    """The ids a tokenizer puts first and last on every text (``[CLS]``, ``[SEP]``), or None where it puts none."""
    empty = tokenizer("")["input_ids"]
    return (empty[0] if empty else None), (empty[-1] if len(empty) > 1 else None)


def shared_markers(tokens: Tokens) -> tuple[int | None, int | None]:
    """The first (last) id every non-empty row shares, where rows came without their tokenizer."""
    filled = tokens.lengths > 0
    if not filled.any():
        return None, None
    heads, tails = distinct(tokens.ids[tokens.offsets[:-1][filled]]), distinct(tokens.ids[tokens.offsets[1:][filled] - 1])
    return (int(heads[0]) if heads.size == 1 else None), (int(tails[0]) if tails.size == 1 else None)


def strip_markers(tokens: Tokens, head: int | None, tail: int | None) -> Tokens:
    """Rows without a leading ``head`` and a trailing ``tail`` id: the markers say nothing about a text and would weigh
    most in the shortest ones (a one-token row that is both loses it once)."""
    if tokens.ids.size == 0:
        return tokens
    lengths = tokens.lengths
    keep = np.ones(len(tokens.ids), dtype=bool)
    starts, ends = tokens.offsets[:-1], tokens.offsets[1:] - 1
    cut_head = np.zeros(len(tokens), dtype=bool)
    if head is not None:
        cut_head = (lengths > 0) & (tokens.ids[np.minimum(starts, len(tokens.ids) - 1)] == head)
        keep[starts[cut_head]] = False
    if tail is not None:
        cut_tail = (lengths > cut_head) & (tokens.ids[np.maximum(ends, 0)] == tail)
        keep[ends[cut_tail]] = False
    if keep.all():
        return tokens
    new_lengths = np.bincount(tokens.rows_of()[keep], minlength=len(tokens)).astype(np.int64)
    offsets = np.zeros(len(tokens) + 1, dtype=np.int64)
    np.cumsum(new_lengths, out=offsets[1:])
    return Tokens(tokens.ids[keep], offsets)
