"""Real data out of memory under the run's configuration: the mock that ran benchmarks a configuration real data
cannot run (MISLEADING, exit 3); nothing ran at all: DOES NOT FIT (exit 1). Before, both were 'no verdict', exit 0:
a CI gate passed on nothing measured."""

import json

from audit_fakes import SMALL_PIXELS, FakeClock, MemoryBudgetWorkload

from vlmdata.audit.phases.runner import AuditConfig, run_audit
from vlmdata.audit.report import build_report, write_report
from vlmdata.cli.report_view import exit_code


def _report(sources, max_images):
    clock = FakeClock()
    cfg = AuditConfig(sources=sources, max_steps=6, block=3, loader_options=SMALL_PIXELS, micro_batch_size=4)
    return build_report([run_audit(cfg, workload=MemoryBudgetWorkload(clock, max_images), clock=clock)], threshold=0.1)


def test_real_out_of_memory_while_a_mock_ran_is_misleading(tmp_path):
    rep = _report(("imagefree", "bridge-noise", "real"), max_images=7)  # real's batches of 4 bring 8+ images
    assert rep["sources"]["real"]["oom"] and rep["sources"]["imagefree"]["summary"]["steps"] == 6
    v = rep["verdict"]
    assert v is not None and v["status"] == "MISLEADING" and exit_code(v) == 3
    assert v["line"].startswith("MISLEADING: real data runs out of memory under this configuration (")
    assert "while imagefree, bridge-noise ran" in v["line"] and "fake: " in v["line"]
    assert [o["source"] for o in v["offenders"]] == ["imagefree", "bridge-noise"]
    assert v["out_of_memory"]["sources"] == ["real"]
    paths = write_report(rep, str(tmp_path))
    assert v["line"] in open(paths["md"]).read()
    assert json.loads(open(paths["json"]).read())["verdict"]["status"] == "MISLEADING"


def test_nothing_fits_is_a_failure_not_a_pass(tmp_path):
    rep = _report(("bridge-noise", "real"), max_images=0)  # every batch brings an image
    v = rep["verdict"]
    assert v is not None and v["status"] == "DOES NOT FIT" and exit_code(v) == 1
    assert v["line"].startswith("DOES NOT FIT: bridge-noise, real ran out of memory under this configuration (")
    assert v["offenders"] == [] and "DOES NOT FIT" in open(write_report(rep, str(tmp_path))["html"]).read()


def test_a_sweep_leaves_a_configurations_out_of_memory_verdict_to_its_decisions():
    """In a sweep, real out of memory at one configuration is the decisions' finding (a mock that picks it
    regrets it), not a misleading gap of that configuration: a mock that picks another one is not blamed."""
    from vlmdata.audit.analysis.verdict import out_of_memory_verdict
    from vlmdata.audit.phases.sweep import sweep_verdict

    oom = out_of_memory_verdict({"real": {"where": "warm-up", "error": "out of memory"}}, ["imagefree"])
    ok = {"status": "OK", "line": "OK: imagefree within 10% of real"}
    results = [{"label": "mbs=8", "report": {"verdict": oom}}, {"label": "mbs=2", "report": {"verdict": ok}}]
    decisions = {"misleading": [], "undecided": [], "per_source": {"real": {"best": "mbs=2"}}, "line": "right"}
    v = sweep_verdict(results, decisions)
    assert v["status"] == "OK" and v["configs_misleading"] == [], v


def test_the_report_of_an_out_of_memory_verdict_has_no_empty_gap_table():
    from vlmdata.audit.report.tables import report_tables

    rep = _report(("imagefree", "bridge-noise", "real"), max_images=7)
    assert not any(title.startswith("Gaps") for title, _ in report_tables(rep))
