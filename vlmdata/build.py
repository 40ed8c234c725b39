"""The old import paths of ``vlmdata.ingest`` (``vlmdata/build/`` until issue 21: a folder named ``build`` is taken
for build output by tools and by pytest). Kept so that code written against them, and the paths the docs named
(``vlmdata.build.builder``, ``vlmdata.build.engines``, ``vlmdata.build.policy``), keep working:

- ``from vlmdata.build import build, BuildOptions, BuildError``;
- ``vlmdata.build.builder``: the ``vlmdata.ingest`` package (``build``, ``BuildOptions``, ``write_dataset``,
  ``build_shortfall``, ``run_build_pipeline``, ...); ``vlmdata.build.engines``, ``vlmdata.build.engines.ray_engine``
  and ``vlmdata.build.policy``: the same modules under ``vlmdata.ingest``.

``vlmdata.build`` is also ``vlmdata``'s re-exported ``build()`` (``from vlmdata import build``): once this module is
imported Python makes it the attribute ``vlmdata.build``, so it is callable and calling it calls ``build()``.
"""

import sys
import types

from vlmdata import ingest
from vlmdata.ingest import BuildError, BuildOptions, build, engines, policy
from vlmdata.ingest.engines import ray_engine

builder = ingest
ALIASES = {
    f"{__name__}.builder": ingest,
    f"{__name__}.engines": engines,
    f"{__name__}.engines.ray_engine": ray_engine,
    f"{__name__}.policy": policy,
}
for _name, _module in ALIASES.items():
    sys.modules.setdefault(_name, _module)

__all__ = ["BuildError", "BuildOptions", "build"]


class _CallableModule(types.ModuleType):
    def __call__(self, *args, **kwargs):
        return build(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
