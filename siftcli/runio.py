"""Run folders and atomic writes: nothing a user produced is half-written or lost.

Under ``torchrun`` only rank 0 writes (:func:`siftcli.parallel.is_main`): the writers here do nothing on the
other ranks, and the folder checks run on rank 0 with their answer (or error) handed to every rank.
"""

from __future__ import annotations

import atexit
import errno
import json
import math
import os
import re
import shutil
import socket
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from siftcli import parallel
from siftcli.errors import SiftcliError, first_line

Event = Callable[[str, dict[str, Any]], None]  # on_event(kind, data): progress for the CLI, trackers and scripts


def json_safe(obj: Any) -> Any:
    """JSON has no NaN/Inf: write them as null so every reader can parse the file."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return obj


def _default_mode(path: str) -> None:
    """mkstemp creates files 0600 and mkdtemp folders 0700 (and some writers, safetensors among them, write 0600):
    results should get the mode any other file or folder would (0666, or 0777 for a folder, less the umask); a folder's
    contents too."""
    mask = os.umask(0)
    os.umask(mask)
    if os.path.isdir(path):
        os.chmod(path, 0o777 & ~mask)
        for root, folders, files in os.walk(path):
            for name in folders:
                os.chmod(os.path.join(root, name), 0o777 & ~mask)
            for name in files:
                os.chmod(os.path.join(root, name), 0o666 & ~mask)
        return
    os.chmod(path, 0o666 & ~mask)


def atomic_write(path: Path, write: Callable[[Path], None], *, folder: bool = False, every_rank: bool = False) -> None:
    """The one way siftcli writes a result: ``write(tmp)`` fills a temporary file (or, with ``folder``, a folder) beside
    ``path``, which is flushed to disk and renamed over ``path``; on any failure the temporary is removed and ``path``
    is as it was. A writer's own error for a full disk (torch, safetensors: ``RuntimeError``/``ValueError``) becomes
    the ``OSError`` the CLI reports in one line, naming the file. Rank 0 alone writes under torchrun, unless
    ``every_rank`` (a file of each rank's own, such as its loader state)."""
    if not (every_rank or parallel.is_main()):
        return
    path = Path(path)
    if folder:
        tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}."))
    else:
        fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        os.close(fd)
        tmp = Path(name)
    try:
        write(tmp)
        if folder:
            _default_mode(str(tmp))
            if path.exists():
                shutil.rmtree(path)
        else:
            with open(tmp, "rb+") as fh:
                os.fsync(fh.fileno())
            _default_mode(str(tmp))
        os.replace(tmp, path)
    except Exception as exc:
        _remove(tmp)
        if _write_failure(exc):
            raise unwritable(path, exc) from None
        raise
    except BaseException:
        _remove(tmp)
        raise


def _write_failure(exc: Exception) -> bool:
    """Whether a writer's exception is its way of saying the disk refused the bytes: torch's and safetensors' own
    error types (``RuntimeError``, ``ValueError``, ``SafetensorError``) or any that quotes the OS error (the tokenizers
    library's). An ``OSError`` is already one and passes through as it is."""
    if isinstance(exc, OSError):
        return False
    return isinstance(exc, (RuntimeError, ValueError)) or type(exc).__name__ == "SafetensorError" or "os error" in str(exc)


def _remove(tmp: Path) -> None:
    if tmp.is_dir():
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        tmp.unlink(missing_ok=True)


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def atomic_write_json(path: Path, data: Any) -> None:
    atomic_write_text(path, json.dumps(json_safe(data), indent=2, sort_keys=False) + "\n")


def unwritable(path: Any, exc: BaseException) -> OSError:
    """A writer's own error for a file it could not write (torch and safetensors raise RuntimeError on a full disk) as
    the OSError the CLI reports in one line, naming the file."""
    first = first_line(exc, 160, empty="write failed")
    return OSError(errno.EIO, f"could not be written ({first})", str(path))


