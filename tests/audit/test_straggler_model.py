"""The data-parallel straggler model on hand-computable cases (CPU, exact values or stated Monte Carlo bounds)."""

import math
from typing import Any

import numpy as np
import pytest

from vlmdata.audit.analysis import straggler_model as sm
from vlmdata.audit.analysis.straggler_model import (
    CostModel,
    Sample,
    fit_cost_model,
    micro_batch_ms,
    plot_stragglers,
    samples_from_batch,
    simulate,
)
from vlmdata.audit.sources.registry import AuditError
from vlmdata.errors import VlmdataError

# fixed 1, 0.01 ms/token, 0.1 ms/patch, 0.001 ms/patch**2, optimizer 10 ms
COST = CostModel(fixed_ms=1.0, per_token_ms=0.01, per_patch_ms=0.1, per_patch_sq_ms=0.001, optimizer_ms=10.0)
A = Sample(tokens=100)  # 1 + 0.01*100 = 2.0 ms
B = Sample(tokens=200, image_patches=(16,))  # 1 + 2 + 1.6 + 0.256 = 4.856 ms
TA, TB, OPT = 2.0, 4.856, 10.0


def unpadded(longest, batch_size):
    return longest


def sim(sources, **kw):
    kw.setdefault("micro_batch_size", 1)
    kw.setdefault("micro_batches_per_rank", 1)
    kw.setdefault("padded_len", unpadded)
    return simulate(sources, COST, **kw)


# --------------------------------------------------------------------------- one micro-batch


def test_micro_batch_ms_by_hand():
    assert micro_batch_ms(COST, [A], unpadded) == pytest.approx(TA, rel=1e-12)
    assert micro_batch_ms(COST, [B], unpadded) == pytest.approx(TB, rel=1e-12)
    # two rows padded to 256: 1 + 0.01*512 + 0.1*16 + 0.001*256
    assert micro_batch_ms(COST, [A, B], lambda n, b: 256) == pytest.approx(1 + 5.12 + 1.6 + 0.256, rel=1e-12)
    # two images: patches add, squares add per image
    two = Sample(tokens=10, image_patches=(4, 8))
    assert micro_batch_ms(COST, [two], unpadded) == pytest.approx(1 + 0.1 + 1.2 + 0.001 * 80, rel=1e-12)


# --------------------------------------------------------------------------- simulate: hand-computable cases


def test_forced_pairing_is_exact():
    # census [A, B], DP 2, one sample per step: every step is one epoch, so always one A and one B
    r = sim({"real": [A, B]}, dp_sizes=[2], steps=50)
    s = r["sources"]["real"][2]
    assert s["step_ms"] == pytest.approx(TB + OPT, rel=1e-12)
    assert s["step_ms_se"] == 0.0
    assert s["mean_rank_ms"] == pytest.approx((TA + TB) / 2 + OPT, rel=1e-12)
    assert s["straggler_factor"] == pytest.approx((TB + OPT) / ((TA + TB) / 2 + OPT), rel=1e-12)
    assert s["samples_per_s"] == pytest.approx(2 / ((TB + OPT) / 1000), rel=1e-12)


def test_four_equally_likely_pairings():
    # a large half-A half-B census: the two ranks' samples are (nearly) independent, so the pairings
    # AA, AB, BA, BB are equally likely: E[max] = (TA + 3*TB) / 4, E[mean] = (TA + TB) / 2.
    # Drawing without replacement makes P(AA) = 0.5*999/1999 instead of 0.25: a bias of 3.6e-4 ms, far
    # inside the Monte Carlo tolerance (4 standard errors: sd of max = (TB-TA)*sqrt(3/16), / sqrt(20000)).
    steps = 20000
    r = sim({"real": [A] * 1000 + [B] * 1000}, dp_sizes=[2], steps=steps)
    s = r["sources"]["real"][2]
    se = (TB - TA) * math.sqrt(3 / 16) / math.sqrt(steps)
    assert abs(s["step_ms"] - ((TA + 3 * TB) / 4 + OPT)) < 4 * se
    assert s["step_ms_se"] == pytest.approx(se, rel=0.05)
    assert abs(s["mean_rank_ms"] - ((TA + TB) / 2 + OPT)) < 4 * se
    assert s["straggler_factor"] == pytest.approx(((TA + 3 * TB) / 4 + OPT) / ((TA + TB) / 2 + OPT), abs=1e-3)


