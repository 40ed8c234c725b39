"""Issue 20, one test per class: leaks in wrapper messages, writes over an input, hangs (logs, /proc, a --step
that never returns), silent losses and wrong verdicts, CLI tracebacks, what a new user sees (tables, broken
JSON, the default seq_length). docs/RELIABILITY.md names the rule and the module behind each."""

import io
import json
import logging
import os
import shutil
import sqlite3
import struct

import pytest
from PIL import Image

import vlmdata
from vlmdata.cli.console import WholeConsole, table
from vlmdata.cli.main import main

SECRET = "FUZZs3cr3tVALUE9f8e7d6c"
URL = f"s3://AKIAFUZZKEYID0000042:{SECRET}@bucket/x"
FIXTURES = os.path.join(os.path.dirname(os.path.dirname(__file__)), "audit", "fixtures")
FAST = ["--sources", "imagefree,real", "--steps", "6", "--seq-length", "2048", "-q"]


@pytest.fixture
def ds(tmp_path):
    d = tmp_path / "ds"
    shutil.copytree(vlmdata.sample_data_path(), d)
    return d


def jpeg(path, w=64, h=48):
    Image.new("RGB", (w, h), (30, 60, 90)).save(path, "JPEG")


# ----------------------------------------------------------------------------- leaks


@pytest.mark.parametrize(
    "argv",
    [
        ["audit", "--real", URL, *FAST],
        ["audit", "--profile", URL, *FAST],
        ["audit", "--profile", URL, "--sources", "imagefree,synthetic,real", "--steps", "6"],
        ["audit", "compare", "--mock", URL, "--real", URL],
        ["synth", "--profile", URL, "-n", "2", "-o", "OUT"],
        ["audit", "--steps", URL],
        ["profile", URL, "-o", "OUT/p.json"],
    ],
)
def test_no_secret_in_any_message(argv, tmp_path, capsys):
    argv = [a.replace("OUT", str(tmp_path / "o")) for a in argv]
    try:
        code = main(argv)
    except SystemExit as e:  # argparse
        code = e.code
    cap = capsys.readouterr()
    assert code == 2 and SECRET not in cap.out + cap.err and "AKIAFUZZ" not in cap.out + cap.err
    assert "Traceback" not in cap.err


# ----------------------------------------------------------------------------- destructive


@pytest.mark.parametrize("rel", ["manifest.json", "shard-000000.tar", "shard-000000.tar.idx", ".nv-meta/split.yaml"])
def test_profile_never_writes_over_a_dataset_file(ds, rel, capsys):
    before = (ds / rel).read_bytes()
    assert main(["profile", str(ds), "-o", str(ds / rel), "-q"]) == 2
    assert (ds / rel).read_bytes() == before and "refusing" in capsys.readouterr().err


def test_profile_never_writes_into_its_source_or_over_a_foreign_file(tmp_path, capsys):
    src = tmp_path / "src"
    src.mkdir()
    jpeg(src / "img0.jpg")
    (src / "img0.txt").write_text("a caption")
    assert main(["profile", str(src), "-o", str(src / "img0.txt"), "-q"]) == 2
    assert main(["profile", str(src), "-o", str(src / "new.json"), "-q"]) == 2
    assert (src / "img0.txt").read_text() == "a caption" and not (src / "new.json").exists()
    notes = tmp_path / "notes.json"
    notes.write_text('{"mine": 1}')
    assert main(["profile", str(src), "-o", str(notes), "-q"]) == 2 and notes.read_text() == '{"mine": 1}'
    p = tmp_path / "p.json"
    assert main(["profile", str(src), "-o", str(p), "-q", "--decode-images", "0"]) == 0
    assert main(["profile", str(src), "-o", str(p), "-q", "--decode-images", "0"]) == 0  # a profile over a profile


