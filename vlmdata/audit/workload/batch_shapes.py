"""What a batch is made of, read without running it: its samples, images, patches and visual tokens
(``batch_shape``), the shapes a step on it runs kernels for (``shape_items``: the warm-up warms each new one),
and its pixel rows in memory (``materialize``: the census's shapes-only batches carry a zero-stride view).
"""

from __future__ import annotations

from dataclasses import replace

import torch

from vlmdata.audit.settings.model_config import IMAGE_TOKEN_ID

__all__ = ["batch_shape", "shape_items", "materialize"]


def _visual(batch: dict, key: str):
    v = batch.get("visual_inputs")
    if v is None:
        return None
    return v.get(key) if isinstance(v, dict) else getattr(v, key, None)


def batch_shape(batch: dict) -> dict:
    """Samples, images, patches and visual tokens per sample of a batch (no FLOPs)."""
    ids = torch.as_tensor(batch["input_ids"])
    grid = _visual(batch, "image_grid_thw")
    return {
        "samples": int(ids.shape[0]),
        "images": 0 if grid is None else int(len(grid)),
        "patches": 0 if grid is None else int(torch.as_tensor(grid).prod(-1).sum()),
        "visual_tokens_per_sample": (ids == IMAGE_TOKEN_ID).sum(1).tolist(),
    }


def shape_items(batch: dict, loss_tokens: bool = False, per_image: bool = True) -> frozenset:
    """The shapes a step on ``batch`` runs kernels for: ("tokens", B, S), ("patches", total), ("image", t, h,
    w) per image when the vision attention runs image by image (``per_image``: transformers' SDPA path, whose
    cuDNN backend builds a plan per new image size), and ("loss_tokens", n) when the lm_head runs on loss
    tokens only."""
    ids = torch.as_tensor(batch["input_ids"])
    items = {("tokens", *map(int, ids.shape))}
    grid = _visual(batch, "image_grid_thw")
    if grid is not None and len(grid):
        g = torch.as_tensor(grid).tolist()
        if per_image:
            items.update(("image", *map(int, row)) for row in g)
        items.add(("patches", int(sum(t * h * w for t, h, w in g))))
    if loss_tokens:
        items.add(("loss_tokens", int((torch.as_tensor(batch["loss_mask"]) > 0).sum())))
    return frozenset(items)


def materialize(batch: dict) -> dict:
    """``batch`` with its pixel rows in memory (shapes-only batches carry a zero-stride view)."""
    v = batch.get("visual_inputs")
    pv = _visual(batch, "pixel_values")
    if pv is None or pv.is_contiguous():
        return batch
    assert v is not None  # pv came from it
    if isinstance(v, dict):
        return {**batch, "visual_inputs": {**v, "pixel_values": pv.contiguous()}}
    return {**batch, "visual_inputs": replace(v, pixel_values=pv.contiguous())}
