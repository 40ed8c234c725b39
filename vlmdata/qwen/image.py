"""Fast, HF-equivalent Qwen-VL image preprocessing: encoded bytes -> (pixel_values, grid_thw).

What the Hugging Face PIL-backend ``Qwen2VLImageProcessorPil`` does per image, and what we do:

1. convert to RGB, compositing transparency onto white  -> the same (``_to_model_mode``); plain
   greyscale is resized as one band and repeated after (identical: PIL resamples per band)
2. Pillow ``resize(smart_resize size, BICUBIC)`` on uint8 -> exact mode: the same call (skipped when
   the image already has that size). Fast mode: a not-yet-loaded JPEG is first decoded at 1/2, 1/4
   or 1/8 scale in the DCT domain (``Image.draft``, only when the target is at most half the source),
   and the bicubic antialiased resize runs on torch's uint8 kernel (as the HF torchvision backend)
3. ``float64(x) * (1/255) -> float32``, then ``(x - mean) / std`` in float32
                                                         -> ``(x / 255 - mean) / std`` in float32 on
                                                            contiguous (H, W*3) rows: 3 passes, bit-exact
4. patchify to (gh/m, gw/m, m, m, C, T, p, p), the frame repeated T=2 times
                                                         -> one strided copy that broadcasts over T

``draft=False`` equals the HF PIL processor bit for bit. ``draft=True`` (default) stays within
``draft_tolerance`` (mean and p99 |diff| in grey levels; docs/image-path.md has the measurements).
"""

from __future__ import annotations

import io
import warnings
from functools import lru_cache

import numpy as np
from PIL import Image

from vlmdata.qwen.spec import BRIDGE_MAX_PIXELS, BRIDGE_MIN_PIXELS, QwenSpec, get_spec, smart_resize

# Enforced draft-vs-HF tolerance per image, in uint8 grey levels (model-independent): mean |diff|
# and 99th percentile |diff| over all pixel_values. ``draft_tolerance`` converts to normalised units
# (one level = 1/255/std: 0.0078 for Qwen3-VL, ~0.015 for Qwen2/2.5-VL). Measured worst cases on
# photo/texture mosaics at draft scales 1/2, 1/4, 1/8: mean 4.4 levels, p99 22 levels (docs/image-path.md).
DRAFT_MEAN_TOL_LEVELS = 5.0
DRAFT_P99_TOL_LEVELS = 28.0


def draft_tolerance(spec: str | QwenSpec) -> tuple[float, float]:
    """(mean, p99) |pixel_values diff| allowed for draft=True vs the HF processor, normalised units."""
    level = 1 / (255 * min(get_spec(spec).image_std))
    return DRAFT_MEAN_TOL_LEVELS * level, DRAFT_P99_TOL_LEVELS * level


_BICUBIC = Image.Resampling.BICUBIC


@lru_cache(maxsize=64)
def _rows(spec: QwenSpec, width: int) -> tuple[np.ndarray, np.ndarray]:
    """mean and std as float32 rows of length width*3 (channel-interleaved), so the per-channel
    normalisation runs over contiguous (H, W*3) rows instead of a length-3 inner loop."""
    mean = np.tile(np.array(spec.image_mean, dtype=np.float32), width)
    std = np.tile(np.array(spec.image_std, dtype=np.float32), width)
    mean.setflags(write=False)
    std.setflags(write=False)
    return mean, std


def _to_model_mode(img: Image.Image) -> Image.Image:
    """RGB (or L for plain greyscale), as transformers' convert_to_rgb: alpha over a white background."""
    if "A" in img.getbands() or img.info.get("transparency") is not None:
        img = img.convert("RGBA")
        white = Image.new("RGBA", img.size, (255, 255, 255, 255))
        return Image.alpha_composite(white, img).convert("RGB")
    if img.mode in ("RGB", "L"):
        return img
    return img.convert("RGB")


