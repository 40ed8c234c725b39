"""The audit runner (CPU): order independence, pairing, warm-up, report files, gradient sync, stragglers,
CLI exit codes."""

import json
import os
import socket

import pytest
import torch
from audit_clocked_step import clocked
from audit_fakes import SMALL_PIXELS, FakeClock, ShapeCostWorkload, TowerWarmWorkload

from vlmdata.audit.analysis.ranks import merge_ranks, stragglers
from vlmdata.audit.analysis.verdict import GAP_METRICS
from vlmdata.audit.phases.runner import AuditConfig, run_audit
from vlmdata.audit.report import build_report, write_report
from vlmdata.audit.workload.step import STAGES
from vlmdata.cli.main import main
from vlmdata.cli.report_view import exit_code

SOURCES = ("imagefree", "bridge-noise", "synthetic", "real")


@pytest.fixture(scope="module")
def one_thread():
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


def fake_run(sources, warm_shapes=True, tmp=None, **kw):
    clock = FakeClock()
    work = ShapeCostWorkload(clock)
    kw.setdefault("global_batch_size", 2)  # one micro-batch of 2 per optimizer step (accumulation: own tests)
    cfg = AuditConfig(
        sources=tuple(sources),
        min_steps=6,
        max_steps=6,
        block=3,
        loader_options=SMALL_PIXELS,
        warm_shapes=warm_shapes,
        **kw,
    )
    return run_audit(cfg, clock=clock, workload=work, out_dir=tmp), work


def ratios(result):
    rep = build_report([result], threshold=0.10)
    return {(s, m): ci["ratio"] for s, g in rep["verdict"]["gaps"].items() for m, ci in g.items() if ci}


@pytest.fixture(scope="module")
def order_runs(tmp_path_factory):
    forward, fw = fake_run(SOURCES, tmp=str(tmp_path_factory.mktemp("fwd")))
    backward, bw = fake_run(SOURCES[::-1], tmp=str(tmp_path_factory.mktemp("bwd")))
    return forward, backward, fw, bw


def test_reversing_sources_leaves_every_ratio_unchanged(order_runs):
    forward, backward, fw, bw = order_runs
    a, b = ratios(forward), ratios(backward)
    assert set(a) == {(s, m) for s in ("imagefree", "bridge-noise", "synthetic") for m in GAP_METRICS}
    for key in a:
        assert b[key] == pytest.approx(a[key], rel=0.03), key
    # every first-seen cost fell in the warm-up (its one full step, then forward+backward passes): none
    # inside a timed step, in either order
    assert fw.charged_in_warm > 0 and fw.step_charges[0] > 0
    assert not any(fw.step_charges[1:]) and not any(bw.step_charges[1:]) and len(fw.step_charges) == 1 + 4 * 6
    for res in (forward, backward):
        assert all(r["first_seen_shapes"] == 0 for _, src in res["sources"].items() for r in src["records"])
        assert res["measurement"]["warmup"]["shape_batches"] > 0


def test_without_shape_warmup_the_order_changes_the_answer(tmp_path):
    """The same fake costs without the warm-up: whichever source meets a size first pays for it."""
    a, _ = fake_run(SOURCES, warm_shapes=False, tmp=str(tmp_path / "a"))
    b, _ = fake_run(SOURCES[::-1], warm_shapes=False, tmp=str(tmp_path / "b"))
    ra, rb = ratios(a), ratios(b)
    assert max(abs(rb[k] / ra[k] - 1) for k in ra) > 0.03
    assert sum(r["first_seen_shapes"] for _, s in a["sources"].items() for r in s["records"]) > 0


def test_a_micro_batch_whose_new_shapes_are_the_towers_warms_the_tower_alone(tmp_path):
    """Padded to seq_length, every micro-batch has the same token shape and nearly each a new patch count: the
    warm-up runs the tower alone for those (not a whole decoder forward and backward), and still no first-seen
    shape falls in a timed step."""
    clock = FakeClock()
    work = TowerWarmWorkload(clock)
    cfg = AuditConfig(
        sources=SOURCES, min_steps=6, max_steps=6, block=3, loader_options=SMALL_PIXELS, global_batch_size=2,
        seq_policy="max", seq_length=1024,
    )  # fmt: skip
    res = run_audit(cfg, clock=clock, workload=work, out_dir=str(tmp_path))
    warm = res["measurement"]["warmup"]
    assert warm["vision_batches"] == work.tower_warms > 0
    assert warm["shape_batches"] == work.tower_warms + work.full_warms  # the full first step is not a warm()
    assert work.full_warms < work.tower_warms  # most are the tower's alone
    assert not any(work.step_charges[1:])
    assert all(r["first_seen_shapes"] == 0 for s in res["sources"].values() for r in s["records"])
    md = open(write_report(build_report([res], threshold=0.10), str(tmp_path))["md"]).read()
    assert f"({warm['vision_batches']} of them the vision tower alone" in md


