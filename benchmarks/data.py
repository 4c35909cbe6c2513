"""Data the benchmark entries derive from ``../shared/data`` (never shipped with siftcli): written under
``runs/bench-data/`` once, the same files for every seed and arm."""

from __future__ import annotations

import csv
import random
from pathlib import Path
from typing import Any

from siftcli.runio import atomic_write, atomic_write_text

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "data"
DATA = ROOT / "runs" / "bench-data"
#: AG News topics carried onto the target's two labels: off-target texts with labels from the target's label set.
TOPIC_LABEL = {"World": "negative", "Business": "negative", "Sports": "positive", "Sci/Tech": "positive"}


def _write(path: Path, rows: list[dict[str, str]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)

    def write(tmp: Path) -> None:
        with tmp.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)

    atomic_write(path, write)


def _built(folder: Path, seed: int, build: Any, rows: Any = None) -> Path:
    """``folder`` of CSV files made once: ``build(rng, rows(rng))`` names them (``rows``: the shuffled MR sentences
    unless given); the pool is written last, so its presence means the set is complete."""
    if (folder / "pool.csv").exists():
        return folder
    rng = random.Random(seed)
    files = build(rng, (rows or _mr_rows)(rng))
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
        news = [{"text": r["text"], "label": TOPIC_LABEL[r["label"]]} for r in _news("alps_train_subset_10k.tsv")]
        rng.shuffle(news)
        pool = [{**r, "domain": "mr"} for r in pool_mr] + [{**r, "domain": "agnews"} for r in news[:off_target]]
        rng.shuffle(pool)
        return {"eval": ev, "holdout": hold, "pool": pool}

    return _built(DATA / f"relevance-{in_domain}-{off_target}-{holdout}-{evaluation}", 20_261_123, build)


def relevance_news(in_domain: int = 600, off_target: int = 1200, holdout: int = 400, evaluation: int = 2000) -> Path:
    """AG News topics are the target (4 classes): ``evaluation`` texts of AG News's test split, a ``holdout`` of AG
    News training texts for the reference, and a pool of ``in_domain`` other AG News training texts mixed with
    ``off_target`` MR sentences, each given a topic drawn uniformly (a scraped pool whose labels come from the target's
    label set but mean nothing for these texts). Column ``domain`` says where each pool row came from. The mirror of
    :func:`relevance`: with four labels a target-trained reference agrees with an off-target label a quarter of the
    time, not half."""
    def build(rng: random.Random, train: list[dict[str, str]]) -> dict[str, list[dict[str, str]]]:
        test = _shuffled_news("alps_test.tsv", rng)
        topics = list(NEXT_TOPIC)
        mr = [{"text": r["text"], "label": rng.choice(topics)} for r in _mr_rows(rng)[:off_target]]
        pool = [{**r, "domain": "agnews"} for r in train[holdout:holdout + in_domain]] + [{**r, "domain": "mr"} for r in mr]
        rng.shuffle(pool)
        return {"eval": test[:evaluation], "holdout": train[:holdout], "pool": pool}

    return _built(DATA / f"relevance-news-{in_domain}-{off_target}-{holdout}-{evaluation}", 20_261_126, build, _shuffled_train_news)


def _news(name: str) -> list[dict[str, str]]:
    """AG News rows of ``../shared/data/ag_news/NAME`` (text TAB topic), in file order."""
    with (SHARED / "ag_news" / name).open(encoding="utf-8") as f:
        return [{"text": row[0].strip(), "label": row[1]} for row in csv.reader(f, delimiter="\t")
                if len(row) == 2 and row[1] in TOPIC_LABEL]


def _shuffled_news(name: str, rng: random.Random) -> list[dict[str, str]]:
    rows = _news(name)
    rng.shuffle(rows)
    return rows


def _shuffled_train_news(rng: random.Random) -> list[dict[str, str]]:
    """The AG News training rows in a seeded order: the ``rows`` of the builders whose target is AG News."""
    return _shuffled_news("alps_train_subset_10k.tsv", rng)


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


#: Class-dependent label noise on AG News: each topic's flipped labels all go to one other topic (the next in this
#: order), the asymmetric "pair" noise of the noisy-label literature; a model that fits it learns a biased boundary.
NEXT_TOPIC = {"World": "Sports", "Sports": "Business", "Business": "Sci/Tech", "Sci/Tech": "World"}


