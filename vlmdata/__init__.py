"""vlmdata: real, synthetic and mock multimodal payloads for honest VLM throughput benchmarks.

The Python API mirrors the CLI: ``vlmdata.build.build``, ``vlmdata.validate.validate``,
``vlmdata.inspect_dataset.summarize``; ``vlmdata.sample_data_path()`` is the folder of the small real
dataset that ships with the package (what ``vlmdata audit`` measures by default).

This module stays light (no third-party import): the CLI imports it for ``--version``.
"""

import os

__version__ = "0.1.0"
__all__ = ["__version__", "sample_data_path"]

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
        raise FileNotFoundError(f"vlmdata's sample data is missing: {_SAMPLE_DIR} has no manifest.json "
                                "(reinstall vlmdata from a complete source tree or wheel)")
    return _SAMPLE_DIR
