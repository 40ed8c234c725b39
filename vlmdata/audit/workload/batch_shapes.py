"""What a batch is made of, read without running it: its samples, images, patches and visual tokens
(``batch_shape``; a packed batch, one row [1, T] with ``cu_seqlens_q``, counts the samples its segments hold, not
its one row, so samples/s, images per sample and the rest mean the same packed or padded), the shapes a step on it
runs kernels for (``shape_items``: the warm-up warms each new one; ``vision_only(items)``: True when every item of
a set is one the vision tower alone runs kernels for, which the warm-up then warms with the tower alone), and its
pixel rows in memory (``materialize``: the census's shapes-only batches carry a zero-stride view).
"""

from __future__ import annotations

from dataclasses import replace

import torch

from vlmdata.audit.settings.model_config import IMAGE_TOKEN_ID

__all__ = ["batch_shape", "visual_tokens_per_sample", "shape_items", "vision_only", "materialize", "VISION_ITEMS"]

# the shape items only the vision tower runs kernels for: a new one needs the tower, not the decoder, warmed
# (the decoder's sequence shape is the ("tokens", B, S) item; the image embeddings it takes in are index work)
VISION_ITEMS = ("patches", "image")


def _visual(batch: dict, key: str):
    v = batch.get("visual_inputs")
    if v is None:
        return None
    return v.get(key) if isinstance(v, dict) else getattr(v, key, None)


def batch_shape(batch: dict) -> dict:
    """Samples, images, patches and visual tokens per sample of a batch (no FLOPs); a packed row's samples are
    its ``cu_seqlens_q`` segments."""
    grid = _visual(batch, "image_grid_thw")
    visual = visual_tokens_per_sample(batch)
    return {
        "samples": len(visual),
        "images": 0 if grid is None else int(len(grid)),
        "patches": 0 if grid is None else int(torch.as_tensor(grid).prod(-1).sum()),
        "visual_tokens_per_sample": visual,
    }


def visual_tokens_per_sample(batch: dict) -> list[int]:
    """``<|image_pad|>`` tokens of each sample: of each row, or of each ``cu_seqlens_q`` segment of a packed row."""
    ids = torch.as_tensor(batch["input_ids"])
    cu = batch.get("cu_seqlens_q")
    if cu is None:
        return [int(n) for n in (ids == IMAGE_TOKEN_ID).sum(1).tolist()]
    bounds = torch.as_tensor(cu).tolist()  # packed: one row of several samples
    return [int((ids[0, s:e] == IMAGE_TOKEN_ID).sum()) for s, e in zip(bounds[:-1], bounds[1:])]


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


def _kind(item: tuple) -> str:
    """An item's kind; a workload's configuration-tagged item is ``(config, item)``."""
    return item[0] if isinstance(item[0], str) else _kind(item[-1])


def vision_only(items) -> bool:
    """True when ``items`` is not empty and every one of them is a vision tower item (``VISION_ITEMS``)."""
    return bool(items) and all(_kind(i) in VISION_ITEMS for i in items)


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
