import io
import json
import os

import numpy as np
import pytest
from PIL import Image

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLE_SHARDS = os.path.join(REPO, "sample_shards")


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
        records.append({"id": f"r{i}", "image": rels if k > 1 else rels[0],
                        "conversations": [{"from": "human", "value": human}, {"from": "gpt", "value": f"Answer {i}."}]})
    (tmp_path / "src" / "imgs" / "trunc.jpg").write_bytes(jpeg_bytes(photos["coffee"], (100, 100))[:700])
    (tmp_path / "src" / "imgs" / "garbage.jpg").write_bytes(b"not an image at all")
    bad = [
        {"id": "missing", "image": "imgs/nope.jpg", "conversations": [{"from": "human", "value": "<image>\nx"}, {"from": "gpt", "value": "y"}]},
        {"id": "trunc", "image": "imgs/trunc.jpg", "conversations": [{"from": "human", "value": "<image>\nx"}, {"from": "gpt", "value": "y"}]},
        {"id": "garbage", "image": "imgs/garbage.jpg", "conversations": [{"from": "human", "value": "<image>\nx"}, {"from": "gpt", "value": "y"}]},
        {"id": "empty", "image": "imgs/0_0.png", "conversations": [{"from": "human", "value": "<image>\nx"}, {"from": "gpt", "value": "  "}]},
    ]
    lines = [json.dumps(r) for r in records[:6]] + [json.dumps(b) for b in bad[:2]] + ["{not json"] \
        + [json.dumps(r) for r in records[6:]] + [json.dumps(b) for b in bad[2:]]
    path = tmp_path / "src" / "data.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return str(path)
