"""Every shipped recipe parses, validates, and opens with what it is for and how to run it."""

from __future__ import annotations

from pathlib import Path

import pytest

from siftcli.recipe.reader import default_recipe_path, load_recipe

RECIPES = sorted((Path(__file__).resolve().parent.parent / "recipes").rglob("*.yaml"))


def test_there_are_recipes() -> None:
    assert default_recipe_path() in RECIPES
    assert len(RECIPES) >= 2


@pytest.mark.parametrize("path", RECIPES, ids=[p.name for p in RECIPES])
def test_recipe_validates_and_says_how_to_run(path: Path) -> None:
    recipe = load_recipe(path)
    head = path.read_text().splitlines()[:6]
    assert head[0].startswith("# "), "first line must say what the recipe is for"
    assert any("siftcli " in line for line in head if line.startswith("#")), "a comment must give the command"
    assert recipe.sift.beta > 0


GPU_RECIPES = [p for p in RECIPES if p.parent.name == "gpu"]


@pytest.mark.parametrize("path", GPU_RECIPES, ids=[p.name for p in GPU_RECIPES])
def test_gpu_recipes_pass_schema_only_validation_offline(path: Path) -> None:
    """The hub-loading GPU recipes need internet and CUDA to run; CI checks their schema through the CLI."""
    from typer.testing import CliRunner

    from siftcli.cli import app

    out = CliRunner().invoke(app, ["validate", str(path), "--schema-only"])
    assert out.exit_code == 0 and "schema valid" in out.output, out.output
    head = " ".join(path.read_text().splitlines()[:3])
    assert "Hub" in head or "no download" in head  # says whether it needs the Hub
