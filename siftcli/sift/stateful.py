"""The one name for what every part's ``state_dict()`` returns and ``load_state_dict()`` takes."""

from __future__ import annotations

from typing import Any

#: PyTorch's Stateful protocol, as a type: names to tensors and plain containers (numbers, strings, lists, dicts of
#: them). The sifting loader's parts keep to that, so a saved state loads with ``torch.load(weights_only=True)``; a
#: record read by its keys elsewhere gets a typed record of its own, never this.
StateDict = dict[str, Any]
