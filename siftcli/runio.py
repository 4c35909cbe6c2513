"""Run folders and atomic writes: nothing a user produced is half-written or lost."""

from __future__ import annotations

import json
import math
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from siftcli.errors import SiftcliError


def _clean(obj: Any) -> Any:
    """JSON has no NaN/Inf: write them as null so every reader can parse the file."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return obj


def atomic_write_text(path: Path, text: str) -> None:
    """Write to a temporary file in the same folder, then rename over the target."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_json(path: Path, data: Any) -> None:
    atomic_write_text(path, json.dumps(_clean(data), indent=2, sort_keys=False) + "\n")


def atomic_torch_save(path: Path, obj: Any) -> None:
    import torch

    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        torch.save(obj, tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_json(path: Path) -> Any:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SiftcliError(f"{path}: not found") from None
    except json.JSONDecodeError as exc:
        raise SiftcliError(f"{path}: not valid JSON (line {exc.lineno}: {exc.msg})") from None


class JsonlLog:
    """Append-only JSON-lines log, flushed per line so an interrupted run keeps every line it wrote.

    A context manager, closed on every exit; with ``path=None`` it writes nothing (runs without a folder).
    """

    def __init__(self, path: Path | None) -> None:
        self.path = Path(path) if path is not None else None
        self._fh = self.path.open("a", encoding="utf-8") if self.path is not None else None

    def write(self, record: dict[str, Any]) -> None:
        if self._fh is not None:
            self._fh.write(json.dumps(_clean(record)) + "\n")
            self._fh.flush()

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()

    def __enter__(self) -> JsonlLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def make_run_dir(output: str | Path | None, name: str, root: str | Path = "runs", suffix: str = "") -> Path:
    """``runs/<name>-<timestamp>/`` unless ``output`` names a folder; checks it is writable."""
    if output is not None:
        path = Path(output)
    else:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        path = Path(root) / f"{name}{suffix}-{stamp}"
        n = 1
        while path.exists():
            n += 1
            path = Path(root) / f"{name}{suffix}-{stamp}-{n}"
    ensure_writable(path)
    return path


def ensure_writable(path: Path) -> None:
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise SiftcliError(f"--output {path}: exists and is not a folder")
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".siftcli-write-test"
        probe.write_text("ok")
        probe.unlink()
    except OSError as exc:
        raise SiftcliError(f"--output {path}: folder is not writable ({exc.strerror or exc})") from None
