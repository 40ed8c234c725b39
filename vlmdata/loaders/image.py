"""Fast, HF-equivalent Qwen-VL image preprocessing: encoded bytes -> (pixel_values, grid_thw).

What the Hugging Face PIL-backend ``Qwen2VLImageProcessorPil`` does per image, and what we do:

1. convert to RGB, compositing transparency onto white      -> same (``_to_model_mode``); greyscale
   stays one channel until the lookup table, which is identical because PIL resamples per channel
2. PIL ``resize(smart_resize size, BICUBIC)`` on uint8        -> same call (skipped when already that size);
   with ``draft=True`` a JPEG is first decoded at 1/2, 1/4 or 1/8 scale in the DCT domain
   (``Image.draft``; Pillow only picks a scale when the target is at most half the source)
3. ``float64(x) * (1/255) -> float32``, then ``(x - mean) / std`` in float32
                                                             -> one 3x256 float32 lookup table built
                                                                with exactly those operations: bit-exact
4. patchify: (C, gh/m, m, p, gw/m, m, p) -> (gh/m, gw/m, m, m, C, T, p, p), frame repeated T=2 times
                                                             -> one gather per channel straight into
                                                                the output layout, then one copy for T

With ``draft=False`` the result equals the HF PIL processor bit for bit. With ``draft=True`` (default)
pixels differ where the DCT downscale applies; the tolerance we enforce is in docs/image-path.md and
tests/test_image_path.py (``DRAFT_MEAN_TOL`` / ``DRAFT_P99_TOL`` below, normalised units).
"""

from __future__ import annotations

import io
from functools import lru_cache

import numpy as np
from PIL import Image

from ..qwen import BRIDGE_MAX_PIXELS, BRIDGE_MIN_PIXELS, QwenSpec, get_spec, smart_resize

# Enforced draft-vs-HF tolerance in normalised units (what the model sees), per image:
# mean |diff| and 99th percentile |diff|. One uint8 grey level is 1/255/std: 0.0078 for Qwen3-VL
# (std 0.5), ~0.015 for Qwen2/2.5-VL (CLIP std ~0.27). Exact mode (draft=False) is bit-identical.
DRAFT_MEAN_TOL = 0.04
DRAFT_P99_TOL = 0.40

_BICUBIC = Image.Resampling.BICUBIC


@lru_cache(maxsize=None)
def _lut(spec: QwenSpec) -> np.ndarray:
    """(3, 256) float32: normalised value of each uint8 level per channel, computed with the same
    dtypes and operation order as transformers' rescale (float64 * 1/255 -> float32) and normalize."""
    x = (np.arange(256, dtype=np.uint8).astype(np.float64) * (1 / 255)).astype(np.float32)
    mean = np.array(spec.image_mean, dtype=np.float32)
    std = np.array(spec.image_std, dtype=np.float32)
    lut = (x[None, :] - mean[:, None]) / std[:, None]
    lut.setflags(write=False)
    return lut


def _to_model_mode(img: Image.Image) -> Image.Image:
    """RGB (or L for plain greyscale), as transformers' convert_to_rgb: alpha over a white background."""
    if "A" in img.getbands() or img.info.get("transparency") is not None:
        img = img.convert("RGBA")
        white = Image.new("RGBA", img.size, (255, 255, 255, 255))
        return Image.alpha_composite(white, img).convert("RGB")
    if img.mode in ("RGB", "L"):
        return img
    return img.convert("RGB")


def _resized_array(img: Image.Image, spec: QwenSpec, min_pixels: int, max_pixels: int, draft: bool) -> np.ndarray:
    """uint8 (H, W, 3) or (H, W) at the smart_resize size."""
    w, h = img.size
    th, tw = smart_resize(h, w, spec.factor, min_pixels, max_pixels)
    box = None
    if draft and img.format == "JPEG":
        # Only a not-yet-loaded JPEG honours draft; it keeps the decoded size >= (tw, th).
        res = img.draft("RGB", (tw, th))
        if res is not None and img.size != (w, h):
            box = res[1]  # the source region in the reduced image, for an exact geometric mapping
    img = _to_model_mode(img)
    if img.size != (tw, th) or box is not None:
        img = img.resize((tw, th), _BICUBIC, box=box)
    return np.asarray(img)


