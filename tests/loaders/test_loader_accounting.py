"""The loader's accounting on damaged datasets: for every corruption class, yielded + skipped equals the
samples in the manifest, every lost sample is named with its true shard and key, and ``on_error="raise"``
raises at the first lost sample. Also: an empty or all-bad dataset stops instead of spinning."""

import io
import json
import os
import shutil

import pytest
from PIL import Image

from vlmdata.dataset.manifest import load_manifest, shard_keys
from vlmdata.dataset.reader import BadSampleError, scan_shard
from vlmdata.dataset.tar import BLOCK
from vlmdata.ingest import BuildOptions, build
from vlmdata.loaders.api import make_loader
from vlmdata.loaders.pipeline import EmptyEpochError, check_epoch


@pytest.fixture(scope="module")
def tok():
    from vlmdata.qwen.spec import load_qwen_tokenizer

    return load_qwen_tokenizer()


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    """A 24-sample dataset in 4 shards (6 each), one input skipped (so keys have a gap), with key runs."""
    src = tmp_path_factory.mktemp("src")
    for i in range(25):
        img = Image.new("RGB", (40 + i, 32), (10 * i % 255, 80, 160))
        buf = io.BytesIO()
        img.save(buf, "JPEG", quality=80)
        (src / f"{i:02d}.jpg").write_bytes(buf.getvalue())
        (src / f"{i:02d}.txt").write_text(f"caption {i}" if i != 7 else "")
    out = tmp_path_factory.mktemp("ds") / "ds"
    m = build(str(src), str(out), BuildOptions(max_count=6, workers=1))
    assert m["totals"]["samples"] == 24 and m["accounting"]["skipped"] == 1
    return str(out)


def keys_of(root):
    m = load_manifest(root)
    return {e["name"]: shard_keys(e) for e in m["shards"]}


def run_loader(tok, root, **kw):
    ld = make_loader(
        root,
        tokenizer=tok,
        micro_batch_size=4,
        seq_length=None,
        min_pixels=32 * 32,
        max_pixels=64 * 64,
        shuffle=False,
        **kw,
    )
    got = []
    for _ in ld:
        got += ld.last_keys
    return got, ld.stats.skipped_samples


