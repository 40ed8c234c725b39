"""The audit's first contact with a user's run (issue 33): the plan before anything is built (``--plan``), the
refusal of what will not fit, phases visible from the start, the budget kept and the stop rule said, the same notes
in every rendering, no efficiency for a stage that did no work. On CPU with Bridge-written YAMLs; times on a fake
clock, never the machine's."""

import json

import pytest
from audit_fakes import SMALL_PIXELS, FakeClock, ShapeCostWorkload

import vlmdata.audit.phases.preview as preview_mod
import vlmdata.audit.planning.estimate as estimate
from vlmdata.audit.phases.preview import preview
from vlmdata.audit.phases.runner import run_audit
from vlmdata.audit.planning.resolve import resolve
from vlmdata.audit.report import build_report, write_report
from vlmdata.audit.report.run_tables import summary_stage_tflops
from vlmdata.audit.settings.config import AuditConfig
from vlmdata.audit.sources.registry import AuditError
from vlmdata.audit.workload.stages import backward_factors
from vlmdata.cli.main import main

FIX = "tests/audit/fixtures"
MOCK_30B = f"{FIX}/bridge_qwen3_vl_30b_a3b_pretrain_mock.yaml"
SFT_30B = f"{FIX}/bridge_qwen3_vl_30b_a3b_sft.yaml"
GIB = 1 << 30


@pytest.fixture
def fixed_device(monkeypatch):
    """A device of known memory (64 GiB) and matmul rate (10 GFLOP/s): the plan's figures are then the code's."""
    monkeypatch.setattr(estimate, "available_memory", lambda device: (64 * GIB, "test RAM"))
    monkeypatch.setattr(preview_mod, "device_flops", lambda device: 10e9)


def test_the_plan_of_the_default_run_resolves_everything_without_building(fixed_device, monkeypatch):
    import vlmdata.audit.workload.workloads as workloads

    monkeypatch.setattr(workloads, "build_model", lambda *a, **k: pytest.fail("the plan built a model"))
    p = preview(AuditConfig())
    settings = {r["setting"]: (r["value"], r["from"]) for r in p["settings"]}
    assert settings["seq_length"] == (2048, "default") and settings["micro_batches_per_step"] == (4, "derived")
    assert settings["budget_s"] == (200.0, "default") and settings["device"] == ("cpu", "default")
    assert p["arms"] == list(AuditConfig().sources) and p["benchmark"] is None
    assert p["model"]["params"]["total"] == p["measured"]["params"]["total"] > 0 and p["measured"]["fits"]
    assert p["steps"] == {**p["steps"], "min": 12, "max": 30, "real_samples": 89}  # one epoch of the sample data
    t = p["times"]
    assert t["step_flops"] > 0 and t["round_s"] == pytest.approx(t["step_flops"] * 4 * 4 / (10e9 * 0.8))
    assert t["total_s"] == pytest.approx(t["before_measuring_s"] + t["measure_s"])
    assert "`budget_s` 3.3 min bounds the whole command" in p["budget"]["line"]
    assert "settled" in p["stop_rule"] and "`max_steps`" in p["stop_rule"]


@pytest.mark.parametrize("written", [0, -100, True, "89", 2.5])
def test_a_manifest_count_of_no_samples_leaves_the_epoch_unknown_and_a_bad_one_is_refused(
    fixed_device, tmp_path, written
):
    import shutil

    real = tmp_path / "real"
    shutil.copytree("sample_shards", real)
    manifest = json.loads((real / "manifest.json").read_text())
    manifest["accounting"]["written"] = written
    (real / "manifest.json").write_text(json.dumps(manifest))
    if written == 0 and not isinstance(written, bool):
        steps = preview(AuditConfig(real=str(real)))["steps"]
        assert steps["real_samples"] is None and steps["real_epoch_steps"] is None
        assert steps["min"] == steps["max"] == 30 and steps["min_why"] == "max_steps (real's epoch unknown)"
    else:
        with pytest.raises(AuditError, match=r"manifest\.json: accounting 'written' is missing or not a non-negative"):
            preview(AuditConfig(real=str(real)))


