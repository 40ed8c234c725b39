"""How an audit's settings resolve (vlmdata.audit.settings.config): flags over the Bridge config over the model config
over the device defaults, each setting's source, the slice decision, and the runner's global steps."""

import pytest
from audit_fakes import SMALL_PIXELS, FakeClock, ShapeCostWorkload

from vlmdata.audit.phases.runner import run_audit
from vlmdata.audit.planning.resolve import bridge_packs, resolve
from vlmdata.audit.settings.bridge_config import read_bridge_config
from vlmdata.audit.settings.config import DEVICE_DEFAULTS, AuditConfig
from vlmdata.audit.sources.registry import AuditError
from vlmdata.cli.main import parser as build_parser

FIX = "tests/audit/fixtures"
A3B = f"{FIX}/bridge_qwen3_vl_30b_a3b_sft.yaml"


def test_defaults_are_the_devices():
    r = resolve(AuditConfig())
    cpu = DEVICE_DEFAULTS["cpu"]
    assert r.shape.name == f"preset {cpu['preset']}" and r.run.micro_batches == cpu["micro_batches"]
    assert r.run.seq_length == cpu["seq_length"] and all(v == "default" for v in r.sources.values())


def test_compile_defaults_per_device():
    # CPU: inductor's compile of the tiny model costs more than the demo; CUDA: compiled, as TE's fused kernels
    assert AuditConfig().resolved_compile() == "none" == DEVICE_DEFAULTS["cpu"]["compile"]
    assert AuditConfig(device="cuda").resolved_compile() == "all" == DEVICE_DEFAULTS["cuda"]["compile"]
    assert AuditConfig(compile="vision").resolved_compile() == "vision"


def test_bridge_config_sets_the_run_and_the_model(monkeypatch):
    import vlmdata.audit.planning.estimate as estimate

    five = resolve(AuditConfig(bridge_config=A3B, slice_layers=5)).fit
    assert five is not None  # the slice's estimate is the memory this test's machine has: the default slice fits
    monkeypatch.setattr(estimate, "available_memory", lambda device: (five.memory["total"], "test RAM"))
    r = resolve(AuditConfig(bridge_config=A3B))
    assert (r.run.micro_batch_size, r.run.global_batch, r.run.seq_length, r.run.ep) == (2, 32, 4096, 8)
    assert r.run.data_parallel == 8 and r.run.micro_batches == 2 and r.run.force_seq_length
    assert r.run.seq_policy == "bridge"  # in-batch packing deferred to the step is not packing (0.6.2)
    assert r.sources["global_batch_size"] == "bridge config" and r.sources["model"] == "bridge config"
    assert r.shape.layers == 48 and r.experts == 16 and r.sliced and r.layers == 5  # 3 DeepStack + 2 plain
    assert any("does not fit" in n for n in r.notes)


def test_flags_win_and_say_so():
    r = resolve(AuditConfig(bridge_config=A3B, ep=4, global_batch_size=64, preset="tiny", slice_layers=2))
    assert r.run.ep == 4 and r.sources["ep"] == "flag" and r.sources["tp"] == "bridge config"
    assert r.run.micro_batches == 64 // (2 * 4) and r.shape.name == "preset tiny" and r.sources["model"] == "flag"
    assert r.layers == 2 and r.sources["slice_layers"] == "flag"


def test_model_config_and_its_mismatch_with_the_bridge_config():
    r = resolve(AuditConfig(model_config=f"{FIX}/hf_qwen2_5_vl_7b.json", bridge_config=A3B))
    assert r.shape.family == "qwen2.5-vl" and r.sources["model"] == "model config"
    assert any("num_layers is 48 but the model has 28" in n for n in r.notes)
    assert any("dense decoder" in n for n in r.notes)  # ep 8 on a model without experts


def test_packing_means_real_packing():
    b = read_bridge_config(A3B)
    assert b.packing and not bridge_packs(b)
    b2 = read_bridge_config(f"{FIX}/bridge_qwen3_vl_30b_a3b_sft_changed.yaml")
    assert bridge_packs(b2) is False


def test_bad_settings_are_audit_errors():
    with pytest.raises(AuditError, match="multiple of `micro_batch_size`"):
        resolve(AuditConfig(global_batch_size=3))
    with pytest.raises(AuditError, match="device"):
        AuditConfig(device="tpu")


def test_cli_flags_reach_the_config():
    from vlmdata.cli.commands.audit import config_from

    argv = [
        "audit",
        "--tp",
        "2",
        "--ep",
        "4",
        "--etp",
        "1",
        "--global-batch-size",
        "16",
        "--seq-policy",
        "max",
        "--recompute",
        "full",
        "--freeze-vision-model",
        "--slice-layers",
        "3",
        "--attention",
        "sdpa",
        "--compile",
        "decoder",
    ]
    args = build_parser(argv).parse_args(argv)
    cfg = config_from(args)
    assert (cfg.tp, cfg.ep, cfg.etp, cfg.global_batch_size, cfg.seq_policy) == (2, 4, 1, 16, "max")
    assert cfg.recompute == "full" and cfg.freeze_vision_model is True and cfg.freeze_language_model is None
    assert cfg.slice_layers == 3 and cfg.attention == "sdpa" and cfg.warmup is None
    assert cfg.resolved_compile() == "decoder"
    r = resolve(cfg)
    assert r.run.micro_batches == 16 // (2 * 2) and r.sources["recompute"] == "flag"


