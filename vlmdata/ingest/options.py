"""``BuildOptions``: the one options object of ``build``; ``ShardSpec``: how samples are cut into shards (the part
of them that ``write_dataset`` shares); ``BuildError``, the package's user-facing error.

Both are frozen dataclasses that validate themselves on construction, like ``loaders.options.LoaderOptions``: a
bad value raises ``BuildOptionsError`` (an ``OptionsError`` like every options object's, and a ``BuildError`` as
it always was) naming the parameter. ``BuildOptions.replace(**changes)`` returns a validated copy and refuses
names that are not options. Defaults exist here only: ``vlmdata build`` reads its flags' defaults from
``BuildOptions()``.

``BuildOptions.source`` is a ``sources.SourceRequest`` (how the source is read), held whole and handed whole to
``sources.open_source``; the older flat keywords (``format=``, ``image_root=``, ...) fold into it and read through
as properties, and ``to_dict``/``fingerprint``/``names`` stay flat (a manifest's ``options`` keep their keys, so
resuming a build made before ``source`` existed still matches). A bad source value is a ``BuildOptionsError``.

Depends on ``dataset`` (schema rules, the image pixel limit), ``sources.request`` and ``errors``.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any

from vlmdata.dataset.images import DEFAULT_MAX_IMAGE_PIXELS
from vlmdata.dataset.manifest import MAX_SHARD_SAMPLES
from vlmdata.dataset.schema import safe_label
from vlmdata.dataset.shards import Planner
from vlmdata.errors import OptionsError, VlmdataError
from vlmdata.options_util import at_least, known_names, one_of
from vlmdata.sources.request import HoldsSource, SourceOptionsError, SourceRequest, folded
from vlmdata.sources.request import names as source_names

DEFAULT_PREFIX = "shard"
DEFAULT_MAX_COUNT = 1000  # samples per shard
DEFAULT_MAX_SIZE = 512 * 1024 * 1024  # bytes per shard (build's; write_dataset's default is no limit)
MIN_MAX_SIZE = 4096  # a shard limit below this cannot hold a sample's tar headers
DEFAULT_MIN_WRITTEN_FRACTION = 0.5  # build_shortfall's bar
VERIFY_MODES = ("header", "full")
DEFAULT_ENERGON_TARGET = "vlmdata"  # the class .nv-meta/dataset.yaml names: vlmdata's, or Bridge's directly
ENERGON_TARGETS = ("vlmdata", "bridge")  # the keys of dataset.nvmeta.TARGETS (that module imports sqlite3)
PREFIX_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


class BuildError(VlmdataError):
    """A user-facing problem with the build as a whole (bad options, OUT not empty, ...)."""


class BuildOptionsError(BuildError, OptionsError):
    """A ``BuildOptions`` or ``ShardSpec`` value is out of range or of the wrong type; the message names it."""


def check_prefix(prefix: str) -> None:
    """BuildOptionsError unless ``prefix`` is a plain shard-name prefix (letters, digits, ``_.-``; at most 64)."""
    if not isinstance(prefix, str) or not PREFIX_RE.match(prefix) or ".." in prefix:
        shown = safe_label(prefix, 40) if isinstance(prefix, str) else type(prefix).__name__
        raise BuildOptionsError(
            f"`prefix` {shown!r}: use 1-64 letters, digits, '_', '.' or '-', starting with a letter "
            "or digit (no folders)"
        )


@dataclass(frozen=True)
class ShardSpec:
    """How samples are cut into shards: the file-name prefix (``PREFIX-NNNNNN.tar``), samples per shard at most,
    and bytes per shard at most, tar headers and padding included (None: no limit)."""

    prefix: str
    max_count: int
    max_size: int | None

    def __post_init__(self) -> None:
        check_prefix(self.prefix)
        at_least("max_count", self.max_count, 1, BuildOptionsError)
        if self.max_count > MAX_SHARD_SAMPLES:  # what a manifest may hold (dataset.manifest.check_manifest)
            raise BuildOptionsError(f"`max_count` must be at most {MAX_SHARD_SAMPLES}, got {self.max_count}")
        if self.max_size is not None:
            at_least("max_size", self.max_size, MIN_MAX_SIZE, BuildOptionsError)

    def planner(self, first_shard: int = 0, start_index: int = 0) -> Planner:
        """A planner that cuts shards to this spec, numbering them from ``first_shard``."""
        return Planner(self.prefix, self.max_count, self.max_size, first_shard=first_shard, start_index=start_index)


@dataclass(frozen=True, init=False)
class BuildOptions(HoldsSource):
    """How ``build`` reads its source and cuts its shards.

    prefix, max_count, max_size: the shards (``ShardSpec``; max_size None: no limit).
    max_pixels: re-encode images above this many pixels (None: never re-encode).
    max_image_pixels: skip images above this many pixels as decompression bombs.
    verify: "header" (header + end marker) or "full" (decode every image).
    source: how the source is read (``sources.SourceRequest``: format, image_root, prompt, image_column,
        text_column, allow_outside_root), handed whole to ``sources.open_source``. Those names are also accepted
        as keywords (``BuildOptions(format="llava")``), applied on top of ``source``, and read through as
        properties (``opts.image_root``).
    workers: processes (None: ``ingest.policy`` decides: inline unless worker processes pay).
    fsync: flush each shard to disk before its rename (power-loss durability).
    """

    prefix: str
    max_count: int
    max_size: int | None
    max_pixels: int | None
    max_image_pixels: int
    verify: str
    source: SourceRequest
    workers: int | None
    fsync: bool

    def __init__(
        self,
        prefix: str = DEFAULT_PREFIX,
        max_count: int = DEFAULT_MAX_COUNT,
        max_size: int | None = DEFAULT_MAX_SIZE,
        max_pixels: int | None = None,
        max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS,
        verify: str = "header",
        source: SourceRequest | None = None,
        workers: int | None = None,
        fsync: bool = False,
        **source_options: Any,
    ) -> None:
        given = dict(prefix=prefix, max_count=max_count, max_size=max_size, max_pixels=max_pixels)
        given.update(max_image_pixels=max_image_pixels, verify=verify, workers=workers, fsync=fsync)
        for name, value in given.items():
            object.__setattr__(self, name, value)
        known_names(source_options, names(), "build", BuildOptionsError)
        try:
            object.__setattr__(self, "source", folded(source, **source_options))
        except SourceOptionsError as e:
            raise BuildOptionsError(str(e)) from None
        self._check()

    def _check(self) -> None:
        if not isinstance(self.fsync, bool):
            raise BuildOptionsError(f"`fsync` must be True or False, got {self.fsync!r}")
        ShardSpec(self.prefix, self.max_count, self.max_size)  # validates the three
        if self.max_pixels is not None:
            at_least("max_pixels", self.max_pixels, 1, BuildOptionsError)
        at_least("max_image_pixels", self.max_image_pixels, 1, BuildOptionsError)
        if self.workers is not None:
            at_least("workers", self.workers, 1, BuildOptionsError)
        one_of("verify", self.verify, VERIFY_MODES, BuildOptionsError)

    @property
    def shards(self) -> ShardSpec:
        """The shard part of these options."""
        return ShardSpec(self.prefix, self.max_count, self.max_size)

    def fingerprint(self) -> dict:
        """The options that decide the output bytes (workers and fsync do not)."""
        d = self.to_dict()
        d.pop("workers")
        d.pop("fsync")
        return d

    def replace(self, **changes: Any) -> BuildOptions:
        """A copy with ``changes`` applied (validated); an unknown name raises ``BuildOptionsError`` naming it.
        ``source`` replaces the whole request; a source option (``format``, ...) changes that one field."""
        known_names(changes, (*names(), "source"), "build", BuildOptionsError)
        return dataclasses.replace(self, **changes) if changes else self

    def to_dict(self) -> dict[str, Any]:
        """Every option and its value, flat (the source's options in its place; for manifests and JSON)."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            out.update(value.to_dict() if f.name == "source" else {f.name: value})
        return out


def names() -> tuple[str, ...]:
    """The option names, flat, in declaration order (``source`` stands for its fields: ``format``, ...)."""
    out: list[str] = []
    for f in dataclasses.fields(BuildOptions):
        out.extend(source_names() if f.name == "source" else (f.name,))
    return tuple(out)
