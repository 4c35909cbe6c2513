"""A plan's jobs in, their results out: the plan's trials on an Optuna study that every process and machine shares.

A job is one training run (an arm at a fidelity, for a seed, evaluated on the validation or the evaluation split). The
study layer is the one the sweep uses (:mod:`siftcli.studies`): a journal file in the plan folder by default, or ``--storage URL
--study NAME`` for several machines started with the same command; ``--workers N`` starts N-1 more processes on this
machine that take jobs from the same study. Each job is an Optuna trial queued with one parameter, its index in the
study's job list; a process takes the next queued trial (Optuna hands a queued trial to one process only), trains it
and tells the study its validation metric and its run's numbers.

The plan runs in phases (the screen's baselines, the screen, the second rung's baseline and candidates, then two per
confirming seed until the seeds stop). A phase's jobs are decided from the finished ones by whichever process claims the phase first
(creating the study ``NAME:phase:K``, which succeeds once); the others wait for its list. Liveness is the sweep's: each
process refreshes a timestamp on its running trial from a heartbeat thread 6 times per ``STALE_SECONDS``
(:mod:`siftcli.studies`), and a trial whose owner fell silent that long (its machine died) is queued again by
whichever process notices first.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from siftcli import studies
from siftcli.plan.record import PlannerNotes
from siftcli.training.record import RunMetrics

#: The settings every machine on one plan study must share.
SHARED = ("budget", "tolerance", "seeds")
JOBS = "siftcli_plan_jobs"
PHASES = "siftcli_plan_phases"  # how many phases have their jobs queued
EXTRA = "siftcli_plan_extra"  # what the phase planners learned and every process needs (the pools of dedup candidates)
PARAM = "job"
#: The study's name in the plan folder's own journal (``--study`` names one in a shared ``--storage``).
DEFAULT_STUDY = "siftcli-plan"


@dataclass(frozen=True)
class Job:
    """One training run of the plan."""

    phase: int
    arm: str
    fidelity: float  # share of the arm's schedule (1: all of it)
    seed: int
    split: str  # "validation" (the search) or "evaluation" (the confirmation)


@dataclass
class Result:
    """A finished job: its run's numbers (``brief`` of ``metrics.json``) or why it failed, and the seconds it took
    here (the run plus building what it needed: a workload, a reference)."""

    job: Job
    seconds: float
    run: RunMetrics | None
    error: str | None = None


class PlanStudy:
    """The study of one plan, seen from one process (``me``: this machine and plan folder)."""

    def __init__(self, storage: str, folder: Path, name: str, higher: bool) -> None:
        optuna = studies.optuna_module()
        self.me = studies.owner_of(folder)
        self.study = optuna.create_study(storage=studies.storage_for(storage, folder), study_name=name,
                                         direction="maximize" if higher else "minimize", load_if_exists=True)
        self._mine: list[int] = []
        self._lock = threading.Lock()

    # -- joining -----------------------------------------------------------------------------------------------------
    def join(self, recipe: Any, settings: dict[str, Any]) -> None:
        """Record the recipe and settings, or refuse a process that brings other ones."""
        studies.join(self.study, recipe, settings, SHARED)

    def extend(self, seeds: int) -> None:
        """A resumed plan confirms up to ``seeds`` now: the study's shared settings say so, for every machine joining."""
        shared = dict(self.study.user_attrs.get(studies.SETTINGS, {}))
        if shared:
            self.study.set_user_attr(studies.SETTINGS, {**shared, "seeds": seeds})

    def started_settings(self) -> dict[str, Any]:
        """The shared settings the study was started with (empty before any process joined it)."""
        return dict(self.study.user_attrs.get(studies.SETTINGS, {}))

    def started_with(self, recipe: Any) -> bool:
        """Whether ``recipe`` is the one the study was started with (:func:`siftcli.studies.same_recipe`; True before
        any process joined it)."""
        attrs = self.study.user_attrs
        return studies.RECIPE not in attrs or studies.same_recipe(attrs[studies.RECIPE], attrs.get(studies.RECIPE_DUMP),
                                                                  recipe)

    def recover(self, resumed: bool) -> None:
        """Queue again the trials whose owner went silent (and, resumed, the ones this folder left running)."""
        studies.tend(self.study, list(self._mine), self.me, studies.STALE_SECONDS, resumed=resumed)

    # -- jobs --------------------------------------------------------------------------------------------------------
    def jobs(self) -> list[Job]:
        return [Job(**j) for j in self.study.user_attrs.get(JOBS, [])]

    def phases_queued(self) -> int:
        return int(self.study.user_attrs.get(PHASES, 0))

    def extra(self) -> PlannerNotes:
        return dict(self.study.user_attrs.get(EXTRA, {}))

    def queue_phase(self, phase: int, decide: Callable[[], tuple[list[Job], PlannerNotes]],
                    on_wait: Callable[[], None]) -> None:
        """Queue phase ``phase``'s jobs, decided here by ``decide`` if this process claims the phase first, else wait
        for the process that did (taking over when it falls silent)."""
        optuna = studies.optuna_module()
        generation, since = 0, time.time()
        while self.phases_queued() < phase + 1:
            try:
                optuna.create_study(storage=self.study._storage, study_name=f"{self.study.study_name}:phase:{phase}:{generation}")
            except optuna.exceptions.DuplicatedStudyError:
                if time.time() - since > studies.STALE_SECONDS:  # its planner died between its claim and its list
                    generation, since = generation + 1, time.time()
                    continue
                on_wait()
                time.sleep(1.0)  # another process decides this phase: seconds at most (it trains nothing meanwhile)
                continue
            jobs, extra = decide()
            known = self.jobs()
            start = len(known)
            self.study.set_user_attr(JOBS, [asdict(j) for j in known + jobs])
            if extra:
                self.study.set_user_attr(EXTRA, {**self.extra(), **extra})
            for i in range(start, start + len(jobs)):
                studies.enqueue(self.study, {PARAM: i})
            self.study.set_user_attr(PHASES, phase + 1)

    def take(self) -> tuple[Any, int] | None:
        """The next queued trial and its job index, now running here; None when nothing is queued."""
        optuna = studies.optuna_module()
        while True:
            waiting = self.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,))
            if not waiting:
                return None
            trial = self.study.ask()
            if studies.surplus(self.study, trial, 0, grid=True):  # another process took the last queued one first
                continue
            index = trial.suggest_int(PARAM, 0, 2**31 - 1)
            storage = self.study._storage
            storage.set_trial_user_attr(trial._trial_id, studies.OWNER, self.me)
            storage.set_trial_user_attr(trial._trial_id, studies.ALIVE, time.time())
            storage.set_trial_user_attr(trial._trial_id, "process", f"{socket.gethostname()}:{os.getpid()}")
            with self._lock:
                self._mine.append(trial.number)
            return trial, index

    def finish(self, trial: Any, result: Result, value: float | None) -> None:
        """Tell the study how the job ended (an interrupted one is queued again instead)."""
        optuna = studies.optuna_module()
        storage = self.study._storage
        storage.set_trial_user_attr(trial._trial_id, "seconds", result.seconds)
        storage.set_trial_user_attr(trial._trial_id, "run", result.run)
        if result.error is not None:
            storage.set_trial_user_attr(trial._trial_id, "error", result.error)
        if result.error is None and value is not None and value == value:
            self.study.tell(trial, value)
        else:
            self.study.tell(trial, state=optuna.trial.TrialState.FAIL)
        with self._lock:
            self._mine.remove(trial.number)

    def give_back(self, trial: Any, reason: str) -> None:
        """An interrupted job: failed as interrupted and queued again, for a resumed plan or another machine."""
        studies.requeue(self.study, trial, reason)
        with self._lock:
            if trial.number in self._mine:
                self._mine.remove(trial.number)

    def results(self) -> tuple[dict[int, Result], int]:
        """Every finished job by index (an interrupted trial's copy is what counts), and how many are still queued or
        running."""
        optuna = studies.optuna_module()
        states = optuna.trial.TrialState
        jobs = self.jobs()
        done: dict[int, Result] = {}
        pending = 0
        for t in self.study.get_trials(deepcopy=False):
            index = t.params.get(PARAM)
            if t.state in (states.WAITING, states.RUNNING):
                pending += 1
                continue
            if index is None or t.user_attrs.get(studies.INTERRUPTED) or t.user_attrs.get(studies.SURPLUS):
                continue
            done[index] = Result(jobs[index], float(t.user_attrs.get("seconds", 0.0)), t.user_attrs.get("run"),
                                 t.user_attrs.get("error") or (None if t.state == states.COMPLETE else "failed"))
        return done, pending

    # -- liveness ----------------------------------------------------------------------------------------------------
    def heartbeat(self) -> Callable[[], None]:
        """Refresh this process's running trials (and queue silent machines' again) every ``STALE_SECONDS / 6`` until
        the returned function is called."""
        stop = threading.Event()

        def beat() -> None:
            while not stop.wait(studies.STALE_SECONDS / 6):
                try:
                    with self._lock:
                        mine = list(self._mine)
                    studies.tend(self.study, mine, self.me, studies.STALE_SECONDS)
                except Exception:  # noqa: BLE001  (a storage hiccup: the next beat tries again; the trial is not lost)
                    continue

        thread = threading.Thread(target=beat, name="siftcli-plan-heartbeat", daemon=True)
        thread.start()

        def end() -> None:
            stop.set()
            thread.join(timeout=5)
        return end
