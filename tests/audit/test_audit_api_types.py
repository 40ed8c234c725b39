"""The audit's public entry points answer wrong types and values with a ``VlmdataError`` naming the parameter
(issue 32): read_bridge_config, read_model_config, AuditConfig, run_session, compare_logs, simulate, make_loader;
each hostile value one argument at a time, never a TypeError or AttributeError traceback."""

import math

import pytest

from vlmdata import VlmdataError, make_loader
from vlmdata.audit.analysis.straggler_cost import CostModel
from vlmdata.audit.analysis.straggler_model import Sample, simulate
from vlmdata.audit.logs import compare_logs
from vlmdata.audit.phases.session import run_session
from vlmdata.audit.settings.bridge_config import read_bridge_config
from vlmdata.audit.settings.config import AuditConfig
from vlmdata.audit.settings.model_config import read_model_config

HOSTILE = [None, 123, -1, 3.5, math.nan, b"bytes", [], {}, object(), True, 10**5000]
LOGS = "tests/audit/fixtures"
MOCK, REAL = f"{LOGS}/bridge_mock.log", f"{LOGS}/bridge_real.log"


def refused(fn, *args, **kwargs) -> None:
    with pytest.raises(VlmdataError):
        fn(*args, **kwargs)


@pytest.mark.parametrize("value", HOSTILE, ids=lambda v: type(v).__name__)
def test_paths_of_the_wrong_type(value):
    refused(read_bridge_config, value)
    refused(read_model_config, value)
    refused(run_session, value)
    refused(compare_logs, value, REAL)
    refused(compare_logs, MOCK, value)
    for name in ("bridge_config", "model_config", "real", "step"):
        if value is not None:
            refused(AuditConfig, **{name: value})


@pytest.mark.parametrize("value", [v for v in HOSTILE if v is not None], ids=lambda v: type(v).__name__)
def test_numbers_of_the_wrong_type_or_size(value):
    if not (isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value):
        refused(compare_logs, MOCK, REAL, threshold=value)
    if value not in (123, 3.5):
        refused(compare_logs, MOCK, REAL, warmup=value)
    for name in ("micro_batch_size", "tp", "global_batch_size"):
        if value not in (123,):
            refused(AuditConfig, **{name: value if value != 3.5 else 10**12})
    if value != 123:
        refused(AuditConfig, seed=value if value != 3.5 else 2**64)


@pytest.mark.parametrize(
    "kw, values",
    [
        ("threads", [0, -1, 3.5, math.nan, b"x", [], True, 10**5000]),
        ("memory_limit_gb", [0, -1, math.nan, math.inf, b"x", [], True, "80"]),
        ("out_dir", [123, 3.5, b"x", [], {}, object(), True]),
        ("progress", [123, "x"]),
    ],
)
def test_run_session_arguments(kw, values):
    cfg = AuditConfig()
    for value in values:  # each refused before anything is measured
        refused(run_session, cfg, **{kw: value})


def test_a_memory_limit_without_a_sweep_is_refused_not_ignored():
    """--memory-limit-gb judges a sweep's configurations; one audit silently ignored it."""
    with pytest.raises(VlmdataError, match="`memory_limit_gb` judges the configurations of a sweep"):
        run_session(AuditConfig(), memory_limit_gb=80.0)
    from vlmdata.audit.phases.session import plan_only  # the plan checks what the run checks

    with pytest.raises(VlmdataError, match="`memory_limit_gb` judges the configurations of a sweep"):
        plan_only(AuditConfig(), memory_limit_gb=80.0)


def test_threshold_must_be_finite():
    refused(compare_logs, MOCK, REAL, threshold=math.inf)


def test_simulate_bounds_every_size():
    census = {"real": [Sample(100, (64,))] * 8, "imagefree": [Sample(80)] * 8}
    cost = CostModel(1.0, 0.01, 0.01, 0.0, 2.0)
    kw = dict(micro_batch_size=2, micro_batches_per_rank=2, padded_len=lambda n, b: n)
    assert simulate(census, cost, dp_sizes=[8], steps=4, **kw)["dp_sizes"] == [8]
    for bad in ([10**9], [0], "8", 8, [True], [2.0]):
        refused(simulate, census, cost, dp_sizes=bad, steps=4, **kw)
    refused(simulate, census, cost, dp_sizes=[8], steps=10**12, **kw)
    refused(simulate, census, cost, dp_sizes=[8], steps=4, real=["real"], **{**kw})
    refused(simulate, census, cost, dp_sizes=[8], steps=4, **{**kw, "micro_batch_size": 10**9})


def test_make_loader_bounds_its_sizes():
    refused(make_loader, None, seq_length=2**63)
    refused(make_loader, None, micro_batch_size=10**9)
    refused(make_loader, None, seed=2**64)