def atomic_torch_save(path: Path, obj: Any, every_rank: bool = False) -> None:
    import torch

    atomic_write(path, lambda tmp: torch.save(obj, tmp), every_rank=every_rank)


#: Files a set of rows can be written to, by suffix (what ``siftcli filter -o`` and ``siftcli plan`` write).
TABLE_KINDS = {".csv": "csv", ".tsv": "tsv", ".jsonl": "jsonl"}


def write_table(rows: Any, path: Path) -> None:
    """``rows`` (a ``datasets.Dataset``, the data's own columns) written atomically as ``.csv``, ``.tsv`` or ``.jsonl``
    by the file's suffix: ready to be a recipe's ``data.source``."""
    kind = TABLE_KINDS[Path(path).suffix.lower()]
    if kind == "jsonl":
        atomic_write(path, lambda tmp: rows.to_json(str(tmp), lines=True))
    else:
        atomic_write(path, lambda tmp: rows.to_csv(str(tmp), sep="\t" if kind == "tsv" else ",", index=False))


def read_json(path: Path) -> Any:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SiftcliError(f"{path}: not found") from None
    except json.JSONDecodeError as exc:
        raise SiftcliError(f"{path}: not valid JSON (line {exc.lineno}: {exc.msg})") from None


class JsonlLog:
    """JSON-lines log, flushed per line so an interrupted run keeps every line it wrote.

    A new run starts the file afresh (a run killed before its first checkpoint and started again into the same folder
    does not mix its lines with the dead one's). A resumed run (``resume_step``, the checkpoint's step) first drops the
    lines logged after that step, which it is about to log again, then appends: the log reads as one run. A context
    manager, closed on every exit; with ``path=None`` it writes nothing (runs without a folder).
    """

    def __init__(self, path: Path | None, resume_step: int | None = None) -> None:
        self.path = Path(path) if path is not None and parallel.is_main() else None
        if self.path is not None and resume_step is not None and self.path.exists():
            kept = [line for line in self.path.read_text(encoding="utf-8").splitlines(keepends=True)
                    if _logged_step(line) <= resume_step]
            atomic_write_text(self.path, "".join(kept))
        # opened without following a link (a link planted as log.jsonl would truncate the file it points at)
        flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if resume_step is not None else os.O_TRUNC) | getattr(os, "O_NOFOLLOW", 0)
        self._fh = os.fdopen(os.open(self.path, flags, 0o666), "a", encoding="utf-8") if self.path is not None else None

    def write(self, record: dict[str, Any]) -> None:
        if self._fh is not None:
            self._fh.write(json.dumps(json_safe(record)) + "\n")
            self._fh.flush()

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()

    def __enter__(self) -> JsonlLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _logged_step(line: str) -> float:
    """The step a log line was written at; a torn last line (the process died mid-write) is dropped."""
    try:
        return float(json.loads(line).get("step", 0))
    except (json.JSONDecodeError, AttributeError, TypeError, ValueError):
        return float("inf")


RESULT_FILES = ("metrics.json", "compare.json", "sweep.json", "variants.json", "checkpoint.pt")


#: The longest recipe name a default run folder carries (``runs/<name>-<time>``).
RUN_NAME_MAX = 80


def make_run_dir(output: str | Path | None, name: str, root: str | Path = "runs", suffix: str = "",
                 resumable: bool = True) -> Path:
    """``runs/<name>-<timestamp>/`` unless ``output`` names a folder; never a folder that already holds a run.

    The folder is checked writable and claimed by this process (see :func:`claim`); under ``torchrun``
    by rank 0, whose folder every rank then uses.
    """
    return Path(parallel.on_main(lambda: str(_make_run_dir(output, name, root, suffix, resumable))))


#: The longest name a file system takes for one file or folder, in bytes (ext4, XFS, APFS, NTFS alike).
NAME_MAX_BYTES = 255


