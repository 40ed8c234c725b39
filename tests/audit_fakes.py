"""Test doubles for the audit: a workload that costs a fixed, known time per step on a fake clock, plus a
one-off charge the first time it meets each shape item (like cuDNN building a plan per new sequence length)."""

from vlmdata.audit.flops import count_tokens
from vlmdata.audit.model import IMAGE_TOKEN_ID
from vlmdata.audit.workloads import shape_items

SMALL_PIXELS = {"min_pixels": 32 * 32, "max_pixels": 128 * 128}  # tiny grids keep the tests fast


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class ShapeCostWorkload:
    """Step cost (ms) = 10 + patches/100 + tokens/1000, plus ``first_seen_ms`` per shape item never met
    before (in ``warm`` or a step). Advances ``clock`` instead of sleeping."""

    def __init__(self, clock: FakeClock, first_seen_ms: float = 40.0):
        self.clock, self.first_seen_ms = clock, first_seen_ms
        self.seen: set = set()
        self.charged_in_warm = 0
        self.step_charges: list[int] = []  # new shape items met by each call (the first is the warm-up full step)

    def _cost(self, batch) -> tuple[float, int]:
        items = shape_items(batch)
        new = len(items - self.seen)
        self.seen |= items
        ids = batch["input_ids"]
        grid = batch["visual_inputs"].image_grid_thw
        patches = 0 if grid is None else int(grid.prod(-1).sum())
        return 10 + patches / 100 + ids.numel() / 1000 + self.first_seen_ms * new, new

    def shape_items(self, batch):
        return shape_items(batch)

    def warm(self, batch):
        ms, new = self._cost(batch)
        self.charged_in_warm += new
        self.clock.now += ms / 1e3

    def begin_step(self):
        pass

    def __call__(self, batch):
        ms, new = self._cost(batch)
        self.step_charges.append(new)
        self.clock.now += ms / 1e3
        return {"times_ms": {"step": ms, "total": ms}, "wall_ms": ms, "peak_mem_bytes": None, "loss": 0.0}

    def flops(self, batch):
        out = count_tokens(batch, IMAGE_TOKEN_ID)
        out["total_flops"] = 1e9 * (1 + out["tokens_visual"] / 100)
        return out

    def describe(self):
        return {"kind": "fake", "name": "shape-cost"}

    def close(self):
        pass
