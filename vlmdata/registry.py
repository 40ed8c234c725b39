"""Named variants of one family, and objects named by a dotted path that are imported on first use.

``Registry`` is the one home of a family of variants (input formats, mocks, audit sources, ...): ``register``
adds an entry under its name, ``registry[name]`` returns it (or the family's ``VlmdataError`` subclass naming the
parameter and listing the choices), iterating yields the names in registration order, ``in`` asks for one.
argparse takes a registry as ``choices``, so a command line offers exactly what is registered: adding a variant
touches the module that registers it (and its test), never the CLI. A registry may also show the entries of
another family (``derived``: a function giving ``(name, entry)`` pairs, read at every look-up), so that a variant
registered there is picked up here too (every mock is an audit source).

``load("package.module:attr")`` imports ``package.module`` and returns ``attr``; an entry names its implementation
that way so that a registry stays as light as its names (``vlmdata --help`` and each command's ``--help`` import
no numpy, torch or datasets: bench/help_time.py). ``lazy_exports`` is the ``__getattr__`` (PEP 562) of a module
that hands on names defined in heavier modules, resolved on first use.

Depends on ``vlmdata.errors`` only.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable, Generic, Iterable, Iterator, TypeVar

from vlmdata.errors import OptionsError, VlmdataError

E = TypeVar("E")


def load(target: str | Any) -> Any:
    """The object ``target`` names (``"package.module:attr"``), imported now; any other value is returned as is."""
    if not isinstance(target, str):
        return target
    module, _, attr = target.partition(":")
    obj = importlib.import_module(module)
    return getattr(obj, attr) if attr else obj


def lazy_exports(owner: str, exports: dict[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` that resolves ``exports`` (public name -> defining module) on first use.

    Args:
        owner: the module's own name (for the AttributeError of any other name).
        exports: public name -> the module that defines it under that name.
    """

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {owner!r} has no attribute {name!r}")
        return getattr(importlib.import_module(module), name)

    return __getattr__


class Registry(Generic[E]):
    """The variants of one family, by name, in registration order (module docstring).

    Args:
        family: what one variant is called in messages ("format", "mock", "source").
        param: the parameter that takes a variant's name (shown backquoted, the house style of messages).
        error: the ``VlmdataError`` subclass an unknown name raises.
        derived: ``(name, entry)`` pairs of another family shown here too, after this registry's own entries.
    """

    def __init__(
        self,
        family: str,
        param: str,
        error: type[VlmdataError] = OptionsError,
        derived: Callable[[], Iterable[tuple[str, E]]] | None = None,
    ):
        self.family, self.param, self.error = family, param, error
        self._own: dict[str, E] = {}
        self._derived = derived

    def register(self, name: str, entry: E, *, replace: bool = False) -> E:
        """Add ``entry`` under ``name``; OptionsError when the name is taken (unless ``replace``)."""
        if not isinstance(name, str) or not name or name != name.strip() or "," in name:
            raise OptionsError(f"a {self.family} name must be a non-empty word without commas, got {name!r}")
        if name in self and not replace:
            raise OptionsError(f"{self.family} {name!r} is registered already")
        self._own[name] = entry
        return entry

    def unregister(self, name: str) -> None:
        """Remove an entry this registry owns (a no-op for an unknown name)."""
        self._own.pop(name, None)

    def _all(self) -> dict[str, E]:
        entries = dict(self._own)
        for name, entry in self._derived() if self._derived else ():
            entries.setdefault(name, entry)
        return entries

    def __getitem__(self, name: str) -> E:
        entries = self._all()
        if not isinstance(name, str) or name not in entries:
            raise self.error(f"`{self.param}`: unknown {self.family} {name!r} (choose from {', '.join(entries)})")
        return entries[name]

    def get(self, name: str, default: E | None = None) -> E | None:
        return self._all().get(name, default) if isinstance(name, str) else default

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self._all()

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._all()))

    def __len__(self) -> int:
        return len(self._all())

    def names(self, where: Callable[[E], bool] | None = None) -> tuple[str, ...]:
        """The registered names (those whose entry satisfies ``where``, when given), in registration order."""
        return tuple(n for n, e in self._all().items() if where is None or where(e))

    def entries(self) -> list[E]:
        return list(self._all().values())

    def __repr__(self) -> str:
        return f"Registry({self.family}: {', '.join(self)})"
