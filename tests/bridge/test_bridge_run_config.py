"""The Bridge config fixtures against Megatron Bridge 0.6.2 itself, and ``vlmdata.audit.settings.bridge_config`` against
Bridge's own objects.

Runs only under the Bridge venv (``scripts/bridge_env.sh``, then ``.bridge-venv/bin/python -m pytest tests/bridge``);
elsewhere every test is skipped.

* ``make_config_fixtures.py`` runs in a subprocess (it sets the offline hub environment before transformers is
  imported, which an in-process test cannot guarantee once another test imported it) and writes every YAML file of
  its ``FIXTURES`` with ``ConfigContainer.to_yaml`` into a temp folder, plus the values read from Bridge's live
  ``ConfigContainer``.
* ``test_fixture_is_a_fresh_regeneration``: each committed fixture is byte-identical to the regenerated file. Nothing
  has to be dropped: the only machine-dependent values (``checkpoint.save`` / ``checkpoint.load`` /
  ``logger.tensorboard_dir``, under the working directory) are pinned by building the recipe with cwd ``/``.
* ``test_expected_values_are_fresh``: tests/audit/fixtures/bridge_expected.json (the values read from Bridge's
  objects, for the main suite, which has no Bridge) equals the regenerated values (``execution`` aside: it follows
  vlmdata's ``EXECUTION_FIELDS``).
* ``test_parser_reads_what_bridge_holds``: every ``BridgeRun`` field parsed from the fresh YAML equals the
  corresponding attribute of Bridge's object; the data-parallel size Bridge derives is world / (TP * PP * CP).
* ``test_recipe_layouts``: the recipes' layouts as Bridge holds them after ``runtime_config_update`` (parallel sizes,
  sequence parallel, frozen parts, dataset class, PEFT), pinned.
* ``test_hf_fixture_converts_in_bridge``: each tests/audit/fixtures/hf_*.json converts with ``AutoBridge`` to the
  provider of its model with the shape the JSON states.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib.util
import json
import os
import shutil
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
FIXTURE_DIR = os.path.join(REPO, "tests", "audit", "fixtures")


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"vlmdata_{name}", os.path.join(HERE, f"{name}.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


MAKE = _load("make_config_fixtures")


@pytest.fixture(scope="module")
def regenerated(tmp_path_factory):
    """(folder with the freshly written YAML files, the values read from Bridge's objects)."""
    out = tmp_path_factory.mktemp("bridge_config")
    expected = out / "expected.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (REPO, os.environ.get("PYTHONPATH")) if p)}
    script = os.path.join(HERE, "make_config_fixtures.py")
    cmd = [sys.executable, script, "--out", str(out), "--expected", str(expected)]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        pytest.fail(
            f"make_config_fixtures.py failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
        )
    with open(expected) as f:
        return out, json.load(f)


@pytest.mark.parametrize("name", sorted(MAKE.FIXTURES))
def test_fixture_is_a_fresh_regeneration(regenerated, name):
    out, _ = regenerated
    fresh = (out / MAKE.FIXTURES[name]).read_text()
    with open(os.path.join(FIXTURE_DIR, MAKE.FIXTURES[name])) as f:
        committed = f.read()
    if fresh != committed:
        diff = "".join(difflib.unified_diff(committed.splitlines(True), fresh.splitlines(True), "committed", "fresh"))
        pytest.fail(
            f"{MAKE.FIXTURES[name]} differs from a regeneration with this Bridge (rerun "
            f"tests/bridge/make_config_fixtures.py if the change is Bridge's):\n{diff[:4000]}"
        )


@pytest.mark.parametrize("name", sorted(MAKE.FIXTURES))
def test_parser_reads_what_bridge_holds(regenerated, name):
    from vlmdata.audit.settings.bridge_config import BridgeRun, read_bridge_config

    out, values = regenerated
    bridge = values[name]
    run = read_bridge_config(str(out / MAKE.FIXTURES[name]))
    compared = [f.name for f in dataclasses.fields(BridgeRun) if f.name not in ("path", "sources")]
    assert set(compared) <= set(bridge), "make_config_fixtures.bridge_values misses a BridgeRun field"
    for field in compared:
        assert getattr(run, field) == bridge[field], (
            f"{field}: parsed {getattr(run, field)!r}, Bridge {bridge[field]!r}"
        )
    # every field has a source in these files (Bridge writes every key), except data_parallel without comm_overlap
    for field in compared:
        if field not in ("recompute_detail", "packing_detail", "model_fields", "data_parallel", "execution"):
            assert field in run.sources, field
    assert ("data_parallel" in run.sources) == (name == "changed")  # the only fixture with a comm_overlap section
    assert run.seq_length == bridge["dataset_seq_length"]  # validate() requires model and dataset to agree
    # Bridge derives DP in runtime_config_update (world / (TP * PP * CP)); only comm_overlap records it in the file
    assert bridge["world_size"] == MAKE.WORLD_SIZE.get(name)
    assert bridge["derived_data_parallel_size"] == DERIVED_DP[name] == bridge["data_parallel_from_world"]
    assert run.data_parallel == (DERIVED_DP[name] if name == "changed" else None)


# world / (TP * PP * CP), by hand: the recipe's GPUs over its layout ("recipe": before runtime_config_update)
DERIVED_DP = {
    "default": 8 // 1,
    "changed": 32 // (2 * 2 * 2),
    "recipe": None,
    "30b_a3b_pretrain_mock": 8 // (4 * 2),
    "235b_a22b_sft": 32 // 4,
    "235b_a22b_pretrain_mock": 256 // (4 * 16 * 2),
    "8b_sft": 2 // 2,
    "qwen2_5_vl_7b_sft": 2 // 2,
    "30b_a3b_peft": 4 // 1,
    "qwen2_5_vl_3b_sft": 1 // 1,
}

MOCK = "megatron.bridge.data.builders.mock_vlm_sft.MockVLMSFTDatasetConfig"
HF_SFT = "megatron.bridge.data.builders.direct_hf_sft.DirectHFSFTDatasetConfig"
# fixture: TP, PP, EP, CP, ETP, sequence parallel, (language, vision, projection) frozen, dataset class. The recipes
# set sequence_parallel False for 235B-A22B SFT; Qwen3VLMoEModelProvider.finalize() turns it on when TP > 1. ETP is
# unset in every recipe: Bridge makes it 1 when EP > 1, Megatron-Core makes it TP otherwise.
LAYOUTS = {
    "30b_a3b_pretrain_mock": (4, 2, 4, 1, 1, True, (True, True, False), MOCK),
    "235b_a22b_sft": (4, 1, 32, 1, 1, True, (False, False, False), HF_SFT),
    "235b_a22b_pretrain_mock": (4, 16, 8, 2, 1, True, (True, True, False), MOCK),
    "8b_sft": (2, 1, 1, 1, 2, False, (False, False, False), HF_SFT),
    "qwen2_5_vl_7b_sft": (2, 1, 1, 1, 2, False, (False, False, False), HF_SFT),
    "30b_a3b_peft": (1, 1, 4, 1, 1, False, (False, False, False), HF_SFT),
    "qwen2_5_vl_3b_sft": (1, 1, 1, 1, 1, False, (False, False, False), HF_SFT),
}


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_recipe_layouts(regenerated, name):
    _, values = regenerated
    v = values[name]
    tp, pp, ep, cp, etp, sp, frozen, dataset = LAYOUTS[name]
    assert (v["tensor_parallel"], v["pipeline_parallel"], v["expert_parallel"], v["context_parallel"]) == (
        tp,
        pp,
        ep,
        cp,
    )
    assert v["expert_tensor_parallel"] == etp
    assert v["sequence_parallel"] is sp
    assert (v["freeze_language_model"], v["freeze_vision_model"], v["freeze_vision_projection"]) == frozen
    assert v["dataset_target"] == dataset
    assert (v["global_batch_size"], v["micro_batch_size"], v["seq_length"]) == (32, 2, 4096)
    assert v["virtual_pipeline_model_parallel_size"] is None
    assert v["moe_router_force_load_balancing"] is False
    assert v["cuda_graph_settings"]["cuda_graph_impl"] == "none"
    assert v["cuda_graph_settings"]["enable_cuda_graph"] is False
    if name == "30b_a3b_peft":
        peft = v["peft"]
        assert peft["_target_"] == "megatron.bridge.peft.lora.LoRA"
        assert (peft["dim"], peft["alpha"]) == (32, 32)
        assert peft["target_modules"] == ["linear_qkv", "linear_proj", "linear_fc1", "linear_fc2"]
    else:
        assert v["peft"] is None


def test_expected_values_are_fresh(regenerated):
    _, values = regenerated
    with open(MAKE.EXPECTED) as f:
        committed = json.load(f)
    assert sorted(committed) == sorted(MAKE.FIXTURES)
    for name in sorted(MAKE.FIXTURES):
        # "execution" follows vlmdata's own EXECUTION_FIELDS (work in progress elsewhere); the parser test checks it
        old, new = ({k: v for k, v in d[name].items() if k != "execution"} for d in (committed, values))
        assert old == new, (
            f"{os.path.basename(MAKE.EXPECTED)}[{name!r}] differs from a regeneration (rerun "
            "tests/bridge/make_config_fixtures.py)"
        )


HF_FIXTURES = {
    "hf_qwen3_vl_30b_a3b.json": "Qwen3VLMoEModelProvider",
    "hf_qwen3_vl_235b_a22b.json": "Qwen3VLMoEModelProvider",
    "hf_qwen3_vl_8b.json": "Qwen3VLModelProvider",
    "hf_qwen2_5_vl_7b.json": "Qwen25VLModelProvider",
    "hf_qwen2_5_vl_3b.json": "Qwen25VLModelProvider",
}


@pytest.fixture(scope="module")
def auto_bridge():
    MAKE.install_te_stub()
    from megatron.bridge import AutoBridge

    return AutoBridge


@pytest.mark.parametrize("name", sorted(HF_FIXTURES))
def test_hf_fixture_converts_in_bridge(auto_bridge, tmp_path, monkeypatch, name):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with open(os.path.join(FIXTURE_DIR, name)) as f:
        hf = json.load(f)
    shutil.copyfile(os.path.join(FIXTURE_DIR, name), tmp_path / "config.json")
    provider = auto_bridge.from_hf_pretrained(str(tmp_path)).to_megatron_provider(load_weights=False)
    assert type(provider).__name__ == HF_FIXTURES[name]
    text = hf.get("text_config", hf)  # Qwen2.5-VL's config.json keeps the decoder at the top level
    vision = hf["vision_config"]
    assert provider.num_layers == text["num_hidden_layers"]
    assert provider.hidden_size == text["hidden_size"]
    assert provider.ffn_hidden_size == text["intermediate_size"]
    assert provider.num_attention_heads == text["num_attention_heads"]
    assert provider.num_query_groups == text["num_key_value_heads"]
    assert provider.vocab_size == text["vocab_size"]
    if "num_experts" in text:
        assert provider.num_moe_experts == text["num_experts"]
        assert provider.moe_router_topk == text["num_experts_per_tok"]
        assert provider.moe_ffn_hidden_size == text["moe_intermediate_size"]
    assert provider.vision_config.depth == vision["depth"]
    assert provider.vision_config.hidden_size == vision["hidden_size"]
    assert provider.vision_config.out_hidden_size == vision["out_hidden_size"] == text["hidden_size"]
    assert provider.vision_config.patch_size == vision["patch_size"]
    if "deepstack_visual_indexes" in vision:
        assert list(provider.deepstack_visual_indexes) == vision["deepstack_visual_indexes"]
