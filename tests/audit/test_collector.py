"""Python's garbage collector in the measured rounds, as Bridge's ``train.manual_gc`` sets it
(``vlmdata.audit.workload.collector``): off inside timed steps and collected between them when manual; left to its
thresholds, and every collection inside a step counted, when automatic."""

import gc
import weakref

from audit_fakes import SMALL_PIXELS, FakeClock, ShapeCostWorkload

from vlmdata.audit.phases.runner import AuditConfig, run_audit
from vlmdata.audit.report import build_report, write_report
from vlmdata.audit.workload.collector import Collector, describe_line


class _Node:
    def __init__(self):
        self.me = self  # a reference cycle: only the cyclic collector frees it


class GarbageWorkload(ShapeCostWorkload):
    """A step that leaves 3,000 reference cycles behind: over the collector's generation-0 threshold (700
    allocations), so automatic collection must run inside it."""

    def __init__(self, clock):
        super().__init__(clock)
        self.live: weakref.WeakSet = weakref.WeakSet()
        self.enabled_in_steps: list[bool] = []

    def __call__(self, batch):
        self.enabled_in_steps.append(gc.isenabled())
        for _ in range(3000):
            self.live.add(_Node())
        return super().__call__(batch)


def run(manual: bool, tmp):
    clock = FakeClock()
    work = GarbageWorkload(clock)
    cfg = AuditConfig(
        sources=("imagefree", "real"),
        min_steps=3,
        max_steps=3,
        global_batch_size=2,
        loader_options=SMALL_PIXELS,
        manual_gc=manual,
        manual_gc_interval=50,
    )
    return run_audit(cfg, clock=clock, workload=work, out_dir=str(tmp)), work


def test_manual_keeps_collections_out_of_the_timed_steps(tmp_path):
    assert gc.isenabled()
    result, work = run(True, tmp_path)
    g = result["measurement"]["gc"]
    rounds = result["measurement"]["rounds"]
    assert rounds == 3  # rounds of 1 global step per source
    assert g["mode"] == "manual" and g["interval"] == 50
    assert g["in_timed_steps"] == {"n": 0, "ms": 0, "by_generation": {}}
    assert g["between_steps"]["n"] == rounds + 1  # one before the first round, one after every round
    assert g["amortised_ms_per_step"] == g["between_steps"]["ms_median"] / 50
    assert all(r["gc_in_step_ms"] == 0 for s in result["sources"].values() for r in s["records"])
    timed = [e for e in work.enabled_in_steps[-6:]]  # the 6 measured calls (3 steps x 2 sources) came last
    assert timed == [False] * 6
    assert gc.isenabled()  # restored after measuring
    gc.collect()
    assert len(work.live) == 0
    line = describe_line(g)
    assert line.startswith("garbage collection manual (Bridge's manual_gc): 4 collections between timed steps")
    assert "every 50 steps" in line and "0 collection(s) inside timed steps" in line
    rep = build_report([result], threshold=0.10)
    md = open(write_report(rep, str(tmp_path / "rep"))["md"]).read()
    assert "garbage collection manual" in md and "| manual garbage collection | True | flag |" in md


def test_automatic_collects_inside_the_steps_and_says_so(tmp_path):
    result, work = run(False, tmp_path)
    g = result["measurement"]["gc"]
    assert g["mode"] == "automatic" and g["between_steps"]["n"] == 0 and g["amortised_ms_per_step"] is None
    assert g["in_timed_steps"]["n"] > 0 and "0" in g["in_timed_steps"]["by_generation"]  # generation 0 at least
    per_step = [r["gc_in_step_ms"] for s in result["sources"].values() for r in s["records"]]
    assert sum(per_step) > 0
    assert all(work.enabled_in_steps)
    assert describe_line(g).startswith("garbage collection automatic")


def test_collector_restores_a_disabled_collector_and_counts_forced_collections():
    gc.disable()
    try:
        c = Collector(manual=False, interval=0)
        with c.measuring():
            with c.timed_step():
                gc.collect()  # a full collection inside a timed step
            gc.collect()  # outside: not counted
        assert not gc.isenabled()
        assert c.describe()["in_timed_steps"]["n"] == 1
        assert set(c.describe()["in_timed_steps"]["by_generation"]) == {"2"}
        assert c.between_steps() == 0.0 and c.describe()["between_steps"]["n"] == 0
    finally:
        gc.enable()
    m = Collector(manual=True, interval=0)
    with m.measuring():
        assert not gc.isenabled()
    assert gc.isenabled() and m.describe()["amortised_ms_per_step"] is None
    assert "never collects periodically" in describe_line(m.describe())
