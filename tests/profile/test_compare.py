"""vlmdata compare: KS distance, PASS/FAIL, exit codes."""

import json

import numpy as np
import pytest

from vlmdata.cli.main import main as cli
from vlmdata.profile.compare import Thresholds, compare, ks_distance
from vlmdata.profile.measure import load_profile


def test_ks_distance_exact_values():
    assert ks_distance([1, 2, 3], [1, 2, 3]) == 0.0
    assert ks_distance([1, 2, 3], [4, 5]) == 1.0
    assert ks_distance([1, 2, 3], [1, 2, 4]) == pytest.approx(1 / 3)
    assert ks_distance([1, 1, 2, 2], [1, 2]) == 0.0
    rng = np.random.default_rng(0)
    a = rng.normal(size=2000)
    assert ks_distance(a, a[::-1].copy()) == 0.0
    assert ks_distance(a, a + 10) == 1.0


def test_profile_against_itself(small_profile, capsys):
    p = load_profile(small_profile)
    res = compare(p, p)
    assert res["passed"] and all(m["ks"] == 0.0 for m in res["metrics"])
    assert {m["metric"]: m["status"] for m in res["metrics"]}["decode_ms_per_image"] == "PASS"
    assert cli(["compare", small_profile, small_profile, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["passed"] and [m["ks"] for m in out["metrics"]] == [0.0] * 7


def test_dataset_against_its_profile(tmp_path, capsys):
    prof = str(tmp_path / "p.json")
    assert cli(["profile", "sample_shards", "-o", prof, "--decode-images", "0", "-q"]) == 0
    capsys.readouterr()  # -q hides progress only: profile's summary is printed
    rc = cli(["compare", "sample_shards", prof, "--json"])
    out = json.loads(capsys.readouterr().out)
    by = {m["metric"]: m for m in out["metrics"]}
    assert all(by[k]["ks"] == 0.0 for k in by if k != "decode_ms_per_image")
    assert by["decode_ms_per_image"]["status"] == "SKIP" and rc == 0  # B has no decode timing


def test_fail_exits_1(small_profile, tmp_path, capsys):
    out = str(tmp_path / "bn")
    assert cli(["synth", "--mock", "bridge-noise", "-n", "4", "-o", out, "-q"]) == 0
    capsys.readouterr()
    assert cli(["compare", small_profile, out, "--json"]) == 1
    res = json.loads(capsys.readouterr().out)
    by = {m["metric"]: m for m in res["metrics"]}
    assert not res["passed"] and by["pixels_per_image"]["status"] == "FAIL"
    assert by["pixels_per_image"]["median_b"] == 256 * 256
    # loosening every threshold turns it into a PASS
    loose = [
        x
        for k in (
            "pixels_per_image",
            "aspect_ratio",
            "bytes_per_image",
            "visual_tokens_per_sample",
            "text_tokens_per_sample",
            "images_per_sample",
        )
        for x in ("-t", f"{k}=1")
    ]
    assert cli(["compare", small_profile, out, "-q", *loose, "-t", "decode_ms_per_image=0.001,1000"]) == 0


def test_threshold_errors(small_profile, capsys):
    th = Thresholds()
    th.set("bytes_per_image=0.2")
    th.set("decode_ms_per_image=0.8,1.25")
    assert th.ks["bytes_per_image"] == 0.2 and th.decode_ratio == (0.8, 1.25)
    for bad in ("nope=0.1", "bytes_per_image=x", "bytes_per_image", "pixels_per_image=2", "decode_ms_per_image=1"):
        assert cli(["compare", small_profile, small_profile, "-t", bad]) == 2
        assert "Traceback" not in capsys.readouterr().err
