"""The Optuna study behind ``sweep-beta`` and ``plan``, shared by every process and machine that works on it: its
storage (checked before anything trains), the founder and the settings every machine must share, the trials' owners
and liveness, and the queue of trials to run again. ``siftcli.sweep.study`` adds the sweep's own (its study, its
frontier); ``siftcli.plan.study`` the plan's job queue.

A study may live on one machine (a journal file in its folder, the default) or be shared by several at once
(``--storage postgresql://… --study NAME``, the same command started on each). Everything the machines must agree on
lives in the study, not in a folder: the recipe's hash and the settings (a machine with others is refused) and which
machine runs which trial.

Claims use what the storage does atomically: creating a study whose name is taken fails, so a claim (the founder,
the sweep's frontier) is owned by the one process that created its name. Liveness is a timestamp each owner refreshes on its running trials
(and on the frontier while it trains); a trial whose owner has been silent for ``stale_seconds`` (its machine died)
is failed and queued again with the same parameters by whichever machine notices first (the state change can
succeed once), so no trial is lost and none runs twice at once. Timestamps are wall-clock seconds: machines with
clocks more than a few seconds apart need a ``stale_seconds`` well above that (NTP keeps them within milliseconds).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, NamedTuple

from siftcli.analysis.sweep import Params
from siftcli.errors import SiftcliError, first_line

OWNER = "siftcli_owner"
ALIVE = "siftcli_alive"
INTERRUPTED = "interrupted"
REPLACES = "siftcli_replaces"  # on an interrupted trial's copy: the number of the trial it runs again
SURPLUS = "siftcli_surplus"  # a fresh trial asked for after the study's count was spent (a race lost): failed, not counted
RECIPE = "siftcli_recipe_sha256"
RECIPE_DUMP = "siftcli_recipe"  # the recipe the study started with, every field (:func:`same_recipe`)
#: How long an interrupted trial without its copy yet counts as running: :func:`requeue` fails it, then queues the copy,
#: and a machine counting in between must not end its sweep; past this, its process died in between (counted as before).
REQUEUE_SECONDS = 30.0
#: A trial (or a claim) whose owner has been silent this long is failed and queued again: the sweep's default
#: ``--stale-seconds`` and the plan's fixed limit.
STALE_SECONDS = 120.0
SETTINGS = "siftcli_settings"


def recipe_dump(recipe: Any) -> dict[str, Any]:
    """The recipe as trained, every field with its value (defaults included), ``report_to`` left out: where a run is
    also logged does not make two machines' recipes differ."""
    return recipe.model_dump(mode="json", exclude={"report_to"})


def dump_sha256(dump: dict[str, Any]) -> str:
    """A recipe dump's hash (:func:`recipe_dump`): the one rule a study's and a frontier's key is made by."""
    import yaml

    return hashlib.sha256(yaml.safe_dump(dump, sort_keys=False).encode()).hexdigest()


def recipe_sha256(recipe: Any) -> str:
    """What a frontier and a study are keyed by: :func:`recipe_dump`, hashed."""
    return dump_sha256(recipe_dump(recipe))


def same_recipe(sha256: str, started: dict[str, Any] | None, recipe: Any) -> bool:
    """Whether ``recipe`` is the one a study or frontier was started with (its hash ``sha256`` and, where kept, its
    dump ``started``): the same hash, or the same fields and values but for fields a later siftcli added, each at its
    default (what the recipe file says of a field is not enough: a plan's saved ``recipe.yaml`` writes every field).
    The hash covers every default, so without the dump a recipe file left untouched would read as changed once
    siftcli gained a field, and ``--resume`` (what a plan's answer tells the user to run for more seeds) would refuse
    it; a default whose value changed is still a change."""
    dump = recipe_dump(recipe)
    if sha256 == dump_sha256(dump):
        return True
    if not isinstance(started, dict):
        return False
    return _grown_only(started, dump, recipe.model_dump(mode="json", exclude_defaults=True))


def _grown_only(old: Any, new: Any, changed: Any) -> bool:
    """``new`` equals ``old`` but for keys ``old`` lacks, none of them in ``changed`` (the fields off their defaults)."""
    if not (isinstance(old, dict) and isinstance(new, dict)):
        return old == new
    changed = changed if isinstance(changed, dict) else {}
    if any(k not in new for k in old):  # a field siftcli no longer has: the recipe is read otherwise now
        return False
    for k, value in new.items():
        if k not in old:
            if k in changed:
                return False
        elif not _grown_only(old[k], value, changed.get(k)):
            return False
    return True