def _resize_torch(img: Image.Image, size: tuple[int, int], box) -> np.ndarray:
    """Bicubic antialiased uint8 resize with torch's vectorised kernel (the one the HF torchvision
    backend runs): 2-5x faster than Pillow's on one core, mean difference under 0.2 grey levels.
    ``box`` (from draft) is honoured through an explicit scale factor, which maps coordinates as
    Pillow's box does (ignoring it would stretch the image by up to one reduced pixel)."""
    import torch
    import torch.nn.functional as F

    tw, th = size
    a = np.asarray(img)
    with warnings.catch_warnings():  # read-only numpy view; torch only reads it
        warnings.simplefilter("ignore", UserWarning)
        x = torch.from_numpy(a).permute(2, 0, 1)[None]  # NCHW view in channels_last layout
    if box is None or (box[2], box[3]) == img.size:
        y = F.interpolate(x, size=(th, tw), mode="bicubic", antialias=True)
    else:
        sf = (th / box[3], tw / box[2])
        y = F.interpolate(x, scale_factor=sf, mode="bicubic", antialias=True, recompute_scale_factor=False)
        y = y[:, :, :th, :tw]
    return np.ascontiguousarray(y[0].numpy())  # planar (3, th, tw): the kernel writes NCHW


def resized_array(
    img: Image.Image, spec: QwenSpec, min_pixels: int, max_pixels: int, draft: bool, resampler: str
) -> tuple[np.ndarray, bool]:
    """(uint8 array at the smart_resize size, chw): (H, W, 3) or (H, W) from Pillow, (3, H, W) from torch."""
    if resampler not in ("pil", "torch"):
        raise ValueError(f"resampler must be 'pil' or 'torch', got {resampler!r}")
    w, h = img.size
    th, tw = smart_resize(h, w, spec.factor, min_pixels, max_pixels)
    box = None
    if draft and img.format == "JPEG":
        # Only a not-yet-loaded JPEG honours draft; it keeps the decoded size >= (tw, th).
        res = img.draft("RGB", (tw, th))
        if res is not None and img.size != (w, h):
            box = res[1]  # the source region in the reduced image, for an exact geometric mapping
    img = _to_model_mode(img)
    if img.size == (tw, th) and box is None:
        return np.asarray(img), False
    if resampler == "torch" and img.mode == "RGB":
        return _resize_torch(img, (tw, th), box), True
    return np.asarray(img.resize((tw, th), _BICUBIC, box=box)), False


def normalize(a: np.ndarray, spec: QwenSpec, chw: bool = False) -> np.ndarray:
    """uint8 (H, W, 3), or (3, H, W) with ``chw``, -> float32 of the same shape: ``(x / 255 - mean) / std``
    in float32. Bit-identical to transformers' float64 ``x * (1/255)`` -> float32 rescale followed by
    its float32 normalize (checked for all 3 x 256 inputs in tests/qwen/test_image_path.py)."""
    if chw:
        x = np.divide(a, np.float32(255), dtype=np.float32)
        np.subtract(x, np.array(spec.image_mean, dtype=np.float32)[:, None, None], out=x)
        np.divide(x, np.array(spec.image_std, dtype=np.float32)[:, None, None], out=x)
        return x
    h, w = a.shape[:2]
    mean, std = _rows(spec, w)  # channel-interleaved rows: contiguous inner loops
    x = np.divide(a.reshape(h, w * 3), np.float32(255), dtype=np.float32)
    np.subtract(x, mean, out=x)
    np.divide(x, std, out=x)
    return x.reshape(h, w, 3)


