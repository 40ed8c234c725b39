"""``LoaderOptions``: the one options object of the loader, threaded unchanged through ``make_loader``,
the Megatron Bridge provider (``vlmdata.loaders.bridge``), the audit and the benchmarks.

A frozen dataclass that validates itself on construction: a bad value raises ``OptionsError`` naming
the parameter. ``replace(**changes)`` returns a copy with some fields changed and refuses names that are
not options (with the closest match), so a typo never passes silently. Defaults exist here only.

Depends on ``qwen.spec`` (pixel limits, model names) and ``errors``.
"""

from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass
from typing import Any

from vlmdata.errors import OptionsError
from vlmdata.options_util import at_least as _at_least
from vlmdata.qwen.spec import BRIDGE_MAX_PIXELS, BRIDGE_MIN_PIXELS, SPECS

IMAGE_MODES = ("decode", "shapes", "drop")
RESIZE_MODES = ("bridge", "hf")
ON_ERROR = ("skip", "raise")
IMAGE_DECODERS = ("nvjpeg", "pillow")  # with image_device: who decodes a JPEG (loaders.device_images)
BOOL_FIELDS = (
    "pad_to_max_length",
    "packing",
    "shuffle",
    "exact_images",
    "bridge_visual_inputs",
    "drop_last",
    "wrap_epochs",
    "pin_memory",
)


BOUNDS = {  # upper bounds of the integer options, checked before anything is sized from them
    "micro_batch_size": 4096,
    "seq_length": 1 << 20,  # tokens per row (a row of 2**63 was allocated)
    "pad_to_multiple_of": 1 << 20,
    "packing_pad_to_multiple_of": 1 << 20,
    "shuffle_buffer": 1 << 24,
    "epoch_samples": 1 << 40,
    "prefetch_factor": 1024,
    "min_pixels": 1 << 30,
    "max_pixels": 1 << 30,
    "num_workers": 1024,
    "seed": (1 << 63) - 1,  # torch's generators take 64-bit seeds
    "world_size": 1 << 20,
    "num_epochs": 1 << 30,
}


