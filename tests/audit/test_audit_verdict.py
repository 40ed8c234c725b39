"""Audit metrics and verdict on constructed numbers (exact)."""

import pytest

from vlmdata.audit.analysis.metrics import rate, rate_ci, ratio_ci, summarize
from vlmdata.audit.analysis.verdict import decide, knobs, settled, stage_attribution


def recs(step_ms, n=12, samples=2, nonpad=100, flops=1e12, wait=0.0, times=None, padding=0, total=200, loss=20):
    return [
        {
            "step_ms": step_ms,
            "data_wait_ms": wait,
            "samples": samples,
            "images": samples,
            "tokens_total": total,
            "tokens_nonpad": nonpad,
            "tokens_loss": loss,
            "tokens_visual": 50,
            "tokens_padding": padding,
            "flops": flops,
            "times_ms": times or {"vision": 0.0, "total": step_ms - wait},
        }
        for _ in range(n)
    ]


def runs(**by):
    return {k: {"records": v, "world_size": 1} for k, v in by.items()}


def summaries(r):
    return {k: summarize(v["records"]) for k, v in r.items()}


def test_rates_exact():
    r = recs(500.0)
    assert rate(r, "samples_per_s") == pytest.approx(4.0)
    assert rate(r, "nonpad_tokens_per_s") == pytest.approx(200.0)
    assert rate(r, "loss_tokens_per_s") == pytest.approx(40.0)
    assert rate(r, "tflops") == pytest.approx(2.0)
    assert rate(r, "tflops", world_size=2) == pytest.approx(1.0)
    s = summarize(r)
    assert s["step_ms"]["median"] == 500.0 and s["step_ms"]["std"] == 0.0
    assert s["shape"]["tokens_nonpad_per_sample"] == 50.0 and s["shape"]["ms_per_sample"] == 250.0
    assert s["shape"]["tokens_loss_per_sample"] == 10.0


def test_ratio_ci_constant_steps_is_exact():
    ci = ratio_ci(recs(500.0), recs(1000.0), "samples_per_s")
    assert ci["ratio"] == pytest.approx(2.0) and ci["lo"] == pytest.approx(2.0) and ci["hi"] == pytest.approx(2.0)


def test_ratio_ci_covers_point_with_noise():
    noisy = [dict(r, step_ms=ms) for r, ms in zip(recs(0, n=6), [900, 1000, 1100, 950, 1050, 1000])]
    ci = ratio_ci(recs(500.0), noisy, "samples_per_s")
    assert ci["lo"] < ci["ratio"] < ci["hi"]


@pytest.mark.parametrize("mock_ms, status", [(1000 / 1.11, "MISLEADING"), (1000 / 1.09, "OK"), (1000.0, "OK")])
def test_threshold_boundary(mock_ms, status):
    r = runs(imagefree=recs(mock_ms), real=recs(1000.0))
    v = decide(r, summaries(r), threshold=0.10)
    assert v["status"] == status
    assert v["gaps"]["imagefree"]["samples_per_s"]["ratio"] == pytest.approx(1000 / mock_ms)
    if status == "MISLEADING":
        assert {o["metric"] for o in v["offenders"]} == {"samples_per_s", "tflops", "nonpad_tokens_per_s"}
        assert all(o["confident"] for o in v["offenders"])
        assert v["line"].startswith("MISLEADING (limit 1.10x): imagefree overstates real samples/s 1.11x")


def test_nonpad_tokens_alone_can_mislead_but_loss_tokens_do_not_count():
    # same step time and FLOPs, but the mock carries 2x the non-pad tokens per sample
    r = runs(**{"bridge-noise": recs(1000.0, nonpad=200), "real": recs(1000.0, nonpad=100)})
    v = decide(r, summaries(r))
    assert v["status"] == "MISLEADING"
    assert [o["metric"] for o in v["offenders"]] == ["nonpad_tokens_per_s"]
    r = runs(**{"bridge-noise": recs(1000.0, loss=200), "real": recs(1000.0, loss=20)})
    assert decide(r, summaries(r))["status"] == "OK"  # loss tokens/s is reported, not judged


def test_headline_names_every_offender():
    r = runs(imagefree=recs(500.0), **{"bridge-noise": recs(800.0)}, real=recs(1000.0))
    v = decide(r, summaries(r))
    assert "imagefree overstates real samples/s 2.00x" in v["line"]
    assert "bridge-noise overstates real samples/s 1.25x" in v["line"]


