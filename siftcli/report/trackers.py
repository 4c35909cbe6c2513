"""``report_to``: every run (and every arm of a comparison) also logged where users already look: TensorBoard,
MLflow, Weights & Biases or trackio, as the Hugging Face Trainer spells them.

The trackers listen to the training loop's events, so the loop knows nothing of them. An arm is a run; a comparison
groups its arms (TensorBoard: one log folder per arm under the comparison's; MLflow: nested runs under a parent run;
W&B and trackio: a group) and adds a ``comparison`` record with the verdict, ``compare.json``, the plots and
``report.html``. Logged per run: the flattened recipe as parameters; over optimizer steps the training loss, the
kept fraction, the learning rate and the cumulative seconds of each phase; every evaluation metric; the final
summary; the run's ``metrics.json`` and ``log.jsonl``.

A tracker is a guest: a missing extra, or one that fails mid-run (a full disk, a server gone), is one warning line
and that tracker stops; the run goes on and its own files are complete. Trackers write only to stderr, so ``--json``
stays one document. Where they write: TensorBoard under the run folder (``tensorboard/``); MLflow at
``MLFLOW_TRACKING_URI`` (its default otherwise); W&B as its ``WANDB_*`` variables say (``WANDB_MODE=offline``
for a local run folder); trackio at ``TRACKIO_DIR``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import math
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from siftcli import parallel
from siftcli.errors import first_line
from siftcli.runio import Event

#: What trackers log as parameters and summaries: plain values.
Scalar = str | int | float | bool | None

#: Each tracker and the package its extra installs.
TRACKERS = {"tensorboard": "tensorboard", "mlflow": "mlflow", "wandb": "wandb", "trackio": "trackio"}


def flatten(tree: Any, prefix: str = "") -> dict[str, Scalar]:
    """``{"sift": {"beta": 1}}`` as ``{"sift.beta": 1}``; lists as text (trackers take scalars)."""
    if hasattr(tree, "model_dump"):
        tree = tree.model_dump(mode="json")
    out: dict[str, Scalar] = {}
    for key, value in (tree or {}).items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(flatten(value, f"{name}."))
        else:
            out[name] = value if isinstance(value, (int, float, str, bool)) else str(value)
    return out


def _numbers(values: Mapping[str, object]) -> dict[str, float]:
    return {k: float(v) for k, v in values.items() if isinstance(v, (int, float)) and not isinstance(v, bool)
            and math.isfinite(v)}


def _phases(data: Mapping[str, Any]) -> dict[str, float]:
    """Cumulative seconds per phase, as a step record and a run's metrics both carry them."""
    return {f"phase/{k}": v for k, v in (data.get("phases") or {}).items()}


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """A tracker's own chatter goes to stderr: stdout belongs to ``--json``."""
    with contextlib.redirect_stdout(sys.stderr):
        yield


class _Backend:
    """What three of the trackers share: the comparison's record is a run of its own in the group, named
    ``comparison``; an aborted comparison leaves nothing of theirs open (a group is a label, a log folder a folder)."""

    def start(self, name: str, params: dict[str, Scalar]) -> None:
        raise NotImplementedError

    def end(self, summary: dict[str, float], files: list[Path], status: str) -> None:
        raise NotImplementedError

    def group(self, summary: dict[str, Scalar], files: list[Path]) -> None:
        self.start("comparison", {k: v for k, v in summary.items() if isinstance(v, str)})
        self.end(_numbers(summary), files, "completed")

    def abort(self) -> None:
        pass


