"""The audit runner, report files, DDP wrapper, stragglers and CLI exit codes (CPU)."""

import json
import os
import socket

import pytest
import torch

from audit_fakes import fake_make_loader, make_batch
from vlmdata.audit import runner
from vlmdata.audit.distributed import merge_ranks, stragglers
from vlmdata.audit.report import build_report, write_report
from vlmdata.audit.runner import AuditConfig, run_audit
from vlmdata.audit.step import STAGES
from vlmdata.cli import main


@pytest.fixture
def fake_loader(monkeypatch):
    monkeypatch.setattr(runner, "default_loader_factory", lambda: fake_make_loader)


@pytest.fixture(scope="module")
def one_thread():
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


@pytest.fixture(scope="module")
def audit_result(one_thread):
    cfg = AuditConfig(sources=("imagefree", "bridge-noise", "real"), steps=3, warmup=1, seq_length=256)
    return run_audit(cfg, loader_factory=fake_make_loader)


def test_records(audit_result):
    assert set(audit_result["sources"]) == {"imagefree", "bridge-noise", "real"}
    for name, src in audit_result["sources"].items():
        recs = src["records"]
        assert len(recs) == 3 and [r["step"] for r in recs] == [0, 1, 2]
        for r in recs:
            assert r["step_ms"] >= r["data_wait_ms"] >= 0
            assert set(r["times_ms"]) == set(STAGES) | {"total"}
            assert r["step_ms"] + 1.0 >= r["data_wait_ms"] + r["times_ms"]["total"]
            assert r["samples"] == 2 and r["tokens_total"] == 512 and r["flops"] > 0
        assert src["loader"]["kwargs"]["seq_length"] == 256
    assert audit_result["sources"]["imagefree"]["records"][0]["images"] == 0
    assert audit_result["sources"]["bridge-noise"]["records"][0]["visual_tokens_per_sample"] == [16, 16]
    assert audit_result["workload"]["model"]["preset"] == "tiny" and audit_result["config"]["logits"] == "loss"


def test_report_files(audit_result, tmp_path):
    rep = build_report([audit_result], threshold=0.10)
    v = rep["verdict"]
    assert v["status"] in ("OK", "MISLEADING") and set(v["gaps"]) == {"imagefree", "bridge-noise"}
    paths = write_report(rep, str(tmp_path))
    data = json.loads(open(paths["json"]).read())
    real = data["sources"]["real"]["summary"]
    assert data["schema"] == "vlmdata.audit/1" and data["environment"]["torch"] == torch.__version__
    assert len(data["sources"]["real"]["records"]) == 3
    md, page = open(paths["md"]).read(), open(paths["html"]).read()
    sps = f"{real['rates']['samples_per_s']:.3g}"
    assert v["line"] in md and sps in md and sps in page
    assert page.count("data:image/png;base64,") == 3 and "<script" not in page


def _grad_sync_worker(rank, port, q):
    import torch.distributed as dist

    from vlmdata.audit.distributed import DistInfo, GradAllReduce

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
    return [{"step": i, "step_ms": 100.0, "data_wait_ms": 1.0, "samples": 2, "images": 2, "patches": 4 * v,
             "tokens_total": 512, "tokens_useful": 40, "tokens_visual": v, "tokens_padding": 0, "flops": 1e9,
             "lm_flops": 1, "vision_flops": 1, "times_ms": {"vision": f, "total": 90.0}, "peak_mem_bytes": None,
             "visual_tokens_per_sample": [v // 2, v - v // 2]} for i, (v, f) in enumerate(zip(vis, fwd))]


def test_merge_and_stragglers():
    r0 = _rank_records([100, 100, 100, 100], [10, 10, 10, 10])
    r1 = _rank_records([300, 100, 300, 300], [30, 10, 30, 30])
    merged = merge_ranks([r0, r1])
    assert merged[0]["samples"] == 4 and merged[0]["tokens_visual"] == 400 and merged[0]["step_ms"] == 100.0
    assert merged[0]["times_ms"]["vision"] == 20.0 and len(merged[0]["visual_tokens_per_sample"]) == 4
    st = stragglers([r0, r1])
    assert st["flagged"] == [1] and st["per_rank"][1]["straggler_step_fraction"] == 0.75
    assert st["estimated_stall_fraction"] == pytest.approx((10 + 0 + 10 + 10) / 400)
    assert stragglers([r0, _rank_records([105] * 4, [10] * 4)])["flagged"] == []


def test_cli_usage_errors(fake_loader, capsys):
    assert main(["audit", "--sources", "imagefree"]) == 2
    assert main(["audit", "--sources", "imagefree,real,nope", "--steps", "1"]) == 2
    assert main(["audit", "--real", "/nonexistent/shards", "--sources", "imagefree,real"]) == 2
    assert main(["audit", "--step", "no_such_module:fn", "--sources", "imagefree,real"]) == 2
    with pytest.raises(SystemExit) as e:
        main(["audit", "--threshold", "abc"])
    assert e.value.code == 2
    with pytest.raises(SystemExit) as e:
        main(["audit", "--help"])
    assert e.value.code == 0 and "MISLEADING" in capsys.readouterr().out


def test_cli_user_step_exit_codes(fake_loader, tmp_path, capsys):
    args = ["audit", "--sources", "imagefree,bridge-noise,real", "--steps", "4", "--warmup", "1",
            "--seq-length", "256"]
    assert main(args + ["--step", "audit_sleepy_step:by_visual_tokens", "-o", str(tmp_path)]) == 3
    out = capsys.readouterr().out
    assert "MISLEADING: imagefree overstates real samples/s" in out
    rep = json.loads((tmp_path / "report.json").read_text())
    assert rep["workload"] == {"kind": "user", "name": "audit_sleepy_step:by_visual_tokens"}
    assert rep["sources"]["real"]["summary"]["rates"]["tflops"] > 0
    assert main(args + ["--step", "audit_sleepy_step:constant", "--threshold", "60%", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["verdict"]["status"] == "OK" and rep["sources"]["real"]["summary"]["rates"]["tflops"] is None
    assert "records" not in rep["sources"]["real"]


def _real_loader_available():
    try:
        runner.default_loader_factory()
        return True
    except runner.AuditError:
        return False


@pytest.mark.skipif(not _real_loader_available(), reason="vlmdata.loaders.make_loader not available")
def test_cpu_smoke_end_to_end(tmp_path, one_thread):
    """The real loader on the embedded sample_shards, tiny preset, a few steps."""
    code = main(["audit", "--sources", "imagefree,real", "--steps", "2", "--warmup", "1", "--micro-batch-size", "1",
                 "-o", str(tmp_path), "-q"])
    rep = json.loads((tmp_path / "report.json").read_text())
    assert code == (3 if rep["verdict"]["status"] == "MISLEADING" else 0)
    real = rep["sources"]["real"]
    assert real["summary"]["steps"] == 2 and real["summary"]["shape"]["images_per_sample"] >= 1
    assert real["loader"]["factory"].endswith("make_loader") and os.path.isfile(tmp_path / "report.html")
