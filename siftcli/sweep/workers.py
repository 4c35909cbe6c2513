"""Warm sweep workers: long-lived processes that import torch once, keep the tokenizer and the tokenized data, and
train trial after trial.

A trial process used to import torch, load the tokenizer and model and tokenize the data again, 10-13 s before its
first step, which capped what early stopping could save. A worker pays that once; every later trial rebuilds
only what its recipe changes (:func:`siftcli.workload.build.workload_key`: trials differ in sift settings, so they share a
workload and restart from its initial weights, as compare's arms do) and starts from the recipe's seed with every
random generator reset, so a trial's numbers do not depend on what the worker ran before.

The protocol is one JSON line each way: the parent writes ``{"number": N, "sent": T}`` on the worker's stdin, the
worker trains trial N and answers ``{"number": N, "code": C, "startup_seconds": S}`` on its stdout (its own file
descriptor: anything a library prints goes to stderr). A trial's stderr goes to ``trial-N/stderr.txt``. A trial
that raises ends its worker (nothing half-built is reused); a worker that dies is seen as the end of its stdout, its
trial is failed with the error, and the pool starts another. ``--once`` is the cold mode: one trial per process,
what the sweep-cost benchmark holds warm workers against.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import subprocess
import sys
import time
import traceback
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from typing_extensions import TypedDict

from siftcli import studies
from siftcli.errors import RunInterrupted, SiftcliError
from siftcli.sweep.trial import WorkloadCache, run_trial

#: The worker process; tests point it elsewhere to exercise crashes.
WORKER_COMMAND = ["-m", "siftcli.sweep.workers"]  # after the interpreter (studies.spawn)


class Reply(TypedDict, total=False):
    """A worker's answer for one trial, one JSON line: its exit code (0: the trial ran, whatever its outcome), the
    error where it failed, and its start-up seconds."""

    number: int
    code: int
    error: str
    startup_seconds: float | None


def serve(sweep_dir: Path, lines: Iterable[str], out: IO[str], *, once: bool = False, cache: WorkloadCache | None = None) -> int:
    """Run the trials named on ``lines`` until they end (or after one, ``once``); answer each on ``out``."""
    cache = cache or WorkloadCache()
    for line in lines:
        if not line.strip():
            continue
        request = json.loads(line)
        number = int(request["number"])
        reply: Reply = {"number": number, "code": 0}
        with _stderr_to(sweep_dir / f"trial-{number}" / "stderr.txt"):
            try:
                result = run_trial(sweep_dir, number, cache=cache, sent=request.get("sent"))
                reply["startup_seconds"] = result.get("startup_seconds")
            except RunInterrupted as exc:
                reply.update(code=exc.exit_code, error=f"interrupted ({exc.signal})")
            except SiftcliError as exc:
                reply.update(code=2, error=str(exc))
                print(f"siftcli: error: {exc}", file=sys.stderr)
            except Exception as exc:  # the trial failed; its worker ends with it (the pool starts another)
                traceback.print_exc()
                reply.update(code=1, error=f"{type(exc).__name__}: {exc}")
        out.write(json.dumps(reply) + "\n")
        out.flush()
        if reply["code"] != 0 or once:
            return reply["code"]
    return 0


@contextlib.contextmanager
def _stderr_to(path: Path) -> Iterator[None]:
    """File descriptor 2 (Python's and C's output alike) into ``path`` for one trial."""
    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stderr.flush()
    saved = os.dup(2)
    with open(path, "ab") as f:
        os.dup2(f.fileno(), 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def main(argv: list[str] | None = None) -> int:
    """``python -m siftcli.sweep.workers SWEEP_DIR [--once]``: what the sweep starts, ``--jobs`` at a time."""
    argv = sys.argv[1:] if argv is None else argv
    studies.die_with_parent()
    replies = os.fdopen(os.dup(1), "w", buffering=1)  # the protocol's own stdout ...
    os.dup2(2, 1)  # ... and anything printed goes to the log
    return serve(Path(argv[0]), sys.stdin, replies, once="--once" in argv[1:])


# -- the parent's side ----------------------------------------------------------------------------------
@dataclass
class Worker:
    proc: subprocess.Popen
    slot: int
    number: int | None = None  # the trial it is training
    sent: float = 0.0


@dataclass
class Finished:
    """A trial a worker ended: its answer, or (``reply`` None) the worker's death and exit code."""

    number: int
    code: int
    reply: Reply | None
    seconds: float


