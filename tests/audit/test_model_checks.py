"""The model and run configurations as untrusted input (vlmdata.audit.settings.model_checks, issue 32): every field of a
config.json or a Bridge YAML checked for type, value and bounds before transformers or torch sees it; every
size bounded before it is allocated; errors name the file and the key."""

import copy
import json

import pytest
import yaml

from vlmdata.audit.planning.resolve import resolve
from vlmdata.audit.settings.config import AuditConfig
from vlmdata.audit.settings.model_config import ModelConfigError, read_model_config
from vlmdata.audit.settings.run_spec import RunSpec, RunSpecError
from vlmdata.errors import VlmdataError
from vlmdata.loaders.options import LoaderOptions

FIX = "tests/audit/fixtures"
MOE = json.load(open(f"{FIX}/hf_qwen3_vl_30b_a3b.json"))
DENSE25 = json.load(open(f"{FIX}/hf_qwen2_5_vl_7b.json"))
DENSE2 = json.load(open(f"{FIX}/hf_qwen2_vl_7b.json"))
SFT = yaml.safe_load(open(f"{FIX}/bridge_qwen3_vl_30b_a3b_sft.yaml"))


def _json(tmp_path, data=None, raw=None):
    p = tmp_path / "config.json"
    p.write_text(raw if raw is not None else json.dumps(data))
    return str(p)


def _set(base, section, **kw):
    d = copy.deepcopy(base)
    (d if section is None else d[section]).update(kw)
    return d


@pytest.mark.parametrize(
    "section, changes, match",
    [
        (
            "text_config",
            {"num_hidden_layers": True},
            "text_config.num_hidden_layers must be an integer, not the boolean",
        ),
        (
            "text_config",
            {"num_hidden_layers": 2.0},
            "text_config.num_hidden_layers must be an integer, not the number 2.0",
        ),
        ("text_config", {"num_hidden_layers": "2"}, "must be an integer, not the string '2'"),
        (
            "text_config",
            {"hidden_size": float("nan")},
            "text_config.hidden_size must be an integer, not the number nan",
        ),
        ("text_config", {"rms_norm_eps": "x"}, "text_config.rms_norm_eps must be a finite number"),
        ("text_config", {"rms_norm_eps": float("inf")}, "text_config.rms_norm_eps must be a finite number"),
        ("text_config", {"head_dim": 0}, "text_config.head_dim must be 1..1024, not 0"),  # was replaced by 64
        ("text_config", {"head_dim": 7}, "RoPE needs an even width"),
        ("text_config", {"head_dim": 100}, "mrope_section .* must sum to head width / 2 = 50"),
        ("text_config", {"moe_intermediate_size": 0}, "text_config.moe_intermediate_size must be 1..1048576"),
        ("text_config", {"num_experts": 10**9}, "text_config.num_experts must be 1..4096"),
        ("text_config", {"num_hidden_layers": 10**9}, "text_config.num_hidden_layers must be 1..1024"),
        ("text_config", {"vocab_size": 10**300}, "an integer of about 301 digits"),
        ("text_config", {"num_key_value_heads": 3}, "num_key_value_heads 3 must divide"),
        ("text_config", {"hidden_act": "nope"}, "text_config.hidden_act must be one of transformers' activations"),
        ("text_config", {"decoder_sparse_step": 0}, "text_config.decoder_sparse_step"),
        ("text_config", {"rope_scaling": [1]}, "text_config.rope_scaling must be a mapping"),
        ("vision_config", {"temporal_patch_size": 0}, "vision_config.temporal_patch_size"),
        ("vision_config", {"patch_size": 14}, "vision_config.patch_size is 14; .* need 16"),
        ("vision_config", {"intermediate_size": 0}, "vision_config.intermediate_size"),
        ("vision_config", {"deepstack_visual_indexes": [8, 16, 99]}, "holds 99, outside 0..26"),
        ("vision_config", {"deepstack_visual_indexes": [[[1]]]}, "must be a list of integers"),
        ("vision_config", {"num_heads": 7}, "vision_config.num_heads 7"),
        ("vision_config", {"out_hidden_size": 1000}, "must equal the decoder's hidden_size 2048"),
        (None, {"text_config": [1]}, "text_config must be a mapping, not a list"),
        (None, {"model_type": ["qwen3_vl_moe"]}, "is not supported"),
        (None, {"image_token_id": 5}, "image_token_id is 5, but the loaders' Qwen tokenizer writes 151655"),
    ],
)
def test_config_json_fields_are_checked_before_transformers(tmp_path, section, changes, match):
    with pytest.raises(ModelConfigError, match=match) as e:
        read_model_config(_json(tmp_path, _set(MOE, section, **changes)))
    assert "config.json" in str(e.value)


