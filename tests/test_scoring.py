"""The scoring piece: no graph, flags restored, and reducible losses by dataset index."""

from __future__ import annotations

import pytest
import torch

from siftcli.sift import SiftConfig, SiftingDataLoader, cross_entropy_loss
from siftcli.sift.scoring import Scorer
from tests.test_loader import _tuple_loader


class DropoutNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Dropout(0.5), torch.nn.Linear(8, 2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


def test_scoring_builds_no_graph_and_restores_train_flags() -> None:
    model = DropoutNet()
    model.train()
    model.body[1].eval()  # a mixed state must come back exactly
    seen = []

    def loss(m: torch.nn.Module, batch) -> torch.Tensor:
        seen.append((torch.is_grad_enabled(), m.training, torch.is_inference_mode_enabled()))
        out = cross_entropy_loss(m, batch)
        assert out.grad_fn is None
        return out

    loader = SiftingDataLoader(_tuple_loader(), model, loss, SiftConfig())
    next(iter(loader))
    assert seen[0] == (False, False, True)
    assert model.training and model.body[0].training and not model.body[1].training


def test_reducible_scores_subtract_the_reference_loss_of_the_same_samples() -> None:
    scorer = Scorer(torch.nn.Linear(4, 2), cross_entropy_loss, torch.device("cpu"), reference_losses=torch.arange(10.0))
    losses = torch.tensor([5.0, 5.0, 5.0])
    assert scorer.scores(losses, torch.tensor([0, 4, 9])).tolist() == [5.0, 1.0, -4.0]
    with pytest.raises(ValueError, match="needs each batch's dataset indices"):
        scorer.scores(losses, None)
    with pytest.raises(ValueError, match="holds 10 values"):
        scorer.scores(losses, torch.tensor([0, 1, 10]))
    plain = Scorer(torch.nn.Linear(4, 2), cross_entropy_loss, torch.device("cpu"))
    assert plain.scores(losses, None) is losses


def test_reducible_sifting_keeps_what_is_learnable_not_what_is_noisy() -> None:
    """Half the samples have a huge reference loss (unlearnable): reducible scoring ranks them down."""
    data = _tuple_loader(n=400, batch=20)
    model = torch.nn.Linear(4, 2)
    reference = torch.zeros(400)
    reference[::2] = 100.0  # even indices: 'mislabelled', high loss under any model
    loader = SiftingDataLoader(data, model, cross_entropy_loss, SiftConfig(beta=3.0, mode="calibrated", score="reducible",
                                                                           loss_history_length=100), reference_losses=reference)
    kept: list[int] = []
    loader.add_batch_hook(lambda d: kept.extend(d.indices[d.mask].tolist()))
    list(loader)
    share_even = sum(1 for i in kept if i % 2 == 0) / len(kept)
    assert len(kept) == 100 and share_even < 0.2
    with pytest.raises(ValueError, match="go together"):
        SiftingDataLoader(data, model, cross_entropy_loss, SiftConfig(score="reducible"))
    with pytest.raises(ValueError, match="needs sample indices"):
        SiftingDataLoader(list(data), model, cross_entropy_loss, SiftConfig(score="reducible"), batch_size=20,
                          reference_losses=reference)
