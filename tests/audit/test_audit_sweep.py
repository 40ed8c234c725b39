"""The decision audit: sweeps, out-of-memory as a result, rankings, Kendall tau and regret (CPU)."""

import json
import math

import pytest
import torch
from audit_clocked_step import clocked
from audit_fakes import SMALL_PIXELS, FakeClock, MemoryBudgetWorkload

from vlmdata.audit.analysis.decisions import decide_configs, label
from vlmdata.audit.phases.runner import AuditConfig
from vlmdata.audit.phases.sweep import grid, parse_sweep, run_sweep
from vlmdata.audit.report import build_report, write_report
from vlmdata.audit.sources.registry import AuditError
from vlmdata.audit.workload.workloads import ReferenceWorkload, apply_recompute
from vlmdata.cli.main import main


def cell(rate, peak_gb=10.0, oom=False):
    return {
        "rates": {} if oom else {"samples_per_s": rate, "nonpad_tokens_per_s": rate * 100},
        "peak_mem_bytes": peak_gb * 1e9,
        "oom": oom,
    }


def table():
    """Four micro-batch sizes; real runs out of memory at 8 and is fastest at 4; imagefree keeps speeding up;
    bridge-noise agrees with real's order."""
    real = [cell(4.0, 30), cell(6.0, 50), cell(7.0, 90), cell(0, oom=True)]
    imagefree = [cell(8.0, 20), cell(14.0, 25), cell(24.0, 35), cell(40.0, 60)]
    noise = [cell(5.0, 25), cell(7.0, 40), cell(8.0, 70), cell(6.0, 120)]
    return [
        {"values": {"micro_batch_size": m}, "sources": {"imagefree": i, "bridge-noise": n, "real": r}}
        for m, r, i, n in zip((1, 2, 4, 8), real, imagefree, noise)
    ]


def test_decisions_on_a_hand_made_table():
    d = decide_configs(table(), threshold=0.10)
    assert d["per_source"]["real"]["best"] == "micro_batch_size=4"
    assert d["per_source"]["real"]["ranking"]["samples_per_s"] == [
        "micro_batch_size=4",
        "micro_batch_size=2",
        "micro_batch_size=1",
    ]  # the oom is not ranked
    f = d["mocks"]["imagefree"]
    assert f["choice"] == "micro_batch_size=8" and not f["same"] and f["choice_on_real"] == "oom"
    assert f["regret"] == math.inf
    assert f["kendall_tau"] == pytest.approx(1.0)  # same order where both ran (1, 2, 4)
    assert f["line"] == (
        "imagefree picks micro_batch_size=8, which runs out of memory on real data; real's best is micro_batch_size=4"
    )
    n = d["mocks"]["bridge-noise"]
    assert n["choice"] == "micro_batch_size=4" and n["same"] and n["regret"] == 0.0
    assert d["misleading"] == ["imagefree"]


def test_regret_is_the_real_throughput_lost_and_memory_limits_fit():
    rows = table()
    rows[3]["sources"]["real"] = cell(6.3, 120)  # now real fits at 8 (but is slower than at 4)
    d = decide_configs(rows, threshold=0.05)
    assert d["mocks"]["imagefree"]["regret"] == pytest.approx(1 - 6.3 / 7.0)
    assert "10% slower on real data than real's best (micro_batch_size=4)" in d["mocks"]["imagefree"]["line"]
    assert d["misleading"] == ["imagefree"]
    # a 100 GB card: micro-batch 8 does not fit for real (120 GB) nor for imagefree (60 GB fits)
    d = decide_configs(rows, threshold=0.05, memory_limit_gb=100)
    assert d["mocks"]["imagefree"]["choice_on_real"] == "does not fit" and d["mocks"]["imagefree"]["regret"] == math.inf
    assert "does not fit the memory limit on real data" in d["mocks"]["imagefree"]["line"]
    assert d["mocks"]["bridge-noise"]["choice"] == "micro_batch_size=4"  # 120 GB at 8 does not fit: 4 is its best


def test_kendall_tau_of_a_reversed_order():
    rows = [
        {"values": {"micro_batch_size": m}, "sources": {"imagefree": cell(10 - m), "real": cell(m)}} for m in (1, 2, 3)
    ]
    assert decide_configs(rows)["mocks"]["imagefree"]["kendall_tau"] == pytest.approx(-1.0)


def test_parse_and_grid():
    sweep = parse_sweep(["micro_batch_size=1,2", "freeze_vision=0,1", "recompute=none,selective"])
    assert sweep == {"micro_batch_size": [1, 2], "freeze_vision": [False, True], "recompute": ["none", "selective"]}
    g = grid(sweep)
    assert len(g) == 8 and g[0] == {"micro_batch_size": 1, "freeze_vision": False, "recompute": "none"}
    assert label(g[-1]) == "micro_batch_size=2 freeze_vision=1 recompute=selective"
    for bad, msg in (
        (["micro_batch_size=0"], ">= 1"),
        (["recompute=some"], "none, selective, full"),
        (["parallel=fsdp"], "torchrun"),
        (["lr=1,2"], "the reference workload sweeps"),
        (["micro_batch_size"], "KEY=V1,V2"),
        (["freeze_vision=2"], "not 0 or 1"),
    ):
        with pytest.raises(AuditError, match=msg):
            parse_sweep(bad)
    assert parse_sweep(["lr=0.1,1e-3", "mode=a"], user_step=True) == {"lr": [0.1, 0.001], "mode": ["a"]}


