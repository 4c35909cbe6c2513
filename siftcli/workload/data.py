"""Data sources: built-in, local files, ``save_to_disk`` folders and the Hugging Face Hub.

Everything ends as two ``datasets.Dataset`` objects (train, eval) with a ``label`` column
of ids (or floats for regression) and the text or image column the recipe names.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from siftcli.errors import SiftcliError, first_line
from siftcli.tasks import TASKS

if TYPE_CHECKING:
    from siftcli.recipe.schema import DataSpec

BUILTIN_DATA = ("builtin:vader-words",)
FILE_FORMATS = {".csv": "csv", ".tsv": "tsv", ".jsonl": "jsonl", ".json": "json", ".parquet": "parquet"}


def column_values(ds: Any, column: str) -> list:
    """A column of a ``datasets.Dataset`` as a Python list, read through Arrow in one call: iterating ``ds[column]``
    formats one row at a time (measured: 60 s for two columns of a million rows, against under a second). A column
    whose feature decodes its stored values (``Json``, images, audio: Arrow holds their encoding) goes the slow way."""
    import datasets

    feature = ds.features.get(column) if ds.features else None
    if feature is None or isinstance(feature, (datasets.Value, datasets.ClassLabel)):
        return ds.with_format("arrow")[column].to_pylist()
    return list(ds[column])


@dataclass
class DataSplits:
    train: Any  # datasets.Dataset
    eval: Any
    label_names: list[str] | None  # None for regression and causal LM
    input_column: str
    unlabeled: bool = False  # the training data has no labels (distillation from a teacher alone); its labels are -1


def vader_words(eval_fraction: float = 0.15, seed: int = 0) -> tuple[dict[str, list], dict[str, list]]:
    """Word polarity from the human-rated VADER lexicon (PyPI ``vaderSentiment``, MIT).

    Entries whose mean valence is beyond +/-0.5 become positive (1) or negative (0);
    a seeded fraction is held out. About 6,650 words: small, real, human-labelled, offline.
    """
    try:
        import vaderSentiment
    except ImportError:
        raise SiftcliError("data source builtin:vader-words needs the package vaderSentiment (pip install vaderSentiment)") from None
    import random

    path = Path(vaderSentiment.__file__).parent / "vader_lexicon.txt"
    rows: dict[str, int] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        parts = line.split("\t")
        if len(parts) < 2:
            continue
        try:
            mean = float(parts[1])
        except ValueError:
            continue
        if abs(mean) > 0.5:
            rows.setdefault(parts[0], int(mean > 0))
    items = sorted(rows.items())
    random.Random(seed).shuffle(items)
    n_eval = max(1, round(len(items) * eval_fraction))
    ev, tr = items[:n_eval], items[n_eval:]
    return (
        {"text": [w for w, _ in tr], "label": [y for _, y in tr]},
        {"text": [w for w, _ in ev], "label": [y for _, y in ev]},
    )


def load_splits(data: DataSpec, *, task: str, seed: int = 0, unlabeled_train: bool = False) -> DataSplits:
    """Load, check columns, map labels, hold out evaluation data and cap sizes: the recipe's ``data`` block as read
    (``unlabeled_train``: a training source without labels is accepted, for distillation with alpha 1)."""
    import datasets

    source, fmt, config_name, revision = data.source, data.format, data.config_name, data.revision
    train_split, eval_split, eval_source, eval_fraction = data.train_split, data.eval_split, data.eval_source, data.eval_fraction
    text_column, text_pair_column, image_column = data.text_column, data.text_pair_column, data.image_column
    label_column, label_names, column_names = data.label_column, data.label_names, data.column_names

    datasets.disable_progress_bars()
    # every error of a load becomes siftcli's own one line (naming the file and line): the library's logged copy of it
    # ("Failed to read file ...") would be a second line on stderr
    datasets.logging.set_verbosity(datasets.logging.CRITICAL)
    if source.startswith("builtin:"):
        _no_revision(revision, source, "built in")
        if source not in BUILTIN_DATA:
            raise SiftcliError(f"data.source: unknown built-in {source!r}; known: {', '.join(BUILTIN_DATA)}")
        tr, ev = vader_words(eval_fraction, seed)
        train, evald = datasets.Dataset.from_dict(tr), datasets.Dataset.from_dict(ev)
        text_column, label_column = "text", "label"
    else:
        train = _load_one(source, fmt, config_name, train_split, column_names, "data.source", revision=revision)
        if TASKS[task].labels == "class" and label_column in train.column_names:
            _check_labels(column_values(train, label_column), label_names, source, column_names)
        if eval_source:
            evald = _load_one(eval_source, fmt, config_name, eval_split or train_split, column_names, "data.eval_source")
            if TASKS[task].labels == "class" and label_column in evald.column_names:
                _check_labels(column_values(evald, label_column), label_names, eval_source, column_names, ids_from_train=True)
        elif eval_split:
            evald = _load_one(source, fmt, config_name, eval_split, column_names, "data.eval_split", revision=revision)
        else:
            if len(train) < 2:
                raise SiftcliError(f"data.source {source!r}: {len(train)} rows; need at least 2 to hold out evaluation data")
            n_eval = math.ceil(len(train) * eval_fraction)  # as datasets' train_test_split counts it: rounded up
            if n_eval < 1 or len(train) - n_eval < 1:
                raise SiftcliError(f"data.eval_fraction {eval_fraction}: holding out that much of {len(train)} rows leaves "
                                   "an empty training or evaluation set")
            parts = train.train_test_split(test_size=eval_fraction, seed=seed)
            train, evald = parts["train"], parts["test"]

    kind = TASKS[task]
    input_column = image_column if kind.inputs == "image" else text_column
    needed = [input_column] + ([text_pair_column] if text_pair_column else []) + ([] if kind.labels == "tokens" else [label_column])
    # a training source without labels is read only where it can be used (distillation with alpha 1): the teacher labels it
    unlabeled = unlabeled_train and kind.labels == "class" and label_column not in train.column_names
    keys = {text_pair_column: "data.text_pair_column", label_column: "data.label_column",
            input_column: "data.image_column" if kind.inputs == "image" else "data.text_column"}  # the key that named it
    for name, ds, where in (("train", train, source), ("eval", evald, eval_source or source)):
        missing = [c for c in needed if c not in ds.column_names and not (unlabeled and name == "train" and c == label_column)]
        if missing:
            raise SiftcliError(
                f"{keys.get(missing[0], 'data')}: column {missing[0]!r} not found in the {name} data ({where}); "
                f"available columns: {', '.join(ds.column_names)}"
            )
    if data.max_train_samples:
        train = train.shuffle(seed=seed).select(range(min(data.max_train_samples, len(train))))
    if data.max_eval_samples:
        evald = evald.shuffle(seed=seed).select(range(min(data.max_eval_samples, len(evald))))
    if len(train) == 0:
        raise SiftcliError(f"data: the training data from {source!r} is empty after filtering")
    if len(evald) == 0:
        raise SiftcliError(f"data: the evaluation data from {source!r} is empty after filtering")

    names: list[str] | None = None
    if kind.labels == "class" and unlabeled:
        _, evald, names = _map_labels(evald, evald, label_column, label_names)
        train = train.add_column(label_column, [-1] * len(train))
    elif kind.labels == "class":
        train, evald, names = _map_labels(train, evald, label_column, label_names)
    elif kind.labels == "float":
        train, evald = (_float_labels(d, label_column) for d in (train, evald))
    return DataSplits(train=train, eval=evald, label_names=names, input_column=input_column, unlabeled=unlabeled)


def _readable(path: Path, key: str, source: str) -> None:
    """A data file this user may not read is the input's fault, said as such (it once surfaced as a write error, exit 1:
    "Permission denied (...); files already written are complete")."""
    try:
        with path.open("rb") as fh:
            fh.read(1)
    except PermissionError as exc:
        raise SiftcliError(f"{key}: {source}: cannot be read ({exc.strerror or exc}); siftcli only reads it: give this "
                           "user read permission (chmod a+r), or copy it somewhere readable") from None


def _no_revision(revision: str | None, source: str, kind: str) -> None:
    """A revision names a hub dataset's commit, tag or branch: on any other source it is a mistake, said in one line."""
    if revision is not None:
        raise SiftcliError(f"data.revision {revision!r}: a revision names a hub dataset's commit, tag or branch; "
                           f"{source} is {kind}: leave data.revision out")