class _TensorBoard(_Backend):
    def __init__(self, folder: Path, project: str, group: str | None) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self._writer_type, self.root = SummaryWriter, folder / "tensorboard"
        self.writer: Any = None

    def start(self, name: str, params: dict[str, Scalar]) -> None:
        self.writer = self._writer_type(log_dir=str(self.root / name.replace(" ", "-")))
        self.writer.add_text("recipe", "\n".join(f"    {k}: {v}" for k, v in params.items()))

    def log(self, values: dict[str, float], step: int) -> None:
        for k, v in values.items():
            self.writer.add_scalar(k, v, step)

    def end(self, summary: dict[str, float], files: list[Path], status: str) -> None:
        for k, v in summary.items():
            self.writer.add_scalar(f"summary/{k}", v, 0)
        self._files(files)
        self.writer.add_text("status", status)
        self.writer.close()

    def _files(self, files: list[Path]) -> None:
        for f in files:
            if f.suffix == ".png":
                import numpy as np
                from PIL import Image

                self.writer.add_image(f"plots/{f.stem}", np.asarray(Image.open(f).convert("RGB")), 0, dataformats="HWC")
            elif f.suffix == ".json":
                self.writer.add_text(f"files/{f.name}", "    " + f.read_text().replace("\n", "\n    "))


#: An MLflow server that does not answer is given up on within about half a minute, not MLflow's own 7 retries with
#: doubling back-off and a 120 s timeout (minutes of silence): a tracker never holds up training. A value the user set
#: in the environment wins.
MLFLOW_PATIENCE = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
                   "MLFLOW_HTTP_REQUEST_TIMEOUT": "10"}


#: Tracking stores MLflow reaches through SQLAlchemy: it retries one it cannot reach about ten times with doubling sleeps
#: (~100 s, a warning a try) before giving up, and no setting bounds that.
DATABASE_SCHEMES = ("postgresql", "mysql", "mssql")


def reachable_database(uri: str) -> None:
    """Connect once to a database tracking URI (one without a database scheme passes), raising one line that names the
    store, its password hidden, when it cannot be reached: what MLflow would say after ~100 s of retries."""
    if uri.split(":", 1)[0].split("+", 1)[0] not in DATABASE_SCHEMES:
        return
    import sqlalchemy

    url = sqlalchemy.engine.make_url(uri)
    try:
        engine = sqlalchemy.create_engine(url, poolclass=sqlalchemy.pool.NullPool)
        try:
            with engine.connect():
                pass
        finally:
            engine.dispose()
    except Exception as exc:  # noqa: BLE001  (a missing driver, a refused port, a bad password: one line each)
        raise ConnectionError(f"tracking database {url.render_as_string(hide_password=True)}: {first_line(exc)}") from None


