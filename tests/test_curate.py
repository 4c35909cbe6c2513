"""The streamed filter keeps exactly the rows the in-memory one keeps, whatever runs its chunks: one process, a pool of
processes, or a Dask cluster of two workers."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
import yaml

import siftcli.curate.pipeline as pipeline
from siftcli.commands import _filter_in_memory, run_filter
from siftcli.curate import dedup
from siftcli.curate.engines import Engine
from siftcli.curate.tokens import backend, from_sequences, from_texts, markers, strip_markers
from siftcli.errors import SiftcliError
from siftcli.recipe.schema import validate_recipe
from siftcli.workload.models import load_tokenizer
from tests.conftest import tiny_recipe_dict

WORDS = ("film movie plot actor scene story great awful dull bright slow quick funny sad long short music score light "
         "dark warm cold tale hero villain ending start middle twist").split()


def _pool(tmp_path: Path, rows: int = 300, copies: int = 60, seed: int = 0) -> Path:
    """Distinct sentences, some repeated with one word dropped or doubled (near-copies), a holdout of another mix."""
    rng = random.Random(seed)
    texts = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 14))) for _ in range(rows)]
    for _ in range(copies):
        words = rng.choice(texts[:rows]).split()
        i = rng.randrange(len(words))
        words.insert(i, words[i]) if rng.random() < 0.5 else words.pop(i)
        texts.insert(rng.randrange(len(texts)), " ".join(words))
    pool = tmp_path / "pool.csv"
    pool.write_text("text,label\n" + "".join(f"{t},{rng.randint(0, 1)}\n" for t in texts))
    target = tmp_path / "target.csv"
    target.write_text("text,label\n" + "".join(f"{' '.join(rng.choice(WORDS[:10]) for _ in range(6))},{i % 2}\n"
                                               for i in range(40)))
    return tmp_path


def _recipe(folder: Path, **changes: object):
    raw = tiny_recipe_dict(folder / "pool.csv", **{"data.eval_source": str(folder / "target.csv"), **changes})
    (folder / "r.yaml").write_text(yaml.safe_dump(raw))
    return validate_recipe(raw)


REFERENCES = [
    {"sift.reference.kind": "ngram", "sift.reference.holdout_source": "{target}"},
    {"sift.reference.kind": "naive-bayes", "sift.reference.holdout_fraction": 0.2},
]


@pytest.mark.parametrize("reference", REFERENCES, ids=["ngram-holdout-source", "naive-bayes-holdout-fraction"])
def test_the_streamed_filter_keeps_the_rows_the_in_memory_one_keeps(tmp_path: Path, reference: dict,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    folder = _pool(tmp_path)
    changes = {k: (v.format(target=folder / "target.csv") if isinstance(v, str) else v) for k, v in reference.items()}
    recipe = _recipe(folder, **changes)
    monkeypatch.setattr(pipeline, "CHUNK_ROWS", 64)  # several chunks, so chunk boundaries are crossed
    memory = _filter_in_memory(recipe, 0.5, 0.7, tmp_path / "memory.csv")
    streamed = run_filter(recipe, 0.5, str(tmp_path / "streamed.csv"), 0.7, engine=Engine(workers=1))
    assert streamed.engine == "processes" and memory.engine == "in-memory"
    assert (tmp_path / "streamed.csv").read_bytes() == (tmp_path / "memory.csv").read_bytes()
    assert (streamed.kept, streamed.of, streamed.dedup_kept) == (memory.kept, memory.of, memory.dedup_kept)
    assert streamed.dedup_kept < streamed.of  # the planted near-copies were found


@pytest.mark.parametrize("engine", [Engine(workers=2), pytest.param(Engine("dask", workers=2), marks=pytest.mark.slow)],
                         ids=["processes-x2", "dask-local-cluster-x2"])
def test_a_pool_of_processes_and_a_dask_cluster_keep_exactly_the_rows_one_process_keeps(
        tmp_path: Path, engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = _pool(tmp_path, rows=400)
    recipe = _recipe(folder, **{"sift.reference.kind": "ngram", "sift.reference.holdout_source": str(folder / "target.csv")})
    monkeypatch.setattr(pipeline, "CHUNK_ROWS", 50)
    one = run_filter(recipe, 0.3, str(tmp_path / "one.csv"), 0.7, engine=Engine(workers=1))
    many = run_filter(recipe, 0.3, str(tmp_path / "many.csv"), 0.7, engine=engine)
    assert (many.engine, many.workers) == (engine.kind, 2)
    assert (tmp_path / "many.csv").read_bytes() == (tmp_path / "one.csv").read_bytes()
    assert many.kept == one.kept == round(0.3 * one.dedup_kept)  # the cut is over the whole pool, not per worker


STREAMED = [
    ({"sift.reference.kind": "ngram", "sift.reference.holdout_source": "{target}"}, 0.5, 0.7),
    ({"sift.reference.kind": "naive-bayes", "sift.reference.holdout_source": "{target}"}, 0.4, None),
    ({}, None, 0.7),
]


@pytest.mark.parametrize("changes,keep,similarity", STREAMED, ids=["ngram-and-dedup", "naive-bayes", "dedup-only"])
def test_a_source_read_as_a_stream_keeps_and_writes_what_the_arrow_path_does(
        tmp_path: Path, changes: dict, keep: float | None, similarity: float | None,
        monkeypatch: pytest.MonkeyPatch) -> None:
    folder = _pool(tmp_path)
    recipe = _recipe(folder, **{k: v.format(target=folder / "target.csv") for k, v in changes.items()})
    monkeypatch.setattr(pipeline, "CHUNK_ROWS", 64)  # several chunks on both passes
    table = run_filter(recipe, keep, str(tmp_path / "table.csv"), similarity, engine=Engine(workers=1))
    streamed = run_filter(recipe, keep, str(tmp_path / "stream.csv"), similarity, engine=Engine(workers=2), stream=True)
    assert (table.source, streamed.source) == ("table", "stream")
    assert (streamed.kept, streamed.of, streamed.dedup_kept) == (table.kept, table.of, table.dedup_kept)
    assert (tmp_path / "stream.csv").read_bytes() == (tmp_path / "table.csv").read_bytes()
    assert streamed.kept < streamed.of


def test_a_stream_keeps_the_sources_own_values_and_counts_groups_on_the_second_pass(tmp_path: Path) -> None:
    folder = _pool(tmp_path, rows=120, copies=0)
    lines = (folder / "pool.csv").read_text().splitlines()
    named = ["text,label,site"] + [f"{t.rsplit(',', 1)[0]},{'pos' if t.endswith('1') else 'neg'},{'ab'[i % 2]}"
                                   for i, t in enumerate(lines[1:])]
    (folder / "named.jsonl").write_text("".join(
        json.dumps(dict(zip(("text", "label", "site"), row.rsplit(",", 2)))) + "\n" for row in named[1:]))
    recipe = _recipe(folder, **{"data.source": str(folder / "named.jsonl"), "data.label_names": ["neg", "pos"],
                                "data.group_column": "site", "sift.reference.kind": "naive-bayes",
                                "sift.reference.holdout_source": str(folder / "target.csv")})
    got = run_filter(recipe, 0.5, str(tmp_path / "kept.jsonl"), None, engine=Engine(workers=1), stream=True)
    rows = [json.loads(line) for line in (tmp_path / "kept.jsonl").read_text().splitlines()]
    assert len(rows) == got.kept == 60 and {r["label"] for r in rows} <= {"neg", "pos"}  # names as the source has them
    assert got.groups == {g: sum(r["site"] == g for r in rows) / 60 for g in ("a", "b")}
    elsewhere = recipe.model_copy(update={"data": recipe.data.model_copy(update={"group_column": "town"})})
    with pytest.raises(SiftcliError, match="data.group_column: column 'town' not found in the training data"):
        run_filter(elsewhere, 0.5, str(tmp_path / "x.jsonl"), None, engine=Engine(workers=1), stream=True)
    assert not (tmp_path / "x.jsonl").exists()  # nothing half-written
    (folder / "empty.jsonl").write_text("")
    empty = recipe.model_copy(update={"data": recipe.data.model_copy(update={"source": str(folder / "empty.jsonl")})})
    with pytest.raises(SiftcliError, match="empty"):
        run_filter(empty, 0.5, str(tmp_path / "x.jsonl"), None, engine=Engine(workers=1), stream=True)
    unnamed = recipe.model_copy(update={"data": recipe.data.model_copy(update={"label_names": None})})
    with pytest.raises(SiftcliError, match="data.label_names: --stream with a label reference needs the label names"):
        run_filter(unnamed, 0.5, str(tmp_path / "x.jsonl"), None, engine=Engine(workers=1), stream=True)
    # training's own rule for ids: with two label names, an id 2 is refused as it is when training reads the file
    (folder / "ids.jsonl").write_text("".join(json.dumps({"text": r["text"], "label": 2 if i == 7 else i % 2, "site": "a"})
                                              + "\n" for i, r in enumerate(rows)))
    ids = recipe.model_copy(update={"data": recipe.data.model_copy(update={"source": str(folder / "ids.jsonl")})})
    with pytest.raises(SiftcliError, match=r"data: label 2 in the training data is not a class id in 0\.\.1"):
        run_filter(ids, 0.5, str(tmp_path / "x.jsonl"), None, engine=Engine(workers=1), stream=True)


@pytest.mark.parametrize("changes,words", [
    ({"data.eval_source": None}, "--stream: data.eval_fraction holds evaluation rows out of the training source"),
    ({"sift.reference.kind": "naive-bayes", "sift.reference.holdout_source": None, "sift.reference.holdout_fraction": 0.2},
     "--stream: sift.reference.holdout_fraction draws the holdout from every row; give sift.reference.holdout_source"),
    ({"data.max_train_samples": 100}, "--stream: data.max_train_samples shuffles the whole source"),
    ({"sift.reference.kind": "holdout"}, "--stream: sift.reference.kind holdout trains or loads a model"),
])
def test_what_needs_every_row_at_once_is_refused_before_the_stream_is_read(tmp_path: Path, changes: dict, words: str) -> None:
    folder = _pool(tmp_path, rows=60, copies=0)
    recipe = _recipe(folder, **{"sift.reference.kind": "ngram", "sift.reference.holdout_source": str(folder / "target.csv"),
                                **changes})
    with pytest.raises(SiftcliError, match=words.replace(".", r"\.")):
        run_filter(recipe, 0.5, str(tmp_path / "x.csv"), 0.7, engine=Engine(workers=1), stream=True)
    assert not (tmp_path / "x.csv").exists()


def test_filter_stream_on_the_command_line_is_one_line_and_exit_2_when_refused(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from siftcli.cli import app

    folder = _pool(tmp_path, rows=80, copies=10)
    _recipe(folder)
    ok = CliRunner().invoke(app, ["filter", str(folder / "r.yaml"), "-o", str(tmp_path / "k.csv"), "--dedup", "--stream",
                                  "--workers", "1", "--json"])
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.output.strip().splitlines()[-1])["source"] == "stream"
    raw = yaml.safe_load((folder / "r.yaml").read_text())
    raw["data"].pop("eval_source")
    (folder / "r.yaml").write_text(yaml.safe_dump(raw))
    bad = CliRunner().invoke(app, ["filter", str(folder / "r.yaml"), "-o", str(tmp_path / "b.csv"), "--dedup", "--stream"])
    assert bad.exit_code == 2 and len(bad.output.strip().splitlines()) == 1 and "data.eval_source" in bad.output, bad.output


def test_a_hub_source_is_streamed_at_the_revision_the_recipe_pins_and_a_local_one_refuses_a_revision(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import datasets

    from siftcli.workload.data import stream_train

    asked: list[tuple] = []

    def hub(source, config=None, **kwargs):  # noqa: ANN001, ANN003, ANN202  (this machine has no hub to ask)
        asked.append((source, config, kwargs))
        return datasets.Dataset.from_dict({"text": ["a b c"], "label": [0]}).to_iterable_dataset()

    monkeypatch.setattr(datasets, "load_dataset", hub)
    rows = list(stream_train("org/pool", config_name="en", train_split="train", revision="4f2e1c"))
    assert rows == [{"text": "a b c", "label": 0}]
    assert asked == [("org/pool", "en", {"split": "train", "streaming": True, "revision": "4f2e1c"})]
    monkeypatch.undo()
    folder = _pool(tmp_path, rows=40, copies=0)
    recipe = _recipe(folder, **{"data.revision": "v1"})
    with pytest.raises(SiftcliError, match="data.revision 'v1': a revision names a hub dataset's commit, tag or branch"):
        run_filter(recipe, None, str(tmp_path / "x.csv"), 0.7, engine=Engine(workers=1), stream=True)
    with pytest.raises(SiftcliError, match="data.revision 'v1'"):
        run_filter(recipe, None, str(tmp_path / "x.csv"), 0.7, engine=Engine(workers=1))


def test_distinct_is_np_unique_and_candidates_are_each_pair_once_lower_first() -> None:
    from siftcli.curate.tokens import distinct

    rng = np.random.default_rng(0)
    for values in (np.zeros(0, np.int64), rng.integers(0, 50, 1000), rng.integers(0, 2**40, 5000, dtype=np.uint64)):
        assert np.array_equal(distinct(values), np.unique(values)) and distinct(values).dtype == values.dtype
    rows = [rng.integers(1, 6, 12).tolist() for _ in range(150)]  # tokens from 5: many shared bands, many pairs
    counts = dedup.SearchCounts()
    pairs = dedup.candidates(dedup.sketch(from_sequences(rows + rows)), 0.7, counts)  # and 150 exact copies
    assert counts.band_pairs > 2 * counts.checked == 2 * len(pairs)  # the bit maps left out pairs that shared a band
    assert (pairs[:, 0] < pairs[:, 1]).all() and len(np.unique(pairs, axis=0)) == len(pairs)
    assert {(i, i + 150) for i in range(150)} <= set(map(tuple, pairs.tolist()))


def test_signatures_are_a_function_of_each_row_so_chunks_and_blocks_do_not_matter() -> None:
    rng = random.Random(1)
    rows = [[rng.randrange(1000, 5000) for _ in range(rng.randrange(0, 40))] for _ in range(500)]
    whole = dedup.signatures(from_sequences(rows))
    parts = np.concatenate([dedup.signatures(from_sequences(rows[i:i + 37])) for i in range(0, 500, 37)])
    assert np.array_equal(whole, parts)
    assert (whole[[i for i, r in enumerate(rows) if not r]] == 0xFFFFFFFF).all()  # an empty row: no bigram at all
    long_last = [[1, 2], [3, 4], list(range(5, 20_000))]  # hashing blocks begin past the last row's first bigram
    assert np.array_equal(dedup.signatures(from_sequences(long_last))[2], dedup.signatures(from_sequences(long_last[2:]))[0])
    whole_sk = dedup.sketch(from_sequences(rows))
    parts_sk = dedup.Sketches.join([dedup.sketch(from_sequences(rows[i:i + 37])) for i in range(0, 500, 37)])
    filled = dedup.Sketches.empty(600)
    for i in range(0, 500, 37):
        filled.put(i, dedup.sketch(from_sequences(rows[i:i + 37])))
    for other in (parts_sk, filled.head(500)):
        assert all(np.array_equal(getattr(whole_sk, f), getattr(other, f)) for f in ("bands", "bits", "sizes"))
    assert np.array_equal(whole_sk.bands, dedup.band_keys(whole))  # duplicate bigrams do not change a minimum
    assert whole_sk.sizes.tolist() == [len(set(zip(r, r[1:]))) if len(r) > 1 else len(r) for r in rows]


def test_texts_tokenize_as_training_does_and_the_markers_come_off() -> None:
    tok = load_tokenizer("builtin:minilm")
    texts = ["a fine film", "", "an awful, awful movie " * 10]
    tokens = from_texts(tok, texts, 16)
    assert [tokens.row(i).tolist() for i in range(3)] == tok(texts, truncation=True, max_length=16)["input_ids"]
    head, tail = markers(tok)
    bare = strip_markers(tokens, head, tail)
    assert [bare.row(i).tolist() for i in range(3)] == [t[1:-1] for t in tok(texts, truncation=True, max_length=16)["input_ids"]]


def test_a_bert_tokenizer_run_a_word_at_a_time_gives_the_whole_tokenizers_ids_on_awkward_rows() -> None:
    """The word-at-a-time path (what makes tokenizing a million rows cheap) must give exactly the ids the whole
    tokenizer gives, or the kept rows change: rows it takes (truncated or not, repeated words, punctuation, long words
    that become [UNK], tabs and newlines) and rows it hands to the whole tokenizer (accents, CJK, control characters
    that are whitespace to Python but removed by BERT, a literal [MASK]) interleaved in one call."""
    from siftcli.curate.tokens import word_plan

    tok = load_tokenizer("builtin:minilm")
    rust = backend(tok, 12)
    assert word_plan(rust) is not None
    texts = ["a fine film", "", "   ", "an awful, awful movie " * 10, "Don't!!! (really)...", "x" * 120 + " ok",
             "tab\there\nnew line\r", "café au lait", "東京 tower", "split\x0bby vt", "a\x1fb", "say [MASK] now",
             "[CLS]", "unbelievably-hyphenated re-release", "a fine film", "UPPER lower MiXeD 12,345.67"]
    for length in (2, 3, 12, 128):
        got = from_texts(tok, texts, length)
        want = tok(texts, truncation=True, max_length=length)["input_ids"]
        assert [got.row(i).tolist() for i in range(len(texts))] == want, length
    for few in ([], ["café"], [""], ["one"]):  # none taken a word at a time, or only those
        assert [r.tolist() for r in map(from_texts(tok, few, 12).row, range(len(few)))] == \
            (tok(few, truncation=True, max_length=12)["input_ids"] if few else [])
    assert word_plan(backend(tok, 12)) is word_plan(rust)


def test_a_tokenizer_that_is_not_bert_shaped_is_run_whole() -> None:
    """A byte-level BPE tokenizer keeps the space inside its tokens: the word-at-a-time path would be wrong there, so
    it is never taken (the whole tokenizer's ids come back)."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    from siftcli.curate.tokens import word_plan

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel()
    assert word_plan(bpe) is None
    assert word_plan(backend(load_tokenizer("builtin:minilm"), 8)) is not None


def test_engine_options_are_checked_in_one_line() -> None:
    with pytest.raises(SiftcliError, match="--engine 'spark': expected one of processes, dask"):
        Engine("spark")
    with pytest.raises(SiftcliError, match="--workers 0: expected at least 1"):
        Engine(workers=0)
    with pytest.raises(SiftcliError, match="--scheduler is a Dask scheduler address: give it with --engine dask"):
        Engine(scheduler="tcp://localhost:8786")


def test_a_chunk_worker_imports_neither_torch_nor_transformers() -> None:
    """The promise that workers start light is kept by a wall, not by reading: the module the engines send jobs from
    imports no deep-learning stack (nor datasets, which reads the pool on the driver)."""
    import subprocess
    import sys

    code = ("import sys, siftcli.curate.chunks, siftcli.curate.engines; "
            "print(sorted(m for m in ('torch', 'transformers', 'datasets') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
