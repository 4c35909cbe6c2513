"""The training loop, written out top to bottom.

``train`` takes a :class:`~siftcli.workload.build.Workload` and the recipe's run settings, runs one
fine-tune (sifted when given a :class:`SiftConfig`), evaluates on a schedule kept off the training
clock, checkpoints, and writes a run folder. Everything the loop changes lives in one
:class:`RunState`, saved and restored whole, so Ctrl-C leaves a run that resumes exactly.

Under ``torchrun`` (:mod:`siftcli.parallel`) the same loop runs on every rank: the model trains wrapped in
``DistributedDataParallel`` while scoring and evaluation use the bare module, evaluation sums over the ranks'
shares of the eval set, every stop (signal, non-finite loss, evaluation by the clock) is agreed before it
is acted on, and rank 0 writes metrics and checkpoints that hold every rank's loader state.
"""

from __future__ import annotations

import math
import random
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader

from siftcli import parallel
from siftcli.errors import RunFault, RunInterrupted, SiftcliError
from siftcli.recipe.schema import Recipe
from siftcli.runio import Event, JsonlLog, atomic_write_json
from siftcli.sift.distributed import sum_over_ranks
from siftcli.sift.loader import SiftingDataLoader
from siftcli.sift.losses import loss_from_logits
from siftcli.sift.precision import autocast
from siftcli.sift.sifter import SiftConfig
from siftcli.tasks import METRICS, TASKS
from siftcli.training import checkpoint, compiling
from siftcli.training.clock import LossWatch, NonFiniteLoss, RunClock
from siftcli.training.metrics import merge_ranks, summarise_run
from siftcli.training.record import RunMetrics
from siftcli.training.resume import reference_not_kept
from siftcli.training.setup import Run, setup_run
from siftcli.training.state import Budget, Reference, RunState
from siftcli.training.step import train_step
from siftcli.training.warm import precompile, warm_up
from siftcli.workload.build import Workload


def lr_factor(progress: float, warmup: float, schedule: str, *, full_progress: float | None = None,
              decay: float = 0.2) -> float:
    """Learning-rate multiplier at ``progress`` in [0, 1] of the run.

    Progress counts raw samples consumed (or steps of a step-capped run), so the schedule
    ends fully decayed exactly when training ends, whatever fraction sifting keeps.

    ``wsd`` (warm-up, stable, decay) warms up over ``warmup`` of the *full* schedule (``full_progress``: raw samples
    over the full run's, whether or not a step cap ends this run early), holds, and decays linearly to zero over the
    run's last ``decay`` (by ``progress``). A run capped at ``m`` steps then takes the full run's learning rates up to
    :func:`fork_step` exactly, so it is the full run's checkpoint there with its own decay: one full run forked at
    several points reads several shorter schedules (training less) for the price of their decays.
    """
    progress = min(max(progress, 0.0), 1.0)
    if schedule == "wsd":
        full = progress if full_progress is None else min(max(full_progress, 0.0), 1.0)
        warm = full / warmup if warmup > 0 and full < warmup else 1.0
        cool = 1.0 if progress < 1.0 - decay else (1.0 - progress) / decay
        return max(0.0, min(warm, cool))
    if warmup > 0 and progress < warmup:
        return progress / warmup
    if schedule == "constant":
        return 1.0
    rest = (progress - warmup) / max(1e-12, 1.0 - warmup)
    if schedule == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * rest))
    return max(0.0, 1.0 - rest)


def fork_step(max_steps: int, decay: float) -> int:
    """The first step whose learning rate a ``wsd`` run capped at ``max_steps`` decays (the comparison
    :func:`lr_factor` makes, ``step / max_steps >= 1 - decay``): before it the capped run and the full run take the
    same rates, so the capped run is the full run's checkpoint after this many steps, resumed with the cap."""
    k = max(0, math.floor((1.0 - decay) * max_steps))
    while k < max_steps and k / max_steps < 1.0 - decay:
        k += 1
    while k > 0 and (k - 1) / max_steps >= 1.0 - decay:
        k -= 1
    return k