def die_with_parent() -> None:
    """On Linux the kernel sends SIGTERM when the parent process dies (even by SIGKILL): a sweep's worker or a plan's
    helper never trains on for a parent that cannot tell its study the result. Elsewhere a worker ends at the end of
    its stdin."""
    if sys.platform.startswith("linux"):
        import ctypes
        import signal

        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def spawn(command: list[str], log: Path, *, pipes: bool = False, env: dict[str, str] | None = None) -> subprocess.Popen:
    """Start a study's helper process (a sweep worker, a plan helper) the one way: this interpreter with ``command``
    (``-m MODULE ARGS``), its output appended to ``log`` (its stderr only with ``pipes``, whose stdin and stdout are
    the parent's protocol), stdin closed otherwise, the environment given plus this one's. Each helper calls
    :func:`die_with_parent` first, so none trains on for a parent that died."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        return subprocess.Popen([sys.executable, *command], env={**os.environ, **(env or {})},
                                stdin=subprocess.PIPE if pipes else subprocess.DEVNULL,
                                stdout=subprocess.PIPE if pipes else out, stderr=out)


def optuna_module() -> Any:
    try:
        import optuna
    except ImportError:
        raise SiftcliError('siftcli plan and sweep-beta need Optuna: pip install "optuna>=4.0"') from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna


def owner_of(folder: Path) -> str:
    """This machine and run folder: a resumed folder owns the trials it left running."""
    return f"{socket.gethostname()}:{Path(folder).resolve()}"


def storage_for(url: str, folder: Path) -> Any:
    """``url``, or (none given) a journal file in the run's folder."""
    optuna_module()
    if url:
        return url
    from optuna.storages.journal import JournalFileBackend, JournalStorage

    path = folder / "optuna.journal"
    try:
        return JournalStorage(JournalFileBackend(str(path)))
    except Exception as exc:  # optuna's own words for a torn or edited file: a 70-line JSONDecodeError
        raise SiftcliError(f"{path}: damaged, its trials cannot be read ({first_line(exc, 120)}); start again in a new "
                           "-o folder (the finished runs' files in this one stay as they are)") from None


def check_journal(folder: Path, flag: str = "--resume") -> None:
    """A resumed folder's journal (the default storage), read whole before optuna does: empty, the finished trials are
    lost; a line that is not JSON (a torn write, an edit) would stop optuna with its own 70-line error at the next
    write. Either is one line."""
    import json

    path = Path(folder) / "optuna.journal"
    if not path.exists() and not path.is_symlink():
        return
    if not path.is_file():  # a folder, a dangling link, a device: it was exit 1, "Is a directory (...)"
        raise SiftcliError(f"{flag} {folder}: {path} is not a file (a folder, or a link to none), so the finished trials "
                           "cannot be read; move it aside, or start again in a new -o folder")
    if path.stat().st_size == 0:
        raise SiftcliError(f"{flag} {folder}: {path} is empty, so the finished trials are lost; start again in a new "
                           "-o folder")
    with path.open("rb") as fh:
        for number, line in enumerate(fh, 1):
            try:
                json.loads(line)
            except ValueError:
                raise SiftcliError(f"{flag} {folder}: {path} is damaged at line {number} (not a whole JSON record: a "
                                   "torn write or an edit), so its trials cannot be read; start again in a new -o "
                                   "folder") from None


