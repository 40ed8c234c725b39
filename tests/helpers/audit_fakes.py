"""Test doubles for the audit: a workload that costs a fixed, known time per step on a fake clock, plus a
one-off charge the first time it meets each shape item (like cuDNN building a plan per new sequence length)."""

from vlmdata.audit.workload.batch_shapes import VISION_ITEMS
from vlmdata.audit.workload.flops import count_tokens
from vlmdata.audit.workload.model import IMAGE_TOKEN_ID
from vlmdata.audit.workload.workloads import shape_items

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


class TowerWarmWorkload(ShapeCostWorkload):
    """``ShapeCostWorkload`` with the reference workload's ``warm_vision``: the tower alone costs patches/100 ms
    plus the first-seen charge of its own new items, and counts its calls."""

    def __init__(self, clock: FakeClock, first_seen_ms: float = 40.0):
        super().__init__(clock, first_seen_ms)
        self.tower_warms = 0
        self.full_warms = 0

    def warm(self, batch):
        self.full_warms += 1
        super().warm(batch)

    def warm_vision(self, batch) -> bool:
        grid = batch["visual_inputs"].image_grid_thw
        if grid is None:
            return False
        items = {i for i in shape_items(batch) if i[0] in VISION_ITEMS}
        new = len(items - self.seen)
        self.seen |= items
        self.charged_in_warm += new
        self.tower_warms += 1
        self.clock.now += (int(grid.prod(-1).sum()) / 100 + self.first_seen_ms * new) / 1e3
        return True


class MemoryBudgetWorkload(ShapeCostWorkload):
    """``ShapeCostWorkload`` that runs out of memory (``torch.OutOfMemoryError``) on a batch of more than
    ``max_images`` images, in a warm-up pass or a step, like a card too small for the batch."""

    def __init__(self, clock: FakeClock, max_images: int):
        super().__init__(clock)
        self.max_images = max_images

    def _check(self, batch):
        import torch

        grid = batch["visual_inputs"].image_grid_thw
        if grid is not None and len(grid) > self.max_images:
            raise torch.OutOfMemoryError(f"fake: {len(grid)} images > {self.max_images}")

    def warm(self, batch):
        self._check(batch)
        super().warm(batch)

    def __call__(self, batch):
        self._check(batch)
        return super().__call__(batch)

    def recover(self):
        pass


def make_tiny_batch(grids_per_sample=(((1, 8, 12),), ((1, 12, 8), (1, 4, 4))), seq_length=256):
    """A Bridge-format batch for the reference model: Qwen chat tokens, image pad runs, random pixels."""
    import torch

    from vlmdata.audit.workload.model import PAD_TOKEN_ID, VISION_END_TOKEN_ID, VISION_START_TOKEN_ID
    from vlmdata.qwen.spec import load_qwen_tokenizer

    tok = load_qwen_tokenizer()
    prompt = tok.encode("user\nDescribe this image.", add_special_tokens=False)
    answer = tok.encode("A cat sits on a wooden table next to a cup of coffee.", add_special_tokens=False)
    im_start, im_end = 151644, 151645
    rows = []
    for grids in grids_per_sample:
        ids = [im_start]
        for t, h, w in grids:
            ids += [VISION_START_TOKEN_ID] + [IMAGE_TOKEN_ID] * (t * h * w // 4) + [VISION_END_TOKEN_ID]
        ids += prompt + [im_end, im_start]
        a0 = len(ids)
        ids += answer + [im_end]
        rows.append((ids, a0))
    B, S = len(rows), seq_length
    input_ids = torch.full((B, S), PAD_TOKEN_ID, dtype=torch.int64)
    labels = torch.full((B, S), -100, dtype=torch.int64)
    for b, (ids, a0) in enumerate(rows):
        input_ids[b, : len(ids)] = torch.tensor(ids)
        labels[b, a0 - 1 : len(ids) - 1] = torch.tensor(ids[a0:])
    grids = [g for gs in grids_per_sample for g in gs]
    grid = torch.tensor(grids, dtype=torch.int64)
    pv = torch.randn(int(grid.prod(-1).sum()), 1536, generator=torch.Generator().manual_seed(0))
    return {
        "input_ids": input_ids,
        "labels": labels,
        "loss_mask": (labels != -100).float(),
        "position_ids": torch.arange(S).expand(B, S).clone(),
        "visual_inputs": {"pixel_values": pv, "image_grid_thw": grid},
    }
