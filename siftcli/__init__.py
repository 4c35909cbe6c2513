"""siftcli: online loss-based sifting for PyTorch training.

The library API is importable without the CLI::

    from siftcli import SiftConfig, SiftingDataLoader, hf_loss
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "SiftConfig": "siftcli.sift.sifter",
    "Sifter": "siftcli.sift.sifter",
    "SiftingDataLoader": "siftcli.sift.loader",
    "SiftStats": "siftcli.sift.loader",
    "HFLoss": "siftcli.sift.losses",
    "TupleLoss": "siftcli.sift.losses",
    "hf_loss": "siftcli.sift.losses",
    "cross_entropy_loss": "siftcli.sift.losses",
    "mse_loss": "siftcli.sift.losses",
}

__all__ = [*_LAZY, "__version__"]


def __getattr__(name: str) -> Any:
    """Import torch only when the library API is used, so ``siftcli --help`` stays fast."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'siftcli' has no attribute {name!r}")
