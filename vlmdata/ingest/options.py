"""``BuildOptions``: the one options object of ``build``; ``ShardSpec``: how samples are cut into shards (the part
of them that ``write_dataset`` shares); ``BuildError``, the package's user-facing error.

Both are frozen dataclasses that validate themselves on construction, like ``loaders.options.LoaderOptions``: a
bad value raises ``BuildOptionsError`` (an ``OptionsError`` like every options object's, and a ``BuildError`` as
it always was) naming the parameter. ``BuildOptions.replace(**changes)`` returns a validated copy and refuses
names that are not options. Defaults exist here only: ``vlmdata build`` reads its flags' defaults from
``BuildOptions()``.

Depends on ``dataset`` (schema rules, the image pixel limit), ``sources`` (the default prompt) and ``errors``.
"""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass
from typing import Any

from vlmdata.dataset.images import DEFAULT_MAX_IMAGE_PIXELS
from vlmdata.dataset.manifest import MAX_SHARD_SAMPLES
from vlmdata.dataset.schema import conversation_problem, safe_label
from vlmdata.dataset.shards import Planner
from vlmdata.errors import OptionsError, VlmdataError
from vlmdata.options_util import at_least, known_names, one_of
from vlmdata.sources import DEFAULT_PROMPT

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


@dataclass(frozen=True)
class BuildOptions:
    """How ``build`` reads its source and cuts its shards.

    prefix, max_count, max_size: the shards (``ShardSpec``; max_size None: no limit).
    max_pixels: re-encode images above this many pixels (None: never re-encode).
    max_image_pixels: skip images above this many pixels as decompression bombs.
    verify: "header" (header + end marker) or "full" (decode every image).
    format, image_root, prompt, image_column, text_column, allow_outside_root: how the source is read
        (``sources.open_source``; format None: detected).
    workers: processes (None: ``ingest.policy`` decides: inline unless worker processes pay).
    fsync: flush each shard to disk before its rename (power-loss durability).
    """

    prefix: str = DEFAULT_PREFIX
    max_count: int = DEFAULT_MAX_COUNT
    max_size: int | None = DEFAULT_MAX_SIZE
    max_pixels: int | None = None
    max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS
    verify: str = "header"
    format: str | None = None
    image_root: str | None = None
    prompt: str = DEFAULT_PROMPT
    image_column: str | None = None
    text_column: str | None = None
    workers: int | None = None
    fsync: bool = False
    allow_outside_root: bool = False

    def __post_init__(self) -> None:
        for name in ("format", "image_root", "image_column", "text_column"):
            v = getattr(self, name)
            if isinstance(v, os.PathLike) and name == "image_root":  # a Path is a path: kept as its text (a
                v = os.fspath(v)  # PosixPath image_root was a TypeError deep in the build, a column one in JSON)
                object.__setattr__(self, name, v)
            if v is not None and not isinstance(v, str):
                raise BuildOptionsError(f"`{name}` must be a string or None, got {type(v).__name__}")
        for name in ("fsync", "allow_outside_root"):
            if not isinstance(getattr(self, name), bool):
                raise BuildOptionsError(f"`{name}` must be True or False, got {getattr(self, name)!r}")
        ShardSpec(self.prefix, self.max_count, self.max_size)  # validates the three
        if self.max_pixels is not None:
            at_least("max_pixels", self.max_pixels, 1, BuildOptionsError)
        at_least("max_image_pixels", self.max_image_pixels, 1, BuildOptionsError)
        if self.workers is not None:
            at_least("workers", self.workers, 1, BuildOptionsError)
        one_of("verify", self.verify, VERIFY_MODES, BuildOptionsError)
        if not isinstance(self.prompt, str) or conversation_problem(
            [
                {"role": "user", "content": [{"type": "text", "text": self.prompt}]},
                {"role": "assistant", "content": [{"type": "text", "text": "x"}]},
            ]
        ):
            raise BuildOptionsError("`prompt` must be plain text (no control tokens such as <|im_end|>)")

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
        """A copy with ``changes`` applied (validated); an unknown name raises ``BuildOptionsError`` naming it."""
        known_names(changes, names(), "build", BuildOptionsError)
        return dataclasses.replace(self, **changes) if changes else self

    def to_dict(self) -> dict[str, Any]:
        """Every option and its value (for manifests and JSON)."""
        return dataclasses.asdict(self)


def names() -> tuple[str, ...]:
    """The option names, in declaration order."""
    return tuple(f.name for f in dataclasses.fields(BuildOptions))
