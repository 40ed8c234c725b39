"""A profile reads a source as the build does (``ProfileOptions.source``, ``vlmdata profile``'s source flags): the
columns it names, images outside the root when allowed, the prompt."""

import io
import json

import pytest
from PIL import Image

from vlmdata.cli.main import main as cli
from vlmdata.profile.measure import ProfileError, ProfileOptions, load_profile, profile_dataset
from vlmdata.sources import SourceRequest

datasets = pytest.importorskip("datasets")


def _jpg(colour=(200, 10, 10)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (48, 32), colour).save(buf, "JPEG")
    return buf.getvalue()


@pytest.fixture
def odd_columns(tmp_path):
    """A parquet Hugging Face dataset whose image and text columns have names no reader guesses."""
    root = tmp_path / "hf"
    root.mkdir()
    ds = datasets.Dataset.from_dict(
        {
            "picture": [{"bytes": _jpg(), "path": None}, {"bytes": _jpg((10, 200, 10)), "path": None}],
            "words": ["a red square", "a green square"],
        }
    )
    ds.to_parquet(str(root / "part-0.parquet"))
    return str(root)


def test_profile_reads_the_columns_it_is_given(odd_columns, tmp_path):
    with pytest.raises(ProfileError, match="no image column"):
        profile_dataset(odd_columns, ProfileOptions(decode_images=0))
    prof = profile_dataset(odd_columns, ProfileOptions(decode_images=0, image_column="picture", text_column="words"))
    assert prof["summary"]["samples"] == 2 and prof["summary"]["images"] == 2
    same = profile_dataset(
        odd_columns, ProfileOptions(decode_images=0, source=SourceRequest(image_column="picture", text_column="words"))
    )
    assert same["summary"] == prof["summary"]

    out = tmp_path / "p.json"
    flags = ["--image-column", "picture", "--text-column", "words", "--decode-images", "0", "-q"]
    assert cli(["profile", odd_columns, "-o", str(out), *flags]) == 0
    assert load_profile(str(out))["summary"]["samples"] == 2


def test_profile_honours_allow_outside_root(tmp_path):
    (tmp_path / "outside.jpg").write_bytes(_jpg())
    src = tmp_path / "src"
    src.mkdir()
    turns = [{"from": "human", "value": "<image>\nWhat?"}, {"from": "gpt", "value": "A square."}]
    (src / "inside.jpg").write_bytes(_jpg())
    recs = [
        {"id": "in", "image": "inside.jpg", "conversations": turns},
        {"id": "out", "image": str(tmp_path / "outside.jpg"), "conversations": turns},
    ]
    (src / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    path = str(src / "data.jsonl")

    kept = profile_dataset(path, ProfileOptions(decode_images=0))
    assert kept["summary"]["samples"] == 1 and kept["summary"]["skipped"] == {"outside_root": 1}
    read = profile_dataset(path, ProfileOptions(decode_images=0, allow_outside_root=True))
    assert read["summary"]["samples"] == 2 and not read["summary"]["skipped"]

    out = tmp_path / "p.json"
    assert cli(["profile", path, "-o", str(out), "--allow-outside-root", "--decode-images", "0", "-q"]) == 0
    assert load_profile(str(out))["summary"]["samples"] == 2


def test_compare_reads_a_source_side_with_the_source_flags(odd_columns, tmp_path, capsys):
    """`vlmdata compare PROFILE SOURCE` profiles the source side with the same flags `vlmdata profile` has:
    without the columns the source cannot be read (a clear error, exit 2), with them it compares (a side against
    its own profile: every metric but decode time, a timing, has KS 0 and passes)."""
    ref = tmp_path / "ref.json"
    cols = ["--image-column", "picture", "--text-column", "words"]
    assert cli(["profile", odd_columns, "-o", str(ref), "--decode-images", "0", "-q", *cols]) == 0
    assert cli(["compare", str(ref), odd_columns, "-q"]) == 2
    assert "no image column" in capsys.readouterr().err
    assert cli(["compare", str(ref), odd_columns, "-q", "--json", *cols]) in (0, 1)  # 1 only on decode time
    rows = [r for r in json.loads(capsys.readouterr().out)["metrics"] if r["metric"] != "decode_ms_per_image"]
    assert rows and all(r["status"] == "PASS" and r["ks"] == 0 for r in rows)
