"""``vlmdata.audit.settings.bridge_config``: a Megatron Bridge 0.6.2 ConfigContainer YAML -> BridgeRun.

The three ``bridge_qwen3_vl_30b_a3b_sft*.yaml`` fixtures were written by Bridge 0.6.2 itself
(tests/bridge/make_config_fixtures.py; tests/bridge/test_bridge_config.py checks them against a fresh
regeneration and against Bridge's objects). Here, without Bridge, the parsed values and source paths are pinned, and
bad inputs are shown to give a BridgeConfigError that names the file.
"""

from __future__ import annotations

import dataclasses
import os
import textwrap

import pytest

from vlmdata.audit.planning.resolve import resolve
from vlmdata.audit.settings import bridge_config
from vlmdata.audit.settings.bridge_config import (
    EXECUTION_FIELDS,
    MAX_BYTES,
    MODEL_FIELDS,
    BridgeRun,
    read_bridge_config,
)
from vlmdata.audit.settings.config import AuditConfig
from vlmdata.errors import BridgeConfigError, VlmdataError

FIX = os.path.join(os.path.dirname(__file__), "fixtures")
DEFAULT = os.path.join(FIX, "bridge_qwen3_vl_30b_a3b_sft.yaml")
CHANGED = os.path.join(FIX, "bridge_qwen3_vl_30b_a3b_sft_changed.yaml")
RECIPE = os.path.join(FIX, "bridge_qwen3_vl_30b_a3b_sft_recipe.yaml")

PROVIDER = "megatron.bridge.models.qwen_vl.qwen3_vl_provider.Qwen3VLMoEModelProvider"
DIRECT_HF = "megatron.bridge.data.builders.direct_hf_sft.DirectHFSFTDatasetConfig"

# Qwen3-VL-30B-A3B as Bridge converts tests/audit/fixtures/hf_qwen3_vl_30b_a3b.json (the same in all three files)
MODEL_30B = {
    "num_layers": 48,
    "hidden_size": 2048,
    "ffn_hidden_size": 6144,
    "num_attention_heads": 32,
    "num_query_groups": 4,
    "kv_channels": 128,
    "vocab_size": 151936,
    "num_moe_experts": 128,
    "moe_router_topk": 8,
    "moe_ffn_hidden_size": 768,
    "moe_shared_expert_intermediate_size": None,
    "position_embedding_type": "mrope",
    "share_embeddings_and_output_weights": False,
    "transformer_impl": "transformer_engine",
    "hf_model_id": "Qwen/Qwen3-VL-30B-A3B-Instruct",
    "patch_size": 16,
    "spatial_merge_size": 2,
    "temporal_patch_size": 2,
    "deepstack_visual_indexes": [8, 16, 24],
    "image_token_id": 151655,
    "video_token_id": 151656,
    "vision_start_token_id": 151652,
    "vision_end_token_id": 151653,
    "vision_config.depth": 27,
    "vision_config.hidden_size": 1152,
    "vision_config.intermediate_size": 4304,
    "vision_config.num_heads": 16,
    "vision_config.out_hidden_size": 2048,
    "vision_config.patch_size": 16,
    "vision_config.spatial_merge_size": 2,
    "vision_config.temporal_patch_size": 2,
    "vision_config.deepstack_visual_indexes": [8, 16, 24],
}

