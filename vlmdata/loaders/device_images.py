"""Images finished on the training device (``make_loader(..., image_device="cuda")``).

The expansion of an image into Qwen-VL pixel rows (24 bytes of float32 per output pixel: 3 channels,
two temporal copies) costs a CPU more than decoding it; on an H200 it costs 0.2-0.5 ms an image. With an
``image_device`` the loader's workers plan each sample's grid from the image header (the same
``vision.target_size`` the CPU path uses, so grids and token ids are identical) and hand the image on
compact: ``image_decoder`` says who decodes a JPEG:

- ``"nvjpeg"`` (default): nobody on the host; the encoded bytes travel and the device decodes them;
- ``"pillow"``: the worker decodes it with Pillow (at reduced DCT scale when the target is at most half
  the source, as the CPU fast path) and hands over uint8 RGB (3 bytes per decoded pixel, 8x less than
  the pixel rows it becomes). For when the device has no nvJPEG, or its time is dearer than the host's.

Other formats (PNG, WebP, in-memory images) are always decoded in the worker. In the training process,
``finish_batch`` then turns a batch's images into ``pixel_values`` on the device in one go:

1. every JPEG of the batch still encoded, in one batched nvJPEG call
   (``torchvision.io.decode_jpeg(list, device="cuda")``); decoded pixels are copied over as they are;
2. per image a bicubic antialiased resize straight to the planned size (float, rounded and clamped to
   uint8 levels), like the CPU fast path's single resize (so within ``image.draft_tolerance`` of Bridge's
   double resize, not bit-identical); a drafted image is mapped with its exact scale, as on the CPU;
3. normalise with the model's mean/std and patchify into the HF Qwen2-VL layout (rows (gh/m, gw/m, m, m),
   each (C, T, p, p), the frame repeated over T), concatenated over the batch's images.

Each deferred item is ``(kind, payload, (th, tw), scale)``: kind "jpeg" (payload: the bytes) or "rgb"
(payload: a uint8 (H, W, 3) tensor); ``scale`` (sy, sx) for a drafted image, else None.

The device work runs on its current stream inside ``next(loader)``, so in the audit it is counted as
data wait (the device does that work instead of the host). ``decoder`` is injectable for tests (a CPU
decoder gives the same pipeline without CUDA).
"""

from __future__ import annotations

import io
import warnings
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

from vlmdata.errors import OptionsError
from vlmdata.loaders.collate import (
    DEFERRED_KEY,  # batch key: [(kind, payload, (th, tw), scale)] in image order; finish_batch removes it
)
from vlmdata.loaders.options import IMAGE_DECODERS  # who decodes a JPEG: the device, or the loader's worker
from vlmdata.qwen.image import decode_jpeg_gpu
from vlmdata.qwen.spec import QwenSpec, get_spec
from vlmdata.qwen.vision import draft_scale, target_size


def defer_image(
    data, spec: QwenSpec, min_pixels: int, max_pixels: int, resize: str = "bridge", decoder: str = "nvjpeg"
):
    """(placeholder pixel rows, grid, deferred item) for one image. ``decoder`` "nvjpeg": a JPEG is not
    decoded here; "pillow": it is, at reduced DCT scale where the target allows (see the module doc)."""
    if decoder not in IMAGE_DECODERS:
        raise OptionsError(f"`image_decoder` must be one of {IMAGE_DECODERS}, got {decoder!r}")
    if isinstance(data, Image.Image):
        img, fmt = data, None
    else:
        img = Image.open(io.BytesIO(data))
        fmt = img.format
    w, h = img.size
    th, tw = target_size(h, w, spec, min_pixels, max_pixels, resize)
    if decoder == "nvjpeg" and fmt == "JPEG" and img.mode in ("RGB", "L", "CMYK", "YCbCr"):
        assert not isinstance(data, Image.Image)  # fmt is None for an in-memory image
        item = ("jpeg", bytes(data), (th, tw), None)
    else:  # decoded here (PNG, WebP, in-memory images, or any image with decoder="pillow"); resized there
        scale = draft_scale(img, th, tw) if fmt == "JPEG" else None  # as the CPU path
        rgb = img.convert("RGB") if img.mode != "RGB" else img
        with warnings.catch_warnings():  # Pillow's array is read-only; only the device copy reads it
            warnings.simplefilter("ignore", UserWarning)
            item = ("rgb", torch.from_numpy(np.asarray(rgb)), (th, tw), scale)
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


def resize_torch(img: torch.Tensor, size: tuple[int, int], scale: tuple[float, float] | None = None) -> torch.Tensor:
    """uint8 (3, H, W) -> float (3, th, tw) at uint8 levels: bicubic antialiased, rounded, clamped.
    ``scale`` (sy, sx): map source to target with this factor (a drafted image, whose reduced size
    covers slightly more than the source region) and keep the top-left (th, tw)."""
    x = img.unsqueeze(0).float()
    if scale is not None:
        x = F.interpolate(
            x, scale_factor=scale, mode="bicubic", antialias=True, align_corners=False, recompute_scale_factor=False
        )
        x = x[:, :, : size[0], : size[1]]
    elif tuple(img.shape[1:]) != tuple(size):
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
    jpegs = [payload for kind, payload, _, _ in items if kind == "jpeg"]
    decoded = iter(decoder(jpegs) if jpegs else [])
    rows = []
    for kind, payload, size, scale in items:
        if kind == "jpeg":
            img = next(decoded)
        else:  # DataLoader workers hand numpy arrays over as tensors (pinned with pin_memory=True)
            rgb = payload if isinstance(payload, torch.Tensor) else torch.from_numpy(payload)
            img = rgb.permute(2, 0, 1).to(device, non_blocking=True)
        rows.append(patchify_torch(resize_torch(img, size, scale), spec))
    vis = batch["visual_inputs"]
    pv = torch.cat(rows) if len(rows) > 1 else rows[0]
    if tuple(pv.shape) != tuple(vis.pixel_values.shape):
        raise ValueError(f"device images gave pixel_values {tuple(pv.shape)}, planned {tuple(vis.pixel_values.shape)}")
    vis.pixel_values = pv
    return batch
