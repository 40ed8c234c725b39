"""Test doubles for the knob effects: a workload whose cost and memory per sample follow known formulas of
the sweep's knobs, on a fake clock; and noisy step records of a grid drawn with a seed.

``KnobCostWorkload``: per sample ``TEXT_MS + OVERHEAD_MS / micro_batch_size`` plus, for a sample with an
image, ``VISION_MS`` (half of it with the vision tower frozen: no vision backward). Every real sample has an
image, so each configuration's samples/s is the same in every step (its intervals are exact), and an
image-free batch pays no vision cost: the image-free mock cannot see freezing. Peak memory per step:
``BASE_GB + rows * (TEXT_GB + image rows * IMAGE_GB (FROZEN_IMAGE_GB when frozen))``.
"""

import math

import numpy as np

from vlmdata.audit.analysis.metrics import rate
from vlmdata.audit.workload.flops import count_tokens
from vlmdata.audit.workload.model import IMAGE_TOKEN_ID

TEXT_MS, OVERHEAD_MS, VISION_MS = 40.0, 10.0, 6.0
BASE_GB, TEXT_GB, IMAGE_GB, FROZEN_IMAGE_GB = 30.0, 5.0, 40.0, 22.0


def sample_ms(micro_batch_size: int, frozen: bool, image: bool) -> float:
    """The known cost of one sample (module docstring)."""
    return TEXT_MS + OVERHEAD_MS / micro_batch_size + (VISION_MS * (0.5 if frozen else 1.0) if image else 0.0)


def peak_gb(rows: int, image_rows: int, frozen: bool) -> float:
    return BASE_GB + rows * TEXT_GB + image_rows * (FROZEN_IMAGE_GB if frozen else IMAGE_GB)


class KnobCostWorkload:
    """One micro-batch per call; advances ``clock`` by the known cost (module docstring)."""

    def __init__(self, clock, values: dict):
        self.clock = clock
        self.mbs = int(values.get("micro_batch_size", 1))
        self.frozen = bool(values.get("freeze_vision", False))

    def shape_items(self, batch):
        return set()

    def warm(self, batch):
        pass

    def begin_step(self):
        pass

    def __call__(self, batch):
        ids = batch["input_ids"]
        images = (ids == IMAGE_TOKEN_ID).any(1)
        rows, image_rows = int(ids.shape[0]), int(images.sum())
        ms = sum(sample_ms(self.mbs, self.frozen, bool(i)) for i in images)
        self.clock.now += ms / 1e3
        peak = peak_gb(rows, image_rows, self.frozen) * 1e9
        return {"times_ms": {"step": ms, "total": ms}, "wall_ms": ms, "peak_mem_bytes": peak, "loss": 0.0}

    def flops(self, batch):
        return {**count_tokens(batch, IMAGE_TOKEN_ID), "total_flops": 1e9}

    def describe(self):
        return {"kind": "fake", "name": "knob-cost"}

    def recover(self):
        pass

    def close(self):
        pass


def noisy_grid(seed: int, *, steps: int = 12, cv: float = 0.03, samples: int = 8) -> list[dict]:
    """A freeze_vision x micro_batch_size grid on real and imagefree as ``decide_configs`` takes it: each step
    costs ``samples * sample_ms(...)`` times a round factor both sources share (the host, paired steps) and
    a factor of its own, both log-normal with ``cv``; drawn with ``seed``."""
    rng = np.random.default_rng(seed)
    configs = []
    for frozen in (False, True):
        for mbs in (1, 2):
            shared = np.exp(rng.normal(0, cv / math.sqrt(2), steps))
            sources = {}
            for name, image in (("imagefree", False), ("real", True)):
                own = np.exp(rng.normal(0, cv / math.sqrt(2), steps))
                ms = samples * sample_ms(mbs, frozen, image) * shared * own
                recs = [
                    {
                        "step_ms": float(t),
                        "samples": samples,
                        "tokens_nonpad": samples * 300,
                        "tokens_total": samples * 512,
                        "peak_mem_bytes": peak_gb(mbs, mbs if image else 0, frozen) * 1e9,
                    }
                    for t in ms
                ]
                rates = {m: rate(recs, m) for m in ("samples_per_s", "nonpad_tokens_per_s")}
                sources[name] = {"oom": False, "rates": rates, "peak_mem_bytes": recs[0]["peak_mem_bytes"]}
                sources[name]["steps"] = recs
            configs.append(
                {"values": {"freeze_vision": frozen, "micro_batch_size": mbs}, "sources": sources, "paired": True}
            )
    return configs