SOURCES = {
    "micro_batch_size": "train.micro_batch_size",
    "global_batch_size": "train.global_batch_size",
    "seq_length": "model.seq_length",
    "tensor_parallel": "model.tensor_model_parallel_size",
    "pipeline_parallel": "model.pipeline_model_parallel_size",
    "expert_parallel": "model.expert_model_parallel_size",
    "context_parallel": "model.context_parallel_size",
    "expert_tensor_parallel": "model.expert_tensor_parallel_size",
    "freeze_language_model": "model.freeze_language_model",
    "freeze_vision_model": "model.freeze_vision_model",
    "freeze_vision_projection": "model.freeze_vision_projection",
    "recompute": "model.recompute_granularity",
    "recompute_detail.recompute_method": "model.recompute_method",
    "recompute_detail.recompute_num_layers": "model.recompute_num_layers",
    "recompute_detail.recompute_modules": "model.recompute_modules",
    "packing_detail.enable_in_batch_packing": "dataset.enable_in_batch_packing",
    "packing_detail.defer_in_batch_packing_to_step": "dataset.defer_in_batch_packing_to_step",
    "packing_detail.pad_to_max_length": "dataset.pad_to_max_length",
    "packing_detail.pad_to_multiple_of": "dataset.pad_to_multiple_of",
    "packing_detail.in_batch_packing_pad_to_multiple_of": "dataset.in_batch_packing_pad_to_multiple_of",
    "model_target": "model._target_",
    "dataset_target": "dataset._target_",
    "manual_gc": "train.manual_gc",
    "manual_gc_interval": "train.manual_gc_interval",
    **{f"model_fields.{k}": f"model.{k}" for k in MODEL_30B},
    **{f"execution.{k}": f"model.{k}" for k in EXECUTION_FIELDS},
}
# the SFT recipe's execution policy as Bridge wrote it: natural routing, no CUDA graphs, an even PP split
EXECUTION_SFT = {
    "moe_router_force_load_balancing": False,
    "cuda_graph_impl": "none",
    "cuda_graph_scope": None,
    "max_vision_cuda_graph_seq_length": None,
    "sequence_parallel": False,
    "virtual_pipeline_model_parallel_size": None,
    "num_layers_in_first_pipeline_stage": None,
    "num_layers_in_last_pipeline_stage": None,
}


def write(tmp_path, text: str, name: str = "run_config.yaml") -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


def as_dict(run: BridgeRun) -> dict:
    return {f.name: getattr(run, f.name) for f in dataclasses.fields(run) if f.name not in ("path", "sources")}


# --------------------------------------------------------------------------- the fixtures Bridge wrote


def test_recipe_as_run_saves_it():
    run = read_bridge_config(DEFAULT)
    assert run.path == DEFAULT
    assert as_dict(run) == {
        "micro_batch_size": 2,
        "global_batch_size": 32,
        "seq_length": 4096,
        "tensor_parallel": 1,
        "pipeline_parallel": 1,
        "expert_parallel": 8,
        "context_parallel": 1,
        "expert_tensor_parallel": 1,  # finalized: Megatron-Core set it to the TP size
        "data_parallel": None,  # Bridge derives DP from the world size and does not write it
        "freeze_language_model": False,
        "freeze_vision_model": False,
        "freeze_vision_projection": False,
        "recompute": "none",
        "recompute_detail": {
            "recompute_method": None,
            "recompute_num_layers": None,
            "recompute_modules": ["core_attn"],
        },
        "packing": True,  # the 0.6.2 SFT recipe enables in-batch packing, deferred to the Qwen3-VL step
        "packing_detail": {
            "enable_in_batch_packing": True,
            "defer_in_batch_packing_to_step": True,
            "pad_to_max_length": True,  # validate(): EP > 1
            "pad_to_multiple_of": 128,
            "in_batch_packing_pad_to_multiple_of": 1,
        },
        "use_distributed_optimizer": True,
        "model_target": PROVIDER,
        "dataset_target": DIRECT_HF,
        "model_fields": MODEL_30B,
        "manual_gc": True,  # recipes/common.py
        "manual_gc_interval": 100,
        "execution": EXECUTION_SFT,
    }
    assert run.sources == {
        **SOURCES,
        "packing": "dataset.enable_in_batch_packing",
        "use_distributed_optimizer": "ddp.use_distributed_optimizer | optimizer.use_distributed_optimizer",
    }


