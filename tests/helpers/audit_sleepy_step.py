"""User workloads for `vlmdata audit --step` tests: sleep instead of training."""

import time

from vlmdata.audit.workload.model import IMAGE_TOKEN_ID


def by_visual_tokens(batch):
    """Costs grow with visual tokens: image-free batches are fast, real ones slow."""
    time.sleep(0.003 + 0.0002 * int((batch["input_ids"] == IMAGE_TOKEN_ID).sum()))
    return {"flops": 1e9, "loss": 0.0}


def constant(batch):
    time.sleep(0.04)  # long enough that loader workers keep ahead of it


def per_step_overhead(batch, micro_batch_size=1, **options):
    """A fixed 20 ms per step plus 1 ms per sample: larger micro-batches win (sweep tests)."""
    time.sleep(0.02 + 0.001 * int(batch["input_ids"].shape[0]))
    return {"flops": 1e9, "loss": 0.0}