def test_audit_out_checked_before_measuring(ds, tmp_path, capsys):
    f = tmp_path / "afile"
    f.write_text("x")
    assert main(["audit", "-o", str(f), *FAST]) == 2 and "not a folder" in capsys.readouterr().err
    assert main(["audit", "-o", "/proc/vlmdata-x", *FAST]) == 2
    assert main(["audit", "--real", str(ds), "-o", str(ds), *FAST]) == 2
    twin = tmp_path / "synthetic-twin"  # -o PARENT would write the twin over the real dataset
    shutil.copytree(ds, twin)
    before = (twin / "manifest.json").read_bytes()
    assert main(["audit", "--real", str(twin), "-o", str(tmp_path), *FAST]) == 2
    assert (twin / "manifest.json").read_bytes() == before


# ----------------------------------------------------------------------------- hangs


@pytest.mark.timeout(60)
def test_audit_compare_refuses_fifo_and_devices(tmp_path, capsys):
    fifo = tmp_path / "log.fifo"
    os.mkfifo(fifo)
    real = os.path.join(FIXTURES, "bridge_real.log")
    for bad in (str(fifo), "/dev/zero", str(tmp_path)):
        assert main(["audit", "compare", "--mock", bad, "--real", real]) == 2
    err = capsys.readouterr().err
    assert "a FIFO, not a regular file" in err and "a device, not a regular file" in err


@pytest.mark.timeout(120)
def test_build_never_walks_out_of_its_source(tmp_path, capsys):
    assert main(["build", "/proc/self/", "-o", str(tmp_path / "o"), "-q"]) == 2
    assert "pseudo-filesystem" in capsys.readouterr().err
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    jpeg(src / "a.jpg")
    (src / "a.txt").write_text("a caption")
    os.symlink("/", src / "sub" / "root")
    os.symlink("..", src / "sub" / "up")
    assert main(["build", str(src), "-o", str(tmp_path / "out"), "-q"]) == 0
    m = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert m["accounting"]["seen"] == 1


# ----------------------------------------------------------------------------- silent loss / wrong verdict


def test_validate_fails_a_flipped_idx_byte_a_changed_sqlite_row_and_a_stray_shard(ds, capsys):
    def said():
        cap = capsys.readouterr()
        return cap.out + cap.err

    idx = ds / "shard-000001.tar.idx"
    good = idx.read_bytes()
    bad = bytearray(good)
    bad[9] ^= 0x10
    idx.write_bytes(bytes(bad))
    assert main(["validate", str(ds), "-q"]) == 1 and "shard-000001.tar.idx does not match" in said()
    idx.write_bytes(good)
    db = sqlite3.connect(str(ds / ".nv-meta" / "index.sqlite"))
    db.execute("UPDATE sample_parts SET content_byte_size = content_byte_size + 1 WHERE sample_index = 2")
    db.commit()
    db.close()
    assert main(["validate", str(ds), "-q"]) == 1 and "index.sqlite rows differ" in said()
    shutil.copy(vlmdata.sample_data_path() + "/.nv-meta/index.sqlite", ds / ".nv-meta" / "index.sqlite")
    shutil.copy(ds / "shard-000000.tar", ds / "shard-000000 (1).tar")
    assert main(["validate", str(ds), "-q"]) == 1 and "the manifest does not list" in said()
    os.remove(ds / "shard-000000 (1).tar")
    assert main(["validate", str(ds), "-q"]) == 0
    assert struct.unpack("<Q", good[:8])[0] == 0  # the first sample starts the shard


def test_an_image_cut_by_seq_length_is_skipped_and_named_text_truncation_counted():
    from vlmdata.audit.workload.model import IMAGE_TOKEN_ID

    logging.disable(logging.WARNING)
    try:
        ld = vlmdata.make_loader(vlmdata.sample_data_path(), seq_length=600, micro_batch_size=2)
        for b in ld:
            pads = int((b["input_ids"] == IMAGE_TOKEN_ID).sum())
            assert pads == int(b["visual_inputs"].image_grid_thw.prod(-1).sum()) // 4  # never 277 pads for 416
    finally:
        logging.disable(logging.NOTSET)
    st = ld.stats.to_json()
    assert st["samples"] + st["skipped"] == 89 and st["skipped_by_reason"]["image_truncated"] > 0
    ex = next(s for s in st["skipped_samples"] if s["reason"] == "image_truncated")
    assert ex["key"] and "visual tokens of image" in ex["detail"]
    assert st["truncated"] == len(st["truncated_samples"]) and all(t["cut"] > 0 for t in st["truncated_samples"])


