"""``compile: true``: ``torch.compile`` for the training, scoring and evaluation forwards, with its cost in view.

A compiled model specialises on input shapes. Text batches padded to their longest sample bring a new
sequence length almost every batch, and each new shape can cost a recompilation (seconds to minutes);
after ``recompile_limit`` (8) of them for one function, dynamo silently runs it eagerly. siftcli therefore
pads sequence lengths to a few buckets when compiling (``pad_to_multiple_of``, default 16: see
:func:`siftcli.sift.batching.bucket`), lets dynamo mark dimensions that still vary as dynamic (its default,
"automatic dynamic shapes"), and counts what was compiled: :func:`counts` before and after a run gives
the graphs compiled, the compilations (every compile of a frame, so recompilations after a new shape or a
train/eval switch count too), and the frames that fell back to eager, in ``metrics.json``.
A frame that fails to compile (no C++ compiler for the CPU backend, an unsupported op) runs eagerly
instead of failing the run, and is counted there.
"""

from __future__ import annotations

from typing import Any

import torch

#: The backend ``compile: true`` uses (tests swap in dynamo's ``eager`` backend, which traces without generating code).
BACKEND: Any = "inductor"


def compile_module(module: torch.nn.Module) -> Any:
    """``torch.compile`` with automatic dynamic shapes; a frame that cannot compile runs eagerly (counted)."""
    import torch._dynamo.config as dynamo_config

    dynamo_config.suppress_errors = True
    return torch.compile(module, backend=BACKEND)


def counts() -> dict[str, int]:
    """Dynamo's running totals in this process: graphs compiled, frame compilations, frames that fell back to eager."""
    try:
        from torch._dynamo.utils import counters
    except ImportError:  # a torch without dynamo
        return {"graphs": 0, "compilations": 0, "eager_fallbacks": 0}
    stats, frames = counters.get("stats", {}), counters.get("frames", {})
    return {"graphs": int(stats.get("unique_graphs", 0)), "compilations": int(frames.get("total", 0)),
            "eager_fallbacks": int(frames.get("total", 0)) - int(frames.get("ok", 0))}


def since(before: dict[str, int]) -> dict[str, int]:
    """What :func:`counts` grew by since ``before``."""
    now = counts()
    return {k: now[k] - before.get(k, 0) for k in now}
