"""A recipe in, the strategies that apply to it out (each an arm of the table), and those that do not, with why.

A strategy is a row of :data:`~siftcli.arms.table.ARMS` with settings: ``train-less:fraction=F`` (fewer steps),
``filter:fraction=F,reference=KIND`` (a static filter by a cheap reference), ``dedup``, ``filter:dedup=T,fraction=F``
(both), ``sifted:...`` (online sifting at a fixed calibrated setting) and ``sifted`` (the recipe's own sift section,
when it sifts), ``target-only`` (the pool's rows of ``data.target_group``, when the recipe names one),
``variant:distill.cache=true,sift.enabled=false`` (the teacher cache, on the baseline: a variant sifts when
the recipe does). Adding a strategy to the plan is a line in :func:`strategies`, never
new search code.
"""

from __future__ import annotations

from siftcli.arms.table import arm_row
from siftcli.curate.dedup import DEFAULT_SIMILARITY
from siftcli.errors import SiftcliError, first_line
from siftcli.plan.record import Candidate, Skipped
from siftcli.recipe.schema import Recipe
from siftcli.tasks import TASKS
from siftcli.training.setup import sift_config

#: Kept fractions tried for a static filter, and for training less.
FILTER_FRACTIONS = (0.25, 0.5)
LESS_FRACTIONS = (0.35, 0.5)
#: Online sifting, searched over its score and beta: a calibrated half of each batch by a fresh loss (its cost known in
#: advance), the loss remembered from training at beta 1 and 2 (kept shares 1/2 and 1/3, scoring nearly free), and a
#: label-free score (the prediction's entropy); with a holdout, the reference's score (a loss the pool is ranked by).
ONLINE = ("mode=calibrated,keep_fraction=0.5,score=loss,scoring=fresh",
          "mode=probabilistic,beta=1,score=loss,scoring=memory",
          "mode=probabilistic,beta=2,score=loss,scoring=memory",
          "mode=probabilistic,beta=1,score=entropy,scoring=fresh")
ONLINE_WITH_REFERENCE = "mode=probabilistic,beta=1,score=reference,scoring=fresh"
#: A first guess of online sifting's cost beyond its kept fraction, in runs of its schedule, before a rung measures it:
#: a fresh scoring forward over every raw batch (a forward is about a third of a training step), or, scoring from
#: memory, the refresh of stale losses. Measured on the default recipe at a kept share of 0.66 (docs/benchmarks.md,
#: scoring that costs nothing): 0.84 of the baseline's time with fresh scoring, 0.70 from memory.
SCORING_GUESS = {"fresh": 0.35, "memory": 0.05}
#: Cheap references first: they cost milliseconds; a holdout model costs a small training run.
CHEAP_REFERENCES = ("ngram", "naive-bayes", "holdout")
#: A counting reference's build, in baseline runs, before one is measured (n-gram counts and naive Bayes over a holdout
#: take a second or two where a run takes minutes).
COUNTING_REFERENCE = 0.01
#: A teacher's forward over a batch, in training steps of the student, before one is measured: the teacher cache saves
#: it on every epoch after the first (a forward is about a third of a step; a teacher larger than its student costs more).
TEACHER_GUESS = 0.3


