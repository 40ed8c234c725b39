"""Simulate how shards spread over data-parallel ranks x dataloader workers, and the imbalance that follows.

A synthetic 10M-sample manifest with realistic visual-token counts (photos: log-normal around COCO's
~300 Qwen-VL tokens; a long tail of documents/screenshots around 1,500 tokens, capped at 16,384) is cut
into shards of S samples. Shards go to ranks x workers the way a WebDataset-style loader assigns them
(global worker g = rank*W + w gets shards g, g + R*W, ...); each rank's DataLoader takes micro-batches
of B samples from its workers in turn. Printed per shard size:

- shards per worker slot, samples per rank (min/mean/max), and the steps every rank can make before the
  first one runs dry (the rest of the epoch is dropped, or ranks would wait on a collective: a hang);
- visual tokens per rank per step: max/mean across ranks, median and p99 over steps.

A last row splits by sample ranges instead of whole shards (what Energon does with its index).

    python bench/rank_planning.py                       # 10M samples, 1,024 ranks x 8 workers, B=4
    python bench/rank_planning.py --samples 1000000 --ranks 128
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def synthetic_tokens(n: int, doc_frac: float, seed: int, block: int) -> np.ndarray:
    """Visual tokens per sample: photos ~LogN(ln 300, 0.35), documents ~LogN(ln 1500, 0.6), in source blocks."""
    rng = np.random.default_rng(seed)
    photos = rng.lognormal(np.log(300), 0.35, n)
    docs = rng.lognormal(np.log(1500), 0.6, n)
    # the manifest is a concatenation of sources: blocks of `block` samples from one source each
    is_doc_block = rng.random(-(-n // block)) < doc_frac
    is_doc = np.repeat(is_doc_block, block)[:n]
    tokens = np.where(is_doc, docs, photos)
    return np.clip(np.rint(tokens), 64, 16384).astype(np.int64)


def simulate(tokens: np.ndarray, ranks: int, workers: int, batch: int, shard: int | None) -> dict:
    n = len(tokens)
    slots = ranks * workers
    if shard is None:  # split by sample ranges: slot g gets samples [g*n/slots, (g+1)*n/slots)
        bounds = (np.arange(slots + 1) * n) // slots
        slot_ranges = [[(bounds[g], bounds[g + 1])] for g in range(slots)]
        n_shards = None
    else:
        n_shards = -(-n // shard)
        slot_ranges = [[(i * shard, min(n, (i + 1) * shard)) for i in range(g, n_shards, slots)] for g in range(slots)]
    rank_samples = np.zeros(ranks, dtype=np.int64)
    rank_batches = []  # per rank: token sum of each micro-batch, in the order the DataLoader yields them
    for r in range(ranks):
        keys, sums = [], []
        for w in range(workers):
            ranges = slot_ranges[r * workers + w]
            m = sum(b - a for a, b in ranges)
            rank_samples[r] += m
            if m == 0:
                continue
            idx = np.concatenate([np.arange(a, b) for a, b in ranges])
            starts = np.arange(0, m, batch)
            # token sum of samples idx[starts[k]:ends[k]]: contiguous within a range, so use per-sample tokens
            t = tokens[idx]
            s = np.add.reduceat(t, starts)
            keys.append(np.arange(len(starts)) * workers + w)  # round-robin over workers, skipping exhausted ones
            sums.append(s)
        if not keys:  # fewer shards than slots: this rank gets nothing at all
            rank_batches.append(np.zeros(0, dtype=np.int64))
            continue
        k = np.concatenate(keys)
        rank_batches.append(np.concatenate(sums)[np.argsort(k, kind="stable")])
    steps = np.array([len(b) for b in rank_batches])
    common = int(steps.min())
    per_step = np.stack([b[:common] for b in rank_batches])  # ranks x common steps
    ratio = per_step.max(axis=0) / per_step.mean(axis=0) if common else np.array([np.nan])
    dropped = 1 - (common * ranks) / steps.sum()
    return {
        "shards": n_shards,
        "shards_per_slot": (n_shards / slots) if n_shards else None,
        "rank_samples": (int(rank_samples.min()), float(rank_samples.mean()), int(rank_samples.max())),
        "steps": (common, int(steps.max())),
        "dropped": dropped,
        "tok_ratio_p50": float(np.median(ratio)),
        "tok_ratio_p99": float(np.percentile(ratio, 99)),
        "tok_mean": float(per_step.mean()) if common else float("nan"),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=10_000_000)
    ap.add_argument("--ranks", type=int, default=1024)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--batch", type=int, default=4, help="micro-batch size per rank")
    ap.add_argument("--doc-frac", type=float, default=0.15, help="fraction of document-like samples")
    ap.add_argument("--block", type=int, default=50_000, help="samples per source block in manifest order")
    ap.add_argument("--shard-sizes", default="1000,1221,610,305,100", help="samples per shard to try (comma separated)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    t0 = time.time()
    tokens = synthetic_tokens(args.samples, args.doc_frac, args.seed, args.block)
    slots = args.ranks * args.workers
    print(
        f"manifest: {args.samples:,} samples, visual tokens mean {tokens.mean():.0f}, median {np.median(tokens):.0f}, "
        f"p99 {np.percentile(tokens, 99):.0f}, max {tokens.max()}; {args.ranks} ranks x {args.workers} workers = "
        f"{slots:,} slots; micro-batch {args.batch}; manifest in source blocks of {args.block:,}"
    )
    hdr = (
        f"{'assignment':<26}{'shards':>9}{'shards/slot':>12}{'samples/rank min/mean/max':>30}"
        f"{'steps common/max':>18}{'dropped':>9}{'tok max/mean p50':>18}{'p99':>7}"
    )
    print(hdr)
    print("-" * len(hdr))
    sizes = [int(s) for s in args.shard_sizes.split(",") if s]
    for shard in sizes + [None]:
        res = simulate(tokens, args.ranks, args.workers, args.batch, shard)
        name = f"{shard} samples/shard" if shard else "split by sample ranges"
        lo, mean, hi = res["rank_samples"]
        per_slot = f"{res['shards_per_slot']:.2f}" if res["shards"] else "-"
        spr = f"{lo:,}/{mean:,.0f}/{hi:,}"
        steps = f"{res['steps'][0]}/{res['steps'][1]}"
        print(
            f"{name:<26}{res['shards'] or '-':>9}{per_slot:>12}{spr:>30}{steps:>18}"
            f"{res['dropped']:>8.1%}{res['tok_ratio_p50']:>18.2f}{res['tok_ratio_p99']:>7.2f}"
        )
    print(f"shuffled manifest (no source blocks), {sizes[-1]} samples/shard:")
    rng = np.random.default_rng(args.seed + 1)
    res = simulate(rng.permutation(tokens), args.ranks, args.workers, args.batch, sizes[-1])
    print(f"  tok max/mean p50 {res['tok_ratio_p50']:.2f} p99 {res['tok_ratio_p99']:.2f}, dropped {res['dropped']:.1%}")
    print(f"({time.time() - t0:.0f} s)")


if __name__ == "__main__":
    main()
