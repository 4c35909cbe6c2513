"""The registry: one :class:`~benchmarks.harness.Entry` per benchmark, workloads × arms as data."""

from __future__ import annotations

from benchmarks import data
from benchmarks.harness import ROOT, Entry

#: The selection regimes of the first benchmark: plain-loss and reducible-loss sifting against the opponents.
SELECTION_ARMS = ("baseline", "sifted:score=loss", "sifted:score=reducible", "equal-time", "random-keep", "static-filter")
SELECTION_ABOUT = ("Arms per seed: baseline; sifted:score=loss (ranks the loss); sifted:score=reducible (loss minus a "
                   "cross-fitted reference's, the references trained first, on its clock, and cached); equal-time, "
                   "random-keep and static-filter derive from the reducible arm.")


def _selection(name: str, recipe: str, overrides: tuple[str, ...], title: str) -> Entry:
    return Entry(name=name, title=f"Selection regime {name}: {title}", recipe=f"recipes/benchmarks/{recipe}", arms=SELECTION_ARMS,
                 subjects=("sifted:score=reducible", "sifted:score=loss"), overrides=overrides, about=SELECTION_ABOUT,
                 aim_ratio=0.6)


def _teacher() -> None:
    """The distillation teacher: pretrained MiniLM fine-tuned on SST-2 once, into runs/distill-teacher (reused)."""
    from siftcli.config import load_recipe
    from siftcli.runner import run_train

    out = ROOT / "runs" / "distill-teacher"
    if not (out / "model" / "config.json").exists():
        run_train(load_recipe(ROOT / "recipes" / "benchmarks" / "sst2-distill-teacher.yaml"), output=str(out))

ENTRIES = (
    Entry(
        name="relevance",
        title="Relevance: a pool from the wrong distribution, a reference that points at the target",
        recipe="recipes/benchmarks/relevance-mr.yaml",
        arms=("baseline", "sifted", "sifted:score=reducible,scoring=memory", "equal-time", "random-keep", "static-filter",
              "target-only"),
        subjects=("sifted", "sifted:score=reducible,scoring=memory"),
        prepare=lambda: data.relevance(600, 1200),
        extra={"target_group": "mr"},
        about="Target: MR sentence polarity, tested on 2,000 held-out MR sentences. Pool: 600 MR sentences and 1,200 AG "
              "News texts with their topics carried onto the two labels. Pretrained MiniLM, 3 epochs. The reference "
              "(MiniLM's first three layers fine-tuned 4 epochs on 500 other MR sentences, `sift.reference.kind: holdout`) is built by the "
              "first arm that needs it, on that arm's clock, and cached. `sifted` keeps a quarter of each raw batch by "
              "the reference's loss alone (`score: reference`: no scoring forward); `sifted:score=reducible,scoring=memory` by "
              "learner loss (remembered from training forwards, rescored when a loss is over an epoch old) minus reference "
              "loss. The static filter keeps the same fraction "
              "with the lowest reference loss, chosen once; target-only trains on the pool's MR rows alone (the "
              "ceiling of a perfect filter).",
    ),
    _selection("noise-agnews-20", "agnews-noise.yaml", ("data.label_noise=0.2",), "AG News, 20% flipped labels, from scratch"),
    _selection("noise-agnews-40", "agnews-noise.yaml", ("data.label_noise=0.4",), "AG News, 40% flipped labels, from scratch"),
    _selection("noise-sst2-20", "sst2-noise.yaml", ("data.label_noise=0.2",), "SST-2, 20% flipped labels, from scratch"),
    _selection("noise-sst2-40", "sst2-noise.yaml", ("data.label_noise=0.4",), "SST-2, 40% flipped labels, from scratch"),
    _selection("long-agnews", "agnews-long.yaml", (), "many epochs on clean data: AG News, from scratch, 12 epochs"),
    _selection("short-agnews-minilm", "agnews-minilm.yaml",
               ("data.max_train_samples=1000", "data.max_eval_samples=2000", "eval.every_steps=40"),
               "short fine-tune of pretrained MiniLM, AG News, 1,000 texts"),
    Entry(
        name="distill",
        title="Distillation: a teacher on every arm's clock",
        recipe="recipes/benchmarks/sst2-distill.yaml",
        arms=("baseline", "sifted", "variant:distill.cache=false,sift.enabled=false", "variant:distill.cache=false",
              "equal-time", "random-keep"),
        subjects=("sifted", "variant:distill.cache=false"),
        prepare=_teacher,
        aim_ratio=0.5,
        about="A 2-layer, 128-wide BERT student distilled on 4,000 SST-2 sentences from a MiniLM teacher fine-tuned once "
              "(runs/distill-teacher, reused; its fine-tune is on no arm's clock). `baseline` is cached distillation "
              "(`distill.cache`: the teacher once per sample); `sifted` adds sifting to it; "
              "`variant:distill.cache=false,sift.enabled=false` is plain distillation (the teacher on every sample, every "
              "epoch) and `variant:distill.cache=false` sifted distillation without the cache (the teacher on kept samples "
              "only). Every teacher forward is on its arm's clock.",
    ),
)