def test_a_packed_step_counts_its_samples_not_its_rows(tmp_path):
    # --seq-policy pack: a micro-batch of 2 is one row [1, T] (cu_seqlens_q); samples/s, images per sample and
    # visual tokens per sample count the samples (the H200's packed Qwen3-VL-8B report read half its samples/s)
    result, _ = fake_run(
        ("imagefree", "real"), tmp=str(tmp_path), seq_policy="pack", global_batch_size=4, micro_batch_size=2
    )
    for name, src in result["sources"].items():
        for rec in src["records"]:
            assert rec["micro_batches"] == 2 and rec["samples"] == len(rec["keys"]) == 4, (name, rec["samples"])
            assert len(rec["visual_tokens_per_sample"]) == 4
    assert all(v == 0 for r in result["sources"]["imagefree"]["records"] for v in r["visual_tokens_per_sample"])
    assert all(r["images"] > 0 for r in result["sources"]["real"]["records"])


def test_sources_are_interleaved_in_rotating_rounds(order_runs):
    forward = order_runs[0]
    m = forward["measurement"]
    assert m["method"] == "interleaved" and m["rounds"] == 2 and m["steps_per_source"] == 6 and m["block"] == 3
    assert m["order_first_round"] == list(SOURCES)
    for name, src in forward["sources"].items():
        assert [r["round"] for r in src["records"]] == [0, 0, 0, 1, 1, 1]
        assert [r["step"] for r in src["records"]] == list(range(6))


def test_paired_sources_see_the_real_samples(order_runs):
    srcs = order_runs[0]["sources"]
    real = srcs["real"]["records"]
    for name in ("synthetic", "imagefree"):
        assert srcs[name]["paired"] and srcs[name]["pairing"]["paired_fraction"] == 1.0
        assert [r["keys"] for r in srcs[name]["records"]] == [r["keys"] for r in real]
    assert not srcs["bridge-noise"]["paired"] and srcs["bridge-noise"]["pairing"] is None
    for s, r in zip(srcs["synthetic"]["records"], real):  # twins: same images, grids and text tokens
        assert (s["images"], s["patches"], s["tokens_visual"], s["tokens_loss"]) == (
            r["images"],
            r["patches"],
            r["tokens_visual"],
            r["tokens_loss"],
        )
        assert abs(s["tokens_nonpad"] - r["tokens_nonpad"]) <= 2 * r["samples"]
    for f, r in zip(srcs["imagefree"]["records"], real):  # the same text, no image
        assert f["images"] == f["tokens_visual"] == 0 and f["tokens_loss"] == r["tokens_loss"]
        assert r["tokens_nonpad"] - f["tokens_nonpad"] == r["tokens_visual"] + 2 * r["images"]
    for src in srcs.values():
        assert src["census"]["mismatched_steps"] == 0


def test_report_names_definitions_and_method(order_runs, tmp_path):
    rep = build_report([order_runs[0]], threshold=0.10)
    assert rep["schema"] == "vlmdata.audit/2"
    assert set(rep["definitions"]["tokens"]) >= {"tokens_nonpad", "tokens_loss", "tokens_visual"}
    assert "paired" in rep["definitions"]["sources"]["synthetic"]
    paths = write_report(rep, str(tmp_path))
    md, page = open(paths["md"]).read(), open(paths["html"]).read()
    assert "## Definitions" in md and "## How it was measured" in md and "interleaved rounds" in md and "Method:" in md
    assert "6/6 steps same samples" in md and rep["verdict"]["line"] in md
    assert page.count("data:image/png;base64,") >= 2 and "overflow-x:auto" in page and "<script" not in page
    data = json.loads(open(paths["json"]).read())
    assert data["measurement"]["steps_per_source"] == 6


