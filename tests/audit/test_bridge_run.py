"""The user's Bridge run read as it is (issue 33), from YAMLs Bridge 0.6.2's own recipes wrote: the family from
``model._target_``, DP derived as Bridge derives it or assumed in words, the ``peft`` section, errors in the file's
keys, the notes a person must see (vlmdata.audit.settings.bridge_model, bridge_run, peft, resolve)."""

import json
import re

import pytest

from vlmdata.audit.planning.resolve import resolve
from vlmdata.audit.settings.bridge_config import read_bridge_config
from vlmdata.audit.settings.bridge_model import PROVIDERS, shape_of_bridge
from vlmdata.audit.settings.config import AuditConfig
from vlmdata.audit.settings.model_config import read_model_config
from vlmdata.audit.settings.peft import read_peft
from vlmdata.audit.sources.registry import AuditError
from vlmdata.errors import BridgeConfigError

FIX = "tests/audit/fixtures"
EXPECTED = json.load(open(f"{FIX}/bridge_expected.json"))
# fixture file -> (bridge_expected.json key, the published config.json of its model, family)
RECIPES = {
    "bridge_qwen3_vl_30b_a3b_sft": ("default", "hf_qwen3_vl_30b_a3b", "qwen3-vl-moe"),
    "bridge_qwen3_vl_30b_a3b_pretrain_mock": ("30b_a3b_pretrain_mock", "hf_qwen3_vl_30b_a3b", "qwen3-vl-moe"),
    "bridge_qwen3_vl_30b_a3b_peft": ("30b_a3b_peft", "hf_qwen3_vl_30b_a3b", "qwen3-vl-moe"),
    "bridge_qwen3_vl_235b_a22b_sft": ("235b_a22b_sft", "hf_qwen3_vl_235b_a22b", "qwen3-vl-moe"),
    "bridge_qwen3_vl_235b_a22b_pretrain_mock": ("235b_a22b_pretrain_mock", "hf_qwen3_vl_235b_a22b", "qwen3-vl-moe"),
    "bridge_qwen3_vl_8b_sft": ("8b_sft", "hf_qwen3_vl_8b", "qwen3-vl"),
    "bridge_qwen2_5_vl_7b_sft": ("qwen2_5_vl_7b_sft", "hf_qwen2_5_vl_7b", "qwen2.5-vl"),
    "bridge_qwen2_5_vl_3b_sft": ("qwen2_5_vl_3b_sft", "hf_qwen2_5_vl_3b", "qwen2.5-vl"),
}


def _yaml(name: str) -> str:
    return f"{FIX}/{name}.yaml"


@pytest.mark.parametrize("name", list(RECIPES))
def test_the_provider_decides_the_family_and_the_fields_the_shape(name):
    _, hf, family = RECIPES[name]
    shape = shape_of_bridge(read_bridge_config(_yaml(name)))
    published = read_model_config(f"{FIX}/{hf}.json")
    assert shape.family == family == published.family
    a, b = shape.describe(), published.describe()
    assert a["decoder"] == b["decoder"]
    assert a["vision"] == b["vision"]  # Qwen2.5-VL: window attention and full-attention blocks included


def test_a_qwen2_5_vl_yaml_alone_is_audited_as_qwen2_5_vl():
    r = resolve(AuditConfig(bridge_config=_yaml("bridge_qwen2_5_vl_7b_sft")))
    assert (
        r.shape.family == "qwen2.5-vl"
        and r.shape.loader_model == "qwen2.5-vl"
        and r.sources["model"] == "bridge config"
    )
    assert r.shape.vision.fullatt_block_indexes == [7, 15, 23, 31]
    assert any(n.startswith("model: qwen2.5-vl, from") for n in r.notes)


def _edit(tmp_path, name: str, old: str, new: str, count: int = 1) -> str:
    text = open(_yaml(name)).read()
    assert old in text
    p = tmp_path / f"{name}.yaml"
    p.write_text(text.replace(old, new, count))
    return str(p)


def test_an_unknown_provider_is_refused_by_name(tmp_path):
    path = _edit(
        tmp_path,
        "bridge_qwen3_vl_8b_sft",
        "megatron.bridge.models.qwen_vl.qwen3_vl_provider.Qwen3VLModelProvider",
        "megatron.bridge.models.llama.llama_provider.Llama3ModelProvider",
    )
    with pytest.raises(BridgeConfigError) as e:
        resolve(AuditConfig(bridge_config=path))
    msg = str(e.value)
    assert msg.startswith(path) and "model._target_" in msg and "Llama3ModelProvider" in msg
    assert all(p in msg for p in PROVIDERS) and e.value.field == "model._target_"
    with pytest.raises(BridgeConfigError, match="Llama3ModelProvider"):  # a config.json does not hide it
        resolve(AuditConfig(bridge_config=path, model_config=f"{FIX}/hf_qwen3_vl_8b.json"))


def test_a_config_json_of_another_family_is_measured_and_said():
    r = resolve(AuditConfig(bridge_config=_yaml("bridge_qwen2_5_vl_7b_sft"), model_config=f"{FIX}/hf_qwen3_vl_8b.json"))
    assert r.shape.family == "qwen3-vl"
    assert any("Qwen25VLModelProvider" in n and "is qwen3-vl" in n for n in r.notes)


