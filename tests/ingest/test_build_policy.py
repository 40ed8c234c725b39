"""vlmdata.ingest.policy: inline unless worker processes pay (heavy per-input work, a free core, not small)."""

import json

import vlmdata.ingest.policy as bp
from vlmdata.ingest import BuildOptions, build


def test_light_or_small_or_busy_is_inline(monkeypatch):
    monkeypatch.setattr(bp, "usable_cores", lambda: 8)
    monkeypatch.setattr(bp.os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    assert bp.auto_workers(heavy=False, small=False) == 1
    assert bp.auto_workers(heavy=True, small=True) == 1
    assert bp.auto_workers(heavy=True, small=False) == 8
    monkeypatch.setattr(bp.os, "getloadavg", lambda: (7.5, 0.0, 0.0))
    assert bp.auto_workers(heavy=True, small=False) == 1
    monkeypatch.setattr(bp.os, "getloadavg", lambda: (5.2, 0.0, 0.0))
    assert bp.auto_workers(heavy=True, small=False) == 3
    assert bp.auto_workers(heavy=False, small=True, engine="ray") == 8


def test_build_records_the_chosen_number(llava_source, tmp_path):
    m = build(str(llava_source), str(tmp_path / "o"), BuildOptions(max_count=4))
    assert m["options"]["workers"] == 1  # a 17-input source is small: inline
    with open(tmp_path / "o" / "manifest.json") as f:
        assert json.load(f)["options"]["workers"] == 1
