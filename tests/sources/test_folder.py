"""sources/folder.py: an image folder with caption sidecars, local or on object storage (one walker over two
trees): order, sidecar precedence, every skip reason, FIFOs never read, symlinks followed once."""

import dataclasses
import io
import os

import fsspec
import pytest
from PIL import Image

from vlmdata.sources.folder import iter_folder


def jpg() -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (8, 6), (10, 200, 30)).save(buf, "JPEG")
    return buf.getvalue()


FILES = {
    "b.jpg": jpg(),
    "b.txt": b"\xef\xbb\xbfa dog\r\non grass\r",
    "a.png": jpg(),
    "a.json": b'{"caption": "a cat"}',
    "a.txt": b"the txt wins",
    "c.jpg": jpg(),
    "d.heic": b"not read",
    "e.jpg": jpg(),
    "e.txt": b"  ",
    "f.jpg": jpg(),
    "f.json": b"{broken",
    "g.jpg": jpg(),
    "g.txt": b"\xff\xfe\x00",
    "h.webp": jpg(),
    "h.json": b'{"conversations": [{"from": "human", "value": "<image>\\nWhat?"}, {"from": "gpt", "value": "A bird."}]}',
    "sub/i.jpeg": jpg(),
    "sub/i.txt": b"nested",
    "notes.md": b"ignored",
}
WANT = {
    "a.png": ("the txt wins", None),
    "b.jpg": ("a dog\non grass", None),  # BOM dropped, universal newlines, stripped
    "c.jpg": (None, "missing_caption"),
    "d.heic": (None, "unsupported_format"),
    "e.jpg": (None, "empty_caption"),
    "f.jpg": (None, "bad_json"),
    "g.jpg": (None, "bad_caption"),
    "h.webp": ("A bird.", None),
    "sub/i.jpeg": ("nested", None),
}


def write(root, files=FILES):
    for rel, data in files.items():
        p = os.path.join(root, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "wb") as f:
            f.write(data)


def answer(item):
    return item.conversation[-1]["content"][0]["text"] if item.conversation else None


def test_local_folder_items(tmp_path):
    write(tmp_path)
    items = list(iter_folder(str(tmp_path), "Describe this image."))
    assert [i.input for i in items] == sorted(WANT)
    assert [i.index for i in items] == list(range(len(WANT)))
    got = {i.input: (answer(i), i.error[0] if i.error else None) for i in items}
    assert got == WANT
    first = items[0]
    assert first.source_id == "a" and first.images == [os.path.join(str(tmp_path), "a.png")]
    assert first.conversation[0]["content"] == [{"type": "image"}, {"type": "text", "text": "Describe this image."}]
    assert next(i for i in items if i.input == "d.heic").images == []  # counted, never read
    c = next(i for i in items if i.input == "c.jpg")
    assert c.error == ("missing_caption", "no c.txt or c.json beside the image")


def test_remote_folder_items_equal_a_local_copy(tmp_path):
    write(tmp_path)
    fs = fsspec.filesystem("memory")
    for rel, data in FILES.items():
        fs.pipe_file(f"/bucket/src/{rel}", data)
    local = list(iter_folder(str(tmp_path), "P"))
    remote = list(iter_folder("memory://bucket/src", "P", batch=3))  # several sidecar batches
    assert len(local) == len(remote)
    for a, b in zip(local, remote):
        da, db = dataclasses.asdict(a), dataclasses.asdict(b)
        assert [os.path.relpath(p, str(tmp_path)) for p in da.pop("images")] == [
            p.split("/bucket/src/", 1)[1] for p in db.pop("images")
        ]
        assert da == db


def test_a_fifo_named_like_a_sidecar_is_a_skip_not_a_hang(tmp_path):
    write(tmp_path, {"x.jpg": jpg()})
    os.mkfifo(tmp_path / "x.txt")
    (item,) = iter_folder(str(tmp_path), "P")
    assert item.error[0] == "unreadable_file" and "FIFO" in item.error[1]


def test_symlinks_are_followed_once_never_up_the_tree(tmp_path):
    write(tmp_path / "data", {"real/a.jpg": jpg(), "real/a.txt": b"once"})
    os.symlink(tmp_path / "data" / "real", tmp_path / "data" / "alias")  # the same folder twice
    os.symlink(tmp_path, tmp_path / "data" / "up")  # a folder above the source
    os.symlink("/proc", tmp_path / "data" / "proc")
    items = list(iter_folder(str(tmp_path / "data"), "P"))
    assert len(items) == 1 and answer(items[0]) == "once"


def test_a_source_inside_a_pseudo_filesystem_is_refused():
    from vlmdata.sources.base import SourceError

    with pytest.raises(SourceError, match="kernel pseudo-filesystem"):
        next(iter_folder("/proc/self", "P"))
