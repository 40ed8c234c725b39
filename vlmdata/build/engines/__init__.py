"""Execution engines: where per-chunk ``prepare`` work and per-shard ``write_shard`` work run.

An engine has two operations, both used by ``vlmdata build`` (and usable by ``vlmdata synth``):

- ``engine.imap(fn, args_iter, window)``: ``fn(args)`` for each element, results yielded **in input
  order**, with at most ``window`` calls in flight (``args_iter`` is consumed lazily, so memory stays
  bounded however long the input is).
- ``engine.submit(fn, *args)``: one call, returns a handle with ``.result()``.

``engine.parallelism`` is how many calls can run at once. Engines are context managers.

Because planning (which sample goes in which shard) happens in the driver in input order and only
the pure per-chunk/per-shard work is distributed, the output does not depend on the engine or on
its number of workers.

- ``LocalEngine(workers)``: inline for ``workers <= 1``, else a ``multiprocessing`` pool (fork). A
  pool worker that dies (SIGKILL, the out-of-memory killer) loses the task it was running, and a plain
  ``multiprocessing`` pool then waits for that result forever: ``LocalEngine`` waits in short steps,
  notices the dead worker and raises ``EngineError`` instead of hanging.
- ``RayEngine(address, workers, max_retries)`` (``vlmdata.build.engines.ray_engine``): Ray tasks on a local Ray
  instance (``address=None``, ``workers`` CPUs) or an existing cluster (``address="auto"`` or
  ``"ray://host:10001"``); failed tasks are retried by Ray (``max_retries``).

``get_engine(name, workers=..., address=...)`` picks one by name ("local" or "ray").
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
from collections import deque
from typing import Any, Callable, Iterable, Iterator

from vlmdata.errors import VlmdataError

ENGINES = ("local", "ray")


class EngineError(VlmdataError):
    """The engine cannot be used (not installed, cannot connect)."""


class _Done:
    def __init__(self, value):
        self.value = value

    def result(self):
        return self.value


class _Async:
    def __init__(self, ar, engine: "LocalEngine"):
        self.ar, self.engine = ar, engine

    def result(self):
        while not self.ar.ready():
            self.ar.wait(0.5)
            if not self.ar.ready():
                self.engine.check_workers()
        return self.ar.get()


class Engine:
    name = "engine"
    parallelism = 1

    def imap(self, fn: Callable, args: Iterable, window: int | None = None) -> Iterator:
        raise NotImplementedError

    def submit(self, fn: Callable, *args) -> Any:
        raise NotImplementedError

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def _die_with_parent() -> None:
    """Pool workers get SIGKILL when the build process dies (Linux), so a build killed with SIGKILL
    leaves no orphan still writing shards while a ``--resume`` cleans up."""
    try:
        import ctypes
        import signal

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


def get_engine(name: str = "local", *, workers: int = 1, address: str | None = None, max_retries: int = 3) -> Engine:
    if name == "local":
        if address:
            raise EngineError("`address` is for `engine` ray")
        return LocalEngine(workers)
    if name == "ray":
        # Ray is optional: imported only when the ray engine is chosen
        from vlmdata.build.engines.ray_engine import RayEngine

        return RayEngine(address=address, workers=workers, max_retries=max_retries)
    raise EngineError(f"unknown engine {name!r} (choose from {', '.join(ENGINES)})")


def engine_context(engine: "Engine | str | None", workers: int, address: str | None = None):
    """A context manager giving an Engine: an Engine passed in is used as is (and not closed)."""
    if isinstance(engine, Engine):
        return contextlib.nullcontext(engine)
    return get_engine(engine or "local", workers=workers, address=address)


__all__ = ["ENGINES", "Engine", "EngineError", "LocalEngine", "engine_context", "get_engine"]
