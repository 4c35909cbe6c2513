"""Knowledge distillation that composes with sifting: the teacher runs only on the samples that are kept.

The training loss of a distilled run is :class:`DistillLoss`, per sample, so the loop stays the same; the scoring
pass keeps using the student's own hard-label loss (the workload's ``loss_fn``), so a dropped sample costs neither
the teacher's forward nor the student's backward.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from siftcli.sift.losses import uncertainty
from siftcli.sift.sifter import SiftConfig, Sifter
from siftcli.sift.stateful import StateDict
from siftcli.sift.transfer import Later, Span, to_device


def kd_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor, labels: torch.Tensor | None, temperature: float,
            alpha: float) -> torch.Tensor:
    """Per-sample ``(1 - alpha) * CE(student, label) + alpha * T^2 * KL(teacher_T || student_T)`` (Hinton et al. 2015;
    the ``T^2`` keeps the soft term's gradients on the hard term's scale as ``T`` changes)."""
    return kd_loss_from_log_probs(student_logits, F.log_softmax(teacher_logits.float() / temperature, dim=-1), labels,
                                  temperature, alpha)


def kd_loss_from_log_probs(student_logits: torch.Tensor, log_p_t: torch.Tensor, labels: torch.Tensor | None,
                           temperature: float, alpha: float) -> torch.Tensor:
    """:func:`kd_loss` from the teacher's tempered log-probabilities (what a cache keeps); ``labels`` may be ``None``
    when ``alpha`` is 1 (distillation from unlabelled data: the teacher's distribution is the only target)."""
    s = student_logits.float()
    log_p_s = F.log_softmax(s / temperature, dim=-1)
    soft = (log_p_t.exp() * (log_p_t - log_p_s)).sum(-1) * temperature**2
    if alpha >= 1.0 or labels is None:
        return soft
    hard = F.cross_entropy(s, labels.long(), reduction="none")
    return (1.0 - alpha) * hard + alpha * soft


class TeacherCache:
    """The teacher's tempered log-probabilities by sample index, filled the first time a sample is trained on.

    The teacher is frozen and in eval mode, so for inputs that do not change between epochs its outputs do not
    either: one forward per sample instead of one per sample per epoch. ``top_k`` keeps, for a large output space,
    the k largest log-probabilities and spreads the remaining mass evenly over the other classes (exact for k = all).
    Held in memory up to ``memory_bytes``, else in a file under ``spill_dir`` (a memory map, so a large cache never
    has to fit in RAM).
    """

    def __init__(self, n: int, classes: int, top_k: int | None = None, memory_bytes: float = 1e9,
                 spill_dir: Path | None = None) -> None:
        self.classes = classes
        self.top_k = None if top_k is None or top_k >= classes else int(top_k)
        width = classes if self.top_k is None else 2 * self.top_k + 1  # values, class ids, the log of the remaining mass
        self.known = torch.zeros(n, dtype=torch.bool)
        self.spilled: Path | None = None
        if n * width * 4 > memory_bytes and spill_dir is not None:
            import numpy as np

            spill_dir.mkdir(parents=True, exist_ok=True)
            self.spilled = spill_dir / "teacher_cache.f32"
            self._map = np.memmap(self.spilled, dtype=np.float32, mode="w+", shape=(n, width))
            self.table = torch.from_numpy(self._map)
        else:
            self.table = torch.zeros(n, width)
        self.arriving: Later[torch.Tensor] = Later(self.put)  # teacher rows on their way from the device, by indices

    def lookup(self, indices: torch.Tensor) -> torch.Tensor:
        self.settle()
        return self.known[indices]

    def put_later(self, indices: torch.Tensor, log_p_t: torch.Tensor) -> None:
        """Cache rows still on the device: the copy to the host starts now and is stored at the next :meth:`lookup`
        (a step later, when the device has long finished it), so filling the cache never makes the host wait."""
        self.arriving.put(indices, log_p_t.float())

    def settle(self) -> None:
        """Store the rows :meth:`put_later` started copying."""
        self.arriving.settle()

    def put(self, indices: torch.Tensor, log_p_t: torch.Tensor) -> None:
        rows = log_p_t.detach().float().cpu()
        if self.top_k is not None:
            values, ids = rows.topk(self.top_k, dim=-1)
            rest = torch.log1p(-values.exp().sum(-1).clamp(max=1 - 1e-7)).unsqueeze(-1)
            rows = torch.cat([values, ids.float(), rest], dim=-1)
        self.table[indices] = rows
        self.known[indices] = True

    def get(self, indices: torch.Tensor) -> torch.Tensor:
        rows = self.table[indices].clone()
        if self.top_k is None:
            return rows
        k = self.top_k
        values, ids, rest = rows[:, :k], rows[:, k:2 * k].long(), rows[:, 2 * k]
        spread = rest - math.log(max(1, self.classes - k))  # the remaining mass, evenly over the other classes
        out = spread.unsqueeze(-1).expand(-1, self.classes).clone()
        return out.scatter_(1, ids, values)

    def state_dict(self) -> StateDict:
        self.settle()
        if self.spilled is not None:
            self._map.flush()
        return {"known": self.known.clone(), "table": None if self.spilled is not None else self.table.clone()}

    def load_state_dict(self, state: StateDict) -> None:
        """Keep the saved cache; a spilled cache whose file is gone is rebuilt (the teacher runs again)."""
        if state.get("table") is not None and state["table"].shape == self.table.shape:
            self.table.copy_(state["table"])
            self.known.copy_(state["known"])
        elif self.spilled is not None and state.get("table") is None:
            self.known.copy_(state["known"])


class DistillLoss:
    """``(model, batch, indices) -> Tensor[n]``: the student's forward, the frozen teacher's forward (counted and timed,
    reported by :meth:`take_cost` as the ``teacher`` phase), and :func:`kd_loss`; ``indices`` key the teacher cache.
    The teacher is in eval mode, outside the optimizer, under ``inference_mode``.

    With a ``gate`` (a :class:`~siftcli.sift.sifter.Sifter`: the same engine that sifts samples, here choosing teacher
    queries), the teacher runs only on the rows the gate keeps, ranked by ``score`` (the student's entropy or margin,
    read off the training forward's own logits, so choosing costs nothing); the other rows train on their label alone.
    Where the teacher costs many times the student and cannot be cached, this spends it where the student is unsure
    while every sample still trains (UNIXKD's idea, without dropping samples from the student's epochs)."""

    def __init__(self, teacher: torch.nn.Module, temperature: float, alpha: float, cache: TeacherCache | None = None,
                 gate: Any = None, score: str = "entropy") -> None:
        self.teacher = teacher.eval().requires_grad_(False)
        self.temperature, self.alpha = temperature, alpha
        self.cache = cache
        self.gate, self.score = gate, score
        self.samples = 0  # teacher forwards, in samples, over the run
        self._spans: list[tuple[str, Span]] = []  # the teacher's work since the last take_cost
        self._taken = 0  # samples already reported by take_cost

    def __call__(self, model: torch.nn.Module, batch: dict[str, torch.Tensor], indices: torch.Tensor | None = None) -> torch.Tensor:
        inputs = {k: v for k, v in batch.items() if k != "labels" and isinstance(v, torch.Tensor)}
        student = model(**inputs).logits
        if self.gate is None:
            return self._distilled(student, inputs, batch.get("labels"), indices)
        n = student.shape[0]
        taught = self.gate.decide(None if self.score == "random" else uncertainty(student.detach(), self.score), n)
        loss = F.cross_entropy(student.float(), batch["labels"].long(), reduction="none")
        rows = taught.nonzero().flatten()
        if rows.numel():
            sub = _rows(inputs, rows, n)
            distilled = self._distilled(student[rows], sub, batch["labels"][rows],
                                        None if indices is None else indices[rows.cpu()])
            loss = loss.index_put((to_device(rows, student.device),), distilled)
        return loss

    def take_cost(self) -> tuple[list[tuple[str, Span]], int]:
        """The teacher's spans (its own phase, read once the device has passed them) and forwards (in samples, not
        cache hits) since the last call."""
        spans, samples = self._spans, self.samples - self._taken
        self._spans, self._taken = [], self.samples
        return spans, samples

    def _distilled(self, student: torch.Tensor, inputs: dict[str, torch.Tensor], labels: torch.Tensor | None,
                   indices: torch.Tensor | None) -> torch.Tensor:
        """The distillation loss of these rows. With the cache, cached rows come from the host table (copied without
        blocking) and only the unknown rows run the teacher, whose rows reach the cache a step later: no host read."""
        n = student.shape[0]
        span = Span(student.device).start()
        if self.cache is not None and indices is not None and indices.numel() == n:
            known = self.cache.lookup(indices)
            table = torch.zeros(n, student.shape[-1])
            if bool(known.any()):
                table[known] = self.cache.get(indices[known])
            log_p_t = to_device(table, student.device)
            todo = (~known).nonzero().flatten()
            if todo.numel():
                fresh = self._teacher(_rows(inputs, todo, n))
                self.cache.put_later(indices[todo], fresh)
                log_p_t = log_p_t.index_copy(0, to_device(todo, student.device), fresh)
        else:
            todo = torch.arange(n)
            log_p_t = self._teacher(inputs)
        self._spans.append(("teacher", span.stop()))
        self.samples += int(todo.numel())
        return kd_loss_from_log_probs(student, log_p_t, labels, self.temperature, self.alpha)

    def _teacher(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        with torch.inference_mode():
            logits = self.teacher(**inputs).logits
        return F.log_softmax(logits.float() / self.temperature, dim=-1).clone()

    def state_dict(self) -> StateDict:
        return {"cache": self.cache.state_dict() if self.cache is not None else None,
                "gate": self.gate.state_dict() if self.gate is not None else None}

    def load_state_dict(self, state: StateDict) -> None:
        if self.cache is not None and state.get("cache"):
            self.cache.load_state_dict(state["cache"])
        if self.gate is not None and state.get("gate"):
            self.gate.load_state_dict(state["gate"])


def distill_loss(spec: Any, workload: Any, device: torch.device, run_dir: Path | None, seed: int = 0) -> DistillLoss:
    """The training loss of a ``distill`` recipe section: the workload's teacher on ``device``, with its cache (by
    sample index; spilled into the run folder when larger than ``cache_memory_mb``) unless ``cache`` is off, and with
    ``teacher_fraction`` its gate: the sifting engine in calibrated (or, for the control, random) mode, seeded apart
    from the training order."""
    cache = None
    if spec.cache:
        classes = len(workload.label_names or []) or int(getattr(workload.teacher.config, "num_labels", 0))
        cache = TeacherCache(len(workload.train_data), classes, spec.cache_top_k, spec.cache_memory_mb * 2**20,
                             run_dir / "teacher-cache" if run_dir else None)
    gate = None
    if spec.teacher_fraction is not None:
        random = spec.teacher_score == "random"
        gate = Sifter(SiftConfig(beta=spec.teacher_beta, mode="random" if random else "calibrated",
                                 score="loss" if random else spec.teacher_score, keep_fraction=spec.teacher_fraction,
                                 seed=seed + 7_919))
    return DistillLoss(workload.teacher.to(device), spec.temperature, spec.alpha, cache, gate, spec.teacher_score)


def _rows(inputs: dict[str, torch.Tensor], rows: torch.Tensor, n: int) -> dict[str, torch.Tensor]:
    """The given rows of every per-sample input (a subset of a batch, for the teacher's forward)."""
    rows = to_device(rows, next(iter(inputs.values())).device)
    return {k: v[rows] if v.dim() and v.shape[0] == n else v for k, v in inputs.items()}


