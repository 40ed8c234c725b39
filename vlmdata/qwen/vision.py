"""Image bytes -> (pixel_values, grid_thw) as Megatron Bridge's Qwen-VL collate produces them.

Bridge's ``qwen2_5_collate_fn`` calls ``qwen_vl_utils.process_vision_info(conversation)`` before the HF
processor. qwen-vl-utils 0.0.14 ``fetch_image`` (default ``image_patch_size=14``, so factor 28 even for
Qwen3-VL) converts to RGB (RGBA pasted on white, anything else ``convert("RGB")``) and *resizes* the image
with Pillow bicubic to its own ``smart_resize(h, w, 28, min 4*28*28, max 16384*28*28)`` (multiples of 28;
its variant clamps the rounded sides to at least 28). The HF processor then smart-resizes that image
again with the model factor and Bridge's min/max pixels. So the grid Bridge trains on is
``hf_smart_resize(qvu_smart_resize(H, W))``, which differs from ``hf_smart_resize(H, W)`` for some sizes.

``resize="bridge"`` (default) reproduces that: ``exact=True`` runs the two Pillow resizes and the HF
float math (bit-identical to Bridge + the HF PIL processor); ``exact=False`` (fast) decodes a JPEG at
reduced DCT scale when the final size is at most half the source and resizes once, on torch's bicubic
antialiased uint8 kernel, straight to the final size: identical grid and token counts, pixel values
within ``vlmdata.qwen.image.draft_tolerance`` (tests/loaders/test_loader_batches.py enforces it).
``resize="hf"`` skips the qwen-vl-utils step (what the HF processor alone, or a pipeline without
qwen-vl-utils, gives): it is ``vlmdata.qwen.image.preprocess_image``.
"""

from __future__ import annotations

import io
import math
import warnings

import numpy as np
from PIL import Image

from vlmdata.qwen.image import patchify, preprocess_image, preprocess_pil, resized_array
from vlmdata.qwen.spec import BRIDGE_MAX_PIXELS, BRIDGE_MIN_PIXELS, QwenSpec, get_spec, smart_resize

QVU_FACTOR = 28  # qwen-vl-utils image_patch_size=14 default * SPATIAL_MERGE_SIZE 2
QVU_MIN_PIXELS = 4 * QVU_FACTOR**2
QVU_MAX_PIXELS = 16384 * QVU_FACTOR**2


def qvu_smart_resize(
    height: int,
    width: int,
    factor: int = QVU_FACTOR,
    min_pixels: int = QVU_MIN_PIXELS,
    max_pixels: int = QVU_MAX_PIXELS,
) -> tuple[int, int]:
    """qwen-vl-utils 0.0.14 ``smart_resize`` (its own variant, not transformers')."""
    if max(height, width) / min(height, width) > 200:
        raise ValueError(
            f"absolute aspect ratio must be smaller than 200, got {max(height, width) / min(height, width)}"
        )
    h_bar = max(factor, round(height / factor) * factor)
    w_bar = max(factor, round(width / factor) * factor)
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = math.floor(height / beta / factor) * factor
        w_bar = math.floor(width / beta / factor) * factor
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def bridge_target_size(
    height: int,
    width: int,
    spec: str | QwenSpec = "qwen3-vl",
    min_pixels: int = BRIDGE_MIN_PIXELS,
    max_pixels: int = BRIDGE_MAX_PIXELS,
) -> tuple[int, int]:
    """(h, w) the HF processor resizes to after qwen-vl-utils' pre-resize, for an H x W source."""
    s = get_spec(spec)
    qh, qw = qvu_smart_resize(height, width)
    return smart_resize(qh, qw, s.factor, min_pixels, max_pixels)


def qvu_to_rgb(img: Image.Image) -> Image.Image:
    """qwen-vl-utils ``to_rgb``: RGBA pasted on white by its alpha, anything else ``convert("RGB")``
    (an RGB image is returned as it is: Pillow's convert would only copy it)."""
    if img.mode == "RGB":
        return img
    if img.mode == "RGBA":
        bg = Image.new("RGB", img.size, (255, 255, 255))
        bg.paste(img, mask=img.split()[3])
        return bg
    return img.convert("RGB")


def qvu_fetch_image(img: Image.Image) -> Image.Image:
    """qwen-vl-utils ``fetch_image`` for a PIL image part: RGB, then Pillow resize (bicubic) to its grid."""
    img = qvu_to_rgb(img)
    w, h = img.size
    qh, qw = qvu_smart_resize(h, w)
    return img.resize((qw, qh))


def _resize_torch_to(a: np.ndarray, size_hw: tuple[int, int], scale=None) -> np.ndarray:
    import torch
    import torch.nn.functional as F

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        x = torch.from_numpy(a).permute(2, 0, 1)[None]
    th, tw = size_hw
    if scale is None:
        y = F.interpolate(x, size=(th, tw), mode="bicubic", antialias=True)
    else:
        y = F.interpolate(x, scale_factor=scale, mode="bicubic", antialias=True, recompute_scale_factor=False)
        y = y[:, :, :th, :tw]
    return np.ascontiguousarray(y[0].numpy())


