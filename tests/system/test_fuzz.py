"""The fast part of the fuzz corpus (bench/fuzz.py --quick) in the normal suite: every case a clear error or a
correct run; 0 tracebacks, hangs, silent corruption/data loss, leaks and mismatches. The whole corpus
(>= 300 cases) runs on demand: ``python bench/fuzz.py`` (or ``VLMDATA_FUZZ_FULL=1 pytest tests/system/test_fuzz.py``)."""

import json
import os
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "bench"))
import fuzz  # noqa: E402

# The endless loader (num_epochs=None) over a dataset where every sample is skipped is stopped by
# vlmdata.loaders.pipeline.check_epoch, which the loader calls at the end of each epoch (docs/RELIABILITY.md).
ENDLESS = "loader/endless_epochs_all_skipped"


def test_corpus_is_large_and_covers_every_class():
    cases = fuzz.corpus()
    assert len(cases) >= 500 and len({c.name for c in cases}) == len(cases)
    classes = {c.cls for c in cases}
    assert classes == {
        "images",
        "sidecars",
        "records",
        "paths",
        "output",
        "shards",
        "manifests",
        "urls",
        "options",
        "loader",
        "audit",
        "leaks",
        "outputs",
        "data",
        "console",
        "api",
        "configs",  # round 4 (bench/fuzz_round4.py): config.json and Bridge YAML, run sizes
        "splits",
        "special",
        "reports",
    }
    assert all(any(c.quick for c in cases if c.cls == cls) for cls in classes)


def test_quick_corpus_is_clean(tmp_path):
    out = tmp_path / "fuzz.json"
    code = fuzz.main(["--quick", "--json", str(out), "--skip", ENDLESS])
    rep = json.loads(out.read_text())
    bad = [c for c in rep["cases"] if c["outcome"] not in ("clear error", "correct run")]
    assert bad == [] and code == 0
    assert rep["totals"]["cases"] >= 20 and rep["totals"]["clear error"] and rep["totals"]["correct run"]


def test_endless_loader_over_an_all_bad_dataset_stops(tmp_path):
    out = tmp_path / "fuzz.json"
    fuzz.main(["--match", ENDLESS, "--json", str(out)])
    assert [c["outcome"] for c in json.loads(out.read_text())["cases"]] == ["clear error"]


@pytest.mark.skipif(
    not os.environ.get("VLMDATA_FUZZ_FULL"), reason="slow: set VLMDATA_FUZZ_FULL=1 (or run bench/fuzz.py)"
)
def test_full_corpus_is_clean(tmp_path):
    out = tmp_path / "fuzz.json"
    fuzz.main(["--json", str(out)])
    rep = json.loads(out.read_text())
    assert [c for c in rep["cases"] if c["outcome"] not in ("clear error", "correct run")] == []
