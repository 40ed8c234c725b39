"""Multi-GPU audit under torchrun: process group, DDP, per-rank figures, stragglers.

``torchrun --nproc-per-node N -m vlmdata audit --device cuda ...``: every rank builds the model (same
seed), averages gradients over ranks after backward (NCCL on GPU, gloo on CPU), reads its own share of each source (the loader
splits by ``torch.distributed`` rank) and records its steps; rank 0 gathers every rank's records,
merges them per step (work summed, step time = the slowest rank) and reports per-rank figures.

A straggler is a rank whose visual tokens per step exceed the step's cross-rank median by more than
``ratio`` while being the step's maximum: DDP's gradient all-reduce makes the others wait for it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from vlmdata.audit.step import FORWARD_STAGES


@dataclass
class DistInfo:
    rank: int
    world_size: int
    local_rank: int
    device: str
    backend: str

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def init_distributed(device: str) -> DistInfo | None:
    """Initialise the process group when launched by torchrun (``WORLD_SIZE`` > 1); else None."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return None
    import torch.distributed as dist

    local = int(os.environ.get("LOCAL_RANK", "0"))
    cuda = torch.device(device).type == "cuda"
    if cuda:
        torch.cuda.set_device(local)
        device = f"cuda:{local}"
    backend = "nccl" if cuda else "gloo"
    if not dist.is_initialized():
        kwargs: dict[str, Any] = {"device_id": torch.device(device)} if cuda else {}
        dist.init_process_group(backend, **kwargs)
    return DistInfo(dist.get_rank(), dist.get_world_size(), local, device, backend)


def _reduce(info: DistInfo | None, value: float, op) -> float:
    if info is None:
        return value
    import torch.distributed as dist

    t = torch.tensor([float(value)], dtype=torch.float64, device=info.device if info.backend == "nccl" else "cpu")
    dist.all_reduce(t, op=op)
    return float(t.item())


def agree_max(info: DistInfo | None, value: float) -> float:
    """The largest ``value`` over all ranks (``value`` itself without torchrun)."""
    import torch.distributed as dist

    return _reduce(info, value, dist.ReduceOp.MAX) if info is not None else value


def agree_min(info: DistInfo | None, value: float) -> float:
    """The smallest ``value`` over all ranks (``value`` itself without torchrun)."""
    import torch.distributed as dist

    return _reduce(info, value, dist.ReduceOp.MIN) if info is not None else value


def shutdown(info: DistInfo | None) -> None:
    import torch.distributed as dist

    if info is not None and dist.is_initialized():
        dist.destroy_process_group()


class GradAllReduce:
    """Average every gradient over the data-parallel ranks after backward, in flat buckets.

    Explicit rather than DDP: image-free batches leave the vision tower without gradients and the
    step applies ``lm_head`` outside the model's forward, two things DDP's reducer cannot follow.
    Parameters without a gradient contribute zeros, so every rank reduces the same buckets. The
    all-reduce runs after backward (no overlap), so it shows up in the backward stage.
    """

    def __init__(self, model, info: DistInfo, bucket_bytes: int = 256 << 20):
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.world = info.world_size
        self.bucket_bytes = bucket_bytes

    def _buckets(self):
        bucket, size = [], 0
        for p in self.params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            if bucket and (p.grad.dtype != bucket[0].dtype or size + p.grad.nbytes > self.bucket_bytes):
                yield bucket
                bucket, size = [], 0
            bucket.append(p.grad)
            size += p.grad.nbytes
        if bucket:
            yield bucket

    def __call__(self) -> None:
        import torch.distributed as dist
        from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

        for bucket in self._buckets():
            flat = _flatten_dense_tensors(bucket)
            dist.all_reduce(flat)
            flat.div_(self.world)
            for g, synced in zip(bucket, _unflatten_dense_tensors(flat, bucket)):
                g.copy_(synced)


def shard_fsdp(forward_module, param_dtype: torch.dtype) -> None:
    """PyTorch FSDP2 on the reference step (``step.LossForward`` around the model): each vision block and
    decoder layer its own unit, the vision tower's remaining parameters one unit, and the step's forward the
    root (the token embedding, final norm and ``lm_head``: they run outside the forward of the modules that
    hold them). Weights stay fp32 and sharded; compute runs in ``param_dtype``; gradients are
    reduce-scattered in fp32."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    model = forward_module.model
    mp = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=torch.float32)
    for block in model.model.visual.blocks:
        fully_shard(block, mp_policy=mp)
    for layer in model.model.language_model.layers:
        fully_shard(layer, mp_policy=mp)
    fully_shard(model.model.visual, mp_policy=mp)
    fully_shard(forward_module, mp_policy=mp)


def gather(obj, info: DistInfo | None) -> list:
    """Every rank's ``obj`` (a list indexed by rank) on every rank; ``[obj]`` without a process group."""
    if info is None:
        return [obj]
    import torch.distributed as dist

    out = [None] * info.world_size
    dist.all_gather_object(out, obj)
    return out


