"""bench/compose_check.py: the whole model and its first-k-layer slice in one process, on the same batches, the
slice composed as an audit composes it. CPU, the small preset (4 decoder layers, 2 with DeepStack), one round:
what is checked is what ran and the arithmetic, never a speed."""

from __future__ import annotations

import json
import os
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "bench"))

import compose_check  # noqa: E402  # bench/ is not a package


def test_whole_and_slice_run_in_one_process_and_the_slice_is_composed(tmp_path, capsys):
    argv = ["--device", "cpu", "--preset", "small", "--slice-layers", "3", "--rounds", "2", "--data-steps", "1"]
    argv += ["--global-batch-size", "2", "--seq-length", "1024", "--out", str(tmp_path)]
    argv += ["--loader-options", json.dumps({"min_pixels": 32 * 32, "max_pixels": 128 * 128})]
    assert compose_check.main(argv) == 0
    out = json.loads((tmp_path / "compose_check.json").read_text())
    recs = out["records"]
    assert set(recs) == {"imagefree/whole", "imagefree/slice", "real/whole", "real/slice"}
    assert all(len(v) == 2 and [r["round"] for r in v] == [0, 1] for v in recs.values())
    for src in ("imagefree", "real"):
        for w in recs[f"{src}/whole"]:  # 4 layers, the first 2 with DeepStack: 2 plain layers ran
            assert w["plain_layers"]["layers"] == 2 and "composed_decoder" not in w
        for s in recs[f"{src}/slice"]:  # the first 3 layers: 1 plain layer ran; composed with 1 more
            assert s["plain_layers"]["layers"] == 1 and s["composed_decoder"] == "plain layers"
            p = s["plain_layers"]
            added = s["step_ms"] - s["measured_step_ms"]
            assert added == pytest.approx((4 - 3) * (p["forward_ms"] + p["backward_ms"]))
        assert out["sources"][src]["composed_decoder"] == ["plain layers"]
        # the same batches in both modes
        assert {r["samples"] for r in recs[f"{src}/whole"] + recs[f"{src}/slice"]} == {2}
    assert out["composition"]["layers_full"] == 4 and out["composition"]["layers_measured"] == 3
    r = out["ratios"]["imagefree/real"]
    assert r["whole"]["n"] == r["composed"]["n"] == 2 and isinstance(out["met"], bool)
    g = out["gc"]  # as the audit's rounds: no collection inside a timed step, one before and after every round
    assert g["mode"] == "manual" and g["in_timed_steps"]["n"] == 0 and g["between_steps"]["n"] == 3
    printed = capsys.readouterr().out
    assert "imagefree/real: whole" in printed and "goal (each source within 5%" in printed


def test_a_slice_must_be_shorter_than_the_model():
    with pytest.raises(SystemExit, match="--slice-layers must be in 1..3"):
        compose_check.main(["--device", "cpu", "--preset", "small", "--slice-layers", "4", "--rounds", "1"])
