"""Multi-GPU audit under torchrun: process group, DDP, per-rank figures, stragglers.

``torchrun --nproc-per-node N -m vlmdata audit --device cuda ...``: every rank builds the model (same
seed), wraps it in DDP (NCCL on GPU, gloo on CPU), reads its own share of each source (the loader
splits by ``torch.distributed`` rank) and records its steps; rank 0 gathers every rank's records,
merges them per step (work summed, step time = the slowest rank) and reports per-rank figures.

A straggler is a rank whose visual tokens per step exceed the step's cross-rank median by more than
``ratio`` while being the step's maximum: DDP's gradient all-reduce makes the others wait for it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import torch

FORWARD_STAGES = ("forward_other", "vision", "projector", "lm_forward", "lm_head_loss")


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
        kwargs = {"device_id": torch.device(device)} if cuda else {}
        dist.init_process_group(backend, **kwargs)
    return DistInfo(dist.get_rank(), dist.get_world_size(), local, device, backend)


def shutdown(info: DistInfo | None) -> None:
    import torch.distributed as dist

    if info is not None and dist.is_initialized():
        dist.destroy_process_group()


class _Core(torch.nn.Module):
    """Holds the decoder stack and lm_head so DDP syncs every parameter; forward = the inner model."""

    def __init__(self, inner, lm_head):
        super().__init__()
        self.inner, self.lm_head = inner, lm_head

    def forward(self, *args, **kwargs):
        return self.inner(*args, **kwargs)


class _InnerProxy:
    def __init__(self, inner, ddp):
        self._inner, self._ddp = inner, ddp

    def __call__(self, *args, **kwargs):
        return self._ddp(*args, **kwargs)  # through DDP.forward so the reducer prepares for backward

    def __getattr__(self, name):
        return getattr(self._inner, name)


class DDPModel:
    """What ``TrainStep`` sees: the model, with ``.model(...)`` going through DDP.  ``lm_head`` runs
    outside DDP's forward but is one of its parameters, so its gradient is all-reduced too."""

    def __init__(self, model, ddp):
        self._model, self.ddp = model, ddp
        self.model = _InnerProxy(model.model, ddp)

    def __getattr__(self, name):
        return getattr(self._model, name)


def ddp_model(model, info: DistInfo) -> DDPModel:
    """Wrap for DDP.  ``find_unused_parameters=True``: text-only (imagefree) batches leave the vision
    tower without gradients."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    core = _Core(model.model, model.lm_head)
    ids = [torch.device(info.device).index] if info.backend == "nccl" else None
    return DDPModel(model, DDP(core, device_ids=ids, find_unused_parameters=True))


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
        m = {"step": recs[0]["step"], "step_ms": max(r["step_ms"] for r in recs),
             "data_wait_ms": max(r["data_wait_ms"] for r in recs)}
        for k in ("samples", "images", "patches", "tokens_total", "tokens_useful", "tokens_visual",
                  "tokens_padding", "flops", "lm_flops", "vision_flops"):
            vals = [r.get(k) for r in recs]
            m[k] = None if any(v is None for v in vals) else sum(vals)
        stages = {k for r in recs for k in (r.get("times_ms") or {})}
        m["times_ms"] = {k: float(np.mean([(r.get("times_ms") or {}).get(k, 0.0) for r in recs])) for k in stages}
        peaks = [r.get("peak_mem_bytes") for r in recs if r.get("peak_mem_bytes") is not None]
        m["peak_mem_bytes"] = max(peaks) if peaks else None
        m["visual_tokens_per_sample"] = [v for r in recs for v in r.get("visual_tokens_per_sample") or []]
        merged.append(m)
    return merged


def stragglers(per_rank: list[list[dict]], ratio: float = 1.10, min_fraction: float = 0.25) -> dict:
    """Per-rank visual load and forward time; ranks flagged when, in at least ``min_fraction`` of the
    steps and 1.5x their fair share (1/world), they carry the most visual tokens and more than ``ratio``
    x the step's cross-rank median."""
    world = len(per_rank)
    vis = np.array([[r["tokens_visual"] for r in recs] for recs in per_rank], dtype=np.float64)  # [rank, step]
    fwd = np.array([[sum((r.get("times_ms") or {}).get(k, 0.0) for k in FORWARD_STAGES) for r in recs]
                    for recs in per_rank])
    step = np.array([[r["step_ms"] for r in recs] for recs in per_rank])
    med = np.median(vis, axis=0)
    is_max = vis == vis.max(axis=0, keepdims=True)
    straggling = is_max & (vis > ratio * np.maximum(med, 1e-9)) & (vis > 0)
    frac = straggling.mean(axis=1)
    mean_vis = vis.mean(axis=1)
    centre = float(np.median(mean_vis)) or 1.0
    per = [{"rank": r, "visual_tokens_per_step": float(mean_vis[r]), "relative_to_median": float(mean_vis[r] / centre),
            "straggler_step_fraction": float(frac[r]), "forward_ms_mean": float(fwd[r].mean()),
            "step_ms_median": float(np.median(step[r]))} for r in range(world)]
    stall = float((fwd.max(axis=0) - fwd.mean(axis=0)).sum() / step.max(axis=0).sum()) if step.size else 0.0
    imbalance = float(np.mean(vis.max(axis=0) / np.maximum(vis.mean(axis=0), 1e-9))) if vis.any() else 1.0
    return {"world_size": world, "ratio": ratio, "min_fraction": min_fraction, "per_rank": per,
            "flagged": [r for r in range(world) if frac[r] >= max(min_fraction, 1.5 / world)],
            "visual_imbalance": imbalance, "estimated_stall_fraction": stall}