def test_changed_settings():
    run = read_bridge_config(CHANGED)
    assert as_dict(run) == {
        "micro_batch_size": 1,
        "global_batch_size": 64,
        "seq_length": 8192,
        "tensor_parallel": 2,
        "pipeline_parallel": 2,
        "expert_parallel": 4,
        "context_parallel": 2,
        "expert_tensor_parallel": 1,
        "data_parallel": 4,  # comm_overlap.data_parallel_size: 32 ranks / (TP 2 * PP 2 * CP 2)
        "freeze_language_model": True,
        "freeze_vision_model": True,
        "freeze_vision_projection": False,
        "recompute": "full",
        "recompute_detail": {
            "recompute_method": "uniform",
            "recompute_num_layers": 1,
            "recompute_modules": ["core_attn"],
        },
        "packing": False,
        "packing_detail": {
            "enable_in_batch_packing": False,
            "defer_in_batch_packing_to_step": False,
            "pad_to_max_length": True,
            "pad_to_multiple_of": 128,
            "in_batch_packing_pad_to_multiple_of": 1,
        },
        "use_distributed_optimizer": False,
        "model_target": PROVIDER,
        "dataset_target": DIRECT_HF,
        "model_fields": MODEL_30B,
        "manual_gc": True,
        "manual_gc_interval": 100,
        "execution": {**EXECUTION_SFT, "sequence_parallel": True},  # TP 2: Bridge turns it on
    }
    assert run.sources == {
        **SOURCES,
        "data_parallel": "comm_overlap.data_parallel_size",
        "packing": "dataset.enable_in_batch_packing",
        "use_distributed_optimizer": "ddp.use_distributed_optimizer | optimizer.use_distributed_optimizer",
    }


def test_recipe_as_built():
    """Before runtime_config_update: ETP and recompute_modules still null, no padding to seq_length yet."""
    run = read_bridge_config(RECIPE)
    assert (
        run.expert_tensor_parallel is None
        and run.sources["expert_tensor_parallel"] == "model.expert_tensor_parallel_size"
    )
    assert run.recompute == "none"
    assert run.recompute_detail == {"recompute_method": None, "recompute_num_layers": None, "recompute_modules": None}
    assert run.packing is True and run.packing_detail["pad_to_max_length"] is False
    assert (run.micro_batch_size, run.global_batch_size, run.seq_length, run.expert_parallel) == (2, 32, 4096, 8)
    assert run.model_fields == MODEL_30B


def test_model_fields_cover_the_table():
    assert set(read_bridge_config(DEFAULT).model_fields) <= set(MODEL_FIELDS)
    assert {"num_layers", "hidden_size", "num_moe_experts", "moe_router_topk", "vision_config.depth"} <= set(
        MODEL_FIELDS
    )


def test_bridge_run_is_frozen():
    run = read_bridge_config(DEFAULT)
    with pytest.raises(dataclasses.FrozenInstanceError):
        run.micro_batch_size = 4  # type: ignore[misc]


# --------------------------------------------------------------------------- hand-written YAML


def test_minimal_hand_written(tmp_path):
    path = write(
        tmp_path,
        """
        train:
          micro_batch_size: 1
          global_batch_size: 16
        model:
          tensor_model_parallel_size: 2
          recompute_granularity: selective
          some_future_key: {nested: [1, 2]}
        my_notes: not a Bridge section, ignored
        """,
    )
    run = read_bridge_config(path)
    assert (run.micro_batch_size, run.global_batch_size, run.tensor_parallel, run.recompute) == (1, 16, 2, "selective")
    for name in ("seq_length", "pipeline_parallel", "expert_parallel", "data_parallel", "freeze_language_model",
                 "packing", "use_distributed_optimizer", "model_target", "dataset_target"):  # fmt: skip
        assert getattr(run, name) is None, name
    assert run.recompute_detail == {} and run.packing_detail == {} and run.model_fields == {}
    assert run.sources == {
        "micro_batch_size": "train.micro_batch_size",
        "global_batch_size": "train.global_batch_size",
        "tensor_parallel": "model.tensor_model_parallel_size",
        "recompute": "model.recompute_granularity",
    }


def test_manual_gc_off_reaches_the_run(tmp_path):
    """Bridge's train.manual_gc / manual_gc_interval are read and become the run's, with their source."""
    path = write(tmp_path, "train:\n  manual_gc: false\n  manual_gc_interval: 0\n")
    run = read_bridge_config(path)
    assert (run.manual_gc, run.manual_gc_interval) == (False, 0)
    assert run.sources == {"manual_gc": "train.manual_gc", "manual_gc_interval": "train.manual_gc_interval"}
    res = resolve(AuditConfig(bridge_config=path))
    assert (res.run.manual_gc, res.run.manual_gc_interval) == (False, 0)
    assert res.sources["manual_gc"] == res.sources["manual_gc_interval"] == "bridge config"
    flag = resolve(AuditConfig(bridge_config=path, manual_gc=True, manual_gc_interval=7))
    assert (flag.run.manual_gc, flag.run.manual_gc_interval, flag.sources["manual_gc"]) == (True, 7, "flag")
    default = resolve(AuditConfig())  # Bridge's recipes: manual, every 100 steps
    assert (default.run.manual_gc, default.run.manual_gc_interval, default.sources["manual_gc"]) == (
        True,
        100,
        "default",
    )