def structured_noise(pool: int = 2000, rate: float = 0.4, holdout: int = 400, evaluation: int = 2000) -> Path:
    """AG News topics with structured (class-dependent) label noise: a pool of ``pool`` training texts in which exactly
    ``rate`` of each topic's texts carry the next topic's label (:data:`NEXT_TOPIC`), a clean ``holdout`` for the
    reference (the small trusted set a careful user labels by hand), and ``evaluation`` clean test texts from AG News's
    test split. Column ``domain`` says whether a pool row's label is ``clean`` or ``flipped``."""
    def build(rng: random.Random, train: list[dict[str, str]]) -> dict[str, list[dict[str, str]]]:
        test = _shuffled_news("alps_test.tsv", rng)
        hold, chosen = train[:holdout], train[holdout:holdout + pool]
        out = []
        for topic in NEXT_TOPIC:
            mine = [r for r in chosen if r["label"] == topic]
            flips = round(rate * len(mine))
            out += [{"text": r["text"], "label": NEXT_TOPIC[topic], "domain": "flipped"} for r in mine[:flips]]
            out += [{**r, "domain": "clean"} for r in mine[flips:]]
        rng.shuffle(out)
        return {"eval": test[:evaluation], "holdout": hold, "pool": out}

    return _built(DATA / f"noise-structured-{pool}-{rate:g}-{holdout}-{evaluation}", 20_261_125, build, _shuffled_train_news)


def fixed_folder(target: str, train: int, evaluation: int = 2000) -> Path:
    """Where :func:`fixed` writes that split (recipes name it before it exists)."""
    if target not in ("mr", "agnews"):
        raise ValueError(f"fixed: target is mr or agnews, got {target!r}")
    return DATA / f"fixed-{target}-{train}-{evaluation}"


def fixed(target: str, train: int, evaluation: int = 2000) -> Path:
    """A plain labelled split of ``target`` (``mr``: sentence polarity; ``agnews``: topics) for distillation on fixed
    inputs: ``train`` training rows (``pool.csv``; teacher and student both learn from them) and ``evaluation`` rows to
    test on (``eval.csv``; for AG News from its test split), disjoint, in one seeded order."""
    def build(rng: random.Random, rows: list[dict[str, str]]) -> dict[str, list[dict[str, str]]]:
        if target == "agnews":
            return {"eval": _shuffled_news("alps_test.tsv", rng)[:evaluation], "pool": rows[:train]}
        return {"eval": rows[:evaluation], "pool": rows[evaluation:evaluation + train]}

    folder = fixed_folder(target, train, evaluation)
    return _built(folder, 20_261_127, build, _shuffled_train_news if target == "agnews" else None)


def unlabeled_sst2() -> Path:
    """SST-2's training sentences without their labels (``runs/bench-data/sst2-unlabeled/train.tsv``): the same rows in
    the same order as ``../shared/data/sst2/train.tsv``, so a seed's ``max_train_samples`` draw picks the same sentences
    as the labelled recipe; distillation from it has only the teacher to learn from (``distill.alpha: 1``)."""
    out = DATA / "sst2-unlabeled" / "train.tsv"
    if not out.exists():
        lines = (SHARED / "sst2" / "train.tsv").read_text(encoding="utf-8").splitlines()
        out.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(out, "\n".join(line.rsplit("\t", 1)[0] for line in lines) + "\n")
    return out


def digits(size: int = 16, evaluation: int = 797) -> Path:
    """scikit-learn's bundled handwritten digits (1,797 8x8 images, 10 classes: a real image set that needs no
    download) as ``save_to_disk`` folders ``train`` and ``eval`` of ``size`` x ``size`` greyscale images (upscaled,
    so a random crop of a padded image moves a digit by whole pixels), split once (seed 0), plus ``processor``: a ViT
    image processor at that size. The digits regime's teacher and student read them (``recipes/benchmarks/digits-*``)."""
    import datasets
    import numpy as np
    from PIL import Image
    from sklearn.datasets import load_digits
    from transformers import ViTImageProcessor

    out = DATA / f"digits-{size}"
    if (out / "train" / "dataset_info.json").exists():
        return out
    bunch = load_digits()
    order = list(range(len(bunch.target)))
    random.Random(0).shuffle(order)
    pixels = (bunch.images * (255 / 16)).round().astype(np.uint8)

    def split(indices: list[int]) -> Any:
        images = [Image.fromarray(pixels[i]).resize((size, size), Image.NEAREST) for i in indices]
        return datasets.Dataset.from_dict({"image": images, "label": [int(bunch.target[i]) for i in indices]})

    out.mkdir(parents=True, exist_ok=True)
    ViTImageProcessor(size={"height": size, "width": size}, image_mean=[0.5] * 3, image_std=[0.5] * 3).save_pretrained(
        out / "processor")
    for name, indices in (("eval", order[:evaluation]), ("train", order[evaluation:])):  # train last: it marks done
        atomic_write(out / name, lambda tmp, indices=indices: split(indices).save_to_disk(str(tmp)), folder=True)
    return out


