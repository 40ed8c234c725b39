"""vlmdata synth and the in-process sources: exactness, determinism, the mocks."""

import ast
import hashlib
import io
import json
import os

import numpy as np
import pytest
from PIL import Image

from vlmdata.cli.main import main as cli
from vlmdata.dataset.images import jpeg_info
from vlmdata.dataset.manifest import load_manifest, shard_paths
from vlmdata.dataset.tar import iter_shard
from vlmdata.profile.measure import load_profile, sample_rows
from vlmdata.synthetic.bridge_noise import BRIDGE_VOCABULARY
from vlmdata.synthetic.source import MockSource, SyntheticSource
from vlmdata.synthetic.text import TextMaker

BRIDGE_SRC = "/tmp/mb/src/megatron/bridge/data/builders/mock_vlm_sft.py"


def ntok(tok, text):
    return len(tok.encode(text, add_special_tokens=False)) if text else 0


def texts(conv, role):
    return [p["text"] for t in conv if t["role"] in role for p in t["content"] if p["type"] == "text"]


def test_text_maker_exact(tok):
    tm = TextMaker(tok)
    for target in [0, 1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 610]:
        for seed in range(3):
            t = tm.make(target, seed)
            assert ntok(tok, t) == target, (target, seed, t)
            assert t == tm.make(target, seed)
    assert tm.make(50, 1) != tm.make(50, 2)


@pytest.fixture(scope="module")
def source(small_profile, tok):
    return SyntheticSource(small_profile, seed=11, tokenizer=tok)


def test_synthetic_samples_follow_their_rows(source, small_profile, tok):
    rows = sample_rows(load_profile(small_profile))
    samples = source.take(len(rows))
    assert sorted(s.synthetic["row"] for s in samples) == list(range(len(rows)))  # one epoch = every row once
    for s in samples:
        row = rows[s.synthetic["row"]]
        assert s.key == f"s{int(s.key[1:]):09d}"
        assert sum(ntok(tok, t) for t in texts(s.conversation, ("user", "system"))) == row["prompt_tokens"]
        assert sum(ntok(tok, t) for t in texts(s.conversation, ("assistant",))) == row["answer_tokens"]
        assert len(s.images) == len(s.image_info) == row["n_images"]
        for data, info, target in zip(s.images, s.image_info, row["images"]):
            im = Image.open(io.BytesIO(data))
            assert (im.width, im.height, im.format) == (target["width"], target["height"], target["format"])
            assert info.bytes == len(data) and abs(len(data) / target["bytes"] - 1) <= 0.10
            if im.format == "JPEG":
                assert jpeg_info(data)["subsampling"] == target["subsampling"]
                assert jpeg_info(data)["progressive"] == target["progressive"]


def test_source_random_access_threads_and_epochs(source, small_profile, tok):
    n = len(sample_rows(load_profile(small_profile)))
    first = source.take(4)
    assert [s.meta() for s in first] == [source.get(i).meta() for i in range(4)]
    threaded = SyntheticSource(small_profile, seed=11, tokenizer=tok, pool=source.pool, threads=2).take(4)
    assert [(s.meta(), s.images) for s in threaded] == [(s.meta(), s.images) for s in first]
    # past the rows: a second epoch (another permutation); variants=1 gives a row the same image bytes
    second = source.take(n, start=n)
    by_row = {s.synthetic["row"]: s for s in source.take(n)}
    for s in second:
        assert s.images == by_row[s.synthetic["row"]].images
    other = SyntheticSource(small_profile, seed=12, tokenizer=tok, pool=source.pool).get(0)
    assert other.meta() != first[0].meta()


def _tars(folder):
    return [open(p, "rb").read() for p in shard_paths(folder)]


def test_synth_cli_deterministic_and_valid(small_profile, tmp_path, capsys):
    a, b, c = (str(tmp_path / x) for x in "abc")
    assert cli(["synth", "--profile", small_profile, "-n", "5", "-o", a, "--seed", "4", "--workers", "2", "-q"]) == 0
    assert cli(["synth", "--profile", small_profile, "-n", "5", "-o", b, "--seed", "4", "--workers", "1", "-q"]) == 0
    assert cli(["synth", "--profile", small_profile, "-n", "5", "-o", c, "--seed", "5", "-q", "--max-count", "2"]) == 0
    assert _tars(a) == _tars(b)
    assert _tars(a) != _tars(c) and len(_tars(c)) == 3
    m = load_manifest(a)
    sha = hashlib.sha256(open(small_profile, "rb").read()).hexdigest()
    assert m["kind"] == "synth" and m["totals"]["samples"] == 5 and m["source"]["profile"] == sha
    meta = json.loads(next(iter_shard(shard_paths(a)[0])).files["json"])
    assert meta["synthetic"] == {"generator": "profile", "seed": 4, "profile": sha, "row": meta["synthetic"]["row"]}
    assert os.path.exists(os.path.join(a, ".nv-meta", "dataset.yaml"))
    assert cli(["validate", a, "-q"]) == 0