def test_absent_granularity_is_unknown_null_is_none(tmp_path):
    assert read_bridge_config(write(tmp_path, "model: {num_layers: 4}")).recompute is None
    assert read_bridge_config(write(tmp_path, "model: {recompute_granularity: null}")).recompute == "none"


def test_seq_length_model_wins_dataset_fills_in(tmp_path):
    run = read_bridge_config(write(tmp_path, "dataset: {seq_length: 2048}"))
    assert run.seq_length == 2048 and run.sources["seq_length"] == "dataset.seq_length"
    run = read_bridge_config(write(tmp_path, "model: {seq_length: null}\ndataset: {seq_length: 2048}"))
    assert run.seq_length == 2048 and run.sources["seq_length"] == "dataset.seq_length"
    run = read_bridge_config(write(tmp_path, "model: {seq_length: 4096}\ndataset: {seq_length: 4096}"))
    assert run.seq_length == 4096 and run.sources["seq_length"] == "model.seq_length"
    path = write(tmp_path, "model: {seq_length: 4096}\ndataset: {seq_length: 8192}")
    with pytest.raises(BridgeConfigError, match=r"model\.seq_length is 4096 but dataset\.seq_length is 8192") as e:
        read_bridge_config(path)
    assert path in str(e.value) and e.value.field == "model.seq_length"


def test_transformer_sub_config_layout(tmp_path):
    """Megatron's GPTModelConfig keeps the TransformerConfig under model.transformer."""
    path = write(
        tmp_path,
        """
        model:
          _target_: megatron.training.models.gpt.GPTModelConfig
          seq_length: 1024
          transformer: {tensor_model_parallel_size: 4, num_layers: 12, recompute_granularity: full}
        """,
    )
    run = read_bridge_config(path)
    assert (run.tensor_parallel, run.seq_length, run.recompute) == (4, 1024, "full")
    assert run.model_fields == {"num_layers": 12}
    assert run.sources["tensor_parallel"] == "model.transformer.tensor_model_parallel_size"
    assert run.sources["model_fields.num_layers"] == "model.transformer.num_layers"


def test_data_parallel_stated(tmp_path):
    run = read_bridge_config(write(tmp_path, "data_parallel_size: 8\ncomm_overlap: null\ntrain: {}"))
    assert run.data_parallel == 8 and run.sources["data_parallel"] == "data_parallel_size"
    run = read_bridge_config(write(tmp_path, "comm_overlap: {data_parallel_size: null}"))
    assert run.data_parallel is None and run.sources["data_parallel"] == "comm_overlap.data_parallel_size"
    with pytest.raises(BridgeConfigError, match="is 8 but comm_overlap.data_parallel_size is 4"):
        read_bridge_config(write(tmp_path, "data_parallel_size: 8\ncomm_overlap: {data_parallel_size: 4}"))


def test_distributed_optimizer_either_turns_it_on(tmp_path):
    run = read_bridge_config(
        write(tmp_path, "ddp: {use_distributed_optimizer: false}\noptimizer: {use_distributed_optimizer: true}")
    )
    assert run.use_distributed_optimizer is True
    assert run.sources["use_distributed_optimizer"] == "optimizer.use_distributed_optimizer"
    run = read_bridge_config(write(tmp_path, "ddp: {use_distributed_optimizer: false}"))
    assert (
        run.use_distributed_optimizer is False
        and run.sources["use_distributed_optimizer"] == "ddp.use_distributed_optimizer"
    )


def test_offline_packing(tmp_path):
    run = read_bridge_config(write(tmp_path, "dataset: {enable_in_batch_packing: false, enable_offline_packing: true}"))
    assert run.packing is True and run.sources["packing"] == "dataset.enable_offline_packing"


