"""Property-based tests (hypothesis) for the sample parser, the tar reader and the manifest: on any input they
return a result or raise their one documented error type, and what vlmdata writes reads back exactly."""

import io
import json
import os
import tempfile

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from PIL import Image  # noqa: E402

from vlmdata.dataset.manifest import ManifestError, check_manifest, expand_key_runs, key_runs, load_manifest, shard_keys
from vlmdata.dataset.reader import BadSampleError, parse_raw, scan_shard  # noqa: E402
from vlmdata.dataset.schema import (
    BadJSON,
    ImageInfo,
    Sample,
    check_meta,
    conversation_problem,
    dumps,
    loads,
    user_assistant,
)
from vlmdata.dataset.tar import (  # noqa: E402
    BLOCK,
    END_BYTES,
    BadHeader,
    TarReadError,
    TarWriter,
    iter_raw_samples,
    member_size,
    parse_header,
)

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**6), 10**6) | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)


def _jpeg(w: int, h: int) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (w, h), (w % 255, h % 255, 90)).save(buf, "JPEG", quality=80)
    return buf.getvalue()


IMAGES = [_jpeg(16 + 8 * i, 16 + 4 * i) for i in range(3)]
# caption text: any Unicode but unpaired surrogates and NUL (the text rules), control tokens filtered below
plain_text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"), min_size=1, max_size=40)


# ----------------------------------------------------------------------------- sample parser


@SETTINGS
@given(
    meta=json_values,
    extra=st.dictionaries(st.sampled_from(["json", "0.jpg", "1.png", "x"]), st.binary(max_size=64), max_size=3),
)
def test_parse_raw_raises_only_bad_sample_error(meta, extra):
    files = dict(extra)
    files["json"] = json.dumps(meta).encode()
    try:
        s = parse_raw(files, "k")
    except BadSampleError as e:
        assert e.reason and e.key == "k"
    else:
        assert isinstance(s.conversation, list) and conversation_problem(s.conversation) is None


@SETTINGS
@given(data=st.binary(max_size=300))
def test_parse_raw_and_loads_on_any_bytes(data):
    with pytest.raises(BadSampleError):
        parse_raw({"json": data + b"\xff"}, "k")  # never valid UTF-8 JSON with a trailing 0xff
    try:
        loads(data)
    except BadJSON:
        pass


@SETTINGS
@given(meta=json_values, sizes=st.dictionaries(st.text(max_size=6), st.integers(0, 100), max_size=3))
def test_check_meta_never_raises(meta, sizes):
    assert isinstance(check_meta(meta, "k", sizes), list)


@SETTINGS
@given(prompt=plain_text, answer=plain_text, n=st.integers(0, 3))
def test_sample_round_trip(prompt, answer, n):
    conv = user_assistant(prompt, answer, n)
    if conversation_problem(conv):  # control tokens or an empty answer: the build would skip it
        return
    s = Sample(
        key="s000000001",
        conversation=conv,
        images=IMAGES[:n],
        image_info=[ImageInfo(f"{i}.jpg", 16 + 8 * i, 16 + 4 * i, "JPEG", len(IMAGES[i])) for i in range(n)],
    )
    files = {name.split(".", 1)[1]: data for name, data in s.files()}
    back = parse_raw(files, s.key)
    assert back.conversation == conv and back.images == IMAGES[:n]
    assert check_meta(json.loads(files["json"]), s.key, {k: len(v) for k, v in files.items()}) == []


# ----------------------------------------------------------------------------- tar reader

keys = st.lists(st.from_regex(r"[a-z][a-z0-9_]{0,12}", fullmatch=True), min_size=1, max_size=6, unique=True)


def _shard(samples: list[tuple[str, dict[str, bytes]]]) -> bytes:
    buf = io.BytesIO()
    w = TarWriter(buf)
    for key, files in samples:
        for ext, data in files.items():
            w.add(f"{key}.{ext}", data)
    w.close()
    return buf.getvalue()


samples_st = keys.flatmap(
    lambda ks: st.tuples(
        *[
            st.tuples(
                st.just(k),
                st.dictionaries(
                    st.sampled_from(["json", "0.jpg", "1.png", "txt"]), st.binary(max_size=700), min_size=1, max_size=3
                ),
            )
            for k in ks
        ]
    )
).map(list)


@SETTINGS
@given(samples=samples_st)
def test_tar_round_trip_and_index(samples):
    data = _shard(samples)
    assert len(data) == sum(member_size(len(d)) for _, f in samples for d in f.values()) + END_BYTES
    back = [(r.key, r.files) for r in iter_raw_samples(io.BytesIO(data))]
    assert back == samples
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "x.tar")
        open(p, "wb").write(data)
        refs = scan_shard(p, 0, expected=False)
        assert [r.key for r in refs] == [k for k, _ in samples] and not any(r.error for r in refs)
        for r, (_, files) in zip(refs, samples):
            assert {ext: data[o : o + n] for ext, (o, n) in r.members.items()} == files