def test_seq_length_too_short_fails_before_training():
    with pytest.raises(Exception, match=r"samples in the first .* need more than `seq_length`=128 tokens"):
        run_audit(
            AuditConfig(sources=("imagefree", "real"), seq_length=128, min_steps=3, max_steps=3, block=3),
            clock=FakeClock(),
            workload=ShapeCostWorkload(FakeClock()),
        )


def test_cli_seq_length_error_names_the_flag(capsys):
    assert main(["audit", "--sources", "imagefree,real", "--seq-length", "128", "--steps", "3"]) == 2
    err = capsys.readouterr().err
    assert "--seq-length" in err and "seq_length" not in err.replace("--seq-length", "")


def _grad_sync_worker(rank, port, q):
    import torch.distributed as dist

    from vlmdata.audit.workload.distributed import DistInfo, GradAllReduce

    dist.init_process_group("gloo", rank=rank, world_size=2, init_method=f"tcp://127.0.0.1:{port}")
    torch.manual_seed(0)
    used, unused = torch.nn.Linear(3, 2), torch.nn.Linear(3, 2)  # "unused": a vision tower on a text batch
    model = torch.nn.ModuleList([used, unused])
    used(torch.full((1, 3), float(rank + 1))).sum().backward()
    GradAllReduce(model, DistInfo(rank, 2, rank, "cpu", "gloo"), bucket_bytes=16)()
    q.put((rank, used.weight.grad.tolist(), unused.weight.grad.tolist()))
    dist.destroy_process_group()


