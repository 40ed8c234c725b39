"""The benchmark's configuration against the run's (issue 30): the settings read from Bridge-written recipes, the
chain of measured links, the composed layout on hand-computable cases, the attribution exact on a fake workload
with known costs per setting, degenerate benchmarks, and a verdict that does not flip between noisy repeats."""

import math

import numpy as np
import pytest
from audit_fakes import SMALL_PIXELS, FakeClock, ShapeCostWorkload

from vlmdata.audit.analysis.layout import expert_share, layout_efficiency
from vlmdata.audit.analysis.metrics import summarize
from vlmdata.audit.analysis.verdict import decide
from vlmdata.audit.phases.runner import run_audit
from vlmdata.audit.planning.resolve import resolve
from vlmdata.audit.report import build_report
from vlmdata.audit.settings.benchmark import arms, resolve_benchmark
from vlmdata.audit.settings.config import AuditConfig
from vlmdata.audit.sources.registry import AuditError

FIX = "tests/audit/fixtures"
SFT = f"{FIX}/bridge_qwen3_vl_30b_a3b_sft.yaml"
MOCK = f"{FIX}/bridge_qwen3_vl_30b_a3b_pretrain_mock.yaml"
SFT_235 = f"{FIX}/bridge_qwen3_vl_235b_a22b_sft.yaml"
MOCK_235 = f"{FIX}/bridge_qwen3_vl_235b_a22b_pretrain_mock.yaml"
HF_30B = f"{FIX}/hf_qwen3_vl_30b_a3b.json"


def _bench(run_yaml, bench_yaml, **kw):
    cfg = AuditConfig(bridge_config=run_yaml, benchmark_config=bench_yaml, model_config=HF_30B, **kw)
    return resolve_benchmark(cfg, resolve(cfg).run)


# ------------------------------------------------------------------ the settings, from Bridge's own recipes


def test_pretrain_mock_against_sft_differences_and_sources():
    b = _bench(SFT, MOCK)
    diffs = {d.key: (d.run, d.benchmark, d.run_source, d.benchmark_source, d.kind) for d in b.diffs}
    assert diffs == {
        "tp": (1, 4, "bridge config", "benchmark config", "composed"),
        "pp": (1, 2, "bridge config", "benchmark config", "composed"),
        "ep": (8, 4, "bridge config", "benchmark config", "composed"),
        "dp": (
            8,
            1,
            "assumed",
            "derived",
            "composed",
        ),  # neither file records DP: assumed, the smallest the layout allows
        "freeze_language_model": (False, True, "bridge config", "benchmark config", "measured"),
        "freeze_vision_model": (False, True, "bridge config", "benchmark config", "measured"),
    }
    # the chain: each freeze, then the layout (its padding is the same, its micro-batches per rank 2 -> 16)
    assert [lk.name for lk in b.links] == ["freeze_language_model", "freeze_vision_model", "layout"]
    assert [lk.spec.micro_batches for lk in b.links] == [2, 2, 16]
    assert b.bench_side.dataset_target.endswith("MockVLMSFTDatasetConfig")
    assert b.run_side.dataset_target.endswith("DirectHFSFTDatasetConfig")
    assert b.bench_side.gpus_per_replica == 8 and b.run_side.gpus_per_replica == 1


def test_235b_pretrain_mock_adds_context_parallel():
    cfg = AuditConfig(
        bridge_config=SFT_235, benchmark_config=MOCK_235, model_config=f"{FIX}/hf_qwen3_vl_235b_a22b.json"
    )
    b = resolve_benchmark(cfg, resolve(cfg).run)
    keys = {d.key for d in b.diffs}
    assert {"pp", "ep", "cp", "freeze_language_model", "freeze_vision_model"} <= keys
    assert b.bench_side.gpus_per_replica == 4 * 16 * 2


def test_flags_win_over_the_benchmark_file_and_unset_keys_are_the_runs():
    b = _bench(SFT, MOCK, benchmark={"freeze_vision_model": False, "force_balance": True})
    d = {x.key: x for x in b.diffs}
    assert "freeze_vision_model" not in d
    assert d["force_balance"].benchmark is True and d["force_balance"].benchmark_source == "flag"
    only = AuditConfig(bridge_config=SFT, model_config=HF_30B, benchmark={"recompute": "full"})
    b2 = resolve_benchmark(only, resolve(only).run)
    assert [(x.key, x.benchmark_source) for x in b2.diffs] == [("recompute", "flag")]
    assert [lk.name for lk in b2.links] == ["recompute"]


