"""``SourceRequest`` (sources/request.py): frozen, checks itself (``SourceOptionsError`` naming the field), held whole
by ``BuildOptions.source`` and ``ProfileOptions.source`` and handed whole to ``open_source``; every field reaches a
format's reader from ``build`` and from ``profile_dataset`` alike, and both commands have a flag for every field."""

import csv
import dataclasses
import io
import os
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from vlmdata.cli.main import parser
from vlmdata.cli.source_args import source_request
from vlmdata.dataset.manifest import load_manifest
from vlmdata.errors import OptionsError
from vlmdata.ingest import BuildOptions, BuildOptionsError, build, builder
from vlmdata.ingest.options import names as build_names
from vlmdata.profile import reads
from vlmdata.profile.measure import ProfileError, ProfileOptions, profile_dataset
from vlmdata.sources import (
    FORMATS,
    Format,
    SourceError,
    SourceItem,
    SourceOptionsError,
    SourceRequest,
    open_source,
    register_format,
)
from vlmdata.sources.request import ReadRequest, names
from vlmdata.sources.text import caption_conversation


@pytest.mark.parametrize(
    "change, message",
    [
        ({"format": 3}, "`format` must be a string or None, got int"),
        ({"image_root": 3}, "`image_root` must be a string or None"),
        ({"image_column": b"pic"}, "`image_column` must be a string or None, got bytes"),
        ({"text_column": 1.5}, "`text_column` must be a string or None"),
        ({"allow_outside_root": "yes"}, "`allow_outside_root` must be True or False"),
        ({"prompt": "<|im_end|>"}, "`prompt` must be plain text"),
        ({"prompt": None}, "`prompt` must be plain text"),
    ],
)
def test_the_request_checks_itself(change, message):
    with pytest.raises(SourceOptionsError, match=message.replace("|", r"\|")) as e:
        SourceRequest(**change)
    assert isinstance(e.value, OptionsError) and isinstance(e.value, SourceError)
    with pytest.raises(SourceOptionsError, match=message.replace("|", r"\|")):
        SourceRequest().replace(**change)
    field = next(iter(change))  # the options objects name the same field, as their own error
    with pytest.raises(BuildOptionsError, match=f"`{field}`"):
        BuildOptions(**change)
    with pytest.raises(ProfileError, match=f"`{field}`"):
        ProfileOptions(**change)


def test_the_request_is_frozen_and_replace_refuses_unknown_names(tmp_path):
    r = SourceRequest(image_root=Path(tmp_path))  # type: ignore[arg-type]
    assert r.image_root == str(tmp_path)  # a Path is kept as its text
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.prompt = "x"  # type: ignore[misc]
    assert r.replace() is r and r.replace(prompt="Say it.").prompt == "Say it."
    with pytest.raises(SourceOptionsError, match="unknown source option 'image_col' \\(did you mean 'image_column'"):
        r.replace(image_col="pic")
    assert list(r.to_dict()) == list(names())


def test_options_objects_hold_the_request_whole():
    req = SourceRequest(format="llava", prompt="Say it.", image_column="pic", allow_outside_root=True)
    b, p = BuildOptions(source=req, max_count=3), ProfileOptions(source=req, cap=5)
    assert b.source is req and p.source is req
    assert b.replace(max_count=4).source is req and dataclasses.replace(p, seed=2).source is req
    # the older flat keywords fold into the request and read through
    flat: dict[str, Any] = dict(format="llava", prompt="Say it.", image_column="pic", allow_outside_root=True)
    assert BuildOptions(max_count=3, **flat) == b and ProfileOptions(cap=5, **flat) == p
    assert (b.format, b.prompt, b.image_column, b.allow_outside_root) == ("llava", "Say it.", "pic", True)
    assert (p.format, p.image_root, p.text_column) == ("llava", None, None)
    # a keyword is applied on top of the given request; replace changes one field of it
    assert BuildOptions(source=req, prompt="P").source == req.replace(prompt="P")
    assert b.replace(text_column="words").source == req.replace(text_column="words")
    assert dataclasses.replace(p, text_column="words").source == req.replace(text_column="words")
    # a manifest's options stay flat: the request's fields in place of `source`
    assert set(b.fingerprint()) == set(build_names()) - {"workers", "fsync"}
    assert {k: b.to_dict()[k] for k in names()} == req.to_dict()
    with pytest.raises(BuildOptionsError, match="`source` must be a SourceRequest"):
        BuildOptions(source={"format": "llava"})  # type: ignore[arg-type]
    with pytest.raises(ProfileError, match="unknown source option 'bogus'"):
        ProfileOptions(bogus=1)


