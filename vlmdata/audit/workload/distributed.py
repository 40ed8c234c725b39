"""Multi-GPU audit under torchrun: the process group, gradient averaging (or FSDP2), agreement between ranks.

``torchrun --nproc-per-node N -m vlmdata audit --device cuda ...``: every rank builds the model (same
seed), averages gradients over ranks after backward (NCCL on GPU, gloo on CPU), reads its own share of each
source (the loader splits by ``torch.distributed`` rank) and records its steps; rank 0 gathers every rank's
records (``gather``), and ``vlmdata.audit.analysis.ranks`` merges them per step (work summed, step time = the slowest
rank) and flags straggler ranks.
``agree_max`` / ``agree_min`` make every rank take one decision (the stop rule, the warm-up count).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch

from vlmdata.errors import OptionsError
from vlmdata.options_util import env_int


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
    if env_int("WORLD_SIZE", 1, low=1) <= 1:
        return None
    import torch.distributed as dist

    local = env_int("LOCAL_RANK", 0)
    cuda = torch.device(device).type == "cuda"
    if cuda:
        torch.cuda.set_device(local)
        device = f"cuda:{local}"
    backend = "nccl" if cuda else "gloo"
    if not dist.is_initialized():
        kwargs: dict[str, Any] = {"device_id": torch.device(device)} if cuda else {}
        try:
            dist.init_process_group(backend, **kwargs)
        except ValueError as e:  # torch's env:// rendezvous: RANK, MASTER_ADDR or MASTER_PORT not set
            raise OptionsError(
                f"WORLD_SIZE={os.environ['WORLD_SIZE']} but torch.distributed cannot start ({e}): "
                "launch with torchrun, or unset WORLD_SIZE for one process"
            ) from None
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
