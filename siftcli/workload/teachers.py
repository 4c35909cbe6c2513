"""A teacher source in, a frozen teacher model out (a local folder or a hub id, its vocabulary checked against the student's tokenizer)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from siftcli.errors import SiftcliError, first_line
from siftcli.tasks import TASKS
from siftcli.workload.models import resolve_source


def teacher_path(source: str) -> str:
    """A siftcli run folder means its ``model/``; a folder must hold a saved model; anything else is a model source."""
    path = Path(source).expanduser()
    if path.is_dir():
        if (path / "model" / "config.json").exists():
            return str(path / "model")
        if (path / "config.json").exists():
            return str(path)
        raise SiftcliError(f"distill.teacher: folder {source!r} is not a model (no config.json, and no model/ of a "
                           "finished siftcli run)")
    return resolve_source(source, "distill.teacher")


def load_teacher(task: str, source: str, label_names: list[str] | None, tokenizer: Any) -> torch.nn.Module:
    """The teacher, checked against the student's labels and vocabulary (each mismatch is one line)."""
    import transformers

    path = teacher_path(source)
    auto = getattr(transformers, TASKS[task].auto_class)
    try:
        teacher = auto.from_pretrained(path)
    except Exception as exc:
        first = first_line(exc)
        raise SiftcliError(f"distill.teacher: cannot load {source!r} as a {task} model ({first}); use a folder saved with "
                           "save_pretrained (or a finished siftcli run), or a hub id") from None
    n = len(label_names or [])
    if teacher.config.num_labels != n:
        raise SiftcliError(f"distill.teacher: {source!r} predicts {teacher.config.num_labels} classes but the data has {n}; "
                           "teacher and student need the same label set")
    names = [teacher.config.id2label.get(i, "") for i in range(n)]
    if label_names and not all(x.startswith("LABEL_") for x in names) and names != [str(x) for x in label_names]:
        raise SiftcliError(f"distill.teacher: {source!r} has labels {names} but the data has {list(label_names)}; "
                           "teacher and student need the same labels in the same order")
    if tokenizer is not None:
        theirs = _teacher_vocab(path)
        if theirs is not None and theirs != tokenizer.get_vocab():
            raise SiftcliError(f"distill.teacher: {source!r} uses another vocabulary than the student's tokenizer; "
                               "distillation feeds both the same token ids")
        if teacher.config.vocab_size < len(tokenizer):
            raise SiftcliError(f"distill.teacher: {source!r} has {teacher.config.vocab_size} token embeddings but the "
                               f"student's tokenizer has {len(tokenizer)} tokens; they need the same vocabulary")
    return teacher


def _teacher_vocab(path: str) -> dict[str, int] | None:
    from transformers import AutoTokenizer

    if not any((Path(path) / f).exists() for f in ("tokenizer.json", "tokenizer_config.json", "vocab.txt")):
        return None  # a hub id, or a folder saved without its tokenizer: never fetch one that may not be its own
    try:
        return AutoTokenizer.from_pretrained(path).get_vocab()
    except Exception:  # a teacher saved without its tokenizer: only the embedding count can be checked
        return None
