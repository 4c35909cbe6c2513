"""Per-sample losses: every kind, shape guessing, and the batch adapters."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from siftcli.sift.losses import HFLoss, TupleLoss, loss_from_logits


def test_cross_entropy_is_per_sample() -> None:
    logits = torch.tensor([[2.0, 0.0], [0.0, 2.0], [1.0, 1.0]])
    labels = torch.tensor([0, 0, 1])
    got = loss_from_logits(logits, labels, "cross_entropy")
    assert got.shape == (3,)
    assert torch.allclose(got, F.cross_entropy(logits, labels, reduction="none"))
    assert got[0] < got[2] < got[1]


def test_mse_and_bce_average_over_outputs() -> None:
    assert loss_from_logits(torch.tensor([[1.0], [3.0]]), torch.tensor([1.0, 1.0]), "mse").tolist() == [0.0, 4.0]
    logits = torch.zeros(2, 3)
    bce = loss_from_logits(logits, torch.tensor([[1.0, 0.0, 1.0], [0.0, 0.0, 0.0]]), "bce")
    assert torch.allclose(bce, torch.full((2,), float(torch.log(torch.tensor(2.0)))))


def test_causal_lm_shifts_and_ignores_padding() -> None:
    vocab = 5
    logits = torch.zeros(2, 4, vocab)
    labels = torch.tensor([[1, 2, 3, -100], [1, 2, -100, -100]])
    got = loss_from_logits(logits, labels, "causal_lm")
    assert torch.allclose(got, torch.full((2,), float(torch.log(torch.tensor(float(vocab))))))
    logits[0, 0, 2] = 10.0  # position 0 predicts token 2 for sample 0 only: its loss drops
    got2 = loss_from_logits(logits, labels, "causal_lm")
    assert got2[0] < got[0] and torch.isclose(got2[1], got[1])


def test_auto_guesses_the_kind_from_shapes() -> None:
    assert loss_from_logits(torch.zeros(2, 3), torch.tensor([0, 1])).shape == (2,)  # class ids: cross-entropy
    assert loss_from_logits(torch.zeros(2, 1), torch.tensor([0.5, 1.0])).tolist() == [0.25, 1.0]  # floats: mse
    assert loss_from_logits(torch.zeros(1, 3, 4), torch.tensor([[0, 1, 2]])).shape == (1,)  # tokens: causal LM


def test_unknown_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown loss kind"):
        loss_from_logits(torch.zeros(2, 2), torch.tensor([0, 1]), "hinge")


def test_hf_loss_passes_only_tensor_inputs_and_needs_labels() -> None:
    seen = {}

    class Model(torch.nn.Module):
        def forward(self, input_ids: torch.Tensor) -> dict:
            seen["keys"] = ["input_ids"]
            return {"logits": torch.zeros(input_ids.shape[0], 2)}

    out = HFLoss()(Model(), {"input_ids": torch.ones(3, 4), "labels": torch.tensor([0, 1, 0]), "ids": ["a", "b", "c"]})
    assert out.shape == (3,) and seen["keys"] == ["input_ids"]
    with pytest.raises(TypeError, match="'labels' field"):
        HFLoss()(Model(), {"input_ids": torch.ones(3, 4)})


def test_tuple_loss_and_a_model_without_logits() -> None:
    model = torch.nn.Linear(2, 2)
    assert TupleLoss()(model, (torch.randn(4, 2), torch.tensor([0, 1, 1, 0]))).shape == (4,)

    class NoLogits(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> object:
            return object()

    with pytest.raises(TypeError, match="no logits"):
        TupleLoss()(NoLogits(), (torch.randn(2, 2), torch.tensor([0, 1])))


def test_float_class_ids_are_scored_as_classes_not_regression() -> None:
    logits = torch.tensor([[3.0, 0.0], [0.0, 3.0]])
    got = loss_from_logits(logits, torch.tensor([0.0, 1.0]))
    assert torch.allclose(got, F.cross_entropy(logits, torch.tensor([0, 1]), reduction="none"))
    assert loss_from_logits(torch.zeros(2, 1), torch.tensor([0.5, 2.0])).tolist() == [0.25, 4.0]  # one output: regression