@pytest.mark.parametrize(
    "given, words",
    [({"nope": 1}, "not a benchmark setting"), ({"tp": 0}, "integer"), ({"recompute": "most"}, "one of")],
)
def test_bad_benchmark_settings_are_one_line(given, words):
    cfg = AuditConfig(model_config=HF_30B, benchmark=given)
    with pytest.raises(AuditError, match=words):
        resolve_benchmark(cfg, resolve(cfg).run)


def test_no_benchmark_no_arms():
    cfg = AuditConfig()
    assert resolve_benchmark(cfg, resolve(cfg).run) is None
    assert arms(("imagefree", "real"), ("imagefree",), None) == {}


def test_arms_name_the_counterfactuals():
    b = _bench(SFT, MOCK)
    a = arms(("imagefree", "bridge-noise", "synthetic", "real"), ("imagefree", "bridge-noise"), b)
    assert list(a) == [
        "imagefree",
        "bridge-noise",
        "synthetic",
        "real",
        "imagefree@run",
        "imagefree@+freeze_language_model",
        "imagefree@+freeze_vision_model",
        "bridge-noise@run",
        "bridge-noise@+freeze_language_model",
        "bridge-noise@+freeze_vision_model",
        "real@benchmark",
    ]
    assert a["imagefree"][1] == b.bench_side.run and a["real"][1] == b.run_side.run
    assert a["imagefree@+freeze_language_model"][1].freeze_language_model is True
    assert a["imagefree@+freeze_language_model"][1].freeze_vision_model is False


# ------------------------------------------------------------------ the composed layout, by hand

STAGES = {"vision": 20.0, "lm_forward": 30.0, "backward_decoder": 30.0, "lm_head_loss": 5.0, "backward_head": 5.0,
          "optimizer": 8.0, "data_wait": 2.0}  # fmt: skip
# V = 20, D = 60, H = 10, O = 8, W = 2, T0 = 100


def test_one_gpu_layout_is_perfect():
    lay = layout_efficiency(STAGES, micro_batches=4)
    assert lay["efficiency"] == pytest.approx(1.0)
    assert lay["groups"] == {"V": 20.0, "D": 60.0, "H": 10.0, "O": 8.0, "W": 2.0, "T0": 100.0}


def test_tensor_parallel_divides_all_but_the_host():
    lay = layout_efficiency(STAGES, micro_batches=4, tp=4)
    assert lay["times_ms"]["T1"] == pytest.approx(2 + 98 / 4)
    assert lay["efficiency"] == pytest.approx(100 / (4 * 26.5))


def test_context_parallel_replicates_the_vision_tower():
    lay = layout_efficiency(STAGES, micro_batches=4, cp=2)
    assert lay["times_ms"]["T2"] == pytest.approx(2 + 4 + 20 + 35)  # W + O/2 + V + (D + H)/2
    assert lay["terms"]["cp"] == pytest.approx(100 / (2 * 61))


def test_pipeline_bubble_and_the_vision_tower_on_stage_0():
    lay = layout_efficiency(STAGES, micro_batches=4, pp=2, layers=48)
    # per micro-batch: v = 5, d = 15, h = 2.5; s0 = 5 + 7.5, s1 = 7.5 + 2.5; T4 = 2 + 4 + (4 + 1) * 12.5
    assert lay["stage_ms"] == pytest.approx([12.5, 10.0])
    assert lay["times_ms"]["T4"] == pytest.approx(2 + 4 + 5 * 12.5)
    assert lay["efficiency"] == pytest.approx(100 / (2 * 68.5))
    uneven = layout_efficiency(STAGES, micro_batches=4, pp=2, layers=48, pp_first_layers=16)
    assert uneven["stage_ms"] == pytest.approx([5 + 15 / 3, 15 * 2 / 3 + 2.5])
    interleaved = layout_efficiency(STAGES, micro_batches=4, pp=2, layers=48, vp=2)
    assert interleaved["times_ms"]["T4"] == pytest.approx(2 + 4 + 4.5 * 12.5)


def test_expert_imbalance_only_under_natural_routing_with_ep():
    kw = {"micro_batches": 4, "ep": 8, "expert_fraction": 0.5, "imbalance": 1.2}
    natural = layout_efficiency(STAGES, **kw)
    assert natural["times_ms"]["T3"] == pytest.approx(100 + 60 * 0.5 * 0.2)
    assert natural["terms"]["experts"] == pytest.approx(100 / 106)
    assert layout_efficiency(STAGES, **kw, force_balance=True)["efficiency"] == pytest.approx(1.0)
    assert layout_efficiency(STAGES, **{**kw, "ep": 1})["efficiency"] == pytest.approx(1.0)
    assert list(natural["sensitivity"]) == ["1.0", "1.1", "1.25", "1.5"]
    assert natural["sensitivity"]["1.5"] < natural["sensitivity"]["1.1"] < natural["sensitivity"]["1.0"] == 1.0


