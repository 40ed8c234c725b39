"""What a loader reads: a source -> shard paths, or an object with ``get(i) -> Sample``.

``open_loader_source`` takes a dataset folder, a glob or a ``.tar`` (local or URL; ``resolve_shards``, through
``dataset.resolve.open_dataset``), a list of ``.tar`` paths, a synthetic profile ``.json``, a mock name (the mock
registry, ``synthetic.mocks.MOCKS``) or any object with ``get(i)``; anything else is a ``LoaderSourceError``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from vlmdata.dataset.resolve import open_dataset
from vlmdata.errors import VlmdataError
from vlmdata.synthetic.mocks import MOCKS
from vlmdata.synthetic.source import MockSource, SyntheticSource


class LoaderSourceError(VlmdataError, ValueError):
    """``make_loader`` cannot use its ``source``: a wrong type, nothing there, no shards in it."""


def resolve_shards(source: str) -> list[str]:
    """The shard paths a source names (``vlmdata.dataset.resolve.open_dataset``: a dataset folder in
    manifest order, a folder of ``*.tar``, a glob, one ``.tar``; local or fsspec URLs); LoaderSourceError
    when it names none."""
    if not isinstance(source, (str, os.PathLike)) or not str(os.fspath(source)).strip():
        raise LoaderSourceError(f"`source` must be a dataset path, got {source!r}"[:200])
    ref = open_dataset(source)
    if not ref.shards and ref.kind != "dataset":  # a dataset without shards is an empty epoch, not a bad path
        if ref.kind == "missing":
            raise LoaderSourceError(f"no tar shards found for {ref.shown!r}: nothing is there")
        raise LoaderSourceError(
            f"no tar shards found for {ref.shown!r}: it holds no .tar shards (an image folder or JSON is a build "
            "source: `vlmdata build` it first)"
        )
    return list(ref.shards)


def source_kinds() -> str:
    """What ``make_loader`` takes as a source, for messages (the mocks as registered now)."""
    return (
        "a dataset folder, a glob or a .tar (local or URL), a list of .tar paths, a profile .json, a mock name "
        f"({', '.join(MOCKS)}) or an object with get(i) -> Sample"
    )


def open_loader_source(source, seed: int) -> tuple[str, Any]:
    """(kind, payload): ("shards", paths) or ("source", object with .get(i) -> Sample); LoaderSourceError for
    anything else (``source_kinds()``)."""
    if hasattr(source, "get") and callable(source.get) and not isinstance(source, Mapping):
        return "source", source
    if isinstance(source, (list, tuple)):
        if not source or not all(isinstance(p, (str, os.PathLike)) and str(os.fspath(p)).strip() for p in source):
            raise LoaderSourceError(f"`source` as a list must hold .tar paths, got {list(source)!r}"[:200])
        return "shards", [str(os.fspath(p)) for p in source]
    if not isinstance(source, (str, os.PathLike)) or isinstance(os.fspath(source), bytes):
        raise LoaderSourceError(f"`source` must be {source_kinds()}; got {type(source).__name__}")
    source = str(os.fspath(source))
    if not source.strip():
        raise LoaderSourceError(f"`source` is an empty path; give {source_kinds()}")
    if source in MOCKS:
        return "source", MockSource(source, seed)
    if source.endswith(".json") and os.path.isfile(source):
        return "source", SyntheticSource(source, seed)
    return "shards", resolve_shards(source)
