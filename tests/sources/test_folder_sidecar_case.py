"""A sidecar's suffix is matched in any case, as the image's is: ``IMG_1.JPG`` + ``IMG_1.TXT`` (what some cameras and
Windows tools write) is a sample, not a missing_caption skip; the lower-case sidecar wins when both exist."""

import io

from PIL import Image

from vlmdata.sources import open_source


def test_upper_case_sidecars_are_found(tmp_path):
    buf = io.BytesIO()
    Image.new("RGB", (16, 12), (200, 10, 10)).save(buf, "JPEG")
    for name in ("a.JPG", "b.jpg", "c.Jpeg", "d.jpg"):
        (tmp_path / name).write_bytes(buf.getvalue())
    (tmp_path / "a.TXT").write_text("upper")
    (tmp_path / "b.Json").write_text('{"caption": "mixed json"}')
    (tmp_path / "c.txt").write_text("lower")
    (tmp_path / "c.TXT").write_text("not this one")
    fmt, items = open_source(str(tmp_path))
    got = {i.input: (i.error[0] if i.error else (i.conversation or [])[1]["content"][0]["text"]) for i in items}
    assert fmt == "folder" and got == {
        "a.JPG": "upper",
        "b.jpg": "mixed json",
        "c.Jpeg": "lower",
        "d.jpg": "missing_caption",
    }