class Pool:
    """Up to ``size`` workers for one sweep folder, started when a trial needs one; ``fresh`` starts one per trial."""

    def __init__(self, sweep_dir: Path, size: int, *, fresh: bool = False, gpus: int = 0) -> None:
        self.sweep_dir, self.size, self.fresh, self.gpus = sweep_dir, size, fresh, gpus
        self.workers: list[Worker] = []
        self._selector = selectors.DefaultSelector()
        self._started = 0

    def busy(self) -> int:
        return sum(1 for w in self.workers if w.number is not None)

    def running(self) -> list[int]:
        return [w.number for w in self.workers if w.number is not None]

    def start(self, number: int) -> None:
        """Hand trial ``number`` to an idle worker, starting one if none is idle."""
        worker = next((w for w in self.workers if w.number is None), None) or self._spawn()
        worker.number, worker.sent = number, time.time()
        assert worker.proc.stdin is not None
        try:
            worker.proc.stdin.write((json.dumps({"number": number, "sent": worker.sent}) + "\n").encode())
            worker.proc.stdin.flush()
        except BrokenPipeError:  # died idle: its end of stdout reports the trial failed
            pass

    def wait(self, timeout: float) -> list[Finished]:
        """Trials that ended within ``timeout`` seconds (the parent's loop also keeps its study up to date)."""
        done = []
        for key, _ in self._selector.select(timeout):
            worker: Worker = key.data
            line = worker.proc.stdout.readline() if worker.proc.stdout else b""
            number, seconds = worker.number, time.time() - worker.sent
            if line:
                reply = json.loads(line)
                worker.number = None
                if number is not None:
                    done.append(Finished(number, int(reply.get("code", 1)), reply, seconds))
                if reply.get("code", 1) == 0 and not self.fresh:
                    continue
            code = self._retire(worker)
            if not line and number is not None:
                done.append(Finished(number, code, None, seconds))
        return done

    def stop(self) -> list[Finished]:
        """SIGTERM to every worker (a training one finishes its step, keeps what it did and answers), reap them all,
        and return how their trials ended."""
        for w in self.workers:
            if w.proc.poll() is None:
                w.proc.terminate()
        done = []
        for w in list(self.workers):
            number, seconds = w.number, time.time() - w.sent
            line = w.proc.stdout.read() if w.proc.stdout else b""  # to the end: the worker has been told to go
            code = self._retire(w)
            if number is not None:
                reply = json.loads(line.splitlines()[-1]) if line.strip() else None
                # no answer: the SIGTERM caught it before training began (importing, loading): interrupted all the same
                done.append(Finished(number, int(reply.get("code", code)) if reply else 143, reply, seconds))
        self._selector.close()
        return done

    def _spawn(self) -> Worker:
        slots = {w.slot for w in self.workers}
        slot = next(i for i in range(self.size + 1) if i not in slots)
        env = {"CUDA_VISIBLE_DEVICES": str(slot % self.gpus)} if self.gpus > 1 else {}  # one worker per visible GPU
        self._started += 1
        proc = studies.spawn([*WORKER_COMMAND, str(self.sweep_dir), *(["--once"] if self.fresh else [])],
                             self.sweep_dir / "workers" / f"worker-{self._started}.log", pipes=True, env=env)
        worker = Worker(proc, slot)
        self.workers.append(worker)
        assert proc.stdout is not None
        self._selector.register(proc.stdout, selectors.EVENT_READ, worker)
        return worker

    def _retire(self, worker: Worker) -> int:
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(worker.proc.stdout)
        with contextlib.suppress(OSError):
            worker.proc.stdin.close()  # type: ignore[union-attr]
        code = worker.proc.wait()
        worker.proc.stdout.close()  # type: ignore[union-attr]
        self.workers.remove(worker)
        return code


if __name__ == "__main__":
    raise SystemExit(main())
