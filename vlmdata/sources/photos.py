"""Real photographs that ship offline inside pip packages, made into image-text sources.

scikit-image, matplotlib and scikit-learn carry a handful of real photos (licences in
sample_shards/README.md). ``make_source`` crops and resizes them to a realistic spread of sizes and
aspect ratios, re-encodes them as JPEG at q 80-95, writes captions and a LLaVA JSONL. Used to make
``sample_shards/`` and the demo, and as an independent check set for profiles.
"""

from __future__ import annotations

import io
import json
import os

import numpy as np
from PIL import Image

from vlmdata.sources.text import DEFAULT_PROMPT

PHOTOS = {  # name: (package, relative path, captions)
    "astronaut": (
        "skimage",
        "data/astronaut.png",
        [
            "An astronaut in a white spacesuit poses in front of an American flag.",
            "Portrait of a smiling astronaut holding a helmet, with a flag behind her.",
            "A woman in a NASA flight suit stands beside a model of the space shuttle.",
        ],
    ),
    "coffee": (
        "skimage",
        "data/coffee.png",
        [
            "A cup of coffee with latte art on a saucer, seen from above.",
            "A white ceramic cup of cappuccino with a leaf pattern in the foam.",
            "Espresso drink on a wooden table next to a small spoon.",
        ],
    ),
    "chelsea": (
        "skimage",
        "data/chelsea.png",
        [
            "A tabby cat looks to the side with green eyes.",
            "Close-up of an orange and brown striped cat's face.",
            "A cat with long whiskers sitting still and staring.",
        ],
    ),
    "rocket": (
        "skimage",
        "data/rocket.jpg",
        [
            "A rocket launches into a blue sky trailing bright exhaust.",
            "A Falcon 9 rocket lifts off from the launch pad.",
            "Smoke and flame billow beneath a rocket during liftoff.",
        ],
    ),
    "hubble": (
        "skimage",
        "data/hubble_deep_field.jpg",
        [
            "A deep field image of space filled with distant galaxies.",
            "Hundreds of faint galaxies of different shapes against a black sky.",
            "Telescope image showing spiral and elliptical galaxies.",
        ],
    ),
    "retina": (
        "skimage",
        "data/retina.jpg",
        [
            "A fundus photograph of a human retina with blood vessels.",
            "The back of an eye showing the optic disc and branching vessels.",
            "Medical image of a healthy left eye retina.",
        ],
    ),
    "motorcycle": (
        "skimage",
        "data/motorcycle_left.png",
        [
            "A motorcycle parked in a garage next to tools and shelves.",
            "A red and black motorbike in a cluttered workshop.",
            "Side view of a sport motorcycle indoors.",
        ],
    ),
    "camera": (
        "skimage",
        "data/camera.png",
        [
            "A black and white photo of a person operating a camera on a tripod.",
            "A photographer stands in a field behind a camera.",
            "Grayscale image of a man with a camera outdoors.",
        ],
    ),
    "grace_hopper": (
        "matplotlib",
        "mpl-data/sample_data/grace_hopper.jpg",
        [
            "Official portrait of Rear Admiral Grace Hopper in navy uniform.",
            "A woman in a dark naval uniform with medals smiles at the camera.",
            "Formal portrait of a naval officer against a plain background.",
        ],
    ),
    "china": (
        "sklearn",
        "datasets/images/china.jpg",
        [
            "A traditional Chinese temple with curved roofs among trees.",
            "An ornate pagoda-style building under a clear sky.",
            "Temple architecture with red pillars and green foliage.",
        ],
    ),
    "flower": (
        "sklearn",
        "datasets/images/flower.jpg",
        [
            "A pink flower in bloom with a yellow center.",
            "Close-up of a single flower with delicate petals.",
            "A blossom photographed against a blurred green background.",
        ],
    ),
}
DOCUMENT = ("skimage", "data/page.png", "A scanned page of printed text.")
MULTI_PROMPTS = [
    "What do these images have in common?",
    "Describe each image in turn.",
    "Compare the two pictures.",
    "Which of these images shows an animal?",
]
SINGLE_PROMPTS = [
    DEFAULT_PROMPT,
    "What is shown in this picture?",
    "Write a short caption for this photo.",
    "<image>\nWhat do you see?",
]


def package_file(pkg: str, rel: str) -> str:
    mod = __import__(pkg)
    return os.path.join(os.path.dirname(mod.__file__), rel)


def realistic_crop(img: Image.Image, rng: np.random.Generator) -> Image.Image:
    """A random crop (aspect 0.6-1.8) resized to a COCO-like or larger long side."""
    w, h = img.size
    aspect = float(np.exp(rng.uniform(np.log(0.6), np.log(1.8))))
    cw = min(w, int(np.sqrt(w * h * rng.uniform(0.5, 1.0) * aspect)))
    ch = min(h, int(cw / aspect))
    x, y = int(rng.integers(0, w - cw + 1)), int(rng.integers(0, h - ch + 1))
    crop = img.crop((x, y, x + cw, y + ch))
    long_side = int(rng.choice([320, 480, 512, 640, 640, 640, 640, 800, 1024, 1280]))
    scale = long_side / max(cw, ch)
    size = (max(16, round(cw * scale)), max(16, round(ch * scale)))
    return crop.resize(size, Image.Resampling.LANCZOS)


