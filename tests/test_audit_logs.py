"""Megatron-LM / Megatron Bridge training-log parsing and `vlmdata audit compare` (fixtures in fixtures/audit)."""

import json
import os

import pytest

from vlmdata.audit.logs import LogError, compare_logs, parse_line, parse_log, to_records
from vlmdata.cli import main

FIX = os.path.join(os.path.dirname(__file__), "fixtures", "audit")


def fx(name):
    return os.path.join(FIX, name)


def test_parse_line_fields():
    line = (" [2026-01-01 00:00:00] iteration       10/    100 | consumed samples:          320 | elapsed time per "
            "iteration (ms): 1234.5 | throughput per GPU (TFLOP/s/GPU): 123.4 | learning rate: 1.000000E-04 | "
            "global batch size:    32 | lm loss: 2.345678E+00 |")
    f = parse_line(line)
    assert f["iteration"] == 10 and f["train_iters"] == 100 and f["consumed samples"] == 320
    assert f["elapsed time per iteration (ms)"] == 1234.5 and f["throughput per gpu (tflop/s/gpu)"] == 123.4
    assert f["global batch size"] == 32 and f["lm loss"] == pytest.approx(2.345678)
    assert parse_line("[Rank 0] (after 10 iterations) memory (MB) | allocated: 1.0 |") is None


def test_megatron_lm_log():
    p = parse_log(fx("megatron_mock.log"))
    assert len(p["lines"]) == 10 and p["seq_length"] == 4096 and p["restarts"] == 0
    recs, info = to_records(p)
    assert info["warmup_iterations"] == 10 and len(recs) == 9  # the first interval (iterations 1-10) is warm-up
    r = recs[0]
    assert r["iterations"] == 10 and r["samples"] == 320 and r["tokens_total"] == 32 * 4096 * 10
    line = p["lines"][1]
    assert r["step_ms"] == pytest.approx(line["elapsed time per iteration (ms)"] * 10)
    assert r["flops"] == pytest.approx(line["throughput per gpu (tflop/s/gpu)"] * 1e12 * r["step_ms"] / 1e3)
    recs, info = to_records(p, warmup=50)
    assert [r["step"] for r in recs] == [60, 70, 80, 90, 100]


def test_bridge_log_and_step_time_fallback(tmp_path):
    p = parse_log(fx("bridge_real.log"))
    assert p["seq_length"] == 4096 and len(p["lines"]) == 12
    # without the throughput field, Bridge's "Step Time ... MODEL_TFLOP/s/GPU" line is used
    stripped = tmp_path / "b.log"
    stripped.write_text("".join(l.replace(" throughput per GPU (TFLOP/s/GPU):", " x:") + "\n"
                                for l in open(fx("bridge_real.log")).read().splitlines()))
    q = parse_log(str(stripped))
    assert [f["throughput per gpu (tflop/s/gpu)"] for f in q["lines"]] == \
        [f["throughput per gpu (tflop/s/gpu)"] for f in p["lines"]]


def test_compare_misleading_megatron():
    rep = compare_logs(fx("megatron_mock.log"), fx("megatron_real.log"))
    v = rep["verdict"]
    assert v["status"] == "MISLEADING"
    g = v["gaps"]["mock"]
    assert 1.9 < g["samples_per_s"]["ratio"] < 2.05 and 1.9 < g["tflops"]["ratio"] < 2.05
    assert g["samples_per_s"]["lo"] > 1.1 and g["useful_tokens_per_s"] is None  # not logged
    assert rep["sources"]["real"]["summary"]["rates"]["tokens_per_s"] == pytest.approx(
        rep["sources"]["real"]["summary"]["rates"]["samples_per_s"] * 4096)


def test_compare_ok_bridge():
    v = compare_logs(fx("bridge_mock.log"), fx("bridge_real.log"))["verdict"]
    assert v["status"] == "OK" and 1.0 < v["gaps"]["mock"]["samples_per_s"]["ratio"] < 1.1


def test_restart_keeps_last_run(tmp_path):
    text = open(fx("megatron_real.log")).read()
    p = tmp_path / "r.log"
    p.write_text(text + text)
    assert parse_log(str(p))["restarts"] == 1 and len(parse_log(str(p))["lines"]) == 10


def test_bad_logs(tmp_path):
    empty = tmp_path / "e.log"
    empty.write_text("nothing here\n")
    with pytest.raises(LogError, match="no Megatron iteration lines"):
        parse_log(str(empty))
    with pytest.raises(LogError, match="cannot read"):
        parse_log(str(tmp_path / "missing.log"))
    with pytest.raises(LogError, match="need at least"):
        compare_logs(fx("megatron_mock.log"), fx("megatron_real.log"), warmup=95)


def test_cli_compare_exit_codes(tmp_path, capsys):
    assert main(["audit", "compare", "--mock", fx("megatron_mock.log"), "--real", fx("megatron_real.log"),
                 "-o", str(tmp_path / "r")]) == 3
    assert "MISLEADING" in capsys.readouterr().out
    rep = json.loads((tmp_path / "r" / "report.json").read_text())
    assert rep["kind"] == "logs" and rep["verdict"]["status"] == "MISLEADING"
    assert main(["audit", "compare", "--mock", fx("bridge_mock.log"), "--real", fx("bridge_real.log"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["verdict"]["status"] == "OK"
    assert main(["audit", "compare", "--mock", str(tmp_path / "nope.log"), "--real", fx("bridge_real.log")]) == 2
    assert main(["audit", "compare", "--mock", fx("bridge_mock.log"), "--real", fx("bridge_real.log"),
                 "--threshold", "0.01", "-q"]) == 3
