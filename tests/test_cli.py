import json
import os
import shutil
import subprocess
import sys

from conftest import SAMPLE_SHARDS
from vlmdata.cli import main
from vlmdata.tario import BLOCK


def run_cli(*args):
    r = subprocess.run([sys.executable, "-m", "vlmdata", *args], capture_output=True, text=True)
    return r.returncode, r.stdout, r.stderr


def test_bad_source_is_one_line_exit_2(tmp_path):
    code, out, err = run_cli("build", str(tmp_path / "missing"), "-o", str(tmp_path / "o"), "-q")
    assert code == 2 and "Traceback" not in err and "no such file" in err
    code, _, err = run_cli("build", str(tmp_path), "-o", str(tmp_path / "o"), "--format", "nope")
    assert code == 2 and "Traceback" not in err


def test_existing_output_refused(llava_source, tmp_path):
    out = tmp_path / "o"
    out.mkdir()
    (out / "f").write_text("x")
    code, _, err = run_cli("build", llava_source, "-o", str(out), "-q")
    assert code == 2 and "not empty" in err and "--overwrite" in err


def test_build_json_and_stderr_reasons(llava_source, tmp_path, capsys):
    code = main(["build", llava_source, "-o", str(tmp_path / "o"), "--json", "-q", "--workers", "1"])
    cap = capsys.readouterr()
    assert code == 0
    summary = json.loads(cap.out)
    assert summary["accounting"]["seen"] == 17 and summary["accounting"]["skipped"] == 5
    assert "data.jsonl:7: missing_file" in cap.err


def test_validate_clean_and_corrupt(tmp_path, capsys):
    ds = tmp_path / "ds"
    shutil.copytree(SAMPLE_SHARDS, ds)
    assert main(["validate", str(ds), "-q"]) == 0
    capsys.readouterr()
    # flip one byte inside the first image of the first shard: sha mismatch and a bad image
    shard = ds / "shard-000000.tar"
    data = bytearray(shard.read_bytes())
    json_size = int(data[124:135].decode().strip("\0 "), 8)
    first_image_data = BLOCK + -(-json_size // BLOCK) * BLOCK + BLOCK
    for off in range(first_image_data + 2, first_image_data + 600):
        data[off] ^= 0xFF
    shard.write_bytes(bytes(data))
    code = main(["validate", str(ds), "--json"])
    rep = json.loads(capsys.readouterr().out)
    assert code == 1 and not rep["ok"]
    problems = [(p["shard"], p["problem"]) for p in rep["problems"]]
    assert ("shard-000000.tar", "sha256 differs from the manifest") in problems
    assert any(s == "shard-000000.tar" and "image 0." in p for s, p in problems)
    # a truncated shard is reported with the shard name, not a traceback
    shard.write_bytes(bytes(data[: len(data) // 2 + 100]))
    code = main(["validate", str(ds), "--json"])
    rep = json.loads(capsys.readouterr().out)
    assert code == 1 and any("unreadable tar" in p["problem"] or "samples, manifest" in p["problem"] for p in rep["problems"])


def test_validate_not_a_dataset(tmp_path):
    code, _, err = run_cli("validate", str(tmp_path))
    assert code == 2 and "manifest.json" in err and "Traceback" not in err


def test_inspect_json_on_sample_data(capsys):
    assert main(["inspect", SAMPLE_SHARDS, "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    m = json.load(open(os.path.join(SAMPLE_SHARDS, "manifest.json")))
    assert s["samples"] == m["totals"]["samples"] and s["images"] == m["totals"]["images"]
    assert s["accounting"]["seen"] == s["accounting"]["written"] + s["accounting"]["skipped"]
    assert set(s["images_per_sample"]) == {"1", "2", "3"} or set(s["images_per_sample"]) == {1, 2, 3}
    assert s["accounting"]["skipped_by_reason"] == {"missing_file": 1, "undecodable_image": 1}