def test_grad_all_reduce_averages_over_two_gloo_ranks():
    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=_grad_sync_worker, args=(r, port, q)) for r in range(2)]
    for p in procs:
        p.start()
    got = sorted(q.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(60)
    # rank r's input is all (r+1): d(sum)/dW = r+1 in every entry; the mean over ranks is 1.5
    for _, used, unused in got:
        assert used == [[1.5] * 3] * 2 and unused == [[0.0] * 3] * 2


def _rank_records(vis, fwd):
    return [
        {
            "step": i,
            "step_ms": 100.0,
            "data_wait_ms": 1.0,
            "samples": 2,
            "images": 2,
            "patches": 4 * v,
            "tokens_total": 512,
            "tokens_nonpad": 400,
            "tokens_loss": 40,
            "tokens_visual": v,
            "tokens_padding": 112,
            "flops": 1e9,
            "lm_flops": 1,
            "vision_flops": 1,
            "times_ms": {"vision": f, "total": 90.0},
            "peak_mem_bytes": None,
            "visual_tokens_per_sample": [v // 2, v - v // 2],
        }
        for i, (v, f) in enumerate(zip(vis, fwd))
    ]


def test_merge_and_stragglers():
    r0 = _rank_records([100, 100, 100, 100], [10, 10, 10, 10])
    r1 = _rank_records([300, 100, 300, 300], [30, 10, 30, 30])
    merged = merge_ranks([r0, r1])
    assert merged[0]["samples"] == 4 and merged[0]["tokens_visual"] == 400 and merged[0]["step_ms"] == 100.0
    assert merged[0]["tokens_nonpad"] == 800 and merged[0]["tokens_loss"] == 80
    assert merged[0]["times_ms"]["vision"] == 20.0 and len(merged[0]["visual_tokens_per_sample"]) == 4
    st = stragglers([r0, r1])
    assert st["flagged"] == [1] and st["per_rank"][1]["straggler_step_fraction"] == 0.75
    assert st["estimated_stall_fraction"] == pytest.approx((10 + 0 + 10 + 10) / 400)
    assert stragglers([r0, _rank_records([105] * 4, [10] * 4)])["flagged"] == []


def test_cli_usage_errors(capsys):
    assert main(["audit", "--sources", "imagefree"]) == 2
    assert main(["audit", "--sources", "imagefree,real,nope", "--steps", "1"]) == 2
    assert main(["audit", "--real", "/nonexistent/shards", "--sources", "imagefree,real"]) == 2
    assert main(["audit", "--step", "no_such_module:fn", "--sources", "imagefree,real"]) == 2
    err = capsys.readouterr().err
    assert "unknown source 'nope'" in err and "/nonexistent/shards" in err and "--step" in err
    with pytest.raises(SystemExit) as e:
        main(["audit", "--threshold", "abc"])
    assert e.value.code == 2
    with pytest.raises(SystemExit) as e:
        main(["audit", "--help"])
    assert e.value.code == 0 and "MISLEADING" in capsys.readouterr().out


SMALL_ARGS = ["--loader-arg", "min_pixels=1024", "--loader-arg", "max_pixels=16384"]


USER_ARGS = ["audit", "--sources", "imagefree,bridge-noise,real", "--steps", "6", "--global-batch-size", "2"]
USER_ARGS += ["--seq-length", "512", *SMALL_ARGS]


def test_cli_user_step_exit_codes(tmp_path, capsys, monkeypatch):
    """The verdict -> exit code mapping and the report, on a fake clock (audit_clocked_step): the costs, not
    the machine's load, decide MISLEADING and OK."""
    clocked(monkeypatch)
    step = ["--step", "audit_clocked_step:by_visual_tokens", "-o", str(tmp_path)]
    assert main(USER_ARGS + step) == 3
    out = capsys.readouterr().out
    assert "MISLEADING (limit 1.10x): imagefree overstates real samples/s" in out
    rep = json.loads((tmp_path / "report.json").read_text())
    assert rep["verdict"]["status"] == "MISLEADING"
    assert rep["workload"] == {"kind": "user", "name": "audit_clocked_step:by_visual_tokens"}
    assert rep["sources"]["real"]["summary"]["rates"]["tflops"] > 0
    # the same cost for every batch, loading in worker processes: every source within 60% of real
    more = ["--step", "audit_clocked_step:constant", "--threshold", "60%", "--num-workers", "2", "--json"]
    assert main(USER_ARGS + more) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["verdict"]["status"] == "OK" and rep["sources"]["real"]["summary"]["rates"]["tflops"] is None
    assert "records" not in rep["sources"]["real"]


def test_cli_user_step_real_timing_smoke(tmp_path, capsys):
    """A real timed run (sleeping steps): only what cannot flip with the machine's load is asserted."""
    code = main(USER_ARGS + ["--step", "audit_sleepy_step:by_visual_tokens", "-o", str(tmp_path), "-q"])
    rep = json.loads((tmp_path / "report.json").read_text())
    assert code in (0, 3, 4) and code == exit_code(rep["verdict"])
    assert rep["workload"] == {"kind": "user", "name": "audit_sleepy_step:by_visual_tokens"}
    assert rep["sources"]["real"]["summary"]["steps"] == 6 and os.path.isfile(tmp_path / "report.md")
    assert rep["verdict"]["status"] in capsys.readouterr().out


def test_quiet_hides_the_table_not_the_verdict(capsys, monkeypatch):
    clocked(monkeypatch)
    args = ["audit", "--sources", "imagefree,real", "--steps", "6", "--seq-length", "512", *SMALL_ARGS]
    assert main(args + ["--step", "audit_clocked_step:by_visual_tokens", "-q"]) == 3
    out = capsys.readouterr().out
    assert out.startswith("MISLEADING") and "samples/s" in out and "step ms" not in out


def test_cpu_smoke_end_to_end(tmp_path, one_thread):
    """The reference model (tiny) and the real loader on the embedded sample data, a few steps."""
    code = main(
        [
            "audit",
            "--sources",
            "imagefree,synthetic,real",
            "--steps",
            "3",
            "--micro-batch-size",
            "1",
            *SMALL_ARGS,
            "-o",
            str(tmp_path),
            "-q",
        ]
    )
    rep = json.loads((tmp_path / "report.json").read_text())
    assert rep["verdict"]["status"] == "UNDECIDED"  # 3 steps: too few for an interval, never a zero-width one
    assert code == 4 and rep["verdict"]["gaps"]["imagefree"]["samples_per_s"]["few_steps"]
    real = rep["sources"]["real"]
    assert real["summary"]["steps"] == 3 and real["summary"]["shape"]["images_per_sample"] >= 1
    assert set(real["records"][0]["times_ms"]) == set(STAGES) | {"total"}
    assert real["loader"]["factory"].endswith("make_loader") and os.path.isfile(tmp_path / "report.html")
    assert os.path.isfile(tmp_path / "synthetic-twin" / "manifest.json")
    assert rep["sources"]["synthetic"]["pairing"]["paired_fraction"] == 1.0
    assert all(r["first_seen_shapes"] == 0 for s in rep["sources"].values() for r in s["records"])


@pytest.mark.timeout(600)
def test_two_ranks_under_torchrun(tmp_path):
    """The audit under torchrun (gloo, CPU): ranks agree on the window and the stop, rank 0 writes one report
    with per-rank figures, the exit code is the verdict's."""
    import subprocess
    import sys

    env = {
        **os.environ,
        "PYTHONPATH": os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "helpers")
        + os.pathsep
        + os.environ.get("PYTHONPATH", ""),
        "OMP_NUM_THREADS": "1",
    }
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node=2",
        os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "helpers", "audit_clocked_step.py"),
        # every rank on a fake clock (costs, not the machine's load, make the verdict); micro-batch 4: rank 0's 45 samples end an epoch inside its 12th step, rank 1's 44 after 11
        "audit",
        "--sources",
        "imagefree,synthetic,real",
        "--micro-batch-size",
        "4",
        "--global-batch-size",
        "8",  # one micro-batch per optimizer step and rank (DP 2)
        "--max-steps",
        "12",
        "--seq-length",
        "512",
        *SMALL_ARGS,
        "--step",
        "audit_clocked_step:by_visual_tokens",
        "-o",
        str(tmp_path),
        "-q",
    ]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=560)
    failed = [ln for ln in r.stderr.splitlines() if "[rank1]" in ln or "Error" in ln][:40]  # what the ranks said
    assert (tmp_path / "report.json").exists(), f"exit {r.returncode}: " + "\n".join(failed)
    rep = json.loads((tmp_path / "report.json").read_text())
    assert rep["world_size"] == 2 and rep["verdict"]["status"] == "MISLEADING", r.stderr[-2000:]
    n = rep["measurement"]["steps_per_source"]
    for src in rep["sources"].values():
        assert len(src["per_rank"]) == 2 and src["summary"]["steps"] == n == len(src["records"])
        # rank 0's epoch (45 samples, 4 a step) ends inside its 12th step, which the next epoch's first samples
        # complete (every step whole, issue 37): real's epoch is not a whole number of steps
        assert src["summary"]["steps"] == 12 and rep["measurement"]["real_epoch_steps"] is None
    assert set(rep["stragglers"]) == {"imagefree", "synthetic", "real"}
    chk = rep["straggler_check"]  # the straggler model against the measured slowest rank of each step
    assert set(chk) == {"imagefree", "synthetic", "real"} and all(c["steps"] == n for c in chk.values())
    # on the fake clock a step costs 3 ms + 0.2 ms per visual token, a linear cost the model fits exactly: it
    # predicts the measured slowest rank of every step, and real's uneven ranks (factor > 1) as measured
    assert all(c["error"] == pytest.approx(0.0, abs=1e-9) for c in chk.values()), chk
    assert all(c["factor_predicted"] == pytest.approx(c["factor_measured"], rel=1e-9) for c in chk.values()), chk
    assert chk["imagefree"]["factor_measured"] == pytest.approx(1.0) and chk["real"]["factor_measured"] > 1.05, chk