def test_without_replacement_within_an_epoch():
    # census [A, A, B, B], DP 2: an epoch is two steps. The first pair is AA with p 1/6, BB 1/6, mixed 4/6,
    # the second is its complement, so each step's max is TA with p 1/6 and TB with p 5/6.
    steps = 24000
    r = sim({"real": [A, A, B, B]}, dp_sizes=[2], steps=steps)
    s = r["sources"]["real"][2]
    se = (TB - TA) * math.sqrt(5 / 36) / math.sqrt(steps)
    assert abs(s["step_ms"] - (TA / 6 + 5 * TB / 6 + OPT)) < 4 * se
    assert s["mean_rank_ms"] == pytest.approx((TA + TB) / 2 + OPT, abs=4 * se)


def test_sync_modes_by_hand():
    # census [A, B], DP 2, 2 micro-batches per rank: each micro-step is one epoch (one A, one B).
    # micro_batch: every micro-step waits for B -> 2*TB, exactly. step: rank sums are (A+A, B+B) or
    # (A+B, B+A) with p 1/2 each -> E[max] = (2*TB + TA + TB) / 2. The mean rank is TA + TB either way.
    steps = 20000
    kw: dict[str, Any] = dict(dp_sizes=[2], micro_batches_per_rank=2, steps=steps)
    mb = sim({"real": [A, B]}, sync="micro_batch", **kw)["sources"]["real"][2]
    st = sim({"real": [A, B]}, sync="step", **kw)["sources"]["real"][2]
    assert mb["step_ms"] == pytest.approx(2 * TB + OPT, rel=1e-12)
    assert mb["step_ms_se"] == 0.0
    assert abs(st["step_ms"] - ((TA + 3 * TB) / 2 + OPT)) < 4 * (TB - TA) / 2 / math.sqrt(steps)
    assert mb["mean_rank_ms"] == pytest.approx(TA + TB + OPT, rel=1e-12)
    assert st["mean_rank_ms"] == pytest.approx(TA + TB + OPT, rel=1e-12)


def varied_census(n=300, seed=3):
    rng = np.random.default_rng(seed)
    return [
        Sample(int(t), tuple(int(p) for p in rng.choice([64, 256, 1024], size=rng.integers(0, 3))))
        for t in rng.integers(50, 2000, n)
    ]


def test_micro_batch_sync_never_faster_than_step_sync():
    census = varied_census()
    kw: dict[str, Any] = dict(
        micro_batch_size=2, micro_batches_per_rank=4, dp_sizes=[1, 8, 64], steps=50, padded_len=unpadded
    )
    mb = simulate({"real": census}, COST, sync="micro_batch", **kw)["sources"]["real"]
    st = simulate({"real": census}, COST, sync="step", **kw)["sources"]["real"]
    for dp in (1, 8, 64):
        assert mb[dp]["step_ms"] >= st[dp]["step_ms"]
        assert mb[dp]["mean_rank_ms"] == st[dp]["mean_rank_ms"]  # the same draws (same seed)
        assert st[dp]["straggler_factor"] >= 1.0
    assert st[1]["straggler_factor"] == 1.0  # one rank: the slowest is the mean
    assert mb[64]["step_ms"] > st[64]["step_ms"] > st[8]["step_ms"]  # more ranks, longer waits
    # one micro-batch per rank: the two modes coincide exactly
    kw1: dict[str, Any] = dict(kw, micro_batches_per_rank=1)
    mb1 = simulate({"real": census}, COST, sync="micro_batch", **kw1)["sources"]["real"]
    st1 = simulate({"real": census}, COST, sync="step", **kw1)["sources"]["real"]
    assert all(mb1[dp]["step_ms"] == st1[dp]["step_ms"] for dp in (1, 8, 64))


