"""vlmdata: real, synthetic and mock multimodal payloads for honest VLM throughput benchmarks.

The public API mirrors the CLI and is re-exported here (``from vlmdata import build, make_loader``):
``build`` / ``BuildOptions`` (vlmdata build), ``validate`` (vlmdata validate), ``profile_dataset``
(vlmdata profile), ``make_loader`` / ``LoaderOptions`` (Bridge-ready batches), ``load_hf`` (Hugging Face
datasets), ``VlmdataError`` (the base of every error vlmdata raises for a user's input);
``sample_data_path()`` is the folder of the small real dataset that ships with the package (what
``vlmdata audit`` measures by default).

The package's layout is its data flow (docs/architecture.md): ``qwen`` -> ``storage`` -> ``dataset`` ->
``sources`` | ``interop`` -> ``ingest`` | ``profile`` -> ``synthetic`` -> ``loaders`` -> ``audit`` |
``baselines`` -> ``benchmarks`` -> ``cli``; imports point down only (tests/test_architecture.py).

This module stays light (no third-party import): the CLI imports it for ``--version``; the re-exports
are resolved on first use (PEP 562 ``__getattr__``).
"""

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # for type checkers and IDEs; at run time __getattr__ below imports on first use
    from vlmdata.dataset.validate import validate
    from vlmdata.errors import VlmdataError
    from vlmdata.ingest.builder import build
    from vlmdata.ingest.options import BuildOptions
    from vlmdata.interop.hf import load_hf
    from vlmdata.loaders.api import make_loader
    from vlmdata.loaders.options import LoaderOptions
    from vlmdata.profile.measure import profile_dataset

__version__ = "0.1.0"
__all__ = [
    "BuildOptions",
    "LoaderOptions",
    "VlmdataError",
    "__version__",
    "build",
    "load_hf",
    "make_loader",
    "profile_dataset",
    "sample_data_path",
    "validate",
]

# public name -> module that defines it (imported on first use: torch/transformers stay out of --help)
_EXPORTS = {
    "build": "vlmdata.ingest.builder",
    "BuildOptions": "vlmdata.ingest.options",
    "validate": "vlmdata.dataset.validate",
    "profile_dataset": "vlmdata.profile.measure",
    "make_loader": "vlmdata.loaders.api",
    "LoaderOptions": "vlmdata.loaders.options",
    "load_hf": "vlmdata.interop.hf",
    "VlmdataError": "vlmdata.errors",
}


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'vlmdata' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


_SAMPLE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sample_shards")


def sample_data_path() -> str:
    """The folder of the sample dataset shipped with vlmdata (a vlmdata build: shards, manifest.json,
    .nv-meta/), usable from any directory.

    In a source checkout it is the repository's ``sample_shards/`` (``vlmdata/sample_shards`` is a link
    to it); in a wheel install it is package data inside the installed ``vlmdata`` package.

    Returns:
        The absolute path of the folder.

    Raises:
        FileNotFoundError: the package was installed without its data (e.g. a wheel built from a tree
            without ``sample_shards/``).
    """
    if not os.path.isfile(os.path.join(_SAMPLE_DIR, "manifest.json")):
        raise FileNotFoundError(
            f"vlmdata's sample data is missing: {_SAMPLE_DIR} has no manifest.json "
            "(reinstall vlmdata from a complete source tree or wheel)"
        )
    return _SAMPLE_DIR
