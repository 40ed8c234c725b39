import filecmp
import io
import json
import os
import subprocess
import sys
import tarfile

import pytest
from conftest import jpeg_bytes, png_bytes
from PIL import Image

from vlmdata.dataset.manifest import load_manifest
from vlmdata.dataset.tar import END_BYTES, iter_shard, member_size
from vlmdata.ingest import BuildError, BuildOptions, build
from vlmdata.sources import SourceError


def shard_files(out):
    return sorted(f for f in os.listdir(out) if f.endswith(".tar"))


def all_samples(out):
    m = load_manifest(out)
    return [s for e in m["shards"] for s in iter_shard(os.path.join(out, e["name"]))]


def test_llava_accounting_is_exact(llava_source, tmp_path):
    out = str(tmp_path / "out")
    m = build(llava_source, out, BuildOptions(max_count=5, workers=1))
    acc = m["accounting"]
    assert (acc["seen"], acc["written"], acc["skipped"]) == (17, 12, 5)
    assert acc["seen"] == acc["written"] + acc["skipped"]
    assert acc["skipped_by_reason"] == {"bad_json": 1, "empty_caption": 1, "missing_file": 1, "undecodable_image": 2}
    by_input = {s["input"]: s["reason"] for s in acc["skipped_samples"]}
    assert by_input == {
        "data.jsonl:7": "missing_file",
        "data.jsonl:8": "undecodable_image",
        "data.jsonl:9": "bad_json",
        "data.jsonl:16": "undecodable_image",
        "data.jsonl:17": "empty_caption",
    }
    assert [s["samples"] for s in m["shards"]] == [5, 5, 2]
    samples = all_samples(out)
    assert len(samples) == 12
    # multi-image samples keep order; json describes each file exactly
    n_images = 0
    for s in samples:
        meta = json.loads(s.files["json"])
        assert meta["schema"] == "vlmdata.sample/1" and meta["key"] == s.key
        for i, info in enumerate(meta["images"]):
            data = s.files[info["file"]]
            img = Image.open(io.BytesIO(data))
            assert info["file"].startswith(f"{i}.")
            assert (img.width, img.height, len(data)) == (info["width"], info["height"], info["bytes"])
            n_images += 1
    assert n_images == m["totals"]["images"] == 12 + 4 + 2
    src_first = open(os.path.join(os.path.dirname(llava_source), "imgs/0_0.png"), "rb").read()
    assert samples[0].files["0.png"] == src_first  # original bytes, no re-encode


def test_no_pickle_and_tar_metadata_fixed(llava_source, tmp_path):
    out = str(tmp_path / "out")
    build(llava_source, out, BuildOptions(workers=1))
    with tarfile.open(os.path.join(out, "shard-000000.tar")) as tf:
        for m in tf.getmembers():
            assert (m.mtime, m.uid, m.gid, m.uname, m.gname, m.mode) == (0, 0, 0, "", "", 0o644)
            assert not m.name.endswith((".pyd", ".pickle", ".pkl", ".jpgs"))


def test_deterministic_across_workers(llava_source, tmp_path):
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    ma = build(llava_source, a, BuildOptions(max_count=4, workers=1))
    mb = build(llava_source, b, BuildOptions(max_count=4, workers=2))
    assert shard_files(a) == shard_files(b)
    for f in shard_files(a):
        assert filecmp.cmp(os.path.join(a, f), os.path.join(b, f), shallow=False)
    ma["options"].pop("workers"), mb["options"].pop("workers")
    assert ma == mb


def test_max_size_is_exact(llava_source, tmp_path):
    out = str(tmp_path / "out")
    limit = 60_000
    m = build(llava_source, out, BuildOptions(max_count=1000, max_size=limit, workers=1))
    for e in m["shards"]:
        path = os.path.join(out, e["name"])
        assert os.path.getsize(path) == e["bytes"]
        samples = list(iter_shard(path))
        computed = sum(member_size(len(d)) for s in samples for d in s.files.values()) + END_BYTES
        assert computed == e["bytes"]
        assert e["bytes"] <= limit or len(samples) == 1
    # packing is greedy: each shard would have overflowed with the next sample
    sizes = [sum(member_size(len(d)) for d in s.files.values()) for s in all_samples(out)]
    i = 0
    for e in m["shards"][:-1]:
        i += e["samples"]
        assert e["bytes"] + sizes[i] > limit


