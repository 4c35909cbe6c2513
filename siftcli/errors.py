"""Errors a user can fix. The CLI prints them as one line and exits with code 2."""

from __future__ import annotations


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
