"""The run's training clock and what the loop reads back from the device, without a synchronisation per step.

:class:`RunClock`: the training clock is wall time with evaluation and checkpoints off it; the device is synchronised
only where the clock stops (evaluation, checkpoint, log lines, the end), so the clock is exact there and within about
one step of the truth in between (the host runs at most a step ahead: the loss memory reads each step's losses one step
later). Phases (forward/backward, optimizer, scoring, a teacher's forward) are timed on the device's own timeline
(:class:`~siftcli.sift.transfer.Span`) and read once finished; ``data`` is the rest of the clock (waiting for batches,
host work the device did not hide).

:class:`LossWatch`: each step's loss stays on the device; a non-finite loss is found at the next read (a log line, an
evaluation, a checkpoint, the end) with the step it first appeared at, and stops the run as before. A checkpoint is
never written over a good one with a broken model: the watch is read before every save.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

import torch

from siftcli import parallel
from siftcli.sift.transfer import Later, Span
from siftcli.training.state import OFF_CLOCK, RunState
from siftcli.training.step import Step


class RunClock:
    """Wall time onto ``state.train_clock`` step by step; :meth:`off` stops it (evaluation, checkpoints) after everything
    queued has finished; :meth:`add` queues a phase's span, added to ``state.phases`` once it has passed."""

    def __init__(self, state: RunState, device: torch.device) -> None:
        self.state, self.device = state, device
        self.pending: Later[tuple[str, tuple[Span, ...]]] = Later(self._store)  # (phase, spans inside it) -> seconds
        self.mark = time.perf_counter()

    def start(self) -> None:
        self.mark = time.perf_counter()

    def add(self, phase: str, span: Span, inside: tuple[Span, ...] = ()) -> None:
        """``span`` counts toward ``phase``, less the spans ``inside`` it that count toward phases of their own."""
        self.pending.put((phase, tuple(inside)), span)

    def add_step(self, step: Step, cost: tuple[list[tuple[str, Span]], int], rows: int, watch: LossWatch) -> None:
        """A training step queued: its phases' spans (the loss's own ``cost``, a teacher's forwards, counted apart
        from the forward/backward they ran inside), its ``rows`` and taught samples counted, its loss watched, and its
        wall time on the clock."""
        own, taught = cost
        self.add("forward_backward", step.forward_backward, inside=tuple(span for _, span in own))
        self.add("optimizer", step.optimizer)
        for phase, span in own:
            self.add(phase, span)
        self.state.count_step(rows, taught)
        watch.add(step.loss, self.state.step, self.state.epoch)
        self.tick()

    def tick(self) -> None:
        """A step ended: its wall time goes on the clock; phases already finished on the device are read (no wait)."""
        now = time.perf_counter()
        self.state.train_clock += now - self.mark
        self.mark = now
        self.pending.settle(wait=False)

    def settle(self) -> None:
        """Everything queued on the device finishes, on the clock; every phase is read and ``data`` is what is left."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        self.tick()
        self.pending.settle()
        phases = self.state.phases
        timed = sum(v for k, v in phases.items() if k != "data" and k not in OFF_CLOCK)
        phases["data"] = max(0.0, self.state.train_clock - timed)

    @contextlib.contextmanager
    def off(self) -> Iterator[None]:
        """Work off the training clock (evaluation, a checkpoint): the clock is settled first and restarts after."""
        self.settle()
        try:
            yield
        finally:
            self.mark = time.perf_counter()

    def _store(self, key: tuple[str, tuple[Span, ...]], seconds: float) -> None:
        phase, inside = key
        self.state.phases[phase] = self.state.phases.get(phase, 0.0) + seconds - sum(s.sync() for s in inside)


class LossWatch:
    """The last step's mean loss and the first step whose loss was not finite, kept on the device; :meth:`read` brings
    them to the host (a synchronisation: only at log, evaluation and checkpoint steps and at the end)."""

    def __init__(self) -> None:
        self.last: torch.Tensor | None = None
        self.first_bad: torch.Tensor | None = None  # the first step whose loss was not finite (-1: none yet)
        self.bad_value: torch.Tensor | None = None
        self.epochs: list[tuple[int, int]] = []  # (first step, epoch) where each epoch began, to name a bad step's epoch

    def add(self, loss: torch.Tensor, step: int, epoch: int) -> None:
        """Step ``step`` (1-based) of ``epoch`` had mean loss ``loss`` (a device scalar): a few device ops, no read."""
        loss = loss.detach().float()
        if not self.epochs or self.epochs[-1][1] != epoch:
            self.epochs.append((step, epoch))
        bad = ~torch.isfinite(loss)
        if self.first_bad is None:
            self.first_bad = torch.where(bad, step, -1)
            self.bad_value = loss
        else:
            newly = bad & (self.first_bad < 0)
            self.first_bad = torch.where(newly, step, self.first_bad)
            self.bad_value = torch.where(newly, loss, self.bad_value)
        self.last = loss

    def read(self) -> float | None:
        """The last step's mean loss (``None`` before any step); raises :class:`NonFiniteLoss` naming the first step
        whose loss was not finite (on any rank: every rank reads at the same steps and agrees)."""
        if self.first_bad is None:
            return None
        first = int(self.first_bad)
        if parallel.any_true(first >= 0)[0]:
            value = float(self.bad_value) if first >= 0 else float("nan")  # nan: another rank's loss
            step = first if first >= 0 else -1
            epoch = next((e for s, e in reversed(self.epochs) if s <= step), self.epochs[-1][1] if self.epochs else 0)
            raise NonFiniteLoss(value, step, epoch)
        return float(self.last)


class NonFiniteLoss(Exception):
    def __init__(self, value: float, step: int, epoch: int) -> None:
        super().__init__(value)
        self.value, self.step, self.epoch = value, step, epoch