def test_interpolations(tmp_path):
    path = write(
        tmp_path,
        """
        base: {mbs: 2}
        train: {micro_batch_size: '${base.mbs}', global_batch_size: '${train.gbs_value}', gbs_value: 64}
        model: {seq_length: '${dataset.seq_length}'}
        dataset: {seq_length: 4096}
        """,
    )
    run = read_bridge_config(path)
    assert (run.micro_batch_size, run.global_batch_size, run.seq_length) == (2, 64, 4096)
    assert run.sources["micro_batch_size"] == "train.micro_batch_size"
    for value, match in [
        ("'${oc.env:MBS}'", "OmegaConf interpolation"),
        ("'mbs-${base.mbs}'", "OmegaConf interpolation"),
        ("'${.mbs}'", "OmegaConf interpolation"),
        ("'${nowhere.at_all}'", "refers to nowhere.at_all, which the file does not have"),
        ("'${train.micro_batch_size}'", "circular"),
    ]:
        bad = write(tmp_path, f"base: {{mbs: 2}}\ntrain: {{micro_batch_size: {value}}}")
        with pytest.raises(BridgeConfigError, match=match) as e:
            read_bridge_config(bad)
        assert bad in str(e.value) and e.value.field == "train.micro_batch_size"


def test_interpolated_section(tmp_path):
    run = read_bridge_config(write(tmp_path, "shared: {micro_batch_size: 4}\ntrain: '${shared}'"))
    assert run.micro_batch_size == 4


def test_targets_and_calls_are_ignored(tmp_path):
    path = write(
        tmp_path,
        """
        _target_: megatron.bridge.training.config.ConfigContainer
        model:
          _target_: some.Provider
          params_dtype: {_call_: false, _target_: torch.bfloat16}
          init_method: {_args_: [], _partial_: true, _target_: torch.nn.init.normal_, std: 0.02}
          num_layers: 2
        """,
    )
    run = read_bridge_config(path)
    assert run.model_target == "some.Provider" and run.model_fields == {"num_layers": 2}


