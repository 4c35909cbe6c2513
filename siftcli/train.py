"""The training loop, written out top to bottom.

``train`` takes a :class:`~siftcli.builders.Workload` and plain settings, runs one fine-tune
(sifted when given a :class:`SiftConfig`), evaluates on a schedule kept off the training
clock, checkpoints, and writes a run folder. Ctrl-C leaves a resumable checkpoint.
"""

from __future__ import annotations

import contextlib
import math
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, Sampler

from siftcli.builders import Workload
from siftcli.errors import RunInterrupted, SiftcliError
from siftcli.runio import JsonlLog, atomic_torch_save, atomic_write_json
from siftcli.sift.loader import SiftingDataLoader, scoring_precision
from siftcli.sift.losses import loss_from_logits
from siftcli.sift.sifter import SiftConfig

PHASES = ("data", "scoring", "forward_backward", "optimizer", "evaluation", "checkpoint")
Event = Callable[[str, dict[str, Any]], None]


@dataclass
class TrainSettings:
    """Plain hyperparameters of one run (no recipe object below the builders)."""

    epochs: float = 3
    batch_size: int = 32
    lr: float = 5e-5
    weight_decay: float = 0.01
    warmup_fraction: float = 0.06
    schedule: str = "linear"
    grad_clip: float | None = 1.0
    seed: int = 0
    device: str = "auto"
    precision: str = "fp32"
    compile: bool = False
    eval_every_steps: int | None = None
    eval_every_seconds: float | None = None
    eval_per_epoch: bool = True
    eval_batch_size: int = 128
    log_every_steps: int = 10
    checkpoint_every_steps: int | None = None
    max_steps: int | None = None  # equal-time baseline: the schedule ends, fully decayed, at this step
    num_workers: int = 0


class SeededSampler(Sampler[int]):
    """Shuffles with ``seed + epoch`` so every arm and every resume sees the same order."""

    def __init__(self, n: int, seed: int) -> None:
        self.n, self.seed, self.epoch = n, seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[int]:
        g = torch.Generator().manual_seed(self.seed * 100_003 + self.epoch)
        return iter(torch.randperm(self.n, generator=g).tolist())

    def __len__(self) -> int:
        return self.n


class PassThroughLoader:
    """The baseline's loader: same order and bookkeeping as the sifting loader, no scoring."""

    def __init__(self, dataloader: DataLoader) -> None:
        self.dataloader = dataloader
        self.epoch = 0
        self.raw_in_epoch = 0
        self.raw_samples = 0
        self._skip = 0

    def __len__(self) -> int:
        return len(self.dataloader)

    def __iter__(self) -> Iterator[Any]:
        self.dataloader.sampler.set_epoch(self.epoch)
        source = iter(self.dataloader)
        for _ in range(self._skip):
            next(source)
        self.raw_in_epoch, self._skip = self._skip, 0
        for batch in source:
            self.raw_in_epoch += 1
            self.raw_samples += batch["labels"].shape[0]
            yield batch
        self.epoch += 1
        self.raw_in_epoch = 0

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "raw_in_epoch": self.raw_in_epoch, "raw_samples": self.raw_samples}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.epoch, self._skip, self.raw_samples = state["epoch"], state["raw_in_epoch"], state["raw_samples"]


def resolve_device(device: str, precision: str) -> torch.device:
    """``auto`` picks CUDA when present; asking for what is missing is a user error."""
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise SiftcliError("device: cuda was asked for but no CUDA GPU is available; use device: auto or cpu")
    if precision == "bf16" and device == "cuda" and not torch.cuda.is_bf16_supported():
        raise SiftcliError("precision: bf16 is not supported on this GPU; use fp16 or fp32")
    if precision == "fp16" and device == "cpu":
        raise SiftcliError("precision: fp16 needs a CUDA GPU; use bf16 or fp32 on a CPU")
    return torch.device(device)