@pytest.mark.parametrize("n", ["0", "-2"])
def test_synth_refuses_non_positive_n(tmp_path, capsys, n):
    assert cli(["synth", "--mock", "bridge-noise", "-n", n, "-o", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "positive" in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()


def test_synth_needs_profile_or_mock(tmp_path, capsys):
    assert cli(["synth", "-n", "3", "-o", str(tmp_path / "o")]) == 2
    assert "--profile" in capsys.readouterr().err


def test_bridge_noise_in_memory():
    src = MockSource("bridge-noise", seed=0)
    samples = src.take(30)
    for s in samples:
        assert len(s.images) == 1 and isinstance(s.images[0], Image.Image)
        assert s.images[0].size == (256, 256) and s.images[0].mode == "RGB"
        user, assistant = s.conversation
        assert user == {
            "role": "user",
            "content": [{"type": "image"}, {"type": "text", "text": "Describe this image."}],
        }
        words = assistant["content"][0]["text"].split(" ")
        assert 10 <= len(words) <= 29 and set(words) <= set(BRIDGE_VOCABULARY)
    a = np.asarray(samples[0].images[0])
    assert a.dtype == np.uint8 and a.min() == 0 and a.max() == 255 and 120 < a.mean() < 135  # uniform noise
    assert len(BRIDGE_VOCABULARY) == 110  # Bridge's list, verbatim (not ~150 as often quoted)
    # Bridge's DirectSFTDataset: sample i is base example i % num_base_examples
    small = MockSource("bridge-noise", seed=0, num_base_examples=4)
    assert small.get(5).conversation == small.get(1).conversation and small.get(5).images[0] is small.get(1).images[0]


@pytest.mark.skipif(not os.path.exists(BRIDGE_SRC), reason="Megatron Bridge source not unpacked at /tmp/mb")
def test_bridge_noise_matches_bridge_source():
    """Run Bridge's own make_mock_vlm_examples (taken from its source file) and compare words and pixels."""
    tree = ast.parse(open(BRIDGE_SRC).read())
    keep = [
        n
        for n in tree.body
        if (isinstance(n, ast.Assign) and n.targets[0].id == "_MOCK_RESPONSE_VOCABULARY")
        or (isinstance(n, ast.FunctionDef) and n.name in ("make_mock_vlm_example", "make_mock_vlm_examples"))
    ]
    assert len(keep) == 3
    ns = {"numpy": np, "Image": Image, "Any": object, "MockVLMSFTDatasetConfig": object}
    exec(compile(ast.Module(body=keep, type_ignores=[]), BRIDGE_SRC, "exec"), ns)
    from types import SimpleNamespace

    cfg = SimpleNamespace(
        random_seed=3,
        num_base_examples=6,
        enable_in_batch_packing=False,
        image_size=(256, 256),
        num_images=1,
        prompt="Describe this image.",
    )
    theirs = ns["make_mock_vlm_examples"](cfg)
    ours = MockSource("bridge-noise", seed=3, num_base_examples=6).take(6)
    assert tuple(ns["_MOCK_RESPONSE_VOCABULARY"]) == BRIDGE_VOCABULARY
    for t, o in zip(theirs, ours):
        tu, ta = t["conversation"]
        assert ta["content"][0]["text"] == o.conversation[1]["content"][0]["text"]
        assert tu["content"][-1] == o.conversation[0]["content"][-1]
        assert np.array_equal(np.asarray(tu["content"][0]["image"]), np.asarray(o.images[0]))


def test_bridge_noise_shards(tmp_path):
    out = str(tmp_path / "bn")
    assert cli(["synth", "--mock", "bridge-noise", "-n", "3", "-o", out, "-q"]) == 0
    raws = list(iter_shard(shard_paths(out)[0]))
    mem = MockSource("bridge-noise", seed=0).take(3)
    for raw, s in zip(raws, mem):
        assert sorted(raw.files) == ["0.png", "json"]
        meta = json.loads(raw.files["json"])
        assert meta["conversation"] == s.conversation and meta["synthetic"]["generator"] == "bridge-noise"
        im = Image.open(io.BytesIO(raw.files["0.png"]))
        assert im.format == "PNG" and np.array_equal(np.asarray(im.convert("RGB")), np.asarray(s.images[0]))  # lossless


def test_imagefree(tmp_path, tok, small_profile):
    out = str(tmp_path / "if")
    assert (
        cli(
            [
                "synth",
                "--mock",
                "imagefree",
                "-n",
                "4",
                "-o",
                out,
                "--prompt-tokens",
                "7",
                "--answer-tokens",
                "50",
                "-q",
            ]
        )
        == 0
    )
    raws = list(iter_shard(shard_paths(out)[0]))
    assert len(raws) == 4 and load_manifest(out)["totals"]["images"] == 0
    for raw in raws:
        assert list(raw.files) == ["json"]
        meta = json.loads(raw.files["json"])
        assert meta["images"] == [] and all(p["type"] == "text" for t in meta["conversation"] for p in t["content"])
        assert sum(ntok(tok, t) for t in texts(meta["conversation"], ("user",))) == 7
        assert sum(ntok(tok, t) for t in texts(meta["conversation"], ("assistant",))) == 50
    rows = sample_rows(load_profile(small_profile))
    src = MockSource("imagefree", seed=1, profile=small_profile, tokenizer=tok)
    for s in src.take(len(rows)):
        assert s.images == []
        row = rows[int(s.source_id.rsplit("-", 1)[1])]
        assert sum(ntok(tok, t) for t in texts(s.conversation, ("assistant",))) == row["answer_tokens"]
        assert sum(ntok(tok, t) for t in texts(s.conversation, ("user",))) == row["prompt_tokens"]