@pytest.mark.parametrize(
    "changes, match",
    [
        ({"hidden_size": float("nan")}, "hidden_size must be an integer"),
        ({"rope_scaling": {"type": "mrope", "mrope_section": [1, 2, 3]}}, "rope_scaling.mrope_section"),
        ({"rope_scaling": {"type": "yarn"}}, "rope_type"),
        ({"vision_config": {**DENSE25["vision_config"], "window_size": 100}}, "window_size 100 must be a multiple of"),
        ({"vision_config": {**DENSE25["vision_config"], "fullatt_block_indexes": [99]}}, "holds 99, outside 0..31"),
    ],
)
def test_qwen2_5_vl_flat_layout_is_checked(tmp_path, changes, match):
    with pytest.raises(ModelConfigError, match=match):
        read_model_config(_json(tmp_path, _set(DENSE25, None, **changes)))


def test_qwen2_vl_reads_as_its_own_family_with_its_towers_names():
    """Qwen2-VL-7B-Instruct's published config.json: the decoder at the top level, the tower ``embed_dim`` wide
    with an MLP of ``mlp_ratio`` times that, its ``hidden_size`` the merger's output; ``in_chans`` (the file's
    old name) is not transformers' ``in_channels``, so that one default is listed."""
    s = read_model_config(f"{FIX}/hf_qwen2_vl_7b.json")
    assert (s.family, s.loader_model, s.layers, s.experts) == ("qwen2-vl", "qwen2-vl", 28, None)
    v = s.describe()["vision"]
    assert (v["depth"], v["hidden_size"], v["mlp_width"], v["patch_size"]) == (32, 1280, 5120, 14)
    assert s.defaults == ("vision_config.in_channels=3",)


@pytest.mark.parametrize(
    "changes, match",
    [
        (
            {"vision_config": {**DENSE2["vision_config"], "hidden_size": 4096}},
            "hidden_size 4096 must equal the decoder's hidden_size 3584",
        ),
        ({"vision_config": {**DENSE2["vision_config"], "embed_dim": 1000}}, "num_heads 16 must split embed_dim 1000"),
        ({"vision_config": {**DENSE2["vision_config"], "mlp_ratio": 0}}, "vision_config.mlp_ratio must be 1..64"),
        ({"vision_config": {**DENSE2["vision_config"], "patch_size": 16}}, "patch_size is 16; .* need 14"),
        (
            {"vision_config": {k: v for k, v in DENSE2["vision_config"].items() if k != "embed_dim"}},
            "embed_dim is missing",
        ),
    ],
)
def test_qwen2_vl_fields_are_checked_by_its_own_names(tmp_path, changes, match):
    with pytest.raises(ModelConfigError, match=match):
        read_model_config(_json(tmp_path, _set(DENSE2, None, **changes)))