def test_steps_keeps_the_sources_interleaved():
    """`--steps N` fixes how many global steps each source gets, not how they are grouped: the sources still
    alternate in rounds of one step (the default block), so a drift of the machine's speed reaches every source
    alike. (It used to make one block of N steps per source: on the H200 that measured each source's steps in one
    ~10 s window, and the imagefree/real ratio moved by 15% between runs.)"""
    from vlmdata.audit.planning.plan import make_plan
    from vlmdata.cli.commands.audit import config_from

    def plan_of(*flags):
        argv = ["audit", *flags]
        return make_plan(config_from(build_parser(argv).parse_args(argv)))

    p = plan_of("--steps", "6")
    assert (p.block, p.cap, p.cfg.min_steps) == (1, 6, 6)
    p = plan_of("--steps", "6", "--block", "2")
    assert (p.block, p.cap) == (2, 6)
    assert plan_of("--steps", "2", "--block", "5").block == 2  # a block never exceeds the steps asked for


def test_the_cli_and_the_api_run_the_same_audit_with_no_arguments():
    """Every default lives in the library: `vlmdata audit` with no arguments and `run_audit(AuditConfig())`
    make the same config and resolve it into the same run (the result's `config` dict)."""
    from vlmdata.audit.planning.plan import make_plan
    from vlmdata.cli.commands.audit import config_from

    cli = config_from(build_parser(["audit"]).parse_args(["audit"]))
    assert cli == AuditConfig()
    assert make_plan(cli).config_dict() == make_plan(AuditConfig()).config_dict()
    assert make_plan(cli).config_dict()["loader_options"] == {}


def test_audit_config_validates_itself_and_names_the_parameter():
    for kw, name in (
        ({"block": 0}, "`block`"),
        ({"warmup": -1}, "`warmup`"),
        ({"precision": 2.0}, "`precision`"),
        ({"seq_policy": "pad64"}, "`seq_policy`"),
        ({"compile": "yes"}, "`compile`"),
        ({"loader_options": {"seq_length": 512}}, "`loader_options`: seq_length is set by the audit"),
        ({"loader_options": {"exact_image": True}}, "`loader_options`: unknown loader option 'exact_image'"),
        ({"loader_options": {"images": "drop"}}, "`loader_options`: loader option images="),
    ):
        with pytest.raises(AuditError, match=name):
            AuditConfig(**kw)
    cfg = AuditConfig(loader_options=SMALL_PIXELS)
    assert cfg.loader_changes() == SMALL_PIXELS and cfg.to_dict()["loader_options"] == SMALL_PIXELS
    with pytest.raises(AuditError, match="did you mean `seq_length`"):
        cfg.replace(seq_lenght=512)
    assert cfg.replace(seq_length=512).seq_length == 512


def test_runner_measures_global_steps():
    clock = FakeClock()
    work = ShapeCostWorkload(clock)
    cfg = AuditConfig(
        sources=("imagefree", "real"),
        global_batch_size=8,
        min_steps=3,
        max_steps=3,
        block=1,
        loader_options=SMALL_PIXELS,
    )
    res = run_audit(cfg, clock=clock, workload=work)
    assert res["measurement"]["micro_batches_per_step"] == 4 and res["measurement"]["unit"] == "global step"
    for src in res["sources"].values():
        assert [r["micro_batches"] for r in src["records"]] == [4, 4, 4]
        assert all(r["samples"] == 8 and len(r["micro"]) == 4 for r in src["records"])
    assert len(work.step_charges) == 1 + 2 * 3 * 4  # the warm-up full step, then every micro-batch once
    assert res["run"]["run"]["global_batch_size"] == 8 and res["straggler_model"]["sources"]


def test_manual_gc_flags_reach_the_run():
    """--manual-gc / --no-manual-gc and --manual-gc-interval become the run's (Bridge's train.manual_gc and
    manual_gc_interval), marked as flags; with neither, the run follows Bridge's recipes (manual, 100)."""
    from vlmdata.audit.planning.plan import make_plan
    from vlmdata.cli.commands.audit import config_from

    def run_of(*flags):
        argv = ["audit", *flags]
        res = make_plan(config_from(build_parser(argv).parse_args(argv))).res
        return (
            res.run.manual_gc,
            res.run.manual_gc_interval,
            res.sources["manual_gc"],
            res.sources["manual_gc_interval"],
        )

    assert run_of() == (True, 100, "default", "default")
    assert run_of("--no-manual-gc") == (False, 100, "flag", "default")
    assert run_of("--manual-gc", "--manual-gc-interval", "0") == (True, 0, "flag", "flag")
    with pytest.raises(SystemExit):
        build_parser(["audit"]).parse_args(["audit", "--manual-gc-interval", "-1"])
