"""Knowledge distillation that composes with sifting: the teacher runs only on the samples that are kept.

The training loss of a distilled run is :class:`DistillLoss`, per sample, so the loop stays the same; the scoring
pass keeps using the student's own hard-label loss (the workload's ``loss_fn``), so a dropped sample costs neither
the teacher's forward nor the student's backward.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from siftcli.errors import SiftcliError


def kd_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor, labels: torch.Tensor, temperature: float,
            alpha: float) -> torch.Tensor:
    """Per-sample ``(1 - alpha) * CE(student, label) + alpha * T^2 * KL(teacher_T || student_T)`` (Hinton et al. 2015;
    the ``T^2`` keeps the soft term's gradients on the hard term's scale as ``T`` changes)."""
    s, t = student_logits.float(), teacher_logits.float()
    hard = F.cross_entropy(s, labels.long(), reduction="none")
    log_p_s = F.log_softmax(s / temperature, dim=-1)
    log_p_t = F.log_softmax(t / temperature, dim=-1)
    soft = (log_p_t.exp() * (log_p_t - log_p_s)).sum(-1) * temperature**2
    return (1.0 - alpha) * hard + alpha * soft


class DistillLoss:
    """``(model, batch) -> Tensor[n]``: the student's forward, the frozen teacher's forward (counted and timed),
    and :func:`kd_loss`. The teacher is in eval mode, outside the optimizer, under ``inference_mode``."""

    def __init__(self, teacher: torch.nn.Module, temperature: float, alpha: float) -> None:
        self.teacher = teacher.eval().requires_grad_(False)
        self.temperature, self.alpha = temperature, alpha
        self.samples = 0  # teacher forwards, in samples
        self.seconds = 0.0

    def __call__(self, model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        inputs = {k: v for k, v in batch.items() if k != "labels" and isinstance(v, torch.Tensor)}
        student = model(**inputs).logits
        t0 = time.perf_counter()
        with torch.inference_mode():
            teacher = self.teacher(**inputs).logits
        if teacher.device.type == "cuda":
            torch.cuda.synchronize(teacher.device)
        self.seconds += time.perf_counter() - t0
        self.samples += int(batch["labels"].shape[0])
        return kd_loss(student, teacher.clone(), batch["labels"], self.temperature, self.alpha)


def teacher_path(source: str) -> str:
    """A siftcli run folder means its ``model/``; a folder must hold a saved model; anything else is a model source."""
    from siftcli.models import resolve_source

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

    from siftcli.tasks import TASKS

    path = teacher_path(source)
    auto = getattr(transformers, TASKS[task].auto_class)
    try:
        teacher = auto.from_pretrained(path)
    except Exception as exc:
        first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
        raise SiftcliError(f"distill.teacher: cannot load {source!r} as a {task} model ({first})") from None
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
