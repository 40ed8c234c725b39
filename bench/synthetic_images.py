"""Synthetic images vs real photographs: decode cost, bytes, generation throughput.

Builds a check set from the photographs shipped inside scikit-image, matplotlib and
scikit-learn (offline), cropped to COCO-like aspect ratios, downscaled to a long side of at most
640 px and re-encoded at quality 85-95 (mostly 4:2:0; one 4:4:4, one 4:2:2, one progressive).
For each real image it makes a synthetic twin of the same pixel size, byte size, subsampling,
progressive mode and estimated quality (``jpeg_info``), plus uniform noise and a flat colour of
the same size and settings as reference points, and measures side by side:

* median full-decode time (``Image.open(...).load()``, thread CPU time, interleaved repeats);
* bytes error of the twin;
* throughput: fresh synthetic generation (one thread), pool-served images, and real
  decode + Qwen3-VL-style preprocessing (smart_resize at Bridge's pixel limits, bicubic resize,
  normalise, patchify), all single-threaded images/s.

Run: ``python bench/synthetic_images.py [--repeats 40] [--markdown out.md]``
"""

from __future__ import annotations

import argparse
import io
import os
import platform
import statistics
import sys
import time

import numpy as np
from PIL import Image

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from vlmdata.synthetic import ImagePool, SyntheticImage, encode, jpeg_info  # noqa: E402

BRIDGE_MIN_PIXELS, BRIDGE_MAX_PIXELS = 200704, 1003520


def photo_paths() -> list[tuple[str, str]]:
    import matplotlib
    import skimage
    import sklearn

    sk = os.path.join(os.path.dirname(skimage.__file__), "data")
    sl = os.path.join(os.path.dirname(sklearn.__file__), "datasets", "images")
    mp = os.path.join(matplotlib.get_data_path(), "sample_data")
    names = [
        (sk, "astronaut.png"),
        (sk, "coffee.png"),
        (sk, "chelsea.png"),
        (sk, "rocket.jpg"),
        (sk, "hubble_deep_field.jpg"),
        (sk, "motorcycle_left.png"),
        (sk, "retina.jpg"),
        (mp, "grace_hopper.jpg"),
        (sl, "china.jpg"),
        (sl, "flower.jpg"),
    ]
    return [(n.split(".")[0], os.path.join(d, n)) for d, n in names]


# (H/W aspect, quality, subsampling, progressive) per photo: COCO-like shapes and settings
SETTINGS = [
    (0.75, 90, "4:2:0", False),
    (0.667, 85, "4:2:0", False),
    (0.75, 92, "4:2:0", False),
    (0.667, 95, "4:2:0", False),
    (1.0, 88, "4:2:0", False),
    (0.6, 90, "4:2:0", False),
    (1.33, 93, "4:4:4", False),
    (1.25, 87, "4:2:2", False),
    (0.667, 91, "4:2:0", True),
    (0.75, 94, "4:2:0", False),
]