def test_terms_multiply_to_the_efficiency():
    lay = layout_efficiency(STAGES, micro_batches=8, tp=2, cp=2, pp=4, ep=4, layers=48, expert_fraction=0.6)
    assert math.prod(lay["terms"].values()) == pytest.approx(lay["efficiency"])


def test_expert_share_of_the_30b_decoder():
    from vlmdata.audit.settings.model_config import read_model_config

    x = expert_share(read_model_config(HF_30B).text)
    # 8 of 128 experts x 3 x 2048 x 768, attention 2048 x (32 + 2*4 + 32) x 128, router 2048 x 128
    attn = 2048 * 32 * 128 * 2 + 2 * 2048 * 4 * 128
    assert x == pytest.approx(8 * 3 * 2048 * 768 / (attn + 2048 * 128 + 8 * 3 * 2048 * 768))


# ------------------------------------------------------------------ attribution on a fake workload with known costs


class FreezeCostWorkload(ShapeCostWorkload):
    """ShapeCostWorkload whose cost drops to 40% when the language model is frozen and by a fifth when the
    vision tower is frozen on a batch with images (no effect without images): the factors are known."""

    def __init__(self, clock):
        super().__init__(clock, first_seen_ms=0.0)
        self.spec = None

    def configure(self, spec):
        self.spec = spec

    def __call__(self, batch):
        before = self.clock.now
        out = super().__call__(batch)
        ms = (self.clock.now - before) * 1e3
        k = 1.0
        if self.spec is not None and self.spec.freeze_language_model:
            k *= 0.4
        if (
            self.spec is not None
            and self.spec.freeze_vision_model
            and batch["visual_inputs"].image_grid_thw is not None
        ):
            k *= 0.8
        self.clock.now = before + ms * k / 1e3
        return {**out, "times_ms": {"step": ms * k, "total": ms * k}, "wall_ms": ms * k}


@pytest.fixture(scope="module")
def bench_report():
    clock = FakeClock()
    cfg = AuditConfig(
        sources=("imagefree", "bridge-noise", "real"),
        global_batch_size=2,
        seq_length=1024,
        min_steps=6,
        max_steps=6,
        loader_options=SMALL_PIXELS,
        benchmark={"freeze_language_model": True, "freeze_vision_model": True, "tp": 2},
    )
    result = run_audit(cfg, clock=clock, workload=FreezeCostWorkload(clock))
    return build_report([result], threshold=0.10)


def test_every_arm_is_measured_under_its_configuration(bench_report):
    assert set(bench_report["sources"]) == {
        "imagefree",
        "bridge-noise",
        "real",
        "imagefree@run",
        "imagefree@+freeze_language_model",
        "bridge-noise@run",
        "bridge-noise@+freeze_language_model",
        "real@benchmark",
    }
    arms_ = bench_report["benchmark"]["arms"]
    assert arms_["imagefree"]["config"] == "benchmark" and arms_["real"]["config"] == "run"
    assert arms_["imagefree@+freeze_language_model"]["config"] == "freeze_language_model"


def test_factors_are_exact_and_multiply_to_the_gap(bench_report):
    a = bench_report["attribution"]["mocks"]
    f = {x["factor"]: x for x in a["imagefree"]["factors"]}
    assert f["freeze_language_model"]["ratio"] == pytest.approx(2.5)  # the cost at 40%, same batches
    assert f["freeze_vision_model"]["ratio"] == pytest.approx(1.0)  # no image: nothing to freeze
    assert f["composed"]["ratio"] == pytest.approx(0.5)  # every fake ms is the host's: TP 2 halves per GPU
    g = {x["factor"]: x for x in a["bridge-noise"]["factors"]}
    assert g["freeze_vision_model"]["ratio"] == pytest.approx(1 / 0.8)
    for mock in ("imagefree", "bridge-noise"):
        head = a[mock]["headline"]["samples_per_s"]["ratio"]
        assert a[mock]["product"] == pytest.approx(head, rel=1e-9)
        assert math.prod(x["ratio"] for x in a[mock]["factors"]) == pytest.approx(head, rel=1e-9)
    # real under the benchmark's configuration: images, so both freezes cost: the interaction is measured
    assert a["imagefree"]["interaction"] is not None


def test_largest_factor_and_degenerate_finding_in_the_verdict(bench_report):
    v = bench_report["verdict"]
    a = bench_report["attribution"]["mocks"]["imagefree"]
    assert a["largest"]["factor"] == "freeze_language_model"
    assert a["degenerate"]["benchmark"]["reachable"] == 0  # projection only, unreachable without images
    assert "trains nothing" in a["degenerate"]["finding"]
    assert v["benchmark"]["states"]["imagefree"] == "offender"
    assert v["status"] == "MISLEADING"
    assert "your benchmark froze the language model: x2.50" in v["line"]
    bn = bench_report["attribution"]["mocks"]["bridge-noise"]["degenerate"]
    assert bn["benchmark"]["parts"] == ["projection"] and bn["finding"]  # trains the projector only