@pytest.mark.parametrize("sync", ["micro_batch", "step"])
def test_uniform_mock_has_factor_exactly_one(sync):
    noise = [Sample(300, (256,))] * 50
    r = simulate(
        {"real": varied_census(), "noise": noise},
        COST,
        micro_batch_size=2,
        micro_batches_per_rank=3,
        dp_sizes=[8, 64, 512],
        padded_len=lambda n, b: 4096,
        sync=sync,
        steps=20,
    )
    expected = 3 * micro_batch_ms(COST, noise[:2], lambda n, b: 4096) + OPT
    for dp in (8, 64, 512):
        s = r["sources"]["noise"][dp]
        assert s["straggler_factor"] == 1.0
        assert s["step_ms_se"] == 0.0
        assert s["step_ms"] == pytest.approx(expected, rel=1e-12)
        real = r["sources"]["real"][dp]
        assert r["ratio_vs_real"]["noise"][dp] == pytest.approx(real["step_ms"] / s["step_ms"], rel=1e-12)
        assert r["ratio_vs_real_no_stragglers"]["noise"][dp] == pytest.approx(
            real["mean_rank_ms"] / s["mean_rank_ms"], rel=1e-12
        )
        # stragglers of real data widen the gap a uniform mock shows
        assert r["ratio_vs_real"]["noise"][dp] > r["ratio_vs_real_no_stragglers"]["noise"][dp]


def test_output_shape_and_determinism():
    census = varied_census(50)
    kw: dict[str, Any] = dict(
        micro_batch_size=2, micro_batches_per_rank=2, dp_sizes=[4, 16], steps=10, padded_len=unpadded
    )
    r = simulate({"real": census, "other": census[:25]}, COST, **kw)
    assert r["dp_sizes"] == [4, 16] and r["sync"] == "micro_batch"
    assert r["global_batch_size"] == {4: 16, 16: 64}
    assert r["steps"] == {4: 10, 16: 10} and r["steps_requested"] == 10
    assert set(r["sources"]) == {"real", "other"} and set(r["ratio_vs_real"]) == {"other"}
    assert r["cost"]["per_patch_sq_ms"] == 0.001 and isinstance(r["method"], str)
    s = r["sources"]["real"][16]
    assert s["samples_per_s"] == pytest.approx(64 / (s["step_ms"] / 1000), rel=1e-12)
    assert simulate({"real": census, "other": census[:25]}, COST, **kw) == r  # the seed fixes everything
    assert simulate({"real": census}, COST, seed=1, **kw)["sources"]["real"] != r["sources"]["real"]


def test_steps_reduced_for_large_dp(monkeypatch):
    monkeypatch.setattr(sm, "MAX_SAMPLES", 1000)
    r = sim({"real": varied_census(50)}, dp_sizes=[8, 64], steps=100)
    assert r["steps"] == {8: 100, 64: sm.MIN_STEPS}  # 1000 // 64 = 15 < MIN_STEPS
    assert "reduced for DP 64" in r["method"]


def test_epochs_repeat_when_a_step_needs_more_than_the_census():
    # 3 samples, 64 per step: every step still runs and every sample kind shows up
    r = sim({"real": [A, B, A]}, dp_sizes=[64], steps=5)
    assert r["sources"]["real"][64]["step_ms"] == pytest.approx(TB + OPT, rel=1e-12)


# --------------------------------------------------------------------------- fit


def synthetic_micro(n, coef, seed=0, same_size_images=False):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        images = rng.integers(0, 4)
        sizes = np.full(images, 256) if same_size_images else rng.choice([64, 256, 1024, 4096], size=images)
        tokens = int(rng.integers(2, 9)) * 512
        patches, patch_sq = int(sizes.sum()), int((sizes.astype(np.int64) ** 2).sum())
        ms = coef[0] + coef[1] * tokens + coef[2] * patches + coef[3] * patch_sq
        out.append({"ms": ms, "tokens_total": tokens, "patches": patches, "patch_sq": patch_sq, "source": "ab"[i % 2]})
    return out


