"""Model shapes (vlmdata.audit.settings.model_config): the user's Hugging Face config.json, a Bridge config's model
section, slices; and the families building and training (small shapes) on CPU."""

import json
import math

import pytest
import torch

from vlmdata.audit.settings.bridge_config import read_bridge_config
from vlmdata.audit.settings.bridge_model import shape_of_bridge
from vlmdata.audit.settings.model_config import ModelConfigError, ModelShape, read_model_config
from vlmdata.audit.workload.flops import step_flops
from vlmdata.audit.workload.model import build_model, model_summary
from vlmdata.audit.workload.step import TrainStep

FIX = "tests/audit/fixtures"


def test_qwen3_vl_30b_a3b_config_json():
    s = read_model_config(f"{FIX}/hf_qwen3_vl_30b_a3b.json")
    d = s.describe()
    assert s.family == "qwen3-vl-moe" and s.loader_model == "qwen3-vl"
    assert (d["decoder"]["layers"], d["decoder"]["hidden_size"], d["decoder"]["experts"], d["decoder"]["top_k"]) == (
        48,
        2048,
        128,
        8,
    )
    assert d["decoder"]["expert_width"] == 768 and d["decoder"]["kv_heads"] == 4 and d["decoder"]["head_dim"] == 128
    assert (d["vision"]["depth"], d["vision"]["hidden_size"], d["vision"]["patch_size"]) == (27, 1152, 16)
    assert d["vision"]["deepstack_visual_indexes"] == [8, 16, 24]


def test_qwen2_5_vl_7b_config_json():
    s = read_model_config(f"{FIX}/hf_qwen2_5_vl_7b.json")
    d = s.describe()
    assert s.family == "qwen2.5-vl" and s.loader_model == "qwen2.5-vl" and s.experts is None
    assert (d["decoder"]["layers"], d["decoder"]["hidden_size"], d["decoder"]["mlp_width"]) == (28, 3584, 18944)
    assert (d["vision"]["depth"], d["vision"]["hidden_size"], d["vision"]["patch_size"]) == (32, 1280, 14)
    assert d["vision"]["full_attention_blocks"] == [7, 15, 23, 31]


def test_bridge_model_section_gives_the_same_shape_as_the_config_json():
    b = read_bridge_config(f"{FIX}/bridge_qwen3_vl_30b_a3b_sft.yaml")
    a = shape_of_bridge(b).describe()
    h = read_model_config(f"{FIX}/hf_qwen3_vl_30b_a3b.json").describe()
    assert a["decoder"] == h["decoder"]
    for k in (
        "depth",
        "hidden_size",
        "mlp_width",
        "heads",
        "patch_size",
        "spatial_merge_size",
        "deepstack_visual_indexes",
    ):
        assert a["vision"][k] == h["vision"][k], k


def test_slices_keep_width_and_local_experts():
    s = read_model_config(f"{FIX}/hf_qwen3_vl_30b_a3b.json")
    c = s.sliced(layers=5, experts=16)
    assert c.text_config.num_hidden_layers == 5 and c.text_config.num_experts == 16
    assert c.text_config.num_experts_per_tok == 8 and c.text_config.hidden_size == 2048
    assert s.layers == 48  # the shape itself is untouched
    assert s.sliced(experts=4).text_config.num_experts_per_tok == 4  # top-k capped at the local experts
    with pytest.raises(ModelConfigError, match="at least 3 decoder layers"):
        s.sliced(layers=2)
    with pytest.raises(ModelConfigError, match="1..48"):
        s.sliced(layers=49)


@pytest.mark.parametrize(
    "content, match",
    [
        ("not json", "not readable JSON"),
        ("[1, 2]", "not a JSON object"),
        ('{"model_type": "llama"}', "not supported"),
        ('{"model_type": "qwen3_vl_moe", "text_config": {"num_hidden_layers": 0}}', "vision_config is missing"),
    ],
)
def test_bad_config_files_are_named(tmp_path, content, match):
    p = tmp_path / "config.json"
    p.write_text(content)
    with pytest.raises(ModelConfigError, match=match):
        read_model_config(str(p))
    with pytest.raises(ModelConfigError, match="no such file"):
        read_model_config(str(tmp_path / "missing.json"))


def _small(path_in: str, tmp_path, **changes) -> ModelShape:
    """A real family config shrunk to CPU size (the same keys, smaller numbers)."""
    d = json.load(open(path_in))
    text = d.get("text_config", d)
    text.update(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2
    )
    text["head_dim"] = 16
    for rope in (text.get("rope_scaling"), text.get("rope_parameters"), d.get("rope_scaling")):
        if isinstance(rope, dict) and "mrope_section" in rope:
            rope["mrope_section"] = [4, 2, 2]  # head_dim 16: 8 frequencies
    if "num_experts" in text:
        text.update(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32)
    v = d["vision_config"]
    v.update(depth=2, hidden_size=64, intermediate_size=128, num_heads=4, out_hidden_size=64)
    if "deepstack_visual_indexes" in v:
        v["deepstack_visual_indexes"] = [0]
    if "fullatt_block_indexes" in v:
        v["fullatt_block_indexes"] = [1]
    d.update(changes)
    p = tmp_path / "config.json"
    p.write_text(json.dumps(d))
    return read_model_config(str(p))


def _batch(patch: int, grids, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = [151644, 100, 101]
    for t, h, w in grids:
        ids += [151652] + [151655] * (t * h * w // 4) + [151653]
    ids += torch.randint(0, 1000, (20,), generator=g).tolist() + [151645]
    S = -(-len(ids) // 128) * 128
    input_ids = torch.zeros((1, S), dtype=torch.int64)
    input_ids[0, : len(ids)] = torch.tensor(ids)
    labels = torch.full((1, S), -100)
    labels[0, len(ids) - 12 : len(ids) - 1] = input_ids[0, len(ids) - 11 : len(ids)]
    grid = torch.tensor(grids)
    return {
        "input_ids": input_ids,
        "labels": labels,
        "loss_mask": (labels != -100).float(),
        "position_ids": torch.arange(S).view(1, -1),
        "visual_inputs": {
            "pixel_values": torch.randn(int(grid.prod(-1).sum()), 3 * 2 * patch * patch, generator=g),
            "image_grid_thw": grid,
        },
    }


@pytest.mark.parametrize(
    "fixture, patch", [("hf_qwen2_5_vl_7b.json", 14), ("hf_qwen3_vl_8b.json", 16), ("hf_qwen3_vl_30b_a3b.json", 16)]
)
def test_every_family_trains_on_both_attention_paths(tmp_path, fixture, patch):
    shape = _small(f"{FIX}/{fixture}", tmp_path)
    batch = _batch(patch, [(1, 8, 12), (1, 16, 16)])
    losses = {}
    for attention in ("sdpa", "varlen"):
        model = build_model(shape, "cpu", seed=0, attention=attention)
        with TrainStep(model, lr=1e-3, logits="all") as step:
            r = step(batch)
        losses[attention] = r["loss"]
        assert math.isfinite(r["loss"]) and r["times_ms"]["vision"] > 0
    assert losses["sdpa"] == pytest.approx(losses["varlen"], rel=1e-4)
    f = step_flops(model.config, batch)
    assert (
        f["vision_flops"] > 0
        and f["lm_layers_flops"] > 0
        and f["total_flops"]
        == sum(f[k] for k in ("lm_layers_flops", "lm_head_flops", "vision_flops", "projector_flops"))
    )
    s = model_summary(model)
    assert s["shape"]["family"] == shape.family and s["params_trainable"] == s["params_total"]
