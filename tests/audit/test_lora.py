"""LoRA on the reference model as Bridge's ``LoRA`` puts it on its own (vlmdata.audit.workload.lora): base weights frozen,
adapters on Megatron's linear_qkv / linear_proj / linear_fc1 / linear_fc2 (the experts' shared), the adapter
parameters Bridge has, the model unchanged at initialisation, only the adapters trained, with their optimizer
state; and a PEFT run through the workload."""

import json

import pytest
import torch

from vlmdata.audit.settings.model_config import read_model_config
from vlmdata.audit.settings.peft import PeftSpec
from vlmdata.audit.workload.lora import adapter_params, apply_lora
from vlmdata.audit.workload.model import build_model
from vlmdata.audit.workload.step import LossForward, TrainStep
from vlmdata.audit.workload.workloads import ReferenceWorkload, apply_freeze

FIX = "tests/audit/fixtures"
LORA = "megatron.bridge.peft.lora.LoRA"


def _small(fixture: str, tmp_path):
    """A published config.json shrunk to CPU size (h 64, 2 layers, 4 heads / 2 KV of 16; experts 4 x 32 top-2)."""
    d = json.load(open(f"{FIX}/{fixture}"))
    text = d.get("text_config", d)
    text.update(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4)
    text.update(num_key_value_heads=2, head_dim=16)
    for rope in (text.get("rope_scaling"), d.get("rope_scaling")):
        if isinstance(rope, dict) and "mrope_section" in rope:
            rope["mrope_section"] = [4, 2, 2]
    if "num_experts" in text:
        text.update(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32)
    d["vision_config"].update(depth=2, hidden_size=64, intermediate_size=128, num_heads=4, out_hidden_size=64)
    if "deepstack_visual_indexes" in d["vision_config"]:
        d["vision_config"]["deepstack_visual_indexes"] = [0]
    if "fullatt_block_indexes" in d["vision_config"]:
        d["vision_config"]["fullatt_block_indexes"] = [1]
    p = tmp_path / "config.json"
    p.write_text(json.dumps(d))
    return read_model_config(str(p))


def _batch(patch: int, seed: int = 0) -> dict:
    g = torch.Generator().manual_seed(seed)
    ids = [151644, 100, 151652] + [151655] * 16 + [151653]
    ids += torch.randint(0, 900, (12,), generator=g).tolist()
    S = 128
    input_ids = torch.zeros((1, S), dtype=torch.int64)
    input_ids[0, : len(ids)] = torch.tensor(ids)
    labels = torch.full((1, S), -100)
    labels[0, 20:31] = input_ids[0, 21:32]
    return {
        "input_ids": input_ids,
        "labels": labels,
        "loss_mask": (labels != -100).float(),
        "position_ids": torch.arange(S).view(1, -1),
        "visual_inputs": {
            "pixel_values": torch.randn(64, 3 * 2 * patch * patch, generator=g),
            "image_grid_thw": torch.tensor([[1, 8, 8]]),
        },
    }


def _expected(r: int, h: int = 64, heads: int = 4, kv: int = 2, d: int = 16, ffn: int = 128, layers: int = 2):
    """Adapter parameters Bridge's LoRA adds to the shrunk decoder (per layer: fused QKV, proj, fc1 = gate+up, fc2)."""
    qkv = r * h + (heads + 2 * kv) * d * r
    proj = r * heads * d + h * r
    return layers * (qkv + proj), (r * h + 2 * ffn * r) * layers, (r * ffn + h * r) * layers