def test_open_source_takes_the_request_or_the_older_form(llava_source):
    req = SourceRequest(format="llava", prompt="Say it.")
    fmt, items = open_source(llava_source, req)
    older = open_source(llava_source, "llava", prompt="Say it.")
    also = open_source(llava_source, fmt="llava", prompt="Say it.")
    ids = [i.source_id for i in items]
    assert fmt == "llava" and ids and ids == [i.source_id for i in older[1]] == [i.source_id for i in also[1]]
    with pytest.raises(SourceOptionsError, match="`image_column`"):
        open_source(llava_source, req, image_column=3)


# ----------------------------------------------------------------------------- every field reaches the reader


def _jpg(path):
    buf = io.BytesIO()
    Image.new("RGB", (40, 30), (90, 20, 160)).save(buf, "JPEG")
    path.write_bytes(buf.getvalue())


@pytest.fixture
def rows_format():
    """A CSV format whose reader records the request it is handed and reads the columns it names."""
    seen: list[ReadRequest] = []

    def read(path, request):
        seen.append(request)
        root = request.image_root or os.path.dirname(path)
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
        return iter(
            SourceItem(
                i,
                f"{os.path.basename(path)}:{i + 2}",
                row[request.image_column],
                caption_conversation(row[request.text_column], request.prompt),
                [os.path.join(root, row[request.image_column])],
            )
            for i, row in enumerate(rows)
        )

    register_format(Format("rows", "a CSV of rows", read, needs=("file", "a CSV")))
    yield seen
    FORMATS.unregister("rows")


# a value other than the default for every field: a new field fails here until it is given one
NOT_DEFAULT = {
    "format": "rows",
    "image_root": None,  # set to the test's image folder
    "prompt": "Say it.",
    "image_column": "picture",
    "text_column": "words",
    "allow_outside_root": True,
}


def test_every_field_reaches_the_reader_from_build_and_profile(rows_format, tmp_path, monkeypatch):
    assert set(NOT_DEFAULT) == set(names()), "give the new SourceRequest field a value here"
    images = tmp_path / "images"
    images.mkdir()
    for name in ("a.jpg", "b.jpg"):
        _jpg(images / name)
    src = tmp_path / "pairs.csv"
    src.write_text("picture,words\na.jpg,first photo\nb.jpg,second photo\n")
    req = SourceRequest(**{**NOT_DEFAULT, "image_root": str(images)})
    assert all(getattr(req, f.name) != f.default for f in dataclasses.fields(SourceRequest))

    opened = []

    def recording_open(path, request=None, **kw):
        opened.append(request)
        return open_source(path, request, **kw)

    monkeypatch.setattr(builder, "open_source", recording_open)
    monkeypatch.setattr(reads, "open_source", recording_open)
    m = build(str(src), str(tmp_path / "out"), BuildOptions(source=req, workers=1))
    prof = profile_dataset(str(src), ProfileOptions(source=req, decode_images=0))

    assert len(opened) == 2 and opened[0] is req and opened[1] is req  # the same object, whole, on both paths
    assert [r.to_dict() for r in rows_format] == [req.to_dict(), req.to_dict()]  # every field reached the reader
    assert [r.deferred for r in rows_format] == [True, False]  # how each consumes items, not part of the request
    assert load_manifest(str(tmp_path / "out"))["accounting"]["written"] == 2 == m["accounting"]["written"]
    assert prof["summary"]["samples"] == 2


def test_build_and_profile_have_a_flag_for_every_field(rows_format, tmp_path):
    flags = ["--format", "rows", "--image-root", str(tmp_path), "--prompt", "Say it.", "--image-column", "picture"]
    flags += ["--text-column", "words", "--allow-outside-root"]
    requests = []
    for argv in (["build", "src.csv", "-o", "out", *flags], ["profile", "src.csv", "-o", "p.json", *flags]):
        requests.append(source_request(parser(argv).parse_args(argv)))
    assert requests[0] == requests[1] == SourceRequest(**{**NOT_DEFAULT, "image_root": str(tmp_path)})
    for cmd in (["build", "s", "-o", "o"], ["profile", "s", "-o", "p.json"]):  # the defaults are the library's
        assert source_request(parser(cmd).parse_args(cmd)) == SourceRequest()