def test_max_pixels_reencodes_only_large(llava_source, tmp_path):
    out = str(tmp_path / "out")
    build(llava_source, out, BuildOptions(max_pixels=100 * 100, workers=1))
    for s in all_samples(out):
        for info in json.loads(s.files["json"])["images"]:
            assert info["width"] * info["height"] <= 100 * 100


def test_decompression_bomb_is_skipped(tmp_path, photos):
    src = tmp_path / "folder"
    src.mkdir()
    (src / "big.png").write_bytes(png_bytes(photos["chelsea"], (400, 300)))
    (src / "big.txt").write_text("a cat")
    (src / "small.jpg").write_bytes(jpeg_bytes(photos["chelsea"], (40, 30)))
    (src / "small.txt").write_text("a small cat")
    m = build(str(src), str(tmp_path / "out"), BuildOptions(max_image_pixels=50_000, workers=1))
    assert m["accounting"]["skipped_by_reason"] == {"too_large": 1}
    assert m["accounting"]["skipped_samples"][0]["input"] == "big.png"


def test_folder_source_with_sidecars(tmp_path, photos):
    src = tmp_path / "folder"
    (src / "sub").mkdir(parents=True)
    (src / "a.jpg").write_bytes(jpeg_bytes(photos["coffee"], (80, 60)))
    (src / "a.txt").write_text("A cup of coffee.")
    (src / "sub" / "b.png").write_bytes(png_bytes(photos["rocket"], (60, 80)))
    (src / "sub" / "b.json").write_text(json.dumps({"caption": "A rocket."}))
    (src / "sub" / "c.jpg").write_bytes(jpeg_bytes(photos["coffee"], (50, 50)))  # no caption
    (src / "d.jpg").write_bytes(jpeg_bytes(photos["coffee"], (50, 50)))
    (src / "d.txt").write_text("")
    (src / "e.jpg").write_bytes(jpeg_bytes(photos["coffee"], (50, 50)))
    (src / "e.json").write_text("{broken")
    m = build(str(src), str(tmp_path / "out"), BuildOptions(workers=1, prompt="Caption?"))
    assert m["source"]["format"] == "folder"
    assert m["accounting"]["skipped_by_reason"] == {"bad_json": 1, "empty_caption": 1, "missing_caption": 1}
    metas = [json.loads(s.files["json"]) for s in all_samples(str(tmp_path / "out"))]
    assert [m["source_id"] for m in metas] == ["a", "sub/b"]
    assert metas[0]["conversation"] == [
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Caption?"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "A cup of coffee."}]},
    ]


def test_messages_jsonl(tmp_path, photos):
    (tmp_path / "i.jpg").write_bytes(jpeg_bytes(photos["coffee"], (80, 60)))
    rec = {
        "messages": [
            {"role": "user", "content": [{"type": "image", "image": "i.jpg"}, {"type": "text", "text": "What?"}]},
            {"role": "assistant", "content": [{"type": "text", "text": "Coffee."}]},
        ]
    }
    rec2 = {
        "messages": [{"role": "user", "content": "<image>Compare <image>"}, {"role": "assistant", "content": "Same."}],
        "images": ["i.jpg", "i.jpg"],
    }
    (tmp_path / "m.jsonl").write_text(json.dumps(rec) + "\n" + json.dumps(rec2) + "\n")
    m = build(str(tmp_path / "m.jsonl"), str(tmp_path / "out"), BuildOptions(workers=1))
    assert m["source"]["format"] == "messages" and m["accounting"]["written"] == 2
    metas = [json.loads(s.files["json"]) for s in all_samples(str(tmp_path / "out"))]
    assert metas[0]["conversation"][0]["content"] == [{"type": "image"}, {"type": "text", "text": "What?"}]
    assert metas[1]["conversation"][0]["content"] == [
        {"type": "image"},
        {"type": "text", "text": "Compare"},
        {"type": "image"},
    ]