#: The pool shapes of :func:`curation_pool`: ``three`` (three SST-2/MR sentences of 8 to 20 words a row, copies by a
#: small edit) and ``shared`` (two SST-2 sentences of at least six words, copies by one inserted word; each sentence is in
#: about 57 rows of a million, so rows share text the way web text shares boilerplate).
POOL_SHAPES = ("three", "shared", "paraphrase")


def curation_pool(rows: int, copy_share: float = 0.1, target: int = 2000, evaluation: int = 1000,
                  shape: str = "three") -> Path:
    """A pool for filtering at scale (``python -m benchmarks curation``): ``rows`` texts of which ``copy_share`` are
    planted near-copies of an earlier row. Column ``copy_of`` is the planted row's original (-1 otherwise): the
    dedup's ground truth. ``target.csv`` holds ``target`` MR sentences (the n-gram reference's holdout), ``eval.csv``
    ``evaluation`` others. Written with the csv module in one pass; about 200 bytes a row.

    ``shape`` ``three``: each row three sentences of 8 to 20 words drawn from SST-2 and MR (about 30,000 distinct ones:
    two rows that share one sentence are at a Jaccard similarity of about 0.2, far from a near-copy, and share all
    three about never); a copy is one small edit (a word dropped, doubled or swapped). ``shared``: each row two SST-2
    sentences of at least six words (34,821 distinct, each drawn about 57 times a million rows): a row whose long
    sentence another row shares beside a short one can be within 0.7 bigram Jaccard of it (a near-copy by the metric,
    not planted), and every row shares some band of its signature with rows it is far from: the pool that makes the
    near-copy search's candidates grow with shared text. A copy is its original with one word inserted.
    ``paraphrase``: each row one MR sentence of 8 to 40 words (about 7,000 distinct: pools up to that size), no
    sentence twice; a copy is a paraphrase of an
    earlier row (:func:`_paraphrase`: its clauses or words reordered, words swapped for synonyms, or the sentence put in
    a template): the pool that tells near-copies by meaning from near-copies by wording."""
    if shape not in POOL_SHAPES:
        raise ValueError(f"shape {shape!r}: expected one of {POOL_SHAPES}")
    folder = DATA / (f"curation-{rows}" if shape == "three" else f"curation-{shape}-{rows}")
    if (folder / "pool.csv").exists():
        return folder
    rng = random.Random(43)
    mr = _mr_rows(rng)
    held, other = mr[:target + evaluation], mr[target + evaluation:]
    with (SHARED / "sst2" / "train.tsv").open(encoding="utf-8") as f:
        sst = [r[0].strip() for r in csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)][1:]
    if shape == "three":
        sentences = sorted(s for s in {*sst, *(r["text"] for r in other)} if 8 <= len(s.split()) <= 20)
        per_row, edit = 3, _near_copy
    elif shape == "paraphrase":  # MR's whole sentences only: SST-2's training rows include phrases of each other
        sentences = sorted(s for s in {r["text"] for r in other} if 8 <= len(s.split()) <= 40)
        rng.shuffle(sentences)  # drawn without replacement below: no two originals are the same sentence
        per_row, edit = 1, _paraphrase
    else:
        sentences = sorted(s for s in set(sst) if len(s.split()) >= 6)
        per_row, edit = 2, _inserted
    labels = ("negative", "positive")
    folder.mkdir(parents=True, exist_ok=True)
    _write(folder / "target.csv", held[:target])
    _write(folder / "eval.csv", held[target:])
    originals: list[tuple[int, str]] = []

    def write(tmp: Path) -> None:
        with tmp.open("w", newline="", encoding="utf-8") as f:
            out = csv.writer(f)
            out.writerow(["text", "label", "copy_of"])
            for i in range(rows):
                if originals and rng.random() < copy_share:
                    j = rng.randrange(len(originals))
                    out.writerow([edit(originals[j][1], rng), labels[rng.randrange(2)], originals[j][0]])
                    continue
                text = sentences.pop() if shape == "paraphrase" else " ".join(rng.choice(sentences) for _ in range(per_row))
                originals.append((i, text))
                out.writerow([text, labels[rng.randrange(2)], -1])

    atomic_write(folder / "pool.csv", write)
    return folder


