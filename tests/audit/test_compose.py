"""From a measured slice to the user's step (vlmdata.audit.analysis.compose): a fake workload with a known cost per
decoder layer, the optimizer's shard, the modelled expert-parallel all-to-all. CPU, exact values."""

import pytest

from vlmdata.audit.analysis.compose import Composition, compose, compose_record, plan
from vlmdata.audit.settings.model_config import preset_shape, read_model_config
from vlmdata.audit.settings.run_spec import RunSpec
from vlmdata.audit.workload.stages import plain_layers

PLAIN_F, PLAIN_B, DS_F, DS_B, OTHER = 3.0, 5.0, 7.0, 9.0, 40.0  # ms per micro-batch


def fake_step(layers: int, deepstack: int, micro: int = 2, opt: float = 12.0) -> dict:
    """The record a global step of a model with ``layers`` decoder layers (the first ``deepstack`` carry
    DeepStack additions) would give: known per-layer forward/backward cost, OTHER ms of the rest."""
    plain = layers - deepstack
    f = deepstack * DS_F + plain * PLAIN_F
    b = deepstack * DS_B + plain * PLAIN_B
    return {
        "step_ms": micro * (OTHER + f + b) + opt,
        "micro_batches": micro,
        "times_ms": {
            "lm_forward": micro * f,
            "backward_decoder": micro * b,
            "optimizer": opt,
            "total": micro * (OTHER + f + b) + opt,
        },
        "micro": [{"ms": OTHER + f + b, "decoder_ms": f + b, "tokens_total": 4096} for _ in range(micro)],
        "plain_layers": {
            "forward_ms": micro * plain * PLAIN_F,
            "backward_ms": micro * plain * PLAIN_B,
            "layers": micro * plain,
            "layer_forward_ms": micro * PLAIN_F if plain else 0.0,  # one plain layer over the step
            "layer_backward_ms": micro * PLAIN_B if plain else 0.0,
        },
        "lm_layers_flops": 10 * layers,
        "lm_head_flops": 5,
        "vision_flops": 7,
        "projector_flops": 1,
    }


@pytest.mark.parametrize("k", [4, 5, 8])
def test_slice_composes_to_the_whole_model_exactly(k):
    whole = fake_step(12, 3)
    comp = Composition(layers_full=12, layers_measured=k, optimizer_scale=1.0)
    out = compose_record(fake_step(k, 3), comp)
    assert out["step_ms"] == pytest.approx(whole["step_ms"])
    assert out["times_ms"]["lm_forward"] == pytest.approx(whole["times_ms"]["lm_forward"])
    assert out["times_ms"]["backward_decoder"] == pytest.approx(whole["times_ms"]["backward_decoder"])
    assert [m["ms"] for m in out["micro"]] == pytest.approx([m["ms"] for m in whole["micro"]])
    assert out["composed_decoder"] == "plain layers" and out["measured_step_ms"] == fake_step(k, 3)["step_ms"]
    assert out["flops"] == 10 * 12 + 5 + 7 + 1


def test_scaling_every_layer_overstates_a_deepstack_slice():
    """What the first version did (L/k x the decoder): too much when the slice's layers are mostly DeepStack."""
    rec = fake_step(4, 3)
    rec["plain_layers"] = None
    out = compose_record(rec, Composition(12, 4, 1.0))
    assert out["composed_decoder"] == "scaled" and out["step_ms"] > fake_step(12, 3)["step_ms"]


def test_optimizer_shard_and_expert_parallel_all_to_all():
    comp = Composition(12, 12, 0.25, ep=8, top_k=8, hidden=2048, moe_layers=48, link_gbps=200.0, latency_us=25.0)
    per = 4096 * 8 * 2048 * 2 * 7 / 8  # bytes per call per layer
    a2a = 48 * 4 * (per / 200e9 * 1e3 + 0.025)
    assert comp.a2a_ms(4096) == pytest.approx(a2a)
    rec = compose_record(fake_step(12, 3), comp)
    assert rec["times_ms"]["optimizer"] == pytest.approx(3.0)
    assert rec["times_ms"]["ep_all_to_all"] == pytest.approx(2 * a2a)
    assert rec["step_ms"] == pytest.approx(fake_step(12, 3)["step_ms"] - 9.0 + 2 * a2a)
    recompute = Composition(12, 12, 1.0, ep=8, top_k=8, hidden=2048, moe_layers=48, recompute="full")
    assert recompute.a2a_ms(4096) == pytest.approx(a2a * 6 / 4)
    identity = Composition(12, 12, 1.0)
    assert identity.identity and compose([rec], identity) == [rec]


