"""Expert-parallel all-to-all measured at the message sizes ``vlmdata.audit.analysis.compose`` models (multi-GPU).

    torchrun --nproc-per-node 8 bench/a2a_bench.py [--tokens 8192] [--top-k 8] [--hidden 2048] [--rounds 20]

Each rank sends every peer its share of ``tokens * top_k * hidden * 2`` bytes (bf16 hidden states routed
uniformly: (EP-1)/EP of them leave the GPU), with ``torch.distributed.all_to_all_single`` (NCCL on GPUs, gloo
on CPU for a dry run). Prints the median time of one call, the per-GPU bandwidth it implies (bytes leaving
the GPU / time) and the composition's prediction at ``--link-gbps`` with its per-call latency, so the
formula's bandwidth parameter can be set from the measurement (``vlmdata audit --link-gbps``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
import torch.distributed as dist


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, nargs="+", default=[1024, 4096, 8192])
    ap.add_argument("--top-k", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--link-gbps", type=float, default=200.0)
    ap.add_argument("--latency-us", type=float, default=25.0)
    args = ap.parse_args()
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group("nccl" if cuda else "gloo")
    ep, rank = dist.get_world_size(), dist.get_rank()
    dev = torch.device("cuda") if cuda else torch.device("cpu")
    for tokens in args.tokens:
        n = tokens * args.top_k * args.hidden  # bf16 elements routed by this rank
        n -= n % ep
        x = torch.randn(n, device=dev, dtype=torch.bfloat16 if cuda else torch.float32)
        y = torch.empty_like(x)
        for _ in range(3):
            dist.all_to_all_single(y, x)
        times = []
        for _ in range(args.rounds):
            dist.barrier()
            if cuda:
                torch.cuda.synchronize()
            t = time.perf_counter()
            dist.all_to_all_single(y, x)
            if cuda:
                torch.cuda.synchronize()
            times.append((time.perf_counter() - t) * 1e3)
        med = statistics.median(times)
        leaving = n * 2 * (ep - 1) / ep
        model = leaving / (args.link_gbps * 1e9) * 1e3 + args.latency_us / 1e3
        if rank == 0:
            print(
                f"EP {ep} tokens {tokens}: {leaving / 1e6:.1f} MB leave each GPU per call; median {med:.3f} ms "
                f"(min {min(times):.3f}, max {max(times):.3f}) = {leaving / med / 1e6:.0f} GB/s; "
                f"model at {args.link_gbps:.0f} GB/s: {model:.3f} ms ({model / med - 1:+.0%})"
            )
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
