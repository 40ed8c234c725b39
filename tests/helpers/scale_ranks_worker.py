"""One rank of tests/loaders/test_scale_ranks.py, started by torchrun (gloo, CPU).

    python -m torch.distributed.run --standalone --nproc-per-node 3 tests/helpers/scale_ranks_worker.py SOURCE OUT \
        [--workers 2] [--stop-after N] [--resume] [--sync]

Iterates one epoch of SOURCE through ``make_loader`` (rank and world from torch.distributed) and writes
OUT/rank-R.json: {"keys": sample keys in the order received, "batches", "steps", "dropped", "state"}.

--stop-after N: stop after N batches and save ``loader.state_dict()`` in OUT/state-R.json (a "crash").
--resume: load OUT/../STATE (``--state-dir``) before iterating (the restart, maybe with other workers).
--sync: a training loop's end of epoch: every step all-reduces "I have a batch" (MIN) and all ranks stop
    at the shortest rank's step count; the rest of this rank's epoch is drained locally as "dropped".
"""

import argparse
import json
import os

import torch
import torch.distributed as dist

from vlmdata.loaders import make_loader
from vlmdata.qwen.spec import load_qwen_tokenizer


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("source")
    ap.add_argument("out")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--stop-after", type=int, default=None)
    ap.add_argument("--resume", default=None, help="folder with state-R.json to resume from")
    ap.add_argument("--sync", action="store_true")
    ap.add_argument("--micro-batch-size", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    loader = make_loader(
        a.source,
        tokenizer=load_qwen_tokenizer(),
        micro_batch_size=a.micro_batch_size,
        seq_length=None,
        num_workers=a.workers,
        seed=11,
        min_pixels=32 * 32,
        max_pixels=64 * 64,
        prefetch_factor=1,
    )
    assert (loader.stream.rank, loader.stream.world) == (rank, world)
    if a.resume:
        with open(os.path.join(a.resume, f"state-{rank}.json")) as f:
            loader.load_state_dict(json.load(f))
    keys, dropped, batches, steps = [], [], 0, 0
    it = iter(loader)
    while True:
        batch = next(it, None)
        if a.sync:
            have = torch.tensor([0 if batch is None else 1])
            dist.all_reduce(have, op=dist.ReduceOp.MIN)
            if have.item() == 0:  # some rank's epoch is over: every rank stops at this step
                if batch is not None:
                    dropped += loader.last_keys
                    dropped += [k for _ in it for k in loader.last_keys]
                break
        elif batch is None:
            break
        keys += loader.last_keys
        batches += 1
        steps += 1
        if a.stop_after is not None and batches >= a.stop_after:
            with open(os.path.join(a.out, f"state-{rank}.json"), "w") as f:
                json.dump(loader.state_dict(), f)
            break
    with open(os.path.join(a.out, f"rank-{rank}.json"), "w") as f:
        json.dump(
            {
                "keys": keys,
                "batches": batches,
                "steps": steps,
                "dropped": dropped,
                "epoch_samples": loader.epoch_samples(),
            },
            f,
        )
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
