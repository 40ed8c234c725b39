"""Real inputs -> a dataset: ``builder`` (``build()``, ``BuildOptions``, prepare one input, pack on an
engine, resume, remote outputs, the shortfall check) and ``engines`` (local process pool, Ray)."""

import sys
import types

from vlmdata.build.builder import BuildError, BuildOptions, build

__all__ = ["BuildError", "BuildOptions", "build"]


class _CallableModule(types.ModuleType):
    """``vlmdata.build`` is this package and ``vlmdata``'s re-exported ``build()`` alike: once the package is
    imported Python makes it the attribute ``vlmdata.build``, so calling it calls ``build()``."""

    def __call__(self, *args, **kwargs):
        return build(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
