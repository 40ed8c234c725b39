"""The Energon index vlmdata writes from the shard layouts is byte-identical to `energon prepare`'s.

Every test builds shards, runs megatron-energon's own `energon prepare` (its CLI, one worker: with more,
Energon's own sqlite row order depends on scheduling) on a copy of the shards alone, and compares each
file Energon writes byte for byte; ``index.uuid`` is a random UUID in both (only its form is compared).
"""

import errno
import os
import shutil
import subprocess
import sys
import uuid

import pytest
from conftest import jpeg_bytes
from PIL import Image

from vlmdata.dataset.nvmeta_index import collapse, scan_layout
from vlmdata.dataset.schema import ImageInfo, Sample
from vlmdata.dataset.shards import write_shard
from vlmdata.ingest import BuildError, BuildOptions, build, write_dataset

ENERGON_FILES = (".nv-meta/index.sqlite", ".nv-meta/.info.json", ".nv-meta/split.yaml")


def energon_prepare(shards_dir, tmp_path):
    """Copy the shards (nothing else) and let Energon index the copy; returns the copy's path."""
    ref = tmp_path / "energon-ref"
    ref.mkdir()
    for name in sorted(os.listdir(shards_dir)):
        if name.endswith(".tar"):
            shutil.copyfile(os.path.join(shards_dir, name), ref / name)
    exe = os.path.join(os.path.dirname(sys.executable), "energon")
    r = subprocess.run(
        [
            exe,
            "prepare",
            str(ref),
            "--non-interactive",
            "--split-parts",
            "train:.*",
            "--split-parts",
            "val:.*",
            "--num-workers",
            "1",
            "--no-progress",
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    return ref


def assert_same_index(ours, ref):
    tars = sorted(n for n in os.listdir(ref) if n.endswith(".tar"))
    assert tars and tars == sorted(n for n in os.listdir(ours) if n.endswith(".tar"))
    for rel in [t + ".idx" for t in tars] + list(ENERGON_FILES):
        with open(os.path.join(ours, rel), "rb") as a, open(os.path.join(ref, rel), "rb") as b:
            assert a.read() == b.read(), f"{rel} differs from energon prepare's"
    written_by_energon = set(os.listdir(os.path.join(ref, ".nv-meta")))
    assert written_by_energon <= set(os.listdir(os.path.join(ours, ".nv-meta")))
    for d in (ours, ref):
        with open(os.path.join(d, ".nv-meta", "index.uuid")) as f:
            text = f.read()
        assert str(uuid.UUID(text)) == text


def test_build_index_equals_energon_prepare(llava_source, tmp_path):
    out = tmp_path / "out"
    build(str(llava_source), str(out), BuildOptions(max_count=3, workers=1))
    assert len([n for n in os.listdir(out) if n.endswith(".tar")]) >= 4
    assert_same_index(out, energon_prepare(out, tmp_path))


def test_index_batches_past_energon_batch_size(tmp_path):
    """More than INDEX_BATCH_SIZE (4096) rows in one shard: Energon's batch boundaries shape the sqlite file."""
    img = jpeg_bytes(Image.new("RGB", (8, 8), (200, 10, 10)))
    conv = [
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "what?"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "red"}]},
    ]

    def samples():
        for i in range(1700):
            k = 1 + (i % 7 == 0)
            c = [dict(conv[0], content=[{"type": "image"}] * k + conv[0]["content"][1:]), conv[1]]
            yield Sample(
                key=f"s{i:09d}",
                conversation=c,
                images=[img] * k,
                image_info=[ImageInfo(f"{j}.jpg", 8, 8, "JPEG", len(img)) for j in range(k)],
            )

    out = tmp_path / "out"
    write_dataset(str(out), samples(), kind="synth", options={}, source={}, max_count=1500)
    assert_same_index(out, energon_prepare(out, tmp_path))


def test_resumed_build_index_equals_energon_prepare(llava_source, tmp_path, monkeypatch):
    """Shards written before an interruption have no layout in memory: their headers are read instead."""
    import vlmdata.ingest.writer as b

    calls = []

    def failing(plan, *args, **kw):
        calls.append(plan.name)
        if len(calls) == 3:
            raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "out" / plan.name))
        return write_shard(plan, *args, **kw)

    out = tmp_path / "out"
    monkeypatch.setattr(b, "write_shard", failing)
    with pytest.raises(BuildError):
        build(str(llava_source), str(out), BuildOptions(max_count=2, workers=1))
    monkeypatch.setattr(b, "write_shard", write_shard)
    build(str(llava_source), str(out), BuildOptions(max_count=2, workers=1), resume=True)
    assert_same_index(out, energon_prepare(out, tmp_path))


def test_scanned_layout_equals_written_layout(llava_source, tmp_path):
    out = tmp_path / "out"
    import vlmdata.ingest.writer as b

    seen = {}
    real = b.write_shard

    def keep(plan, *args, **kw):
        rec = real(plan, *args, **kw)
        seen[rec.name] = rec.layout
        return rec

    b.write_shard = keep
    try:
        build(str(llava_source), str(out), BuildOptions(max_count=4, workers=1))
    finally:
        b.write_shard = real
    assert seen and all(scan_layout(str(out / n)) == layout for n, layout in seen.items())


@pytest.mark.parametrize(
    "names",
    [
        ["shard-000000.tar"],
        [f"shard-{i:06d}.tar" for i in range(12)],
        [f"v2-{i:06d}.tar" for i in range(3)],
        [f"a{i}.tar" for i in range(8, 13)],
        ["x-000001.tar", "x-000002.tar", "x-000004.tar", "y-000005.tar"],
        ["plain.tar", "plain2.tar", "p1q1.tar", "p1q2.tar", "p2q2.tar"],
    ],
)
def test_collapse_equals_energons(names):
    from megatron.energon.bracecollapse import collapse as energon_collapse

    assert collapse(names) == energon_collapse(names, keep_order=True)
