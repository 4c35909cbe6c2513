"""Which precision a forward runs in, and the one ``autocast`` helper the loop and the scorer share."""

from __future__ import annotations

import contextlib

import torch


def autocast(device: torch.device, precision: str) -> contextlib.AbstractContextManager:
    """``fp32`` is a no-op; ``bf16``/``fp16`` autocast on ``device``."""
    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=torch.bfloat16 if precision == "bf16" else torch.float16)


def fast_bf16(device: torch.device) -> bool:
    """Whether ``device`` runs bf16 matmuls natively (CUDA with bf16, CPUs with AVX512-BF16 or AMX).

    Elsewhere bf16 is emulated and slower than fp32, so ``auto`` must not pick it.
    """
    if device.type == "cuda":
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    if device.type == "cpu":
        probes = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
        return any(bool(getattr(torch.cpu, name, lambda: False)()) for name in probes)
    return False


def scoring_precision(requested: str | None, device: torch.device, train_precision: str) -> str:
    """The precision the scoring forward runs in. ``auto`` (or ``None``): bf16 on a CUDA GPU that has it, elsewhere the
    training precision: decided by the hardware alone, so the same recipe and seed give the same weights under any
    load. ``fastest``: on a CPU with bf16 instructions the scorer times fp32 and bf16 on its first batch and keeps the
    faster (:class:`~siftcli.sift.scoring.Scorer`; the choice is recorded and reused on resume, but a busy machine can
    choose differently from an idle one); elsewhere as ``auto``.

    Scoring only ranks losses, so bf16 rounding does not change which samples are kept in any way that matters,
    and where bf16 is faster it cuts the scoring cost s that every saving is bounded by. Whether it is faster on a
    CPU is not a property of its flags: on a 2-core AVX512-BF16 Xeon with torch 2.13 bf16 autocast scored MiniLM
    1.35-1.54x *slower* than fp32, where another CPU measured it faster (s 0.24 -> 0.17); so it is timed.
    """
    if requested == "fastest":
        if device.type == "cpu" and fast_bf16(device) and train_precision in ("fp32", "bf16"):
            return "fastest"
        requested = "auto"
    if requested in (None, "auto"):
        return "bf16" if device.type == "cuda" and fast_bf16(device) else train_precision
    return requested