TRUE = (3.0, 0.002, 0.01, 2e-6)


def test_fit_recovers_known_coefficients_exactly():
    c = fit_cost_model(synthetic_micro(60, TRUE), optimizer_ms=12.5)
    got = (c.fixed_ms, c.per_token_ms, c.per_patch_ms, c.per_patch_sq_ms)
    assert got == pytest.approx(TRUE, rel=1e-8)
    assert c.optimizer_ms == 12.5
    assert c.fit["n_micro_batches"] == 60 and c.fit["sources"] == {"a": 30, "b": 30}
    assert c.fit["r2"] == pytest.approx(1.0, abs=1e-12) and c.fit["residual_rms_ms"] < 1e-9
    assert c.fit["dropped"] == {} and len(c.fit["terms"]) == 4


def test_fit_with_noise_within_tolerance():
    micro = synthetic_micro(400, TRUE, seed=1)
    rng = np.random.default_rng(2)
    for m in micro:
        m["ms"] = max(0.0, m["ms"] + rng.normal(0, 0.05))  # 0.05 ms noise on 5-100 ms micro-batches
    c = fit_cost_model(micro, optimizer_ms=0.0)
    assert c.fixed_ms == pytest.approx(TRUE[0], rel=0.05)
    assert c.per_token_ms == pytest.approx(TRUE[1], rel=0.02)
    assert c.per_patch_ms == pytest.approx(TRUE[2], rel=0.05)
    assert c.per_patch_sq_ms == pytest.approx(TRUE[3], rel=0.05)
    assert c.fit["r2"] > 0.999 and c.fit["residual_rms_ms"] == pytest.approx(0.05, rel=0.2)


def test_fit_drops_patch_terms_without_images():
    micro = [
        dict(m, ms=TRUE[0] + TRUE[1] * m["tokens_total"], patches=0, patch_sq=0) for m in synthetic_micro(20, TRUE)
    ]
    c = fit_cost_model(micro, optimizer_ms=1.0)
    assert (c.fixed_ms, c.per_token_ms) == pytest.approx(TRUE[:2], rel=1e-8)
    assert c.per_patch_ms == 0.0 and c.per_patch_sq_ms == 0.0
    assert (
        set(c.fit["dropped"]) == {"per_patch_ms", "per_patch_sq_ms"} and "no images" in c.fit["dropped"]["per_patch_ms"]
    )


def test_fit_drops_collinear_patch_sq():
    # every image has 256 patches: patch_sq = 256 * patches, so the square term folds into per_patch_ms
    c = fit_cost_model(synthetic_micro(40, TRUE, same_size_images=True), optimizer_ms=1.0)
    assert c.per_patch_sq_ms == 0.0 and "collinear" in c.fit["dropped"]["per_patch_sq_ms"]
    assert c.per_patch_ms == pytest.approx(TRUE[2] + 256 * TRUE[3], rel=1e-8)
    assert (c.fixed_ms, c.per_token_ms) == pytest.approx(TRUE[:2], rel=1e-8)


def test_fit_errors():
    micro = synthetic_micro(5, TRUE)
    with pytest.raises(AuditError, match="at least 2"):
        fit_cost_model(micro[:1], optimizer_ms=1.0)
    with pytest.raises(AuditError, match="finite"):
        fit_cost_model([dict(micro[0], ms=float("nan")), *micro[1:]], optimizer_ms=1.0)
    with pytest.raises(AuditError, match="patch_sq"):
        fit_cost_model([{k: v for k, v in micro[0].items() if k != "patch_sq"}, *micro[1:]], optimizer_ms=1.0)
    with pytest.raises(AuditError, match="optimizer_ms"):
        fit_cost_model(micro, optimizer_ms=float("inf"))


# --------------------------------------------------------------------------- census helper


