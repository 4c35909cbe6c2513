"""Formatting shared by the drivers in :mod:`benchmarks.scripts` (the entries use :mod:`benchmarks.harness`)."""

from __future__ import annotations

import statistics
from pathlib import Path

from benchmarks.harness import write_section as _write_section


def _ms(values: list[float]) -> tuple[float, float] | None:
    if not values:
        return None
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def _fmt(ms: tuple[float, float] | None, fmt: str = "{:.1f}", pct: bool = False) -> str:
    if ms is None:
        return "—"
    mean, std = (100 * ms[0], 100 * ms[1]) if pct else ms
    return f"{fmt.format(mean)} ± {fmt.format(std)}"


def mean_sd(values: list[float | None], scale: float = 1.0, fmt: str = "{:.2f}") -> str:
    """``mean ± std`` of the values present (``None`` skipped), times ``scale``; one value alone; none: —."""
    got = [v * scale for v in values if v is not None]
    return fmt.format(got[0]) if len(got) == 1 else _fmt(_ms(got), fmt)


def _cpu() -> str:
    from benchmarks.harness import machine

    return machine()


def write_section(out: Path, marker: str, section: list[str]) -> None:
    """Replace the section of ``out`` whose heading starts with ``marker`` (``## ...``)."""
    _write_section(out, marker.removeprefix("## "), section)


def publish(out: Path, marker: str, section: list[str], results: Path, minutes: float) -> None:
    """Write the section (:func:`write_section`), print it, and say where it and the results it came from went."""
    write_section(out, marker, section)
    print("\n".join(section))
    print(f"wrote {out} and {results} ({minutes:.1f} min)")