#: Words a paraphrase swaps, both ways (common in film reviews).
SYNONYMS = {"movie": "film", "good": "fine", "bad": "poor", "funny": "amusing", "boring": "dull", "great": "excellent",
            "story": "plot", "beautiful": "lovely", "smart": "clever", "big": "large", "small": "little",
            "often": "frequently", "very": "really", "director": "filmmaker", "actors": "cast", "end": "finish",
            "little": "small", "best": "finest", "worst": "poorest", "characters": "figures", "makes": "renders"}
SYNONYMS.update({v: k for k, v in list(SYNONYMS.items())})
#: Templates a paraphrase puts a sentence in.
TEMPLATES = ("review : {}", "{} -- one viewer 's take", "in short , {}", "my verdict : {}", "{} , or so i thought")


def _paraphrase(text: str, rng: random.Random) -> str:
    """``text`` said another way, one of three kinds at random: the order changed (the two halves around a comma, or
    else two neighbouring words swapped twice), up to three words swapped for synonyms (a template where none has one),
    or the sentence put in a template."""
    words = text.split()
    kind = rng.randrange(3)
    if kind == 0:
        commas = [i for i, w in enumerate(words[1:-1], 1) if w == ","]
        if commas:
            i = rng.choice(commas)
            return " ".join(words[i + 1:] + [","] + words[:i])
        for _ in range(2):
            i = rng.randrange(len(words) - 1)
            words[i], words[i + 1] = words[i + 1], words[i]
        return " ".join(words)
    if kind == 1:
        at = [i for i, w in enumerate(words) if w.lower() in SYNONYMS]
        if at:
            for i in rng.sample(at, min(3, len(at))):
                words[i] = SYNONYMS[words[i].lower()]
            return " ".join(words)
    return rng.choice(TEMPLATES).format(text)


def _inserted(text: str, rng: random.Random) -> str:
    """``text`` with one of its own words inserted at a random place: a near-copy by one word."""
    words = text.split()
    words.insert(rng.randrange(len(words) + 1), rng.choice(words))
    return " ".join(words)


#: SST-2 sentiment carried onto AG News topics: off-target texts with labels from the target's label set.
SENTIMENT_TOPIC = {"negative": "World", "positive": "Sports"}


def agnews_mix(target: int, repeated: int = 0, copies: int = 0, off_target: int = 0, holdout: int = 0,
               evaluation: int = 2000) -> Path:
    """AG News topics are the target (the plan-accuracy regimes, whose small models learn topics from scratch): a pool
    of ``target`` AG News texts, ``repeated`` others ``copies`` times each as near-copies, and ``off_target`` SST-2
    sentences whose sentiment is carried onto two topics (:data:`SENTIMENT_TOPIC`); a ``holdout`` of AG News for the
    cheap references and ``evaluation`` texts of AG News's test split. Column ``domain``: ``agnews``, ``copy`` or
    ``sst2``. Relevance is ``off_target`` alone, redundancy ``repeated`` alone, both compose."""
    def build(rng: random.Random, news: list[dict[str, str]]) -> dict[str, list[dict[str, str]]]:
        test = _shuffled_news("alps_test.tsv", rng)
        hold, pool_news = news[:holdout], news[holdout:holdout + target]
        rep = news[holdout + target:holdout + target + repeated]
        sst = _sst2_rows("train.tsv")
        rng.shuffle(sst)
        pool = [{**r, "domain": "agnews"} for r in pool_news]
        pool += [{"text": _near_copy(r["text"], rng), "label": r["label"], "domain": "copy"} for r in rep for _ in range(copies)]
        pool += [{"text": r["text"], "label": SENTIMENT_TOPIC[r["label"]], "domain": "sst2"} for r in sst[:off_target]]
        rng.shuffle(pool)
        return {"eval": test[:evaluation], **({"holdout": hold} if holdout else {}), "pool": pool}

    name = f"agnews-mix-{target}-{repeated}x{copies}-{off_target}-{holdout}-{evaluation}"
    return _built(DATA / name, 20_261_128, build, _shuffled_train_news)

def _sst2_rows(name: str) -> list[dict[str, str]]:
    lines = (SHARED / "sst2" / name).read_text(encoding="utf-8").splitlines()[1:]
    return [{"text": t.strip(), "label": {"0": "negative", "1": "positive"}[y.strip()]}
            for t, _, y in (line.rpartition("\t") for line in lines) if y.strip() in ("0", "1")]
