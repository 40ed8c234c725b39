"""Images per second: batched nvJPEG decode on the GPU against CPU decode, and the whole image path.

    python bench/gpu_decode.py [--rounds 5] [--batch 8 64] [--large 120]

Every JPEG of the embedded sample data (real photographs, 320-1280 px), and with ``--large N`` also N large
photos (2.0-4.2 MP, ``vlmdata.sources.photos.make_large_source``), decoded and preprocessed for Qwen3-VL at
Bridge's pixel limits. Contenders, interleaved in rotating order over ``--rounds`` rounds, per image set:

- ``cpu decode``: Pillow decode of each image, one core (thread CPU time per image);
- ``cpu image path``: vlmdata's fast CPU path (decode + resize + normalise + patchify), one core;
- ``cpu host share pillow``: what a loader worker does per image with ``image_decoder="pillow"``
  (``device_images.defer_image``: header, decode at reduced DCT scale where allowed, uint8 RGB), one core;
- ``gpu decode bN``: ``torchvision.io.decode_jpeg(list, device="cuda")`` on batches of N (wall time with a
  device sync, so it is what a training process waits for);
- ``gpu image path bN``: the loader's ``image_device`` path (``device_images.finish_batch``): batched nvJPEG,
  resize, normalise, patchify on the GPU;
- ``gpu finish pillow bN``: ``finish_batch`` of host-decoded images (``image_decoder="pillow"``): the copy to
  the device, resize, normalise, patchify (wall time with a device sync); ``pinned``: the images in pinned
  memory first, as a DataLoader with ``pin_memory=True`` hands them over (the pinning is not timed).

Prints min/median/max images/s per contender and the machine's load average.
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import sys
import time

import numpy as np
import torch
from PIL import Image

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from vlmdata import sample_data_path  # noqa: E402
from vlmdata.dataset.reader import ShardReader, scan_shard  # noqa: E402
from vlmdata.loaders.api import resolve_shards  # noqa: E402
from vlmdata.loaders.device_images import DEFERRED_KEY, defer_image, finish_batch  # noqa: E402
from vlmdata.qwen.spec import BRIDGE_MAX_PIXELS, BRIDGE_MIN_PIXELS, get_spec  # noqa: E402
from vlmdata.qwen.vision import preprocess_any  # noqa: E402

SPEC = get_spec("qwen3-vl")


def jpegs() -> list[bytes]:
    out = []
    for path in resolve_shards(sample_data_path()):
        reader = ShardReader([path])
        for ref in scan_shard(path):
            files = reader.read(ref)
            out += [b for ext, b in files.items() if ext.endswith(".jpg")]
        reader.close()
    return out


def cpu_decode(data: list[bytes]) -> float:
    t = time.thread_time()
    for b in data:
        with Image.open(io.BytesIO(b)) as im:
            im.load()
    return len(data) / (time.thread_time() - t)


def cpu_path(data: list[bytes]) -> float:
    t = time.thread_time()
    for b in data:
        preprocess_any(b, SPEC, BRIDGE_MIN_PIXELS, BRIDGE_MAX_PIXELS)
    return len(data) / (time.thread_time() - t)


def cpu_host_share(data: list[bytes]) -> float:
    t = time.thread_time()
    for b in data:
        defer_image(b, SPEC, BRIDGE_MIN_PIXELS, BRIDGE_MAX_PIXELS, decoder="pillow")
    return len(data) / (time.thread_time() - t)


def gpu_decode(data: list[bytes], n: int) -> float:
    from torchvision.io import ImageReadMode, decode_jpeg

    tensors = [torch.frombuffer(bytearray(b), dtype=torch.uint8) for b in data]
    torch.cuda.synchronize()
    t = time.perf_counter()
    for i in range(0, len(tensors), n):
        decode_jpeg(tensors[i : i + n], mode=ImageReadMode.RGB, device="cuda")
    torch.cuda.synchronize()
    return len(data) / (time.perf_counter() - t)


def gpu_path(data: list[bytes], n: int, decoder: str = "nvjpeg", pinned: bool = False) -> float:
    batches = []
    for i in range(0, len(data), n):
        items = [defer_image(b, SPEC, BRIDGE_MIN_PIXELS, BRIDGE_MAX_PIXELS, decoder=decoder) for b in data[i : i + n]]
        rows = sum(pv.shape[0] for pv, _, _ in items)
        vis = type("V", (), {})()
        vis.pixel_values = torch.zeros((1, 1)).expand(rows, SPEC.patch_dim)
        deferred = [it for _, _, it in items]
        if pinned:  # as the DataLoader hands them over with pin_memory=True
            deferred = [
                (k, p.pin_memory() if isinstance(p, torch.Tensor) else p, size, sc) for k, p, size, sc in deferred
            ]
        batches.append({"visual_inputs": vis, DEFERRED_KEY: deferred})
    torch.cuda.synchronize()
    t = time.perf_counter()
    for b in batches:
        finish_batch(b, SPEC, "cuda")
    torch.cuda.synchronize()
    return len(data) / (time.perf_counter() - t)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    ap.add_argument("--batch", type=int, nargs="+", default=[8, 64], help="GPU batch sizes (default 8 64)")
    ap.add_argument("--large", type=int, default=0, help="also N large photos (2.0-4.2 MP; default 0: none)")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    sets = {"sample data": jpegs()}
    if args.large:
        import tempfile

        from vlmdata.sources.photos import make_large_source

        folder = tempfile.mkdtemp()
        make_large_source(folder, args.large)
        files = sorted(os.listdir(os.path.join(folder, "images")))
        sets["large photos"] = [open(os.path.join(folder, "images", f), "rb").read() for f in files]
    for label, data in sets.items():
        px = [Image.open(io.BytesIO(b)).size for b in data]
        print(f"== {label}: {len(data)} JPEGs, median {int(np.median([w * h for w, h in px]))} pixels")
        print(f"load {os.getloadavg()}")
        contenders = {
            "cpu decode (1 core)": lambda data=data: cpu_decode(data),
            "cpu image path (1 core)": lambda data=data: cpu_path(data),
            "cpu host share pillow (1 core)": lambda data=data: cpu_host_share(data),
        }
        if torch.cuda.is_available():
            for n in args.batch:
                contenders[f"gpu decode b{n}"] = lambda n=n, data=data: gpu_decode(data, n)
                contenders[f"gpu image path b{n}"] = lambda n=n, data=data: gpu_path(data, n)
                contenders[f"gpu finish pillow b{n}"] = lambda n=n, data=data: gpu_path(data, n, "pillow")
                contenders[f"gpu finish pillow pinned b{n}"] = lambda n=n, data=data: gpu_path(data, n, "pillow", True)
        for f in contenders.values():  # warm: CUDA context, nvJPEG handles, kernels, page cache
            f()
        rates: dict[str, list[float]] = {k: [] for k in contenders}
        names = list(contenders)
        for r in range(args.rounds):
            for k in names[r % len(names) :] + names[: r % len(names)]:
                rates[k].append(contenders[k]())
        for k, v in rates.items():
            print(f"{k:30s} images/s min {min(v):9.0f}  median {statistics.median(v):9.0f}  max {max(v):9.0f}")
        print(f"load {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