def preprocess_bridge(
    data: bytes | Image.Image,
    spec: str | QwenSpec = "qwen3-vl",
    min_pixels: int = BRIDGE_MIN_PIXELS,
    max_pixels: int = BRIDGE_MAX_PIXELS,
    exact: bool = False,
) -> tuple[np.ndarray, tuple[int, int, int]]:
    """One image (encoded bytes or PIL) -> (pixel_values float32 [gh*gw, 3*T*p*p], (1, gh, gw)) as Bridge's
    collate (qwen-vl-utils pre-resize + HF processor) produces them. See the module docstring."""
    s = get_spec(spec)
    a, chw = bridge_resized(data, s, min_pixels, max_pixels, exact)
    h, w = a.shape[1:] if chw else a.shape[:2]
    return patchify(a, s, chw), (1, h // s.patch_size, w // s.patch_size)


def bridge_resized(
    data: bytes | Image.Image, spec: QwenSpec, min_pixels: int, max_pixels: int, exact: bool
) -> tuple[np.ndarray, bool]:
    """(uint8 image at Bridge's final size, chw): what ``preprocess_bridge`` patchifies; (H, W, 3), or
    (3, H, W) when ``chw``."""
    s = spec
    fresh = isinstance(data, (bytes, bytearray, memoryview))
    img = Image.open(io.BytesIO(data)) if fresh else data
    if exact:
        return resized_array(qvu_fetch_image(img), s, min_pixels, max_pixels, False, "pil")
    w, h = img.size
    th, tw = target_size(h, w, s, min_pixels, max_pixels, "bridge")
    scale = draft_scale(img, th, tw) if fresh else None
    img = qvu_to_rgb(img)
    a = np.asarray(img)
    if (a.shape[0], a.shape[1]) == (th, tw) and scale is None:
        return a, False
    return _resize_torch_to(a, (th, tw), scale), True


def draft_scale(img: Image.Image, th: int, tw: int) -> tuple[float, float] | None:
    """Let a JPEG opened but not yet loaded decode at reduced DCT scale (``Image.draft``, in place; Pillow
    only reduces while the result stays >= (tw, th), i.e. when the target is at most half the source).
    Returns the (sy, sx) that maps the source region onto the target exactly when the reduced image covers
    slightly more than that region (resize with it, then keep the top-left (th, tw)); None when a plain
    resize to (th, tw) is exact (no reduction, or a reduced image that is exactly the source region)."""
    if img.format != "JPEG":
        return None
    size = img.size
    res = img.draft("RGB", (tw, th))
    if res is None or img.size == size:
        return None
    box = res[1]
    return None if (box[2], box[3]) == img.size else (th / box[3], tw / box[2])


def target_size(
    height: int, width: int, spec: str | QwenSpec, min_pixels: int, max_pixels: int, resize: str = "bridge"
) -> tuple[int, int]:
    """(h, w) in pixels that an ``height`` x ``width`` source is resized to under the resize policy
    (the one place the grid is decided: the decoding paths and ``preprocess_shape`` agree by construction)."""
    s = get_spec(spec)
    if resize == "bridge":
        return bridge_target_size(height, width, s, min_pixels, max_pixels)
    if resize == "hf":
        return smart_resize(height, width, s.factor, min_pixels, max_pixels)
    raise ValueError(f"resize must be 'bridge' or 'hf', got {resize!r}")


def preprocess_shape(
    data, spec, min_pixels, max_pixels, resize: str = "bridge"
) -> tuple[np.ndarray, tuple[int, int, int]]:
    """Like ``preprocess_any`` but without decoding: the grid from the image header (or a PIL image's
    size) and all-zero pixel rows of the right shape (a zero-stride view: no memory). For planning and warm-up batches, whose shapes
    and token ids equal the real batches' and whose pixels do not matter."""
    s = get_spec(spec)
    if isinstance(data, Image.Image):
        w, h = data.size
    else:
        with Image.open(io.BytesIO(data)) as img:  # reads the header only
            w, h = img.size
    th, tw = target_size(h, w, s, min_pixels, max_pixels, resize)
    gh, gw = th // s.patch_size, tw // s.patch_size
    return np.broadcast_to(np.float32(0), (gh * gw, s.patch_dim)), (1, gh, gw)  # no memory behind it


def preprocess_any(data, spec, min_pixels, max_pixels, resize: str = "bridge", exact: bool = False):
    """Dispatch on the resize policy: "bridge" (qwen-vl-utils + HF, Bridge's collate) or "hf" (HF only)."""
    if resize == "bridge":
        return preprocess_bridge(data, spec, min_pixels, max_pixels, exact)
    if resize == "hf":
        if isinstance(data, Image.Image):
            return preprocess_pil(data, spec, min_pixels, max_pixels, draft=not exact)
        return preprocess_image(bytes(data), spec, min_pixels, max_pixels, draft=not exact)
    raise ValueError(f"resize must be 'bridge' or 'hf', got {resize!r}")