def autocast(device: torch.device, precision: str) -> contextlib.AbstractContextManager:
    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=torch.bfloat16 if precision == "bf16" else torch.float16)


def lr_factor(progress: float, warmup: float, schedule: str) -> float:
    """Learning-rate multiplier at ``progress`` in [0, 1] of the run.

    Progress counts raw samples consumed (or steps of a step-capped run), so the schedule
    ends fully decayed exactly when training ends, whatever fraction sifting keeps.
    """
    progress = min(max(progress, 0.0), 1.0)
    if warmup > 0 and progress < warmup:
        return progress / warmup
    if schedule == "constant":
        return 1.0
    rest = (progress - warmup) / max(1e-12, 1.0 - warmup)
    if schedule == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * rest))
    return max(0.0, 1.0 - rest)


@torch.no_grad()
def evaluate(model: torch.nn.Module, loader: DataLoader, task: str, device: torch.device, precision: str) -> dict[str, float]:
    """Eval loss plus the task metric: accuracy, mse or perplexity."""
    was_training = model.training
    model.eval()
    total_loss, correct, count = 0.0, 0, 0
    kind = {"causal-lm": "causal_lm", "regression": "mse"}.get(task, "cross_entropy")
    try:
        for batch in loader:
            batch = {k: v.to(device) for k, v in batch.items()}
            labels = batch.pop("labels")
            with autocast(device, precision):
                out = model(**batch)
            logits = out.logits.float()
            losses = loss_from_logits(logits, labels, kind)
            total_loss += float(losses.sum())
            count += labels.shape[0]
            if kind == "cross_entropy":
                correct += int((logits.argmax(-1) == labels).sum())
    finally:
        model.train(was_training)
    mean_loss = total_loss / max(1, count)
    result = {"loss": mean_loss}
    if kind == "cross_entropy":
        result["accuracy"] = correct / max(1, count)
    elif kind == "mse":
        result["mse"] = mean_loss
    else:
        result["perplexity"] = math.exp(min(mean_loss, 50.0))
    return result


