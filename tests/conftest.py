"""Shared fixtures: tiny models built from a config and tiny data made here, all offline."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
import yaml

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

TINY_BERT = {"hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 32,
             "max_position_embeddings": 64}
POS = ["good", "great", "fine", "lovely", "happy", "nice", "superb", "brilliant"]
NEG = ["bad", "awful", "sad", "poor", "terrible", "ugly", "dull", "horrid"]


def make_text_rows(n: int, seed: int = 0) -> list[tuple[str, int]]:
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        label = rng.randint(0, 1)
        words = [rng.choice(POS if label else NEG)] + [rng.choice(POS + NEG) for _ in range(rng.randint(0, 4))]
        rng.shuffle(words)
        rows.append((" ".join(words), label))
    return rows


@pytest.fixture
def text_csv(tmp_path: Path) -> Path:
    path = tmp_path / "text.csv"
    lines = ["text,label"] + [f"{t},{y}" for t, y in make_text_rows(160)]
    path.write_text("\n".join(lines) + "\n")
    return path


def tiny_recipe_dict(data_path: Path, **changes) -> dict:
    recipe = {
        "name": "tiny",
        "task": "text-classification",
        "model": {"source": "config:bert", "tokenizer": "builtin:minilm", "config_overrides": dict(TINY_BERT)},
        "data": {"source": str(data_path), "eval_fraction": 0.25},
        "max_length": 16,
        "batch_size": 8,
        "epochs": 2,
        "optim": {"lr": 1e-3},
        "eval": {"every_steps": 5, "batch_size": 32},
        "sift": {"enabled": True, "beta": 1.0, "loss_history_length": 32, "sift_delay": 2},
        "device": "cpu",
        "log_every_steps": 2,
    }
    for key, value in changes.items():
        node = recipe
        parts = key.split(".")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = value
    return recipe


@pytest.fixture
def tiny_recipe(tmp_path: Path, text_csv: Path):
    def write(**changes) -> Path:
        path = tmp_path / "recipe.yaml"
        path.write_text("# tiny test recipe\n" + yaml.safe_dump(tiny_recipe_dict(text_csv, **changes)))
        return path

    return write


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test its own reference cache: a test never reads another's references (or the user's). And no PNG plots
    (``SIFTCLI_PLOTS=0``, inherited by the processes a test starts): drawing them cost every run about a second; the
    tests of the plots turn them back on."""
    monkeypatch.setenv("SIFTCLI_CACHE", str(tmp_path_factory.mktemp("cache")))
    monkeypatch.setenv("SIFTCLI_PLOTS", "0")


@pytest.fixture(scope="session")
def postgres_url(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    """A real PostgreSQL server (pgserver ships its binaries on PyPI): the storage several machines share."""
    pgserver = pytest.importorskip("pgserver")
    pytest.importorskip("psycopg")
    server = pgserver.get_server(tmp_path_factory.mktemp("pg"), cleanup_mode="stop")
    yield server.get_uri()
    server.cleanup()
