"""Real inputs -> a dataset. One module per job:

- ``options``: ``BuildOptions`` (frozen, self-validating), ``ShardSpec``, ``BuildError``, the defaults;
- ``prepare``: one input -> an entry to pack, or a skip with its reason;
- ``packing``: entries -> shards in input order, the work on an engine (``engines/``: a registry of local
  processes and Ray, ``policy``: how many processes pay);
- ``output`` (the folder rules, the lock), ``resume`` (an interrupted build's state), ``remote`` (staging and
  upload), and ``writer``: ``DatasetWriter``, the one write path that ``build``, ``write_dataset`` and the
  synthetic twin all use;
- ``builder``: ``build()``; ``samples``: ``write_dataset()`` (in-memory samples); ``shortfall``: whether a
  finished build wrote enough.

``vlmdata.build`` (a module) is this package's old import path, kept for code written against it.
"""

from vlmdata.ingest.builder import build
from vlmdata.ingest.options import DEFAULT_MIN_WRITTEN_FRACTION, BuildError, BuildOptions, BuildOptionsError, ShardSpec
from vlmdata.ingest.output import STATE_DIR
from vlmdata.ingest.packing import run_build_pipeline
from vlmdata.ingest.samples import write_dataset
from vlmdata.ingest.shortfall import build_shortfall
from vlmdata.ingest.writer import DatasetWriter

__all__ = [
    "DEFAULT_MIN_WRITTEN_FRACTION",
    "STATE_DIR",
    "BuildError",
    "BuildOptions",
    "BuildOptionsError",
    "DatasetWriter",
    "ShardSpec",
    "build",
    "build_shortfall",
    "run_build_pipeline",
    "write_dataset",
]
