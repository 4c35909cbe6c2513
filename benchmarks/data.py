"""Data the benchmark entries derive from ``../shared/data`` (never shipped with siftcli): written under
``runs/bench-data/`` once, the same files for every seed and arm."""

from __future__ import annotations

import csv
import random
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "data"
DATA = ROOT / "runs" / "bench-data"
#: AG News topics carried onto the target's two labels: off-target texts with labels from the target's label set.
TOPIC_LABEL = {"World": "negative", "Business": "negative", "Sports": "positive", "Sci/Tech": "positive"}


def _write(path: Path, rows: list[dict[str, str]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with tmp.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    tmp.replace(path)


def _built(folder: Path, seed: int, build: Any) -> Path:
    """``folder`` of CSV files made once from the MR sentences: ``build(rng, shuffled MR rows)`` names them; the pool
    is written last, so its presence means the set is complete."""
    if (folder / "pool.csv").exists():
        return folder
    rng = random.Random(seed)
    files = build(rng, _mr_rows(rng))
    for name in sorted(files, key=lambda n: n == "pool"):
        _write(folder / f"{name}.csv", files[name])
    return folder


def relevance(in_domain: int = 900, off_target: int = 1800, holdout: int = 500, evaluation: int = 2000) -> Path:
    """MR sentence polarity is the target: ``evaluation`` held-out MR sentences to test on, a ``holdout`` of MR for the
    reference, and a pool of ``in_domain`` MR sentences mixed with ``off_target`` AG News texts (topics carried onto
    negative/positive, see :data:`TOPIC_LABEL`). Column ``domain`` says where each pool row came from."""
    def build(rng: random.Random, mr: list[dict[str, str]]) -> dict[str, list[dict[str, str]]]:
        ev, hold = mr[:evaluation], mr[evaluation:evaluation + holdout]
        pool_mr = mr[evaluation + holdout:evaluation + holdout + in_domain]
        news = []
        with (SHARED / "ag_news" / "alps_train_subset_10k.tsv").open(encoding="utf-8") as f:
            for row in csv.reader(f, delimiter="\t"):
                if len(row) == 2 and row[1] in TOPIC_LABEL:
                    news.append({"text": row[0].strip(), "label": TOPIC_LABEL[row[1]]})
        rng.shuffle(news)
        pool = [{**r, "domain": "mr"} for r in pool_mr] + [{**r, "domain": "agnews"} for r in news[:off_target]]
        rng.shuffle(pool)
        return {"eval": ev, "holdout": hold, "pool": pool}

    return _built(DATA / f"relevance-{in_domain}-{off_target}-{holdout}-{evaluation}", 20_261_123, build)


def _near_copy(text: str, rng: random.Random) -> str:
    """One small edit of a sentence (a word dropped, doubled or swapped with its neighbour): what scraped pools repeat."""
    words = text.split()
    if len(words) < 4:
        return text + " ."
    i = rng.randrange(len(words) - 1)
    edit = rng.choice(("drop", "double", "swap"))
    if edit == "drop":
        words.pop(i)
    elif edit == "double":
        words.insert(i, words[i])
    else:
        words[i], words[i + 1] = words[i + 1], words[i]
    return " ".join(words)


def _mr_rows(rng: random.Random) -> list[dict[str, str]]:
    rows = []
    for name, label in (("rt-polarity.neg", "negative"), ("rt-polarity.pos", "positive")):
        text = (SHARED / "mr_sentence_polarity" / name).read_text(encoding="utf-8", errors="replace")
        rows += [{"text": line.strip(), "label": label} for line in text.splitlines() if line.strip()]
    rng.shuffle(rows)
    return rows


def redundancy(distinct: int = 600, repeated: int = 50, copies: int = 12, evaluation: int = 2000) -> Path:
    """MR sentence polarity with redundancy: a pool of ``distinct`` sentences plus ``repeated`` others that appear
    ``copies`` times each, every copy a near-copy (one word dropped, doubled or swapped); ``evaluation`` other MR
    sentences to test on. Column ``domain`` says whether a row is one of the repeated ones (``copy``)."""
    def build(rng: random.Random, mr: list[dict[str, str]]) -> dict[str, list[dict[str, str]]]:
        ev, pool_mr = mr[:evaluation], mr[evaluation:evaluation + distinct]
        rep = mr[evaluation + distinct:evaluation + distinct + repeated]
        pool = [{**r, "domain": "distinct"} for r in pool_mr]
        pool += [{"text": _near_copy(r["text"], rng), "label": r["label"], "domain": "copy"} for r in rep for _ in range(copies)]
        rng.shuffle(pool)
        return {"eval": ev, "pool": pool}

    return _built(DATA / f"redundancy-{distinct}-{repeated}x{copies}-{evaluation}", 20_261_124, build)