def test_report_html_structure(order_runs, tmp_path):
    """Every section has content, every stage its own colour, wide tables scroll instead of being cut."""
    import re

    from vlmdata.audit.report import STAGE_COLOURS

    assert len(set(STAGE_COLOURS.values())) == len(STAGE_COLOURS)  # data_wait and other no longer share one
    page = open(write_report(build_report([order_runs[0]], threshold=0.10), str(tmp_path))["html"]).read()
    sections = re.split(r"<h2>", page)[1:]
    assert len(sections) >= 8
    for sec in sections:
        title, _, body = sec.partition("</h2>")
        assert re.search(r"<(td|li|img|dd)\b", body), f"section {title!r} is empty"
    assert page.count("<div class='scroll'><table>") == page.count("<table>")
    assert "<b>Environment:</b> " in page and "<b>Method:</b> " in page


def _chromium():
    import shutil

    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


@pytest.mark.skipif(not _chromium(), reason="no headless Chromium on this machine")
def test_report_html_fits_1280_px_in_a_browser(order_runs, tmp_path):
    """Rendered by headless Chromium at 1280 px: the page does not scroll sideways and the plots load."""
    import re
    import subprocess

    page = open(write_report(build_report([order_runs[0]], threshold=0.10), str(tmp_path))["html"]).read()
    probe = (
        "<script>window.onload=function(){document.title='W'+document.documentElement.scrollWidth+' I'+"
        "Array.from(document.images).filter(function(i){return i.naturalWidth>0}).length;}</script>"
    )
    (tmp_path / "probe.html").write_text(page.replace("</body>", probe + "</body>"))
    out = subprocess.run(
        [
            _chromium(),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--window-size=1280,2000",
            "--virtual-time-budget=5000",
            "--dump-dom",
            f"file://{tmp_path / 'probe.html'}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    m = re.search(r"<title>W(\d+) I(\d+)</title>", out)
    assert m, out[:500]
    assert int(m.group(1)) <= 1280 and int(m.group(2)) == page.count("data:image/png;base64,")


def test_a_build_source_as_real_says_build_first(tmp_path, capsys):
    from PIL import Image

    Image.new("RGB", (64, 48), (200, 10, 10)).save(tmp_path / "cat.jpg")
    (tmp_path / "cat.txt").write_text("a cat")
    assert main(["audit", "--real", str(tmp_path), "--sources", "imagefree,real"]) == 2
    err = capsys.readouterr().err
    assert "it is an image folder, not vlmdata shards: run `vlmdata build" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("content", ["empty", "broken manifest"])
def test_an_empty_folder_or_a_broken_dataset_as_real_is_not_called_an_image_folder(tmp_path, capsys, content):
    if content == "broken manifest":
        (tmp_path / "manifest.json").write_text('{"bad":')
        (tmp_path / "shard-000000.tar").write_bytes(b"")
    assert main(["audit", "--real", str(tmp_path), "--sources", "imagefree,real"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: real dataset") and "image folder, not vlmdata shards" not in err, err
    assert ("not valid JSON" if content == "broken manifest" else "holds no .tar shards") in err, err


def test_image_device_options_reach_decoding_loaders_only():
    """--loader-arg image_device=... (and image_decoder) apply to the decoding loaders; the census
    (images="shapes") and the image-free view (images="drop") open without them instead of failing."""
    from vlmdata.audit.phases.runner import loader_options
    from vlmdata.audit.planning.plan import make_plan
    from vlmdata.audit.sources.registry import Input

    cfg = make_plan(AuditConfig(loader_options={"image_device": "cuda", "image_decoder": "pillow"}))
    real = Input("real", "shards", {}, False, "real")
    imagefree = Input("imagefree", "shards", {"images": "drop"}, True, "imagefree")
    o = loader_options(cfg, real, 1)
    assert (o.images, o.image_device, o.image_decoder) == ("decode", "cuda", "pillow")
    o = loader_options(cfg, real, 1, images="shapes")
    assert (o.images, o.image_device, o.image_decoder) == ("shapes", None, "nvjpeg")
    o = loader_options(cfg, imagefree, 1)
    assert (o.images, o.image_device) == ("drop", None)
    o = loader_options(cfg, imagefree, 1, images="shapes")
    assert (o.images, o.image_device) == ("drop", None)


def test_seq_length_too_short_counts_each_sample_once(tmp_path, llava_source):
    """The census covers more micro-batches than a 12-sample dataset has: a sample seen in two epochs is one
    sample too long, and the message names it (issue 20: "17 of 130 samples" for a 30-sample dataset)."""
    import re

    import vlmdata

    out = str(tmp_path / "ds")
    vlmdata.build(llava_source, out)
    with pytest.raises(Exception) as info:
        run_audit(
            AuditConfig(real=out, sources=("imagefree", "real"), seq_length=128, min_steps=3, max_steps=3, block=3),
            clock=FakeClock(),
            workload=ShapeCostWorkload(FakeClock()),
        )
    m = re.search(
        r"source real: (\d+) distinct samples in the first (\d+) micro-batches need more than", str(info.value)
    )
    assert m, str(info.value)
    distinct, micro = int(m.group(1)), int(m.group(2))
    assert micro * 2 > 12 and 1 <= distinct <= 12  # 12 good samples: never more than there are
    assert re.search(r"need more than `seq_length`=128 tokens: \S+ \(\d+\)", str(info.value))
