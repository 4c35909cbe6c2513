"""Near-copies by meaning (``siftcli filter --dedup --dedup-by semantic``): SemDeDup's clustering and pruning, a real
sentence encoder (``builtin:minilm``, installed from PyPI: offline) finding paraphrases MinHash misses, and its bad
input in one line."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from siftcli.cli import app
from siftcli.commands import run_filter
from siftcli.curate.engines import Engine
from siftcli.curate.semantic import embed, encoder_path, near_copies
from siftcli.errors import SiftcliError
from tests.conftest import tiny_recipe_dict


def test_near_copies_keep_the_first_of_each_group_and_say_how_close() -> None:
    rng = np.random.default_rng(0)
    base = rng.normal(size=(6, 16))
    rows = np.concatenate([base, base[[1, 3]] + 0.01 * rng.normal(size=(2, 16)), base[[1]] + 0.02])  # 6, 7, 8: copies
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    parent, similarity, compared = near_copies(rows.astype(np.float16), threshold=0.95, rows_per_cluster=3)
    assert parent.tolist() == [0, 1, 2, 3, 4, 5, 1, 3, 1]
    assert np.isnan(similarity[:6]).all() and (similarity[6:] > 0.95).all()
    assert compared > 0
    alone, _, _ = near_copies(rows[:1].astype(np.float16))
    assert alone.tolist() == [0]


SENTENCES = ["the film is a beautiful and moving story about a family", "a boring movie with bad actors and a dull plot",
             "the director makes a smart and funny comedy", "this is the worst film i have seen this year",
             "great performances lift a small and quiet drama", "an ambitious epic that never finds its footing",
             "the soundtrack is lovely but the pacing drags", "a clever thriller with a twist you will not see coming",
             "the cast is wonderful in a story that feels real", "too long , too loud and far too silly"]
PARAPHRASES = ["review : the film is a beautiful and moving story about a family",  # a template
               "a dull film with poor actors and a boring plot",  # synonyms
               "this year , this is the worst film i have seen"]  # reordered


def _pool(folder: Path) -> Path:
    rng = random.Random(0)
    rows = SENTENCES + PARAPHRASES
    (folder / "pool.csv").write_text("text,label\n" + "".join(f"\"{t}\",{rng.randint(0, 1)}\n" for t in rows))
    (folder / "eval.csv").write_text("text,label\n" + "".join(f"\"{t}\",{i % 2}\n" for i, t in enumerate(SENTENCES)))
    raw = tiny_recipe_dict(folder / "pool.csv", **{"data.eval_source": str(folder / "eval.csv")})
    (folder / "r.yaml").write_text(yaml.safe_dump(raw))
    return folder / "r.yaml"


def test_semantic_dedup_finds_the_paraphrases_minhash_misses(tmp_path: Path) -> None:
    from siftcli.recipe.reader import load_recipe

    recipe = load_recipe(_pool(tmp_path))
    by_words = run_filter(recipe, None, str(tmp_path / "minhash.csv"), 0.7, engine=Engine(workers=1))
    by_meaning = run_filter(recipe, None, str(tmp_path / "semantic.csv"), 0.85, engine=Engine(workers=1),
                            encoder="builtin:minilm", report=str(tmp_path / "why.parquet"))
    assert by_meaning.dedup_by == "semantic" and by_words.dedup_by == "minhash"
    assert by_meaning.of - by_meaning.dedup_kept == 3 > by_words.of - by_words.dedup_kept  # every planted paraphrase
    import pandas as pd

    why = pd.read_parquet(tmp_path / "why.parquet")
    copies = why[why.reason == "near-copy"]
    assert copies["row"].tolist() == [10, 11, 12] and copies["representative"].tolist() == [0, 1, 3]
    assert (copies["similarity"] >= 0.85).all()
    vectors = embed(SENTENCES[:2], encoder_path("builtin:minilm"))
    assert vectors.shape == (2, 384) and np.allclose(np.linalg.norm(vectors.astype(np.float32), axis=1), 1, atol=1e-2)


def test_semantic_dedup_bad_input_is_one_line(tmp_path: Path) -> None:
    recipe = str(_pool(tmp_path))

    def run(*args: str) -> tuple[int, str]:
        out = CliRunner().invoke(app, ["filter", recipe, "-o", str(tmp_path / "k.csv"), *args])
        return out.exit_code, out.output.strip()

    for args, words in [(["--dedup-by", "semantic"], "give --dedup too"),
                        (["--dedup", "--dedup-by", "meaning"], "expected minhash or semantic"),
                        (["--dedup", "--dedup-by", "semantic", "--similarity", "1.5"], "expected a cosine similarity in (0, 1]"),
                        (["--dedup", "--dedup-by", "semantic", "--encoder", str(tmp_path / "nowhere")], "not found")]:
        code, text = run(*args)
        assert code == 2 and words in text and "Traceback" not in text, (args, text)
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "config.json").write_text("{}")
    with pytest.raises(SiftcliError, match="cannot load a sentence encoder"):
        embed(["a text"], str(tmp_path / "empty"))


@pytest.mark.slow
@pytest.mark.parametrize("engine", [Engine(workers=2), Engine("dask", workers=2)], ids=["processes-x2", "dask-x2"])
def test_semantic_dedup_keeps_the_same_rows_on_every_engine(tmp_path: Path, engine: Engine) -> None:
    """The embeddings are a pure function of each chunk: a pool of processes and a Dask cluster keep what one process
    keeps (the kept files are byte-identical)."""
    from siftcli.curate import pipeline
    from siftcli.recipe.reader import load_recipe

    recipe = load_recipe(_pool(tmp_path))
    chunk = pipeline.CHUNK_ROWS
    pipeline.CHUNK_ROWS = 4  # several chunks, so the engines share the work
    try:
        one = run_filter(recipe, None, str(tmp_path / "one.csv"), 0.85, engine=Engine(workers=1), encoder="builtin:minilm")
        many = run_filter(recipe, None, str(tmp_path / "many.csv"), 0.85, engine=engine, encoder="builtin:minilm")
    finally:
        pipeline.CHUNK_ROWS = chunk
    assert one.dedup_kept == many.dedup_kept == len(SENTENCES)
    assert (tmp_path / "one.csv").read_bytes() == (tmp_path / "many.csv").read_bytes()


def test_a_semantic_filter_run_again_in_its_work_dir_reads_back_its_embeddings(tmp_path: Path, monkeypatch) -> None:
    """``--work-dir`` keeps the chunk files: a second run over the same texts embeds nothing (an interrupted filter goes
    on where it stopped), keeps the same rows, and a changed text is embedded afresh (files are named by their texts)."""
    from siftcli.curate import semantic
    from siftcli.recipe.reader import load_recipe

    recipe = load_recipe(_pool(tmp_path))
    calls: list[int] = []
    embed_now = semantic.embed
    monkeypatch.setattr(semantic, "embed", lambda texts, *a, **k: calls.append(len(texts)) or embed_now(texts, *a, **k))
    work = tmp_path / "work"
    first = run_filter(recipe, None, str(tmp_path / "a.csv"), 0.85, engine=Engine(workers=1), encoder="builtin:minilm",
                       work_dir=str(work))
    assert calls == [13] and any(work.glob("embeddings-*.npy"))
    again = run_filter(recipe, None, str(tmp_path / "b.csv"), 0.85, engine=Engine(workers=1), encoder="builtin:minilm",
                       work_dir=str(work))
    assert calls == [13] and again.dedup_kept == first.dedup_kept  # read back, not embedded again
    assert (tmp_path / "a.csv").read_bytes() == (tmp_path / "b.csv").read_bytes()
    (tmp_path / "pool.csv").write_text((tmp_path / "pool.csv").read_text().replace("worst", "poorest"))
    run_filter(recipe, None, str(tmp_path / "c.csv"), 0.85, engine=Engine(workers=1), encoder="builtin:minilm",
               work_dir=str(work))
    assert calls == [13, 13]  # another text: another file