def _load_one(source: str, fmt: str, config_name: str | None, split: str, column_names: list[str] | None, key: str,
              streaming: bool = False, revision: str | None = None) -> Any:
    """One source as a ``datasets.Dataset``, or with ``streaming`` an ``IterableDataset`` read as it is iterated (a hub
    dataset is then never downloaded whole, a file never converted to Arrow)."""
    import datasets

    path = Path(source).expanduser()
    if fmt == "auto":
        if path.is_dir():
            fmt = "disk" if (path / "dataset_info.json").exists() or (path / "dataset_dict.json").exists() else "imagefolder"
        elif path.suffix.lower() in FILE_FORMATS:
            fmt = FILE_FORMATS[path.suffix.lower()]
        elif path.is_file():  # it exists; its kind is what siftcli cannot read
            raise SiftcliError(f"{key}: {source!r} is a {path.suffix or 'suffix-less'} file; siftcli reads "
                               f"{', '.join(sorted(FILE_FORMATS))} files (or set data.format)")
        elif _looks_like_path(source):
            raise SiftcliError(f"{key}: file or folder {source!r} not found")
        else:
            fmt = "hub"
    if fmt != "hub" and not path.exists():
        raise SiftcliError(f"{key}: file or folder {source!r} not found")
    if fmt in ("csv", "tsv", "jsonl", "json", "parquet") and split != "train":  # one file, one table: no split to name
        which = "data.eval_split" if key == "data.eval_split" else "data.train_split"
        fix = "give data.eval_source (a file of evaluation rows) or data.eval_fraction" if which == "data.eval_split" \
            else "leave data.train_split out"
        raise SiftcliError(f"{which} {split!r}: {source!r} is a single {fmt} file, with no splits to choose from; {fix}")
    if fmt != "hub":
        _no_revision(revision, repr(source), f"a local {fmt} source")
    if fmt != "hub" and path.is_file():
        _readable(path, key, source)
    if fmt in ("csv", "tsv", "jsonl", "json") and path.is_file():
        with path.open("rb") as fh:
            lines = sum(1 for line in fh if line.strip())
        if lines <= (0 if column_names or fmt in ("jsonl", "json") else 1):
            raise SiftcliError(f"{key}: {source!r} has no data rows; the dataset is empty")
        twice = _duplicate_header(path, fmt) if fmt in ("csv", "tsv") and not column_names else None
        if twice is not None:
            raise SiftcliError(f"{key}: {source}: {twice}")
    try:
        if fmt == "disk":
            loaded = datasets.load_from_disk(str(path))
            if isinstance(loaded, datasets.DatasetDict):
                if split not in loaded:
                    raise SiftcliError(f"{key}: split {split!r} not in {source!r}; available splits: {', '.join(loaded)}")
                loaded = loaded[split]
            return loaded.to_iterable_dataset() if streaming else loaded
        if fmt == "imagefolder":
            from datasets.packaged_modules.imagefolder.imagefolder import ImageFolder

            readable = {e.lower() for e in ImageFolder.EXTENSIONS}
            if not any(f.suffix.lower() in readable for f in path.rglob("*") if f.is_file()):
                raise SiftcliError(f"{key}: folder {source!r} holds no image files (.png, .jpg and the other image "
                                   "kinds datasets' imagefolder reads); "
                                   "siftcli reads a folder as an image folder (a subfolder of images per class) or as a "
                                   "dataset saved with save_to_disk; for a table, give the data file itself")
            return datasets.load_dataset("imagefolder", data_dir=str(path), split=split, streaming=streaming)
        if fmt in ("csv", "tsv"):
            kwargs: dict[str, Any] = {"delimiter": "\t" if fmt == "tsv" else ","}
            if fmt == "tsv":
                kwargs["quoting"] = 3  # csv.QUOTE_NONE: tab files carry quotes as text
            if column_names:
                kwargs["column_names"] = column_names
            return datasets.load_dataset("csv", data_files=str(path), split="train", streaming=streaming, **kwargs)
        if fmt in ("json", "jsonl"):
            return datasets.load_dataset("json", data_files=str(path), split="train", streaming=streaming)
        if fmt == "parquet":
            return datasets.load_dataset("parquet", data_files=str(path), split="train", streaming=streaming)
        return _load_hub(source, config_name, split, key, streaming, revision)
    except SiftcliError:
        raise
    except Exception as exc:  # parser errors from pandas/pyarrow: name the file, keep one line
        ragged = _ragged_line(Path(source).expanduser(), fmt, column_names) if fmt in ("csv", "tsv") else None
        if ragged is not None:
            line, got, expected = ragged
            raise SiftcliError(f"{key}: {source}: line {line} has {got} fields where the header has {expected}; "
                               "quote fields that contain the delimiter") from None
        fault = _file_fault(path, fmt) if path.is_file() else None
        if fault is not None:
            raise SiftcliError(f"{key}: {source}: {fault}") from None
        raise SiftcliError(f"{key}: cannot read {source!r} as {fmt}: {first_line(_root_cause(exc), limit=None)}") from None