def test_the_plan_of_each_recipe_kind_names_what_is_measured(fixed_device):
    for yaml_name, family in (
        ("bridge_qwen3_vl_30b_a3b_pretrain_mock", "qwen3-vl-moe"),
        ("bridge_qwen3_vl_30b_a3b_peft", "qwen3-vl-moe"),
        ("bridge_qwen3_vl_8b_sft", "qwen3-vl"),
        ("bridge_qwen2_5_vl_7b_sft", "qwen2.5-vl"),
    ):
        p = preview(AuditConfig(bridge_config=f"{FIX}/{yaml_name}.yaml"), measure_rate=False)
        assert p["model"]["family"] == family
        m = p["measured"]
        assert m["params"]["total"] < p["model"]["params"]["total"]  # a slice (or EP's share) of the whole
        assert m["memory"]["total"] > m["memory"]["state"] > 0 and m["available_bytes"] == 64 * GIB
        assert any("DP" in n and "assumed" in n for n in p["notes"])
    peft = preview(AuditConfig(bridge_config=f"{FIX}/bridge_qwen3_vl_30b_a3b_peft.yaml"), measure_rate=False)
    trained = peft["measured"]["params"]["trainable_by_part"]
    assert trained["adapters"] == peft["measured"]["params"]["trainable"] > 0  # LoRA: the adapters only


def test_the_warm_up_estimate_follows_what_the_warm_up_runs(fixed_device):
    """Every micro-batch padded to seq_length (the pretrain-mock recipe: PP 2 and EP 4): the shape warm-up is
    about a round of the tower alone; the untimed step runs the model on 4 of its 16 micro-batches. Without the
    fixed length (Qwen2.5-VL-7B's SFT recipe packs its rows) a round of whole micro-batches."""
    from vlmdata.audit.phases.live_loaders import UNTIMED_MODEL_MICRO

    fixed = preview(AuditConfig(bridge_config=f"{FIX}/bridge_qwen3_vl_30b_a3b_pretrain_mock.yaml", warmup=1))
    t = fixed["times"]
    assert fixed["settings"] and t["round_s"] > 0
    assert 0 < t["shape_warmup_s"] < 0.5 * t["round_s"]  # the tower's share of a padded micro-batch
    assert t["untimed_steps_s"] == pytest.approx(t["round_s"] * UNTIMED_MODEL_MICRO / 16)
    assert t["warmup_s"] == pytest.approx(t["shape_warmup_s"] + t["untimed_steps_s"] + t["compile_s"])
    free = preview(AuditConfig(bridge_config=f"{FIX}/bridge_qwen2_5_vl_7b_sft.yaml", warmup=0))["times"]
    assert free["shape_warmup_s"] == pytest.approx(free["round_s"]) and free["untimed_steps_s"] == 0


def test_a_slice_that_will_not_fit_is_refused_before_anything_is_built(monkeypatch):
    import vlmdata.audit.workload.workloads as workloads

    monkeypatch.setattr(estimate, "available_memory", lambda device: (3 * GIB, "test RAM"))
    monkeypatch.setattr(workloads, "build_model", lambda *a, **k: pytest.fail("allocated before refusing"))
    cfg = AuditConfig(bridge_config=MOCK_30B, loader_options=SMALL_PIXELS)
    fit = resolve(cfg).fit
    assert fit is not None and not fit.fits and "3.0 GiB of test RAM" in str(fit.refusal)
    assert "`device` cuda" in str(fit.refusal)  # no slice fits: the settings that would are named
    with pytest.raises(AuditError, match="does not fit|needs about"):
        run_audit(cfg)


def test_the_largest_slice_that_fits_is_chosen_and_a_smaller_one_named(monkeypatch):
    four = resolve(AuditConfig(bridge_config=MOCK_30B, slice_layers=4)).fit
    five = resolve(AuditConfig(bridge_config=MOCK_30B, slice_layers=5)).fit
    assert four is not None and five is not None and four.memory["total"] < five.memory["total"]
    between = (four.memory["total"] + five.memory["total"]) // 2
    monkeypatch.setattr(estimate, "available_memory", lambda device: (between, "test RAM"))
    r = resolve(AuditConfig(bridge_config=MOCK_30B))
    assert r.layers == 4 and r.fit is not None and r.fit.fits
    assert any("measuring 4 of 48 decoder layers" in n and "this machine" in n for n in r.notes)
    assert not any("GPU" in n for n in r.notes if "measuring" in n)  # device words follow the device
    given = resolve(AuditConfig(bridge_config=MOCK_30B, slice_layers=5)).fit
    assert given is not None and not given.fits and "`slice_layers` 4 would fit" in str(given.refusal)


def test_cli_plan_prints_both_sides_of_a_benchmark_and_the_arms(fixed_device, capsys):
    args = ["audit", "--plan", "--bridge-config", SFT_30B, "--benchmark-config", MOCK_30B, "--gpus", "8"]
    assert main(args) == 0
    err = capsys.readouterr().err
    assert "the benchmark beside the run" in err and "benchmark config" in err and "measured: " in err
    assert "imagefree@run" in err and "real@benchmark" in err
    assert "--seq-length" in err and "--gpus" in err  # settings shown as the flags that set them
    assert "stop rule:" in err and "budget:" in err and "planned in" in err


