"""Knob effects with intervals, the knob a mock cannot see, best sets and GPU cards (CPU, controlled timings).

The sweep here runs a fake workload whose cost and memory per sample are known formulas of the knobs
(``audit_knob_fakes``) on a fake clock: every figure and interval is exact. The noisy repeats are step
records drawn with fixed seeds around the same costs. Nothing here reads the machine's clock.
"""

import argparse
import json
import math

import pytest
from audit_fakes import SMALL_PIXELS, FakeClock
from audit_knob_fakes import BASE_GB, FROZEN_IMAGE_GB, IMAGE_GB, TEXT_GB, KnobCostWorkload, noisy_grid, sample_ms

from vlmdata.audit.analysis.cards import CARDS, memory_limit
from vlmdata.audit.analysis.decisions import decide_configs, label
from vlmdata.audit.analysis.knob_effects import BLIND, NO_EFFECT, SEES, fmt_effect, knob_effects
from vlmdata.audit.analysis.resample import SweepReplicates
from vlmdata.audit.analysis.verdict import UNDECIDED
from vlmdata.audit.phases.runner import AuditConfig
from vlmdata.audit.phases.sweep import run_sweep, sweep_verdict
from vlmdata.audit.report import build_report, write_report
from vlmdata.audit.report.knob_tables import KNOB_TITLE, card_rows, knob_rows
from vlmdata.audit.sources.registry import AuditError
from vlmdata.cli import args as cli_args
from vlmdata.cli.report_view import exit_code, show_report

FV = "freeze_vision 0 -> 1"
MBS = "micro_batch_size 1 -> 2"


@pytest.fixture(scope="module")
def sweep():
    """freeze_vision x micro_batch_size on imagefree and real, 6 steps each, threshold 20% (every
    configuration's own gap is within it: the verdict's only finding is the knob)."""
    clock = FakeClock()
    cfg = AuditConfig(
        sources=("imagefree", "real"), min_steps=6, max_steps=6, block=1, loader_options=SMALL_PIXELS, threshold=0.2
    )
    return run_sweep(
        cfg,
        {"freeze_vision": [False, True], "micro_batch_size": [1, 2]},
        build=lambda res: build_report([res], threshold=0.2),
        workload_factory=lambda values: KnobCostWorkload(clock, values),
        clock=clock,
    )


def _change(result: dict, name: str) -> dict:
    return next(c for c in result["knob_effects"]["changes"] if c["label"] == name)


def _exact(eff: dict, ratio: float) -> None:
    assert eff["ratio"] == pytest.approx(ratio, rel=1e-9)
    assert eff["lo"] == pytest.approx(ratio, rel=1e-9) and eff["hi"] == pytest.approx(ratio, rel=1e-9)


def test_effects_and_intervals_are_exact_on_known_costs(sweep):
    real_fv = [sample_ms(m, False, True) / sample_ms(m, True, True) for m in (1, 2)]  # 56/53, 51/48
    fv = _change(sweep, FV)
    assert fv["baseline"] is False and fv["value"] is True and fv["phrase"] == "freezing the vision tower"
    real = fv["sources"]["real"]
    for setting, ratio in zip(real["settings"], real_fv):
        _exact(setting["effects"]["samples_per_s"], ratio)
        _exact(setting["effects"]["nonpad_tokens_per_s"], ratio)  # the same samples step by step: paired
    _exact(real["pooled"]["samples_per_s"], math.sqrt(real_fv[0] * real_fv[1]))
    assert real["pooled"]["samples_per_s"]["settings"] == 2
    assert [s["others"] for s in real["settings"]] == ["micro_batch_size=1", "micro_batch_size=2"]
    _exact(fv["sources"]["imagefree"]["pooled"]["samples_per_s"], 1.0)  # no image: nothing to freeze
    peaks = [(BASE_GB + m * (TEXT_GB + FROZEN_IMAGE_GB)) / (BASE_GB + m * (TEXT_GB + IMAGE_GB)) for m in (1, 2)]
    for setting, ratio in zip(real["settings"], peaks):
        _exact(setting["effects"]["peak_mem"], ratio)
    mbs = _change(sweep, MBS)
    for setting, frozen in zip(mbs["sources"]["real"]["settings"], (False, True)):
        _exact(setting["effects"]["samples_per_s"], sample_ms(1, frozen, True) / sample_ms(2, frozen, True))
    _exact(
        mbs["sources"]["imagefree"]["pooled"]["samples_per_s"], sample_ms(1, False, False) / sample_ms(2, False, False)
    )
    assert fmt_effect(real["settings"][0]["effects"]["samples_per_s"]) == "+5.7%"  # exact: no interval shown


