"""vlmdata.benchmarks: the timing method with fake time (exact values), and each `vlmdata bench` end to end
on the sample data (small sizes, --rounds 2; no speed is asserted)."""

from __future__ import annotations

import json
import sys

import pytest

import vlmdata
from vlmdata.benchmarks.timing import (
    BenchmarkError,
    Clock,
    Contender,
    interleave,
    markdown_table,
    rotation,
    spread,
)
from vlmdata.cli.main import main


class FakeTime:
    """Wall, own-CPU and children-CPU counters that only the fake contenders move."""

    def __init__(self):
        self.wall = self.cpu = self.children = 0.0
        self.loads = iter([(1.0, 0.5, 0.25), (2.0, 1.0, 0.5)])

    def clock(self) -> Clock:
        return Clock(
            wall=lambda: self.wall,
            cpu_self=lambda: self.cpu,
            cpu_children=lambda: self.children,
            load=lambda: next(self.loads),
        )


def test_rotation():
    assert rotation(["a", "b", "c"], 0) == ["a", "b", "c"]
    assert rotation(["a", "b", "c"], 1) == ["b", "c", "a"]
    assert rotation(["a", "b", "c"], 5) == ["c", "a", "b"]


def test_rounds_rotate_and_warmup_is_not_counted():
    calls = []
    t = FakeTime()
    cs = [Contender(n, (lambda n=n: calls.append(n))) for n in "ABC"]
    r = interleave(cs, rounds=3, warmup=1, clock=t.clock())
    # round 0 (warm-up) A B C; timed rounds 1-3 rotate on
    assert calls == list("ABCBCACABABC")
    assert r.orders == [list("BCA"), list("CAB"), list("ABC")]
    assert len(r.measurements) == 9 and {m.round for m in r.measurements} == {0, 1, 2}
    assert [m.position for m in r.measurements if m.name == "A"] == [2, 1, 0]
    assert r.load_start == (1.0, 0.5, 0.25) and r.load_end == (2.0, 1.0, 0.5)


def test_ratio_maths_exact():
    t = FakeTime()
    costs = {"base": [(4.0, 2.0, 0.0)] * 4, "fast": [(9, 9, 9), (2.0, 1.0, 0.0), (1.0, 0.5, 0.0), (1.0, 0.25, 0.0)]}
    step = {"base": iter(costs["base"]), "fast": iter(costs["fast"])}

    def work(name):
        wall, cpu, children = next(step[name])
        t.wall += wall
        t.cpu += cpu
        t.children += children

    r = interleave(
        [Contender("base", lambda: work("base"), units=10), Contender("fast", lambda: work("fast"), units=10)],
        rounds=3,
        warmup=1,
        clock=t.clock(),
    )
    assert r.times("fast") == [1.0, 0.5, 0.25] and r.times("fast", "wall") == [2.0, 1.0, 1.0]
    assert r.ratios("fast", "base") == [2.0, 4.0, 8.0]
    assert r.ratios("fast", "base", "wall") == [2.0, 4.0, 4.0]
    assert r.rates("fast") == [10.0, 20.0, 40.0]
    s = r.summary(baseline="base")
    assert s["contenders"]["fast"]["ratio_cpu"] == {"min": 2.0, "median": 4.0, "max": 8.0}
    assert s["contenders"]["base"]["ratio_cpu"] == {"min": 1.0, "median": 1.0, "max": 1.0}
    assert s["contenders"]["fast"]["per_cpu_s"] == {"min": 10.0, "median": 20.0, "max": 40.0}
    assert s["contenders"]["base"]["cpu_s"]["median"] == 2.0 and s["load_average_start"] == [1.0, 0.5, 0.25]
    table = markdown_table(s)
    assert "| fast |" in table and "4.00x (2.00-8.00)" in table and "load average 1.00 at start, 2.00 at end" in table


def test_children_cpu_counts_for_callables_and_commands():
    t = FakeTime()

    def spawn():
        t.cpu += 0.5
        t.children += 1.5

    r = interleave(
        [Contender("inproc", spawn), Contender("cmd", [sys.executable, "-c", "pass"])],
        rounds=1,
        warmup=0,
        clock=t.clock(),
    )
    assert r.times("inproc") == [2.0]  # own 0.5 + children 1.5
    assert r.times("cmd") == [0.0]  # a command: children only (the fake clock did not move)


def test_bad_arguments_and_failing_command():
    with pytest.raises(BenchmarkError, match="unique"):
        interleave([Contender("a", lambda: None), Contender("a", lambda: None)])
    with pytest.raises(BenchmarkError, match="rounds"):
        interleave([Contender("a", lambda: None)], rounds=0)
    with pytest.raises(BenchmarkError, match="exited 3"):
        interleave([Contender("bad", [sys.executable, "-c", "raise SystemExit(3)"])], rounds=1, warmup=0)
    assert spread([3.0, 1.0, 2.0]) == {"min": 1.0, "median": 2.0, "max": 3.0}


def _bench_json(capsys, *argv):
    assert main(["bench", *argv, "--json", "--rounds", "2"]) == 0
    return json.loads(capsys.readouterr().out)


def _check_timing(res, names):
    t = res["timing"]
    assert t["rounds"] == 2 and len(t["load_average_start"]) == 3 and len(t["load_average_end"]) == 3
    assert set(names) <= set(t["contenders"])
    for row in t["contenders"].values():
        assert set(row["cpu_s"]) == {"min", "median", "max"} and row["wall_s"]["min"] >= 0
        assert set(row["ratio_cpu"]) == {"min", "median", "max"} and "per_cpu_s" in row


def test_bench_build_end_to_end(capsys):
    res = _bench_json(capsys, "build", "--photos", "12", "--max-count", "5", "--warmup", "0")
    assert res["benchmark"] == "build" and res["timing"]["baseline"] == "plain+energon"
    assert res["input"]["written_by_vlmdata"] == res["input"]["samples"] > 0
    _check_timing(res, ["vlmdata-build", "plain+energon", "plain"])


def test_bench_loader_end_to_end(capsys):
    res = _bench_json(capsys, "loader", vlmdata.sample_data_path(), "--samples", "4", "--warmup", "0")
    assert res["benchmark"] == "loader" and res["samples"] == 4
    _check_timing(res, ["bridge-hf-pil", "hf-wds-fast", "vlmdata", "vlmdata-exact", "jpeg-decode"])
    assert res["baseline"] in res["timing"]["contenders"] and res["baseline"].startswith(("bridge", "hf-", "energon"))
    assert {r["name"] for r in res["rows"]} == set(res["timing"]["contenders"])
    assert set(res["vlmdata_vs_decode"]["vlmdata"]) == {"min", "median", "max"}


def test_bench_synth_end_to_end(capsys):
    res = _bench_json(capsys, "synth", vlmdata.sample_data_path(), "--samples", "3", "--warmup", "0")
    assert res["benchmark"] == "synth"
    _check_timing(res, ["real-decode+preprocess", "twin-generate", "twin-decode+preprocess"])


def test_bench_build_needs_an_input(capsys):
    assert main(["bench", "build"]) == 2
    assert "--photos" in capsys.readouterr().err
