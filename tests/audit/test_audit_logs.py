"""Megatron-LM / Megatron Bridge training-log parsing and `vlmdata audit compare` (fixtures in tests/audit/fixtures).

Fixture shapes follow public logs (own numbers): megatron_* and mixtral_text_* the Megatron-LM iteration
line and argument dump (NVIDIA/Megatron-LM#756, a Mixtral text-only run, log_interval 1, an excerpt with
lines cut out); bridge_* Bridge's iteration line with its YAML config; bridge_quick_* a 10-iteration Bridge
run whose iteration lines have no throughput field, preceded by older "Step Time ... TFLOP/s/GPU" lines
(NVIDIA-NeMo/Megatron-Bridge#841); bridge_pp_* rank 0 of a pipeline-parallel Qwen3-VL Bridge run: the
config and only "Step Time ... MODEL_TFLOP/s/GPU" lines (train_utils.training_log prints the iteration
line on the last rank).
"""

import json
import os
import re

import pytest

from vlmdata.audit.logs import (
    VL_CLASS_RE,
    LogError,
    WorkloadMismatch,
    compare_logs,
    config_value,
    parse_line,
    parse_log,
    report_content,
    to_records,
)
from vlmdata.cli.main import main

FIX = os.path.join(os.path.dirname(__file__), "fixtures")


def fx(name):
    return os.path.join(FIX, name)


def test_parse_line_fields():
    line = (
        " [2026-01-01 00:00:00] iteration       10/    100 | consumed samples:          320 | elapsed time per "
        "iteration (ms): 1234.5 | throughput per GPU (TFLOP/s/GPU): 123.4 | learning rate: 1.000000E-04 | "
        "global batch size:    32 | lm loss: 2.345678E+00 |"
    )
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
    stripped.write_text(
        "".join(
            line.replace(" throughput per GPU (TFLOP/s/GPU):", " x:") + "\n"
            for line in open(fx("bridge_real.log")).read().splitlines()
        )
    )
    q = parse_log(str(stripped))
    assert [f["throughput per gpu (tflop/s/gpu)"] for f in q["lines"]] == [
        f["throughput per gpu (tflop/s/gpu)"] for f in p["lines"]
    ]


def test_compare_misleading_megatron():
    rep = compare_logs(fx("megatron_mock.log"), fx("megatron_real.log"))
    v = rep["verdict"]
    assert v["status"] == "MISLEADING"
    g = v["gaps"]["mock"]
    assert 1.9 < g["samples_per_s"]["ratio"] < 2.05 and 1.9 < g["tflops"]["ratio"] < 2.05
    assert g["samples_per_s"]["lo"] > 1.1 and g["nonpad_tokens_per_s"] is None  # not logged
    assert rep["sources"]["real"]["summary"]["rates"]["tokens_per_s"] == pytest.approx(
        rep["sources"]["real"]["summary"]["rates"]["samples_per_s"] * 4096
    )


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
    with pytest.raises(LogError, match="no logged interval after 95 warm-up iterations"):
        compare_logs(fx("megatron_mock.log"), fx("megatron_real.log"), warmup=95)


