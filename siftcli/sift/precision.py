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
    """The precision the scoring forward runs in: ``auto`` (or ``None``) means bf16 where it is fast.

    Scoring only ranks losses, so bf16 rounding does not change which samples are kept in any
    way that matters, while it cuts the scoring cost s that every saving is bounded by.
    """
    if requested in (None, "auto"):
        return "bf16" if fast_bf16(device) else train_precision
    return requested