class StopSignals:
    """SIGINT and SIGTERM ask the loop to stop at the next step boundary instead of raising mid-step.

    A signal that lands inside a step (scoring, backward, optimizer) would otherwise lose the batch
    in flight: the loader has already yielded it while the step count has not moved, so a resumed
    run would end with different weights. Here the step finishes, then the loop checkpoints and
    writes ``metrics.json`` (status ``interrupted``). Further signals while that happens are
    absorbed, so a second Ctrl-C cannot leave a half-saved run. Installed only in the main thread.
    """

    def __init__(self) -> None:
        self.requested: str | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        self.requested = self.requested or signal.Signals(signum).name

    def __exit__(self, *exc: object) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)


def timed_batches(loader: SiftingDataLoader, state: RunState) -> Iterator[Any]:
    """The loader's batches, its scoring seconds put on the clock's ``scoring`` phase (the rest of the wait is data)."""
    batches = iter(loader)
    while True:
        scoring0 = loader.stats.scoring_seconds
        batch = next(batches, None)
        state.phases["scoring"] += loader.stats.scoring_seconds - scoring0  # also what the epoch's last raw batches cost
        if batch is None:
            return
        yield batch


def train(workload: Workload, recipe: Recipe, sift: SiftConfig | None = None, *, reference: Reference | None = None,
          run_dir: Path | None = None, arm: str = "baseline", on_event: Event | None = None,
          resume: bool = False, upfront: dict[str, float] | None = None,
          on_complete: Callable[[], None] | None = None, forks: dict[int, Path] | None = None,
          start_from: Path | None = None) -> RunMetrics:
    """Run one fine-tune and return its metrics (also written to ``run_dir/metrics.json``). ``upfront``: seconds of
    work done before this call that chose its data (near-duplicate removal), started on its clock as named phases,
    like the reference's cost. ``on_complete``: called once training completed, before the final checkpoint (the
    trained model is written first: a full disk then costs the resumable state, which a finished run needs least).
    ``forks``: folders a checkpoint is written to after that many steps (off the clock), for runs to start from;
    ``start_from``: such a folder, whichever run wrote it: this run goes on from its checkpoint (a ``wsd`` run capped
    at ``m`` steps, started from the full run's checkpoint at :func:`fork_step`, is that capped run exactly)."""
    emit = on_event or (lambda kind, data: None)
    torch.manual_seed(recipe.seed)
    random.seed(recipe.seed)
    started = time.perf_counter()
    run = setup_run(workload, recipe, sift, reference, upfront, run_dir)
    state, loader, budget, optim = run.state, run.loader, run.budget, recipe.optim
    if resume:
        most = budget.epochs * max(1, len(workload.train_data))  # a step trains a sample at least
        checkpoint.load(run_dir, arm, state, run.parts, run.device, most if budget.max_steps is None else budget.max_steps)
    elif start_from is not None:
        checkpoint.load(start_from, None, state, run.parts, run.device, budget.max_steps)
    loader.add_batch_hook(lambda d: state.record(d, workload.noisy, workload.groups))
    compiled = compiling.counts() if recipe.compile else None

    def finish(status: str) -> RunMetrics:
        out = _finish(run, workload, recipe, arm, status, started, compiled, start_from)
        if compiled is not None and steady is not None:  # compilations after the buckets were compiled: 0 is the aim
            out["compile"]["steady_compilations"] = compiling.since(steady)["compilations"]
        return out

    emit("start", {"arm": arm, "epochs": budget.epochs, "steps_per_epoch": len(loader), "total_raw": budget.total_raw,
                   "max_steps": recipe.max_steps, "step": state.step, "recipe": recipe, "run_dir": run_dir})
    saved_step = state.step if resume else None  # the last checkpoint on disk (a full disk may fail the next one)
    clock, watch = RunClock(state, run.device), LossWatch()
    steady: dict[str, float] | None = None
    with JsonlLog(run_dir / "log.jsonl" if run_dir else None, saved_step) as log, StopSignals() as stop:
        def save_to(folder: Path | None) -> None:
            """A checkpoint off the clock, the loss read first (never a broken model over a good checkpoint); a disk
            that refuses it is the run's checkpoint fault, whichever folder it was for."""
            with clock.off():
                watch.read()
                try:
                    if folder is not None:
                        folder.mkdir(parents=True, exist_ok=True)
                    checkpoint.save(folder, arm, state, run.parts, started)
                except OSError as exc:
                    raise _CheckpointFailed(exc) from exc

        def evaluate_now(reason: str) -> None:
            with clock.off():
                watch.read()  # a broken loss stops the run before its model is evaluated
                _evaluate(run, workload, recipe, reason, log, emit)

        try:
            warm_up(run, workload, recipe)  # off the clock, updates discarded: every arm starts on a warm device
            clock.start()
            precompile(run, workload, recipe)  # on the clock: compiling is the arm's own cost
            steady = compiling.counts() if recipe.compile else None
            out_of_time = False  # the seconds budget, agreed by every rank at each step (clocks differ across ranks)
            while state.epoch < budget.epochs and not out_of_time and not budget.done(state.step, loader.stats.raw_samples):
                for batch in timed_batches(loader, state):
                    progress = _progress(budget, state, loader.stats.raw_samples)
                    lr = _set_lr(run.optimizer, optim.lr * lr_factor(
                        progress, optim.warmup_fraction, optim.schedule, decay=optim.decay_fraction,
                        full_progress=budget.full_progress(loader.stats.raw_samples)))
                    step = train_step(run.learner, batch, recipe, loader.last_weights, loader.last_indices)
                    loader.record(step.losses)
                    clock.add_step(step, run.loss.take_cost(), len(batch["labels"]), watch)
                    _log_step(state, watch, clock, lr, loader.stats.raw_samples, recipe.log_every_steps, log, emit)
                    e = recipe.eval
                    clock_due = bool(e.every_seconds and state.train_clock - state.last_eval_clock >= e.every_seconds)
                    stopping, clock_due, out_of_time = parallel.any_true(  # one rank's clock decides for all
                        stop.requested is not None, clock_due, budget.out_of_time(state.train_clock))
                    if (e.every_steps and state.step % e.every_steps == 0) or clock_due:
                        evaluate_now("periodic")
                    if recipe.checkpoint_every_steps and state.step % recipe.checkpoint_every_steps == 0:
                        save_to(run_dir)
                        saved_step = state.step
                    if forks and state.step in forks:  # another run goes on from here (siftcli.arms.forks)
                        save_to(forks[state.step])
                    if stopping:  # a signal arrived during this step (on any rank): it is finished, stop here
                        raise KeyboardInterrupt
                    if out_of_time or budget.done(state.step, loader.stats.raw_samples):
                        break
                else:  # the loader ran dry: the epoch is over
                    state.epoch += 1
                    if recipe.eval.per_epoch and state.last_eval_step != state.step:
                        evaluate_now("epoch")
                    emit("epoch", {"epoch": state.epoch, "step": state.step})
                    continue
                break  # stopped mid-epoch: the sample, step or seconds budget is spent
            if state.last_eval_step != state.step or not state.curve:
                evaluate_now("final")
            clock.settle()
            watch.read()
        except KeyboardInterrupt:  # results first, then the checkpoint: a full disk cannot cost the metrics
            if run_dir is None:  # a run inside another's preparation (a reference): the caller says what was kept
                raise
            clock.settle()
            finish("interrupted")
            checkpoint.save(run_dir, arm, state, run.parts, started)
            raise _interrupted(run_dir, stop.requested, reference_not_kept(recipe, sift)) from None
        except _CheckpointFailed as exc:  # the old checkpoint pair is whole (write_pair): say so, and how to go on
            note = _io_note(exc.error)
            _mark_failed(finish("failed"), run_dir, f"checkpoint at step {state.step}: {note}")
            raise _checkpoint_fault(state.step, note, saved_step, run_dir) from None
        except NonFiniteLoss as exc:
            clock.settle()
            finish("failed")
            raise _nonfinite_error(exc, state, run_dir, arm) from None
        result = finish("completed")
        _save_completed(result, run_dir, arm, run, started, on_complete)
    emit("end", result)
    return result


