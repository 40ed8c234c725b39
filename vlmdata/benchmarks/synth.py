"""``vlmdata bench synth``: what a synthetic payload costs to make against what a real one costs to use.

On the same samples of DATASET, interleaved in rotating order over rounds (``timing``), one core:

* ``real-decode+preprocess`` (baseline): every image of the samples decoded and preprocessed for the
  model (``vlmdata.qwen.vision.preprocess_any``: Bridge's pre-resize, resize, normalise, patchify),
  the per-image work of a real training input pipeline;
* ``real-decode+preprocess-exact``: the same with the bit-exact Pillow path (``exact=True``), for reference;
* ``twin-generate``: the synthetic twin of every sample made fresh (``TwinMaker.twin``: text of the same
  token counts, images of the same size, format, quality and bytes: render + encode to target), what
  ``vlmdata synth`` and the audit's synthetic source pay per sample;
* ``twin-decode+preprocess``: the same preprocessing of the twins' images (made once before timing), so
  the ratio to the baseline says whether a twin costs the loader what the real sample does (goal ~1.0x).

Ratios are per round ``baseline CPU / contender CPU`` (> 1: cheaper than real decode + preprocess).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from vlmdata.benchmarks.loader import read_samples
from vlmdata.benchmarks.timing import BenchmarkError, Contender, interleave
from vlmdata.qwen.spec import BRIDGE_MAX_PIXELS, BRIDGE_MIN_PIXELS, SPECS, get_spec
from vlmdata.qwen.vision import preprocess_any
from vlmdata.synthetic.twin import TwinMaker


@dataclass(frozen=True)
class SynthBenchOptions:
    """Options of ``bench_synth``.

    Args:
        model: Qwen-VL family whose preprocessing is the baseline.
        samples: samples per contender per round (cycled over the dataset).
        rounds: timed rounds.
        warmup: untimed rounds first.
        seed: twin seed.
    """

    model: str = "qwen3-vl"
    samples: int = 32
    rounds: int = 5
    warmup: int = 1
    seed: int = 0

    def __post_init__(self):
        if self.model not in SPECS:
            raise BenchmarkError(f"model must be one of {', '.join(sorted(SPECS))}, got {self.model!r}")
        for name in ("samples", "rounds"):
            if int(getattr(self, name)) < 1:
                raise BenchmarkError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.warmup < 0:
            raise BenchmarkError(f"warmup must be >= 0, got {self.warmup}")


def bench_synth(
    dataset: str, opts: SynthBenchOptions | None = None, on_round: Callable[[int, int], object] | None = None
) -> dict:
    """Synthetic twin generation and twin preprocessing against real decode + preprocess, interleaved rounds.

    Args:
        dataset: vlmdata dataset folder (real data).
        opts: ``SynthBenchOptions``.
        on_round: progress callback (round done, rounds in all).

    Returns:
        ``{"benchmark": "synth", "dataset", "samples", "images_per_round", "rows": [...], "timing": summary}``.
    """
    opts = opts or SynthBenchOptions()
    if not os.path.exists(dataset):
        raise BenchmarkError(f"dataset: {dataset} not found")
    spec = get_spec(opts.model)
    real = read_samples(dataset)
    maker = TwinMaker(seed=opts.seed, model=opts.model)
    twins = [maker.twin(s) for s in real]  # made once: the loader-side contender reads these
    n = opts.samples

    def walker(items: list, fn: Callable[[Any], object]) -> Callable[[], None]:
        it = itertools.cycle(items)

        def run() -> None:
            for _ in range(n):
                fn(next(it))

        return run

    def preprocess(sample, exact: bool = False) -> None:
        for im in sample.images:
            preprocess_any(bytes(im), spec, BRIDGE_MIN_PIXELS, BRIDGE_MAX_PIXELS, exact=exact)

    contenders = [
        Contender("real-decode+preprocess", walker(real, preprocess), units=n),
        Contender("real-decode+preprocess-exact", walker(real, lambda s: preprocess(s, exact=True)), units=n),
        Contender("twin-generate", walker(real, maker.twin), units=n),
        Contender("twin-decode+preprocess", walker(twins, preprocess), units=n),
    ]
    result = interleave(contenders, rounds=opts.rounds, warmup=opts.warmup, on_round=on_round)
    summary = result.summary(baseline="real-decode+preprocess")
    rows = [
        {"name": name, "samples_per_cpu_s": c["per_cpu_s"]["median"], "ratio_cpu": c["ratio_cpu"]}
        for name, c in summary["contenders"].items()
    ]
    per_sample = sum(len(s.images) for s in real) / len(real)
    return {
        "benchmark": "synth",
        "dataset": dataset,
        "model": opts.model,
        "samples": n,
        "dataset_samples": len(real),
        "images_per_sample": per_sample,
        "cpu_count": os.cpu_count(),
        "rows": rows,
        "timing": summary,
    }