def test_plan_from_the_run_and_the_measured_model():
    shape = read_model_config("tests/audit/fixtures/hf_qwen3_vl_30b_a3b.json")
    run = RunSpec(global_batch_size=32, ep=8)  # DP 8, EDP 1
    k, layer, exp_per_layer = 5, 100, 60
    summary = {
        "slice": {"layers": k},
        "params_trainable": 1000 + k * layer,
        "params_trainable_experts": k * exp_per_layer,
        "params_trainable_decoder_layer": layer,
    }
    comp = plan(run, shape, summary)
    dense_full = (1000 + k * layer - k * exp_per_layer) + (48 - k) * (layer - exp_per_layer)
    experts_full = 48 * exp_per_layer
    assert comp.optimizer_scale == pytest.approx((dense_full / 8 + experts_full / 1) / (1000 + k * layer))
    assert (comp.decoder_scale, comp.ep, comp.top_k, comp.moe_layers) == (48 / 5, 8, 8, 48)
    dense = plan(RunSpec(), preset_shape("tiny"), {**summary, "slice": {"layers": 2}})
    assert dense.ep == 1 and dense.a2a_ms(4096) == 0.0


def test_the_report_says_how_the_decoder_was_composed():
    """The report's composition table names the rule the records used (plain layers at their measured cost, or
    the fallback that scales a slice without plain layers), not a formula of an earlier version."""
    from vlmdata.audit.report.run_tables import composition_rows

    comp = Composition(layers_full=12, layers_measured=4, optimizer_scale=1.0)
    plain = compose_record(fake_step(4, 3), comp)
    scaled = compose_record(fake_step(3, 3), comp)  # no plain layer in the slice

    def decoder_row(*records):
        report = {"composition": comp.describe(), "sources": {"real": {"records": list(records)}}}
        rows = composition_rows(report)
        assert rows is not None
        return dict(rows[1])["decoder layers"], dict(rows[1])["formula"]

    row, formula = decoder_row(plain)
    assert row == "4 measured, + 8 plain layers at the slice's measured plain-layer cost, to 12"
    assert formula.startswith("step = measured + (L - k) x (forward + backward of one plain decoder layer")
    assert decoder_row(scaled)[0] == "4 measured, x 3.00 to 12"
    assert decoder_row(plain, scaled)[0].startswith("4 measured, x 3.00 to 12 where a step had no plain-layer")


def micro_marks(t0: float, fwd: list[float], bwd: list[float], deepstack: int = 2) -> list[tuple[str, float]]:
    """One micro-batch's layer marks as ``TrainStep`` places them: ``deepstack`` layers of 1 ms, then plain
    layers with forward times ``fwd`` and backward times ``bwd`` (the backward runs from the last layer down)."""
    marks, t = [("start", t0)], t0
    for i in range(deepstack):
        marks.append((f"L{i}", t))
        t += 1.0
    for j, f in enumerate(fwd):
        marks.append((f"L{deepstack + j}", t))
        t += f
    marks.append(("lm_norm", t))
    t += 2.0
    marks.append(("bwd_head_end", t))
    for j in reversed(range(len(bwd))):
        t += bwd[j]
        marks.append((f"B{deepstack + j}", t))
    return marks + [("bwd_end", t + 1.0)]


def test_a_pause_in_one_measured_layer_is_not_composed_into_every_layer():
    """Two micro-batches of 2 plain layers; one forward pass of the second takes 24 ms instead of 4 (a host pause,
    as in three 30B-A3B runs on the H200). The step's cost of one plain layer is the lower median per micro-batch
    (4 + 4 ms forward), not the mean (which would be 18), so 40 composed layers add 40 x (8 + 12) ms, and the pause
    stays in the measured time once."""
    marks = micro_marks(0.0, [4.0, 4.0], [6.0, 6.0]) + micro_marks(100.0, [4.0, 24.0], [6.0, 6.0])
    p = plain_layers(marks, 2, 4)
    assert p == {
        "forward_ms": 36.0,
        "backward_ms": 24.0,
        "layers": 4,
        "layer_forward_ms": 8.0,
        "layer_backward_ms": 12.0,
    }
    rec = {"step_ms": 500.0, "micro_batches": 2, "times_ms": {"lm_forward": 60.0, "backward_decoder": 40.0},
           "micro": [], "plain_layers": p}  # fmt: skip
    out = compose_record(rec, Composition(layers_full=44, layers_measured=4, optimizer_scale=1.0))
    assert out["step_ms"] == pytest.approx(500.0 + 40 * (8.0 + 12.0))
    old = dict(p)
    del old["layer_forward_ms"], old["layer_backward_ms"]  # a record written before: the mean, as it was
    rec_old = {**rec, "plain_layers": old}
    assert compose_record(rec_old, Composition(44, 4, 1.0))["step_ms"] == pytest.approx(500.0 + 40 * (18.0 + 12.0))