@pytest.mark.parametrize("layout", ["save_to_disk", "parquet"])
def test_hf_dataset(tmp_path, photos, layout):
    import datasets

    imgs = [photos["coffee"].resize((64, 48)), photos["rocket"].resize((48, 64))]
    ds = datasets.Dataset.from_dict({"image": imgs, "caption": ["coffee", "rocket"]}).cast_column(
        "image", datasets.Image()
    )
    if layout == "save_to_disk":
        ds.save_to_disk(str(tmp_path / "hf"))
        src = str(tmp_path / "hf")
    else:
        (tmp_path / "pq").mkdir()
        ds.to_parquet(str(tmp_path / "pq" / "part-0.parquet"))
        src = str(tmp_path / "pq")
    m = build(src, str(tmp_path / "out"), BuildOptions(workers=1))
    assert m["source"]["format"] == "hf" and m["accounting"]["written"] == 2
    metas = [json.loads(s.files["json"]) for s in all_samples(str(tmp_path / "out"))]
    assert [(i["width"], i["height"]) for mm in metas for i in mm["images"]] == [(64, 48), (48, 64)]
    assert metas[1]["conversation"][1]["content"][0]["text"] == "rocket"


def test_out_dir_rules_and_bad_source(llava_source, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "x").write_text("keep me")
    with pytest.raises(BuildError, match="not empty"):
        build(llava_source, str(out))
    assert (out / "x").exists()
    # overwrite replaces only a vlmdata dataset: a folder of other files is refused and kept
    with pytest.raises(BuildError, match="not a vlmdata dataset"):
        build(llava_source, str(out), BuildOptions(workers=1), overwrite=True)
    assert (out / "x").read_text() == "keep me"
    (out / "x").unlink()
    build(llava_source, str(out), BuildOptions(workers=1, max_count=5))
    (out / "notes.txt").write_text("mine")
    assert len([f for f in os.listdir(out) if f.endswith(".tar")]) == 3
    m = build(llava_source, str(out), BuildOptions(workers=1, max_count=20), overwrite=True)
    assert (
        sorted(f for f in os.listdir(out) if f.endswith(".tar"))
        == ["shard-000000.tar"]
        == [s["name"] for s in m["shards"]]
    )
    assert (out / "notes.txt").read_text() == "mine"  # what vlmdata did not write stays
    with pytest.raises(SourceError, match="no such file"):
        build(str(tmp_path / "nope"), str(tmp_path / "o2"))
    with pytest.raises(SourceError, match="unknown format"):
        build(llava_source, str(tmp_path / "o3"), BuildOptions(format="csv"))


KILL_SCRIPT = """
import os, signal, sys
import vlmdata.ingest.writer as b
from vlmdata.ingest import build, BuildOptions
MAIN, KILL_AT = os.getpid(), int(sys.argv[3])
orig = b.write_shard
def write_then_die(plan, *args):
    rec = orig(plan, *args)
    if plan.no == KILL_AT:  # SIGKILL the build (and this worker) right after shard KILL_AT is recorded
        os.kill(MAIN, signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)
    return rec
b.write_shard = write_then_die
build(sys.argv[1], sys.argv[2], BuildOptions(max_count=3, workers=int(sys.argv[4])))
"""


@pytest.mark.parametrize("workers,kill_after", [(1, 1), (2, 0)])
def test_resume_after_sigkill_matches_clean_build(llava_source, tmp_path, workers, kill_after):
    clean, broken = str(tmp_path / "clean"), str(tmp_path / "broken")
    mc = build(llava_source, clean, BuildOptions(max_count=3, workers=1))
    r = subprocess.run([sys.executable, "-c", KILL_SCRIPT, llava_source, broken, str(kill_after), str(workers)])
    assert r.returncode == -9
    assert not os.path.exists(os.path.join(broken, "manifest.json"))
    assert 0 < len(shard_files(broken)) <= len(shard_files(clean))
    with pytest.raises(BuildError, match="not empty"):
        build(llava_source, broken, BuildOptions(max_count=3))
    mr = build(llava_source, broken, BuildOptions(max_count=3, workers=workers), resume=True)
    assert shard_files(broken) == shard_files(clean)
    for f in shard_files(clean):
        assert filecmp.cmp(os.path.join(clean, f), os.path.join(broken, f), shallow=False)
    mc["options"].pop("workers"), mr["options"].pop("workers")
    assert mr == mc
    assert not os.path.exists(os.path.join(broken, ".vlmdata-build"))


def test_resume_refuses_other_options(llava_source, tmp_path):
    out = str(tmp_path / "o")
    r = subprocess.run([sys.executable, "-c", KILL_SCRIPT, llava_source, out, "1", "1"])
    assert r.returncode == -9
    with pytest.raises(BuildError, match="different source or options"):
        build(llava_source, out, BuildOptions(max_count=4), resume=True)