def test_paired_interval_cancels_shared_step_variation():
    # real and a paired source both vary step to step the same way (the same samples): the paired ratio is
    # exact, the unpaired interval is wide
    ms = [400, 1600, 700, 1300, 1000, 500, 1500]
    real = [dict(r, step_ms=m) for r, m in zip(recs(0, n=7), ms)]
    twin = [dict(r, step_ms=m / 2) for r, m in zip(recs(0, n=7), ms)]
    paired = ratio_ci(twin, real, "samples_per_s", paired=True)
    unpaired = ratio_ci(twin, real, "samples_per_s", paired=False)
    assert paired["lo"] == pytest.approx(2.0) and paired["hi"] == pytest.approx(2.0) and paired["paired"]
    assert unpaired["hi"] - unpaired["lo"] > 0.5 and not unpaired["paired"]


def test_settled_needs_decided_and_precise_intervals():
    ms = [900, 1100, 1000, 950, 1050, 1000]
    real = [dict(r, step_ms=m) for r, m in zip(recs(0, n=6), ms)]
    r = {"imagefree": {"records": recs(500.0, n=6), "world_size": 1}, "real": {"records": real, "world_size": 1}}
    ok, open_items = settled(r, precision=0.10)
    assert ok and open_items == []
    ok, open_items = settled(r, precision=0.001)  # too strict: the interval is wider than ±0.1%
    assert not ok and open_items[0].startswith("imagefree samples/s: ±")
    near = {
        "imagefree": {"records": [dict(x, step_ms=x["step_ms"] / 1.1) for x in real], "world_size": 1},
        "real": {"records": real, "world_size": 1},
    }
    ok, open_items = settled(near, precision=0.5)
    assert not ok and any("contains 1.10" in o for o in open_items)  # on the limit: undecided
    syn = {
        "synthetic": {"records": real, "world_size": 1, "interleaved": True},
        "real": {"records": real, "world_size": 1, "interleaved": True},
    }
    assert settled(syn, precision=0.01)[0]  # paired, identical: exactly 1, inside 1 ± 5%


def test_rate_interval():
    ci = rate_ci(recs(500.0), "samples_per_s")
    assert ci["rate"] == ci["lo"] == ci["hi"] == pytest.approx(4.0)


def test_synthetic_proxy_and_not_an_offender():
    r = runs(synthetic=recs(1000 / 1.04), real=recs(1000.0))
    v = decide(r, summaries(r))
    assert v["status"] == "OK" and v["synthetic_proxy"]["trustworthy"]
    assert v["synthetic_proxy"]["max_deviation"] == pytest.approx(0.04)
    r = runs(synthetic=recs(1000 / 1.5), real=recs(1000.0))
    v = decide(r, summaries(r))
    assert v["status"] == "OK" and not v["synthetic_proxy"]["trustworthy"]  # synthetic never makes it MISLEADING
    assert "is NOT a trustworthy proxy" in v["line"]


def test_stage_attribution_per_sample():
    mock = summarize(recs(400.0, times={"vision": 10.0, "backward": 300.0, "optimizer": 90.0, "total": 400.0}))
    real = summarize(recs(1000.0, times={"vision": 400.0, "backward": 500.0, "optimizer": 100.0, "total": 1000.0}))
    a = stage_attribution(mock, real)
    assert a["top_stage"] == "vision"
    assert a["ms_per_sample_diff"]["vision"] == pytest.approx(195.0)  # (400 - 10) / 2 samples
    assert a["ms_per_sample_diff"]["backward"] == pytest.approx(100.0)
    assert a["total_ms_per_sample_diff"] == pytest.approx(300.0)


def test_knob_rules():
    base = {"forward_other": 1.0, "vision": 1.0, "lm_forward": 50.0, "lm_head_loss": 5.0, "total": 0.0}
    quiet = summarize(recs(1000.0, wait=40.0, padding=50, times=dict(base, total=960.0)))  # 4% wait, 25% padding
    assert knobs(quiet) == []
    loud = summarize(
        recs(
            1000.0,
            wait=60.0,
            padding=70,
            times={"vision": 300.0, "lm_forward": 100.0, "lm_head_loss": 20.0, "total": 940.0},
        )
    )
    names = [k["knob"] for k in knobs(loud, stragglers=[1])]
    assert set(names) == {"data_wait", "vision_encoder", "padding", "stragglers"}
    assert names[0] == "stragglers" and names[1] == "vision_encoder"  # largest share first (0.9 > 0.35 > 0.06)


def test_decide_needs_real():
    r = runs(imagefree=recs(500.0))
    with pytest.raises(ValueError, match="real"):
        decide(r, summaries(r))


# ----------------------------------------------------------------------------- undecided verdicts (issue 20)


def noisy(mean_ms: float, n: int, spread: float = 0.2, seed: int = 0):
    import random

    rng = random.Random(seed)
    return [dict(r, step_ms=mean_ms * (1 + spread * (rng.random() - 0.5))) for r in recs(0, n=n)]


