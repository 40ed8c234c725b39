"""The training workloads the audit times: the built-in reference model, or a user's step function.

A workload is called once per measured step with a Bridge-format batch and returns
``{"times_ms": {stage: ms, "total": ms}, "wall_ms", "peak_mem_bytes", "loss"}``. Besides that it says

- ``shape_items(batch)``: the set of shapes the batch makes the workload see for the first time at most
  once (per-image grids, total patches, the token matrix (B, S), and the loss-token count when logits run
  on loss tokens only). A new item can cost a one-off setup inside the step (PyTorch's cuDNN attention
  builds a plan per new sequence length: 44-65 ms per new image size in a Qwen3-VL vision tower on an H200,
  forward and again backward), so the runner warms every item before timing anything;
- ``warm(batch)``: run the batch untimed so that every such setup happens (reference: forward + backward,
  no gradient sync, no optimizer step, weights untouched; user step: one call);
- ``begin_step()``: reset per-step state (the CUDA peak-memory counter);
- ``flops(batch)``: model FLOPs and token counts of the batch (``vlmdata.audit.flops``);
- ``recover()``: after an out-of-memory error, drop gradients and cached blocks so the run can go on.

The reference workload takes the tuning decisions a sweep varies (``WORKLOAD_OPTIONS``):
``freeze_vision`` (vision tower and projector without gradients or optimizer state), ``recompute``
("none"; "selective": activation checkpointing of every attention and MoE block, decoder and vision;
"full": of every whole layer and vision block) and, under torchrun, ``parallel`` ("ddp": replicated
weights, gradients averaged after backward; "fsdp": PyTorch FSDP2 ``fully_shard`` of every decoder layer
and vision block, fp32 sharded weights computed in bf16, gradients reduce-scattered in fp32).
"""

from __future__ import annotations

from dataclasses import replace

import torch
from torch.utils.checkpoint import checkpoint

from vlmdata.audit.distributed import GradAllReduce, shard_fsdp
from vlmdata.audit.flops import step_flops
from vlmdata.audit.inputs import AuditError
from vlmdata.audit.model import IMAGE_TOKEN_ID, build_model, model_summary
from vlmdata.audit.step import LossForward, TrainStep
from vlmdata.audit.user_step import UserWorkload  # noqa: F401 - re-exported (the class lives in user_step)


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


def shape_items(batch: dict, loss_tokens: bool = False) -> frozenset:
    """The shapes a step on ``batch`` runs kernels for: ("tokens", B, S), ("image", t, h, w) per image,
    ("patches", total), and ("loss_tokens", n) when the lm_head runs on loss tokens only."""
    ids = torch.as_tensor(batch["input_ids"])
    items = {("tokens", *map(int, ids.shape))}
    grid = _visual(batch, "image_grid_thw")
    if grid is not None and len(grid):
        g = torch.as_tensor(grid).tolist()
        items.update(("image", *map(int, row)) for row in g)
        items.add(("patches", int(sum(t * h * w for t, h, w in g))))
    if loss_tokens:
        items.add(("loss_tokens", int((torch.as_tensor(batch["loss_mask"]) > 0).sum())))
    return frozenset(items)


RECOMPUTE = ("none", "selective", "full")
PARALLEL = ("ddp", "fsdp")
WORKLOAD_OPTIONS = ("freeze_vision", "recompute", "parallel")  # what a sweep may vary besides micro_batch_size


def _checkpointed(module) -> None:
    """Make ``module`` recompute its forward in backward (non-reentrant activation checkpointing)."""
    forward = module.forward

    def recomputed(*args, **kwargs):
        return checkpoint(forward, *args, use_reentrant=False, **kwargs)

    module.forward = recomputed


def apply_recompute(model, mode: str) -> int:
    """Activation checkpointing on the reference model; returns how many modules recompute.
    "selective": each decoder layer's attention and MoE block and each vision block's attention;
    "full": each whole decoder layer and vision block; "none": nothing."""
    if mode not in RECOMPUTE:
        raise AuditError(f"recompute must be one of {', '.join(RECOMPUTE)}, got {mode!r}")
    layers, blocks = model.model.language_model.layers, model.model.visual.blocks
    if mode == "full":
        targets = [*layers, *blocks]
    elif mode == "selective":
        targets = [m for layer in layers for m in (layer.self_attn, layer.mlp)] + [b.attn for b in blocks]
    else:
        targets = []
    for m in targets:
        _checkpointed(m)
    return len(targets)


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


class ReferenceWorkload:
    """The built-in Qwen3-VL-MoE model (``build_model``) trained by ``TrainStep``; gradients averaged over
    ranks under torchrun."""

    def __init__(
        self,
        preset: str,
        device: str,
        logits: str,
        dist=None,
        seed: int = 0,
        *,
        freeze_vision: bool = False,
        recompute: str = "none",
        parallel: str = "ddp",
    ):

        if parallel not in PARALLEL:
            raise AuditError(f"parallel must be one of {', '.join(PARALLEL)}, got {parallel!r}")
        fsdp = parallel == "fsdp" and dist is not None and dist.world_size > 1
        cuda = torch.device(device).type == "cuda"
        # FSDP keeps fp32 sharded weights and computes in bf16 (its mixed-precision policy)
        self.model = build_model(preset, device, dtype=torch.float32 if fsdp else None, seed=seed)
        if freeze_vision:  # vision tower + projector: no gradients, no optimizer state
            self.model.model.visual.requires_grad_(False)
        self.recomputed = apply_recompute(self.model, recompute)
        self.summary = model_summary(self.model)
        self.config, self.logits = self.model.config, logits
        self.options = {
            "freeze_vision": bool(freeze_vision),
            "recompute": recompute,
            "parallel": parallel if dist is not None and dist.world_size > 1 else None,
        }
        sync, optimizer, forward = None, None, None
        if fsdp:
            forward = LossForward(self.model, logits)
            shard_fsdp(forward, torch.bfloat16 if cuda else torch.float32)
            optimizer = torch.optim.AdamW(
                [p for p in self.model.parameters() if p.requires_grad], lr=1e-4, weight_decay=0.0
            )
        elif dist is not None and dist.world_size > 1:
            sync = GradAllReduce(self.model, dist)
        self.step = TrainStep(self.model, optimizer, logits=logits, after_backward=sync, forward_module=forward)
        self.name = f"reference:{preset}"

    def shape_items(self, batch: dict) -> frozenset:
        return shape_items(batch, loss_tokens=self.logits == "loss")

    def warm(self, batch: dict) -> None:
        self.step.warm(batch)

    def begin_step(self) -> None:
        self.step.reset_peak_memory()

    def __call__(self, batch: dict) -> dict:
        return self.step(batch)

    def recover(self) -> None:
        self.step.optimizer.zero_grad(set_to_none=True)
        if self.step.cuda:
            torch.cuda.empty_cache()

    def flops(self, batch: dict) -> dict:
        return step_flops(self.config, batch, logits=self.logits)

    def describe(self) -> dict:
        return {
            "kind": "reference",
            "name": self.name,
            "logits": self.logits,
            "model": self.summary,
            "options": self.options,
            "recomputed_modules": self.recomputed,
        }

    def close(self) -> None:
        self.step.close()
