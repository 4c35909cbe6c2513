"""Texts or tokenized rows in, one flat id array with row offsets out: the form every curation step reads.

A list of Python lists costs about 40 bytes a token and a loop per row; a flat ``int32`` array with ``n + 1``
offsets costs 4 and lets hashing, counting and scoring run as a handful of numpy operations per chunk of rows.
"""

from __future__ import annotations

import re
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
    if pairs is None and max_length >= 2 and (plan := word_plan(rust)) is not None:
        return _by_words(rust, plan, texts, max_length)
    return _whole(rust, texts if pairs is None else list(zip(texts, pairs)))


def _whole(rust: Any, inputs: list[Any]) -> Tokens:
    """``inputs`` through the whole Rust tokenizer (``encode_batch_fast`` where it has it: no offsets)."""
    encode = getattr(rust, "encode_batch_fast", rust.encode_batch)
    return from_sequences([e.ids for e in encode(inputs)])


@dataclass(frozen=True)
class WordPlan:
    """How a BERT-shaped tokenizer (BERT normalizer, BERT pre-tokenizer, WordPiece, ``[CLS] $A [SEP]``) can be run a
    word at a time: its markers, the rows it can take so (``unsafe`` finds the others), and its WordPiece copy that adds
    no markers and never truncates."""

    head: int
    tail: int
    unsafe: re.Pattern[str]
    words: Any


#: What ends a row in the one split of a chunk's rows (:func:`_by_words`): a NUL, which no row taken so holds.
ROW_END = "\x00"
_WORD_PLANS: dict[int, tuple[Any, WordPlan | None]] = {}  # by the Rust tokenizer's id, kept beside it


def word_plan(rust: Any) -> WordPlan | None:
    """A :class:`WordPlan` where ``rust`` is BERT-shaped, else None.

    Such a tokenizer splits a text on whitespace before anything else (the normalizer works a character at a time, the
    pre-tokenizer splits on whitespace, then on punctuation), so a text's ids are its whitespace-separated words' ids
    one after another, truncated, between the markers: a word is tokenized once per chunk, however often it occurs
    (about 40 words a row and a few thousand distinct ones per thousand rows). Measured at 7.4 of 8.3 s per 100,000 rows
    of the million-row pool in the Rust call alone. The rows taken so are those of printable ASCII with tabs and
    newlines, and none of the characters an added token (``[CLS]``, ``[MASK]``) starts with: there Python's
    ``str.split`` and the BERT normalizer agree on what is whitespace (a control character such as ``\x0b`` is removed
    by one and split on by the other), and an added token cannot straddle words. The others go through the whole
    tokenizer."""
    key = id(rust)
    if key in _WORD_PLANS and _WORD_PLANS[key][0] is rust:
        return _WORD_PLANS[key][1]
    import copy
    import json

    plan = None
    try:
        spec = json.loads(rust.to_str())
        post = spec.get("post_processor") or {}
        single = [next(iter(part)) for part in post.get("single", [])]
        if ((spec.get("normalizer") or {}).get("type") == "BertNormalizer"
                and (spec.get("pre_tokenizer") or {}).get("type") == "BertPreTokenizer"
                and (spec.get("model") or {}).get("type") == "WordPiece"
                and post.get("type") == "TemplateProcessing" and single == ["SpecialToken", "Sequence", "SpecialToken"]
                and (spec.get("truncation") or {}).get("direction", "Right") == "Right"):
            marks = [part["SpecialToken"]["id"] for part in post["single"] if "SpecialToken" in part]
            ids = [post["special_tokens"][m]["ids"] for m in marks]
            if all(len(i) == 1 for i in ids):
                starts = {t["content"][0] for t in spec.get("added_tokens", []) if t.get("content")}
                allowed = "".join(c for c in map(chr, range(0x20, 0x7F)) if c not in starts) + "\t\n\r"
                words = copy.deepcopy(rust)
                words.no_truncation()
                words.no_padding()
                plan = WordPlan(ids[0][0], ids[1][0], re.compile(f"[^{re.escape(allowed)}]"), words)
    except (ValueError, KeyError, TypeError, AttributeError):
        plan = None
    _WORD_PLANS[key] = (rust, plan)
    return plan