@pytest.mark.parametrize(
    "fixture, patch, vision_adapted",
    [("hf_qwen3_vl_30b_a3b.json", 16, True), ("hf_qwen3_vl_8b.json", 16, True), ("hf_qwen2_5_vl_7b.json", 14, False)],
)
def test_adapters_as_bridge_puts_them(tmp_path, fixture, patch, vision_adapted):
    shape = _small(fixture, tmp_path)
    model = build_model(shape, "cpu", seed=0, attention="sdpa")
    batch = _batch(patch)
    with torch.no_grad():
        before = _loss(model, batch)
    counts = apply_lora(model, PeftSpec("run.yaml", LORA, dim=4, alpha=8.0))
    attn, fc1, fc2 = _expected(4, ffn=32 if shape.experts else 128)
    assert counts["decoder"] == attn + (0 if shape.experts else fc1 + fc2)
    assert counts["experts"] == (fc1 + fc2 if shape.experts else 0)  # one adapter per layer shared by its experts
    assert (counts["vision"] > 0) == vision_adapted  # Qwen2.5-VL's tower is transformers' own in Bridge
    trainable = [p for p in model.parameters() if p.requires_grad]
    assert {id(p) for p in trainable} == {id(p) for p in adapter_params(model)}
    assert sum(p.numel() for p in trainable) == counts["total"]
    with torch.no_grad():  # B starts at zero: the adapted model computes what the base model does
        after = _loss(model, batch)
    assert torch.equal(before, after)
    with TrainStep(model, lr=1e-2, logits="all") as step:
        step(batch)
        frozen = {n: p.detach().clone() for n, p in model.named_parameters() if not p.requires_grad}
        lora_b = [p.detach().clone() for p in adapter_params(model) if p.shape[1] == 4 and p.shape[0] != 4]
        step(batch)
    assert all(torch.equal(p, frozen[n]) for n, p in model.named_parameters() if n in frozen)  # base untouched
    moved = [p for p in adapter_params(model) if p.shape[1] == 4 and p.shape[0] != 4]
    assert any(not torch.equal(a, b) for a, b in zip(moved, lora_b))  # the adapters trained


def _loss(model, batch: dict) -> torch.Tensor:
    v = batch["visual_inputs"]
    args = (batch["input_ids"], batch["labels"], batch["loss_mask"], batch["position_ids"])
    return LossForward(model)(*args, v["pixel_values"], v["image_grid_thw"])


def test_freezing_a_part_keeps_its_adapters_trainable(tmp_path):
    model = build_model(_small("hf_qwen3_vl_30b_a3b.json", tmp_path), "cpu")
    apply_lora(model, PeftSpec("run.yaml", LORA, dim=4, alpha=4.0))
    apply_freeze(model, freeze_language_model=True, freeze_vision_model=True, freeze_vision_projection=True)
    assert all(p.requires_grad for p in adapter_params(model))


def test_normalized_expert_rank(tmp_path):
    model = build_model(_small("hf_qwen3_vl_30b_a3b.json", tmp_path), "cpu")
    counts = apply_lora(model, PeftSpec("run.yaml", LORA, dim=4, alpha=4.0, normalize_moe_lora=True))
    _, fc1, fc2 = _expected(2, ffn=32)  # rank dim // top-k = 2
    assert counts["experts"] == fc1 + fc2


def test_a_peft_run_through_the_workload(tmp_path):
    shape = _small("hf_qwen3_vl_30b_a3b.json", tmp_path)
    spec = PeftSpec("run.yaml", LORA, dim=4, alpha=8.0, target_modules=("linear_qkv", "linear_fc2"))
    work = ReferenceWorkload(shape, "cpu", "all", peft=spec)
    d = work.describe()
    assert d["options"]["peft"]["dim"] == 4 and d["options"]["peft"]["adapter_params"]["total"] > 0
    assert d["model"]["params_trainable"] == d["options"]["peft"]["adapter_params"]["total"]
    assert d["model"]["params_trainable_experts"] == d["options"]["peft"]["adapter_params"]["experts"]
    work.begin_step(1)
    work.micro(_batch(16))
    r = work.finish()
    assert r["loss"] is not None and r["times_ms"]["optimizer"] >= 0
    opt = work.step.optimizer
    held = sum(p.numel() for p in getattr(opt, "params", None) or [q for g in opt.param_groups for q in g["params"]])
    assert held == d["model"]["params_trainable"]  # optimizer state for the adapters only
    work.close()
