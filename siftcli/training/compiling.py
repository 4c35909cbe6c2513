"""``compile: true``: ``torch.compile`` for the training, scoring and evaluation forwards, with its cost in view.

A compiled model specialises on input shapes. Text batches padded to their longest sample bring a new
sequence length almost every batch, and each new shape can cost a recompilation (seconds to minutes);
after ``recompile_limit`` (8) of them for one function, dynamo silently runs it eagerly. siftcli therefore
pads sequence lengths to a few buckets when compiling (``pad_to_multiple_of``, default 16: see
:func:`siftcli.sift.batching.bucket`), compiles one static graph per bucket at the start of the run, on its clock
(:func:`siftcli.training.warm.precompile`), so nothing compiles in the steady state, leaves scoring and evaluation
eager (their shapes differ: inference mode, subsets of any size), and counts what was compiled: :func:`counts` before
and after a run gives
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


#: Static graphs one compiled forward may hold (every bucket width, full and partial batches, train and eval modes).
RECOMPILE_LIMIT = 64


def compile_module(module: torch.nn.Module, mode: str = "default") -> Any:
    """``torch.compile`` with static shapes: one graph per bucket width (:func:`~siftcli.sift.batching.bucket`), each a
    specialised kernel set, instead of one dynamic-shape graph whose kernels are slower and which a new batch size
    recompiles anyway. The widths are few and known (multiples of ``pad_to_multiple_of`` up to ``max_length``), and the
    recompile limit is raised above their count so dynamo never quietly falls back to eager for a width it has not seen.
    ``mode`` is torch.compile's (``reduce-overhead``: CUDA graphs, which static shapes allow). A frame that cannot compile
    runs eagerly (counted)."""
    import torch._dynamo.config as dynamo_config

    dynamo_config.suppress_errors = True
    for name in ("recompile_limit", "cache_size_limit"):  # the name changed across torch releases
        if hasattr(dynamo_config, name):
            setattr(dynamo_config, name, max(getattr(dynamo_config, name), RECOMPILE_LIMIT))
    options = {"mode": mode} if BACKEND == "inductor" and mode != "default" else {}
    return torch.compile(module, backend=BACKEND, dynamic=False, **options)


def counts() -> dict[str, float]:
    """Dynamo's running totals in this process: graphs compiled, frame compilations, frames that fell back to eager, and
    the seconds compiling took (every frame's compile, the backend's code generation inside it; on the run's clock,
    reported apart so a reader sees what compiling cost against what it saved)."""
    try:
        from torch._dynamo.utils import compilation_time_metrics, counters
    except ImportError:  # a torch without dynamo
        return {"graphs": 0, "compilations": 0, "eager_fallbacks": 0, "seconds": 0.0}
    stats, frames = counters.get("stats", {}), counters.get("frames", {})
    return {"graphs": int(stats.get("unique_graphs", 0)), "compilations": int(frames.get("total", 0)),
            "eager_fallbacks": int(frames.get("total", 0)) - int(frames.get("ok", 0)),
            "seconds": float(sum(compilation_time_metrics.get("_compile.compile_inner", [])))}


def since(before: dict[str, float]) -> dict[str, float]:
    """What :func:`counts` grew by since ``before``."""
    now = counts()
    return {k: now[k] - before.get(k, 0) for k in now}