def merge_ranks(per_rank: list[list[dict]]) -> list[dict]:
    """One record per step over all ranks: work summed, step and data-wait time of the slowest rank,
    stage times averaged, visual tokens per sample concatenated."""
    merged = []
    for recs in zip(*per_rank):
        m = {
            "step": recs[0]["step"],
            "round": recs[0].get("round"),
            "step_ms": max(r["step_ms"] for r in recs),
            "data_wait_ms": max(r["data_wait_ms"] for r in recs),
            "wait_kind": "epoch_boundary" if any(r.get("wait_kind") == "epoch_boundary" for r in recs) else "steady",
        }
        for k in (
            "samples",
            "images",
            "patches",
            "tokens_total",
            "tokens_nonpad",
            "tokens_loss",
            "tokens_visual",
            "tokens_padding",
            "flops",
            "lm_flops",
            "lm_layers_flops",
            "lm_head_flops",
            "vision_flops",
            "projector_flops",
            "patch_sq",
            "first_seen_shapes",
        ):
            vals = [r.get(k) for r in recs]
            m[k] = None if any(v is None for v in vals) else sum(vals)
        stages = {k for r in recs for k in (r.get("times_ms") or {})}
        m["times_ms"] = {k: float(np.mean([(r.get("times_ms") or {}).get(k, 0.0) for r in recs])) for k in stages}
        peaks = [r.get("peak_mem_bytes") for r in recs if r.get("peak_mem_bytes") is not None]
        m["peak_mem_bytes"] = max(peaks) if peaks else None
        m["visual_tokens_per_sample"] = [v for r in recs for v in r.get("visual_tokens_per_sample") or []]
        m["micro_batches"] = recs[0].get("micro_batches")
        m["micro_per_rank"] = [r.get("micro") for r in recs]  # per-rank micro-batch times (stragglers)
        m["loader_wait_ms"] = max(r.get("loader_wait_ms") or 0.0 for r in recs)
        merged.append(m)
    return merged


def stragglers(per_rank: list[list[dict]], ratio: float = 1.10, min_fraction: float = 0.25) -> dict:
    """Per-rank visual load and forward time; ranks flagged when, in at least ``min_fraction`` of the
    steps and 1.5x their fair share (1/world), they carry the most visual tokens and more than ``ratio``
    x the step's cross-rank median."""
    world = len(per_rank)
    vis = np.array([[r["tokens_visual"] for r in recs] for recs in per_rank], dtype=np.float64)  # [rank, step]
    fwd = np.array(
        [[sum((r.get("times_ms") or {}).get(k, 0.0) for k in FORWARD_STAGES) for r in recs] for recs in per_rank]
    )
    step = np.array([[r["step_ms"] for r in recs] for recs in per_rank])
    med = np.median(vis, axis=0)
    is_max = vis == vis.max(axis=0, keepdims=True)
    straggling = is_max & (vis > ratio * np.maximum(med, 1e-9)) & (vis > 0)
    frac = straggling.mean(axis=1)
    mean_vis = vis.mean(axis=1)
    centre = float(np.median(mean_vis)) or 1.0
    per = [
        {
            "rank": r,
            "visual_tokens_per_step": float(mean_vis[r]),
            "relative_to_median": float(mean_vis[r] / centre),
            "straggler_step_fraction": float(frac[r]),
            "forward_ms_mean": float(fwd[r].mean()),
            "step_ms_median": float(np.median(step[r])),
        }
        for r in range(world)
    ]
    stall = float((fwd.max(axis=0) - fwd.mean(axis=0)).sum() / step.max(axis=0).sum()) if step.size else 0.0
    imbalance = float(np.mean(vis.max(axis=0) / np.maximum(vis.mean(axis=0), 1e-9))) if vis.any() else 1.0
    return {
        "world_size": world,
        "ratio": ratio,
        "min_fraction": min_fraction,
        "per_rank": per,
        "flagged": [r for r in range(world) if frac[r] >= max(min_fraction, 1.5 / world)],
        "visual_imbalance": imbalance,
        "estimated_stall_fraction": stall,
    }