def test_samples_from_batch_by_hand():
    # row 0: one 4x4 image (4 tokens); row 1: an 8x8 and a 4x8 image (16 + 8 tokens); row 2: text only
    got = samples_from_batch([50, 300, 120], [(1, 4, 4), (1, 8, 8), (1, 4, 8)], [4, 24, 0])
    assert got == [Sample(50, (16,)), Sample(300, (64, 32)), Sample(120, ())]
    assert samples_from_batch([9], [(1, 3, 3)], [9], merge=1) == [Sample(9, (9,))]


@pytest.mark.parametrize(
    "lengths,grids,visual,match",
    [
        ([50, 300], [(1, 4, 4), (1, 8, 8)], [5, 16], "row 0"),  # 5 tokens is not a whole number of images
        ([50, 300], [(1, 4, 4), (1, 8, 8), (1, 4, 4)], [4, 16], "left over|account for only"),
        ([50, 300], [(1, 4, 4)], [4, 16], "run out"),
        ([50], [(1, 4, 4)], [4, 0], "rows"),
        ([50], [(1, 3, 3)], [2], "divisible"),
        ([3], [(1, 4, 4)], [4], "between 0"),
    ],
)
def test_samples_from_batch_inconsistent_counts(lengths, grids, visual, match):
    with pytest.raises(AuditError, match=match):
        samples_from_batch(lengths, grids, visual)


# --------------------------------------------------------------------------- plot


def test_plot_returns_png():
    pytest.importorskip("matplotlib")
    r = simulate(
        {"real": varied_census(60), "noise": [Sample(300, (256,))]},
        COST,
        micro_batch_size=2,
        micro_batches_per_rank=2,
        dp_sizes=[8, 64],
        padded_len=unpadded,
        steps=5,
    )
    png = plot_stragglers(r)
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 1000


# --------------------------------------------------------------------------- bad inputs


@pytest.mark.parametrize(
    "kw,match",
    [
        (dict(dp_sizes=[8, 0]), "dp_sizes"),
        (dict(dp_sizes=[]), "dp_sizes"),
        (dict(micro_batch_size=0), "micro_batch_size"),
        (dict(micro_batches_per_rank=0), "micro_batches_per_rank"),
        (dict(sync="all_reduce"), "sync"),
        (dict(steps=1), "steps"),
        (dict(real="nope"), "`real`='nope'"),
        (dict(padded_len=lambda n, b: n - 1), "padded_len"),
    ],
)
def test_simulate_bad_inputs(kw, match):
    with pytest.raises(AuditError, match=match):
        sim({"real": [A, B]}, **kw)


def test_bad_census_and_cost():
    with pytest.raises(AuditError, match="empty"):
        sim({"real": [A], "mock": []})
    with pytest.raises(AuditError, match="image_patches"):
        sim({"real": [Sample(10, (0,))]})
    with pytest.raises(AuditError, match="tokens"):
        sim({"real": [Sample(-1)]})
    with pytest.raises(AuditError, match="per_token_ms"):
        CostModel(1.0, float("nan"), 0.0, 0.0, 0.0)
    with pytest.raises(AuditError, match="optimizer_ms"):
        CostModel(1.0, 0.0, 0.0, 0.0, -1.0)
    with pytest.raises(AuditError, match="at least one sample"):
        micro_batch_ms(COST, [], unpadded)
    assert issubclass(AuditError, VlmdataError)


def test_calibrate_matches_each_sources_measured_mean():
    from vlmdata.audit.analysis.straggler_model import calibrate

    cost = CostModel(10.0, 0.01, 0.0, 0.0, 5.0)
    micro = [
        {"ms": 2 * (10 + 0.01 * t), "tokens_total": t, "patches": 0, "patch_sq": 0, "source": "a"} for t in (100, 300)
    ]
    micro += [{"ms": 10 + 0.01 * t, "tokens_total": t, "patches": 0, "patch_sq": 0, "source": "b"} for t in (100, 300)]
    out = calibrate(cost, micro)
    assert out["a"].fit["calibration_factor"] == pytest.approx(2.0) and out["b"].fit[
        "calibration_factor"
    ] == pytest.approx(1.0)
    assert out["a"].fixed_ms == pytest.approx(20.0) and out["a"].optimizer_ms == 5.0


