"""A text cell that is not text (a number, a mapping, bytes) is a bad_record naming its type, never an
``empty_caption``: the caption 7 is not empty, and the fix (--text-column, or the column's type) differs."""

import io

import pytest
from PIL import Image

from vlmdata.sources import open_source

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


def test_text_cells_of_other_types_are_named(tmp_path):
    buf = io.BytesIO()
    Image.new("RGB", (16, 12), (200, 10, 10)).save(buf, "JPEG")
    cell = {"bytes": buf.getvalue(), "path": None}
    for name, values in {
        "ints": pa.array([7, None]),
        "floats": pa.array([1.5, float("nan")]),
        "blobs": pa.array([b"red", b""]),
        "maps": pa.array([{"x": 1}, {"x": 2}]),
    }.items():
        pq.write_table(pa.table({"image": [cell, cell], "caption": values}), str(tmp_path / f"{name}.parquet"))
        first, second = open_source(str(tmp_path / f"{name}.parquet"))[1]
        assert first.error is not None and first.error[0] == "bad_record", (name, first.error)
        assert "caption" in first.error[1] and type(first.error[1]) is str
        assert second.error is not None and second.error[0] in ("bad_record", "empty_caption"), (name, second.error)
