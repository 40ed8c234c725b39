"""Per-image cost of the Qwen-VL image path on one core: encoded JPEG bytes -> pixel_values, grid_thw.

    OMP_NUM_THREADS=1 python bench/image_path.py [--model qwen3-vl] [--repeat 3]

Rows: the HF PIL-backend image processor (Qwen2VLImageProcessorPil, what Bridge gets without
torchvision), the HF torchvision backend (Qwen2VLImageProcessor; skipped when torchvision is not
installed), our path in exact mode (draft=False: bit-identical to HF PIL), with torch's uint8 resize
only, and the default fast mode (draft=True: JPEG DCT-domain draft decode + torch resize).
Every variant starts from the same JPEG bytes and ends with torch tensors. Photos are the
offline sample photos (scikit-image, matplotlib, scikit-learn), re-encoded as JPEG q90:
"640px" = long side 640 (COCO-like), "1080p" = 1920x1080 mosaic of native-resolution crops,
"12MP" = 4032x3024 mosaic (a phone photo; the only class where draft decoding kicks in at
Bridge's max_pixels). Min/max pixels are Bridge's (200704 / 1003520).
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402
from PIL import Image  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from vlmdata.qwen.image import preprocess_image  # noqa: E402
from vlmdata.qwen.spec import build_image_processor  # noqa: E402

PHOTOS = [
    ("skimage", "data/astronaut.png"),
    ("skimage", "data/coffee.png"),
    ("skimage", "data/chelsea.png"),
    ("skimage", "data/rocket.jpg"),
    ("matplotlib", "mpl-data/sample_data/grace_hopper.jpg"),
    ("sklearn", "datasets/images/china.jpg"),
]


def load_photos() -> list[Image.Image]:
    import importlib.util

    out = []
    for pkg, rel in PHOTOS:
        root = list(importlib.util.find_spec(pkg).submodule_search_locations)[0]
        out.append(Image.open(os.path.join(root, rel)).convert("RGB"))
    return out


def mosaic(photos: list[Image.Image], w: int, h: int, tile: tuple[int, int] = (320, 240)) -> Image.Image:
    """A w x h image tiled with native-resolution crops (real high-frequency detail, no upscaling)."""
    tw, th = tile
    m = Image.new("RGB", (w, h))
    k = 0
    for y in range(0, h, th):
        for x in range(0, w, tw):
            p = photos[k % len(photos)]
            ox, oy = (k * 37) % (p.size[0] - tw), (k * 53) % (p.size[1] - th)
            m.paste(p.crop((ox, oy, ox + tw, oy + th)), (x, y))
            k += 1
    return m


def jpeg(img: Image.Image, quality: int = 90) -> bytes:
    b = io.BytesIO()
    img.save(b, "JPEG", quality=quality)
    return b.getvalue()


def image_sets(photos: list[Image.Image]) -> dict[str, list[bytes]]:
    small = []
    for p in photos:
        s = 640 / max(p.size)
        small.append(jpeg(p.resize((round(p.size[0] * s), round(p.size[1] * s)), Image.Resampling.BICUBIC)))
    hd = [jpeg(mosaic(photos[i:] + photos[:i], 1920, 1080)) for i in range(3)]
    mp12 = [jpeg(mosaic(photos[i:] + photos[:i], 4032, 3024)) for i in range(2)]
    return {"640px": small, "1080p": hd, "12MP": mp12}


def variants(model: str) -> dict[str, object]:
    hf_pil = build_image_processor(model, backend="pil")
    v = {"HF PIL processor": lambda b: hf_pil(Image.open(io.BytesIO(b)), return_tensors="pt")}
    try:
        hf_tv = build_image_processor(model, backend="torchvision")
        v["HF torchvision processor"] = lambda b: hf_tv(Image.open(io.BytesIO(b)), return_tensors="pt")
    except RuntimeError as e:
        print(f"# HF torchvision backend skipped: {e}")

    def ours(draft, resampler=None):
        def f(b):
            pv, g = preprocess_image(b, model, draft=draft, resampler=resampler)
            return torch.from_numpy(pv), torch.tensor([g])

        return f

    v["fast exact (draft=False)"] = ours(False)
    v["fast, torch resize, no draft"] = ours(False, "torch")
    v["fast (draft=True)"] = ours(True)
    v["decode only (PIL, full)"] = lambda b: Image.open(io.BytesIO(b)).convert("RGB")
    return v


def time_ms(fn, items: list[bytes], repeat: int, clock=time.perf_counter) -> float:
    for b in items:  # warm-up
        fn(b)
    best = float("inf")
    for _ in range(repeat):
        t = clock()
        for b in items:
            fn(b)
        best = min(best, (clock() - t) / len(items))
    return best * 1e3


def gpu_decode(sets: dict[str, list[bytes]], batch: int = 64) -> None:
    """Throughput of decode_jpeg_gpu (nvJPEG, batched), when torchvision and CUDA are present."""
    from vlmdata.qwen.image import decode_jpeg_gpu

    for k, items in sets.items():
        data = (items * batch)[:batch]
        try:
            decode_jpeg_gpu(data)
        except RuntimeError as e:
            print(f"# decode_jpeg_gpu skipped: {e}")
            return
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(5):
            decode_jpeg_gpu(data)
        torch.cuda.synchronize()
        dt = (time.perf_counter() - t) / (5 * batch)
        print(f"decode_jpeg_gpu {k:6s} batch {batch}: {dt * 1e3:.3f} ms/image, {1 / dt:,.0f} img/s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="qwen3-vl")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cpu-time", action="store_true", help="process CPU time instead of wall time (busy hosts)")
    ap.add_argument("--gpu-decode", action="store_true", help="also time decode_jpeg_gpu (torchvision + CUDA)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    sets = image_sets(load_photos())
    vs = variants(args.model)
    clock = time.process_time if args.cpu_time else time.perf_counter
    res = {n: {k: time_ms(fn, items, args.repeat, clock) for k, items in sets.items()} for n, fn in vs.items()}
    cols = list(sets)
    clk = "CPU" if args.cpu_time else "wall"
    print(f"# {args.model}, {clk} ms per image, torch threads={torch.get_num_threads()}, best of {args.repeat}")
    print(f"{'variant':28s}" + "".join(f"{c:>10s}" for c in cols))
    for name, r in res.items():
        print(f"{name:28s}" + "".join(f"{r[c]:10.2f}" for c in cols))
    base = res["HF PIL processor"]
    print("# speed-up over the HF PIL processor")
    for name in [n for n in res if n.startswith("fast")]:
        print(f"{name:28s}" + "".join(f"{base[c] / res[name][c]:9.1f}x" for c in cols))
    print("# sizes: " + ", ".join(f"{k}: {Image.open(io.BytesIO(v[0])).size}" for k, v in sets.items()))
    if args.gpu_decode:
        gpu_decode(sets)


if __name__ == "__main__":
    main()