def check_storage(url: str, study: str | None = None) -> None:
    """Open the storage before anything trains: the URL parses, its driver is installed, the server answers or the
    file's folder exists; an in-memory database (which trial processes cannot share) is refused; a ``study`` of that
    name there that siftcli did not start (its trials hold no siftcli values) is refused too."""
    if not url:
        return
    if "://" not in url:
        raise SiftcliError(f"--storage {url!r}: expected an Optuna storage URL such as sqlite:///sweep.db "
                           "(leave it out for a journal file in the sweep folder)")
    try:
        from sqlalchemy.engine import make_url

        parsed = make_url(url)
    except Exception as exc:
        raise SiftcliError(f"--storage {url!r}: not a database URL ({str(exc).splitlines()[0][:120]})") from None
    if parsed.get_backend_name() == "sqlite":
        if parsed.database in (None, "", ":memory:"):
            raise SiftcliError(f"--storage {url!r}: an in-memory database lives in one process and the trials run in "
                               "others; use a file, sqlite:///sweep.db")
        folder = Path(parsed.database).expanduser().resolve().parent
        if not folder.is_dir():
            raise SiftcliError(f"--storage {url!r}: folder {folder} does not exist")
    optuna = optuna_module()
    try:
        _create_tables(optuna, url)
    except ImportError as exc:
        raise SiftcliError(f"--storage {url!r}: the database driver is not installed ({exc}); e.g. "
                           "pip install 'psycopg[binary]' for postgresql://, pymysql for mysql+pymysql://") from None
    except Exception as exc:  # OperationalError and friends: no server, wrong password, no such database
        first = first_line(exc)
        raise SiftcliError(f"--storage {url!r}: cannot open it ({exc.__class__.__name__}: {first})") from None
    if study is not None:
        names = set(optuna.study.get_all_study_names(storage=url))
        # a siftcli study holds no trial before its founder's marker exists (join() writes it first), so a study with
        # trials and no marker is someone else's; one without trials may be a machine founding it this moment
        trials = len(optuna.load_study(study_name=study, storage=url).trials) if study in names else 0
        if trials and f"{study}:founder" not in names:
            raise SiftcliError(f"--study {study}: {url} already holds a study of that name that siftcli did not start "
                               f"({trials} trials of its own); give another --study name")


def _create_tables(optuna: Any, url: str, attempts: int = 5) -> None:
    """Optuna's tables, created by the first machine to connect. Machines started together race to create them, and
    on PostgreSQL the loser's CREATE fails on a catalog constraint; by the next attempt the tables exist."""
    from sqlalchemy.exc import IntegrityError, ProgrammingError

    for attempt in range(attempts):
        try:
            optuna.storages.RDBStorage(url, engine_kwargs={"pool_pre_ping": True})
            return
        except (IntegrityError, ProgrammingError):
            if attempt == attempts - 1:
                raise
            time.sleep(0.5 * (attempt + 1))  # the winner's transaction commits meanwhile


def join(study: Any, recipe: Any, shared: dict[str, Any], keys: tuple[str, ...]) -> bool:
    """Record this study's recipe (its hash and its dump: :func:`same_recipe`) and settings, or check that a machine
    joining it uses the same ones (``keys``: the settings that must agree). True for the one process that started the
    study (a sweep's queues its grid), decided by who created ``NAME:founder`` first."""
    optuna = optuna_module()
    try:
        optuna.create_study(storage=study._storage, study_name=f"{study.study_name}:founder")
        founder = True
    except optuna.exceptions.DuplicatedStudyError:
        founder = False
    if founder:
        study.set_user_attr(SETTINGS, shared)
        study.set_user_attr(RECIPE_DUMP, recipe_dump(recipe))
        study.set_user_attr(RECIPE, recipe_sha256(recipe))
        return True
    attrs = study.user_attrs
    if RECIPE not in attrs:  # the founder is writing them this moment
        time.sleep(1.0)
        attrs = study.user_attrs
    if RECIPE in attrs and not same_recipe(attrs[RECIPE], attrs.get(RECIPE_DUMP), recipe):
        raise SiftcliError(f"--study {study.study_name}: this study was started with another recipe; give the same recipe "
                           "on every machine, or another --study name")
    differ = [k for k in keys if k in attrs.get(SETTINGS, shared) and attrs.get(SETTINGS, shared).get(k) != shared.get(k)]
    if differ:
        raise SiftcliError(f"--study {study.study_name}: this study was started with other settings ({', '.join(differ)}); "
                           "give the same options on every machine, or another --study name")
    return False


def live_trial(study: Any, number: int) -> Any:
    """The one place the sweep reaches past Optuna's public API: a live :class:`optuna.trial.Trial` for a trial number
    (the parent created the trial with ``ask``; its worker reports to it and asks whether to prune). Optuna has no
    public lookup from number to a live trial; ``Trial(study, trial_id)`` is how its own ``ask`` builds one."""
    optuna = optuna_module()
    frozen = study.get_trials(deepcopy=False)[number]
    return optuna.trial.Trial(study, frozen._trial_id)