def _progress(budget: Budget, state: RunState, raw_samples: int) -> float:
    """How far the run is, as its schedule counts: a seconds budget follows rank 0's clock on every rank, so each
    applies the same learning rate."""
    clock_now = parallel.broadcast(state.train_clock) if budget.max_seconds and parallel.active() else state.train_clock
    return budget.progress(state.step, raw_samples, clock_now)


def _set_lr(optimizer: torch.optim.Optimizer, lr: float) -> float:
    for group in optimizer.param_groups:
        group["lr"] = lr
    return lr


def _checkpoint_fault(step: int, note: str, saved_step: int | None, run_dir: Path | None) -> RunFault:
    """A checkpoint that could not be written: the last one on disk is whole, and how to go on from it."""
    kept = (f"the checkpoint of step {saved_step} is kept: free space, then continue with: "
            f"siftcli train <recipe> --resume {run_dir}") if saved_step is not None else \
        "no earlier checkpoint: free space and run again"
    return RunFault(f"checkpoint at step {step}: {note}; {kept}")


def _nonfinite_error(exc: NonFiniteLoss, state: RunState, run_dir: Path | None, arm: str = "") -> SiftcliError:
    """The step (and epoch) whose loss broke first, on any rank, and what to try: for a reference model, its own
    learning rate (``sift.reference.lr``), not the run's."""
    where = f"; partial results in {run_dir}" if run_dir else ""
    step, epoch = (exc.step, exc.epoch) if exc.step > 0 else (state.step, state.epoch)  # -1: another rank's
    whose, lr = ("the reference model's ", "sift.reference.lr") if arm == "reference" else ("", "optim.lr")
    return SiftcliError(f"{whose}training loss became {exc.value} at step {step} (epoch {epoch + 1}); "
                        f"try a lower {lr} or precision fp32{where}", main_only=True)