def test_a_knob_the_mock_cannot_see_is_misleading(sweep):
    findings = {(f["change"], f["source"]): f for f in sweep["knob_effects"]["findings"]}
    blind = findings[(FV, "imagefree")]
    assert blind["state"] == BLIND
    assert blind["line"] == (
        "the image-free mock cannot measure freezing the vision tower: real +6.0%, imagefree +0.0% (samples/s)"
    )
    assert findings[(MBS, "imagefree")]["state"] == SEES
    v = sweep["verdict"]
    assert v["status"] == "MISLEADING" and exit_code(v) == 3
    assert v["knobs_blind"] == [blind["line"]] and blind["line"] in v["line"]
    assert not v["decisions_misleading"] and not v["configs_misleading"]  # the knob alone makes it misleading
    assert sweep["decisions"]["mocks"]["imagefree"]["state"] == "within"


def test_best_sets_compare_choices_only_where_the_data_decides(sweep):
    d = sweep["decisions"]
    assert d["per_source"]["real"]["best_set"] == ["freeze_vision=1 micro_batch_size=2"]
    m = d["mocks"]["imagefree"]
    # the mock cannot tell frozen from trained vision: both micro-batch-2 configurations are its best
    assert sorted(m["choice_set"]) == ["freeze_vision=0 micro_batch_size=2", "freeze_vision=1 micro_batch_size=2"]
    assert not m["same"] and m["agreement"] == "partly"
    assert m["worst"] == "freeze_vision=0 micro_batch_size=2"
    assert m["regret"] == pytest.approx(1 - sample_ms(2, True, True) / sample_ms(2, False, True), rel=1e-9)
    assert m["regret_range"][0] == pytest.approx(0.0, abs=1e-9) and m["state"] == "within"


def test_peak_memory_per_card(sweep):
    mem = sweep["memory"]
    assert mem["measured"] and [c["card"] for c in mem["cards"]] == ["h100", "h200", "b200"]
    h100 = mem["cards"][0]
    assert h100["fits"]["real"] == ["freeze_vision=0 micro_batch_size=1", "freeze_vision=1 micro_batch_size=1"]
    assert len(h100["fits"]["imagefree"]) == 4 and h100["real_best"] == "freeze_vision=1 micro_batch_size=1"
    assert not h100["mocks"]["imagefree"]["fits_on_real"]
    assert mem["lines"] == [
        "on h100 (80 GB): imagefree cannot separate freeze_vision=1 micro_batch_size=2, freeze_vision=0 "
        "micro_batch_size=2; of those freeze_vision=1 micro_batch_size=2 (84.0 GB on real data), freeze_vision=0 "
        "micro_batch_size=2 (120.0 GB on real data) do not fit; real's best there is freeze_vision=1 micro_batch_size=1"
    ]
    assert all(c["mocks"]["imagefree"]["fits_on_real"] for c in mem["cards"][1:])  # 141 and 192 GB hold all
    assert sweep["verdict"]["notes"] == mem["lines"]
    head, rows = card_rows(sweep)
    assert head[-3:] == ["80 GB (h100)", "141 GB (h200)", "192 GB (b200)"]
    assert rows[1] == ["freeze_vision=0 micro_batch_size=2", "40.0", "120.0", "not real", "all fit", "all fit"]


def test_the_knob_table_in_every_report_format(sweep, tmp_path, capsys):
    head, rows = knob_rows(sweep)
    assert head == ["knob (vs baseline)", "imagefree", "real", "mock cannot measure it"]
    assert rows == [[FV, "+0.0%", "+6.0%", "imagefree"], [MBS, "+11.1%", "+10.1%", "-"]]
    paths = write_report(sweep, str(tmp_path), with_plots=False)
    md = open(paths["md"]).read()
    assert f"## {KNOB_TITLE}" in md and "| freeze_vision 0 -> 1 | +0.0% | +6.0% | imagefree |" in md
    assert "| micro_batch_size=2 | real | +6.2% | +6.2% | -30.0% |" in md  # a setting: samples/s, tokens/s, memory
    html = open(paths["html"]).read()
    assert KNOB_TITLE in html and "<td>imagefree</td></tr>" in html
    saved = json.loads(open(paths["json"]).read())
    assert saved["knob_effects"]["blind"] == sweep["knob_effects"]["blind"]
    assert saved["configs"][0]["report"]["sources"]["real"]["steps"][0]["samples_digest"]  # the steps are kept
    show_report(sweep)
    out = capsys.readouterr().out
    assert "knob effects" in out and "freeze_vision 0 -> 1" in out and "cannot measure freezing" in out
    assert "on h100 (80 GB)" in out  # the card note under the verdict


def _verdict(configs: list[dict], threshold: float = 0.10) -> tuple:
    reps = SweepReplicates(configs, seed=0)
    d = decide_configs(configs, threshold=threshold, replicates=reps)
    e = knob_effects(configs, replicates=reps)
    results = [{"label": label(c["values"]), "report": {"verdict": None}} for c in configs]
    return d, e, sweep_verdict(results, d, e)


