"""The typed records (vlmdata.audit.analysis.result_types) say what a real run writes: every key a producer writes is
declared, every key declared required is written (a fake workload on a fake clock, CPU)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from audit_fakes import SMALL_PIXELS, FakeClock, ShapeCostWorkload

from vlmdata.audit.analysis.result_types import (
    AuditResult,
    CensusBlock,
    MicroRecord,
    Report,
    ReportSource,
    SourceResult,
    StepRecord,
    WarmupBlock,
)
from vlmdata.audit.analysis.result_types import Measurement as MeasurementType
from vlmdata.audit.phases.runner import AuditConfig, run_audit
from vlmdata.audit.report import build_report


@pytest.fixture(scope="module")
def result(tmp_path_factory) -> AuditResult:
    clock = FakeClock()
    cfg = AuditConfig(
        sources=("imagefree", "real"),
        min_steps=3,
        max_steps=3,
        block=3,
        global_batch_size=2,
        loader_options=SMALL_PIXELS,
    )
    return run_audit(cfg, clock=clock, workload=ShapeCostWorkload(clock), out_dir=str(tmp_path_factory.mktemp("r")))


def _fits(d: Any, typed: Any, where: str) -> None:
    keys = set(d)
    declared = set(typed.__annotations__)
    assert keys <= declared, f"{where}: written but not declared: {sorted(keys - declared)}"
    assert typed.__required_keys__ <= keys, f"{where}: declared required, not written: {typed.__required_keys__ - keys}"


def test_the_runner_result_is_its_typed_records(result):
    _fits(result, AuditResult, "result")
    # without a benchmark configuration, no benchmark block; the plan is the session's (on the report)
    assert set(result) == set(AuditResult.__annotations__) - {"plan", "benchmark"}
    m = result["measurement"]
    _fits(m, MeasurementType, "measurement")
    _fits(m["warmup"], WarmupBlock, "warmup")
    assert isinstance(m["warmup"]["loader_seconds"], float)  # the warm-up's own describe(): its loaders' seconds
    for name, src in result["sources"].items():
        _fits(src, SourceResult, name)
        _fits(src["census"], CensusBlock, f"{name}.census")
        assert src["records"]
        for rec in src["records"]:
            _fits(rec, StepRecord, f"{name} record")
            for micro in rec["micro"]:
                _fits(micro, MicroRecord, f"{name} micro")


def test_the_report_is_its_typed_record(result):
    report = build_report([result], threshold=0.10)
    _fits(report, Report, "report")
    for name, src in report["sources"].items():
        _fits(src, ReportSource, name)
    json.dumps(report, allow_nan=False)  # plain dicts: the typed records change nothing in the JSON
