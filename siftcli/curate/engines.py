"""Chunk jobs in, their results in job order out: in this process, in a pool of processes on this machine, or on a Dask
cluster (``siftcli[dask]``; a local one of ``workers`` processes unless a scheduler address is given).

Every job is a pure function of its chunk and a shared, read-only context (the dataset, the tokenizer, a fitted
reference), and results come back in job order, so what is kept does not depend on where the jobs ran or how many
ran at once. Each engine sends the context once per worker, not once per job. The pool of processes uses ``spawn``:
a forked child would inherit the parent's thread pools (torch's, the tokenizer's) in whatever state they were.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

from siftcli.errors import SiftcliError, first_line

ENGINES = ("processes", "dask")

_CONTEXT: dict[str, Any] = {}  # a worker's copy of the context (set once per worker process)


def _set_context(context: Any) -> None:
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # one process per core: the tokenizer's own threads would oversubscribe
    _CONTEXT["value"] = context


def _call(fn: Callable[[Any, Any], Any], job: Any) -> Any:
    return fn(_CONTEXT["value"], job)


def _call_with(fn: Callable[[Any, Any], Any], context: Any, job: Any) -> Any:
    return fn(context, job)


#: Seconds to wait for a Dask scheduler to answer (a refused or silent address is named after this, not after 30 s).
CONNECT_SECONDS = 10


def _connect(address: str) -> Any:
    """A client of the scheduler at ``address``, or one line saying why there is none: a malformed address, nothing
    listening, or a service there that is not a Dask scheduler (its reply would otherwise be read as a frame size)."""
    from distributed import Client

    try:
        _probe(address)
        return Client(address, timeout=CONNECT_SECONDS)
    except Exception as exc:  # ValueError (address), OSError/TimeoutError (nothing there), anything a stranger's reply raises
        raise SiftcliError(f"--scheduler {address}: no Dask scheduler answered there within {CONNECT_SECONDS} s "
                           f"({first_line(exc, 160)}); "
                           "expected the address a running dask scheduler prints (tcp://host:8786)") from None


def _probe(address: str) -> None:
    """A Dask scheduler speaks first: on a TCP connection it sends its handshake, a frame whose first 8 bytes are its
    small length. Read them before handing the address to Dask, whose own handshake waits without a limit for a silent
    service and reads a talkative one's bytes as a frame size (exabytes)."""
    import socket
    import struct

    scheme, _, rest = address.rpartition("://")
    host, _, port = rest.rpartition(":")
    if scheme not in ("", "tcp") or not host or not port.isdigit():
        return  # tls://, ucx://, a malformed address: Dask's own checks name it
    with socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_SECONDS) as conn:
        head = b""
        while len(head) < 8:
            part = conn.recv(8 - len(head))
            if not part:
                break
            head += part
    if len(head) < 8 or struct.unpack("<Q", head)[0] > 1 << 24:
        raise OSError("a service answers there but does not speak Dask's protocol")


@dataclass
class Engine:
    """Where chunk jobs run: ``processes`` (``workers`` of them; 1 runs in this process) or ``dask``."""

    kind: str = "processes"
    workers: int = 1
    scheduler: str | None = None  # a Dask scheduler address; None starts a local cluster of ``workers`` processes

    def __post_init__(self) -> None:
        if self.kind not in ENGINES:
            raise SiftcliError(f"--engine {self.kind!r}: expected one of {', '.join(ENGINES)}")
        if self.workers < 1:
            raise SiftcliError(f"--workers {self.workers}: expected at least 1")
        if self.scheduler is not None and self.kind != "dask":
            raise SiftcliError("--scheduler is a Dask scheduler address: give it with --engine dask")
        if self.kind == "dask":
            try:
                import distributed  # noqa: F401
            except ImportError:
                raise SiftcliError('--engine dask needs Dask\'s distributed scheduler: pip install "siftcli[dask]"') from None
        self._session: Any = None
        self._pool: ProcessPoolExecutor | None = None
        self._context: Any = None
        self._shared: Any = None

    def __enter__(self) -> Engine:
        if self.kind == "dask":
            from distributed import Client, LocalCluster

            if self.scheduler:
                self._session = (_connect(self.scheduler), None)
            else:
                cluster = LocalCluster(n_workers=self.workers, threads_per_worker=1, processes=True,
                                       dashboard_address=None, silence_logs=40)
                self._session = (Client(cluster), cluster)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None
        if self._session is not None:
            client, cluster = self._session
            client.close()
            if cluster is not None:
                cluster.close()
            self._session = None

    def share(self, context: Any) -> None:
        """The read-only context every later job gets, sent once to each worker."""
        self._context = context
        if self.kind == "dask":
            self._shared = self._session[0].scatter(context, broadcast=True)
        elif self._pool is not None:
            self._pool.shutdown()
            self._pool = None

    def _processes(self) -> ProcessPoolExecutor:
        """The pool, started at the first map, kept for the later ones (start-up costs each worker a second or two)."""
        if self._pool is None:
            import multiprocessing

            self._pool = ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context("spawn"),
                                             initializer=_set_context, initargs=(self._context,))
        return self._pool

    def map(self, fn: Callable[[Any, Any], Any], jobs: Iterable[Any], count: int | None = None) -> Iterator[Any]:
        """``fn(context, job)`` for every job; results yielded in job order. Jobs are drawn from ``jobs`` as workers
        free up, at most ``2 * workers`` ahead of the result being waited for, so a generator that reads each chunk's
        rows only when its job is sent keeps the pool's text out of this process. ``count``: how many jobs there are,
        if known; one job or none runs here (a pool would only add its start-up)."""
        jobs = iter(jobs)
        if self.kind != "dask" and (self.workers == 1 or (count is not None and count <= 1 and self._pool is None)):
            for job in jobs:
                yield fn(self._context, job)
            return
        if self.kind == "dask":
            client = self._session[0]
            submit = lambda job: client.submit(_call_with, fn, self._shared, job, pure=False)  # noqa: E731
            cancel = lambda futures: client.cancel(list(futures))  # noqa: E731
        else:
            pool = self._processes()
            submit = lambda job: pool.submit(_call, fn, job)  # noqa: E731
            cancel = lambda futures: [f.cancel() for f in futures]  # noqa: E731
        ahead: deque[Any] = deque()
        try:
            for job in jobs:
                ahead.append(submit(job))
                if len(ahead) >= 2 * self.workers:
                    yield ahead.popleft().result()
            while ahead:
                yield ahead.popleft().result()
        finally:
            cancel(ahead)