class _MLflow(_Backend):
    def __init__(self, folder: Path, project: str, group: str | None) -> None:
        import os

        import mlflow
        from mlflow.tracking import MlflowClient

        uri = mlflow.get_tracking_uri()
        if str(uri).startswith(("http://", "https://")):
            for key, value in MLFLOW_PATIENCE.items():
                os.environ.setdefault(key, value)
        reachable_database(str(uri))
        self.client = MlflowClient(uri)
        found = self.client.get_experiment_by_name(project)
        self.experiment = found.experiment_id if found else self.client.create_experiment(project)
        self.parent = self.client.create_run(self.experiment, run_name=group).info.run_id if group else None
        self.run_id: str | None = None

    def start(self, name: str, params: dict[str, Scalar]) -> None:
        from mlflow.entities import Param

        tags = {"mlflow.parentRunId": self.parent} if self.parent else {}
        self.run_id = self.client.create_run(self.experiment, run_name=name, tags=tags).info.run_id
        items = [Param(k, str(v)[:6000]) for k, v in params.items()]
        for i in range(0, len(items), 100):  # MLflow takes 100 parameters per call
            self.client.log_batch(self.run_id, params=items[i:i + 100])

    def log(self, values: dict[str, float], step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self.client.log_batch(self.run_id, metrics=[Metric(k, v, now, step) for k, v in values.items()])

    def end(self, summary: dict[str, float], files: list[Path], status: str, run_id: str | None = None) -> None:
        run_id = run_id or self.run_id
        for k, v in summary.items():
            self.client.log_metric(run_id, f"summary/{k}", v)
        for f in files:
            self.client.log_artifact(run_id, str(f))
        self.client.set_terminated(run_id, {"completed": "FINISHED", "interrupted": "KILLED"}.get(status, "FAILED"))

    def abort(self) -> None:
        if self.parent is not None:
            self.client.set_terminated(self.parent, "KILLED")

    def group(self, summary: dict[str, Scalar], files: list[Path]) -> None:
        if self.parent is None:
            return
        self.client.set_tag(self.parent, "verdict", str(summary.get("verdict", ""))[:5000])
        self.end(_numbers(summary), files, "completed", run_id=self.parent)


#: What W&B is given to reach its server before it is called unreachable (it waits 90 s by default, retrying).
WANDB_CONNECT_SECONDS = 10.0


def reachable_wandb() -> None:
    """Open one connection to the W&B server an online run would log to (``WANDB_BASE_URL``, else W&B's own), raising
    one line naming it when none opens within ``WANDB_CONNECT_SECONDS``: W&B's own init waits about 90 s first. Offline
    and disabled modes, and a proxy in the environment (a direct connection says nothing about it), are not probed."""
    import socket
    from urllib.parse import urlsplit

    if os.environ.get("WANDB_MODE", "online").lower() in ("offline", "disabled", "dryrun") or any(
            os.environ.get(k) for k in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy")):
        return
    url = urlsplit(os.environ.get("WANDB_BASE_URL") or "https://api.wandb.ai")
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        socket.create_connection((url.hostname or "", port), timeout=WANDB_CONNECT_SECONDS).close()
    except OSError as exc:
        raise ConnectionError(f"cannot reach the W&B server {url.scheme}://{url.hostname}:{port} ({exc.strerror or exc}); "
                              "log offline with WANDB_MODE=offline and `wandb sync` later") from None


class _WandB(_Backend):
    def __init__(self, folder: Path, project: str, group: str | None) -> None:
        import wandb

        reachable_wandb()
        self.wandb, self.folder, self.project, self.group_name = wandb, folder, project, group
        self.run: Any = None

    def start(self, name: str, params: dict[str, Scalar]) -> None:
        with _quiet():
            where = os.environ.get("WANDB_DIR") or str(self.folder)  # the user's WANDB_DIR wins over the run folder
            self.run = self.wandb.init(project=self.project, group=self.group_name, name=name, config=params, dir=where,
                                       job_type="comparison" if name == "comparison" else "train", reinit="create_new")

    def log(self, values: dict[str, float], step: int) -> None:
        self.run.log(values, step=step)

    def end(self, summary: dict[str, float], files: list[Path], status: str) -> None:
        self.run.summary.update(summary)
        for f in files:
            self.run.save(str(f), base_path=str(f.parent), policy="now")
        with _quiet():
            self.run.finish(exit_code=0 if status == "completed" else 1)


class _Trackio(_Backend):
    def __init__(self, folder: Path, project: str, group: str | None) -> None:
        import trackio

        self.trackio, self.project, self.group_name = trackio, project, group

    def start(self, name: str, params: dict[str, Scalar]) -> None:
        with _quiet():
            self.trackio.init(project=self.project, name=name, group=self.group_name, config=params,
                              auto_log_cpu=False, auto_log_gpu=False)

    def log(self, values: dict[str, float], step: int) -> None:
        with _quiet():
            self.trackio.log(values, step=step)

    def end(self, summary: dict[str, float], files: list[Path], status: str) -> None:
        with _quiet():
            if summary:
                self.trackio.log({f"summary/{k}": v for k, v in summary.items()})
            for f in files:
                self.trackio.log_artifact(str(f), name=f"{f.parent.name}-{f.name}".replace(" ", "-"))
            self.trackio.finish()


BACKENDS = {"tensorboard": _TensorBoard, "mlflow": _MLflow, "wandb": _WandB, "trackio": _Trackio}


class Trackers:
    """The trackers of one run or comparison, fed by training events (:meth:`wrap`); each call guarded."""

    def __init__(self, names: list[str], folder: Path, project: str, *, group: str | None = None, seeds: int = 1,
                 warn: Callable[[str], None] | None = None) -> None:
        self.warn = warn or (lambda message: None)
        self.seeds, self.active, self.backends = seeds, False, {}
        self._run_dir: Path | None = None
        for name in names:
            if importlib.util.find_spec(TRACKERS[name]) is None:
                self.warn(f"report_to {name}: not installed (pip install 'siftcli[{name}]'); the run goes on without it")
                continue
            self._guard(name, lambda n=name: self.backends.__setitem__(n, BACKENDS[n](folder, project, group)))

    def _guard(self, name: str, call: Callable[[], Any]) -> None:
        try:
            with _quiet():
                call()
        except Exception as exc:  # a tracker never stops training: it stops itself
            self.backends.pop(name, None)
            first = first_line(exc)
            self.warn(f"report_to {name}: {type(exc).__name__}: {first}; it logs no more, the run goes on")

    def _each(self, method: str, *args: Any) -> None:
        for name, backend in list(self.backends.items()):
            self._guard(name, lambda b=backend: getattr(b, method)(*args))

    def wrap(self, on_event: Event | None) -> Event:
        """An event function that feeds the trackers, then ``on_event``."""
        def event(kind: str, data: dict[str, Any]) -> None:
            if self.backends:
                self.on_event(kind, data)
            if on_event is not None:
                on_event(kind, data)

        return event

    def on_event(self, kind: str, data: dict[str, Any]) -> None:
        if kind == "start":
            self.close("interrupted")  # a run left open (an arm that raised) ends before the next begins
            recipe = data.get("recipe")
            name = str(data.get("arm", "run"))
            if self.seeds > 1 and recipe is not None:
                name += f" seed {recipe.seed}"
            self._run_dir = Path(data["run_dir"]) if data.get("run_dir") else None
            self._each("start", name, {"arm": data.get("arm"), **flatten(recipe)})
            self.active = True
        elif kind == "step" and self.active:
            self._each("log", _numbers({"train/loss": data.get("loss"), "train/kept_fraction": data.get("kept_fraction"),
                                        "train/lr": data.get("lr"), **_phases(data)}), int(data["step"]))
        elif kind == "eval" and self.active:
            skip = {"step", "epoch", "train_seconds", "raw_samples", "trained_samples"}
            self._each("log", _numbers({f"eval/{k}": v for k, v in data.items() if k not in skip}), int(data["step"]))
        elif kind == "end" and self.active:
            self.active = False
            final = {f"final/{k}": v for k, v in (data.get("final") or {}).items()}
            summary = _numbers({**final, **_phases(data), "train_seconds": data.get("train_seconds"),
                                "optimizer_steps": data.get("optimizer_steps"),
                                "kept_fraction": (data.get("keep") or {}).get("achieved")})
            files = [f for f in (self._run_dir / "metrics.json", self._run_dir / "log.jsonl") if f.exists()] \
                if self._run_dir else []
            self._each("end", summary, files, str(data.get("status", "completed")))

    def close(self, status: str = "interrupted") -> None:
        """End a run still open (the run was interrupted or failed): what it logged stays, marked so."""
        if self.active:
            self.active = False
            self._each("end", {}, [], status)

    def abort(self) -> None:
        """The comparison stopped: its open arm run and its own parent run (MLflow) end marked interrupted."""
        self.close("interrupted")
        self._each("abort")

    def finish_group(self, summary: dict[str, Scalar], files: list[Path]) -> None:
        """The comparison's own record: its verdict and numbers, ``compare.json``, plots and ``report.html``."""
        self._each("group", summary, [f for f in files if f.exists()])


def open_trackers(recipe: Any, folder: Path, *, group: str | None = None, seeds: int = 1,
                  on_event: Event | None = None) -> Trackers | None:
    """The recipe's trackers (None when it names none, and on ranks other than 0), warning through ``on_event``."""
    if not recipe.report_to or not parallel.is_main():
        return None
    warn = (lambda message: on_event("warning", {"message": message})) if on_event else None
    return Trackers(list(recipe.report_to), folder, recipe.name, group=group, seeds=seeds, warn=warn)
