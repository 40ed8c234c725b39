"""The loader's per-batch bookkeeping at scale: ``Consumed.plus`` by index arithmetic vs by listing.

    PYTHONPATH=. python bench/loader_bookkeeping.py DATASET [--rounds 5] [--batches 300]

Every batch the training process folds each worker's count into the resume state (``VlmLoader._advance``
-> ``Consumed.plus``). The first version listed the rank's remaining positions for that: O(samples per
rank) per batch. Contenders, interleaved in rotating order, each a persistent ``make_loader`` iterator over
DATASET in ``images="shapes"`` mode (no decode, so the bookkeeping shows), ``--batches`` batches a round:

* ``index``: the current ``Consumed.plus``;
* ``listing``: the same loader with ``plus`` by listing ``remaining(n)`` (the definition, kept in the test).

Prints CPU ms per batch, min/median/max over rounds, their per-round ratio, and a direct timing of one
``plus`` call at 2k, 100k and 1M positions per rank.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from vlmdata.loaders import pipeline  # noqa: E402
from vlmdata.loaders.api import make_loader  # noqa: E402

INDEX = pipeline.Consumed.plus


def by_listing(self, n, num_workers, counts, epoch=0):
    rem = self.remaining(n)
    step = pipeline.worker_slice
    new = [p for w, c in enumerate(counts) for p in rem[step(w, epoch, num_workers) :: num_workers][:c]]
    return self.plus_positions(new) if new else self


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dataset")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--batches", type=int, default=300)
    args = ap.parse_args()
    print(f"load {os.getloadavg()}")
    impls = {"index": INDEX, "listing": by_listing}
    its = {}
    for k, f in impls.items():
        pipeline.Consumed.plus = f
        its[k] = iter(make_loader(args.dataset, micro_batch_size=8, seq_length=1024, images="shapes", num_epochs=None))
        for _ in range(20):  # warm: index scan, tokenizer, first shapes
            next(its[k])
    ms: dict[str, list[float]] = {k: [] for k in impls}
    names = list(impls)
    for r in range(args.rounds):
        for k in names[r % 2 :] + names[: r % 2]:
            pipeline.Consumed.plus = impls[k]
            t = time.process_time()
            for _ in range(args.batches):
                next(its[k])
            ms[k].append((time.process_time() - t) / args.batches * 1e3)
    pipeline.Consumed.plus = INDEX
    ratios = [a / b for a, b in zip(ms["listing"], ms["index"])]
    for k, v in ms.items():
        print(f"{k:8s} CPU ms per batch: min {min(v):.3f} median {statistics.median(v):.3f} max {max(v):.3f}")
    print(
        f"listing / index per round: min {min(ratios):.2f}x median {statistics.median(ratios):.2f}x max {max(ratios):.2f}x"
    )
    for n in (2_000, 100_000, 1_000_000):
        row = []
        for f in (INDEX, by_listing):
            c = pipeline.Consumed()
            t = time.process_time()
            for k in range(20):
                f(c, n, 2, [k * 10, k * 10], 0)
            row.append((time.process_time() - t) / 20 * 1e3)
        print(f"one plus() at {n:>9,} positions: index {row[0]:.4f} ms, listing {row[1]:.3f} ms")
    print(f"load {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
