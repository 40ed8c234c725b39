"""Execution engines: where per-chunk ``prepare`` work and per-shard ``write`` work run. One module per engine,
and this registry (``ENGINES``, the names ``vlmdata build --engine`` and ``vlmdata synth --engine`` offer).

- ``local`` (``local_engine.LocalEngine(workers)``): inline for ``workers <= 1``, else a ``multiprocessing``
  pool that raises ``EngineError`` instead of hanging when a worker dies.
- ``ray`` (``ray_engine.RayEngine(address, workers, max_retries)``): Ray tasks on a local Ray instance
  (``address=None``, ``workers`` CPUs) or an existing cluster (``address="auto"`` or ``"ray://host:10001"``);
  failed tasks are retried by Ray (``max_retries``). Ray itself is imported only when the engine is made.

The operations every engine has are ``base.Engine``'s. Because planning (which sample goes in which shard)
happens in the driver in input order and only the pure per-chunk/per-shard work is distributed, the output does
not depend on the engine or on its number of workers. Adding an engine: one module with an ``Engine`` subclass
(its ``name``, ``create``, ``check_available``) and its line in ``REGISTRY``.
"""

from __future__ import annotations

import contextlib

from vlmdata.ingest.engines.base import Engine, EngineError
from vlmdata.ingest.engines.local_engine import LocalEngine
from vlmdata.ingest.engines.ray_engine import RayEngine

REGISTRY: dict[str, type[Engine]] = {cls.name: cls for cls in (LocalEngine, RayEngine)}
ENGINES = tuple(REGISTRY)  # the names, for the CLI's choices
DEFAULT_ENGINE = "local"


def engine_class(name) -> type[Engine]:
    """The engine registered as ``name`` (EngineError naming the choices for any other value)."""
    cls = REGISTRY.get(name) if isinstance(name, str) else None
    if cls is None:
        raise EngineError(f"unknown engine {name!r} (choose from {', '.join(ENGINES)})")
    return cls


def get_engine(
    name: str = DEFAULT_ENGINE, *, workers: int = 1, address: str | None = None, max_retries: int = 3
) -> Engine:
    """A new engine by name.

    Args:
        name: a name in ``ENGINES``.
        workers: processes (local) or CPUs of a local Ray instance.
        address: an existing Ray cluster (ray only).
        max_retries: Ray's retries of a failed task (ray only).
    """
    return engine_class(name).create(workers=workers, address=address, max_retries=max_retries)


def engine_context(engine: Engine | str | None, workers: int, address: str | None = None):
    """A context manager giving an Engine: an Engine passed in is used as is (and not closed); a name (None:
    the default) is made with ``get_engine`` and closed at the end."""
    if isinstance(engine, Engine):
        return contextlib.nullcontext(engine)
    return get_engine(engine or DEFAULT_ENGINE, workers=workers, address=address)


__all__ = [
    "DEFAULT_ENGINE",
    "ENGINES",
    "REGISTRY",
    "Engine",
    "EngineError",
    "LocalEngine",
    "RayEngine",
    "engine_class",
    "engine_context",
    "get_engine",
]
