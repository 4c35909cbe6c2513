"""Errors a user can fix. The CLI prints them as one line and exits with code 2."""

from __future__ import annotations

from typing import Any


def first_line(exc: BaseException, limit: int | None = 200, empty: str | None = None) -> str:
    """The first line of an exception's message (a library's can run to pages), or ``empty`` (default: its class
    name) when it has none, cut to ``limit`` characters: what a one-line error quotes."""
    lines = str(exc).strip().splitlines()
    text = lines[0] if lines else (type(exc).__name__ if empty is None else empty)
    return text if limit is None else text[:limit]


class SiftcliError(Exception):
    """Bad input (recipe, data, model, device, output folder): one line, no traceback."""

    exit_code = 2

    def __init__(self, message: str = "", *, main_only: bool = False, own: bool = False) -> None:
        super().__init__(message)
        self.main_only = main_only  # raised alike on every rank of a distributed run: rank 0 alone prints it
        self.own = own  # this process's own launch settings: printed by whichever rank meets it, group or not


class RunFault(Exception):
    """The machine failed the run (a full disk while a checkpoint was written): not the input's fault, so exit code 1;
    the message says what was kept and how to continue (``<recipe>`` is replaced by the recipe the user gave)."""

    exit_code = 1


class RunInterrupted(Exception):
    """Raised after Ctrl-C once the partial results are safely on disk."""

    def __init__(self, run_dir: str, resumable: bool = True, signal: str = "SIGINT", resume_command: str | None = None,
                 advice: str | None = None) -> None:
        super().__init__(run_dir)
        self.run_dir = run_dir
        self.resumable = resumable  # a single run or a sweep continues with --resume; compare starts over
        self.signal = signal  # SIGINT (Ctrl-C) or SIGTERM (timeout, Slurm, docker stop)
        self.resume_command = resume_command or f"siftcli train <recipe> --resume {run_dir}"
        self.advice = advice  # not resumable: what to do instead (default: run the command again to start over)

    @property
    def exit_code(self) -> int:
        return 143 if self.signal == "SIGTERM" else 130


class Terminated(KeyboardInterrupt):
    """SIGTERM met between training jobs (a sweep or plan waiting on its trials): unwound like Ctrl-C (workers stopped
    and waited for, the status written), reported as SIGTERM (exit code 143)."""

    signal = "SIGTERM"


def sigterm_as_interrupt() -> Any:
    """Handle SIGTERM like SIGINT until :func:`restore_sigterm` (a batch scheduler's stop must not orphan worker processes
    or leave a record saying ``running``); returns the previous handler, or None off the main thread, where no handler
    can be set. A training step installs its own for its length and puts this one back after."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return None

    def stop(signum: int, frame: Any) -> None:
        raise Terminated()

    return signal.signal(signal.SIGTERM, stop)


def restore_sigterm(previous: Any) -> None:
    if previous is not None:
        import signal

        signal.signal(signal.SIGTERM, previous)