@pytest.mark.parametrize("ext", [".jfif", ".jpe", ".pjpeg", ".JFIF"])
def test_jpeg_aliases_are_read(tmp_path, ext):
    src = tmp_path / "src"
    src.mkdir()
    jpeg(src / f"a{ext}")
    (src / "a.txt").write_text("a caption")
    assert main(["build", str(src), "-o", str(tmp_path / "o"), "-q"]) == 0
    assert json.loads((tmp_path / "o" / "manifest.json").read_text())["accounting"]["written"] == 1


def test_parquet_null_image_is_a_counted_skip(tmp_path):
    pa, pq = pytest.importorskip("pyarrow"), pytest.importorskip("pyarrow.parquet")
    buf = io.BytesIO()
    Image.new("RGB", (64, 48)).save(buf, "JPEG")
    img = {"bytes": buf.getvalue(), "path": None}
    pq.write_table(
        pa.table({"image": [img, None, {"bytes": None, "path": None}], "text": ["a", "b", "c"]}), tmp_path / "d.parquet"
    )
    assert (
        main(["build", str(tmp_path / "d.parquet"), "-o", str(tmp_path / "o"), "-q", "--min-written-fraction", "0"])
        == 0
    )
    acc = json.loads((tmp_path / "o" / "manifest.json").read_text())["accounting"]
    assert acc["written"] == 1 and acc["skipped_by_reason"] == {"missing_image": 2}


def test_the_real_source_must_be_real(tmp_path, capsys):
    out = tmp_path / "mock"
    assert main(["synth", "--mock", "imagefree", "-n", "6", "-o", str(out), "-q"]) == 0
    capsys.readouterr()
    assert main(["audit", "--real", str(out), *FAST]) == 2 and "is not real data" in capsys.readouterr().err
    assert main(["audit", "--loader-arg", "images=drop", *FAST]) == 2 and "images" in capsys.readouterr().err


@pytest.mark.parametrize("edit", ["nan", "-2000.0", "0.0", "inf"])
def test_audit_compare_refuses_times_that_are_not_measurements(tmp_path, edit, capsys):
    import re

    text = open(os.path.join(FIXTURES, "bridge_mock.log")).read()
    bad = tmp_path / "mock.log"
    bad.write_text(
        re.sub(r"elapsed time per iteration \(ms\): [0-9.]+", f"elapsed time per iteration (ms): {edit}", text)
    )
    assert main(["audit", "compare", "--mock", str(bad), "--real", os.path.join(FIXTURES, "bridge_real.log")]) == 2
    assert "not a measurement" in capsys.readouterr().err


# ----------------------------------------------------------------------------- --step


STEPS = """
import sys, time
def raises(batch):
    return {}["missing"]
def two(a, b):
    return None
def exits(batch):
    sys.exit(0)
def hangs(batch):
    while True:
        time.sleep(0.05)
"""


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "fn, words",
    [
        ("raises", ("raised KeyError: 'missing'", "steps_mod.py:4 in raises")),
        ("two", ("signature", "missing a required argument")),
        ("exits", ("sys.exit(0)", "without a verdict")),
        ("hangs", ("did not return within", "--budget-s")),
    ],
)
def test_user_step_failures_are_one_line_about_their_code(tmp_path, monkeypatch, capsys, fn, words):
    (tmp_path / "steps_mod.py").write_text(STEPS)
    monkeypatch.syspath_prepend(str(tmp_path))
    code = main(["audit", "--step", f"steps_mod:{fn}", "--budget-s", "0.3", *FAST])
    err = capsys.readouterr().err
    assert code == 2 and all(w in err for w in words), err
    assert "Traceback" not in err and "vlmdata/audit" not in err


