"""The checks a Bridge-format batch passes before the reference step runs it, and the MRoPE position ids the
step computes from it on the host (``vlmdata.audit.workload.step``).

- ``check_batch(batch, config)``: shapes of ``input_ids`` / ``labels`` / ``loss_mask``, no video tokens, and
  one contiguous run of exactly ``t*(h/m)*(w/m)`` ``<|image_pad|>`` tokens per image, in image order (as
  Qwen-VL processors expand every placeholder; REFERENCE.md section 6). ``ImagePadMismatch`` names the image,
  the run and the count.
- ``mrope_position_ids(model, batch)``: like Bridge's Qwen3-VL model, the 3-D MRoPE ids from ``input_ids`` and
  ``image_grid_thw`` (``model.model.get_rope_index``), per sample within a packed row; text-only batches use
  the batch's ``position_ids``.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch

from vlmdata.audit.workload.model import VIDEO_TOKEN_ID
from vlmdata.errors import VlmdataError

__all__ = ["ImagePadMismatch", "check_batch", "mrope_position_ids", "visual_field"]


class ImagePadMismatch(VlmdataError, ValueError):
    """``input_ids`` do not hold exactly t*h*w/4 ``<|image_pad|>`` tokens for each image."""


def visual_field(obj, key) -> Any:
    """``key`` of a batch's ``visual_inputs`` (a dict or an object), or None."""
    if obj is None:
        return None
    return obj.get(key) if isinstance(obj, dict) else getattr(obj, key, None)


def check_batch(batch: dict, config) -> None:
    """Raise ``ImagePadMismatch``/``ValueError`` if the batch cannot run on the model.

    Each image needs one contiguous run of exactly ``t*(h/m)*(w/m)`` ``<|image_pad|>`` tokens
    (``image_grid_thw`` = (t, h, w) in patches, m the spatial merge), runs taken in row-major order over the
    batch, as Qwen-VL processors expand every image placeholder (REFERENCE.md section 6).
    """
    ids = batch["input_ids"]
    if ids.ndim != 2:
        raise ValueError(f"input_ids must be [B,S], got {tuple(ids.shape)}")
    for k in ("labels", "loss_mask"):
        if batch.get(k) is not None and tuple(batch[k].shape) != tuple(ids.shape):
            raise ValueError(f"{k} shape {tuple(batch[k].shape)} != input_ids shape {tuple(ids.shape)}")
    vis = batch.get("visual_inputs")
    pv, grid = visual_field(vis, "pixel_values"), visual_field(vis, "image_grid_thw")
    img = int(config.image_token_id)
    is_img = ids == img
    if (ids == VIDEO_TOKEN_ID).any():
        raise ValueError("video tokens are not supported by the reference step")
    if pv is None:
        if is_img.any():
            raise ImagePadMismatch(f"batch has {int(is_img.sum())} <|image_pad|> ({img}) tokens but no pixel_values")
        return
    vc = config.vision_config
    width = vc.in_channels * vc.temporal_patch_size * vc.patch_size**2
    m = vc.spatial_merge_size
    if grid is None or grid.ndim != 2 or grid.shape[1] != 3:
        raise ValueError("visual_inputs.image_grid_thw must be int64 [n_images, 3] when pixel_values is given")
    n_patch = int(grid.prod(-1).sum())
    if tuple(pv.shape) != (n_patch, width):
        raise ValueError(f"pixel_values shape {tuple(pv.shape)} != (sum t*h*w = {n_patch}, {width})")
    if ((grid[:, 1:] % m) != 0).any():
        raise ValueError(f"image grid h and w must be multiples of spatial_merge_size {m}: {grid.tolist()}")
    need = (grid.prod(-1) // (m * m)).tolist()
    runs = []  # (row, start, length) of each contiguous image_pad run
    for b, row in enumerate(is_img.to(torch.int8)):
        edges = torch.diff(row, prepend=row.new_zeros(1), append=row.new_zeros(1)).nonzero().flatten().tolist()
        runs += [(b, s, e - s) for s, e in zip(edges[0::2], edges[1::2])]
    if len(runs) != len(need) or any(r[2] != n for r, n in zip(runs, need)):
        detail = "; ".join(
            f"image {i}: grid {tuple(grid[i].tolist())} needs {n}"
            + (f", row {runs[i][0]} pos {runs[i][1]} has {runs[i][2]}" if i < len(runs) else ", no run")
            for i, n in enumerate(need)
        )
        extra = f"; {len(runs) - len(need)} extra run(s)" if len(runs) > len(need) else ""
        raise ImagePadMismatch(
            f"input_ids must hold one run of t*(h/{m})*(w/{m}) <|image_pad|> ({img}) tokens per image, "
            f"in image order: found {len(runs)} runs {[r[2] for r in runs]} for {len(need)} images "
            f"needing {need} ({detail}{extra})"
        )


def _rope(model, ids: torch.Tensor, grid: torch.Tensor | None) -> torch.Tensor:
    kw: dict[str, Any] = {"image_grid_thw": grid, "attention_mask": None}
    if "mm_token_type_ids" in inspect.signature(model.model.get_rope_index).parameters:
        kw["mm_token_type_ids"] = (ids == model.config.image_token_id).to(torch.int32)  # transformers >= 5.2x
    pos, _ = model.model.get_rope_index(ids, **kw)
    return pos


def mrope_position_ids(model, batch: dict) -> torch.Tensor | None:
    """Position ids to pass to the model: [3,B,S] MRoPE ids when images are present (computed from input_ids
    and grids on the host; per sample within a packed row), else the batch's ``position_ids`` (or None)."""
    vis = batch.get("visual_inputs")
    grid = visual_field(vis, "image_grid_thw")
    if visual_field(vis, "pixel_values") is None:
        return batch.get("position_ids")
    ids = batch["input_ids"].cpu()
    grid = grid.cpu()
    cu = batch.get("cu_seqlens_q")
    if cu is None:
        return _rope(model, ids, grid)
    m2 = model.config.vision_config.spatial_merge_size**2
    per_image = (grid.prod(-1) // m2).tolist()
    parts, g0 = [], 0
    bounds = cu.tolist()
    for s, e in zip(bounds[:-1], bounds[1:]):
        seg = ids[:, s:e]
        n_vis, k = int((seg == model.config.image_token_id).sum()), 0
        while n_vis > 0 and g0 + k < len(per_image) and n_vis >= per_image[g0 + k]:
            n_vis -= per_image[g0 + k]
            k += 1
        sub = grid[g0 : g0 + k] if k else None
        parts.append(_rope(model, seg, sub) if k else torch.arange(e - s).view(1, 1, -1).expand(3, 1, -1))
        g0 += k
    tail = ids.shape[1] - bounds[-1]
    if tail > 0:  # alignment padding after the last sample
        parts.append(torch.arange(tail).view(1, 1, -1).expand(3, 1, -1))
    return torch.cat(parts, dim=-1)