def test_too_few_steps_give_no_interval_and_an_undecided_verdict():
    # --steps 1 used to give [2.71, 2.71] and a verdict that flipped between identical runs
    for n in (1, 2, 4):
        r = runs(imagefree=noisy(400.0, n, seed=1), real=noisy(1000.0, n, seed=2))
        v = decide(r, summaries(r))
        g = v["gaps"]["imagefree"]["samples_per_s"]
        assert g["lo"] is None and g["hi"] is None and g["few_steps"]
        assert v["status"] == "UNDECIDED" and v["offenders"] == []
        assert f"imagefree undecided: {n} steps per source, too few for an interval" in v["line"]
        assert "`max_steps`" in v["line"] and "`budget_s`" in v["line"]  # the CLI shows them as flags
        ok, open_items = settled(r)
        assert not ok and any("too few steps" in o for o in open_items)


def test_an_interval_spanning_the_limit_is_undecided_not_misleading_or_ok():
    real = noisy(1000.0, 12, spread=0.6, seed=3)
    near = [dict(x, step_ms=x["step_ms"] / 1.1) for x in noisy(1000.0, 12, spread=0.6, seed=4)]
    r = runs(imagefree=near, real=real)
    v = decide(r, summaries(r))
    g = v["gaps"]["imagefree"]["samples_per_s"]
    assert g["lo"] < 1.10 < g["hi"]
    assert v["status"] == "UNDECIDED" and v["states"]["imagefree"] == "undecided"
    assert v["line"].startswith("UNDECIDED (limit 1.10x): imagefree undecided: samples/s")


def test_an_interval_undecided_only_by_the_run_to_run_margin_shows_the_interval_it_was_judged_on():
    # H200, Qwen3-VL-30B-A3B reverse order: the run's interval [1.12, 1.14] lies above 1.10, the 3% margin's
    # [1.08, 1.17] spans it; the line printed the first and said "spans 1.10"
    r = runs(imagefree=recs(1000.0 / 1.12), real=recs(1000.0))
    v = decide(r, summaries(r), repeat_margin=0.03)
    g = v["gaps"]["imagefree"]["samples_per_s"]
    assert g["lo"] == pytest.approx(1.12) and g["hi"] == pytest.approx(1.12)
    assert v["status"] == "UNDECIDED"
    assert "samples/s 1.12x [1.12, 1.12] (±3% run to run: [1.09, 1.15]) spans 1.10" in v["line"]
    plain = decide(r, summaries(r))  # no margin: the run's interval is the one judged, and nothing is added
    assert plain["status"] == "MISLEADING" and "run to run" not in plain["line"]


def test_offender_within_and_undecided_mocks_in_one_headline():
    real = noisy(1000.0, 12, spread=0.02, seed=5)
    r = runs(
        imagefree=[dict(x, step_ms=x["step_ms"] / 2) for x in real],
        **{"bridge-noise": [dict(x, step_ms=x["step_ms"] / 1.02) for x in real]},
        real=real,
    )
    for s in r.values():
        s["interleaved"] = True
    v = decide(r, summaries(r))
    assert v["states"] == {"imagefree": "offender", "bridge-noise": "within"}
    assert v["status"] == "MISLEADING" and {o["source"] for o in v["offenders"]} == {"imagefree"}


def test_expanded_level_widens_small_samples_only():
    from vlmdata.audit.analysis.verdict import expanded_level

    levels = [expanded_level(n) for n in (5, 10, 45, 1000)]
    assert levels == sorted(levels, reverse=True) and levels[0] > 0.99 and abs(levels[-1] - 0.95) < 0.001


def test_verdict_does_not_flip_on_the_bootstrap_seed():
    real = noisy(1000.0, 8, spread=0.5, seed=6)
    mock = [dict(x, step_ms=x["step_ms"] / 1.12) for x in noisy(1000.0, 8, spread=0.5, seed=7)]
    r = runs(imagefree=mock, real=real)
    statuses = {decide(r, summaries(r), seed=s)["status"] for s in range(6)}
    assert statuses <= {"UNDECIDED", "MISLEADING"} and "OK" not in statuses


def test_synthetic_proxy_states_and_noise_stage():
    real = noisy(1000.0, 12, spread=0.4, seed=8)
    r = runs(synthetic=[dict(x, step_ms=x["step_ms"] * 1.03) for x in noisy(1000.0, 12, spread=0.4, seed=9)], real=real)
    v = decide(r, summaries(r))
    sp = v["synthetic_proxy"]
    assert sp["state"] == "undecided" and not sp["trustworthy"]
    assert "synthetic as a proxy is undecided" in v["line"]
    # inside the noise: no stage is named as the cause of synthetic's "gap"
    assert v["attribution"]["synthetic"]["top_stage"] is None and not v["attribution"]["synthetic"]["significant"]
