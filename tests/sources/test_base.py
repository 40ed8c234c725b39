"""sources/base.py: where an image path from a record may point (``confine``) and how a folder is walked."""

import os

import pytest

from vlmdata.sources.base import BadPath, SourceItem, check_folder_root, confine, walk_files
from vlmdata.sources.text import BadRecord, caption_conversation, from_turns, split_placeholders


@pytest.mark.parametrize(
    "ref,allow,want",
    [
        ("a.jpg", False, "ROOT/a.jpg"),
        ("sub/../a.jpg", False, "ROOT/sub/../a.jpg"),
        ("../x.jpg", False, "outside_root"),
        ("/etc/hostname", False, "outside_root"),
        ("file:///etc/hostname", False, "outside_root"),
        ("/etc/hostname", True, "/etc/hostname"),
        ("s3://bucket/x.jpg", False, "outside_root"),
        ("s3://bucket/x.jpg", True, "s3://bucket/x.jpg"),
        ("s3://key:secret@bucket/x.jpg", True, "bad_path"),
        ("http://host/x.jpg", True, "bad_path"),
        ("", False, "bad_path"),
        (3, False, "bad_path"),
        ("a\0.jpg", False, "bad_path"),
    ],
)
def test_confine_local_root(tmp_path, ref, allow, want):
    root = str(tmp_path)
    if want in ("outside_root", "bad_path"):
        with pytest.raises(BadPath) as e:
            confine(ref, root, allow)
        assert e.value.reason == want and "secret" not in e.value.detail
    else:
        assert confine(ref, root, allow) == want.replace("ROOT", root)


def test_confine_remote_root():
    root = "s3://bucket/data"
    assert confine("img/a.jpg", root, False) == "s3://bucket/data/img/a.jpg"
    assert confine("s3://bucket/data/b.jpg", root, False) == "s3://bucket/data/b.jpg"
    for ref in ("s3://bucket/other/b.jpg", "../b.jpg", "/local/b.jpg"):
        with pytest.raises(BadPath, match="outside the source root|a local path"):
            confine(ref, root, False)


def test_walk_files_and_pseudo_roots(tmp_path):
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "f.txt").write_text("x")
    (tmp_path / "g.txt").write_text("y")
    os.symlink(tmp_path / "a", tmp_path / "loop")  # the same real folder: walked once
    os.symlink(tmp_path / "a", tmp_path / "a" / "b" / "back")  # a link up the tree
    assert sorted(walk_files(str(tmp_path))) in (
        [os.path.join("a", "b", "f.txt"), "g.txt"],
        [os.path.join("loop", "b", "f.txt"), "g.txt"],
    )
    check_folder_root(str(tmp_path))
    from vlmdata.sources.base import SourceError

    with pytest.raises(SourceError):
        check_folder_root("/sys/kernel")


def test_resolve_runs_a_deferred_parse_once():
    calls = []
    item = SourceItem(0, "x", pending=(lambda it, v: calls.append(v) or setattr(it, "source_id", v), ("id",)))
    assert item.resolve().source_id == "id" and item.resolve() is item and calls == ["id"]


def test_text_layouts():
    assert split_placeholders("<image>\nWhat? <image>") == [
        {"type": "image"},
        {"type": "text", "text": "What?"},
        {"type": "image"},
    ]
    conv = from_turns([{"from": "human", "value": "Q"}, {"from": "gpt", "value": "A"}], 2, "from", "value")
    assert conv[0]["content"][:2] == [{"type": "image"}, {"type": "image"}]  # no placeholder: images first
    for turns, n in (([], 0), ([{"from": "robot", "value": "x"}], 0), ([{"from": "human", "value": "<image>"}], 2)):
        with pytest.raises(BadRecord):
            from_turns(turns, n, "from", "value")
    assert caption_conversation(" a cat ", "P")[1]["content"][0]["text"] == "a cat"