@pytest.mark.parametrize(
    "raw, match",
    [
        ('{"model_type": "qwen3_vl_moe", "x": ' + "9" * 5000 + "}", "not readable JSON"),  # int() digit limit
        ('{"model_type": "qwen3_vl_moe", "x": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested too deeply"),
        ('{"model_type": "qwen3_vl_moe"}', "text_config is missing"),  # not transformers' defaults, silently
    ],
)
def test_unusable_json_is_refused(tmp_path, raw, match):
    with pytest.raises(ModelConfigError, match=match):
        read_model_config(_json(tmp_path, raw=raw))


def test_missing_structural_fields_are_refused_and_defaults_listed(tmp_path):
    d = copy.deepcopy(MOE)
    del d["text_config"]["hidden_size"]
    with pytest.raises(ModelConfigError, match="text_config.hidden_size is missing"):
        read_model_config(_json(tmp_path, d))
    d = copy.deepcopy(MOE)
    del d["text_config"]["num_key_value_heads"], d["vision_config"]["intermediate_size"]
    s = read_model_config(_json(tmp_path, d))
    assert "text_config.num_key_value_heads=16" in s.defaults and "vision_config.intermediate_size=4304" in s.defaults
    assert read_model_config(f"{FIX}/hf_qwen3_vl_30b_a3b.json").defaults == ()


def test_read_model_config_refuses_a_non_path():
    with pytest.raises(ModelConfigError, match="`model_config` must be a path"):
        read_model_config(123)  # type: ignore[arg-type]


def _yaml(tmp_path, mutate=None, raw=None):
    d = copy.deepcopy(SFT)
    if mutate:
        mutate(d)
    p = tmp_path / "run_config.yaml"
    p.write_text(raw if raw is not None else yaml.safe_dump(d))
    return str(p)


def _resolve(path, **kw):
    return resolve(AuditConfig(bridge_config=path, sources=("imagefree", "real"), slice_layers=4, **kw))


@pytest.mark.parametrize(
    "changes, match",
    [
        (
            {"hidden_size": 60, "num_attention_heads": 4, "num_query_groups": 4, "kv_channels": None},
            "model.hidden_size gives heads 15 wide: RoPE needs an even width",
        ),
        (
            {"hidden_size": 60, "kv_channels": None},
            "model.hidden_size 60 is not a multiple of model.num_attention_heads",
        ),
        ({"num_query_groups": 3}, "model.num_query_groups 3 must divide model.num_attention_heads 32"),
        ({"num_layers": 10**9}, "model.num_layers must be 1..1024"),
        ({"num_moe_experts": 10**9}, "model.num_moe_experts must be 1..4096"),
        ({"tensor_model_parallel_size": 64}, r"model.tensor_model_parallel_size \(64\) must divide the model's 32"),
        ({"tensor_model_parallel_size": 10**6}, "model.tensor_model_parallel_size .* must be at most 65536"),
        ({"image_token_id": 7}, "model.image_token_id is 7"),
        (
            {"vision_config": {**SFT["model"]["vision_config"], "deepstack_visual_indexes": [8, 99]}},
            "model.vision_config.deepstack",
        ),
    ],
)
def test_bridge_model_values_name_file_and_key(tmp_path, changes, match):
    path = _yaml(tmp_path, lambda d: d["model"].update(changes))
    with pytest.raises(VlmdataError, match=match) as e:
        _resolve(path, dp=8)
    assert str(e.value).startswith(path)


def test_the_sequence_must_split_evenly_over_context_and_sequence_parallel_ranks(tmp_path):
    # Bridge 0.6.2's ConfigContainer.validate(): seq_length % (2 * CP) with CP > 1, and % lcm(2 CP, CP * TP) with
    # sequence parallelism; the 30B-A3B recipe pads every row to seq_length (EP 8), so a row would not split
    path = _yaml(tmp_path)
    with pytest.raises(VlmdataError, match=r"model.seq_length \(4096\) 4096 must be a multiple of 2 \* `cp` = 6") as e:
        _resolve(path, cp=3, dp=8)
    assert str(e.value).startswith(path)
    assert _resolve(path, cp=2, dp=8).run.cp == 2  # 4096 = 2 * 2 * 1024
    sp = _yaml(tmp_path, lambda d: d["model"].update(sequence_parallel=True, tensor_model_parallel_size=2))
    with pytest.raises(
        VlmdataError,
        match=r"`seq_length` 4095 must be a multiple of model.context_parallel_size \(1\) \* model.tensor_model_parallel_size \(2\) \(sequence parallel\) = 2",
    ):
        _resolve(sp, seq_length=4095, dp=8)
    assert _resolve(sp, seq_length=4094, dp=8).run.seq_length == 4094
    no_sp = _yaml(tmp_path, lambda d: d["model"].update(tensor_model_parallel_size=2))
    assert _resolve(no_sp, seq_length=4095, dp=8).run.seq_length == 4095  # without SP, Bridge asks nothing


def test_expert_parallel_must_divide_the_experts(tmp_path):
    path = _yaml(tmp_path, lambda d: d["model"].update(expert_model_parallel_size=3))
    with pytest.raises(VlmdataError, match=r"model.expert_model_parallel_size \(3\) must divide the model's 128"):
        _resolve(path, dp=3, global_batch_size=6)
    with pytest.raises(VlmdataError, match="`ep` must divide the model's 128 routed experts; got 256|got 256"):
        _resolve(_yaml(tmp_path), ep=256, dp=256, global_batch_size=512)


@pytest.mark.parametrize(
    "raw_tail, match",
    [("\nzzz: " + "9" * 5000 + "\n", "not usable as YAML"), ("\nzzz: " + "[" * 5000 + "]" * 5000 + "\n", "nested")],
)
def test_bridge_yaml_anywhere_in_the_file(tmp_path, raw_tail, match):
    from vlmdata.audit.settings.bridge_config import read_bridge_config
    from vlmdata.errors import BridgeConfigError

    path = _yaml(tmp_path, raw=open(f"{FIX}/bridge_qwen3_vl_30b_a3b_sft.yaml").read() + raw_tail)
    with pytest.raises(BridgeConfigError, match=match):
        read_bridge_config(path)


@pytest.mark.parametrize(
    "section, key, value, match",
    [
        ("train", "micro_batch_size", 10**12, "train.micro_batch_size"),
        ("train", "global_batch_size", 10**12, "train.global_batch_size"),
        ("model", "seq_length", 10**12, "model.seq_length"),
        ("train", "global_batch_size", 10**40, "must be at most"),
    ],
)
def test_bridge_run_sizes_are_bounded(tmp_path, section, key, value, match):
    def mutate(d):
        d[section][key] = value
        if key == "seq_length":
            d["dataset"]["seq_length"] = value

    with pytest.raises(VlmdataError, match=match):
        _resolve(_yaml(tmp_path, mutate), dp=8)


def test_run_and_api_sizes_are_bounded():
    for kw, match in (
        ({"micro_batch_size": 10**12}, "`micro_batch_size` must be at most 4096"),
        ({"seq_length": 2**63}, "`seq_length` must be at most"),
        ({"tp": 10**6}, "`tp` must be at most"),
    ):
        with pytest.raises(RunSpecError, match=match):
            RunSpec(**kw)
    for kw, match in (
        ({"seed": 2**64}, "`seed` must be at most"),
        ({"seed": 10**5000}, "an integer of 16610 bits"),
        ({"bridge_config": 123}, "`bridge_config` must be a path"),
        ({"model_config": 1.5}, "`model_config` must be a path"),
        ({"global_batch_size": 2**40}, "`global_batch_size` must be at most"),
    ):
        with pytest.raises(VlmdataError, match=match):
            AuditConfig(**kw)
    with pytest.raises(VlmdataError, match="`seq_length` must be at most"):
        LoaderOptions(seq_length=2**63)


def test_a_sweep_grid_is_bounded_before_it_is_built():
    from vlmdata.audit.phases.sweep import MAX_CONFIGS, parse_sweep
    from vlmdata.audit.sources.registry import AuditError

    thousand = ",".join(str(i) for i in range(1000))
    with pytest.raises(AuditError, match=f"1000 x 1000 x 1000 configurations; at most {MAX_CONFIGS}"):
        parse_sweep([f"a={thousand}", f"b={thousand}", f"c={thousand}"], user_step=True)
    with pytest.raises(AuditError, match="`sweep` must be a list"):
        parse_sweep("micro_batch_size=1,2")  # type: ignore[arg-type]
    assert len(parse_sweep(["micro_batch_size=1,2,4", "recompute=none,full"])) == 2


def test_a_seq_length_from_the_yaml_is_named_there_not_as_a_flag(tmp_path):
    """The census's "too short" error names the Bridge config the value came from (class 6, issue 32)."""
    from audit_fakes import FakeClock, ShapeCostWorkload

    from vlmdata.audit.phases.runner import run_audit

    path = tmp_path / "run_config.yaml"
    path.write_text(
        yaml.safe_dump({"train": {"micro_batch_size": 1, "global_batch_size": 2}, "model": {"seq_length": 128}})
    )
    cfg = AuditConfig(
        bridge_config=str(path), preset="tiny", sources=("imagefree", "real"), min_steps=3, max_steps=3, block=3
    )
    with pytest.raises(
        VlmdataError, match=r"need more than seq_length=128 \(the Bridge config .*run_config.yaml's\) tokens"
    ) as e:
        run_audit(cfg, clock=FakeClock(), workload=ShapeCostWorkload(FakeClock()))
    assert "`seq_length`=" not in str(e.value)