def test_out_of_memory_is_a_result_and_the_sweep_goes_on(tmp_path):
    """Real batches of 4 samples carry more than 7 images now and then: micro-batch 4 runs out of memory on
    real data but not on the image-free mock, which therefore picks it."""
    clock = FakeClock()
    cfg = AuditConfig(sources=("imagefree", "bridge-noise", "real"), max_steps=6, block=3, loader_options=SMALL_PIXELS)
    result = run_sweep(
        cfg,
        {"micro_batch_size": [1, 2, 4]},
        build=lambda res: build_report([res], threshold=0.10),
        workload_factory=lambda values: MemoryBudgetWorkload(clock, max_images=7),
        clock=clock,
    )
    by = {c["label"]: c["report"] for c in result["configs"]}
    assert by["micro_batch_size=4"]["sources"]["real"]["oom"]["where"] in ("warm-up", "first training step") or by[
        "micro_batch_size=4"
    ]["sources"]["real"]["oom"]["where"].startswith("step ")
    assert by["micro_batch_size=4"]["sources"]["real"]["summary"] is None
    assert by["micro_batch_size=4"]["sources"]["imagefree"]["summary"]["steps"] == 6
    d = result["decisions"]
    assert d["mocks"]["imagefree"]["choice"] == "micro_batch_size=4" and d["mocks"]["imagefree"]["regret"] == math.inf
    assert d["per_source"]["real"]["best"] in ("micro_batch_size=1", "micro_batch_size=2")
    assert result["verdict"]["status"] == "MISLEADING"
    assert result["verdict"]["line"].startswith(
        "MISLEADING: imagefree picks micro_batch_size=4, which runs out of memory on real data"
    )
    paths = write_report(result, str(tmp_path))
    md = open(paths["md"]).read()
    assert "# vlmdata audit sweep" in md and "| imagefree | micro_batch_size=4 |" in md
    assert "| micro_batch_size=4 | " in md and "| oom |" in md  # the regret column and the real cell
    assert open(paths["html"]).read().count("data:image/png;base64,") == 1
    assert json.loads(open(paths["json"]).read())["decisions"]["misleading"]


def test_cli_sweep_with_a_user_step(tmp_path, capsys, monkeypatch):
    """On a fake clock (audit_clocked_step): the step's costs, not the machine's load, pick the best size."""
    clocked(monkeypatch)
    args = [
        "audit",
        "--sources",
        "imagefree,real",
        "--steps",
        "3",
        "--seq-length",
        "512",
        "--loader-arg",
        "min_pixels=1024",
        "--loader-arg",
        "max_pixels=16384",
        "--step",
        "audit_clocked_step:per_step_overhead",
        "--sweep",
        "micro_batch_size=1,2",
        "-o",
        str(tmp_path),
    ]
    code = main(args)
    out = capsys.readouterr().out
    rep = json.loads((tmp_path / "report.json").read_text())
    assert rep["kind"] == "sweep" and [c["label"] for c in rep["configs"]] == [
        "micro_batch_size=1",
        "micro_batch_size=2",
    ]
    assert rep["workload"]["options"] == {"micro_batch_size": 1}  # the user step got the sweep values
    assert rep["decisions"]["per_source"]["real"]["best"] == "micro_batch_size=2"
    assert "decisions" in out and code == 4  # 3 steps per configuration: too few for an interval
    assert main(["audit", "--sweep", "recompute=sometimes"]) == 2


@pytest.mark.parametrize("mode, expected", [("none", 0), ("selective", 2 * 2 + 2), ("full", 2 + 2)])
def test_recompute_wraps_the_named_blocks_and_keeps_the_loss(mode, expected):
    from audit_fakes import make_tiny_batch

    torch.manual_seed(0)
    base = ReferenceWorkload("tiny", "cpu", "all")
    torch.manual_seed(0)
    w = ReferenceWorkload("tiny", "cpu", "all", recompute=mode, freeze_vision=True)
    assert w.recomputed == expected and w.describe()["options"]["recompute"] == mode
    assert not any(p.requires_grad for p in w.model.model.visual.parameters())
    batch = make_tiny_batch()
    a, b = base(batch)["loss"], w(batch)["loss"]
    assert a == pytest.approx(b, rel=1e-5)  # the same forward; recompute and freezing change the cost only
    assert all(p.grad is None for p in w.model.model.visual.parameters())
    with pytest.raises(AuditError, match="`recompute` must be one of"):
        apply_recompute(w.model, "some")


@pytest.mark.timeout(600)
def test_parallel_sweep_ddp_and_fsdp_under_torchrun(tmp_path):
    """Two gloo ranks, the tiny reference model replicated (ddp) and sharded with FSDP2 (fsdp)."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node=2",
        "-m",
        "vlmdata",
        "audit",
        "--sources",
        "imagefree,real",
        "--steps",
        "3",
        "--seq-length",
        "1024",
        "--loader-arg",
        "min_pixels=1024",
        "--loader-arg",
        "max_pixels=16384",
        "--sweep",
        "parallel=ddp,fsdp",
        "-o",
        str(tmp_path),
        "-q",
    ]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=560)
    rep = json.loads((tmp_path / "report.json").read_text())
    assert [c["label"] for c in rep["configs"]] == ["parallel=ddp", "parallel=fsdp"], r.stderr[-2000:]
    for c in rep["configs"]:
        assert c["report"]["world_size"] == 2
        assert all(s["summary"]["steps"] == 3 for s in c["report"]["sources"].values())
    assert rep["configs"][1]["report"]["workload"]["options"]["parallel"] == "fsdp"