def jpeg(img: Image.Image, rng: np.random.Generator) -> bytes:
    buf = io.BytesIO()
    mode = "L" if img.mode == "L" else "RGB"
    img.convert(mode).save(buf, "JPEG", quality=int(rng.integers(80, 96)), subsampling=0 if rng.random() < 0.15 else 2)
    return buf.getvalue()


def llava_record(rid: str, image, human: str, gpt: str) -> dict:
    """One LLaVA-format record: ``image`` a relative path or a list of them, one human and one gpt turn."""
    return {
        "id": rid,
        "image": image,
        "conversations": [{"from": "human", "value": human}, {"from": "gpt", "value": gpt}],
    }


def write_jsonl(folder: str, records: list[dict]) -> str:
    """``folder``/data.jsonl with one record per line; its path."""
    path = os.path.join(folder, "data.jsonl")
    with open(path, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in records)
    return path


def make_source(folder: str, n_single: int = 72, n_multi: int = 16, seed: int = 0) -> str:
    rng = np.random.default_rng(seed)
    os.makedirs(os.path.join(folder, "images"), exist_ok=True)
    photos = {k: Image.open(package_file(p, r)) for k, (p, r, _) in PHOTOS.items()}
    names = sorted(photos)
    records = []

    def save(name: str, img: Image.Image) -> str:
        rel = f"images/{name}.jpg"
        with open(os.path.join(folder, rel), "wb") as f:
            f.write(jpeg(img, rng))
        return rel

    for i in range(n_single):
        photo = names[i % len(names)]
        rel = save(f"{photo}_{i:03d}", realistic_crop(photos[photo], rng))
        prompt = SINGLE_PROMPTS[int(rng.integers(len(SINGLE_PROMPTS)))]
        caption = PHOTOS[photo][2][int(rng.integers(3))]
        human = prompt if "<image>" in prompt else f"<image>\n{prompt}"
        records.append(llava_record(f"single-{i:03d}", rel, human, caption))
    for j in range(n_multi):
        k = int(rng.integers(2, 4))
        chosen = [names[int(x)] for x in rng.choice(len(names), size=k, replace=False)]
        rels = [save(f"{p}_m{j:02d}_{n}", realistic_crop(photos[p], rng)) for n, p in enumerate(chosen)]
        answer = " ".join(f"Image {n + 1}: {PHOTOS[p][2][0]}" for n, p in enumerate(chosen))
        human = "\n".join("<image>" for _ in rels) + "\n" + MULTI_PROMPTS[j % len(MULTI_PROMPTS)]
        records.append(llava_record(f"multi-{j:02d}", rels, human, answer))
    doc = Image.open(package_file(DOCUMENT[0], DOCUMENT[1]))
    doc.save(os.path.join(folder, "images/page.png"))
    records.append(
        llava_record("document-0", "images/page.png", "<image>\nWhat kind of document is this?", DOCUMENT[2])
    )
    # two bad inputs, to show the accounting: a missing file and a truncated JPEG
    records.append(llava_record("bad-missing", "images/does_not_exist.jpg", f"<image>\n{DEFAULT_PROMPT}", "Missing."))
    good = open(os.path.join(folder, records[0]["image"]), "rb").read()
    with open(os.path.join(folder, "images/truncated.jpg"), "wb") as f:
        f.write(good[: len(good) // 2])
    records.append(llava_record("bad-truncated", "images/truncated.jpg", f"<image>\n{DEFAULT_PROMPT}", "Truncated."))
    return write_jsonl(folder, records)


def make_large_source(folder: str, n: int = 240, seed: int = 2) -> str:
    """A LLaVA JSONL over ``n`` large photos (the loader benchmark's large set): crops of the offline photos
    upscaled with LANCZOS to 2.0-4.2 MP (aspect 0.6-1.8), JPEG quality 85-95, one image per sample."""
    rng = np.random.default_rng(seed)
    os.makedirs(os.path.join(folder, "images"), exist_ok=True)
    photos = {k: Image.open(package_file(p, r)).convert("RGB") for k, (p, r, _) in PHOTOS.items()}
    names = sorted(photos)
    records = []
    for i in range(n):
        name = names[i % len(names)]
        img = photos[name]
        w, h = img.size
        aspect = float(np.exp(rng.uniform(np.log(0.6), np.log(1.8))))
        mp = rng.uniform(2.0e6, 4.2e6)
        tw = int(np.sqrt(mp * aspect))
        th = int(tw / aspect)
        cw = min(w, int(np.sqrt(w * h * rng.uniform(0.6, 1.0) * aspect)))
        ch = min(h, int(cw / aspect))
        x, y = int(rng.integers(0, w - cw + 1)), int(rng.integers(0, h - ch + 1))
        big = img.crop((x, y, x + cw, y + ch)).resize((tw, th), Image.Resampling.LANCZOS)
        rel = f"images/{name}_{i:04d}.jpg"
        big.save(os.path.join(folder, rel), "JPEG", quality=int(rng.integers(85, 96)))
        caption = PHOTOS[name][2][int(rng.integers(3))]
        records.append(llava_record(f"large-{i:04d}", rel, f"<image>\n{DEFAULT_PROMPT}", caption))
    return write_jsonl(folder, records)
