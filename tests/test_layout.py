"""The house keeps its shape: every import resolves, imports run one way down the data path, and every benchmark entry
imports and parses its arguments (a name that moved must not break a script nobody ran since)."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent

#: The stages of ``siftcli/``, top (what the user calls) to bottom (what everything uses). A module may import from its
#: own stage or any stage below it, never above: the README's map of the folders says the same.
STAGES = ["__main__", "cli", "commands", "plan", "sweep", "studies", "report", "analysis", "arms", "training", "curate", "workload",
          "recipe", "compat", "integrations", "runio", "parallel", "sift", "tasks", "errors"]


def _sources(*folders: str) -> list[Path]:
    return sorted(p for folder in folders for p in (ROOT / folder).rglob("*.py"))


def _imports(path: Path) -> list[tuple[int, str, list[str]]]:
    """Every ``from X import a, b`` of siftcli or benchmarks in ``path``, at any depth (function bodies included)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] in ("siftcli", "benchmarks"):
            out.append((node.lineno, node.module, [a.name for a in node.names]))
    return out


def _stage(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "siftcli"


@pytest.mark.parametrize("path", _sources("siftcli", "benchmarks", "tests"), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_internal_import_resolves(path: Path) -> None:
    for line, module, names in _imports(path):
        try:
            mod = importlib.import_module(module)
        except ImportError as exc:  # a route to an optional library not installed here (Composer, timm): its own words
            missing = getattr(exc.__cause__, "name", None) or exc.name or ""
            if missing and not missing.startswith(("siftcli", "benchmarks", "tests")):
                continue
            raise
        for name in names:
            if name == "*":
                continue
            found = hasattr(mod, name)
            if not found:
                try:
                    importlib.import_module(f"{module}.{name}")
                    found = True
                except ImportError:
                    pass
            assert found, f"{path.relative_to(ROOT)}:{line}: `from {module} import {name}`: {module} has no {name}"


def test_imports_run_one_way_down_the_data_path() -> None:
    upward = []
    for path in _sources("siftcli"):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        here = _stage(module)
        for line, target, names in _imports(path):
            targets = [f"siftcli.{n}" for n in names] if target == "siftcli" else [target]
            for t in targets:
                there = _stage(t)
                if there == "siftcli" or here == "siftcli" or there == here:
                    continue
                assert here in STAGES and there in STAGES, f"{path.relative_to(ROOT)}: stage {here} or {there} is not in STAGES"
                if STAGES.index(there) < STAGES.index(here):
                    upward.append(f"{path.relative_to(ROOT)}:{line} ({here}) imports {t} ({there})")
    assert not upward, "imports from a lower stage to a higher one:\n" + "\n".join(upward)


def test_every_stage_folder_says_what_comes_in_and_goes_out() -> None:
    for folder in ("recipe", "workload", "curate", "arms", "training", "analysis", "report", "sweep", "plan"):
        doc = ast.get_docstring(ast.parse((ROOT / "siftcli" / folder / "__init__.py").read_text()))
        assert doc and " in, " in doc and " out" in doc, f"siftcli/{folder}: {doc!r} (expected \"X in, Y out: ...\")"


def test_every_benchmark_entry_imports_and_parses_its_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks import entries, harness
    from siftcli.recipe.reader import load_recipe

    for name, module in harness.SCRIPTS.items():
        script = importlib.import_module(module)
        with pytest.raises(SystemExit) as stop:
            script.main(["--help"])
        assert stop.value.code == 0, f"python -m benchmarks {name} --help exited {stop.value.code}"
    for entry in entries.ENTRIES:  # each recipe and its overrides validate (the data is read only when it runs)
        load_recipe(ROOT / entry.recipe, list(entry.overrides))
    assert harness.main([]) == 0
    listed = capsys.readouterr().out
    assert all(e.name in listed for e in entries.ENTRIES) and all(n in listed for n in harness.SCRIPTS)


def test_the_readme_recipe_example_validates() -> None:
    from siftcli.recipe.schema import validate_recipe

    blocks = re.findall(r"```yaml\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    assert blocks, "the README shows a recipe"
    for block in blocks:
        recipe = validate_recipe(yaml.safe_load(block), "README.md")
        assert recipe.sift.enabled


def test_docs_metrics_lists_every_field_of_the_run_record() -> None:
    """docs/metrics.md has a section per record type, and its rows are exactly that type's fields."""
    from typing_extensions import is_typeddict

    import siftcli.training.record as record

    doc = (ROOT / "docs" / "metrics.md").read_text()
    sections = {m.group(1): m.group(2) for m in re.finditer(r"^## (\w+):.*?\n(.*?)(?=^## |\Z)", doc, re.M | re.S)}
    types = {name: t for name, t in vars(record).items() if is_typeddict(t) and t.__module__ == record.__name__}
    assert set(sections) == set(types), f"sections {sorted(sections)} but record types {sorted(types)}"
    for name, t in types.items():
        documented = re.findall(r"^\| `(\w+)` \|", sections[name], re.M)
        assert documented == list(t.__annotations__), f"docs/metrics.md, {name}: {documented} but the type has {list(t.__annotations__)}"


def test_a_run_record_has_exactly_the_fields_its_type_declares(tiny_recipe, tmp_path: Path) -> None:
    """metrics.json as written by a real (tiny, sifted) run: every required field present, nothing undeclared."""
    import json

    from typing_extensions import is_typeddict

    from siftcli.commands import run_train
    from siftcli.recipe.reader import load_recipe
    from siftcli.training.record import KeepStats, RunMetrics

    run_dir, _ = run_train(load_recipe(tiny_recipe(epochs=1)), output=str(tmp_path / "run"))
    written = json.loads((run_dir / "metrics.json").read_text())
    for t, value in ((RunMetrics, written), (KeepStats, written["keep"])):
        assert is_typeddict(t)
        assert t.__required_keys__ <= set(value), f"{t.__name__} misses {sorted(t.__required_keys__ - set(value))}"
        assert set(value) <= set(t.__annotations__), f"{t.__name__} lacks {sorted(set(value) - set(t.__annotations__))}"


def test_every_package_folder_is_installed() -> None:
    """A folder missing from pyproject's list works in a source checkout (editable install) and is absent from a wheel."""
    import tomllib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    folders = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "siftcli").rglob("__init__.py")}
    assert folders <= listed, f"not in pyproject's [tool.setuptools] packages: {sorted(folders - listed)}"
