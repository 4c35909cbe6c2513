"""The one table of tasks: what every module asks about a task lives here.

Adding a task or a loss is one edit to :data:`TASKS`; config validation, the model builder, the data
loader, the collator, the loss, evaluation and the report all read it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

TaskName = Literal["text-classification", "regression", "causal-lm", "image-classification"]


@dataclass(frozen=True)
class Task:
    """What a task is: model class, losses it accepts, the metric it is judged by, label and input kinds."""

    name: str
    auto_class: str  # transformers Auto* class that builds the model
    losses: tuple[str, ...]  # accepted loss kinds; the first is what ``loss: auto`` means
    metric: str  # accuracy, mse or perplexity
    labels: Literal["class", "float", "tokens"]  # class ids, one float, or the input tokens (causal LM)
    inputs: Literal["text", "image"] = "text"

    @property
    def default_loss(self) -> str:
        return self.losses[0]

    def loss_kind(self, loss: str) -> str:
        """The per-sample loss kind of a recipe's ``loss`` (``auto`` or one of :attr:`losses`)."""
        return self.default_loss if loss == "auto" else loss

    def metric_of(self, metric: str) -> str:
        return self.metric if metric == "auto" else metric


@dataclass(frozen=True)
class Metric:
    """How a metric reads: its direction, and the scale and unit differences are reported in (accuracy in points)."""

    name: str
    higher_is_better: bool
    # the value from evaluation's totals: (mean per-sample loss, correct argmax predictions, samples)
    value: Callable[[float, int, int], float] = lambda mean_loss, correct, count: mean_loss
    counts_correct: bool = False  # evaluation must count argmax hits
    scale: float = 1.0  # a difference of two values, times this, is reported in ``unit``
    unit: str = ""


METRICS: dict[str, Metric] = {
    "accuracy": Metric("accuracy", True, lambda loss, correct, count: correct / max(1, count), True, 100.0, " points"),
    "mse": Metric("mse", False),
    "perplexity": Metric("perplexity", False, lambda loss, correct, count: math.exp(min(loss, 50.0))),
}


TASKS: dict[str, Task] = {
    # ``bce`` is not offered for classification: labels here are class ids, not multi-hot vectors.
    "text-classification": Task("text-classification", "AutoModelForSequenceClassification", ("cross_entropy",), "accuracy", "class"),
    "image-classification": Task("image-classification", "AutoModelForImageClassification", ("cross_entropy",), "accuracy", "class",
                                 inputs="image"),
    "regression": Task("regression", "AutoModelForSequenceClassification", ("mse",), "mse", "float"),
    "causal-lm": Task("causal-lm", "AutoModelForCausalLM", ("causal_lm",), "perplexity", "tokens"),
}


def metric(name: str) -> Metric:
    """The :class:`Metric` called ``name``; an unknown name (a user's own) reads as lower-is-better, unscaled. The one
    place that answers whether higher is better (``metric(name).higher_is_better``)."""
    return METRICS.get(name) or Metric(name, False)


def task(name: str) -> Task:
    """The :class:`Task` called ``name`` (config validation guarantees it exists)."""
    return TASKS[name]