class Count(NamedTuple):
    """Where a study's trials stand. ``taken`` is what its count of trials is spent on: finished, running and waiting
    trials, plus interrupted ones whose copy is not queued yet (so that no machine, between a requeue's two writes,
    sees a free place and asks for a fresh trial instead of the copy about to be queued)."""

    finished: int
    running: int
    waiting: int
    taken: int
    numbers: tuple[int, ...]  # the taken trials' numbers, ascending


def counted(study: Any) -> Count:
    """The whole study's :class:`Count`; an interrupted trial counts once, as its copy."""
    optuna = optuna_module()
    states = optuna.trial.TrialState
    trials = [t for t in study.get_trials(deepcopy=False) if not t.user_attrs.get(SURPLUS)]
    copied = {t.user_attrs.get(REPLACES) for t in trials}
    finished = running = waiting = 0
    numbers = []
    for t in trials:
        if t.state == states.RUNNING:
            running += 1
        elif t.state == states.WAITING:
            waiting += 1
        elif t.user_attrs.get(INTERRUPTED):
            if t.number in copied:
                continue
            ended = t.datetime_complete.timestamp() if t.datetime_complete else 0.0
            if time.time() - ended < REQUEUE_SECONDS:  # its copy is being queued this moment (requeue: fail, then queue)
                running += 1  # so no machine sees "nothing runs, nothing waits" and ends before the copy exists
        else:
            finished += 1
        numbers.append(t.number)
    return Count(finished, running, waiting, len(numbers), tuple(numbers))


def enqueue(study: Any, params: Params, replaces: int | None = None) -> None:
    """Queue a parameter set (the grid, a replay, or the copy of interrupted trial ``replaces``)."""
    study.enqueue_trial(params, user_attrs=None if replaces is None else {REPLACES: replaces}, skip_if_exists=False)


def surplus(study: Any, trial: Any, trials: int, grid: bool) -> bool:
    """True (and the trial failed, marked, never counted) when a freshly sampled trial overfills the study: two machines
    raced for the last queued trial and this one got a fresh sample instead, or both saw the last free place. A grid
    takes trials from its queue only; otherwise the later-numbered trials beyond the count give way. A trial popped
    from the queue is never surplus."""
    if "fixed_params" in study._storage.get_trial_system_attrs(trial._trial_id):  # how Optuna marks a queued trial
        return False
    count = counted(study)
    if not grid and trial.number not in count.numbers[trials:]:
        return False
    optuna = optuna_module()
    study._storage.set_trial_user_attr(trial._trial_id, SURPLUS, True)
    study.tell(trial, state=optuna.trial.TrialState.FAIL)
    return True


def requeue(study: Any, trial: Any, reason: str) -> None:
    """Fail a running trial as interrupted and queue its parameters again; only the process whose state change
    succeeded queues them (so two machines noticing one dead owner queue it once)."""
    optuna = optuna_module()
    storage = study._storage
    try:  # marked first: a finished trial takes no more attributes
        storage.set_trial_user_attr(trial._trial_id, INTERRUPTED, True)
        storage.set_trial_user_attr(trial._trial_id, "error", reason)
        if not storage.set_trial_state_values(trial._trial_id, state=optuna.trial.TrialState.FAIL):
            return
    except optuna.exceptions.UpdateFinishedTrialError:
        return
    enqueue(study, trial.params, replaces=trial.number)


def tend(study: Any, mine: list[int], me: str, stale_seconds: float, resumed: bool = False) -> None:
    """Refresh the liveness of this process's running trials; fail and queue again those whose owner went silent
    (and, on ``resumed``, the ones this folder left running when it was killed)."""
    optuna = optuna_module()
    now = time.time()
    storage = study._storage
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        owner = t.user_attrs.get(OWNER)
        if t.number in mine:
            storage.set_trial_user_attr(t._trial_id, ALIVE, now)
        elif owner == me and resumed:
            requeue(study, t, "interrupted: its sweep was stopped")
        else:
            alive = t.user_attrs.get(ALIVE)
            if alive is None:  # asked this moment, its owner not yet written
                alive = t.datetime_start.timestamp() if t.datetime_start else now
            if now - alive > stale_seconds:
                requeue(study, t, f"its owner {owner or 'unknown'} fell silent for {stale_seconds:g} s")