def member_offsets(path):
    """(header offset, name, size) of every member."""
    data = open(path, "rb").read()
    out, pos = [], 0
    while pos + BLOCK <= len(data) and data[pos : pos + BLOCK] != bytes(BLOCK):
        name = data[pos : pos + 100].split(b"\0", 1)[0].decode()
        size = int(data[pos + 124 : pos + 136].split(b"\0", 1)[0].strip() or b"0", 8)
        out.append((pos, name, size))
        pos += BLOCK + -(-size // BLOCK) * BLOCK
    return out


def _rewrite_header(data: bytearray, pos: int, name: bytes | None = None, size: int | None = None):
    if name is not None:
        data[pos : pos + 100] = name.ljust(100, b"\0")
    if size is not None:
        data[pos + 124 : pos + 136] = b"%011o\0" % size
    data[pos + 148 : pos + 156] = b" " * 8
    data[pos + 148 : pos + 156] = b"%06o\0 " % sum(data[pos : pos + BLOCK])


def corrupt(root, how):
    """Apply one corruption class to shard 1 (or the dataset); return the keys that must be lost."""
    shard = os.path.join(root, "shard-000001.tar")
    keys = keys_of(root)["shard-000001.tar"]
    data = bytearray(open(shard, "rb").read())
    mem = member_offsets(shard)
    if how == "truncate_mid_image":  # inside the 3rd sample's image: samples 3..6 lost
        pos, name, size = mem[5]
        data = data[: pos + BLOCK + size // 2]
        lost = keys[2:]
    elif how == "truncate_at_member_boundary":  # exactly before sample 4's json: 4..6 lost
        data = data[: mem[6][0]]
        lost = keys[3:]
    elif how == "truncate_end_blocks":  # only the end-of-archive blocks missing: nothing lost
        data = data[:-1024]
        lost = []
    elif how == "inflate_size":  # the 2nd sample's json claims 40 KB: it swallows the next members
        pos, name, size = mem[2]
        _rewrite_header(data, pos, size=size + 40 * BLOCK)
        lost = [keys[1]]
    elif how == "deflate_size":  # the 2nd sample's image claims 1 byte
        pos, name, size = mem[3]
        _rewrite_header(data, pos, size=1)
        lost = [keys[1]]
    elif how == "header_bitflip":  # a flipped bit in the 4th sample's json header: checksum fails
        pos, name, size = mem[6]
        data[pos + 10] ^= 0x04
        lost = [keys[3]]
    elif how == "duplicate_key":  # the 3rd sample's members renamed to the 2nd sample's key
        for pos, name, size in mem[4:6]:
            _rewrite_header(data, pos, name=name.replace(keys[2], keys[1]).encode())
        lost = [keys[2]]
    elif how == "member_deleted":  # the 2nd sample's image member removed
        pos, name, size = mem[3]
        data = data[:pos] + data[pos + BLOCK + -(-size // BLOCK) * BLOCK :]
        lost = [keys[1]]
    elif how == "shard_missing":
        os.remove(shard)
        return keys
    elif how == "shard_empty":
        data = bytearray()
        lost = keys
    elif how == "shard_random":
        data = bytearray(os.urandom(len(data)))
        lost = keys
    elif how == "garbage_after_end":
        data += os.urandom(5000)
        lost = []
    elif how == "json_content":  # valid tar, the 2nd sample's JSON bytes garbled
        pos, name, size = mem[2]
        data[pos + BLOCK : pos + BLOCK + 8] = b"{{{{{{{{"
        lost = [keys[1]]
    elif how == "image_content":  # valid tar, the 5th sample's image header destroyed
        pos, name, size = mem[9]
        data[pos + BLOCK : pos + BLOCK + 64] = bytes(64)
        lost = [keys[4]]
    else:
        raise ValueError(how)
    open(shard, "wb").write(bytes(data))
    return lost


CLASSES = [
    "truncate_mid_image",
    "truncate_at_member_boundary",
    "truncate_end_blocks",
    "inflate_size",
    "deflate_size",
    "header_bitflip",
    "duplicate_key",
    "member_deleted",
    "shard_missing",
    "shard_empty",
    "shard_random",
    "garbage_after_end",
    "json_content",
    "image_content",
]


@pytest.mark.parametrize("how", CLASSES)
def test_yielded_plus_skipped_is_the_manifest(tok, clean, tmp_path, how):
    root = str(tmp_path / "ds")
    shutil.copytree(clean, root)
    every = [k for ks in keys_of(root).values() for k in ks]
    lost = corrupt(root, how)
    got, skipped = run_loader(tok, root)
    assert len(got) + len(skipped) == len(every) == 24
    assert sorted(got + [s["key"] for s in skipped]) == sorted(every)  # every key exactly once, true keys
    assert sorted(s["key"] for s in skipped) == sorted(lost)
    assert all(s["shard"].endswith("shard-000001.tar") for s in skipped)
    if lost:  # raise mode stops at the first lost sample, naming it
        with pytest.raises(BadSampleError) as e:
            run_loader(tok, root, on_error="raise")
        assert e.value.key == lost[0] and e.value.shard.endswith("shard-000001.tar")


def test_old_manifest_without_key_runs_still_balances(tok, clean, tmp_path):
    root = str(tmp_path / "ds")
    shutil.copytree(clean, root)
    keys = keys_of(clean)["shard-000001.tar"]
    corrupt(root, "truncate_mid_image")
    m = json.load(open(os.path.join(root, "manifest.json")))
    for e in m["shards"]:
        del e["key_runs"]
    json.dump(m, open(os.path.join(root, "manifest.json"), "w"))
    got, skipped = run_loader(tok, root)
    assert len(got) + len(skipped) == 24
    named = [s["key"] for s in skipped]
    assert named[0] == keys[2] and keys[-1] in named  # the broken sample and the shard's last key are named
    assert all(s["reason"] == "truncated_tar" for s in skipped)


def test_scan_shard_never_raises_and_matches_manifest_count(clean, tmp_path):
    root = str(tmp_path / "ds")
    shutil.copytree(clean, root)
    shard = os.path.join(root, "shard-000002.tar")
    raw = open(shard, "rb").read()
    for cut in range(0, len(raw), 997):
        open(shard, "wb").write(raw[:cut])
        refs = scan_shard(shard, 2)
        assert len(refs) == 6
        assert [r.key for r in refs] == keys_of(root)["shard-000002.tar"]


def test_empty_dataset_and_all_skipped_epoch_stop(tok, tmp_path, clean):
    with pytest.raises(EmptyEpochError):
        check_epoch(3, 0, [])
    with pytest.raises(EmptyEpochError, match="every sample was skipped .*2 truncated_tar"):
        check_epoch(0, 0, [{"reason": "truncated_tar", "shard": "a.tar", "key": "k", "detail": "x"}] * 2)
    check_epoch(0, 1, [{"reason": "x"}])  # one sample is enough
    root = str(tmp_path / "ds")
    shutil.copytree(clean, root)
    for name in os.listdir(root):
        if name.endswith(".tar"):
            open(os.path.join(root, name), "wb").write(b"")
    got, skipped = run_loader(tok, root)
    assert got == [] and len(skipped) == 24
    with pytest.raises(EmptyEpochError):
        check_epoch(0, len(got), skipped)