def test_cli_compare_exit_codes(tmp_path, capsys):
    assert (
        main(
            [
                "audit",
                "compare",
                "--mock",
                fx("megatron_mock.log"),
                "--real",
                fx("megatron_real.log"),
                "-o",
                str(tmp_path / "r"),
            ]
        )
        == 3
    )
    assert "MISLEADING" in capsys.readouterr().out
    rep = json.loads((tmp_path / "r" / "report.json").read_text())
    assert rep["kind"] == "logs" and rep["verdict"]["status"] == "MISLEADING"
    assert main(["audit", "compare", "--mock", fx("bridge_mock.log"), "--real", fx("bridge_real.log"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["verdict"]["status"] == "OK"
    assert main(["audit", "compare", "--mock", str(tmp_path / "nope.log"), "--real", fx("bridge_real.log")]) == 2
    assert (
        main(
            [
                "audit",
                "compare",
                "--mock",
                fx("bridge_mock.log"),
                "--real",
                fx("bridge_real.log"),
                "--threshold",
                "0.01",
                "-q",
            ]
        )
        == 3
    )


def _ms(path):
    return {f["iteration"]: f["elapsed time per iteration (ms)"] for f in parse_log(path)["lines"]}


def test_step_ms_is_per_iteration():
    rep = compare_logs(fx("megatron_mock.log"), fx("megatron_real.log"))
    s = rep["sources"]["real"]["summary"]
    kept = [v for k, v in _ms(fx("megatron_real.log")).items() if k >= 20]  # intervals 11-20 ... 91-100
    assert s["step_ms"]["median"] == pytest.approx(sorted(kept)[len(kept) // 2]) == pytest.approx(1992.0)
    assert s["step_ms"]["mean"] == pytest.approx(sum(kept) / len(kept))
    assert s["interval_ms"]["median"] == pytest.approx(19920.0)  # the per-interval figure, kept aside
    assert s["samples_per_step"] == 32 and s["iterations"] == 90
    assert s["rates"]["samples_per_s"] == pytest.approx(32 * 90 / (sum(kept) * 10 / 1e3))


def test_text_only_log_gets_no_visual_advice():
    """A Mixtral text-only pair, log_interval 1 with lines 21-45 cut out: each line is one iteration, the
    per-iteration cv reflects the real run's one stall, and the advice does not speak of images."""
    rep = compare_logs(fx("mixtral_text_mock.log"), fx("mixtral_text_real.log"))
    real = rep["sources"]["real"]
    assert real["log"]["kept_intervals"] == 65 and real["log"]["iterations"] == 65  # 46 counts 1, not 26
    assert {r["iterations"] for r in real["records"]} == {1}
    ms = _ms(fx("mixtral_text_real.log"))
    kept = [v for k, v in ms.items() if k >= 11]
    assert real["summary"]["rates"]["samples_per_s"] == pytest.approx(128 * 65 / (sum(kept) / 1e3))
    assert rep["workload"]["images"] == {"present": False, "evidence": {"mock": None, "real": None}}
    v = rep["verdict"]
    # 1.07x, but the real run's one stall makes the interval reach past 1.10: undecided, not OK on the point
    assert v["status"] == "UNDECIDED" and v["next_knob"] == "variance"
    g = v["gaps"]["mock"]["samples_per_s"]
    assert g["lo"] < 1.10 < g["hi"] and "samples/s 1.07x [1.01, 1.16] spans 1.10" in v["line"]
    assert "log more intervals" in v["line"]
    msg = v["knobs"][0]["message"]
    assert "visual" not in msg and "image" not in msg and "stalls" in msg
    assert f"cv {real['summary']['step_ms']['cv']:.0%}" in msg
    # model and workload identity read from the argument dump (vision defaults img_h/patch_dim do not count)
    assert rep["workload"]["model"]["num_experts"] == "8" and rep["workload"]["world_size"] == 16
    assert rep["workload"]["model"]["parameters on rank (0, 0)"] == "1478692864"


def test_vlm_log_keeps_visual_advice(tmp_path):
    for side in ("mock", "real"):
        text = (
            open(fx(f"mixtral_text_{side}.log"))
            .read()
            .replace(
                "  vision_pretraining",
                "  vision_model_type ................................ siglip\n  vision_pretraining",
            )
        )
        (tmp_path / f"{side}.log").write_text(text)
    rep = compare_logs(str(tmp_path / "mock.log"), str(tmp_path / "real.log"))
    assert rep["workload"]["images"]["present"]
    assert rep["workload"]["images"]["evidence"]["real"] == "vision_model_type: siglip"
    assert "visual" in rep["verdict"]["knobs"][0]["message"]


def test_vl_class_names():
    for name in (
        "megatron.bridge.models.qwen_vl.qwen3_vl_provider.Qwen3VLMoEModelProvider",
        "Qwen/Qwen2.5-VL-7B-Instruct",
        "llava-hf/llava-1.5-7b-hf",
        "megatron.bridge.data.builders.mock_vlm_sft.MockVLMSFTDatasetConfig",
    ):
        assert VL_CLASS_RE.search(name), name
    for name in (
        "mistralai/Mixtral-8x7B-v0.1",
        "megatron.bridge.models.qwen.qwen_provider.Qwen3MoEModelProvider",
        "meta-llama/Llama-3.1-8B",
        "megatron.bridge.training.config.ConfigContainer",
    ):
        assert not VL_CLASS_RE.search(name), name


def test_bridge_step_time_only_logs():
    """Rank 0 of a pipeline-parallel Bridge run: no iteration line, only Step Time lines and the YAML config."""
    p = parse_log(fx("bridge_pp_real.log"))
    assert p["lines"] == [] and len(p["step_times"]) == 10 and p["format"] == "Bridge Step Time lines"
    assert config_value(p["config"], "hidden_size") == "2048"  # model.hidden_size, not vision_config's 1152
    assert config_value(p["config"], "_target_", section="model").endswith("Qwen3VLMoEModelProvider")
    assert p["seq_length"] == 4096
    recs, info = to_records(p)
    assert info["warmup_iterations"] == 5 and len(recs) == 9 and info["iterations"] == 45
    assert [r["step"] for r in recs] == list(range(10, 51, 5))
    assert all(r["samples"] == 160 and r["tokens_total"] == 160 * 4096 for r in recs)
    secs = [st["s"] for st in p["step_times"][1:]]
    rep = compare_logs(fx("bridge_pp_mock.log"), fx("bridge_pp_real.log"))
    real = rep["sources"]["real"]["summary"]
    assert real["step_ms"]["median"] == pytest.approx(sorted(secs)[4] * 1e3)
    assert real["rates"]["samples_per_s"] == pytest.approx(32 * 45 / (sum(secs) * 5))
    tf = [st["tflops"] for st in p["step_times"][1:]]
    assert real["rates"]["tflops"] == pytest.approx(sum(t * s for t, s in zip(tf, secs)) / sum(secs))
    assert rep["verdict"]["status"] == "MISLEADING" and rep["workload"]["images"]["present"]
    assert any("Step Time" in n and "log_interval 5" in n for n in rep["notes"])


def test_quick_run_one_interval_no_confidence_interval():
    """A 10-iteration run logging every 5: one interval after warm-up, no bootstrap interval, a note."""
    rep = compare_logs(fx("bridge_quick_mock.log"), fx("bridge_quick_real.log"))
    assert rep["sources"]["real"]["log"]["kept_intervals"] == 1
    g = rep["verdict"]["gaps"]["mock"]["samples_per_s"]
    assert g["ratio"] == pytest.approx(9860.0 / 7040.0) and g["lo"] is None and g["hi"] is None
    tf = rep["verdict"]["gaps"]["mock"]["tflops"]
    assert tf["ratio"] == pytest.approx(115.7 / 82.6)  # older "58.2TFLOP/s/GPU" Step Time lines read
    line = rep["verdict"]["line"]
    assert rep["verdict"]["status"] == "UNDECIDED"  # 1.40x from one interval: never a verdict either way
    assert "1 steps per source, too few for an interval" in line and "[" not in line
    assert any("no confidence interval" in n for n in rep["notes"])


def test_single_line_run_keeps_start_up_with_a_note(tmp_path):
    for side, ms, tf in (("mock", 7000.0, 100.0), ("real", 9100.0, 77.0)):
        (tmp_path / f"{side}.log").write_text(
            f"Step Time : {ms / 1e3:.2f}s GPU utilization: {tf:.1f}MODEL_TFLOP/s/GPU\n"
            f" [2025-10-02 22:52:07] iteration       10/      10 | consumed samples:         5120 | elapsed time per "
            f"iteration (ms): {ms:.1f} | learning rate: 3.000000E-04 | global batch size:   512 | "
            "lm loss: 4.47E+00 |\n"
        )
    rep = compare_logs(str(tmp_path / "mock.log"), str(tmp_path / "real.log"))
    assert rep["sources"]["real"]["log"]["warmup_iterations"] == 0
    assert rep["sources"]["real"]["records"][0]["iterations"] == 10
    assert any("warm-up could not be excluded" in n for n in rep["notes"])
    assert rep["verdict"]["gaps"]["mock"]["samples_per_s"]["ratio"] == pytest.approx(9100 / 7000)


def _edit(src, dst, *pairs):
    text = open(src).read()
    for a, b in pairs:
        assert a in text
        text = text.replace(a, b)
    dst.write_text(text)
    return str(dst)


def test_workload_mismatch_refused_unless_allowed(tmp_path, capsys):
    dots = "." * 31
    real64 = _edit(
        fx("megatron_real.log"),
        tmp_path / "r.log",
        (f"global_batch_size {dots} 32", f"global_batch_size {dots} 64"),
        ("global batch size:    32", "global batch size:    64"),
    )
    with pytest.raises(WorkloadMismatch) as e:
        compare_logs(fx("megatron_mock.log"), real64)
    assert e.value.differences == [("global batch size", "32", "64")]
    assert "`allow_mismatch`" in str(e.value) and "--" not in str(e.value)  # the library names no flag
    rep = compare_logs(fx("megatron_mock.log"), real64, allow_mismatch=True)
    assert rep["mismatches"] == [{"what": "global batch size", "mock": "32", "real": "64"}]
    assert any("workloads differ" in n for n in rep["notes"])
    # model and seq_length differences (Bridge YAML)
    other = _edit(
        fx("bridge_pp_real.log"),
        tmp_path / "m.log",
        ("  hidden_size: 2048", "  hidden_size: 4096"),
        ("  seq_length: 4096", "  seq_length: 8192"),
    )
    with pytest.raises(WorkloadMismatch) as e:
        compare_logs(fx("bridge_pp_mock.log"), other)
    assert ("seq_length", "4096", "8192") in e.value.differences
    assert ("model hidden_size", "2048", "4096") in e.value.differences
    # the CLI: exit 2, one line naming the flag; with the flag, the verdict
    assert main(["audit", "compare", "--mock", fx("megatron_mock.log"), "--real", real64]) == 2
    errout = capsys.readouterr().err
    assert "global batch size 32 (mock) vs 64 (real)" in errout and "--allow-mismatch" in errout
    assert len(errout.strip().splitlines()) == 1
    assert main(["audit", "compare", "--mock", fx("megatron_mock.log"), "--real", real64, "--allow-mismatch"]) == 3


def test_no_throughput_no_dangling_separator(tmp_path):
    paths = [_edit(fx(f"megatron_{s}.log"), tmp_path / f"{s}.log") for s in ("mock", "real")]
    for p in paths:
        text = re.sub(r" throughput per GPU \(TFLOP/s/GPU\): [\d.]+ \|", "", open(p).read())
        open(p, "w").write(text)
    v = compare_logs(*paths)["verdict"]
    assert v["status"] == "MISLEADING" and v["gaps"]["mock"]["tflops"] is None
    assert "; )" not in v["line"] and "MISLEADING (limit 1.10x): mock overstates real samples/s" in v["line"]


def test_report_content_has_no_empty_section():
    rep = compare_logs(fx("megatron_mock.log"), fx("megatron_real.log"))
    c = report_content(rep)
    labels = [label for label, _ in c["lines"]]
    assert labels[:4] == ["Workload", "Images", "mock log", "real log"]
    assert all(text.strip() for _, text in c["lines"])
    assert [t for t, _, _ in c["tables"]][0].startswith("Per iteration")
    for _, head, rows in c["tables"]:
        assert rows and all(len(r) == len(head) and all(str(x).strip() for x in r) for r in rows)
    assert c["plot_metrics"] == ["samples_per_s", "tflops"]  # non-pad tokens are not logged
    per_iter = c["tables"][0][2]
    assert per_iter[1][:2] == ["real", "1992.0"] and per_iter[0][-1] == "1.96x"


def test_cli_compare_prints_per_iteration_table(capsys):
    assert (
        main(["audit", "compare", "--mock", fx("mixtral_text_mock.log"), "--real", fx("mixtral_text_real.log"), "-q"])
        == 4  # UNDECIDED: the interval spans the limit
    )
    o = capsys.readouterr().out
    assert "ms/iteration" in o and "UNDECIDED (limit 1.10x): mock undecided" in o  # -q keeps table and verdict
    assert "visual" not in o


def test_bridge_summary_values_without_the_mcore_default(tmp_path):
    """Bridge 0.6.2's "Configuration Summary" prints ``num_layers: 48  (Mcore default: 0)``: the value is 48."""
    log = tmp_path / "summary.log"
    text = open(fx("bridge_real.log")).read()
    log.write_text(
        "[model] Non-default values (vs Mcore TransformerConfig):\n  num_layers: 48  (Mcore default: 0)\n" + text
    )
    p = parse_log(str(log))
    assert config_value(p["config"], "num_layers") == "48"