def test_cli_plan_json_and_exit_2_when_it_will_not_fit(monkeypatch, capsys):
    monkeypatch.setattr(estimate, "available_memory", lambda device: (1 * GIB, "test RAM"))
    assert main(["audit", "--plan", "--json", "--bridge-config", MOCK_30B]) == 2
    plan = json.loads(capsys.readouterr().out)
    assert plan["measured"]["fits"] is False and plan["measured"]["refusal"]


def test_the_budget_bounds_the_whole_run_on_a_fake_clock():
    """Each round costs about a fake second here; the warm-up spends some too: measuring stops when another round
    would end past budget_s counted from the run's start, whatever min_steps says, and says why."""
    clock = FakeClock()
    work = ShapeCostWorkload(clock, first_seen_ms=200.0)
    cfg = AuditConfig(
        sources=("imagefree", "real"),
        global_batch_size=2,
        min_steps=30,
        max_steps=30,
        budget_s=3.0,
        loader_options=SMALL_PIXELS,
    )
    r = run_audit(cfg, clock=clock, workload=work)
    m = r["measurement"]
    assert m["stop"] == "budget" and 1 <= m["steps_run"] < 30
    assert clock.now <= cfg.budget_s  # the promise: the whole run within the budget
    rep = build_report([r], threshold=0.1)
    assert rep["stopped"].startswith(f"stopped after {m['steps_per_source']} steps per source: the time budget")


def test_the_budget_counts_from_the_command_start_and_keeps_room_for_the_report():
    """The command spent a fake second before the runner (its checks and plan): measuring ends by the budget less
    that second and less REPORT_SHARE of the budget kept for the analysis and the report; without ``started`` the
    same run measures more rounds."""
    from vlmdata.audit.phases.runner import REPORT_SHARE

    def run(started):
        clock = FakeClock()
        clock.now = 1.0  # the command began at 0
        cfg = AuditConfig(
            sources=("imagefree", "real"),
            global_batch_size=2,
            min_steps=30,
            max_steps=30,
            budget_s=4.0,
            loader_options=SMALL_PIXELS,
        )
        r = run_audit(cfg, clock=clock, workload=ShapeCostWorkload(clock, first_seen_ms=200.0), started=started)
        return clock.now, r["measurement"]

    end, m = run(started=0.0)
    assert m["stop"] == "budget" and end <= 4.0 * (1 - REPORT_SHARE)
    end_late, m_late = run(started=None)  # counted from the runner's start: a second later
    assert m_late["steps_run"] > m["steps_run"] and end_late > end


def test_phases_are_reported_in_order():
    seen = []

    def phase(name, detail=""):
        seen.append(name)
        from contextlib import nullcontext

        return nullcontext()

    clock = FakeClock()
    cfg = AuditConfig(
        sources=("imagefree", "real"), global_batch_size=2, min_steps=2, max_steps=2, loader_options=SMALL_PIXELS
    )
    run_audit(cfg, clock=clock, workload=ShapeCostWorkload(clock), phase=phase)
    assert seen == ["model build", "census", "warm-up"]


def test_notes_reach_every_rendering(tmp_path, capsys, monkeypatch):
    """A mock-data Bridge config, DP assumed: the same notes on the console, in report.md, report.html and
    report.json, under the verdict."""
    import audit_clocked_step

    audit_clocked_step.clocked(monkeypatch)
    args = ["audit", "--bridge-config", MOCK_30B, "--preset", "tiny", "--tp", "2", "--global-batch-size", "4"]
    args += ["--seq-length"]
    args += ["2048", "--sources", "imagefree,real", "--steps", "5", "-o", str(tmp_path)]
    args += ["--step", "audit_clocked_step:by_visual_tokens", "--loader-arg", "min_pixels=1024", "--loader-arg"]
    args += ["max_pixels=16384"]
    assert main(args) in (0, 3, 4)
    err = capsys.readouterr().err
    rep = json.loads((tmp_path / "report.json").read_text())
    mock = next(n for n in rep["notes"] if "mock-data run" in n)
    dp = next(n for n in rep["notes"] if "DP 2 assumed" in n)  # TP 2 (flag) x EP 4 (file): the smallest DP
    md, html = (tmp_path / "report.md").read_text(), (tmp_path / "report.html").read_text()
    for note in (mock, dp):
        assert f"Note: {note}" in md and "MockVLMSFTDatasetConfig" in html
    assert "note: " + mock.split("`")[0] in err and "--benchmark-config" in err  # flags on the console
    assert md.index("Note: ") < md.index("Settings:")  # beside the verdict, before the details
    assert rep["plan"]["steps"]["max"] == 5 and rep["stopped"]