def names_fit(path: str | Path, flag: str = "--output") -> None:
    """Every name along ``path`` fits a file system: a longer one is one line with the path cut, exit 2 (it surfaced as
    ``File name too long`` with the whole path, 900 KB of it once, after the work, exit 1)."""
    for part in Path(path).parts:
        if len(part.encode("utf-8", "surrogateescape")) > NAME_MAX_BYTES:
            shown = str(path) if len(str(path)) <= 100 else f"{str(path)[:80]}… ({len(str(path)):,} characters)"
            raise SiftcliError(f"{flag} {shown}: a name of {len(part.encode('utf-8', 'surrogateescape')):,} bytes; a file "
                               f"system takes at most {NAME_MAX_BYTES} a name: choose a shorter one")


def _make_run_dir(output: str | Path | None, name: str, root: str | Path, suffix: str, resumable: bool = True) -> Path:
    if output is not None:
        if not str(output).strip():
            raise SiftcliError("--output '': expected a folder path")
        names_fit(output)
        path = Path(output)
        found = [f for f in RESULT_FILES if (path / f).exists()] if path.is_dir() else []
        if found:
            again = f", or continue an interrupted one with --resume {path}" if resumable else ""
            raise SiftcliError(f"--output {path}: already holds a run ({found[0]}); choose another folder{again}")
    else:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        safe = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip(".-") or "run"  # a name never leaves runs/
        if len(safe) > RUN_NAME_MAX:  # a file system takes 255 bytes a name; the rest told apart by a hash
            import hashlib

            safe = f"{safe[:RUN_NAME_MAX - 9].rstrip('.-')}-{hashlib.sha256(name.encode()).hexdigest()[:8]}"
        path = Path(root) / f"{safe}{suffix}-{stamp}"
        n = 1
        while path.exists():
            n += 1
            path = Path(root) / f"{safe}{suffix}-{stamp}-{n}"
    _ensure_writable(path)
    claim(path)
    return path


def claim(path: Path, flag: str = "--output") -> None:
    """One process per run folder: ``.siftcli.lock`` holds the owner's pid and goes when that process exits. A folder
    holding a link that leads out of it is refused first (:func:`refuse_links_out`).

    A lock left by a process that no longer runs (killed with SIGKILL) is taken over. The lock names its host too: a
    folder shared between machines or containers (each of which may run siftcli as pid 1) is never taken from a process
    this machine cannot see. Rank 0's, under torchrun.
    """
    if not parallel.is_main():
        return
    refuse_links_out(Path(path), flag)
    lock = Path(path) / ".siftcli.lock"
    host = socket.gethostname()
    for _ in range(2):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            try:
                words = lock.read_text().split()
                pid, owner = int(words[0]) if words else 0, " ".join(words[1:]) or host  # an older lock: no host
            except (OSError, ValueError):
                pid, owner = 0, host
            if owner != host:
                raise SiftcliError(f"{flag} {path}: a siftcli process on host {owner} (pid {pid}) holds this folder; wait "
                                   f"for it to end, or, if it is gone, delete {lock} (from this host its process cannot "
                                   "be seen)") from None
            if pid == os.getpid():  # this process holds it already (and may be writing there: nothing is swept)
                return
            if pid and _alive(pid):
                raise SiftcliError(f"{flag} {path}: another siftcli process (pid {pid}) is writing to this folder; wait for it "
                                   "to end, or choose another folder") from None
            lock.unlink(missing_ok=True)
            continue
        except OSError as exc:  # a read-only mount, a folder without write permission, a full disk
            raise SiftcliError(f"{flag} {path}: folder is not writable ({exc.strerror or exc}); siftcli writes its "
                               "checkpoints and records there: make it writable, or copy it somewhere writable") from None
        with os.fdopen(fd, "w") as fh:
            fh.write(f"{os.getpid()} {host}")
        atexit.register(lambda: lock.unlink(missing_ok=True))
        remove_stale_temporaries(Path(path))
        return