def patchify(a: np.ndarray, spec: QwenSpec, chw: bool = False, out: np.ndarray | None = None) -> np.ndarray:
    """uint8 (H, W, 3), (H, W) or, with ``chw``, (3, H, W) -> normalised float32 (grid_h*grid_w, 3*T*p*p)
    in the HF Qwen2-VL layout: rows ordered (gh/m, gw/m, m, m), each row (C, T, p, p). ``out``: a
    C-contiguous float32 (grid_h*grid_w, 3*T*p*p) to write into (a slice of a batch buffer) instead of
    a new array; the values are the same either way."""
    p, m, t = spec.patch_size, spec.merge_size, spec.temporal_patch_size
    if a.ndim == 2:  # greyscale was resized as one band (identical, 3x cheaper); channels now
        a = np.repeat(a[:, :, None], 3, axis=2)
    h, w = a.shape[1:] if chw else a.shape[:2]
    gh, gw = h // p, w // p
    x = normalize(a, spec, chw)
    if chw:  # (C, gh/m, m, p, gw/m, m, p) -> (gh/m, gw/m, m, m, C, p, p)
        v = x.reshape(3, gh // m, m, p, gw // m, m, p).transpose(1, 4, 2, 5, 0, 3, 6)
    else:  # (gh/m, m, p, gw/m, m, p, C) -> (gh/m, gw/m, m, m, C, p, p)
        v = x.reshape(gh // m, m, p, gw // m, m, p, 3).transpose(0, 3, 1, 4, 6, 2, 5)
    rows = (gh * gw, 3 * t * p * p)
    if out is None:
        out = np.empty(rows, dtype=np.float32)
    elif out.shape != rows or out.dtype != np.float32 or not out.flags.c_contiguous:
        raise ValueError(f"out must be a C-contiguous float32 array of shape {rows}, got {out.dtype} {out.shape}")
    # one strided copy, broadcast over the temporal axis
    out.reshape(gh // m, gw // m, m, m, 3, t, p, p)[...] = v[:, :, :, :, :, None]
    return out


def preprocess_pil(
    img: Image.Image,
    spec: str | QwenSpec = "qwen3-vl",
    min_pixels: int = BRIDGE_MIN_PIXELS,
    max_pixels: int = BRIDGE_MAX_PIXELS,
    draft: bool = True,
    resampler: str | None = None,
) -> tuple[np.ndarray, tuple[int, int, int]]:
    """A PIL image -> (pixel_values float32 [gh*gw, 3*T*p*p], (1, gh, gw)), the HF layout.

    ``draft=True`` (fast): a JPEG opened but not yet loaded is decoded at reduced DCT scale when
    the target is at most half its size, and the resize runs on torch's uint8 kernel; the result
    stays within ``draft_tolerance(spec)`` of HF. ``draft=False``: Pillow decode and resize,
    bit-identical to the HF PIL processor. ``resampler`` ("pil" or "torch") overrides the
    resize choice (default: "torch" when draft else "pil"). Like ``Image.draft``, drafting changes
    an unloaded JPEG ``img`` in place. EXIF orientation is not applied (HF does not either)."""
    s = get_spec(spec)
    if resampler is None:
        resampler = "torch" if draft else "pil"
    a, chw = resized_array(img, s, min_pixels, max_pixels, draft, resampler)
    pv = patchify(a, s, chw)
    h, w = a.shape[1:] if chw else a.shape[:2]
    return pv, (1, h // s.patch_size, w // s.patch_size)


def preprocess_image(
    data: bytes,
    spec: str | QwenSpec = "qwen3-vl",
    min_pixels: int = BRIDGE_MIN_PIXELS,
    max_pixels: int = BRIDGE_MAX_PIXELS,
    draft: bool = True,
    resampler: str | None = None,
) -> tuple[np.ndarray, tuple[int, int, int]]:
    """Encoded image bytes (any Pillow format) -> (pixel_values, (1, gh, gw)); see ``preprocess_pil``.
    ``torch.from_numpy(pixel_values)`` gives the tensor Bridge's visual inputs hold, without a copy."""
    with Image.open(io.BytesIO(data)) as img:
        return preprocess_pil(img, spec, min_pixels, max_pixels, draft, resampler)


def preprocess_images(
    images: list[bytes],
    spec: str | QwenSpec = "qwen3-vl",
    min_pixels: int = BRIDGE_MIN_PIXELS,
    max_pixels: int = BRIDGE_MAX_PIXELS,
    draft: bool = True,
    resampler: str | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Several images -> (concatenated pixel_values, image_grid_thw int64 [n, 3]), as the HF processor."""
    s = get_spec(spec)
    outs = [preprocess_image(d, s, min_pixels, max_pixels, draft, resampler) for d in images]
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
        from torchvision.io import ImageReadMode, decode_jpeg  # pyright: ignore[reportMissingImports]  # optional
    except ImportError as e:
        raise RuntimeError("decode_jpeg_gpu needs torchvision (pip install torchvision)") from e
    if not str(device).startswith("cuda") or not torch.cuda.is_available():
        raise RuntimeError(
            f"decode_jpeg_gpu needs a CUDA device, got device={device!r} "
            f"(torch.cuda.is_available()={torch.cuda.is_available()})"
        )
    if not images:
        return []
    tensors = [torch.frombuffer(bytearray(b), dtype=torch.uint8) for b in images]
    return decode_jpeg(tensors, mode=ImageReadMode.RGB, device=device)