def test_no_efficiency_for_a_stage_that_did_no_work():
    frozen = {"projection": True, "language": False, "vision": False, "decoder_adapters": False}
    assert backward_factors(frozen, images=False) == dict.fromkeys(backward_factors(frozen, True), 0)
    assert backward_factors(frozen, images=True) == {
        "lm_layers_flops": 1,  # input gradients through the frozen decoder to the projector
        "lm_head_flops": 1,
        "vision_flops": 0,  # nothing before the frozen tower trains
        "projector_flops": 1,  # its own weight gradients; no input gradient into the frozen tower
    }
    everything = dict(language=True, vision=True, projection=True)
    assert set(backward_factors(everything, True).values()) == {2}
    rec = {"lm_layers_flops": 3e9, "lm_head_flops": 3e9, "vision_flops": 0, "projector_flops": 0, "flops": 6e9}
    summary = {
        "stages_ms": {"backward_head": 5.0, "backward_decoder": 5.0, "lm_forward": 10.0},
        "step_ms": {"mean": 30},
    }
    t = summary_stage_tflops(summary, [rec], frozen)  # image-free, language and vision frozen
    assert t["backward_head"] is None and t["backward_decoder"] is None and t["backward"] is None
    assert t["lm_forward"] == pytest.approx(1e9 / 10.0 / 1e9)  # the forward did its work
    assert summary_stage_tflops(summary, [rec])["backward"] is not None  # without what trained: everything


def test_written_report_keeps_the_plan(tmp_path, fixed_device):
    clock = FakeClock()
    cfg = AuditConfig(
        sources=("imagefree", "real"), global_batch_size=2, min_steps=2, max_steps=2, loader_options=SMALL_PIXELS
    )
    rep = build_report([run_audit(cfg, clock=clock, workload=ShapeCostWorkload(clock))], threshold=0.1)
    rep["plan"] = preview(cfg, measure_rate=False)
    paths = write_report(rep, str(tmp_path), with_plots=False)
    assert json.loads(open(paths["json"]).read())["plan"]["arms"] == ["imagefree", "real"]


def test_a_budget_stop_short_of_an_interval_says_what_budget_would_measure_one():
    """4 steps per source after a budget stop (an interval needs 5): one more round of 24 s on top of the run's 147 s,
    a tenth more, rounded up to 10 s: 190 s. Past 5 steps, or stopped by another rule, nothing is added."""
    from vlmdata.audit.report.notes import stop_words

    m = {"stop": "budget", "steps_per_source": 4, "rounds": 4, "block": 1, "total_seconds": 147.0}
    words = stop_words({**m, "measure_seconds": 96.0})
    assert words == (
        "stopped after 4 steps per source: the time budget (`budget_s`) left no room for another round; an interval "
        "needs 5 steps per source: a round took 24 s here, so `budget_s` 190 would measure them"
    )
    assert stop_words({**m, "measure_seconds": 96.0, "steps_per_source": 5, "rounds": 5}).endswith("another round")
    assert stop_words({**m, "measure_seconds": 96.0, "stop": "max_steps"}).endswith("was reached")


def test_the_command_line_budget_counts_from_the_commands_start(monkeypatch):
    """`vlmdata audit` hands the session the moment the command began (``vlmdata.cli.STARTED``, before torch and
    transformers were imported), so ``--budget-s`` bounds the whole command, its imports included."""
    import vlmdata.cli
    from vlmdata.audit.phases import session
    from vlmdata.cli.main import main

    seen = {}

    class Stop(Exception):
        pass

    def spy(cfg, **kw):
        seen.update(kw)
        raise Stop

    monkeypatch.setattr(session, "run_session", spy)
    with pytest.raises(Stop):
        main(["audit", "--max-steps", "1", "--quiet"])
    assert seen["started"] == vlmdata.cli.STARTED


def test_the_plan_of_a_sweep_says_it_is_one_configurations():
    """--plan --sweep: the steps, times and budget are one audit's; the plan says how many the sweep runs."""
    from vlmdata.audit.phases.session import plan_only
    from vlmdata.audit.settings.config import AuditConfig

    plan = plan_only(AuditConfig(), sweep=["micro_batch_size=1,2", "recompute=none,selective,full"])
    assert any(n.startswith("a sweep of 6 configurations: the steps, times and budget above") for n in plan["notes"])
    assert not any("a sweep of" in n for n in plan_only(AuditConfig())["notes"])
