"""sources/hfdataset.py: a local Hugging Face dataset (save_to_disk or parquet) read undecoded: image cells as
bytes or confined paths, null cells skipped as missing_image, conversation or caption columns."""

import io

import pytest
from PIL import Image

from vlmdata.sources import SourceError, open_source

datasets = pytest.importorskip("datasets")


def jpg(colour=(200, 10, 10)):
    buf = io.BytesIO()
    Image.new("RGB", (16, 12), colour).save(buf, "JPEG")
    return buf.getvalue()


@pytest.mark.parametrize("layout", ["save_to_disk", "parquet"])
def test_rows_become_items(tmp_path, layout):
    (tmp_path / "side.jpg").write_bytes(jpg())
    ds = datasets.Dataset.from_dict(
        {
            "id": ["a", "b", "c", "d"],
            "image": [
                {"bytes": jpg(), "path": None},
                {"bytes": None, "path": "side.jpg"},
                None,
                {"bytes": jpg(), "path": None},
            ],
            "caption": ["red", "from a path", "no image", ""],
        }
    )  # an undecoded image struct ({"bytes", "path"}): what a cast Image(decode=False) column gives
    root = tmp_path / "hf"
    if layout == "save_to_disk":
        ds.save_to_disk(str(root))
        (root / "side.jpg").write_bytes(jpg())
    else:
        root.mkdir()
        ds.to_parquet(str(root / "part-0.parquet"))
        (root / "side.jpg").write_bytes(jpg())
    fmt, items = open_source(str(root))
    a, b, c, d = list(items)
    assert fmt == "hf" and [i.source_id for i in (a, b, c, d)] == ["a", "b", "c", "d"]
    assert isinstance(a.images[0], bytes) and a.conversation[1]["content"][0]["text"] == "red"
    assert b.images == [str(root / "side.jpg")]
    assert c.error[0] == "missing_image" and d.error[0] == "empty_caption"


def test_conversation_column_and_missing_columns(tmp_path):
    turns = [[{"from": "human", "value": "<image>\nWhat?"}, {"from": "gpt", "value": "Red."}]]
    ds = datasets.Dataset.from_dict({"img": [{"bytes": jpg(), "path": None}], "conversations": turns})
    ds.cast_column("img", datasets.Image()).save_to_disk(str(tmp_path / "conv"))
    (item,) = open_source(str(tmp_path / "conv"))[1]
    assert item.conversation[0]["content"] == [{"type": "image"}, {"type": "text", "text": "What?"}]
    datasets.Dataset.from_dict({"x": [1]}).save_to_disk(str(tmp_path / "bad"))
    with pytest.raises(SourceError, match="no image column"):
        list(open_source(str(tmp_path / "bad"))[1])
