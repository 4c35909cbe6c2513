"""sentence-transformers with sifting: ``SentenceTransformerTrainer`` → :class:`SiftingSentenceTransformerTrainer`.

The trainer's own loss trains (``loss=``: ``MultipleNegativesRankingLoss``, ``CosineSimilarityLoss``, ``SoftmaxLoss``,
a dict of them by dataset), and sifting reads each pair's or triplet's term of it from the same forward
(:func:`~siftcli.sift.losses.mean_terms`): those terms are ranked for the scoring forward and remembered from training.
A batch sampler that promised no repeated text (``BatchSamplers.NO_DUPLICATES``) keeps its promise once kept rows are
packed (:class:`~siftcli.sift.batching.Outbox` ``distinct``), so an in-batch-negatives loss never sees a row's positive
as another row's negative. A loss that is not a mean of one term per row (``CoSENTLoss``, a ``MatryoshkaLoss`` sum) has
no per-sample loss to rank: it is refused at the first batch with the argument that fixes it (``sift_loss=``).
"""

from __future__ import annotations

import warnings
from typing import Any

import torch

from siftcli.integrations.hf import SiftingTrainer
from siftcli.sift.batching import batch_size
from siftcli.sift.losses import mean_terms

try:
    from sentence_transformers import SentenceTransformerTrainer
except ImportError as e:  # pragma: no cover - the route needs the library it routes
    raise ImportError("siftcli.integrations.sentence_transformers needs sentence-transformers: "
                      "pip install 'sentence-transformers[train]'") from e


class SiftingSentenceTransformerTrainer(SiftingTrainer, SentenceTransformerTrainer):
    """``SentenceTransformerTrainer`` whose training loader sifts: the same arguments (``loss=``, ``evaluator=``,
    ``args=SentenceTransformerTrainingArguments(...)``) plus ``sift_config=``. Checkpoints, resume, the exact epoch
    length and ``sift_kept_fraction`` in the logs are :class:`~siftcli.integrations.hf.SiftingTrainer`'s.

    ``sift_loss`` (optional) replaces the per-sample loss read from the trainer's loss, for the scoring forward and for
    what training remembers (the route for a loss with no per-row term, such as ``CoSENTLoss``); the trainer's loss
    still trains, and, computed apart from it, ``infobatch``'s weights cannot reweight it (a warning says so).
    """

    def __init__(self, *args: Any, sift_loss: Any = None, **kwargs: Any) -> None:
        super().__init__(*args, sift_loss=sift_loss, **kwargs)
        self.own_sift_loss = sift_loss
        if sift_loss is None:
            self.sift_loss = self.pair_losses
        elif self.sift_config.mode == "infobatch":
            warnings.warn(f"{type(self).__name__}: with sift_loss= the per-sample losses are computed apart from the "
                          "trainer's loss, so infobatch's weights cannot reweight it: the batch trains the trainer's loss "
                          "unweighted (sifting still decides which rows train)", stacklevel=2)

    def pair_losses(self, model: torch.nn.Module, batch: Any) -> torch.Tensor:
        """Each row's term of the trainer's loss on ``batch`` (the scoring forward's per-sample losses)."""
        return self._terms(model, dict(batch), None)[1]

    def _terms(self, model: torch.nn.Module, inputs: dict[str, Any], num_items_in_batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """The trainer's loss on ``inputs`` and each row's term of it, from one forward."""
        rows = batch_size(inputs)
        total, terms = mean_terms(lambda: SentenceTransformerTrainer.compute_loss(
            self, model, inputs, False, num_items_in_batch), rows)
        if terms is None:
            name = type(self.loss).__name__ if not isinstance(self.loss, dict) else "a loss of the dict"
            raise TypeError(f"{type(self).__name__}: {name}'s batch loss is not a mean of one term per row (it ranks pairs "
                            "across the batch, or sums several losses), so there is no per-sample loss to sift by; give "
                            "sift_loss=(model, batch) -> Tensor[rows], or a loss such as MultipleNegativesRankingLoss, "
                            "CosineSimilarityLoss or SoftmaxLoss")
        return total, terms

    def compute_loss(self, model: torch.nn.Module, inputs: dict[str, Any], return_outputs: bool = False,
                     num_items_in_batch: Any = None) -> Any:
        """Training batches: the trainer's loss as it is, each row's term recorded (and reweighted by the rule's
        weights, ``infobatch``); evaluation batches: the trainer's own."""
        if self.sifting_loader is None or return_outputs or not model.training:
            return SentenceTransformerTrainer.compute_loss(self, model, inputs, return_outputs, num_items_in_batch)
        if self.own_sift_loss is None:
            total, terms = self._terms(model, inputs, num_items_in_batch)
            return self.sifting_loader.follow_loss(total, terms)
        with torch.no_grad():  # the user's per-sample loss is what sifting remembers; the trainer's loss trains as it is
            terms = self.own_sift_loss(model, dict(inputs))
        total = SentenceTransformerTrainer.compute_loss(self, model, inputs, False, num_items_in_batch)
        return self.sifting_loader.follow_loss(total, terms, shares=terms.new_zeros(terms.shape))
