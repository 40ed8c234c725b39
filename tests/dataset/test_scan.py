"""dataset/scan.py, refs.py and reader.py: a shard's sample references (strict scan, deep scan after damage,
reconciled with the manifest: every sample accounted for under its true key), ranged reads, the sample parser."""

import json
import os
import shutil

import fsspec
import pytest
from small_dataset import jpeg, write_small_dataset

from vlmdata.dataset.reader import BadSampleError, ShardReader, manifest_entry, parse_raw, scan_shard
from vlmdata.dataset.refs import SampleRef, ShardIndex
from vlmdata.dataset.tar import BLOCK, header


@pytest.fixture
def ds(tmp_path):
    out = str(tmp_path / "ds")
    samples = write_small_dataset(out, n=8, per_shard=4)
    return out, samples, [os.path.join(out, f"shard-{i:06d}.tar") for i in range(2)]


def test_clean_shard(ds):
    out, samples, shards = ds
    refs = scan_shard(shards[0])
    assert [r.key for r in refs] == [s.key for s in samples[:4]] and not any(r.error for r in refs)
    assert set(refs[1].members) == {"json", "0.jpg", "1.jpg"}
    assert manifest_entry(shards[0])["samples"] == 4
    reader = ShardReader(shards)
    try:
        for ref, want in zip(refs, samples):
            got = parse_raw(reader.read(ref), ref.key)
            assert got.conversation == want.conversation and got.images == want.images
            assert got.source_id == want.source_id
    finally:
        reader.close()


def test_shard_index_is_the_refs_it_was_built_from(ds):
    refs = scan_shard(ds[2][1], 1) + [SampleRef(1, "bad\udcff", {}, ("corrupt_tar", "x"))]
    index = ShardIndex(1, refs)
    assert len(index) == len(refs) and list(index) == refs and index[-1] == refs[-1] and index[1:3] == refs[1:3]
    with pytest.raises(IndexError):
        index[len(refs)]


def test_remote_ranged_reads_equal_local_ones(ds):
    _, _, shards = ds
    fs = fsspec.filesystem("memory")
    fs.pipe_file("/b/shard-000000.tar", open(shards[0], "rb").read())
    url = "memory://b/shard-000000.tar"
    local, remote = scan_shard(shards[0], expected=False), scan_shard(url, expected=False)
    assert local == remote
    lr, rr = ShardReader([shards[0]]), ShardReader([url])
    assert [lr.read(r) for r in local] == [rr.read(r) for r in remote]


def test_a_truncated_shard_loses_samples_under_their_true_keys(ds):
    out, samples, shards = ds
    data = open(shards[0], "rb").read()
    with open(shards[0], "wb") as f:
        f.write(data[: len(data) // 2])
    refs = scan_shard(shards[0])
    assert [r.key for r in refs] == [s.key for s in samples[:4]]  # the manifest's keys, all four
    lost = [r for r in refs if r.error]
    assert lost and all(r.error[0] == "truncated_tar" for r in lost) and not refs[0].error
    # without a manifest: the cut member's sample is the loss (its header still names it), cut off at a header
    # boundary the loss is named by its place
    no_manifest = scan_shard(shards[0], expected=False)
    assert no_manifest[-1].error[0] == "truncated_tar" and not no_manifest[0].error
    refs = scan_shard(shards[1], expected=False)
    with open(shards[1], "r+b") as f:
        f.truncate(refs[2].members["json"][0] - BLOCK)  # just before sample 2's first header
    cut = scan_shard(shards[1], expected=False)
    assert [r.key for r in cut[:2]] == [samples[4].key, samples[5].key]
    assert cut[-1].key == f"<after {samples[5].key}>" and cut[-1].error[0] == "truncated_tar"


def test_a_corrupt_header_is_stepped_over(ds):
    _, samples, shards = ds
    data = bytearray(open(shards[0], "rb").read())
    data[148:156] = b"garbage!"  # the first member's header checksum
    with open(shards[0], "wb") as f:
        f.write(bytes(data))
    refs = scan_shard(shards[0])
    assert refs[0].error is not None and refs[0].key == samples[0].key
    assert [r.key for r in refs[1:] if not r.error] == [s.key for s in samples[1:4]]  # the deep scan's finds


def test_duplicate_key_and_missing_shard(ds):
    out, samples, shards = ds
    data = open(shards[1], "rb").read()
    dup = header(f"{samples[4].key}.json", 2) + b"{}" + bytes(BLOCK - 2)
    with open(shards[1], "wb") as f:
        f.write(data[: -2 * BLOCK] + dup + bytes(2 * BLOCK))
    assert any(r.error and r.error[0] == "duplicate_key" for r in scan_shard(shards[1], expected=False))
    os.remove(shards[0])
    refs = scan_shard(shards[0])
    assert len(refs) == 4 and {r.error[0] for r in refs} == {"missing_shard"}


@pytest.mark.parametrize(
    "files,reason",
    [
        ({}, "missing_json"),
        ({"json": b"{nope"}, "bad_json"),
        ({"json": b'{"conversation": 3}'}, "bad_json"),
        ({"json": json.dumps({"conversation": [], "images": []}).encode()}, None),
    ],
)
def test_parse_raw_reasons(files, reason):
    if reason is None:
        with pytest.raises(BadSampleError):  # an empty conversation is refused by the validity rule too
            parse_raw(files, "k")
        return
    with pytest.raises(BadSampleError) as e:
        parse_raw(files, "k")
    assert e.value.reason == reason and e.value.key == "k"


def test_parse_raw_checks_images_against_their_json(ds):
    out, samples, shards = ds
    ref = scan_shard(shards[0])[1]
    files = ShardReader(shards).read(ref)
    assert len(parse_raw(files, ref.key, with_images=False).images) == 0
    without = {k: v for k, v in files.items() if k != "1.jpg"}
    with pytest.raises(BadSampleError, match="missing") as e:
        parse_raw(without, ref.key)
    assert e.value.reason == "missing_image"
    swapped = dict(files, **{"1.jpg": jpeg(64, 64)})
    with pytest.raises(BadSampleError) as e:
        parse_raw(swapped, ref.key)
    assert e.value.reason == "corrupt_sample"
    with pytest.raises(BadSampleError) as e:
        parse_raw(dict(files, **{"0.jpg": b"\xff\xd8 not a jpeg"}), ref.key)
    assert e.value.reason == "undecodable_image"
    shutil.rmtree(out)
