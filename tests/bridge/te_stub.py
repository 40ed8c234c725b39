"""Stub CUDA-only packages so Megatron Bridge's data and step modules import on a CPU machine.

Megatron Bridge 0.6.2 imports ``transformer_engine.pytorch`` unconditionally at import time
(``megatron/bridge/peft/lora_layers.py``, reached from ``import megatron.bridge`` through
``models/__init__`` -> ``conversion`` -> ``peft``). Transformer Engine only builds against CUDA,
so on a CPU machine nothing under ``megatron.bridge`` can be imported without it.

``install()`` puts a ``sys.meta_path`` finder first that answers every import of the stubbed
top-level names (and their submodules) with a synthetic module. Any attribute of such a module
is a fresh stub class: it can be subclassed, instantiated with any arguments, called, used as a
decorator or context manager, and its own attributes are stub classes again. Nothing in the stub
does real work; it only has to survive *import time*. Code that actually runs a Transformer
Engine layer would silently do nothing, so keep this to data-path tests.

Usage (must run before the first ``import megatron.bridge...``)::

    from tests.bridge.te_stub import install
    install()
    import megatron.bridge.models.qwen_vl.data.collate_fn

The module is standalone (stdlib only) so that it can also be loaded by path, e.g. from a
``conftest.py`` or a subprocess: ``python -c "import runpy; runpy.run_path('tests/bridge/te_stub.py')['install']()"``.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types

# Top-level packages answered with stubs. Only transformer_engine is needed for the modules
# listed in STUBBED_FOR below (verified with megatron-bridge 0.6.2 + megatron-core 0.19.2,
# transformers 5.12.1, megatron-energon 7.4.1, torch 2.13.0 on a CPU-only host).
# ``transformer_engine_torch`` is TE's compiled extension, imported by some mcore code paths.
DEFAULT_STUBBED = ("transformer_engine", "transformer_engine_torch")

# A version high enough for megatron.core.utils.is_te_min_version() checks at import time.
STUB_TE_VERSION = "2.12.0"

# Modules that must import with the stub installed (the test checks exactly these).
STUBBED_FOR = (
    "megatron.bridge.data.builders.mock_vlm_sft",
    "megatron.bridge.data.energon",
    "megatron.bridge.models.qwen_vl.data.collate_fn",
    "megatron.bridge.models.qwen_vl.data.energon",
    "megatron.bridge.training.vlm_step",
    "megatron.bridge.models.qwen_vl.qwen3_vl_step",
    "megatron.bridge.training.config",
)


class _StubMeta(type):
    """Metaclass: attribute access on a stub class yields another stub class."""

    def __getattr__(cls, name: str):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _make_stub_class(f"{cls.__qualname__}.{name}", cls.__module__)

    def __bool__(cls) -> bool:  # ``if te.some_flag:`` -> False
        return False

    def __iter__(cls):
        return iter(())

    def __or__(cls, other):  # ``te.X | None`` in annotations
        return cls

    __ror__ = __or__

    def __getitem__(cls, item):  # ``te.X[int]`` in annotations
        return cls


class _StubBase(metaclass=_StubMeta):
    """Base of every stub class; accepts and ignores everything."""

    def __init__(self, *args, **kwargs):
        pass

    def __call__(self, *args, **kwargs):
        # Used as decorator: @stub(...) def f -> f
        if len(args) == 1 and not kwargs and callable(args[0]):
            return args[0]
        return None

    def __getattr__(self, name: str):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _make_stub_class(f"{type(self).__qualname__}.{name}", type(self).__module__)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def __bool__(self) -> bool:
        return False


def _make_stub_class(qualname: str, module: str) -> type:
    name = qualname.rsplit(".", 1)[-1]
    cls = _StubMeta(name, (_StubBase,), {"__module__": module, "__qualname__": qualname})
    return cls


class _StubModule(types.ModuleType):
    """A module whose every missing public attribute is a stub class."""

    def __getattr__(self, name: str):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        value = _make_stub_class(name, self.__name__)
        setattr(self, name, value)
        return value


class _StubLoader(importlib.abc.Loader):
    def create_module(self, spec):
        module = _StubModule(spec.name)
        module.__file__ = f"<stub {spec.name}>"
        module.__path__ = []  # a package, so submodule imports come back to the finder
        module.__version__ = STUB_TE_VERSION
        module.__vlmdata_stub__ = True
        return module

    def exec_module(self, module):
        pass


class StubFinder(importlib.abc.MetaPathFinder):
    """Answers imports of ``prefixes`` (and their submodules) with stub modules."""

    def __init__(self, prefixes=DEFAULT_STUBBED):
        self.prefixes = tuple(prefixes)
        self._loader = _StubLoader()

    def _matches(self, fullname: str) -> bool:
        return any(fullname == p or fullname.startswith(p + ".") for p in self.prefixes)

    def find_spec(self, fullname, path=None, target=None):
        if not self._matches(fullname):
            return None
        return importlib.machinery.ModuleSpec(fullname, self._loader, is_package=True)


def installed() -> StubFinder | None:
    for finder in sys.meta_path:
        if isinstance(finder, StubFinder) or type(finder).__name__ == "StubFinder":
            return finder
    return None


def install(prefixes=DEFAULT_STUBBED) -> StubFinder:
    """Install the stub finder first on ``sys.meta_path`` (idempotent) and return it.

    A real installed Transformer Engine is shadowed, so call this only in CPU data tests.
    """
    finder = installed()
    if finder is None:
        finder = StubFinder(prefixes)
        sys.meta_path.insert(0, finder)
    return finder


def uninstall() -> None:
    """Remove the finder and every stub module it created."""
    sys.meta_path[:] = [f for f in sys.meta_path if type(f).__name__ != "StubFinder"]
    for name, module in list(sys.modules.items()):
        if is_stub(module):
            del sys.modules[name]


def is_stub(module) -> bool:
    """True for modules created by this stub (reads ``__dict__`` only, so lazy modules stay lazy)."""
    return isinstance(module, types.ModuleType) and bool(vars(module).get("__vlmdata_stub__", False))
