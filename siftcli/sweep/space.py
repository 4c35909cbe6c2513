"""The search space of ``sweep-beta``: parsed from the command line and validated against the recipe before anything
trains (every corner of it must make a valid recipe), then turned into Optuna distributions or a grid."""

from __future__ import annotations

import itertools
import math
from typing import Any

from typing_extensions import TypedDict

from siftcli.analysis.sweep import Params
from siftcli.errors import SiftcliError
from siftcli.recipe.schema import HOLDOUT_KINDS, Recipe, validate_recipe


#: What a sweep may search: sift keys and their kind. ``reference`` takes ``cross-fit``, ``holdout:FRACTION`` (also
#: ``ngram:FRACTION``, ``naive-bayes:FRACTION``) or ``model:SOURCE`` (a reference kind with its one setting);
#: ``reference_epochs`` is ``sift.reference.epochs``.
class ParamSpec(TypedDict, total=False):
    """One searched key: ``kind`` float or int with ``low``, ``high`` and ``log``, or choice with ``values``."""

    kind: str
    low: float
    high: float
    log: bool
    values: list[Any]



#: The searched beta range when neither --betas nor --beta-range is given (log scale).
BETA_RANGE = "0.25:8"
SEARCHABLE = {"beta": "float", "sift_delay_fraction": "float", "loss_history_length": "int", "keep_fraction": "float",
              "prune_fraction": "float", "anneal_fraction": "float", "memory_max_age": "int", "mode": "choice",
              "scoring": "choice", "score": "choice", "memory_refresh": "choice", "reference": "choice",
              "reference_epochs": "float"}

def parse_space(recipe: Recipe, *, betas: str | None, beta_range: str | None,
                params: list[str] | None) -> tuple[dict[str, ParamSpec], bool]:
    """``--betas`` (a grid), ``--beta-range LOW:HIGH`` (log scale) and ``--param key=LOW:HIGH[:log]`` or
    ``key=a,b,c`` as a search space; every bound is validated against the recipe, so a bad space is one line."""
    space: dict[str, ParamSpec] = {}
    grid = betas is not None
    if grid:
        space["beta"] = {"kind": "choice", "values": _numbers("--betas", betas)}
        if any(v <= 0 for v in space["beta"]["values"]):
            raise SiftcliError(f"--betas {betas!r}: every beta must be positive")
    else:
        low, high, _ = _range("--beta-range", beta_range or BETA_RANGE, "float")
        space["beta"] = {"kind": "float", "low": low, "high": high, "log": True}
    for item in params or []:
        key, sep, spec = item.partition("=")
        key = key.strip().removeprefix("sift.")
        if not sep or not spec.strip():
            raise SiftcliError(f"--param {item!r}: expected key=LOW:HIGH or key=a,b,c")
        if key not in SEARCHABLE:
            raise SiftcliError(f"--param {item!r}: {key!r} cannot be searched; searchable: {', '.join(SEARCHABLE)}")
        if key in space:
            raise SiftcliError(f"--param {item!r}: {key} is given twice")
        if ":" in spec and "," not in spec:
            if grid:
                raise SiftcliError(f"--param {item!r}: with --betas (a grid) every --param lists values, such as {key}=a,b")
            low, high, log = _range(f"--param {key}", spec, SEARCHABLE[key])
            space[key] = {"kind": SEARCHABLE[key], "low": low, "high": high, "log": log}
        else:
            values = [v.strip() for v in spec.split(",") if v.strip()]
            space[key] = {"kind": "choice", "values": [_coerce(v, SEARCHABLE[key]) for v in values]}
    for key, spec in space.items():  # every corner of the space must make a valid recipe
        for value in spec["values"] if spec["kind"] == "choice" else (spec["low"], spec["high"]):
            try:
                apply_params(recipe, {key: value})
            except SiftcliError as exc:
                raise SiftcliError(f"search space: {key}={value!r} makes an invalid recipe: {str(exc).split(': ', 1)[-1]}") from None
    return space, grid


def _numbers(flag: str, text: str) -> list[float]:
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise SiftcliError(f"{flag} {text!r}: expected comma-separated numbers such as 0.5,1,2") from None
    if not values or any(not math.isfinite(v) for v in values):
        raise SiftcliError(f"{flag} {text!r}: expected comma-separated finite numbers such as 0.5,1,2")
    if len(set(values)) != len(values):
        raise SiftcliError(f"{flag} {text!r}: a value is given twice")
    return values


def _range(flag: str, text: str, kind: str) -> tuple[float, float, bool]:
    parts = text.split(":")
    log = parts[-1] == "log"
    parts = parts[:-1] if log else parts
    try:
        low, high = (int(p) if kind == "int" else float(p) for p in parts)
    except ValueError:
        raise SiftcliError(f"{flag} {text!r}: expected LOW:HIGH {'integers' if kind == 'int' else 'numbers'} "
                           "(append :log for a log scale)") from None
    if not (math.isfinite(low) and math.isfinite(high) and low < high):
        raise SiftcliError(f"{flag} {text!r}: expected LOW < HIGH")
    if (log or flag == "--beta-range") and low <= 0:
        raise SiftcliError(f"{flag} {text!r}: a log scale needs LOW > 0")
    return low, high, log or flag == "--beta-range"


def _coerce(value: str, kind: str) -> Any:
    try:
        return int(value) if kind == "int" else float(value) if kind == "float" else value
    except ValueError:
        raise SiftcliError(f"--param: {value!r} is not a{'n integer' if kind == 'int' else ' number'}") from None


def apply_params(recipe: Recipe, params: Params) -> Recipe:
    """The recipe with a trial's sift settings (validated: a bad combination is one line)."""
    raw = recipe.model_dump(mode="json")
    params = dict(params)
    reference = raw["sift"]["reference"]
    if "reference" in params:
        kind, _, setting = str(params.pop("reference")).partition(":")
        reference.update(kind=kind, holdout_source=None, holdout_fraction=None, model=None)
        if kind in HOLDOUT_KINDS:
            try:
                reference["holdout_fraction"] = float(setting)
            except ValueError:
                raise SiftcliError(f"sweep trial: reference={kind}:{setting}: expected {kind}:FRACTION such as "
                                   f"{kind}:0.1") from None
        elif kind == "model":
            reference["model"] = setting or None
    if "reference_epochs" in params:
        reference["epochs"] = params.pop("reference_epochs")
    raw["sift"].update(params)
    raw["sift"]["enabled"] = True
    if "sift_delay_fraction" in params:
        raw["sift"]["sift_delay"] = 0
    return validate_recipe(raw, "sweep trial")


def grid_points(settings: Any) -> list[Params]:
    """Every combination of a ``--betas`` grid (empty for a searched space)."""
    if not settings.grid:
        return []
    keys = list(settings.space)
    return [dict(zip(keys, combo)) for combo in itertools.product(*(settings.space[k]["values"] for k in keys))]


def distributions(space: dict[str, ParamSpec]) -> dict[str, Any]:
    import optuna

    out = {}
    for key, s in space.items():
        if s["kind"] == "choice":
            out[key] = optuna.distributions.CategoricalDistribution(s["values"])
        elif s["kind"] == "int":
            out[key] = optuna.distributions.IntDistribution(int(s["low"]), int(s["high"]), log=s["log"])
        else:
            out[key] = optuna.distributions.FloatDistribution(s["low"], s["high"], log=s["log"])
    return out