def _evaluate(run: Run, workload: Workload, recipe: Recipe, reason: str, log: JsonlLog, emit: Event) -> None:
    """One evaluation, off the training clock, onto the curve, the log and the events."""
    state = run.state
    t0 = time.perf_counter()
    result = evaluate(run.bare, run.eval_loader, workload.task, run.device, recipe.precision)
    state.phases["evaluation"] += time.perf_counter() - t0
    point = {"step": state.step, "epoch": state.epoch, "train_seconds": state.train_clock,
             "raw_samples": run.loader.stats.raw_samples, "trained_samples": state.trained, "reason": reason, **result}
    state.curve.append(point)
    state.last_eval_clock, state.last_eval_step = state.train_clock, state.step
    log.write({"event": "eval", **point})
    emit("eval", point)


def _interrupted(run_dir: Path, requested: str | None, stuck: str | None) -> RunInterrupted:
    """What an interrupted run tells the shell: the signal (any rank's), and how to resume, or why it cannot."""
    received = [name for name in parallel.gather(requested) if name]  # a signal may reach one rank only
    again = (f"siftcli train <recipe> --resume {run_dir}, launched as before (torchrun, {parallel.world()} processes)"
             if parallel.active() else None)
    return RunInterrupted(str(run_dir), signal=received[0] if received else "SIGINT", resume_command=again,
                          resumable=not stuck, advice=stuck)


def _save_completed(result: RunMetrics, run_dir: Path | None, arm: str, run: Run, started: float,
                    on_complete: Callable[[], None] | None) -> None:
    """The trained model (``on_complete``), then the final checkpoint. A full disk must not leave metrics that say
    "completed" for a run whose files are missing: they are rewritten as failed, naming the file."""
    try:
        if on_complete is not None:
            on_complete()
        checkpoint.save(run_dir, arm, run.state, run.parts, started)
    except OSError as exc:
        _mark_failed(result, run_dir, _io_note(exc))
        raise


def _io_note(exc: OSError) -> str:
    return f"{exc.filename or 'an output file'}: {exc.strerror or exc}"


def _mark_failed(result: RunMetrics, run_dir: Path | None, error: str) -> None:
    """Metrics that say "failed" and why, never "completed" or "interrupted", for a run whose files are missing."""
    if run_dir is not None and parallel.is_main():
        atomic_write_json(run_dir / "metrics.json", {**result, "status": "failed", "error": error})


def _log_step(state: RunState, watch: LossWatch, clock: RunClock, lr: float, raw: int, every: int, log: JsonlLog,
              emit: Event) -> None:
    """A ``step`` line in the log every ``every`` steps (and the first), where the device is caught up with and the
    loss read (the only reads of a steady-state step); a light ``tick`` event otherwise, with the last loss read."""
    if state.step % every and state.step != 1:
        emit("tick", {"step": state.step, "loss": state.last_loss, "raw_samples": raw, "trained_samples": state.trained})
        return
    clock.settle()
    state.last_loss = watch.read()
    record = {"event": "step", "step": state.step, "loss": state.last_loss, "raw_samples": raw,
              "trained_samples": state.trained, "epoch": state.epoch, "lr": lr, "train_seconds": state.train_clock,
              "kept_fraction": state.trained / max(1, raw), "phases": dict(state.phases)}
    log.write(record)
    emit("step", record)