def strategies(recipe: Recipe) -> tuple[list[Candidate], list[Skipped]]:
    """Every strategy the plan will try on ``recipe`` (after ``baseline``, which it always runs), and the families it
    skips with the reason."""
    out: list[Candidate] = []
    skipped: list[Skipped] = []

    def add(arm: str, family: str, fraction: float | None, extra: float = 0.0, reference: str | None = None,
            exact: bool = False, first: float = 0.0) -> None:
        out.append(Candidate(arm, family, arm_row(arm).about, fraction, extra_cost=extra, reference=reference,
                             exact=exact, first_epoch_cost=first))

    for f in LESS_FRACTIONS:
        add(f"train-less:fraction={f}", "fewer-epochs", f)
    ref = recipe.sift.reference
    has_holdout = ref.holdout_source is not None or ref.holdout_fraction is not None
    text = TASKS[recipe.task].inputs == "text"
    kinds = [k for k in CHEAP_REFERENCES if has_holdout and (text or k == "holdout")]
    for kind in kinds:
        for f in FILTER_FRACTIONS:
            add(f"filter:fraction={f},reference={kind}", "filter", f, reference=kind)
    if not has_holdout:
        skipped.append(Skipped("filter", "no holdout in the recipe (sift.reference.holdout_source or holdout_fraction): "
                                         "the cheap references (n-gram, naive Bayes, a holdout model) have nothing to "
                                         "rank the pool against; cross-fitting costs two trainings, so it is left to "
                                         "`siftcli compare --arm static-filter`"))
    elif not text:
        skipped.append(Skipped("filter (n-gram, naive Bayes)", f"{recipe.task} has no text to count n-grams in"))
    if text:
        add(f"dedup:threshold={DEFAULT_SIMILARITY}", "dedup", None)
        if kinds:
            add(f"filter:dedup={DEFAULT_SIMILARITY},fraction={FILTER_FRACTIONS[-1]},reference={kinds[0]}", "dedup+filter",
                None, reference=kinds[0])
    else:
        skipped.append(Skipped("dedup", f"near-duplicate removal compares token bigrams; {recipe.task} has no text"))
    for settings in ONLINE + ((ONLINE_WITH_REFERENCE,) if kinds and ref.kind in CHEAP_REFERENCES else ()):
        # its expected kept share is the engine's own (SiftConfig.target_keep_fraction); the screen then measures it
        try:  # the setting over the recipe's own sift section (memory_refresh, history, delay): some pairs are invalid
            sifting = online_recipe(recipe, f"sifted:{settings}")
            keep = sift_config(sifting, 1).target_keep_fraction
        except (ValueError, SiftcliError) as exc:
            skipped.append(Skipped(f"online sifted:{settings}", f"invalid with this recipe's sift section: {first_line(exc)}"))
            continue
        if recipe.sift.enabled and sifting.sift == recipe.sift:  # the recipe's own sifting, below, under its own name
            continue
        add(f"sifted:{settings}", "online", keep, scoring_guess(sifting), reference_of(sifting),
            first=first_epoch_guess(sifting))
    if recipe.sift.enabled:  # the user's own sifting settings are a candidate too, as they wrote them, at their cost
        add("sifted", "online", sift_config(recipe, 1).target_keep_fraction, scoring_guess(recipe), reference_of(recipe),
            first=first_epoch_guess(recipe))
    if recipe.data.target_group is not None:  # its share of the pool is counted before the screen (plan.search.measure)
        add("target-only", "target-only", None)
    else:
        skipped.append(Skipped("target-only", "the recipe names no target group (data.group_column and target_group)"))
    if recipe.distill is None:
        skipped.append(Skipped("teacher-cache", "the recipe does not distill"))
    elif recipe.distill.cache is False:  # the teacher's forward, saved on every epoch after the first
        saved = TEACHER_GUESS / (1 + TEACHER_GUESS) * (1 - 1 / max(1.0, recipe.epochs))
        # with fixed inputs and whole outputs kept, the cached outputs are the ones the teacher would give again: the
        # baseline's own training at another cost
        add("variant:distill.cache=true,sift.enabled=false", "teacher-cache", 1.0, -saved,
            exact=recipe.data.augment is None and recipe.distill.cache_top_k is None)
    else:
        skipped.append(Skipped("teacher-cache", "already on: the baseline caches the teacher (distill.cache)"))
    return out, skipped


def scoring_guess(recipe: Recipe) -> float:
    """Online sifting's predicted cost beyond its kept share: none when it ranks by the reference's score alone (decided
    at the sampler, no forward), else :data:`SCORING_GUESS` for its scoring."""
    return 0.0 if recipe.sift.score == "reference" else SCORING_GUESS[recipe.sift.scoring]


def first_epoch_guess(recipe: Recipe) -> float:
    """What online sifting's first epoch costs beyond :func:`scoring_guess`, in runs of that epoch: scoring from memory
    knows no loss yet, so it scores every sample afresh there."""
    if recipe.sift.score == "reference" or recipe.sift.scoring != "memory":
        return 0.0
    return SCORING_GUESS["fresh"] - SCORING_GUESS["memory"]


def reference_of(recipe: Recipe) -> str | None:
    """The reference an online candidate builds: the recipe's, when it ranks by the reference's score or its reducible
    loss."""
    return recipe.sift.reference.kind if recipe.sift.score in ("reference", "reducible") else None


def reference_cost(recipe: Recipe, kind: str, holdout_rows: int, train_rows: int) -> float:
    """A reference's build in baseline runs, before it is measured: a counting reference next to nothing, a holdout
    model its rows and epochs over the baseline's (its smaller size, where it has one, left as a margin)."""
    if kind != "holdout":
        return COUNTING_REFERENCE
    return holdout_rows * recipe.sift.reference.epochs / max(1.0, train_rows * recipe.epochs)


def online_recipe(recipe: Recipe, arm: str) -> Recipe:
    """The recipe sifting with the settings an online arm's name carries (``sifted:beta=2,score=loss``)."""
    from siftcli.recipe.reader import apply_override
    from siftcli.recipe.schema import validate_recipe

    raw = recipe.model_dump(mode="json")
    raw["sift"]["enabled"] = True
    for item in filter(None, arm.partition(":")[2].split(",")):
        apply_override(raw, f"sift.{item}")
    return validate_recipe(raw, "plan")
