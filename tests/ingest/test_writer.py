"""``DatasetWriter``: the one write path. build, write_dataset and the synthetic twin write through it, so
all three get the same folder rules, lock and write order (an earlier dataset replaced only with overwrite,
a folder of other files never; the lock file gone afterwards)."""

import glob
import json
import os

import pytest
from conftest import SAMPLE_SHARDS

from vlmdata.dataset.shards import ShardPlan
from vlmdata.dataset.tar import END_BYTES
from vlmdata.ingest import BuildError, DatasetWriter
from vlmdata.ingest.output import LOCK_NAME
from vlmdata.synthetic.twin import write_twin


def _manifest(out):
    return json.loads((out / "manifest.json").read_text())


@pytest.mark.parametrize("energon, key", [(None, False), (False, True)])
def test_empty_plan_and_energon_entry(tmp_path, energon, key):
    out = tmp_path / "out"
    with DatasetWriter(str(out), energon=energon) as w:
        w.start()
        rec = w.write(ShardPlan(0, "x-000000.tar", [], 0, 0, []))
        m = w.finish([rec], seen=0, tail=[], workers=1, kind="synth", prefix="x", options={}, source={})
    assert (out / "x-000000.tar").read_bytes() == b"\0" * END_BYTES and rec.bytes == END_BYTES
    assert ("energon" in m) == key and ("energon" in _manifest(out)) == key
    assert not (out / ".nv-meta").exists() and not (out / LOCK_NAME).exists()


def test_twin_goes_through_the_write_path(tmp_path, tok):
    shards = sorted(glob.glob(os.path.join(SAMPLE_SHARDS, "*.tar")))
    out = tmp_path / "twin"
    keys = {"s000000003"}
    first = write_twin(shards, str(out), tokenizer=tok, only_keys=keys)
    (out / "twin-000099.tar").write_bytes(b"a stale shard of an earlier twin")
    again = write_twin(shards, str(out), tokenizer=tok, only_keys=keys)  # an earlier twin is replaced
    assert first == again and not (out / "twin-000099.tar").exists() and not (out / LOCK_NAME).exists()
    assert first["kind"] == "twin" and "energon" not in first and not (out / ".nv-meta").exists()
    other = tmp_path / "notes"
    other.mkdir()
    (other / "mine.txt").write_text("mine")
    with pytest.raises(BuildError, match="not a vlmdata dataset"):
        write_twin(shards, str(other), tokenizer=tok, only_keys=keys)
    assert os.listdir(other) == ["mine.txt"]