def _finish(run: Run, workload: Workload, recipe: Recipe, arm: str, status: str, started: float,
            compiled: dict[str, int] | None = None, forked_from: Path | None = None) -> RunMetrics:
    """The run's metrics, written atomically with the kept/rejected loss sample beside them. Under torchrun every
    rank's are merged (:func:`~siftcli.training.metrics.merge_ranks`) and every rank returns the same: what a caller
    decides from them next (the equal-time opponent's steps, say) is then the same on every rank."""
    state, loader, sift, reference, run_dir = run.state, run.loader, run.sift, run.reference, run.run_dir
    out = summarise_run(workload, recipe, run, arm, status, state.earlier_seconds + time.perf_counter() - started,
                        parallel.world())
    # what this run paid is what its clock holds (a resumed run read the reference again, at no cost to it)
    out["reference"] = {**reference.summary(), "paid_seconds": state.phases.get("reference", 0.0)} if reference else None
    if forked_from is not None:  # its steps before the fork are another run's (its clock holds their seconds)
        out["forked_from"] = str(forked_from)
    if compiled is not None:  # what torch.compile did during this run (graphs, compilations, eager fallbacks)
        out["compile"] = {**compiling.since(compiled), "pad_to_multiple_of": recipe.pad_multiple}
    if parallel.active():
        raw = max(1, out["raw_samples"])  # kept: what the rule chose on this rank; trained: what it trained on
        mine = {"rank": parallel.rank(), "raw_samples": out["raw_samples"], "kept_samples": loader.stats.kept_samples,
                "samples_trained": out["samples_trained"], "kept_fraction": loader.stats.kept_samples / raw,
                "trained_fraction": out["samples_trained"] / raw, "optimizer_steps": state.step,
                "train_seconds": state.train_clock, "dropped_to_sync": loader.stats.dropped_to_sync,
                "weights_sha1": _fingerprint(workload.model)}
        gathered = parallel.gather((out, mine))
        out = merge_ranks([g[0] for g in gathered], [g[1] for g in gathered])
    if run_dir:
        atomic_write_json(run_dir / "metrics.json", out)
        if sift is not None:
            atomic_write_json(run_dir / "sift_losses.json", {"kept": state.kept_losses, "rejected": state.rejected_losses})
    return out


def _fingerprint(model: torch.nn.Module) -> str:
    """SHA-1 of every parameter's bytes: equal on every rank when data-parallel training kept them in step."""
    import hashlib

    h = hashlib.sha1()
    for p in model.parameters():
        h.update(p.detach().float().cpu().numpy().tobytes())
    return h.hexdigest()


@torch.no_grad()
def evaluate(model: torch.nn.Module, loader: DataLoader, task: str, device: torch.device, precision: str) -> dict[str, float]:
    """Eval loss plus the task's metric (see :mod:`siftcli.tasks`), and the per-sample loss's standard deviation
    (``loss_sd``: how far one row moves the mean, which ``siftcli plan`` needs to tell a gap in the loss from noise);
    under torchrun, over every rank's share."""
    was_training = model.training
    model.eval()
    kind = TASKS[task]
    counts = METRICS[kind.metric].counts_correct
    sums = torch.zeros(3, dtype=torch.float64, device=device)  # loss, its square, hits: read once, after the pass
    count = 0
    try:
        for batch in loader:
            batch = {k: v.to(device) for k, v in batch.items()}
            labels = batch.pop("labels")
            with autocast(device, precision):
                logits = model(**batch).logits.float()
            per_row = loss_from_logits(logits, labels, kind.default_loss).double()
            sums[0] += per_row.sum()
            sums[1] += per_row.square().sum()
            if counts:
                sums[2] += (logits.argmax(-1) == labels).sum()
            count += labels.shape[0]
    finally:
        model.train(was_training)
    total_loss, total_square, hits = sums.tolist()
    correct = int(hits)
    if parallel.active():

        total_loss, total_square, correct_sum, count_sum = sum_over_ranks(
            [total_loss, total_square, float(correct), float(count)], device)
        correct, count = int(correct_sum), int(count_sum)
    mean_loss = total_loss / max(1, count)
    sd = math.sqrt(max(0.0, total_square / max(1, count) - mean_loss ** 2))
    return {"loss": mean_loss, kind.metric: METRICS[kind.metric].value(mean_loss, correct, count), "loss_sd": sd}


class _CheckpointFailed(Exception):
    def __init__(self, error: OSError) -> None:
        super().__init__(str(error))
        self.error = error


