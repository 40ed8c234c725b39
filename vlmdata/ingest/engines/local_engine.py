"""``LocalEngine(workers)``: inline for ``workers <= 1``, else a ``multiprocessing`` pool (fork).

A pool worker that dies (SIGKILL, the out-of-memory killer) loses the task it was running, and a plain
``multiprocessing`` pool then waits for that result forever: ``LocalEngine`` waits in short steps, notices the
dead worker and raises ``EngineError`` instead of hanging. Pool workers die with the build process (Linux), so a
build killed with SIGKILL leaves no orphan still writing shards while a ``resume`` cleans up.
"""

from __future__ import annotations

import multiprocessing as mp
import signal
from collections import deque

from vlmdata.ingest.engines.base import Engine, EngineError


class _Done:
    def __init__(self, value):
        self.value = value

    def result(self):
        return self.value


class _Async:
    def __init__(self, ar, engine: LocalEngine):
        self.ar, self.engine = ar, engine

    def result(self):
        while not self.ar.ready():
            self.ar.wait(0.5)
            if not self.ar.ready():
                self.engine.check_workers()
        return self.ar.get()


def _die_with_parent() -> None:
    """A pool worker gets SIGKILL when the build process dies (Linux's PR_SET_PDEATHSIG)."""
    import ctypes  # in pool workers only: ~2.5 ms (-X importtime) kept out of every build's start-up

    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class LocalEngine(Engine):
    name = "local"

    def __init__(self, workers: int = 1):
        self.parallelism = max(1, workers)
        self.pool = None
        if workers > 1:
            ctx = mp.get_context("fork") if "fork" in mp.get_all_start_methods() else mp.get_context()
            self.pool = ctx.Pool(workers, initializer=_die_with_parent)
            self._pids = {p.pid for p in self.pool._pool}  # pyright: ignore[reportAttributeAccessIssue]  # private, not in typeshed

    @classmethod
    def create(cls, *, workers: int, address: str | None, max_retries: int) -> LocalEngine:
        if address:
            raise EngineError("`address` is for `engine` ray")
        return cls(workers)

    def check_workers(self) -> None:
        """EngineError when a pool worker died since the pool started (its task is lost)."""
        procs = list(getattr(self.pool, "_pool", []) or [])
        dead = [p for p in procs if p.exitcode is not None and p.exitcode != 0]
        if dead or {p.pid for p in procs} - self._pids:
            code = dead[0].exitcode if dead else None
            how = f" (signal {-code})" if code is not None and code < 0 else ""
            raise EngineError(
                f"a worker process died{how}, killed or out of memory; the build stopped: run it "
                "again with `resume` to continue"
            )

    def imap(self, fn, args, window=None):
        if self.pool is None:
            for a in args:
                yield fn(a)
            return
        # Windowing happens here, in the caller's thread, with apply_async: blocking inside the iterator
        # given to Pool.imap would stall the pool's task-feeding thread, and with it every later
        # apply_async (the shard writes), while the caller waits for one of them: a deadlock.
        window = window or 4 * self.parallelism
        pending: deque = deque()
        for a in args:
            pending.append(_Async(self.pool.apply_async(fn, (a,)), self))
            if len(pending) >= window:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()

    def submit(self, fn, *args):
        if self.pool is None:
            return _Done(fn(*args))
        return _Async(self.pool.apply_async(fn, args), self)

    def close(self):
        if self.pool is not None:
            self.pool.terminate()
            self.pool.join()
            self.pool = None
