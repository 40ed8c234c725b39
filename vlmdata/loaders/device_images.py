"""Images decoded and preprocessed on the training device (``make_loader(..., image_device="cuda")``).

With an ``image_device`` the loader's workers do not decode: they read each sample, plan its grid from
the image header (the same ``vision.target_size`` the CPU path uses, so grids and token ids are
identical) and pass the encoded JPEG bytes along (other formats are decoded to uint8 RGB in the worker).
In the training process, ``finish_batch`` then turns a batch's images into ``pixel_values`` on the
device in one go:

1. every JPEG of the batch in one batched nvJPEG call (``torchvision.io.decode_jpeg(list, device="cuda")``);
2. per image a bicubic antialiased resize straight to the planned size (float, rounded and clamped to
   uint8 levels), like the CPU fast path's single resize (so within ``image.draft_tolerance`` of Bridge's
   double resize, not bit-identical);
3. normalise with the model's mean/std and patchify into the HF Qwen2-VL layout (rows (gh/m, gw/m, m, m),
   each (C, T, p, p), the frame repeated over T), concatenated over the batch's images.

The decode runs on the device's current stream inside ``next(loader)``, so in the audit it is counted as
data wait (the device does that work instead of the host). ``decoder`` is injectable for tests (a CPU
decoder gives the same pipeline without CUDA).
"""

from __future__ import annotations

import io
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

from vlmdata.loaders.collate import (
    DEFERRED_KEY,  # batch key: [(kind, payload, (th, tw))] in image order; finish_batch removes it
)
from vlmdata.qwen.image import decode_jpeg_gpu
from vlmdata.qwen.spec import QwenSpec, get_spec
from vlmdata.qwen.vision import target_size


def defer_image(data, spec: QwenSpec, min_pixels: int, max_pixels: int, resize: str = "bridge"):
    """(placeholder pixel rows, grid, deferred item) for one image: no decode of a JPEG."""
    if isinstance(data, Image.Image):
        img, fmt = data, None
    else:
        img = Image.open(io.BytesIO(data))
        fmt = img.format
    w, h = img.size
    th, tw = target_size(h, w, spec, min_pixels, max_pixels, resize)
    if fmt == "JPEG" and img.mode in ("RGB", "L", "CMYK", "YCbCr"):
        assert not isinstance(data, Image.Image)  # fmt is None for an in-memory image
        item = ("jpeg", bytes(data), (th, tw))
    else:  # PNG, WebP, in-memory images...: RGB pixels from the worker, resized on the device
        rgb = img.convert("RGB") if img.mode != "RGB" else img
        item = ("rgb", np.asarray(rgb), (th, tw))
    gh, gw = th // spec.patch_size, tw // spec.patch_size
    return np.broadcast_to(np.float32(0), (gh * gw, spec.patch_dim)), (1, gh, gw), item


def nvjpeg_decoder(device: str) -> Callable[[list[bytes]], list[torch.Tensor]]:
    """Batched nvJPEG decode -> uint8 (3, H, W) tensors on ``device`` (needs torchvision and CUDA)."""

    return lambda data: decode_jpeg_gpu(data, device)


def pil_decoder(device: str) -> Callable[[list[bytes]], list[torch.Tensor]]:
    """The same interface with Pillow on the CPU (tests, and machines without nvJPEG)."""

    def decode(data: list[bytes]) -> list[torch.Tensor]:
        out = []
        for b in data:
            with Image.open(io.BytesIO(b)) as im:
                out.append(torch.from_numpy(np.asarray(im.convert("RGB")).copy()).permute(2, 0, 1).to(device))
        return out

    return decode


def patchify_torch(x: torch.Tensor, spec: QwenSpec) -> torch.Tensor:
    """float (3, H, W) in 0..255 -> normalised float32 (gh*gw, 3*T*p*p), the HF Qwen2-VL layout."""
    p, m, t = spec.patch_size, spec.merge_size, spec.temporal_patch_size
    _, h, w = x.shape
    gh, gw = h // p, w // p
    mean = torch.tensor(spec.image_mean, device=x.device, dtype=torch.float32).view(3, 1, 1)
    std = torch.tensor(spec.image_std, device=x.device, dtype=torch.float32).view(3, 1, 1)
    x = (x / 255.0 - mean) / std
    v = x.reshape(3, gh // m, m, p, gw // m, m, p).permute(1, 4, 2, 5, 0, 3, 6)  # (gh/m, gw/m, m, m, C, p, p)
    v = v.unsqueeze(5).expand(gh // m, gw // m, m, m, 3, t, p, p)
    return v.reshape(gh * gw, 3 * t * p * p)


def resize_torch(img: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """uint8 (3, H, W) -> float (3, th, tw) at uint8 levels: bicubic antialiased, rounded, clamped."""
    x = img.unsqueeze(0).float()
    if tuple(img.shape[1:]) != tuple(size):
        x = F.interpolate(x, size=size, mode="bicubic", antialias=True, align_corners=False)
    return x.round_().clamp_(0, 255)[0]


def finish_batch(
    batch: dict, model: str | QwenSpec, device: str, decoder: Callable[[list[bytes]], list[torch.Tensor]] | None = None
) -> dict:
    """``batch`` with its deferred images decoded, resized, normalised and patchified on ``device``
    (``visual_inputs.pixel_values`` replaced; the ``deferred_images`` key removed)."""
    items = batch.pop(DEFERRED_KEY, None)
    if not items:
        return batch
    spec = get_spec(model)
    decoder = decoder or nvjpeg_decoder(device)
    jpegs = [payload for kind, payload, _ in items if kind == "jpeg"]
    decoded = iter(decoder(jpegs) if jpegs else [])
    rows = []
    for kind, payload, size in items:
        if kind == "jpeg":
            img = next(decoded)
        else:  # DataLoader workers hand numpy arrays over as tensors
            rgb = payload if isinstance(payload, torch.Tensor) else torch.from_numpy(payload)
            img = rgb.permute(2, 0, 1).to(device)
        rows.append(patchify_torch(resize_torch(img, size), spec))
    vis = batch["visual_inputs"]
    pv = torch.cat(rows) if len(rows) > 1 else rows[0]
    if tuple(pv.shape) != tuple(vis.pixel_values.shape):
        raise ValueError(f"device images gave pixel_values {tuple(pv.shape)}, planned {tuple(vis.pixel_values.shape)}")
    vis.pixel_values = pv
    return batch