#: What :func:`atomic_write` names a file while it is written (``tempfile``'s eight random characters after the final
#: name, then ``.tmp``), and the saved model's folder (``model``, the one folder it writes): one still there belongs to a
#: process killed mid-write.
_TEMPORARY = re.compile(r"^\.(?:.+\.[a-z0-9_]{8}\.tmp|model\.[a-z0-9_]{8})$")


def remove_stale_temporaries(folder: Path) -> list[Path]:
    """Remove the half-written files a killed process left (``.checkpoint.pt.k2j4x9ab.tmp``: up to a model's size each),
    once this process holds the folder: no live siftcli process writes there then. Only names :func:`atomic_write`
    gives (a user's own dot-files keep theirs); returns them. Never while this process holds the folder already: a
    checkpoint it writes in the background would be taken for a dead one's."""
    removed = []
    for here, folders, files in os.walk(folder):
        for name in files + folders:
            entry = Path(here) / name
            if not _TEMPORARY.match(name) or entry.is_symlink() or entry.is_dir() != name.startswith(".model."):
                continue
            _remove(entry)
            removed.append(entry)
    return removed


def refuse_links_out(folder: Path, flag: str = "--output") -> None:
    """A run folder whose entries (at any depth) include a link leading outside it is refused, naming the link: siftcli
    would write through it (an arm's folder, a log, a checkpoint) into a file or folder the user never named. The
    folder itself may be a link: that one the user named."""
    root = folder.resolve()
    for here, folders, files in os.walk(folder):  # links to folders are listed, never followed
        for name in folders + files:
            entry = Path(here) / name
            if not entry.is_symlink():
                continue
            try:
                target = entry.resolve()
            except (OSError, RuntimeError):  # a loop of links
                target = None
            if target is None or (target != root and root not in target.parents):
                where = "a loop of links" if target is None else str(target)
                raise SiftcliError(f"{flag} {folder}: {entry} is a link to {where}, outside the folder, and siftcli would "
                                   "write through it; remove the link, or choose another folder")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def ensure_writable(path: Path, flag: str = "--output") -> None:
    """The folder exists and takes files (checked on rank 0, its verdict on every rank); ``flag`` names the option."""
    parallel.on_main(lambda: _ensure_writable(Path(path), flag))


def _takes_files(folder: Path) -> None:
    """Raises ``OSError`` unless a new file can be made in ``folder`` (it is made and removed at once)."""
    import tempfile

    tempfile.TemporaryFile(dir=folder).close()


def _ensure_writable(path: Path, flag: str = "--output") -> None:
    names_fit(path, flag)
    if path.is_symlink() and not path.exists():
        raise SiftcliError(f"{flag} {path}: a link to {os.readlink(path)}, which does not exist (or is a loop of links); "
                           "give a folder, or a link to one")
    if path.exists() and not path.is_dir():
        raise SiftcliError(f"{flag} {path}: exists and is not a folder; choose a folder path")
    try:
        path.mkdir(parents=True, exist_ok=True)
        _takes_files(path)
    except OSError as exc:
        raise SiftcliError(f"{flag} {path}: folder is not writable ({exc.strerror or exc}); choose a folder you can write to") from None


def ensure_file_writable(output: str, flag: str = "-o") -> None:
    """The folder a file ``-o OUTPUT`` (or another ``flag``'s) goes into takes files: it, or the nearest folder above it
    that exists (the missing ones are made when the file is written), checked before the work that produces the file,
    not after."""
    names_fit(output, flag)
    folder = Path(output).parent.absolute()
    existing = next(p for p in (folder, *folder.parents) if p.exists())
    if not existing.is_dir():
        raise SiftcliError(f"{flag} {output}: {existing} is a file, not a folder")
    try:
        _takes_files(existing)
    except OSError as exc:
        raise SiftcliError(f"{flag} {output}: cannot write into {existing} ({exc.strerror or exc}); choose a writable "
                           "folder") from None
