import functools
import io
import json
import os
import sys
import tempfile

import numpy as np
import pytest
from PIL import Image

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLE_SHARDS = os.path.join(REPO, "sample_shards")
HELPERS = os.path.join(REPO, "tests", "helpers")  # fake workloads, workers: importable by name (audit --step)
if HELPERS not in sys.path:
    sys.path.insert(0, HELPERS)
BRIDGE_TESTS = os.path.join(REPO, "tests", "bridge")
BRIDGE_SKIP_REASON = (
    "megatron.bridge is not installed in this interpreter; run scripts/bridge_env.sh and "
    "`.bridge-venv/bin/python -m pytest tests/bridge`"
)


def pytest_collection_modifyitems(config, items):
    """The Bridge contract tests (tests/bridge) run only where Megatron Bridge is installed (the venv of
    scripts/bridge_env.sh); elsewhere each is skipped with the reason and the command that runs them. Their
    modules import Bridge inside the tests, so collecting them needs no Bridge. (A conftest.py of their own
    would shadow this one: the test modules import helpers `from conftest`.)"""
    import importlib.util

    try:
        if importlib.util.find_spec("megatron.bridge") is not None:
            return
    except (ImportError, ValueError):
        pass
    skip = pytest.mark.skip(reason=BRIDGE_SKIP_REASON)
    for item in items:
        if str(item.path).startswith(BRIDGE_TESTS + os.sep):
            item.add_marker(skip)


def photo(name: str = "chelsea") -> Image.Image:
    import skimage.data

    return Image.fromarray(getattr(skimage.data, name)())


def jpeg_bytes(img: Image.Image, size=None, quality=90) -> bytes:
    if size:
        img = img.resize(size)
    buf = io.BytesIO()
    img.convert("RGB").save(buf, "JPEG", quality=quality)
    return buf.getvalue()


def png_bytes(img: Image.Image, size=None) -> bytes:
    if size:
        img = img.resize(size)
    buf = io.BytesIO()
    img.save(buf, "PNG")
    return buf.getvalue()


@pytest.fixture(scope="session")
def photos():
    return {n: photo(n) for n in ("chelsea", "coffee", "astronaut", "rocket")}


@pytest.fixture
def llava_source(tmp_path, photos):
    """A LLaVA JSONL source with 12 good records (single and multi-image) and 5 bad ones."""
    img_dir = tmp_path / "src" / "imgs"
    img_dir.mkdir(parents=True)
    rng = np.random.default_rng(0)
    names = sorted(photos)
    records = []
    for i in range(12):
        k = 1 + (i % 3 == 0) + (i % 6 == 0)
        rels = []
        for j in range(k):
            w, h = int(rng.integers(64, 200)), int(rng.integers(64, 200))
            rel = f"imgs/{i}_{j}.jpg" if (i + j) % 4 else f"imgs/{i}_{j}.png"
            data = (jpeg_bytes if rel.endswith(".jpg") else png_bytes)(photos[names[(i + j) % 4]], (w, h))
            (tmp_path / "src" / rel).write_bytes(data)
            rels.append(rel)
        human = "\n".join("<image>" for _ in rels) + f"\nQuestion {i}?"
        records.append(
            {
                "id": f"r{i}",
                "image": rels if k > 1 else rels[0],
                "conversations": [{"from": "human", "value": human}, {"from": "gpt", "value": f"Answer {i}."}],
            }
        )
    (tmp_path / "src" / "imgs" / "trunc.jpg").write_bytes(jpeg_bytes(photos["coffee"], (100, 100))[:700])
    (tmp_path / "src" / "imgs" / "garbage.jpg").write_bytes(b"not an image at all")
    bad = [
        {
            "id": "missing",
            "image": "imgs/nope.jpg",
            "conversations": [{"from": "human", "value": "<image>\nx"}, {"from": "gpt", "value": "y"}],
        },
        {
            "id": "trunc",
            "image": "imgs/trunc.jpg",
            "conversations": [{"from": "human", "value": "<image>\nx"}, {"from": "gpt", "value": "y"}],
        },
        {
            "id": "garbage",
            "image": "imgs/garbage.jpg",
            "conversations": [{"from": "human", "value": "<image>\nx"}, {"from": "gpt", "value": "y"}],
        },
        {
            "id": "empty",
            "image": "imgs/0_0.png",
            "conversations": [{"from": "human", "value": "<image>\nx"}, {"from": "gpt", "value": "  "}],
        },
    ]
    lines = (
        [json.dumps(r) for r in records[:6]]
        + [json.dumps(b) for b in bad[:2]]
        + ["{not json"]
        + [json.dumps(r) for r in records[6:]]
        + [json.dumps(b) for b in bad[2:]]
    )
    path = tmp_path / "src" / "data.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


# ----------------------------------------------------------------------------- shared profile fixtures


@functools.lru_cache(maxsize=None)
def _small_data() -> tuple[str, str]:
    """Made once per process (the profile, synth and compare tests share it)."""
    root = tempfile.mkdtemp(prefix="vlmdata-test-profile-")
    path = os.path.join(root, "profile.json")
    from vlmdata.profile.measure import ProfileOptions, profile_dataset, write_profile
    from vlmdata.sources.photos import make_source

    src = make_source(os.path.join(root, "photos"), n_single=8, n_multi=3, seed=7)
    write_profile(profile_dataset(src, ProfileOptions(decode_images=6, decode_repeats=1)), path)
    return src, path


@pytest.fixture(scope="session")
def tok():
    from vlmdata.profile.measure import get_tokenizer

    return get_tokenizer(None)


@pytest.fixture(scope="session")
def small_source():
    """A real-photo LLaVA source: 8 single, 3 multi-image samples, one PNG page, two bad inputs."""
    return _small_data()[0]


@pytest.fixture(scope="session")
def small_profile():
    return _small_data()[1]
