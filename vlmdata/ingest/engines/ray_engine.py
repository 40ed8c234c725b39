"""Ray engine: per-chunk and per-shard work as Ray tasks (``pip install 'vlmdata[ray]'``).

Local Ray by default (``address=None``: a private instance with ``workers`` CPUs, shut down at
the end); ``address="auto"`` or ``"ray://head:10001"`` joins an existing cluster, which must have
vlmdata installed on every node and, for ``vlmdata build``, see the source and the output (shared
filesystem or object storage URLs).

Tasks that fail are retried by Ray: ``max_retries`` covers a worker process or node that dies, and
``retry_exceptions`` retries I/O errors (``OSError``, which includes network errors from fsspec).
Everything a task returns is small (a list of prepared entries that reference image files by path,
or one shard record), so the object store carries no image bytes for file-backed sources.
"""

from __future__ import annotations

import logging
from collections import deque

from vlmdata.ingest.engines.base import Engine, EngineError

INSTALL_HINT = "`engine` ray needs Ray: pip install 'vlmdata[ray]'"
RETRY_EXCEPTIONS = [OSError, ConnectionError, TimeoutError]


def import_ray():
    """The ``ray`` module (EngineError saying how to install it when it is missing)."""
    try:
        import ray  # pyright: ignore[reportMissingImports]  # optional: vlmdata[ray]
    except ImportError:
        raise EngineError(INSTALL_HINT) from None
    return ray


def _apply(fn, *args):
    return fn(*args)


class RayEngine(Engine):
    name = "ray"

    def __init__(self, address: str | None = None, workers: int = 1, max_retries: int = 3):
        ray = self.ray = import_ray()
        self.max_retries = max_retries
        self.owned = False
        if not ray.is_initialized():
            kw = dict(include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING)
            try:
                if address:
                    ray.init(address=address, **kw)
                else:
                    ray.init(num_cpus=max(1, workers), **kw)
            except Exception as e:  # noqa: BLE001 (ConnectionError, RuntimeError, ...: all mean "no Ray here")
                raise EngineError(f"cannot start/connect to Ray{f' at {address}' if address else ''}: {e}") from None
            self.owned = True
        self.parallelism = max(1, int(ray.cluster_resources().get("CPU", workers)))
        # one generic task that applies a (picklable) callable: works for partials too
        self._task = ray.remote(_apply).options(max_retries=max_retries, retry_exceptions=RETRY_EXCEPTIONS, num_cpus=1)

    @classmethod
    def create(cls, *, workers: int, address: str | None, max_retries: int) -> RayEngine:
        return cls(address=address, workers=workers, max_retries=max_retries)

    @classmethod
    def check_available(cls) -> None:
        import_ray()

    def imap(self, fn, args, window=None):
        window = window or 4 * self.parallelism
        fn_ref = self.ray.put(fn)
        pending: deque = deque()
        for a in args:
            pending.append(self._task.remote(fn_ref, a))
            if len(pending) >= window:
                yield self.ray.get(pending.popleft())
        while pending:
            yield self.ray.get(pending.popleft())

    def submit(self, fn, *args):
        ref = self._task.remote(fn, *args)
        ray = self.ray

        class _Ref:
            def result(self):
                return ray.get(ref)

        return _Ref()

    def close(self):
        if self.owned and self.ray.is_initialized():
            self.ray.shutdown()
            self.owned = False