@pytest.mark.parametrize("name", list(RECIPES))
def test_dp_derived_from_the_gpu_count_as_bridge_derives_it(name):
    key = RECIPES[name][0]
    world, derived = EXPECTED[key]["world_size"], EXPECTED[key]["derived_data_parallel_size"]
    r = resolve(AuditConfig(bridge_config=_yaml(name), gpus=world))
    assert (r.run.data_parallel, r.sources["dp"]) == (derived, "derived")
    assert r.run.micro_batches == EXPECTED[key]["global_batch_size"] // (EXPECTED[key]["micro_batch_size"] * derived)
    assert not any("assumed" in n for n in r.notes)


def test_dp_not_recorded_is_assumed_in_words():
    """No saved ConfigContainer records the world size; the 235B pretrain-mock recipe runs on 256 GPUs (DP 2)."""
    r = resolve(AuditConfig(bridge_config=_yaml("bridge_qwen3_vl_235b_a22b_pretrain_mock")))
    assert (r.run.data_parallel, r.sources["dp"], r.run.describe()["sources"]["dp"]) == (1, "assumed", "assumed")
    (note,) = [n for n in r.notes if "assumed" in n]
    assert "DP 1 assumed" in note and "GPUs / 128" in note and "16 micro-batches" in note
    assert "`gpus`" in note and "`dp`" in note  # the settings that fix it (flags on the console)
    assert (
        resolve(AuditConfig(bridge_config=_yaml("bridge_qwen3_vl_235b_a22b_pretrain_mock"), dp=2)).sources["dp"]
        == "flag"
    )


def test_dp_recorded_by_comm_overlap_is_read():
    r = resolve(AuditConfig(bridge_config=_yaml("bridge_qwen3_vl_30b_a3b_sft_changed"), preset="tiny", slice_layers=2))
    assert (r.run.data_parallel, r.sources["dp"]) == (EXPECTED["changed"]["data_parallel"], "bridge config")


def test_gpus_must_hold_whole_replicas():
    with pytest.raises(AuditError, match=r"`gpus` 100 is not a multiple of TP x PP x CP = 4 x 16 x 2 = 128"):
        resolve(AuditConfig(bridge_config=_yaml("bridge_qwen3_vl_235b_a22b_pretrain_mock"), gpus=100))


def test_errors_caused_by_yaml_values_name_the_file_and_its_keys(tmp_path):
    path = _edit(tmp_path, "bridge_qwen3_vl_8b_sft", "global_batch_size: 32", "global_batch_size: 33")
    with pytest.raises(AuditError) as e:
        resolve(AuditConfig(bridge_config=path))
    msg = str(e.value)
    assert msg.startswith(path) and "train.global_batch_size (33)" in msg and "train.micro_batch_size (2)" in msg
    assert "DP (assumed" in msg
    assert not re.search(r"`(global_batch_size|micro_batch_size)`", msg)  # no flag the user did not pass
    with pytest.raises(AuditError) as e:  # a flag the user passed stays a flag
        resolve(AuditConfig(bridge_config=path, micro_batch_size=4))
    assert "`micro_batch_size`" in str(e.value) and "train.global_batch_size (33)" in str(e.value)


def test_a_mock_data_yaml_says_so():
    r = resolve(AuditConfig(bridge_config=_yaml("bridge_qwen3_vl_30b_a3b_pretrain_mock")))
    (note,) = [n for n in r.notes if "mock-data run" in n]
    assert "MockVLMSFTDatasetConfig" in note and "`benchmark_config`" in note
    sft = resolve(AuditConfig(bridge_config=_yaml("bridge_qwen3_vl_30b_a3b_sft")))
    assert not any("mock-data run" in n for n in sft.notes)


def test_the_peft_section_is_read():
    p = read_peft(_yaml("bridge_qwen3_vl_30b_a3b_peft"))
    want = EXPECTED["30b_a3b_peft"]["peft"]
    assert p is not None and (p.kind, p.dim, p.alpha, p.dropout) == ("LoRA", want["dim"], want["alpha"], 0.0)
    assert list(p.target_modules) == want["target_modules"] and p.scale == 1.0 and p.freeze is None
    assert read_peft(_yaml("bridge_qwen3_vl_30b_a3b_sft")) is None  # peft: null
    r = resolve(AuditConfig(bridge_config=_yaml("bridge_qwen3_vl_30b_a3b_peft")))
    assert r.peft == p and r.describe()["peft"]["dim"] == 32
    assert any(n.startswith("PEFT LoRA (dim 32, alpha 32)") and "base weight frozen" in n for n in r.notes)


@pytest.mark.parametrize(
    "old, new, key",
    [
        ("_target_: megatron.bridge.peft.lora.LoRA", "_target_: megatron.bridge.peft.dora.DoRA", "peft._target_"),
        ("exclude_modules: []", "exclude_modules: [linear_qkv]", "peft.exclude_modules"),
        ("share_expert_adapters: true", "share_expert_adapters: false", "peft.share_expert_adapters"),
        ("  - linear_qkv\n", "  - '*.layers.0.*.linear_qkv'\n", "peft.target_modules"),
        ("  dim: 32", "  dim: thirty-two", "peft.dim"),
    ],
)
def test_a_peft_the_audit_cannot_reproduce_is_refused_with_file_and_key(tmp_path, old, new, key):
    path = _edit(tmp_path, "bridge_qwen3_vl_30b_a3b_peft", old, new)
    with pytest.raises(BridgeConfigError) as e:
        resolve(AuditConfig(bridge_config=path, preset="tiny"))
    assert str(e.value).startswith(f"{path}: {key}") and e.value.field == key