def _root_cause(exc: BaseException) -> BaseException:
    """The error at the bottom of a chain (``datasets`` wraps the parser's in "An error occurred while generating the
    dataset")."""
    seen = {id(exc)}
    while (exc.__cause__ or exc.__context__) is not None and id(exc.__cause__ or exc.__context__) not in seen:
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
        seen.add(id(exc))
    return exc


def _file_fault(path: Path, fmt: str) -> str | None:
    """What is wrong with a file its parser refused, where it can be named: the first line that is not UTF-8, the first
    JSON Lines line that is not a JSON object, a Parquet file without its magic bytes."""
    import json

    if fmt == "parquet":
        with path.open("rb") as f:
            head = f.read(4)
            f.seek(max(0, path.stat().st_size - 4))
            tail = f.read(4)
        if head != b"PAR1" or tail != b"PAR1":
            return "not a Parquet file (it does not begin and end with PAR1); write it with pandas.DataFrame.to_parquet " \
                "or datasets' to_parquet"
        import pyarrow.parquet as pq

        return "has no data rows; the dataset is empty" if pq.ParquetFile(path).metadata.num_rows == 0 else None
    with path.open("rb") as f:
        for number, raw in enumerate(f, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                return (f"line {number} is not UTF-8 (byte 0x{raw[exc.start]:02x} at column {exc.start + 1}); save the "
                        "file as UTF-8")
            if fmt in ("jsonl", "json") and line.strip():
                try:
                    row = json.loads(line)
                except ValueError as exc:
                    return f"line {number} is not JSON ({exc}); JSON Lines holds one object per line"
                if not isinstance(row, dict):
                    return f"line {number} is a JSON {type(row).__name__}, not an object of columns"
    return None


def _duplicate_header(path: Path, fmt: str) -> str | None:
    """A delimited file's header naming one column twice (the parser would rename the second and move on)."""
    import csv

    with path.open(newline="", encoding="utf-8", errors="replace") as f:
        header = next(csv.reader(f, delimiter="\t" if fmt == "tsv" else ","), [])
    names = [h.strip() for h in header]
    twice = next((n for i, n in enumerate(names) if n in names[:i]), None)
    if twice is None:
        return None
    first, second = names.index(twice) + 1, names.index(twice, names.index(twice) + 1) + 1
    return f"column {twice!r} appears twice in the header (columns {first} and {second}); rename one"


def stream_train(source: str, *, fmt: str = "auto", config_name: str | None = None, train_split: str = "train",
                 column_names: list[str] | None = None, revision: str | None = None) -> Any:
    """The training source as a stream (``datasets.IterableDataset``): what ``siftcli filter --stream`` reads twice, once
    to choose and once to write, holding neither pass in memory."""
    import datasets

    datasets.disable_progress_bars()
    datasets.logging.set_verbosity(datasets.logging.CRITICAL)
    if source.startswith("builtin:"):
        raise SiftcliError(f"data.source {source}: a built-in is small and held in memory; --stream reads files and hub "
                           "datasets")
    return _load_one(source, fmt, config_name, train_split, column_names, "data.source", streaming=True, revision=revision)


def _ragged_line(path: Path, fmt: str, column_names: list[str] | None) -> tuple[int, int, int] | None:
    """The first line of a delimited file whose field count differs from its header's (or ``column_names``), where the
    parser's own message names only a chunk: (line, fields, expected)."""
    import csv

    try:
        with path.open(newline="", encoding="utf-8", errors="replace") as f:
            reader = csv.reader(f, delimiter="\t" if fmt == "tsv" else ",",
                                quoting=csv.QUOTE_NONE if fmt == "tsv" else csv.QUOTE_MINIMAL)
            expected = len(column_names) if column_names else None
            for row in reader:
                if not row:
                    continue
                if expected is None:
                    expected = len(row)
                elif len(row) != expected:
                    return reader.line_num, len(row), expected
    except (OSError, csv.Error):
        return None
    return None


def _load_hub(source: str, config_name: str | None, split: str, key: str, streaming: bool = False,
              revision: str | None = None) -> Any:
    import datasets
    from huggingface_hub.utils import logging as hub_logging

    # an unreachable hub is siftcli's one line below, not also a retry warning per attempt from huggingface_hub
    hub_logging.set_verbosity_error()
    try:
        return datasets.load_dataset(source, config_name, split=split, streaming=streaming, revision=revision)
    except ValueError as exc:
        if "split" in str(exc).lower():
            raise SiftcliError(f"{key}: split {split!r} not found for hub dataset {source!r}: {str(exc).splitlines()[0]}") from None
        raise
    except Exception as exc:
        offline = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("HF_DATASETS_OFFLINE")
        hint = "it is not in the local cache" if offline else "the Hugging Face Hub is unreachable or the id is wrong"
        raise SiftcliError(
            f"{key}: cannot load hub dataset {source!r} ({hint}: {exc.__class__.__name__}); "
            "use a local file or save_to_disk folder, or set HF_HUB_OFFLINE=1 with a cached copy"
        ) from None


def _looks_like_path(source: str) -> bool:
    return source.startswith((".", "/", "~")) or os.sep in source and source.count("/") != 1 or Path(source).suffix != ""


MAX_CLASSES = 10_000  # numeric class ids without label_names: a head wider than this is a typo, not a task


def _line(source: str, column_names: list[str] | None, row: int) -> str:
    """Where row ``row`` (0-based, in file order) of a data file is, for a message: its line, or its row."""
    suffix = Path(source).suffix.lower()
    if suffix in (".csv", ".tsv", ".jsonl", ".json"):
        return f"line {row + (2 if suffix in ('.csv', '.tsv') and column_names is None else 1)} of {source}"
    return f"row {row + 1} of {source}"


def _check_labels(values: list[Any], label_names: list[str] | None, source: str, column_names: list[str] | None,
                  ids_from_train: bool = False) -> None:
    """Labels as the file holds them, read before any split or shuffle so an error names the file's line: an empty
    label, a label outside ``label_names``, or numeric class ids that would build an absurd head or leave classes below
    them with no sample (one mistyped ``5`` in 0/1 data would otherwise train a 6-class model without a word).
    ``ids_from_train``: the evaluation file, whose ids are checked against label_names only."""
    empty = next((i for i, v in enumerate(values) if v is None or (isinstance(v, float) and v != v)), None)
    if empty is not None:
        raise SiftcliError(f"data: an empty label at {_line(source, column_names, empty)}")
    odd = next((i for i, v in enumerate(values) if isinstance(v, str) != isinstance(values[0], str)), None)
    if odd is not None and not ids_from_train:
        kind = "text" if isinstance(values[odd], str) else "a number"
        raise SiftcliError(f"data: label {values[odd]!r} ({_line(source, column_names, odd)}) is {kind}, unlike the "
                           f"labels before it ({values[0]!r} at {_line(source, column_names, 0)}); use one kind of label")
    if label_names:
        for i, v in enumerate(values):
            if isinstance(v, str) and v not in label_names:
                raise SiftcliError(f"data: label {v!r} ({_line(source, column_names, i)}) is not in label_names {label_names}")
            if not isinstance(v, str) and (isinstance(v, bool) or not isinstance(v, (int, float)) or int(v) != v
                                           or not 0 <= int(v) < len(label_names)):
                raise SiftcliError(f"data: label {v!r} ({_line(source, column_names, i)}) is not a class id in "
                                   f"0..{len(label_names) - 1} (label_names has {len(label_names)})")
        return
    ids = [v for v in values if isinstance(v, int) and not isinstance(v, bool)]
    if ids_from_train or not ids or len(ids) != len(values):
        return  # text labels, or a mix: _map_labels says what is wrong
    top = max(ids)
    where = _line(source, column_names, ids.index(top))
    if top >= MAX_CLASSES:
        raise SiftcliError(f"data: label {top} ({where}) would make a {top + 1}-class head; class ids run 0..N-1 "
                           "(a typo? or give data.label_names)")
    missing = sorted(set(range(1, top + 1)) - set(ids))  # class 0 unused is 1-based ids (1..N): one idle logit, allowed
    if missing:
        shown = ", ".join(map(str, missing[:5])) + (", ..." if len(missing) > 5 else "")
        raise SiftcliError(f"data: label {top} ({where}) leaves classes {shown} with no training sample; a mistyped label? "
                           "Fix that line, or give data.label_names to mean those classes")


def label_id(v: Any, names: list[str] | None, lookup: dict[str, int], which: str) -> int:
    """One label as its class id: a name through ``names``, a whole number as it is, within ``0..len(names)-1`` when
    the names are known. The one rule for the training data and for ``siftcli filter --stream``'s chunks (which
    cannot collect the names, so without ``data.label_names`` a name is refused and an id is only checked >= 0)."""
    if isinstance(v, str):
        if names is None:
            raise SiftcliError(f"data.label_names: --stream with a label reference needs the label names (label {v!r}; "
                               "the whole source is never read at once to collect them)")
        if v not in lookup:
            raise SiftcliError(f"data: label {v!r} in the {which} data is not in label_names {names}")
        return lookup[v]
    top = len(names) - 1 if names is not None else None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v or int(v) != v or int(v) < 0 \
            or (top is not None and int(v) > top):
        hint = (f"; name the classes in order with data.label_names (e.g. [{'false, true' if isinstance(v, bool) else 'neg, pos'}]) "
                "to map labels that are not ids")
        raise SiftcliError(f"data: label {v!r} in the {which} data is not a class id in "
                           + (f"0..{top}" if top is not None else "0, 1, ...") + hint)
    return int(v)


def _map_labels(train: Any, evald: Any, column: str, label_names: list[str] | None) -> tuple[Any, Any, list[str]]:
    values = column_values(train, column)
    ev_values = column_values(evald, column)
    for which, vals in (("training", values), ("evaluation", ev_values)):
        empty = next((i for i, v in enumerate(vals) if v is None or (isinstance(v, float) and v != v)), None)
        if empty is not None:
            raise SiftcliError(f"data: column {column!r} has an empty label in the {which} data (row {empty + 1})")
    kinds = {isinstance(v, str) for v in values + ev_values}
    if len(kinds) > 1:
        raise SiftcliError(f"data: column {column!r} mixes text and numeric labels; use one kind (or label_names)")
    is_str = isinstance(values[0], str)
    if label_names:
        names = list(label_names)
    elif is_str:
        names = sorted(set(values) | set(ev_values))
    else:
        top = max(int(v) for v in values + ev_values)
        names = [str(i) for i in range(top + 1)]
    lookup = {n: i for i, n in enumerate(names)}
    tr_ids = [label_id(v, names, lookup, "train") for v in values]
    ev_ids = [label_id(v, names, lookup, "eval") for v in ev_values]
    if len(names) < 2 or len(set(tr_ids)) < 2:
        only = names[tr_ids[0]] if tr_ids else names[0]
        raise SiftcliError(f"data: the training labels hold one class only ({only!r}); classification needs at least two")
    train = _replace(train, column, tr_ids)
    evald = _replace(evald, column, ev_ids)
    return train, evald, names


def _replace(ds: Any, column: str, values: list) -> Any:
    ds = ds.remove_columns([column])
    if "label" in ds.column_names:
        ds = ds.remove_columns(["label"])
    return ds.add_column("label", values)


def _float_labels(ds: Any, column: str) -> Any:
    try:
        values = [float(v) for v in column_values(ds, column)]
    except (TypeError, ValueError):
        raise SiftcliError(f"data: regression needs numeric labels in column {column!r}") from None
    return _replace(ds, column, values)
