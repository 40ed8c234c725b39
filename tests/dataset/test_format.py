"""The on-disk format's pieces one by one: tar members (dataset/tar.py), the sample rules (schema.py), images
(images.py), what a path names (resolve.py), the manifest (manifest.py), validate and inspect."""

import io
import json
import os
import tarfile

import pytest
from PIL import Image
from small_dataset import jpeg, write_small_dataset

from vlmdata.dataset.images import ImageProblem, check_dimensions, check_image, jpeg_info, reencode
from vlmdata.dataset.inspect import summarize
from vlmdata.dataset.manifest import ManifestError, load_manifest, shard_paths
from vlmdata.dataset.resolve import OutputRefused, check_output, open_dataset
from vlmdata.dataset.schema import (
    conversation_problem,
    count_image_parts,
    dumps,
    loads,
    safe_label,
    text_problem,
    user_assistant,
)
from vlmdata.dataset.tar import TarReadError, TarWriter, header, iter_members, iter_raw_samples, split_name
from vlmdata.dataset.validate import validate
from vlmdata.errors import OptionsError


def test_tar_members_round_trip_and_python_reads_them():
    buf = io.BytesIO()
    w = TarWriter(buf)
    w.add("a/k1.json", b"{}")
    w.add("a/k1.0.jpg", b"x" * 700)
    w.add("k2.json", b"[]")
    sha = w.close()
    assert len(sha) == 64 and w.size == len(buf.getvalue()) and w.size % 512 == 0
    buf.seek(0)
    assert [(n, len(d)) for n, d, _ in iter_members(buf)] == [("a/k1.json", 2), ("a/k1.0.jpg", 700), ("k2.json", 2)]
    buf.seek(0)
    assert [(s.key, sorted(s.files)) for s in iter_raw_samples(buf)] == [("a/k1", ["0.jpg", "json"]), ("k2", ["json"])]
    buf.seek(0)
    with tarfile.open(fileobj=buf) as t:  # what vlmdata writes is plain ustar
        assert t.getnames() == ["a/k1.json", "a/k1.0.jpg", "k2.json"]
    assert split_name("d/k.0.jpg") == ("d/k", "0.jpg")
    with pytest.raises(ValueError, match="too long"):
        header("x" * 300, 1)
    with pytest.raises(TarReadError):
        list(iter_members(io.BytesIO(buf.getvalue()[:-1024] + b"junk" + bytes(1020))))


def test_sample_rules():
    conv = user_assistant("What?", "A cat.", 2)
    assert count_image_parts(conv) == 2 and conversation_problem(conv) is None
    assert (
        conversation_problem([{"role": "user", "content": [{"type": "text", "text": "q"}]}])[0] == "empty_caption"
    )  # no answer
    assert text_problem("<|im_start|>user") == ("control_token", "text contains the chat control token '<|im_start|>'")
    assert text_problem("a\0b")[0] == "bad_text" and text_problem("fine") is None
    assert loads(dumps({"b": 1, "a": [1.5]})) == {"a": [1.5], "b": 1} and dumps({"b": 1, "a": 2}) == b'{"a":2,"b":1}'
    assert safe_label("bad\udcffname\n") == "bad\\xffname\\n" and safe_label("x" * 9, 4) == "xxxx..."


def test_images():
    data = jpeg(64, 48)
    c = check_image(data)
    assert (c.format, c.width, c.height) == ("JPEG", 64, 48)
    for bad, reason in ((b"", "undecodable_image"), (data[: len(data) // 2], "undecodable_image")):
        with pytest.raises(ImageProblem) as e:
            check_image(bad, verify="full")
        assert e.value.reason == reason
    for w, h, reason in ((1, 300, "bad_aspect_ratio"), (20000, 20000, "too_large"), (0, 5, "undecodable_image")):
        with pytest.raises(ImageProblem) as e:
            check_dimensions(w, h)
        assert e.value.reason == reason
    with pytest.raises(OptionsError, match="`verify`"):
        check_image(data, verify="maybe")
    out, fmt, w, h = reencode(jpeg(400, 300), max_pixels=100 * 75)
    assert fmt == "JPEG" and (w, h) == (100, 75) and Image.open(io.BytesIO(out)).size == (100, 75)
    info = jpeg_info(data)
    assert info["subsampling"] == "4:2:0" and not info["progressive"] and 85 <= info["quality_estimate"] <= 95


def test_what_a_path_names(tmp_path):
    ds = tmp_path / "ds"
    write_small_dataset(str(ds), n=6, per_shard=4)
    ref = open_dataset(str(ds))
    assert ref.kind == "dataset" and ref.root == str(ds) and len(ref.shards) == 2 and ref.manifest is not None
    assert open_dataset(str(ds / "manifest.json")).shards == ref.shards
    assert open_dataset(ref.shards[0]).kind == "shard"
    assert open_dataset(str(ds / "*.tar")).kind == "shards" and open_dataset(str(ds / "*.nope")).kind == "missing"
    loose = tmp_path / "loose"
    loose.mkdir()
    os.link(ref.shards[0], loose / "a.tar")
    assert open_dataset(str(loose)).kind == "shards" and open_dataset(str(tmp_path / "nothing")).kind == "missing"
    (tmp_path / "notes.txt").write_text("x")
    assert open_dataset(str(tmp_path / "notes.txt")).kind == "other"
    assert shard_paths(str(ds)) == list(ref.shards)


def test_outputs_never_replace_inputs_or_other_files(tmp_path):
    src = tmp_path / "in.json"
    src.write_text("{}")
    with pytest.raises(OutputRefused, match="`out`"):
        check_output(str(src), inputs=[str(src)], what="`out`")
    other = tmp_path / "other.json"
    other.write_text("not mine")
    with pytest.raises(OutputRefused):
        check_output(str(other), what="`out`")
    check_output(str(other), own=lambda p: True, what="`out`")  # a file of the kind the command writes
    check_output(str(tmp_path / "new.json"), inputs=[str(src)])


def test_manifest_validate_and_inspect(tmp_path):
    ds = tmp_path / "ds"
    write_small_dataset(str(ds), n=6, per_shard=4)
    m = load_manifest(str(ds))
    assert m["totals"]["samples"] == 6 and m["totals"]["images"] == 9 and m["accounting"]["written"] == 6
    assert [e["key_runs"] for e in m["shards"]] == [[["s000000000", 4]], [["s000000004", 2]]]
    rep = validate(str(ds), energon=False)
    assert rep.ok and rep.samples == 6 and rep.images == 9
    s = summarize(str(ds))
    assert s["images_per_sample"] == {1: 3, 2: 3} and s["formats"] == {"JPEG": 9} and s["problems"] == []
    shard = ds / m["shards"][1]["name"]
    data = bytearray(shard.read_bytes())
    data[600] ^= 0xFF  # a byte of the first member's data: the sha256 no longer matches
    shard.write_bytes(bytes(data))
    assert not validate(str(ds), energon=False).ok
    (ds / "manifest.json").write_text(json.dumps({"schema": "other"}))
    with pytest.raises(ManifestError):
        load_manifest(str(ds))