def patchify(a: np.ndarray, spec: QwenSpec) -> np.ndarray:
    """uint8 (H, W, 3) or (H, W) -> float32 (grid_h*grid_w, 3*T*p*p) in HF Qwen2-VL layout, normalised."""
    p, m, t = spec.patch_size, spec.merge_size, spec.temporal_patch_size
    h, w = a.shape[:2]
    gh, gw = h // p, w // p
    a = a.reshape(h, w, -1)
    # (gh/m, m, p, gw/m, m, p, C) -> (gh/m, gw/m, m, m, C, p, p)
    v = a.reshape(gh // m, m, p, gw // m, m, p, a.shape[2]).transpose(0, 3, 1, 4, 6, 2, 5)
    out = np.empty((gh // m, gw // m, m, m, 3, t, p, p), dtype=np.float32)
    lut = _lut(spec)
    for c in range(3):
        src = v[:, :, :, :, c if a.shape[2] == 3 else 0]
        np.take(lut[c], src, out=out[:, :, :, :, c, 0], mode="clip")
    out[:, :, :, :, :, 1:] = out[:, :, :, :, :, :1]
    return out.reshape(gh * gw, 3 * t * p * p)


def preprocess_pil(
    img: Image.Image,
    spec: str | QwenSpec = "qwen3-vl",
    min_pixels: int = BRIDGE_MIN_PIXELS,
    max_pixels: int = BRIDGE_MAX_PIXELS,
    draft: bool = False,
) -> tuple[np.ndarray, tuple[int, int, int]]:
    """An in-memory PIL image -> (pixel_values float32 [gh*gw, 3*T*p*p], (1, gh, gw)).
    ``draft`` only matters for a JPEG opened but not yet loaded."""
    s = get_spec(spec)
    a = _resized_array(img, s, min_pixels, max_pixels, draft)
    return patchify(a, s), (1, a.shape[0] // s.patch_size, a.shape[1] // s.patch_size)


def preprocess_image(
    data: bytes,
    spec: str | QwenSpec = "qwen3-vl",
    min_pixels: int = BRIDGE_MIN_PIXELS,
    max_pixels: int = BRIDGE_MAX_PIXELS,
    draft: bool = True,
) -> tuple[np.ndarray, tuple[int, int, int]]:
    """Encoded image bytes -> (pixel_values float32 [gh*gw, 3*T*p*p], (1, gh, gw)).
    ``draft=False`` is bit-identical to the HF PIL processor; ``draft=True`` decodes large JPEGs
    at reduced scale (see the module docstring for the tolerance)."""
    with Image.open(io.BytesIO(data)) as img:
        return preprocess_pil(img, spec, min_pixels, max_pixels, draft)


def preprocess_images(
    images: list[bytes],
    spec: str | QwenSpec = "qwen3-vl",
    min_pixels: int = BRIDGE_MIN_PIXELS,
    max_pixels: int = BRIDGE_MAX_PIXELS,
    draft: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """Several images -> (concatenated pixel_values, image_grid_thw int64 [n, 3]), as the HF processor."""
    s = get_spec(spec)
    outs = [preprocess_image(d, s, min_pixels, max_pixels, draft) for d in images]
    if not outs:
        return np.empty((0, s.patch_dim), np.float32), np.empty((0, 3), np.int64)
    pv = outs[0][0] if len(outs) == 1 else np.concatenate([o[0] for o in outs])
    return pv, np.array([o[1] for o in outs], dtype=np.int64)


def decode_jpeg_gpu(images: list[bytes], device: str = "cuda") -> list:
    """Batched JPEG decode on the GPU with nvJPEG (torchvision.io.decode_jpeg) -> list of uint8
    (3, H, W) tensors on ``device``. Raises RuntimeError when torchvision or CUDA is missing.
    Resize/normalise/patchify are not done here."""
    import torch

    try:
        from torchvision.io import ImageReadMode, decode_jpeg
    except ImportError as e:
        raise RuntimeError("decode_jpeg_gpu needs torchvision (pip install torchvision)") from e
    if not str(device).startswith("cuda") or not torch.cuda.is_available():
        raise RuntimeError(f"decode_jpeg_gpu needs a CUDA device, got device={device!r} "
                           f"(torch.cuda.is_available()={torch.cuda.is_available()})")
    if not images:
        return []
    tensors = [torch.frombuffer(bytearray(b), dtype=torch.uint8) for b in images]
    return decode_jpeg(tensors, mode=ImageReadMode.RGB, device=device)
