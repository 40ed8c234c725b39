"""Object storage: build to/from s3://, validate on s3://, resume an interrupted upload, no credentials leak.

Runs against moto's S3 server on 127.0.0.1 (started here); credentials and the endpoint come only from
the usual AWS_* environment variables.
"""

import filecmp
import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("s3fs", reason="s3 tests need s3fs (pip install 'vlmdata[s3]')")
moto_server = pytest.importorskip("moto.server", reason="s3 tests need moto[server] (pip install 'vlmdata[test]')")

from conftest import jpeg_bytes, png_bytes  # noqa: E402

from vlmdata import storage  # noqa: E402
from vlmdata.dataset.manifest import load_manifest  # noqa: E402
from vlmdata.dataset.validate import validate  # noqa: E402
from vlmdata.ingest import STATE_DIR, BuildOptions, build  # noqa: E402

KEY_ID, SECRET = "AKIAVLMDATATESTKEY01", "vlmdata-test-secret-5up3r-s3cr3t"


@pytest.fixture(scope="module")
def s3_server():
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def s3(s3_server, monkeypatch, request):
    env = {
        "AWS_ACCESS_KEY_ID": KEY_ID,
        "AWS_SECRET_ACCESS_KEY": SECRET,
        "AWS_ENDPOINT_URL": s3_server,
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    import fsspec

    fs = fsspec.filesystem("s3", skip_instance_cache=True)
    bucket = "vlm-" + request.node.name.lower().replace("_", "-").replace("[", "-").replace("]", "")[:40]
    fs.mkdir(bucket)
    yield f"s3://{bucket}", fs, env


def _folder(tmp_path, photos, n=9):
    src = tmp_path / "folder"
    (src / "sub").mkdir(parents=True)
    names = sorted(photos)
    for i in range(n):
        d = src / "sub" if i % 3 == 0 else src
        enc = png_bytes if i % 4 == 0 else jpeg_bytes
        (d / f"img{i:02d}.{'png' if i % 4 == 0 else 'jpg'}").write_bytes(
            enc(photos[names[i % 4]], (60 + 7 * i, 50 + 3 * i))
        )
        if i == 5:
            continue  # missing caption
        if i % 2:
            (d / f"img{i:02d}.txt").write_text(f"Caption {i}.\r\nSecond line.")
        else:
            (d / f"img{i:02d}.json").write_text(json.dumps({"caption": f"JSON caption {i}"}))
    return src


def _same_dataset(local_out, remote_out, fs):
    m_local = load_manifest(local_out)
    for s in m_local["shards"]:
        assert (
            fs.cat_file(f"{remote_out}/{s['name']}".removeprefix("s3://"))
            == open(os.path.join(local_out, s["name"]), "rb").read()
        )
    return m_local


def test_build_local_folder_to_s3_then_validate(s3, tmp_path, photos):
    bucket, fs, _ = s3
    src = _folder(tmp_path, photos)
    local_out = str(tmp_path / "local")
    ml = build(str(src), local_out, BuildOptions(max_count=3, workers=1))
    out = f"{bucket}/ds/v1"
    mr = build(str(src), out, BuildOptions(max_count=3, workers=2), staging=str(tmp_path / "staging"))
    ml["options"].pop("workers"), mr["options"].pop("workers")
    assert mr == ml
    _same_dataset(local_out, out, fs)
    names = {p.rsplit("/", 1)[1] for p in fs.find(out.removeprefix("s3://"))}
    shards = {s["name"] for s in ml["shards"]}
    assert shards | {n + ".idx" for n in shards} <= names
    assert "manifest.json" in names and "dataset.yaml" in names and "index.sqlite" in names
    assert not any(STATE_DIR in p for p in fs.find(out.removeprefix("s3://")))
    assert not os.path.exists(tmp_path / "staging")
    rep = validate(out)
    assert rep.ok, rep.problems
    assert rep.samples == ml["totals"]["samples"] == 8
    # a damaged object is found by validate on s3
    first = ml["shards"][0]["name"]
    data = bytearray(fs.cat_file(f"{out.removeprefix('s3://')}/{first}"))
    data[700] ^= 0xFF
    fs.pipe_file(f"{out.removeprefix('s3://')}/{first}", bytes(data))
    assert not validate(out).ok


def test_build_from_s3_sources_matches_local(s3, tmp_path, photos, llava_source):
    bucket, fs, _ = s3
    src = _folder(tmp_path, photos)
    fs.put(str(src), f"{bucket.removeprefix('s3://')}/src/folder", recursive=True)
    llava_dir = os.path.dirname(llava_source)
    fs.put(llava_dir, f"{bucket.removeprefix('s3://')}/src/llava", recursive=True)
    for local_src, remote_src in ((str(src), f"{bucket}/src/folder"), (llava_source, f"{bucket}/src/llava/data.jsonl")):
        a, b = str(tmp_path / "a"), str(tmp_path / "b")
        ma = build(local_src, a, BuildOptions(max_count=4, workers=1), overwrite=True)
        mb = build(remote_src, b, BuildOptions(max_count=4, workers=2), overwrite=True)
        assert [s["name"] for s in ma["shards"]] == [s["name"] for s in mb["shards"]]
        for s in ma["shards"]:
            assert filecmp.cmp(os.path.join(a, s["name"]), os.path.join(b, s["name"]), shallow=False)
        assert ma["accounting"]["written"] == mb["accounting"]["written"] > 0
        assert mb["source"]["path"] == remote_src
        # skip details name the inputs the same way, with URLs for object storage
        assert [s["reason"] for s in ma["accounting"]["skipped_samples"]] == [
            s["reason"] for s in mb["accounting"]["skipped_samples"]
        ]


KILL_UPLOAD = """
import os, signal, sys
import vlmdata.storage as st
from vlmdata.ingest import build, BuildOptions
orig, n = st.put, [0]
def put_then_die(local, url):
    if url.endswith("shard-000002.tar"):  # the third shard is written locally, its upload never completes
        os.kill(os.getpid(), signal.SIGKILL)
    return orig(local, url)
st.put = put_then_die
build(sys.argv[1], sys.argv[2], BuildOptions(max_count=2, workers=1), staging=sys.argv[3])
"""


def test_interrupted_upload_resumes(s3, tmp_path, photos):
    bucket, fs, env = s3
    src = _folder(tmp_path, photos)
    clean = str(tmp_path / "clean")
    mc = build(str(src), clean, BuildOptions(max_count=2, workers=1))
    out, staging = f"{bucket}/broken", str(tmp_path / "staging")
    r = subprocess.run([sys.executable, "-c", KILL_UPLOAD, str(src), out, staging], env={**os.environ, **env})
    assert r.returncode == -9
    inner = out.removeprefix("s3://")
    present = {p.rsplit("/", 1)[1] for p in fs.find(inner)}
    assert "manifest.json" not in present
    assert {"shard-000000.tar", "shard-000001.tar"} <= present and "shard-000002.tar" not in present
    assert os.path.exists(os.path.join(staging, "shard-000002.tar"))  # written, not uploaded
    fs.pipe_file(f"{inner}/shard-000003.tar", b"junk from a lost writer")  # an object no record covers
    with pytest.raises(Exception, match="not empty"):
        build(str(src), out, BuildOptions(max_count=2), staging=staging)
    uploads = []
    orig = storage.put

    def counting_put(local, url):
        uploads.append(url.rsplit("/", 1)[1])
        return orig(local, url)

    storage.put = counting_put
    try:
        mr = build(str(src), out, BuildOptions(max_count=2, workers=1), resume=True, staging=staging)
    finally:
        storage.put = orig
    assert uploads[0] == "shard-000002.tar"  # the staged shard is uploaded as is, not rebuilt
    assert uploads.count("shard-000002.tar") == 1 and "shard-000000.tar" not in uploads
    mc["options"].pop("workers"), mr["options"].pop("workers")
    assert mr == mc
    _same_dataset(clean, out, fs)
    assert validate(out).ok
    present = {p.rsplit("/", 1)[1] for p in fs.find(inner)}
    assert not any(STATE_DIR in p for p in fs.find(inner))
    assert {n for n in present if n.endswith(".tar")} == {s["name"] for s in mc["shards"]}


def test_cli_s3_round_trip_never_writes_credentials(s3, tmp_path, photos):
    bucket, fs, env = s3
    src = _folder(tmp_path, photos)
    out = f"{bucket}/cli"
    run_env = {**os.environ, **env, "VLMDATA_STAGING": str(tmp_path / "stage")}
    b = subprocess.run(
        [sys.executable, "-m", "vlmdata", "build", str(src), "-o", out, "--max-count", "3", "--workers", "2", "--json"],
        env=run_env,
        capture_output=True,
        text=True,
    )
    assert b.returncode == 0, b.stderr
    assert json.loads(b.stdout)["out"] == out
    v = subprocess.run(
        [sys.executable, "-m", "vlmdata", "validate", out, "--json"], env=run_env, capture_output=True, text=True
    )
    assert v.returncode == 0, v.stderr
    assert json.loads(v.stdout)["ok"]
    bad = subprocess.run(
        [sys.executable, "-m", "vlmdata", "validate", f"{bucket}/nothing-here"],
        env=run_env,
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and "no manifest.json" in bad.stderr
    texts = [b.stdout, b.stderr, v.stdout, v.stderr, bad.stderr]
    for p in fs.find(out.removeprefix("s3://")):
        texts.append(fs.cat_file(p).decode("latin-1"))
    for t in texts:
        assert SECRET not in t and KEY_ID not in t
    # a URL with user:password@ in it is redacted wherever it is written down
    assert storage.redact(f"s3://{KEY_ID}:{SECRET}@bucket/x?token=abc") == "s3://bucket/x"


REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SAMPLE_SHARDS = os.path.join(REPO, "sample_shards")


@pytest.fixture
def s3_sample_shards(s3):
    bucket, fs, env = s3
    fs.put(SAMPLE_SHARDS, f"{bucket.removeprefix('s3://')}/sample_shards", recursive=True)
    return f"{bucket}/sample_shards", fs, env


def _deterministic(profile):
    p = json.loads(json.dumps(profile))
    p.pop("decode")  # timings
    p["source"].pop("path")  # where it was read from
    return p


def test_profile_on_s3_equals_profile_of_local_copy(s3_sample_shards, tmp_path):
    from vlmdata.profile.measure import ProfileOptions, profile_dataset

    url, _, env = s3_sample_shards
    opts = ProfileOptions(decode_images=2, cap=50)
    local = profile_dataset(SAMPLE_SHARDS, opts)
    remote = profile_dataset(url, opts)
    assert remote["source"]["path"] == url and remote["source"]["kind"] == "shards"
    assert remote["rows"]["total_samples"] == 89
    assert _deterministic(remote) == _deterministic(local)
    shard = profile_dataset(f"{url}/shard-000001.tar", opts)
    assert _deterministic(shard) == _deterministic(
        profile_dataset(os.path.join(SAMPLE_SHARDS, "shard-000001.tar"), opts)
    )
    # the CLI takes the URL too; credentials stay out of what it prints and writes
    out = tmp_path / "p.json"
    r = subprocess.run(
        [sys.executable, "-m", "vlmdata", "profile", url, "-o", str(out), "--json", "--decode-images", "0"],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    written = out.read_text()
    assert json.loads(written)["rows"]["total_samples"] == 89
    for t in (r.stdout, r.stderr, written):
        assert SECRET not in t and KEY_ID not in t


def test_loader_batches_from_s3_equal_local(s3_sample_shards):
    import torch

    from vlmdata.loaders.api import make_loader
    from vlmdata.qwen.spec import load_qwen_tokenizer

    url, _, _ = s3_sample_shards
    tok = load_qwen_tokenizer()
    kw = dict(tokenizer=tok, micro_batch_size=4, seq_length=None, min_pixels=32 * 32, max_pixels=128 * 128, seed=2)

    def epoch(source, **more):
        ld = make_loader(source, **kw, **more)
        out = []
        for b in ld:
            out.append((list(ld.last_keys), b))
        return out

    local, remote = epoch(SAMPLE_SHARDS), epoch(url)
    assert [k for k, _ in remote] == [k for k, _ in local] and sum(len(k) for k, _ in local) == 89
    for (_, a), (_, b) in zip(local, remote):
        for k in ("input_ids", "labels", "loss_mask", "position_ids", "attention_mask"):
            assert torch.equal(a[k], b[k]), k
        assert torch.equal(a["visual_inputs"].pixel_values, b["visual_inputs"].pixel_values)
        assert torch.equal(a["visual_inputs"].image_grid_thw, b["visual_inputs"].image_grid_thw)
    # DataLoader workers read s3 too (forked processes), a glob and a folder without manifest list shards
    two = epoch(url, num_workers=2)
    assert sorted(k for ks, _ in two for k in ks) == sorted(k for ks, _ in local for k in ks)
    from vlmdata.loaders.api import resolve_shards

    assert resolve_shards(f"{url}/shard-00000[0-2].tar") == [f"{url}/shard-00000{i}.tar" for i in range(3)]
    assert resolve_shards(url) == [f"{url}/shard-00000{i}.tar" for i in range(6)]