@dataclass(frozen=True)
class LoaderOptions:
    """How samples become Megatron Bridge Qwen-VL batches.

    model: "qwen2-vl" | "qwen2.5-vl" | "qwen3-vl" (patch 14/14/16; MoE variants use the same processor).
    seq_length, pad_to_max_length, pad_to_multiple_of, packing, packing_pad_to_multiple_of: as Bridge's
        ``qwen2_5_collate_fn`` (sequence_length, pad_to_max_length, pad_to_multiple_of,
        enable_in_batch_packing, in_batch_packing_pad_to_multiple_of); seq_length None: no limit.
    micro_batch_size: samples per batch; drop_last: drop a short last batch of an epoch.
    wrap_epochs: complete a batch that an epoch leaves short with the next epoch's first samples (Megatron's
        datasets wrap the same way), so that every batch holds ``micro_batch_size`` samples; only the last batch
        of a finite run (``num_epochs``) can still be short (or dropped, ``drop_last``). The audit reads every
        source endlessly with it on.
    num_workers, prefetch_factor, pin_memory: the torch DataLoader's.
    seed, shuffle, shuffle_buffer: the shard-order and in-buffer shuffle (deterministic per seed and epoch).
    rank, world_size: default torch.distributed's (else RANK / WORLD_SIZE env, else 0 / 1); pass the
        data-parallel rank and size when TP/PP/CP ranks exist.
    min_pixels, max_pixels: the image processor's limits (Bridge's defaults).
    on_error: "skip" (count + log with shard and key; ``loader.stats``) or "raise".
    num_epochs: epochs to yield (None: endless); epoch_samples: samples per epoch of a synthetic or mock source.
    resize: "bridge" (qwen-vl-utils pre-resize + HF, Bridge's collate) or "hf"; exact_images: the bit-exact
        Pillow path instead of the fast one (``vlmdata.qwen.vision``).
    chat_template: a Jinja chat template instead of the tokenizer's.
    bridge_visual_inputs: batches carry Bridge's ``GenericVisualInputs`` (where Bridge is importable).
    images: "decode", "shapes" (no decode: exact shapes and token ids, zero pixels; for planning and warm-up)
        or "drop" (the image-free view of the source).
    image_device: e.g. "cuda": resize, normalise and patchify on that device in the training process
        (``vlmdata.loaders.device_images``); only with images="decode".
    image_decoder: with ``image_device``, who decodes a JPEG: "nvjpeg" (the device, batched; needs
        torchvision) or "pillow" (the loader's workers; they hand over uint8 RGB).
    """

    model: str = "qwen3-vl"
    seq_length: int | None = 4096
    micro_batch_size: int = 1
    pad_to_max_length: bool = False
    pad_to_multiple_of: int = 128
    packing: bool = False
    packing_pad_to_multiple_of: int = 1
    num_workers: int = 0
    seed: int = 0
    rank: int | None = None
    world_size: int | None = None
    shuffle: bool = True
    shuffle_buffer: int = 256
    min_pixels: int = BRIDGE_MIN_PIXELS
    max_pixels: int = BRIDGE_MAX_PIXELS
    on_error: str = "skip"
    num_epochs: int | None = 1
    epoch_samples: int = 10_000
    resize: str = "bridge"
    exact_images: bool = False
    chat_template: str | None = None
    bridge_visual_inputs: bool = False
    drop_last: bool = False
    wrap_epochs: bool = False
    pin_memory: bool = False
    prefetch_factor: int = 2
    images: str = "decode"
    image_device: str | None = None
    image_decoder: str = "nvjpeg"

    def __post_init__(self) -> None:
        _choice("model", self.model, tuple(SPECS))
        _choice("on_error", self.on_error, ON_ERROR)
        _choice("resize", self.resize, RESIZE_MODES)
        _choice("images", self.images, IMAGE_MODES)
        if self.image_device is not None and self.images != "decode":
            raise OptionsError(f"`image_device` works with `images`='decode' only, got images={self.images!r}")
        _choice("image_decoder", self.image_decoder, IMAGE_DECODERS)
        if self.image_decoder != "nvjpeg" and self.image_device is None:
            raise OptionsError(f"`image_decoder`={self.image_decoder!r} needs an `image_device` (e.g. 'cuda')")
        for name in BOOL_FIELDS:
            if not isinstance(getattr(self, name), bool):
                raise OptionsError(f"`{name}` must be True or False, got {getattr(self, name)!r}")
        for name in ("chat_template", "image_device"):
            v = getattr(self, name)
            if v is not None and not isinstance(v, str):
                raise OptionsError(f"`{name}` must be a string or None, got {type(v).__name__}")
        for name in (
            "micro_batch_size",
            "pad_to_multiple_of",
            "packing_pad_to_multiple_of",
            "shuffle_buffer",
            "epoch_samples",
            "prefetch_factor",
            "min_pixels",
            "max_pixels",
        ):
            _at_least(name, getattr(self, name), 1, high=BOUNDS[name])
        _at_least("num_workers", self.num_workers, 0, high=BOUNDS["num_workers"])
        _at_least("seed", self.seed, 0, high=BOUNDS["seed"])
        for name in ("rank", "world_size"):
            if getattr(self, name) is not None:
                _at_least(name, getattr(self, name), 0 if name == "rank" else 1, high=BOUNDS["world_size"])
        if self.seq_length is not None:
            _at_least("seq_length", self.seq_length, 1, high=BOUNDS["seq_length"])
        if self.num_epochs is not None:
            _at_least("num_epochs", self.num_epochs, 1, high=BOUNDS["num_epochs"])
        if self.max_pixels < self.min_pixels:
            raise OptionsError(f"`max_pixels` ({self.max_pixels}) is below `min_pixels` ({self.min_pixels})")
        if self.rank is not None and self.world_size is not None and not 0 <= self.rank < self.world_size:
            raise OptionsError(f"`rank` {self.rank} is outside a world of {self.world_size}")

    def replace(self, **changes: Any) -> LoaderOptions:
        """A copy with ``changes`` applied (validated); an unknown name raises ``OptionsError`` naming it."""
        unknown = sorted(set(changes) - set(names()))
        if unknown:
            hints = [
                f"{u!r}" + (f" (did you mean {m[0]!r}?)" if (m := difflib.get_close_matches(u, names(), 1)) else "")
                for u in unknown
            ]
            raise OptionsError(f"unknown loader option {', '.join(hints)}; options: {', '.join(names())}")
        return dataclasses.replace(self, **changes) if changes else self

    def to_dict(self) -> dict[str, Any]:
        """Every option and its value (for reports and JSON)."""
        return dataclasses.asdict(self)


def names() -> tuple[str, ...]:
    """The option names, in declaration order."""
    return tuple(f.name for f in dataclasses.fields(LoaderOptions))


def _choice(name: str, value, allowed: tuple) -> None:
    if not isinstance(value, str) or value not in allowed:
        raise OptionsError(f"`{name}` must be one of {', '.join(map(repr, allowed))}, got {value!r}")