def check_set() -> list[dict]:
    out = []
    for (name, path), (aspect, q, ss, prog) in zip(photo_paths(), SETTINGS):
        im = Image.open(path).convert("RGB")
        w, h = im.size
        if h / w > aspect:  # centre crop to the aspect
            nh = round(w * aspect)
            im = im.crop((0, (h - nh) // 2, w, (h - nh) // 2 + nh))
        else:
            nw = round(h / aspect)
            im = im.crop(((w - nw) // 2, 0, (w - nw) // 2 + nw, h))
        s = 640 / max(im.size)
        if s < 1:
            im = im.resize((round(im.size[0] * s), round(im.size[1] * s)), Image.LANCZOS)
        data = encode(im, "JPEG", q, ss, prog)
        out.append({"name": name, "data": data, "size": im.size, "quality": q, "subsampling": ss, "progressive": prog})
    return out


def decode(data: bytes) -> Image.Image:
    im = Image.open(io.BytesIO(data))
    im.load()
    return im


def median_decode_ms(blobs: list[bytes], repeats: int) -> list[float]:
    """Median thread-CPU ms per full decode of each blob, repeats interleaved across blobs."""
    times: list[list[float]] = [[] for _ in blobs]
    for b in blobs:
        decode(b)  # warm
    for _ in range(repeats):
        for i, b in enumerate(blobs):
            t = time.thread_time_ns()
            decode(b)
            times[i].append((time.thread_time_ns() - t) / 1e6)
    return [statistics.median(t) for t in times]


def smart_resize(
    h: int, w: int, factor: int = 32, min_pixels: int = BRIDGE_MIN_PIXELS, max_pixels: int = BRIDGE_MAX_PIXELS
) -> tuple[int, int]:
    import math

    hb, wb = round(h / factor) * factor, round(w / factor) * factor
    if hb * wb > max_pixels:
        b = math.sqrt(h * w / max_pixels)
        hb, wb = max(factor, math.floor(h / b / factor) * factor), max(factor, math.floor(w / b / factor) * factor)
    elif hb * wb < min_pixels:
        b = math.sqrt(min_pixels / (h * w))
        hb, wb = math.ceil(h * b / factor) * factor, math.ceil(w * b / factor) * factor
    return hb, wb


def preprocess(im: Image.Image, patch: int = 16, merge: int = 2) -> np.ndarray:
    """Qwen3-VL-style: smart_resize, bicubic resize, normalise (mean=std=0.5), patchify (t=2)."""
    h, w = smart_resize(im.height, im.width, patch * merge)
    a = np.asarray(im.convert("RGB").resize((w, h), Image.BICUBIC), dtype=np.float32)
    a = (a * (1 / 127.5) - 1.0).transpose(2, 0, 1)  # (x/255 - 0.5) / 0.5
    gh, gw = h // patch, w // patch
    a = a.reshape(3, gh // merge, merge, patch, gw // merge, merge, patch).transpose(1, 4, 2, 5, 0, 3, 6)
    a = np.repeat(a.reshape(gh * gw, 3, 1, patch, patch), 2, axis=2)
    return a.reshape(gh * gw, 3 * 2 * patch * patch)


def rate(fn, items, min_seconds: float = 2.0) -> float:
    """Images per thread-CPU second of ``fn`` over ``items``, cycled for at least min_seconds."""
    n, t0 = 0, time.thread_time()
    while True:
        for it in items:
            fn(it)
            n += 1
        el = time.thread_time() - t0
        if el >= min_seconds:
            return n / el


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=40, help="decodes per image for the median")
    ap.add_argument("--seconds", type=float, default=2.0, help="minimum CPU seconds per throughput figure")
    ap.add_argument("--markdown", help="also write the tables as markdown to this file")
    args = ap.parse_args(argv)

    t = time.perf_counter()
    reals = check_set()
    rng = np.random.default_rng(0)
    rows = []
    specs = []
    gen_t0 = time.perf_counter()
    from vlmdata.synthetic.pixels import default_bank

    default_bank()
    setup_s = time.perf_counter() - gen_t0
    for i, r in enumerate(reals):
        info = jpeg_info(r["data"])
        w, h = r["size"]
        spec = SyntheticImage(
            w, h, len(r["data"]), info["subsampling"], info["progressive"], quality=info["quality_estimate"]
        )
        specs.append(spec)
        syn = spec.encode(seed=1000 + i)
        noise = encode(
            Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)),
            "JPEG",
            r["quality"],
            r["subsampling"],
            r["progressive"],
        )
        flat = encode(
            Image.new("RGB", (w, h), (120, 140, 90)), "JPEG", r["quality"], r["subsampling"], r["progressive"]
        )
        sinfo = jpeg_info(syn.data)
        rows.append({**r, "info": info, "syn": syn, "noise": noise, "flat": flat, "sinfo": sinfo})
    prep_s = time.perf_counter() - t

    blobs = [b for row in rows for b in (row["data"], row["syn"].data, row["noise"], row["flat"])]
    ms = median_decode_ms(blobs, args.repeats)
    lines = []
    hdr = (
        "| image | size | q (est) | subs | real KB | synth KB | bytes err | synth q | decode real ms | "
        "synth ms | ratio | noise ms | flat ms |"
    )
    lines += [hdr, "|" + "---|" * (hdr.count("|") - 1)]
    ratios, errs = [], []
    for k, row in enumerate(rows):
        mr, msy, mn, mf = ms[4 * k : 4 * k + 4]
        ratio = msy / mr
        ratios.append(ratio)
        errs.append(row["syn"].ratio - 1)
        assert row["sinfo"]["subsampling"] == row["subsampling"]
        lines.append(
            f"| {row['name']} | {row['size'][0]}x{row['size'][1]} | {row['quality']} ({row['info']['quality_estimate']}) "
            f"| {row['subsampling']}{' prog' if row['progressive'] else ''} | {len(row['data']) / 1e3:.1f} | "
            f"{len(row['syn'].data) / 1e3:.1f} | {errs[-1]:+.1%} | {row['syn'].quality} | {mr:.2f} | {msy:.2f} | "
            f"{ratio:.2f} | {mn:.2f} | {mf:.2f} |"
        )
    summary = (
        f"decode ratio synth/real: median {statistics.median(ratios):.2f}, range "
        f"[{min(ratios):.2f}, {max(ratios):.2f}], {sum(0.9 <= r <= 1.1 for r in ratios)}/{len(ratios)} "
        f"within [0.9, 1.1]; bytes error max |{max(abs(e) for e in errs):.1%}|; "
        f"noise/real decode median {statistics.median(ms[4 * k + 2] / ms[4 * k] for k in range(len(rows))):.2f}, "
        f"flat/real {statistics.median(ms[4 * k + 3] / ms[4 * k] for k in range(len(rows))):.2f}"
    )

    # throughput, one thread, CPU seconds
    real_blobs = [r["data"] for r in rows]
    real_rate = rate(lambda b: preprocess(decode(b)), real_blobs, args.seconds)
    decode_rate = rate(decode, real_blobs, args.seconds)
    seeds = iter(range(10**9))
    fresh_rate = rate(lambda s: s.generate(next(seeds)), specs, args.seconds)
    pool = ImagePool(slots=8)
    pool.prefill(specs)
    pool_rate = rate(lambda s: pool.get(s, next(seeds)), specs, args.seconds)
    tput = [
        "| figure (one core) | images/s |",
        "|---|---|",
        f"| real JPEG decode | {decode_rate:.0f} |",
        f"| real JPEG decode + Qwen3-VL preprocess | {real_rate:.0f} |",
        f"| synthetic fresh generation (render + encode to target) | {fresh_rate:.0f} |",
        f"| synthetic from a warm ImagePool (slots=8) | {pool_rate:.0f} |",
        f"| fresh generation / (decode + preprocess) | {fresh_rate / real_rate:.2f}x |",
    ]
    env = (
        f"Python {platform.python_version()}, Pillow {Image.__version__} "
        f"({'libjpeg-turbo' if _turbo() else 'libjpeg'}), numpy {np.__version__}, {os.cpu_count()} CPUs; "
        f"check set + twins built in {prep_s:.1f} s (field bank {setup_s:.1f} s)"
    )
    text = "\n".join(lines + ["", summary, ""] + tput + ["", env])
    print(text)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text + "\n")
    return 0


def _turbo() -> bool:
    from PIL import features

    return bool(features.check_feature("libjpeg_turbo"))


if __name__ == "__main__":
    sys.exit(main())
