"""Per-rank figures of a torchrun audit, merged: no torch (the report reads them from here).

``merge_ranks(per_rank)``: one record per step over all ranks (work summed, step and data-wait time of the
slowest rank, stage times averaged). ``stragglers(per_rank)``: a straggler is a rank whose visual tokens per
step exceed the step's cross-rank median by more than ``ratio`` while being the step's maximum: the
gradient all-reduce makes the others wait for it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from vlmdata.audit.analysis.metrics import FLOP_FIELDS, SUMMED
from vlmdata.audit.analysis.result_types import Records
from vlmdata.audit.workload.stages import FORWARD_STAGES

__all__ = ["merge_ranks", "stragglers"]


def merge_ranks(per_rank: Sequence[Records]) -> list[dict]:
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
        for k in (*SUMMED, "flops", *FLOP_FIELDS[1:], "patch_sq", "first_seen_shapes"):
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


def stragglers(per_rank: Sequence[Records], ratio: float = 1.10, min_fraction: float = 0.25) -> dict:
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
