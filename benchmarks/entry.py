"""The record type of a benchmark (:class:`Entry`) and where the repository is: the registry (``entries``) and the
runner (``harness``) both read it, so neither imports the other for it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


OUT = ROOT / "runs" / "bench"


DOC = ROOT / "docs" / "benchmarks.md"


@dataclass(frozen=True)
class Entry:
    """One benchmark: a recipe (path under the repo) with overrides, the arms, which arms are sifted subjects, the
    default number of seeds, and an optional ``prepare()`` that writes the data the recipe reads."""

    name: str
    title: str
    recipe: str
    arms: tuple[str, ...]
    subjects: tuple[str, ...] = ("sifted",)
    overrides: tuple[str, ...] = ()
    seeds: int = 5
    prepare: Callable[[], None] | None = None
    about: str = ""
    aim_ratio: float = 0.5
    extra: dict[str, Any] = field(default_factory=dict)
    opponents: tuple[str, ...] = ("equal-time", "random-keep", "static-filter")  # what a sifted arm must beat: the aim
