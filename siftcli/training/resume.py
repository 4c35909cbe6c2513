"""A run folder and a recipe in, whether the run may continue out: the same data, a recipe that differs only where
that is safe, a reference still kept."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from siftcli.errors import SiftcliError
from siftcli.recipe.reader import load_recipe
from siftcli.recipe.schema import Recipe, recipe_to_yaml
from siftcli.runio import atomic_write_json, atomic_write_text, read_json
from siftcli.sift.sifter import SiftConfig
from siftcli.workload.rows import hash_rows


def reference_not_kept(recipe: Recipe, sift: SiftConfig | None) -> str | None:
    """Why a run cannot resume (its reference would be trained again, on another clock), or None when it can."""
    if sift is None or not sift.uses_reference or recipe.sift.reference.kind == "model" or recipe.sift.reference.cache:
        return None
    return ("with sift.reference.cache false its reference cannot be reused, so this run cannot resume: start over "
            "with another -o folder (and the cache on, to resume next time)")


def data_fingerprint(workload: Any) -> str:
    """SHA-256 of the training and evaluation rows as the run sees them (tokens and labels): what a resume must match."""
    import hashlib

    h = hashlib.sha256()
    for rows in (workload.train_data, workload.eval_data):
        hash_rows(h, rows)
    return h.hexdigest()


def same_data(run_dir: Path, workload: Any) -> None:
    """Refuse to continue a run on data other than the data it started on (a file rewritten in place, say)."""
    path = run_dir / "data_fingerprint.json"
    saved = read_json(path) if path.exists() else None
    if saved is None:
        raise SiftcliError(f"--resume {run_dir}: no data_fingerprint.json (an older siftcli wrote this run), so the data "
                           "cannot be checked against the run's; start the run again")
    if saved.get("sha256") != data_fingerprint(workload):
        raise SiftcliError(f"--resume {run_dir}: the data differs from the data this run started on (a file changed, or "
                           "another source); a resumed run needs the same data; start the run again")


#: The recipe's keys that name a data file: a resume checks each against the fingerprint its folder recorded.
SOURCE_KEYS = ("data.source", "data.eval_source", "sift.reference.holdout_source")
#: The file in a run, plan or sweep folder holding them.
SOURCES_FILE = "sources.json"
#: What the refusal and the docs name as the way past it.
TRUST_FLAG = "--trust-data"


def source_fingerprints(recipe: Recipe) -> dict[str, dict[str, Any]]:
    """Each local data file the recipe names (training, evaluation, holdout): its path, size and SHA-256. A hub data set
    or a built-in source is named with its revision in the recipe itself, which a resume already checks."""
    import hashlib

    out: dict[str, dict[str, Any]] = {}
    for key in SOURCE_KEYS:
        node: Any = recipe
        for part in key.split("."):
            node = getattr(node, part, None)
        path = Path(node) if isinstance(node, str) and node else None
        if path is None or not path.is_file():
            continue
        h = hashlib.sha256()
        with path.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
        out[key] = {"path": str(path.resolve()), "bytes": path.stat().st_size, "sha256": h.hexdigest()}
    return out


def record_sources(folder: Path, recipe: Recipe) -> None:
    """What a later ``--resume`` of this folder holds the data files against (:func:`same_sources`)."""
    atomic_write_json(folder / SOURCES_FILE, source_fingerprints(recipe))


def same_sources(folder: Path, recipe: Recipe, trust: bool = False) -> None:
    """Refuse to resume ``folder`` on a data file that changed since it started, naming the key and the file (``trust``:
    the user's word that the change does not matter; a folder written before fingerprints were kept is not checked)."""
    path = folder / SOURCES_FILE
    if trust or not path.exists():
        return
    saved = read_json(path)
    if not isinstance(saved, dict):
        raise SiftcliError(f"--resume {folder}: {path} is not what siftcli wrote (expected a JSON object); restore it, or "
                           f"pass {TRUST_FLAG} to resume without checking the data")
    now = source_fingerprints(recipe)
    for key, was in saved.items():
        was = was if isinstance(was, dict) else {}
        got = now.get(key)
        if got is not None and got["sha256"] == was.get("sha256"):
            continue
        if got is None:
            what = "is missing"
        elif "bytes" in was:
            what = f"changed ({was['bytes']} bytes then, {got['bytes']} now)"
        else:
            what = "cannot be compared"
        raise SiftcliError(f"--resume {folder}: {key} {was.get('path', '')} {what} since this run started; its finished "
                           f"work was measured on the old file: put it back, start afresh, or pass {TRUST_FLAG} to "
                           "continue on the file as it is now")


# Keys a resumed run may change: they do not touch the schedule, the data order or the saved state.
RESUMABLE_CHANGES = ("eval.", "log_every_steps", "checkpoint_every_steps", "num_workers", "name")


def resumable(recipe: Recipe, run_dir: Path) -> Recipe:
    """The recipe a resume runs: the given one, if it differs from the saved one only where that is safe.

    The first other difference is refused in one line; allowed changes are written to the saved recipe.
    """
    saved_path = run_dir / "recipe.yaml"
    if not saved_path.exists():
        raise SiftcliError(f"--resume {run_dir}: no recipe.yaml in that folder, so nothing says what the run was; "
                           "only a folder siftcli wrote can be resumed")
    saved = load_recipe(saved_path)
    old, new = _flatten(saved.model_dump(mode="json")), _flatten(recipe.model_dump(mode="json"))
    changed = [k for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]
    for key in changed:
        if not key.startswith(RESUMABLE_CHANGES):
            raise SiftcliError(f"--resume {run_dir}: {key} is {old.get(key)!r} in the saved recipe but {new.get(key)!r} now; "
                               f"a resumed run needs the same {key} (only {', '.join(RESUMABLE_CHANGES)} may change)")
    if changed:
        atomic_write_text(saved_path, recipe_to_yaml(recipe))
    return recipe


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict) and v and k != "config_overrides":
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out