def test_aliases_are_not_expanded(tmp_path):
    lines = ["a0: &a0 [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]  # 10**9 leaves if expanded
    path = write(tmp_path, "\n".join(lines) + "\ntrain: {micro_batch_size: 2, junk: *a8}\n")
    assert read_bridge_config(path).micro_batch_size == 2


# --------------------------------------------------------------------------- bad inputs


def check_error(path: str, match: str, field: str | None = None) -> BridgeConfigError:
    with pytest.raises(BridgeConfigError, match=match) as e:
        read_bridge_config(path)
    assert str(e.value).startswith(f"{path}: "), str(e.value)
    assert isinstance(e.value, VlmdataError) and e.value.path == path and e.value.field == field
    return e.value


@pytest.mark.parametrize(
    "text, match",
    [
        ("train: {micro_batch_size: [1, 2\n", "not valid YAML"),
        ("key: value\n\tbad: tab\n", "not valid YAML"),
        ("a: 1\n---\nb: 2\n", "not valid YAML"),
        ("- train\n- model\n", "the YAML document is a list, not a mapping"),
        ("just a string\n", "the YAML document is the string 'just a string', not a mapping"),
        ("42\n", "the YAML document is the number 42, not a mapping"),
        ("", "the YAML document is empty, not a mapping"),
        ("# only a comment\n", "the YAML document is empty, not a mapping"),
        ("__module__: megatron.energon\n__class__: ChatMLWebdataset\n", "none of the sections train, model"),
        ("!!python/object/apply:os.system ['true']\n", "not valid YAML"),
        # OmegaConf (Bridge's loader) refuses a duplicate key; PyYAML kept the last one silently
        (
            "model:\n  tensor_model_parallel_size: 2\n  tensor_model_parallel_size: 4\n",
            r"not valid YAML \(found duplicate key tensor_model_parallel_size, line 3 column 3\)",
        ),
    ],
)
def test_not_a_bridge_config(tmp_path, text, match):
    check_error(write(tmp_path, text), match)


def test_binary_garbage(tmp_path):
    path = tmp_path / "run_config.yaml"
    path.write_bytes(b"\x00\xff\xfe\x89PNG\r\n\x1a\n" + bytes(range(256)))
    check_error(str(path), "not valid YAML")


def test_nested_too_deeply(tmp_path):
    check_error(write(tmp_path, "train: " + "[" * 5000 + "]" * 5000 + "\n"), "nested too deeply")


@pytest.mark.parametrize(
    "text, field, match",
    [
        ("train: 5", "train", "is the number 5, not a mapping"),
        ("train: [1, 2]", "train", "is a list, not a mapping"),
        ("train: {micro_batch_size: '2'}", "train.micro_batch_size", "must be an integer, not the string '2'"),
        ("train: {micro_batch_size: 2.0}", "train.micro_batch_size", "must be an integer, not the number 2.0"),
        ("train: {micro_batch_size: true}", "train.micro_batch_size", "must be an integer, not the boolean True"),
        ("train: {global_batch_size: 0}", "train.global_batch_size", "must be at least 1, not 0"),
        ("train: {global_batch_size: -32}", "train.global_batch_size", "must be at least 1, not -32"),
        ("model: {tensor_model_parallel_size: {a: 1}}", "model.tensor_model_parallel_size", "not a mapping"),
        ("model: {freeze_vision_model: 'yes please'}", "model.freeze_vision_model", "must be true or false"),
        ("model: {freeze_language_model: 1}", "model.freeze_language_model", "must be true or false"),
        ("model: {recompute_granularity: none}", "model.recompute_granularity", "must be null or one of"),
        ("model: {recompute_granularity: partial}", "model.recompute_granularity", "'selective' | 'full'"),
        ("model: {recompute_method: layers}", "model.recompute_method", "'uniform' | 'block'"),
        ("model: {recompute_num_layers: -1}", "model.recompute_num_layers", "must be at least 0"),
        ("model: {recompute_modules: core_attn}", "model.recompute_modules", "must be a list of strings"),
        ("model: {num_layers: '48'}", "model.num_layers", "must be an integer"),
        ("model: {deepstack_visual_indexes: [8, x]}", "model.deepstack_visual_indexes", "list of integers"),
        ("model: {vision_config: 3}", "model.vision_config", "not a mapping"),
        ("model: {_target_: 7}", "model._target_", "must be a string, not the number 7"),
        ("dataset: {enable_in_batch_packing: 'on'}", "dataset.enable_in_batch_packing", "must be true or false"),
        ("dataset: {pad_to_multiple_of: 0}", "dataset.pad_to_multiple_of", "must be at least 1"),
        ("ddp: {use_distributed_optimizer: 0}", "ddp.use_distributed_optimizer", "must be true or false"),
        ("comm_overlap: {data_parallel_size: eight}", "comm_overlap.data_parallel_size", "must be an integer"),
        ("train: {manual_gc: 'off'}", "train.manual_gc", "must be true or false"),
        ("train: {manual_gc_interval: -1}", "train.manual_gc_interval", "must be at least 0"),
        ("train: {manual_gc_interval: 1.5}", "train.manual_gc_interval", "must be an integer"),
    ],
)
def test_wrong_types_name_field_and_file(tmp_path, text, field, match):
    err = check_error(write(tmp_path, text + "\n"), match, field)
    assert field in str(err)


def test_missing_file(tmp_path):
    check_error(str(tmp_path / "nope.yaml"), "no such file")


def test_directory(tmp_path):
    check_error(str(tmp_path), "is a directory, not a regular file")


@pytest.mark.timeout(30)
def test_fifo_is_refused_without_blocking(tmp_path):
    fifo = str(tmp_path / "run_config.yaml")
    os.mkfifo(fifo)
    check_error(fifo, "is a FIFO, not a regular file")


def test_device_is_refused():
    check_error("/dev/zero", "is a device, not a regular file")


def test_too_large(tmp_path):
    path = tmp_path / "run_config.yaml"
    with open(path, "wb") as f:
        f.write(b"train: {micro_batch_size: 2}\n")
        f.truncate(MAX_BYTES + 1)  # sparse: nothing is written
    check_error(str(path), f"more than the limit of {MAX_BYTES}")


def test_size_cap_is_the_module_constant(tmp_path, monkeypatch):
    monkeypatch.setattr(bridge_config, "MAX_BYTES", 16)
    check_error(write(tmp_path, "train: {micro_batch_size: 2}\n"), "more than the limit of 16")


def test_remote_url_is_refused():
    with pytest.raises(BridgeConfigError, match="must be a local file"):
        read_bridge_config("s3://bucket/run_config.yaml")


def test_file_url(tmp_path):
    path = write(tmp_path, "train: {micro_batch_size: 3}\n")
    assert read_bridge_config("file://" + path).micro_batch_size == 3
