"""The one ``describe`` protocol: what an object says about itself in a report, a manifest or a sample.

Contract of ``describe()``:

- it takes no argument besides ``self`` (whatever it needs is known at construction or kept as state while the
  object runs: ``audit.phases.warmup.Warmup`` keeps its loaders' seconds, set by ``warm_up``);
- it returns a new ``dict[str, Any]`` that ``json.dumps`` writes as it is: str keys; str, int, float, bool and
  None values, lists and dicts of those (no tuples where the reader compares with lists, no numpy or torch
  scalars, no paths);
- it holds what a reader of the report needs to know what the object was (its settings, its sizes, what it
  counted), not what it computed from the data: figures go into records, not descriptions;
- it does not change the object and costs little (it may be called at every configuration switch).

``Describable`` is the protocol as a runtime-checkable ``typing.Protocol``: ``isinstance(x, Describable)``
checks that ``x`` has a ``describe`` attribute (not its signature; ``tests/test_describe.py`` checks every
``describe`` of the package takes ``self`` only and that real instances' output round-trips through JSON).
No imports beyond ``typing``: any layer may use it.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

__all__ = ["Describable"]


@runtime_checkable
class Describable(Protocol):
    """An object that describes itself for a report (module docstring: the contract)."""

    def describe(self) -> dict[str, Any]:
        """What the object is, as a JSON-serialisable dict (module docstring)."""
        ...
