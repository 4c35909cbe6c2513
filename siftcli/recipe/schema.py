"""Recipes: YAML parsed once into a typed, validated config.

Every problem becomes a :class:`SiftcliError` naming the file, the key and what was
expected, so the CLI can print one line and exit with code 2.
"""

from __future__ import annotations

import copy
import difflib
import math
import os
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from siftcli.errors import SiftcliError
from siftcli.tasks import TASKS, TaskName


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _no_bool_numbers(cls, data: Any) -> Any:
        """``beta: true`` is a typo, not 1.0: a number field refuses YAML booleans (pydantic would take them)."""
        if isinstance(data, dict):
            for name, value in data.items():
                field = cls.model_fields.get(name)
                if isinstance(value, bool) and field is not None and _numeric(field.annotation):
                    raise ValueError(f"{name}: expected a number, got {str(value).lower()} (a YAML boolean; also yes/no/on/off)")
        return data


def _numeric(annotation: Any) -> bool:
    """Whether a field takes numbers and not booleans (``float``, ``int | None``, ``int | Literal['auto']``...)."""
    import types
    import typing

    args = typing.get_args(annotation) if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union \
        else (annotation,)
    return any(a in (int, float) for a in args) and bool not in args


class ModelSpec(_Strict):
    """Where the model comes from: a hub id, a local folder, or ``builtin:minilm`` (ships with pip)."""

    source: str = "builtin:minilm"
    from_scratch: bool = False
    config_overrides: dict[str, Any] = Field(default_factory=dict)
    tokenizer: str | None = None
    revision: str | None = None


#: ``data.augment.kind`` values that change images (the rest change tokens).
IMAGE_AUGMENTS = ("crop", "crop-flip")


class AugmentSpec(_Strict):
    """Seeded augmentation (:mod:`siftcli.workload.augment`): each epoch the inputs change, the same way in every run, which is
    what makes a teacher's outputs uncacheable. Text: ``mask`` or ``delete`` tokens; images: ``crop`` (pad, then crop
    back at a random offset) or ``crop-flip`` (and mirror half of them: not for digits or text in images)."""

    kind: Literal["mask", "delete", "crop", "crop-flip"] = "mask"
    rate: float = Field(default=0.15, gt=0, le=0.5, description="text: the chance each ordinary token is masked or deleted")
    pad: float = Field(default=0.125, ge=0, le=0.5, description="images: padding before the crop, a fraction of each side "
                                                                "(0.125: 4 pixels of a 32-pixel image)")


