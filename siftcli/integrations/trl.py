"""TRL with sifting: ``SFTTrainer`` → :class:`SiftingSFTTrainer`.

TRL's own loss trains: its token-level negative log-likelihood over every trained token of the batch (or ``dft``), its
``num_items_in_batch`` normalisation under gradient accumulation, the MoE auxiliary loss, and its metrics
(``mean_token_accuracy``, ``entropy``, ``num_tokens``) as the plain trainer logs them. Each sequence's mean token loss
is read from the same forward (TRL's fused head already computes every token's log-probability), recorded for
``scoring="memory"`` and the ``auto`` delay, and, with the rule's weights (``infobatch``), each sequence's share of the
batch loss is reweighted on top. The scoring forward is :data:`~siftcli.sift.losses.hf_loss` on the collated batch
(the mean loss over each sequence's labelled tokens, the unit training records). Checkpoints, resume, the exact
epoch length and ``sift_kept_fraction`` are :class:`~siftcli.integrations.hf.SiftingTrainer`'s.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch

from siftcli.integrations.hf import SiftingTrainer

try:
    from trl import SFTTrainer
except ImportError as e:  # pragma: no cover - the route needs the library it routes
    raise ImportError("siftcli.integrations.trl needs TRL: pip install 'trl>=1.16'") from e


class SiftingSFTTrainer(SiftingTrainer, SFTTrainer):
    """``SFTTrainer`` whose training loader sifts: the same arguments (``args=SFTConfig(...)``, ``processing_class=``,
    ``peft_config=``) plus ``sift_config=`` (and ``sift_loss=`` for another scoring loss)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._rule_weights_reach_loss = (self.compute_loss_func is None and self.label_smoother is None
                                         and getattr(self.args, "loss_type", "nll") in ("nll", "dft"))
        if self.sift_config.mode == "infobatch" and not self._rule_weights_reach_loss:
            warnings.warn("SiftingSFTTrainer: with compute_loss_func or label smoothing TRL computes the loss from a forward "
                          "of its own, so infobatch's weights cannot reweight it: the batch trains TRL's loss unweighted "
                          "(sifting still decides which rows train)", stacklevel=2)

    def compute_loss(self, model: torch.nn.Module, inputs: dict[str, Any], return_outputs: bool = False,
                     num_items_in_batch: Any = None) -> Any:
        """Training batches: TRL's loss as it is, each sequence's mean token loss recorded, its share reweighted by the
        rule's weights; evaluation batches: TRL's own."""
        if self.sifting_loader is None or return_outputs or not model.training:
            return SFTTrainer.compute_loss(self, model, inputs, return_outputs, num_items_in_batch)
        seen: list[Any] = []

        def keep(module: torch.nn.Module, args: Any, kwargs: dict, output: Any) -> None:
            if kwargs.get("fused_lm_head") and getattr(output, "log_probs", None) is not None:
                seen.append(output)

        handle = model.register_forward_hook(keep, with_kwargs=True)
        try:
            total = SFTTrainer.compute_loss(self, model, inputs, False, num_items_in_batch)
        finally:
            handle.remove()
        if not seen:
            raise RuntimeError("SiftingSFTTrainer: TRL's forward returned no per-token log-probabilities (fused_lm_head), "
                               "so there is no per-sequence loss to sift by; give sift_loss= and train with SiftingTrainer's "
                               "loss, or use a TRL release with the fused LM head (trl>=1.16)")
        out = seen[0]
        nll = -out.log_probs  # zero where no label is trained
        losses = nll.sum(1) / out.label_mask.sum(1).clamp(min=1)  # each sequence's mean token loss, hf_loss's unit
        token = nll * out.log_probs.exp().detach() if getattr(self.args, "loss_type", "nll") == "dft" else nll
        total_tokens = out.label_mask.sum() if num_items_in_batch is None else num_items_in_batch
        shares = token.sum(1) / torch.as_tensor(total_tokens, device=token.device).clamp(min=1)
        if self.args.average_tokens_across_devices and num_items_in_batch is not None:  # as TRL scales its loss
            shares = shares * (self.accelerator.num_processes // self.get_tp_size())
        return self.sifting_loader.follow_loss(total, losses, shares if self._rule_weights_reach_loss else shares.detach())
