"""What every engine is: ``Engine`` (the two operations and the context-manager protocol) and ``EngineError``.

- ``engine.imap(fn, args_iter, window)``: ``fn(args)`` for each element, results yielded **in input order**,
  with at most ``window`` calls in flight (``args_iter`` is consumed lazily, so memory stays bounded however
  long the input is).
- ``engine.submit(fn, *args)``: one call, returns a handle with ``.result()``.
- ``engine.parallelism``: how many calls can run at once.

An engine class also says how it is made from the build's arguments (``create``) and whether it can run here
at all (``check_available``, called before an output folder is touched). The registry of engines is
``vlmdata.ingest.engines``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from vlmdata.errors import VlmdataError


class EngineError(VlmdataError):
    """The engine cannot be used (not installed, cannot connect, a worker died)."""


class Engine:
    name = "engine"
    parallelism = 1

    @classmethod
    def create(cls, *, workers: int, address: str | None, max_retries: int) -> Engine:
        """The engine for a build's ``workers`` / ``address`` / ``max_retries`` (EngineError for ones it cannot use)."""
        raise NotImplementedError

    @classmethod
    def check_available(cls) -> None:
        """EngineError when the engine cannot run here (a missing optional dependency)."""

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