class DataSpec(_Strict):
    """Where the data comes from and which columns mean what."""

    source: str = "builtin:vader-words"
    format: Literal["auto", "csv", "tsv", "jsonl", "json", "parquet", "disk", "hub", "imagefolder"] = "auto"
    config_name: str | None = None
    revision: str | None = Field(default=None, description="a hub dataset's commit, tag or branch: what every read sees "
                                                           "(siftcli filter --stream reads the source twice)")
    train_split: str = "train"
    eval_split: str | None = None
    eval_source: str | None = None
    eval_fraction: float = Field(default=0.15, gt=0, lt=1)
    text_column: str = "text"
    text_pair_column: str | None = None
    image_column: str = "image"
    label_column: str = "label"
    label_names: list[str] | None = None

    @field_validator("source")
    @classmethod
    def _named(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("is empty: give a data file, a folder (imagefolder, save_to_disk) or a hub dataset id")
        return v

    @field_validator("label_names")
    @classmethod
    def _distinct(cls, v: list[str] | None) -> list[str] | None:
        if v is not None:
            if len(v) < 2:
                return v  # checked against the data, which names the offending label
            twice = next((name for name in v if v.count(name) > 1), None)
            if twice is not None:
                raise ValueError(f"{twice!r} is listed twice; each class needs one name")
        return v
    column_names: list[str] | None = None  # for csv/tsv files without a header row
    max_train_samples: int | None = Field(default=None, ge=1)
    max_eval_samples: int | None = Field(default=None, ge=1)
    label_noise: float = Field(default=0.0, ge=0, lt=1, description="fraction of training labels flipped (seeded; for benchmarks)")
    augment: AugmentSpec | None = Field(default=None, description="inputs changed anew every epoch (seeded): tokens masked or "
                                                                  "deleted, images cropped (and flipped)")
    group_column: str | None = Field(
        default=None, description="a column naming where each training row came from; runs report each group's share of kept samples")
    id_column: str | None = Field(
        default=None, description="a column naming each row (a document id): siftcli filter --report carries it beside each row's position")
    target_group: str | None = Field(
        default=None, description="the group the evaluation data stands for (needs group_column): the target-only arm trains on it")

    @model_validator(mode="after")
    def _target_needs_groups(self) -> DataSpec:
        if self.target_group is not None and self.group_column is None:
            raise ValueError("target_group needs group_column (the column that names each row's group)")
        return self


class OptimSpec(_Strict):
    lr: float = Field(default=5e-5, gt=0)
    weight_decay: float = Field(default=0.01, ge=0)
    warmup_fraction: float = Field(default=0.06, ge=0, lt=1)
    schedule: Literal["linear", "cosine", "constant", "wsd"] = Field(default="linear", description=(
        "wsd: warm-up, stable (constant), then a linear decay to zero over the run's last decay_fraction; its warm-up is "
        "a share of the full schedule even under max_steps, so a step-capped run is a fork of the full one"))
    decay_fraction: float = Field(default=0.2, gt=0, le=1, description="wsd: the share of the run, at its end, the "
                                                                       "learning rate decays over")
    grad_clip: float | None = Field(default=1.0, gt=0)
    zero: bool = Field(default=False, description="under torchrun: shard the optimizer state (ZeroRedundancyOptimizer)")


class EvalSpec(_Strict):
    """Evaluation cadence; evaluation time is kept off the training clock."""

    every_steps: int | None = Field(default=None, ge=1, le=10**12)
    every_seconds: float | None = Field(default=None, gt=0)
    per_epoch: bool = True
    batch_size: int = Field(default=128, ge=1, le=1_000_000)
    target_drop: float = Field(default=0.5, ge=0, description="time-to-accuracy target: baseline final minus this many points")


#: Reference kinds read from a holdout (``holdout_source`` or ``holdout_fraction``); a sweep gives them as KIND:FRACTION.
HOLDOUT_KINDS = ("holdout", "ngram", "naive-bayes")


def empty_holdout(kind: str) -> SiftcliError:
    """The one error for a reference that reads a holdout finding none (the streamed filter, the in-memory references)."""
    return SiftcliError(f"sift.reference.kind {kind}: the holdout is empty; set sift.reference.holdout_fraction (such as "
                        "0.1) or a holdout_source file with rows")


class ReferenceSpec(_Strict):
    """The reference model behind ``sift.score: reducible | reference`` and the static filter.

    - ``cross-fit``: the training set is split in two; a reference is trained on each half and scores the other,
      so no sample is scored by a model that trained on it (label noise: no target data needed).
    - ``holdout``: one reference trained on data the learner never trains on: ``holdout_source`` (a file with the
      training data's columns, e.g. a small in-domain sample of the target) or ``holdout_fraction`` of the
      training data (then removed from every arm's training data).
    - ``model``: a saved model (a folder, hub id or siftcli run folder) that scores as it is, with no training.
    - ``ngram``: no model at all: each text's mean log-likelihood ratio of pool to holdout token n-grams (hashed
      unigrams and bigrams; Moore-Lewis, DSIR), low = target-like. A relevance score that costs milliseconds, for
      a pool from the wrong distribution and a small target sample (``holdout_source`` or ``holdout_fraction``).
    - ``naive-bayes``: no model either: the loss of each text's label under naive Bayes over the holdout's n-grams
      per class, low = the label fits the words. A label-noise score that costs milliseconds, for a small clean
      holdout (``holdout_source`` or ``holdout_fraction``).

    Its losses per training sample are computed once and cached on disk under a key of the data, this section,
    the model and the seed (``cache``); every arm, seed and sweep trial asking for the same key reuses them, and
    reports give its cost both paid (in the run that built it) and amortised.
    """

    kind: Literal["cross-fit", "holdout", "model", "ngram", "naive-bayes"] = "cross-fit"
    holdout_source: str | None = Field(default=None, description="holdout: a data file with the training data's columns")
    holdout_fraction: float | None = Field(default=None, gt=0, lt=1, description="holdout: this fraction of the training data")
    model: str | None = Field(default=None, description="model: the scoring model (folder, hub id, run folder, builtin:minilm)")
    epochs: float = Field(default=1.0, gt=0, le=1_000, description="epochs of its training (short: it must not memorise noise)")
    lr: float | None = Field(default=None, gt=0, description="default: optim.lr")
    config_overrides: dict[str, Any] = Field(default_factory=dict, description="a smaller reference, for config: models")
    cache: bool = Field(default=True, description="keep its losses on disk (SIFTCLI_CACHE, default ~/.cache/siftcli) for reuse")
    balance: Literal["none", "label"] = Field(
        default="none", description="label: rank each sample's reference loss among the samples of its own label (a "
                                    "within-label percentile), so score reference and the static filter keep every class "
                                    "in proportion; a reference surer of some classes otherwise keeps them and drops others")

    @model_validator(mode="after")
    def _kind_fields(self) -> ReferenceSpec:
        held = self.kind in HOLDOUT_KINDS
        if held and (self.holdout_source is None) == (self.holdout_fraction is None):
            raise ValueError(f"kind {self.kind} needs exactly one of holdout_source (a file) or holdout_fraction")
        if not held and (self.holdout_source is not None or self.holdout_fraction is not None):
            raise ValueError(f"holdout_source and holdout_fraction go with kind {', '.join(HOLDOUT_KINDS[:-1])} or "
                             f"{HOLDOUT_KINDS[-1]}, not {self.kind}")
        if (self.kind == "model") != (self.model is not None):
            raise ValueError("kind model needs model (a saved model to score with), and model needs kind model")
        return self


def _finite_number(v: float) -> float:
    """Shared by the float fields a bound alone does not keep finite (``gt=0`` lets ``.inf`` through)."""
    if not math.isfinite(v):
        raise ValueError("must be a finite number")
    return v


class SiftSpec(_Strict):
    """Same meanings as SageMaker smart sifting's ``RelativeProbabilisticSiftConfig``, plus the rules siftcli adds."""

    enabled: bool = True
    beta: float = Field(default=1.0, gt=0)
    loss_history_length: int = Field(default=500, ge=1, le=10_000_000)
    sift_delay: int | Literal["auto"] = Field(
        default=0, description="raw batches trained in full first, or auto: start when the loss spread says selection pays")
    sift_delay_fraction: float | None = Field(default=None, ge=0, lt=1)
    repeat_delay_per_epoch: bool = False
    mode: Literal["probabilistic", "calibrated", "infobatch", "random"] = "probabilistic"
    score: Literal["loss", "reducible", "reference", "entropy", "margin"] = Field(
        default="loss", description="loss; reducible: loss minus the reference's; reference: the reference's loss alone, low kept; "
                                    "entropy, margin: the model's own uncertainty, no label needed")
    keep_fraction: float | None = Field(default=None, gt=0, le=1, description="calibrated/random: kept fraction instead of 1/(1+beta)")
    prune_fraction: float = Field(default=0.5, ge=0, lt=1, description="infobatch: drop rate of below-mean samples")
    anneal_fraction: float = Field(default=0.0, ge=0, lt=1, description="the last fraction of the run keeps everything")
    scoring: Literal["fresh", "memory"] = Field(
        default="memory", description="memory (default, measured in docs/tuning.md): remembered losses decide without a forward")
    memory_max_age: int | None = Field(default=1, ge=0, le=1_000_000, description=(
        "memory: rescore losses older than this many epochs (null: never)"))
    memory_refresh: Literal["score", "train"] = Field(
        default="score", description="memory: renew a stale loss by a scoring forward (score) or by training the sample (train: "
                                     "no scoring forward, one source of scores)")
    reference: ReferenceSpec = Field(default_factory=ReferenceSpec)
    precision: Literal["auto", "fastest", "fp32", "bf16", "fp16"] = "auto"

    @field_validator("sift_delay", mode="before")
    @classmethod
    def _delay(cls, v: Any) -> Any:
        if v == "auto" or (isinstance(v, int) and not isinstance(v, bool) and v >= 0):
            return v
        raise ValueError(f"expected a whole number of raw batches >= 0, or auto (got {v!r})")

    _finite = field_validator("beta")(classmethod(lambda cls, v: _finite_number(v)))

    @model_validator(mode="after")
    def _one_delay(self) -> SiftSpec:
        if self.sift_delay and self.sift_delay_fraction is not None:
            raise ValueError("give sift_delay (steps or auto) or sift_delay_fraction, not both")
        if self.sift_delay == "auto" and self.repeat_delay_per_epoch:
            raise ValueError("sift_delay auto starts sifting once; it cannot repeat every epoch")
        return self


class DistillSpec(_Strict):
    """Knowledge distillation: the loss mixes the hard-label loss and the temperature-scaled KL divergence to a frozen
    teacher's distribution, per sample. With sifting the teacher runs on kept samples only (scoring uses the student)."""

    teacher: str = Field(description="a model source (hub id, folder, builtin:minilm) or a siftcli run folder (its model/)")
    temperature: float = Field(default=2.0, gt=0)
    alpha: float = Field(default=0.5, ge=0, le=1, description="weight of the KL term; 1 - alpha weighs the hard-label loss")
    cache: bool | None = Field(default=None, description="keep the teacher's outputs by sample: one teacher forward per "
                                                         "sample, not per sample per epoch; default: on where exact (the "
                                                         "inputs do not change between epochs: no data.augment)")
    cache_top_k: int | None = Field(default=None, ge=1, le=1_000_000, description=(
        "cache the top k outputs and the remaining mass (large outputs)"))
    cache_memory_mb: float = Field(default=1024, gt=0, le=10_000_000, description="above this the cache lives in a file in the run folder")
    teacher_fraction: float | None = Field(default=None, gt=0, le=1, description=(
        "run the teacher on this fraction of each trained batch only, chosen by the student's own uncertainty "
        "(teacher_score) from its training forward, at no extra cost; the other samples train on their labels alone. "
        "Default: the teacher on every trained sample"))
    teacher_score: Literal["entropy", "margin", "random"] = Field(default="entropy", description=(
        "how teacher_fraction chooses: the student's entropy or margin (unsure first, percentile ** teacher_beta "
        "against recent batches), or random (the control)"))
    teacher_beta: float = Field(default=2.0, gt=0, description="teacher_fraction's preference for unsure samples")

    _finite = field_validator("temperature", "teacher_beta")(classmethod(lambda cls, v: _finite_number(v)))


class Recipe(_Strict):
    """One fine-tune, fully described. The loop reads its run settings from it; the engine gets a plain `SiftConfig`
    built from its `sift` section (`training.setup.sift_config`) and never sees the recipe."""

    name: str = "run"
    task: TaskName = "text-classification"
    model: ModelSpec = Field(default_factory=ModelSpec)
    data: DataSpec = Field(default_factory=DataSpec)
    loss: str = "auto"
    metric: str = Field(default="auto", description="auto: the task's metric (siftcli.tasks)")
    max_length: int = Field(default=128, ge=1, le=1_000_000)
    batch_size: int = Field(default=32, ge=1, le=1_000_000)
    epochs: float = Field(default=3, gt=0, le=1_000_000)
    max_steps: int | None = Field(default=None, ge=1, le=10**12, description="end (fully decayed) at this optimizer step")
    max_seconds: float | None = Field(default=None, gt=0, le=1e9,
                                      description="end (fully decayed) when the training clock reaches this many seconds")
    clock_warmup_steps: int | None = Field(default=None, ge=0, le=1000, description=(
        "optimizer steps on one batch before training, off the clock, their updates discarded: every arm of a comparison "
        "starts on a device already warm (kernels chosen, memory pooled) instead of the first arm paying for it; "
        "default 3 on a GPU, 1 on a CPU (no kernels to choose there)"))
    optim: OptimSpec = Field(default_factory=OptimSpec)
    eval: EvalSpec = Field(default_factory=EvalSpec)
    sift: SiftSpec = Field(default_factory=SiftSpec)
    distill: DistillSpec | None = None
    seed: int = Field(default=0, ge=0, lt=2**31)
    device: Literal["auto", "cpu", "cuda"] = "auto"
    precision: Literal["fp32", "bf16", "fp16"] = "fp32"
    compile: bool = False
    compile_mode: Literal["default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"] = Field(
        default="default", description="torch.compile's mode for the training forward (reduce-overhead: CUDA graphs)")
    pad_to_multiple_of: int | None = Field(
        default=None, ge=1, description="pad sequence lengths up to a multiple of this (default 16 with compile: true, else none)")
    num_workers: int = Field(default=0, ge=0, le=256)
    checkpoint_every_steps: int | None = Field(default=None, ge=1, le=10**12)
    log_every_steps: int = Field(default=10, ge=1, le=10**12)
    report_to: list[Literal["tensorboard", "mlflow", "wandb", "trackio"]] = Field(
        default_factory=list, description="experiment trackers each run also logs to (optional extras; 'all', 'none')")

    @field_validator("report_to", mode="before")
    @classmethod
    def _report_to(cls, value: Any) -> Any:
        """As the Hugging Face Trainer spells it: one name, a list, a comma-separated string, 'none' or 'all'."""
        if value is None:
            return []
        if isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        if value == ["none"]:
            return []
        if value == ["all"]:  # those installed, as the Trainer reads it
            import importlib.util

            return [n for n in ("tensorboard", "mlflow", "wandb", "trackio") if importlib.util.find_spec(n) is not None]
        return value

    def warmup_steps(self, device_type: str) -> int:
        """``clock_warmup_steps``, or its default on this device: 3 on a GPU (kernel selection, the memory pool, lazy
        initialisation: the first steps there are many times slower), 1 on a CPU."""
        if self.clock_warmup_steps is not None:
            return self.clock_warmup_steps
        return 3 if device_type == "cuda" else 1

    @property
    def pad_multiple(self) -> int | None:
        """Sequence lengths are padded up to a multiple of this: a compiled model then sees a few shapes, not one per batch."""
        if self.pad_to_multiple_of is not None:
            return self.pad_to_multiple_of
        return 16 if self.compile else None

    @model_validator(mode="after")
    def _cross_field(self) -> Recipe:
        task = TASKS[self.task]
        if ":" not in self.loss and self.loss != "auto" and self.loss not in task.losses:
            expected = sorted({"auto", *task.losses})
            raise ValueError(f"loss {self.loss!r} does not fit task {self.task!r}; expected one of {expected} or module:function")
        if self.metric not in ("auto", task.metric):
            raise ValueError(f"metric {self.metric!r} does not fit task {self.task!r}; expected one of {sorted({'auto', task.metric})}")
        if self.distill is not None and task.labels != "class":
            raise ValueError(f"distill needs class labels (a teacher's distribution over them); task {self.task!r} has none")
        if self.data.label_noise and task.labels != "class":
            raise ValueError(f"data.label_noise flips class labels; task {self.task!r} has none")
        if self.precision == "fp16" and self.device == "cpu":
            raise ValueError("precision fp16 needs device cuda; use bf16 or fp32 on a CPU")
        if self.sift.reference.balance == "label":
            if task.labels != "class":
                raise ValueError(f"sift.reference.balance label ranks within each class; task {self.task!r} has no class labels")
            if self.sift.score == "reducible":
                raise ValueError("sift.reference.balance label turns reference losses into within-label percentiles, which "
                                 "score reducible cannot subtract from a loss; use score reference, or balance none")
        if self.sift.reference.kind == "ngram":
            if task.inputs != "text":
                raise ValueError(f"sift.reference.kind ngram counts token n-grams; task {self.task!r} has {task.inputs} inputs")
            if self.sift.score == "reducible":
                raise ValueError("sift.reference.kind ngram scores relevance (a log-likelihood ratio), not a loss that score "
                                 "reducible can subtract; use score reference, or a holdout, cross-fit or model reference")
        if self.sift.reference.kind == "naive-bayes" and (task.inputs != "text" or task.labels != "class"):
            raise ValueError(f"sift.reference.kind naive-bayes counts token n-grams per class; task {self.task!r} has "
                             f"{task.inputs} inputs and {task.labels} labels (text and class needed)")
        if self.sift.precision == "fp16" and self.device == "cpu":
            raise ValueError("sift.precision fp16 needs device cuda; use auto, bf16 or fp32 on a CPU")
        held, source = self.sift.reference.holdout_source, self.data.source
        if held and os.path.exists(held) and os.path.realpath(held) == os.path.realpath(source):
            raise ValueError(f"sift.reference.holdout_source {held!r} is data.source: a reference fitted on the rows it then "
                             "ranks scores what it has seen; give a file of held-out target rows, or holdout_fraction")
        augment = self.data.augment
        if augment is not None:
            image = augment.kind in IMAGE_AUGMENTS
            if image and task.inputs != "image":
                raise ValueError(f"data.augment.kind {augment.kind!r} changes images; task {self.task!r} has text inputs: "
                                 "use mask or delete")
            if not image and (task.inputs != "text" or task.labels == "tokens"):
                expected = "crop or crop-flip" if task.inputs == "image" else "none (a causal LM's tokens are its labels)"
                raise ValueError(f"data.augment.kind {augment.kind!r} changes the tokens of text classification or "
                                 f"regression inputs; for task {self.task!r} expected {expected}")
            unused = "rate" if image else "pad"
            if getattr(augment, unused) != AugmentSpec.model_fields[unused].default:  # a full dump carries the default
                raise ValueError(f"data.augment.{unused} does nothing for kind {augment.kind!r}; "
                                 + ("images take pad" if image else "text takes rate") + ": leave it out")
        if self.distill is not None:
            if self.distill.cache and self.data.augment is not None:
                raise ValueError("distill.cache true with data.augment: the inputs change every epoch, so a cached teacher "
                                 "output would be of another input; leave distill.cache out (it is then off)")
            if self.distill.teacher_fraction is not None and self.distill.alpha >= 1:
                raise ValueError("distill.teacher_fraction with alpha 1: the samples the teacher skips would have no "
                                 "target; set alpha below 1 (they train on their labels) or sift the samples instead")
            if self.distill.cache is None:
                self.distill.cache = self.data.augment is None  # on wherever it is exact
        return self

    @property
    def resolved_metric(self) -> str:
        return TASKS[self.task].metric_of(self.metric)


# -- loading --------------------------------------------------------------------------------


def validate_recipe(raw: dict[str, Any], source: str = "<recipe>") -> Recipe:
    try:
        return Recipe.model_validate(copy.deepcopy(raw))
    except ValidationError as exc:
        raise SiftcliError(f"{source}: {_describe(exc.errors()[0])}") from None


def _describe(err: dict[str, Any]) -> str:
    loc = [str(p) for p in err.get("loc", ())]
    key = ".".join(loc) or "(top level)"
    kind = err.get("type", "")
    if kind == "extra_forbidden":
        known = _known_keys(loc[:-1])
        guess = difflib.get_close_matches(loc[-1], known, n=1, cutoff=0.6)
        hint = f"; did you mean {'.'.join(loc[:-1] + [guess[0]])!r}?" if guess else f"; known keys here: {', '.join(sorted(known))}"
        return f"unknown key {key!r}{hint}"
    msg = err.get("msg", "invalid value")
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, "):]
    if kind in ("model_type", "dict_type"):
        return f"key {key!r}: expected a mapping of keys, got {type(err.get('input')).__name__}"
    value = err.get("input")
    field, sep, rest = msg.partition(": expected a number")
    if sep and field.isidentifier():  # _no_bool_numbers names the field below the section it checked
        return f"key {'.'.join(loc + [field])!r}: expected a number{rest}"
    shown = "" if isinstance(value, dict) else f" (got {value!r})"
    if isinstance(value, bool) and kind == "string_type":  # --set name=no: YAML 1.1 read a word as a boolean
        shown += "; YAML reads yes/no/on/off/true/false as booleans: quote the word ('no')"
    return f"key {key!r}: {msg}{shown}"


def _known_keys(loc: list[str]) -> list[str]:
    model: type[BaseModel] = Recipe
    for part in loc:
        field = model.model_fields.get(part)
        ann = getattr(field, "annotation", None)
        if not (isinstance(ann, type) and issubclass(ann, BaseModel)):
            return []
        model = ann
    return list(model.model_fields)


def recipe_to_yaml(recipe: Recipe) -> str:
    return yaml.safe_dump(recipe.model_dump(mode="json"), sort_keys=False)