def test_a_joint_fit_that_gives_a_source_no_time_calibrates_to_its_measured_mean():
    """All the fit's cost on the patch terms and a source without images: its model is its measured mean as a
    fixed cost (the torchrun audit once died dividing by the zero step time of such a model)."""
    from vlmdata.audit.analysis.straggler_model import calibrate

    cost = CostModel(0.0, 0.0, 0.05, 0.0, 0.0)
    micro = [{"ms": ms, "tokens_total": 64, "patches": 0, "patch_sq": 0, "source": "imagefree"} for ms in (2.0, 4.0)]
    micro += [
        {"ms": 0.05 * p, "tokens_total": 64, "patches": p, "patch_sq": p * p, "source": "real"} for p in (64, 256)
    ]
    out = calibrate(cost, micro)
    free = out["imagefree"]
    assert (free.fixed_ms, free.per_token_ms, free.per_patch_ms, free.per_patch_sq_ms) == (3.0, 0.0, 0.0, 0.0)
    assert free.fit["calibration_factor"] is None and "measured mean" in free.fit["calibration"]
    assert out["real"].fit["calibration_factor"] == pytest.approx(1.0)
    census = {"imagefree": [Sample(64, ())] * 8, "real": [Sample(64, (64,)), Sample(64, (256,))] * 4}
    r = simulate(
        census, out, micro_batch_size=1, micro_batches_per_rank=2, dp_sizes=[1, 2], padded_len=unpadded, steps=4
    )
    assert r["sources"]["imagefree"][2]["step_ms"] == pytest.approx(6.0)
    assert r["sources"]["imagefree"][2]["straggler_factor"] == pytest.approx(1.0)


def test_a_cost_model_of_zero_time_is_an_error_naming_the_source_not_a_division_by_zero():
    zero = CostModel(0.0, 0.0, 0.0, 0.0, 0.0)
    with pytest.raises(AuditError, match="predicts 0 ms for every step of source 'real'"):
        simulate(
            {"real": [Sample(10, ())] * 4}, zero, micro_batch_size=1, micro_batches_per_rank=1, padded_len=unpadded
        )


def test_check_ranks_skips_steps_of_no_time():
    from vlmdata.audit.analysis.straggler_model import check_ranks

    rec = {"step_ms": 0.0, "times_ms": {}, "micro": [{"ms": 0.0, "tokens_total": 8, "patches": 0, "patch_sq": 0}]}
    assert check_ranks({"real": [[rec, rec], [rec, rec]]}) == {}


def test_check_ranks_predicts_the_slowest_rank_exactly_on_a_linear_cost():
    from vlmdata.audit.analysis.straggler_model import check_ranks

    def rec(tokens):  # micro-batch cost 10 + 0.01 ms per token, optimizer 5 ms, no noise
        micro = [{"ms": 10 + 0.01 * t, "tokens_total": t, "patches": 0, "patch_sq": 0} for t in tokens]
        return {"step_ms": sum(m["ms"] for m in micro) + 5, "micro": micro, "times_ms": {"optimizer": 5.0}}

    ranks = {"real": [[rec([100, 300]), rec([200, 200])], [rec([500, 100]), rec([100, 100])]]}
    out = check_ranks(ranks)["real"]
    # step 0: rank 1 slower (10+5 + 10+1 + 5 = 31 vs 10+1+10+3+5 = 29); step 1: rank 0 (29 vs 27)
    assert out["measured_ms"] == pytest.approx(30.0) and out["predicted_ms"] == pytest.approx(30.0, rel=1e-6)
    assert abs(out["error"]) < 1e-6 and out["factor_measured"] > 1.0


def test_the_report_says_why_no_straggler_figure_was_simulated():
    from vlmdata.audit.report.run_tables import straggler_rows

    err = "the cost model predicts 0 ms for every step of source 'real'"
    head, rows = straggler_rows({"straggler_model": {"error": err}}) or ([], [])
    assert head == ["straggler model"] and rows == [[f"not simulated: {err}"]]
    assert straggler_rows({"straggler_model": None}) is None