def test_a_verdict_does_not_change_between_noisy_repeats():
    """Twenty runs of the same grid, 12 steps, 3% noise per step: real gains 6% from freezing and the
    image-free mock nothing; the verdict, the findings, the mock's decision (its choices cost at most ~6%
    of real's best, against 15%) and real's best set are the same in every run. (The mock's own best set is
    not: its two micro-batch-2 configurations cost the same, and one run in twenty separates them by chance;
    that is why the verdict reads sets through their regrets, never their membership.)"""
    seen = set()
    for seed in range(20):
        d, e, v = _verdict(noisy_grid(seed), threshold=0.15)
        states = tuple((f["change"], f["state"]) for f in e["findings"])
        seen.add((v["status"], states, d["mocks"]["imagefree"]["state"], tuple(d["per_source"]["real"]["best_set"])))
    assert seen == {("MISLEADING", ((FV, BLIND), (MBS, SEES)), "within", ("freeze_vision=1 micro_batch_size=2",))}


def test_noise_makes_a_verdict_undecided_never_ok_then_misleading():
    """With 15% noise per step the same grid is MISLEADING or UNDECIDED, never OK: an interval that does
    not decide asks for more steps."""
    statuses = {_verdict(noisy_grid(seed, cv=0.15))[2]["status"] for seed in range(20)}
    assert "OK" not in statuses and UNDECIDED.upper() in statuses


def test_few_steps_decide_nothing():
    d, e, v = _verdict(noisy_grid(0, steps=3))
    assert len(d["per_source"]["real"]["best_set"]) == 4  # no interval: nothing is separable from the best
    assert d["mocks"]["imagefree"]["state"] == UNDECIDED
    fv = next(f for f in e["findings"] if f["change"] == FV)
    assert fv["state"] == UNDECIDED and fv["real"]["few_steps"] and "undecided" in fv["line"]
    assert v["status"] == "UNDECIDED"


def test_a_mixed_choice_set_is_undecided():
    """The mock's set holds a choice within the threshold (real's best) and one 5.9% slower: undecided at 3%."""
    d = decide_configs(noisy_grid(1), threshold=0.03)
    assert len(d["mocks"]["imagefree"]["choice_set"]) == 2
    assert d["mocks"]["imagefree"]["state"] == UNDECIDED and d["undecided"] == ["imagefree"]
    assert d["misleading"] == []


def test_a_knob_without_effect_on_real_is_no_finding():
    configs = noisy_grid(0)
    for c in configs:  # the same cost frozen or not, on both sources
        if c["values"]["freeze_vision"]:
            twin = next(x for x in configs if x["values"] == {**c["values"], "freeze_vision": False})
            c["sources"] = twin["sources"]
    _, e, _ = _verdict(configs)
    assert next(f for f in e["findings"] if f["change"] == FV)["state"] == NO_EFFECT


def test_points_without_steps_are_exact():
    """A sweep stored before the steps were kept: effects from its rates, taken as exact."""
    configs = noisy_grid(0)
    for c in configs:
        for cell in c["sources"].values():
            del cell["steps"]
    e = knob_effects(configs)
    eff = _change({"knob_effects": e}, FV)["sources"]["real"]["pooled"]["samples_per_s"]
    assert eff["lo"] == eff["hi"] == eff["ratio"] and not eff["few_steps"]
    assert next(f for f in e["findings"] if f["change"] == FV)["state"] == BLIND


def test_memory_limits_by_card_name():
    assert memory_limit("H200") == 141.0 and memory_limit("80") == 80.0 and memory_limit(192) == 192.0
    assert CARDS["b200"] == 192.0
    with pytest.raises(AuditError, match="`memory_limit_gb` takes a number of GB or a card"):
        memory_limit("h300")
    with pytest.raises(AuditError, match="must be > 0"):
        memory_limit("0")
    assert cli_args.memory_limit_gb("b200") == 192.0
    with pytest.raises(argparse.ArgumentTypeError, match="takes a number of GB or a card"):
        cli_args.memory_limit_gb("h300")


def test_the_line_leads_with_what_makes_it_misleading():
    """A blind knob with decisions inside the threshold: the line names the knob first, then the decisions it
    gets right (not "MISLEADING: every mock's choices are within ...")."""
    d, e, v = _verdict(noisy_grid(0), threshold=0.15)
    assert v["status"] == "MISLEADING" and d["misleading"] == [] and e["blind"]
    assert v["line"].startswith("MISLEADING: the image-free mock cannot measure freezing the vision tower")
    assert v["line"].index("cannot measure") < v["line"].index("choices are within 15% of real's best")
