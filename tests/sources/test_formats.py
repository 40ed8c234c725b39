"""The format registry (sources/formats.py): detection of every built-in format, what a source's fingerprint
covers, and a format registered in one place is detected, opened and offered by ``vlmdata build --format`` and
``vlmdata profile --format``."""

import csv
import io
import json
import os

import pytest
from PIL import Image

from vlmdata.cli.main import main
from vlmdata.dataset.manifest import load_manifest
from vlmdata.sources import (
    FORMATS,
    Format,
    SourceError,
    SourceItem,
    detect_format,
    open_source,
    register_format,
    source_fingerprint,
)
from vlmdata.sources.text import caption_conversation


def jpg(path):
    buf = io.BytesIO()
    Image.new("RGB", (40, 30), (90, 20, 160)).save(buf, "JPEG")
    path.write_bytes(buf.getvalue())


def test_builtin_formats_are_detected(tmp_path):
    assert list(FORMATS) == ["folder", "llava", "messages", "hf"]
    (tmp_path / "imgs").mkdir()
    rec = {"image": "a.jpg", "conversations": [{"from": "human", "value": "q"}, {"from": "gpt", "value": "a"}]}
    (tmp_path / "l.jsonl").write_text(json.dumps(rec) + "\n")
    (tmp_path / "m.json").write_text(json.dumps([{"messages": []}]))
    (tmp_path / "x.parquet").write_bytes(b"PAR1")
    (tmp_path / "dir.json").mkdir()  # a folder whatever its name
    (tmp_path / "n.json").write_text(json.dumps([{"x": 1}]))
    (tmp_path / "notes.md").write_text("#")
    got = {n: detect_format(str(tmp_path / n)) for n in ("imgs", "l.jsonl", "m.json", "x.parquet", "dir.json")}
    assert got == {"imgs": "folder", "l.jsonl": "llava", "m.json": "messages", "x.parquet": "hf", "dir.json": "folder"}
    with pytest.raises(SourceError, match="neither 'conversations'"):
        detect_format(str(tmp_path / "n.json"))
    with pytest.raises(SourceError, match="cannot tell the format"):
        detect_format(str(tmp_path / "notes.md"))
    with pytest.raises(SourceError, match="no such file"):
        detect_format(str(tmp_path / "missing"))
    with pytest.raises(SourceError, match=r"`format`: unknown format 'csv'"):
        open_source(str(tmp_path / "imgs"), "csv")
    with pytest.raises(SourceError, match="format llava needs a JSON or JSONL file"):
        open_source(str(tmp_path / "imgs"), "llava")
    with pytest.raises(SourceError, match="format folder needs a directory"):
        open_source(str(tmp_path / "l.jsonl"), "folder")


def test_folder_fingerprint_covers_images_and_sidecars_only(tmp_path):
    jpg(tmp_path / "a.jpg")
    (tmp_path / "a.txt").write_text("cap")
    fp = source_fingerprint(str(tmp_path), "folder")
    (tmp_path / "notes.md").write_text("unrelated")
    assert source_fingerprint(str(tmp_path), "folder") == fp
    (tmp_path / "a.txt").write_text("another caption")
    assert source_fingerprint(str(tmp_path), "folder") != fp


# ----------------------------------------------------------------------------- a format registered in one place


def _is_csv(path):
    return "csv" if path.endswith(".csv") and os.path.isfile(path) else None


def _read_csv(path, request):
    root = os.path.dirname(path)
    with open(path, newline="") as f:
        for index, row in enumerate(csv.DictReader(f)):
            yield SourceItem(
                index,
                f"{os.path.basename(path)}:{index + 2}",
                row["image"],
                caption_conversation(row["caption"], request.prompt),
                [os.path.join(root, row["image"])],
            )


@pytest.fixture
def csv_format():
    yield register_format(Format("csv", "a CSV of image,caption rows", _read_csv, _is_csv, needs=("file", "a CSV")))
    FORMATS.unregister("csv")


def test_a_registered_format_is_used_everywhere(csv_format, tmp_path, capsys):
    for name in ("a.jpg", "b.jpg"):
        jpg(tmp_path / name)
    src = tmp_path / "pairs.csv"
    src.write_text("image,caption\na.jpg,first photo\nb.jpg,second photo\n")
    assert detect_format(str(src)) == "csv"
    fmt, items = open_source(str(src), prompt="Say it.")
    items = list(items)
    assert fmt == "csv" and [i.source_id for i in items] == ["a.jpg", "b.jpg"]
    assert items[0].conversation[0]["content"][-1]["text"] == "Say it."

    out = tmp_path / "out"
    assert main(["build", str(src), "-o", str(out), "--format", "csv", "--workers", "1", "-q"]) == 0
    m = load_manifest(str(out))
    assert m["source"]["format"] == "csv" and m["accounting"]["written"] == 2
    for cmd in ("build", "profile"):
        with pytest.raises(SystemExit):
            main([cmd, "--help"])
        assert "csv" in capsys.readouterr().out.split("--format", 1)[1].split("\n", 1)[0]