def _param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (no_decay if p.ndim < 2 or "norm" in name.lower() or name.endswith(".bias") else decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def make_optimizer(model: torch.nn.Module, lr: float, weight_decay: float) -> torch.optim.Optimizer:
    """AdamW, fused where this torch build supports it: on short-sequence fine-tunes the optimizer
    step can be 40% of training time, and the fused kernel cuts it on CPU and GPU alike."""
    groups = _param_groups(model, weight_decay)
    try:
        return torch.optim.AdamW(groups, lr=lr, fused=True)
    except (RuntimeError, TypeError, ValueError):  # older torch, or a device without the fused kernel
        return torch.optim.AdamW(groups, lr=lr)


def _rng_state() -> dict[str, Any]:
    import numpy as np

    state = {"torch": torch.get_rng_state(), "python": random.getstate(), "numpy": np.random.get_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    import numpy as np

    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def train(
    workload: Workload,
    settings: TrainSettings,
    sift: SiftConfig | None = None,
    *,
    sift_precision: str | None = None,
    run_dir: Path | None = None,
    arm: str = "baseline",
    on_event: Event | None = None,
    resume: bool = False,
) -> dict[str, Any]:
    """Run one fine-tune and return its metrics (also written to ``run_dir/metrics.json``)."""
    emit = on_event or (lambda kind, data: None)
    device = resolve_device(settings.device, settings.precision)
    torch.manual_seed(settings.seed)
    random.seed(settings.seed)
    wall_start = time.perf_counter()

    # -- data and model --------------------------------------------------------------------
    model = workload.model.to(device)
    model.train()
    n_train = len(workload.train_data)
    sampler = SeededSampler(n_train, settings.seed)
    raw_loader = DataLoader(
        workload.train_data, batch_size=settings.batch_size, sampler=sampler, collate_fn=workload.collate,
        num_workers=settings.num_workers, pin_memory=device.type == "cuda",
        # its own generator: creating an iterator must not draw from the global RNG, or a
        # resumed run's dropout masks would differ from an uninterrupted run's
        generator=torch.Generator().manual_seed(settings.seed),
    )
    eval_loader = DataLoader(workload.eval_data, batch_size=settings.eval_batch_size, shuffle=False, collate_fn=workload.collate)
    forward_model = torch.compile(model, dynamic=True) if settings.compile else model
    loader: SiftingDataLoader | PassThroughLoader
    keep_trace: list[list[float]] = []  # [raw_batch, n, kept] per raw batch, for the keep-rate plot
    kept_losses: list[float] = []
    rejected_losses: list[float] = []
    if sift is not None:
        loader = SiftingDataLoader(
            raw_loader, forward_model, workload.loss_fn, sift, batch_size=settings.batch_size, device=device,
            precision=scoring_precision(sift_precision, device, settings.precision), pad_values=workload.pad_values,
            padding_side=workload.padding_side,
        )

        def trace(raw_batch: Any, mask: torch.Tensor, losses: torch.Tensor | None) -> None:
            keep_trace.append([len(keep_trace), int(mask.numel()), int(mask.sum())])
            if losses is not None and len(kept_losses) + len(rejected_losses) < 20_000:
                kept_losses.extend(losses[mask].tolist())
                rejected_losses.extend(losses[~mask].tolist())

        loader.add_batch_hook(trace)
    else:
        loader = PassThroughLoader(raw_loader)

    optimizer = make_optimizer(model, settings.lr, settings.weight_decay)
    scaler = torch.amp.GradScaler("cuda") if settings.precision == "fp16" else None
    total_raw = max(1, math.ceil(settings.epochs * n_train))
    n_epochs = math.ceil(settings.epochs)

    # -- state (all of it checkpointed) ----------------------------------------------------------
    step, epoch, trained, train_clock = 0, 0, 0, 0.0
    phases = dict.fromkeys(PHASES, 0.0)
    curve: list[dict[str, Any]] = []
    last_eval_clock = 0.0
    last_eval_step = -1
    log = JsonlLog(run_dir / "log.jsonl") if run_dir else None
    ckpt_path = run_dir / "checkpoint.pt" if run_dir else None
    if resume:
        if ckpt_path is None or not ckpt_path.exists():
            raise SiftcliError(f"--resume {run_dir}: no checkpoint.pt in that folder; nothing to resume")
        ck = torch.load(ckpt_path, map_location=device, weights_only=False)
        if ck.get("arm") != arm:
            raise SiftcliError(f"--resume {run_dir}: checkpoint is of the {ck.get('arm')!r} run, not {arm!r}")
        model.load_state_dict(ck["model"])
        optimizer.load_state_dict(ck["optimizer"])
        loader.load_state_dict(ck["loader"])
        if scaler is not None and ck.get("scaler"):
            scaler.load_state_dict(ck["scaler"])
        step, epoch, trained, train_clock = ck["step"], ck["epoch"], ck["trained"], ck["train_clock"]
        phases, curve, last_eval_clock, last_eval_step = ck["phases"], ck["curve"], ck["last_eval_clock"], ck["last_eval_step"]
        keep_trace[:] = ck.get("keep_trace", [])
        _set_rng_state(ck["rng"])

    def raw_consumed() -> int:
        return loader.stats.raw_samples if isinstance(loader, SiftingDataLoader) else loader.raw_samples

    def progress() -> float:
        if settings.max_steps:
            return step / settings.max_steps
        return raw_consumed() / total_raw

    def done() -> bool:
        # Whole epochs end when the loader runs dry (so sifted remainders are trained on);
        # a fractional last epoch ends on the raw-sample budget.
        if settings.max_steps is not None and step >= settings.max_steps:
            return True
        return settings.epochs != n_epochs and raw_consumed() >= total_raw

    def save_checkpoint() -> None:
        if ckpt_path is None:
            return
        t0 = time.perf_counter()
        atomic_torch_save(ckpt_path, {
            "arm": arm, "model": model.state_dict(), "optimizer": optimizer.state_dict(),
            "loader": loader.state_dict(), "scaler": scaler.state_dict() if scaler else None,
            "step": step, "epoch": epoch, "trained": trained, "train_clock": train_clock, "phases": phases,
            "curve": curve, "last_eval_clock": last_eval_clock, "last_eval_step": last_eval_step,
            "keep_trace": keep_trace, "rng": _rng_state(),
        })
        phases["checkpoint"] += time.perf_counter() - t0

    def run_eval(reason: str) -> None:
        nonlocal last_eval_clock, last_eval_step
        t0 = time.perf_counter()
        result = evaluate(forward_model, eval_loader, workload.task, device, settings.precision)
        phases["evaluation"] += time.perf_counter() - t0
        point = {"step": step, "epoch": epoch, "train_seconds": train_clock, "raw_samples": raw_consumed(),
                 "trained_samples": trained, "reason": reason, **result}
        curve.append(point)
        last_eval_clock, last_eval_step = train_clock, step
        if log:
            log.write({"event": "eval", **point})
        emit("eval", point)

    def metrics(status: str) -> dict[str, Any]:
        out = _summarise(workload, settings, sift, loader, arm, status, step, trained, train_clock, phases, curve,
                         time.perf_counter() - wall_start, device, keep_trace)
        if run_dir:
            atomic_write_json(run_dir / "metrics.json", out)
            if sift is not None:
                atomic_write_json(run_dir / "sift_losses.json", {"kept": kept_losses, "rejected": rejected_losses})
        return out

    emit("start", {"arm": arm, "epochs": n_epochs, "steps_per_epoch": len(loader), "total_raw": total_raw,
                   "max_steps": settings.max_steps, "step": step})
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    try:
        while epoch < n_epochs and not done():
            batches = iter(loader)
            while True:
                t0 = time.perf_counter()
                scoring_before = loader.stats.scoring_seconds if isinstance(loader, SiftingDataLoader) else 0.0
                batch = next(batches, None)
                t1 = time.perf_counter()
                if batch is None:
                    break
                scored = (loader.stats.scoring_seconds - scoring_before) if isinstance(loader, SiftingDataLoader) else 0.0
                phases["scoring"] += scored
                phases["data"] += (t1 - t0) - scored

                lr = settings.lr * lr_factor(progress(), settings.warmup_fraction, settings.schedule)
                for group in optimizer.param_groups:
                    group["lr"] = lr
                batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
                with autocast(device, settings.precision):
                    loss = workload.loss_fn(forward_model, batch).mean()
                if not torch.isfinite(loss):
                    raise _NonFiniteLoss(loss.item())
                (scaler.scale(loss) if scaler else loss).backward()
                sync()
                t2 = time.perf_counter()
                if scaler:
                    scaler.unscale_(optimizer)
                if settings.grad_clip:
                    torch.nn.utils.clip_grad_norm_(model.parameters(), settings.grad_clip)
                if scaler:
                    scaler.step(optimizer)
                    scaler.update()
                else:
                    optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                sync()
                t3 = time.perf_counter()
                phases["forward_backward"] += t2 - t1
                phases["optimizer"] += t3 - t2
                train_clock += t3 - t0
                step += 1
                trained += batch["labels"].shape[0]

                if step % settings.log_every_steps == 0 or step == 1:
                    record = {"event": "step", "step": step, "epoch": epoch, "loss": loss.item(),
                              "lr": optimizer.param_groups[0]["lr"], "train_seconds": train_clock,
                              "raw_samples": raw_consumed(), "trained_samples": trained,
                              "kept_fraction": trained / max(1, raw_consumed())}
                    if log:
                        log.write(record)
                    emit("step", record)
                else:
                    emit("tick", {"step": step, "loss": loss.item(), "raw_samples": raw_consumed(), "trained_samples": trained})
                if (settings.eval_every_steps and step % settings.eval_every_steps == 0) or (
                    settings.eval_every_seconds and train_clock - last_eval_clock >= settings.eval_every_seconds
                ):
                    run_eval("periodic")
                if settings.checkpoint_every_steps and step % settings.checkpoint_every_steps == 0:
                    save_checkpoint()
                if done():
                    break
            if batch is not None:  # stopped mid-epoch: the sample or step budget is spent
                break
            epoch += 1
            if settings.eval_per_epoch and last_eval_step != step:
                run_eval("epoch")
            emit("epoch", {"epoch": epoch, "step": step})
        if last_eval_step != step or not curve:
            run_eval("final")
    except KeyboardInterrupt:
        save_checkpoint()
        metrics("interrupted")
        if log:
            log.close()
        raise RunInterrupted(str(run_dir)) from None
    except _NonFiniteLoss as exc:
        metrics("failed")
        if log:
            log.close()
        where = f"; partial results in {run_dir}" if run_dir else ""
        raise SiftcliError(
            f"training loss became {exc.value} at step {step + 1} (epoch {epoch + 1}); "
            f"try a lower optim.lr or precision fp32{where}"
        ) from None
    save_checkpoint()
    result = metrics("completed")
    if log:
        log.close()
    emit("end", result)
    return result


class _NonFiniteLoss(Exception):
    def __init__(self, value: float) -> None:
        super().__init__(value)
        self.value = value


def _summarise(
    workload: Workload, settings: TrainSettings, sift: SiftConfig | None, loader: Any, arm: str, status: str,
    step: int, trained: int, train_clock: float, phases: dict[str, float], curve: list[dict[str, Any]],
    total_seconds: float, device: torch.device, keep_trace: list[list[float]],
) -> dict[str, Any]:
    metric = workload.metric
    final = curve[-1] if curve else {}
    sifting = isinstance(loader, SiftingDataLoader)
    raw = loader.stats.raw_samples if sifting else loader.raw_samples
    scored = loader.stats.scored_samples if sifting else 0
    train_compute = phases["forward_backward"] + phases["optimizer"]
    per_trained = train_compute / trained if trained else float("nan")
    s_cost = (phases["scoring"] / scored) / per_trained if scored and trained and per_trained > 0 else float("nan")
    achieved = trained / raw if raw else float("nan")
    keep = None
    if sifting:
        st = loader.stats
        keep = {
            "target": st.target_keep_fraction,
            "achieved": achieved,
            "achieved_after_delay": st.sifted_kept_fraction,
            "per_epoch": [
                {"epoch": e.epoch, "raw": e.raw_samples, "kept": e.kept_samples, "kept_fraction": e.kept_fraction,
                 "after_delay": e.sifted_kept_fraction} for e in st.epochs
            ],
            "nonfinite": st.nonfinite,
            "trace": keep_trace,
        }
    return {
        "status": status,
        "arm": arm,
        "task": workload.task,
        "metric": metric,
        "higher_is_better": workload.higher_is_better,
        "final": {k: final.get(k) for k in ("loss", metric) if k in final},
        "train_seconds": train_clock,
        "total_seconds": total_seconds,
        "optimizer_steps": step,
        "raw_samples": raw,
        "samples_scored": scored,
        "samples_trained": trained,
        "keep": keep,
        "phases": phases,
        "scoring_cost": s_cost,
        "predicted_ratio": (scored / raw) * s_cost + achieved if sifting and raw and math.isfinite(s_cost) else None,
        "curve": curve,
        "settings": asdict(settings),
        "sift": {**sift.to_dict(), "scoring_precision": loader.precision} if sift and sifting else None,
        "device": str(device),
        "torch": torch.__version__,
    }
