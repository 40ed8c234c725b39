"""sources/jsonrecords.py: LLaVA and messages JSON/JSONL records -> items (paths confined to the image root),
line limits, deferred parsing, and what sniff says about a file that is not JSON records."""

import json

import pytest

from vlmdata.sources.base import SourceError
from vlmdata.sources.jsonrecords import _lines, iter_json_source, iter_records, sniff


def llava(rid, image, human="<image>\nWhat is it?", gpt="A cat."):
    return {
        "id": rid,
        "image": image,
        "conversations": [{"from": "human", "value": human}, {"from": "gpt", "value": gpt}],
    }


def write_jsonl(path, records, extra=b""):
    path.write_bytes(b"\xef\xbb\xbf" + b"\n".join(json.dumps(r).encode() for r in records) + b"\n" + extra)
    return str(path)


def test_llava_items_confined_to_the_image_root(tmp_path):
    src = write_jsonl(
        tmp_path / "d.jsonl",
        [llava("a", "x.jpg"), llava("b", ["x.jpg", "y.jpg"], "<image><image> both?"), llava("c", "../out.jpg")],
        b"{not json\n\n",
    )
    items = list(iter_json_source(src, "llava", None))
    assert [i.input for i in items] == ["d.jsonl:1", "d.jsonl:2", "d.jsonl:3", "d.jsonl:4"]
    a, b, c, bad = items
    assert a.source_id == "a" and a.images == [str(tmp_path / "x.jpg")]
    assert a.conversation[0]["content"] == [{"type": "image"}, {"type": "text", "text": "What is it?"}]
    assert len(b.images) == 2 and [p["type"] for p in b.conversation[0]["content"]] == ["image", "image", "text"]
    assert c.error[0] == "outside_root" and bad.error[0] == "bad_json"
    (c2,) = [i for i in iter_json_source(src, "llava", None, allow_outside_root=True) if i.source_id == "c"]
    assert c2.error is None and c2.images == [str(tmp_path / "../out.jpg")]


def test_messages_with_parts_or_placeholders(tmp_path):
    recs = [
        {
            "messages": [
                {"role": "user", "content": [{"type": "image", "image": "p.png"}, {"type": "text", "text": "Q"}]},
                {"role": "assistant", "content": [{"type": "text", "text": "A"}]},
            ]
        },
        {
            "messages": [{"role": "user", "content": "<image> Q2"}, {"role": "assistant", "content": "A2"}],
            "images": ["q.png"],
        },
        {"messages": "nope"},
    ]
    src = str(tmp_path / "m.json")
    (tmp_path / "m.json").write_text(json.dumps(recs))
    one, two, bad = iter_json_source(src, "messages", str(tmp_path / "imgs"))
    assert one.images == [str(tmp_path / "imgs" / "p.png")] and two.images == [str(tmp_path / "imgs" / "q.png")]
    assert one.input == "m.json[0]" and bad.error[0] == "bad_record"


def test_deferred_items_resolve_to_the_eager_ones(tmp_path):
    src = write_jsonl(tmp_path / "d.jsonl", [llava(str(i), f"{i}.jpg") for i in range(5)], b"[1, 2]\n")
    eager = list(iter_json_source(src, "llava", None))
    lazy = list(iter_json_source(src, "llava", None, deferred=True))
    assert all(i.pending is not None for i in lazy)
    assert [i.resolve() for i in lazy] == eager


def test_long_lines_are_skipped_without_being_held(tmp_path):
    path = tmp_path / "x"
    path.write_bytes(b"short\n" + b"x" * 100 + b"\nafter\ntail-no-newline")
    with open(path, "rb") as f:
        assert list(_lines(f, cap=20, chunk=16)) == [b"short\n", None, b"after\n", b"tail-no-newline"]


def test_sniff(tmp_path):
    (tmp_path / "l.jsonl").write_text(json.dumps(llava("a", "x.jpg")) + "\n")
    (tmp_path / "m.jsonl").write_text(json.dumps({"messages": []}) + "\n")
    (tmp_path / "n.jsonl").write_text(json.dumps({"other": 1}) + "\n")
    assert sniff(str(tmp_path / "l.jsonl")) == "llava" and sniff(str(tmp_path / "m.jsonl")) == "messages"
    assert sniff(str(tmp_path / "n.jsonl")) is None
    (tmp_path / "u16.json").write_bytes('[{"id": 1}]'.encode("utf-16"))
    with pytest.raises(SourceError, match="UTF-16 encoded"):
        sniff(str(tmp_path / "u16.json"))
    (tmp_path / "cut.json").write_text('[{"id": 1}, {"id"')
    with pytest.raises(SourceError):
        sniff(str(tmp_path / "cut.json"))
    (tmp_path / "junk.jsonl").write_text("1\n[2]\n")
    with pytest.raises(SourceError, match="no JSON record found"):
        sniff(str(tmp_path / "junk.jsonl"))
    assert [label for label, _, _ in iter_records(str(tmp_path / "l.jsonl"))] == ["l.jsonl:1"]