@SETTINGS
@given(
    samples=samples_st,
    cut=st.floats(0, 1),
    flips=st.lists(st.tuples(st.floats(0, 1), st.integers(1, 255)), max_size=3),
    zero_block=st.booleans(),
)
def test_corrupt_tar_never_crashes_and_accounts_for_every_sample(samples, cut, flips, zero_block):
    data = bytearray(_shard(samples))
    for where, x in flips:
        data[int(where * (len(data) - 1))] ^= x
    if zero_block:
        b = int(cut * (len(data) // BLOCK - 1)) * BLOCK
        data[b : b + BLOCK] = bytes(BLOCK)
    else:
        data = data[: int(cut * len(data))]
    try:
        list(iter_raw_samples(io.BytesIO(bytes(data))))
    except TarReadError:
        pass
    names = [k for k, _ in samples]
    entry = {
        "name": "x.tar",
        "samples": len(names),
        "first_key": names[0],
        "last_key": names[-1],
        "key_runs": key_runs(names),
    }
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "x.tar")
        open(p, "wb").write(bytes(data))
        refs = scan_shard(p, 0, expected=entry)
        assert [r.key for r in refs] == names  # exactly the manifest's samples, each named by its true key
        refs = scan_shard(p, 0, expected=False)  # no manifest: best effort, never an exception
        assert all(isinstance(r.key, str) for r in refs)


@SETTINGS
@given(block=st.binary(min_size=BLOCK, max_size=BLOCK))
def test_parse_header_on_any_block(block):
    try:
        name, size, typ = parse_header(block)
        assert size >= 0 and isinstance(name, str)
    except BadHeader:
        pass


# ----------------------------------------------------------------------------- manifest


@SETTINGS
@given(ks=st.lists(st.one_of(st.from_regex(r"s[0-9]{3}", fullmatch=True), st.text(max_size=5)), max_size=30))
def test_key_runs_round_trip(ks):
    runs = key_runs(ks)
    assert expand_key_runs(runs, len(ks)) == ks
    assert sum(n for _, n in runs) == len(ks)


@SETTINGS
@given(start=st.integers(0, 10**6), gaps=st.lists(st.integers(1, 5), max_size=40))
def test_key_runs_are_compact_for_build_keys(start, gaps):
    idx = [start]
    for g in gaps:
        idx.append(idx[-1] + g)
    ks = [f"s{i:09d}" for i in idx]
    runs = key_runs(ks)
    assert len(runs) == 1 + sum(g > 1 for g in gaps)
    entry = {"samples": len(ks), "first_key": ks[0], "last_key": ks[-1], "key_runs": runs}
    assert shard_keys(entry) == ks


@SETTINGS
@given(m=json_values)
def test_check_manifest_raises_only_manifest_error(m):
    try:
        assert isinstance(check_manifest(m, "m"), dict)
    except ManifestError:
        pass


def _good_manifest() -> dict:
    return {
        "schema": "vlmdata.manifest/1",
        "kind": "build",
        "prefix": "shard",
        "shards": [
            {
                "name": "shard-000000.tar",
                "samples": 2,
                "images": 2,
                "bytes": 4096,
                "sha256": "x",
                "first_key": "s000000000",
                "last_key": "s000000001",
                "key_runs": [["s000000000", 2]],
            }
        ],
        "totals": {"shards": 1, "samples": 2, "images": 2, "bytes": 4096, "image_bytes": 10, "parts": ["json"]},
        "accounting": {"seen": 2, "written": 2, "skipped": 0, "skipped_by_reason": {}, "skipped_samples": []},
        "options": {},
        "source": {},
        "energon": None,
    }


@SETTINGS
@given(name=st.text(max_size=30))
def test_shard_names_are_confined(name):
    m = _good_manifest()
    m["shards"][0]["name"] = name
    try:
        check_manifest(m, "m")
    except ManifestError:
        return
    assert "/" not in name and "\\" not in name and ".." not in name and "\0" not in name and name.endswith(".tar")


@SETTINGS
@given(data=st.binary(max_size=400) | json_values.map(lambda v: json.dumps(v).encode()))
def test_load_manifest_on_any_file(data):
    with tempfile.TemporaryDirectory() as d:
        open(os.path.join(d, "manifest.json"), "wb").write(data)
        try:
            assert isinstance(load_manifest(d), dict)
        except ManifestError:
            pass
    assert check_manifest(_good_manifest(), "m") and dumps(_good_manifest())
