"""A run folder and a recipe in, whether the run may continue out: the same data, a recipe that differs only where
that is safe, a reference still kept."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from siftcli.errors import SiftcliError
from siftcli.recipe.reader import load_recipe
from siftcli.recipe.schema import Recipe, recipe_to_yaml
from siftcli.runio import atomic_write_text, read_json
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