def test_report_tables_show_the_benchmark(bench_report, tmp_path):
    from vlmdata.audit.report import write_report

    paths = write_report(bench_report, str(tmp_path))
    md = open(paths["md"]).read()
    for title in ("Benchmark against the run, per GPU", "factor by factor", "Settings that differ", "Layouts composed"):
        assert title in md
    assert "| freeze_language_model | False | default | True | flag | measured |" in md


# ------------------------------------------------------------------ a verdict that does not flip between repeats


def _runs(rng, ratio, steps=12, noise=0.01):
    real_ms = 1000 * (1 + noise * rng.standard_normal(steps))
    mock_ms = 1000 / ratio * (1 + noise * rng.standard_normal(steps))
    rec = lambda ms: [{"step_ms": float(m), "samples": 32, "tokens_nonpad": 32000, "flops": 1e15} for m in ms]  # noqa: E731
    return {
        "imagefree": {"records": rec(mock_ms), "world_size": 1, "interleaved": True},
        "real": {"records": rec(real_ms), "world_size": 1, "interleaved": True},
    }


@pytest.mark.parametrize("margin, expect_flip", [(0.03, False), (0.0, True)])
def test_repeats_between_1_09_and_1_14_give_one_verdict(margin, expect_flip):
    """Four runs of one configuration read 1.09-1.14 (issue 30: a run-to-run term one run's bootstrap does not
    see). With the margin every repeat is UNDECIDED; without it the same runs flip."""
    rng = np.random.default_rng(7)
    statuses = []
    for ratio in (1.09, 1.10, 1.11, 1.14):
        runs = _runs(rng, ratio)
        summaries = {k: summarize(v["records"]) for k, v in runs.items()}
        statuses.append(decide(runs, summaries, threshold=0.10, repeat_margin=margin)["status"])
    assert (len(set(statuses)) > 1) == expect_flip
    if not expect_flip:
        assert statuses == ["UNDECIDED"] * 4


def test_a_clear_gap_stays_misleading_with_the_margin():
    rng = np.random.default_rng(3)
    for ratio in (1.9, 2.0, 2.1):
        runs = _runs(rng, ratio)
        summaries = {k: summarize(v["records"]) for k, v in runs.items()}
        assert decide(runs, summaries, threshold=0.10, repeat_margin=0.03)["status"] == "MISLEADING"


# ------------------------------------------------------------------ audit compare: the settings two runs differ in


def test_compare_lists_the_settings_the_runs_differ_in():
    from vlmdata.audit.logs import compare_logs

    rep = compare_logs(f"{FIX}/bridge_mock.log", f"{FIX}/bridge_real.log", mock_config=MOCK, real_config=SFT)
    diffs = {d["key"]: (d["mock"], d["real"], d["mock_from"]) for d in rep["settings"]}
    assert diffs == {
        "freeze_language_model": ("true", "false", "config"),
        "freeze_vision_model": ("true", "false", "config"),
        "tp": ("4", "1", "config"),
        "pp": ("2", "1", "config"),
        "ep": ("4", "8", "config"),
        "sequence_parallel": ("true", "false", "config"),
        "dataset": ("MockVLMSFTDatasetConfig", "DirectHFSFTDatasetConfig", "config"),
    }
    assert any("--benchmark-config MOCK.yaml" in n for n in rep["notes"])
    assert "the runs differ in configuration: freeze_language_model true vs false" in rep["verdict"]["line"]
    plain = compare_logs(f"{FIX}/bridge_mock.log", f"{FIX}/bridge_real.log")
    assert plain["settings"] == [] and "differ in configuration" not in plain["verdict"]["line"]


def test_compare_reads_settings_from_the_logs_dumps(tmp_path):
    from vlmdata.audit.logs import compare_logs

    real = open(f"{FIX}/bridge_real.log").read()
    frozen = real.replace("model:\n", "model:\n  freeze_language_model: true\n  tensor_model_parallel_size: 4\n", 1)
    (tmp_path / "mock.log").write_text(frozen)
    (tmp_path / "real.log").write_text(real.replace("model:\n", "model:\n  freeze_language_model: false\n", 1))
    rep = compare_logs(str(tmp_path / "mock.log"), str(tmp_path / "real.log"))
    assert [(d["key"], d["mock"], d["real"], d["mock_from"]) for d in rep["settings"]] == [
        ("freeze_language_model", "true", "false", "log")
    ]
