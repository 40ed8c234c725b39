"""A small stand-in for ``vlmdata.loaders.make_loader`` used by the audit tests: Bridge-format batches
built from the shipped Qwen tokenizer and simple tensors (random pixel values, fixed small grids)."""

from functools import lru_cache

import torch

from vlmdata.audit.model import IMAGE_TOKEN_ID, PAD_TOKEN_ID, VISION_END_TOKEN_ID, VISION_START_TOKEN_ID

IM_START, IM_END = 151644, 151645
GRIDS = {"imagefree": [[]], "bridge-noise": [[(1, 8, 8)]], "synthetic": [[(1, 8, 12)], [(1, 12, 8), (1, 4, 4)]],
         "real": [[(1, 8, 12)], [(1, 12, 8), (1, 4, 4)]]}


@lru_cache(maxsize=1)
def _text():
    from vlmdata.qwen import load_qwen_tokenizer

    tok = load_qwen_tokenizer()
    prompt = tok.encode("user\nDescribe this image.", add_special_tokens=False)
    answer = tok.encode("A cat sits on a wooden table next to a cup of coffee.", add_special_tokens=False)
    return prompt, answer


def _kind(source) -> str:
    s = str(source)
    return s if s in GRIDS else ("synthetic" if s.endswith(".json") else "real")


def make_batch(grids_per_sample, seq_length=256):
    prompt, answer = _text()
    rows = []
    for grids in grids_per_sample:
        ids = [IM_START]
        for t, h, w in grids:
            ids += [VISION_START_TOKEN_ID] + [IMAGE_TOKEN_ID] * (t * h * w // 4) + [VISION_END_TOKEN_ID]
        ids += prompt + [IM_END, IM_START]
        a0 = len(ids)
        ids += answer + [IM_END]
        rows.append((ids, a0))
    B, S = len(rows), seq_length
    input_ids = torch.full((B, S), PAD_TOKEN_ID, dtype=torch.int64)
    labels = torch.full((B, S), -100, dtype=torch.int64)
    for b, (ids, a0) in enumerate(rows):
        input_ids[b, : len(ids)] = torch.tensor(ids)
        labels[b, a0 - 1: len(ids) - 1] = torch.tensor(ids[a0:])
    grids = [g for gs in grids_per_sample for g in gs]
    grid = torch.tensor(grids, dtype=torch.int64) if grids else None
    pv = torch.randn(int(grid.prod(-1).sum()), 1536) if grids else None
    return {"input_ids": input_ids, "labels": labels, "loss_mask": (labels != -100).float(),
            "position_ids": torch.arange(S).expand(B, S).clone(),
            "visual_inputs": {"pixel_values": pv, "image_grid_thw": grid}}


def fake_make_loader(source, model="qwen3-vl", seq_length=256, micro_batch_size=2, seed=0, **kwargs):
    """Endless batches; each step cycles through the source's sample shapes."""
    pool = GRIDS[_kind(source)]
    i = 0
    while True:
        yield make_batch([pool[(i + j) % len(pool)] for j in range(micro_batch_size)], seq_length)
        i += micro_batch_size