def _by_words(rust: Any, plan: WordPlan, texts: list[str], max_length: int) -> Tokens:
    """Rows of a BERT-shaped tokenizer assembled from their words' ids (:func:`word_plan`): the same ids as the whole
    tokenizer (``tests/test_curate.py`` holds them equal), rows it cannot take so encoded whole."""
    n = len(texts)
    search = plan.unsafe.search
    other = [i for i, t in enumerate(texts) if search(t) is not None]
    taken = set(other)
    safe = texts if not other else [t for i, t in enumerate(texts) if i not in taken]
    if not safe:
        return _whole(rust, texts)
    # one split of all rows joined by a word no row holds (a NUL: not printable) is a third of the time of a split each
    words = f" {ROW_END} ".join(safe).split()
    words.append(ROW_END)
    distinct_words = list(dict.fromkeys(words))
    where = {w: i for i, w in enumerate(distinct_words)}
    occurrence = np.fromiter(map(where.__getitem__, words), dtype=np.int64, count=len(words))
    ends = np.flatnonzero(occurrence == where[ROW_END])  # each row's end, in words with the row ends counted
    counts = np.diff(np.r_[-1, ends]) - 1
    occurrence = occurrence[occurrence != where[ROW_END]]
    del distinct_words[where[ROW_END]]
    occurrence[occurrence > where[ROW_END]] -= 1
    encoded = plan.words.encode_batch_fast(distinct_words, add_special_tokens=False) if distinct_words else []
    word_len = np.fromiter((len(e.ids) for e in encoded), dtype=np.int64, count=len(encoded))
    word_start = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum(word_len, out=word_start[1:])
    word_ids = np.fromiter(chain.from_iterable(e.ids for e in encoded), dtype=np.int64, count=int(word_start[-1]))
    # every occurrence's ids, one after another: token k of the stream is word_ids[its word's start + k's place in it]
    lens = word_len[occurrence]
    stream_start = np.zeros(len(lens) + 1, dtype=np.int64)
    np.cumsum(lens, out=stream_start[1:])
    total = int(stream_start[-1])
    stream = word_ids[np.repeat(word_start[occurrence] - stream_start[:-1], lens) + np.arange(total, dtype=np.int64)]
    # per row: its tokens cut at max_length less the two markers, the markers around them
    rows = len(safe)
    row_of_word = np.repeat(np.arange(rows, dtype=np.int64), counts)
    row_tokens = np.bincount(row_of_word, weights=lens, minlength=rows).astype(np.int64)
    row_start = np.zeros(rows + 1, dtype=np.int64)
    np.cumsum(row_tokens, out=row_start[1:])
    room = max(0, max_length - 2)
    place = np.arange(total, dtype=np.int64) - np.repeat(row_start[:-1], row_tokens)
    kept = stream[place < room]
    kept_len = np.minimum(row_tokens, room)
    out_len = kept_len + 2
    offsets = np.zeros(rows + 1, dtype=np.int64)
    np.cumsum(out_len, out=offsets[1:])
    ids = np.empty(int(offsets[-1]), dtype=np.int64)
    body = np.ones(len(ids), dtype=bool)
    body[offsets[:-1]] = False
    body[offsets[1:] - 1] = False
    ids[offsets[:-1]] = plan.head
    ids[offsets[1:] - 1] = plan.tail
    ids[body] = kept
    tokens = Tokens(ids, offsets)
    if not other:
        return tokens
    return _interleave(tokens, _whole(rust, [texts[i] for i in other]), other, n)


def _interleave(safe: Tokens, other: Tokens, at: list[int], n: int) -> Tokens:
    """``n`` rows: ``other``'s at the positions ``at`` (ascending), ``safe``'s in order at the rest."""
    is_other = np.zeros(n, dtype=bool)
    is_other[at] = True
    lengths = np.empty(n, dtype=np.int64)
    lengths[~is_other], lengths[is_other] = safe.lengths, other.lengths
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    ids = np.empty(int(offsets[-1]), dtype=np.int64)
    mark = np.repeat(is_other, lengths)
    ids[~mark], ids[mark] = safe.ids, other.ids
    return Tokens(ids, offsets)


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