def test_user_workload_watchdog_and_checked_return(tmp_path, monkeypatch):
    from vlmdata.audit.sources.registry import AuditError
    from vlmdata.audit.workload.user_step import UserWorkload, time_limit

    (tmp_path / "wd_mod.py").write_text(STEPS + "def bad(batch):\n    return {'times_ms': {'total': 'x'}}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    w = UserWorkload("wd_mod:hangs", "cpu")
    with time_limit(0.05), pytest.raises(AuditError, match="did not return within 0.5 s"):  # first call: 10x
        w.warm({})
    with pytest.raises(AuditError, match="times_ms"):
        UserWorkload("wd_mod:bad", "cpu")({})


# ----------------------------------------------------------------------------- CLI tracebacks


def test_bad_device_and_env_and_full_stdout(monkeypatch, capsys):
    for dev in ("tpu", "cuda:x", "cpu:3"):
        assert main(["audit", "--device", dev, *FAST]) == 2
    assert "not a device the audit runs on" in capsys.readouterr().err
    monkeypatch.setenv("VLMDATA_PROGRESS_INTERVAL", "1e309")
    assert main(["validate", vlmdata.sample_data_path()]) == 0
    monkeypatch.setattr("sys.stdout", open("/dev/full", "w"))
    assert main(["inspect", vlmdata.sample_data_path()]) == 2
    assert "cannot write to stdout: No space left on device" in capsys.readouterr().err


@pytest.mark.parametrize(
    "data, words",
    [
        (b'[{"image": "a.jpg", "conversations": []},', "not valid JSON"),
        ('[{"image": "a.jpg"}]'.encode("utf-16"), "UTF-16"),
        (b'[{"image": "a.jpg", "conv\xffersations": []}]', "not UTF-8"),
    ],
)
def test_broken_json_is_diagnosed_by_its_cause(tmp_path, capsys, data, words):
    p = tmp_path / "data.json"
    p.write_bytes(data)
    assert main(["build", str(p), "-o", str(tmp_path / "o"), "-q"]) == 2
    err = capsys.readouterr().err
    assert words in err and "neither 'conversations'" not in err


# ----------------------------------------------------------------------------- tables


def _rows():
    head = ["source", "steps", "micro_batch_size=8 freeze_vision=1", "non-pad tokens/s", "TFLOP/s", "vs real"]
    return head, [["bridge-noise", "45", "160.25 [150.1, 170.3]", "2.99e+03", "0.0312", "2.82x"]]


def test_tables_keep_every_header_and_value_piped_and_at_80_columns(monkeypatch):
    head, rows = _rows()
    for cols in (None, "80", "40"):
        if cols is None:
            monkeypatch.delenv("COLUMNS", raising=False)
        else:
            monkeypatch.setenv("COLUMNS", cols)
        buf = io.StringIO()
        WholeConsole(file=buf, highlight=False).print(table("title", head, rows))
        text = buf.getvalue()
        assert "…" not in text and all(h in text for h in head) and all(c in text for c in rows[0]), text
        if cols is not None:
            assert max(len(line) for line in text.splitlines()) <= int(cols) or cols == "40"


def test_audit_compare_table_piped_is_whole(capsys):
    args = ["audit", "compare", "--mock", os.path.join(FIXTURES, "bridge_mock.log"), "--real"]
    assert main([*args, os.path.join(FIXTURES, "bridge_real.log")]) in (0, 3, 4)
    out = capsys.readouterr().out
    assert "…" not in out and "TFLOP/s/GPU" in out and "ms/iteration" in out


# ----------------------------------------------------------------------------- the default seq_length


def test_default_seq_length_fits_the_real_data():
    from vlmdata.audit.sources.registry import fit_seq_length

    logging.disable(logging.WARNING)
    try:
        assert fit_seq_length(vlmdata.sample_data_path(), 8192) == 8192  # long enough: unchanged
        seq = fit_seq_length(vlmdata.sample_data_path(), 256, micro_batch_size=2)
    finally:
        logging.disable(logging.NOTSET)
    assert seq > 256 and seq % 128 == 0
