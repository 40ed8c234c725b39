"""Peak RSS of whole vlmdata commands at 1k, 10k and 100k samples: is memory flat in the sample count?

    PYTHONPATH=. /work/main/.venv/bin/python bench/rss.py [--sizes 1000,10000,100000] [--tmp DIR]

Each measurement is one subprocess; its peak resident set is ``ru_maxrss`` from ``os.wait4`` on that child
(Linux: the maximum over the process and the children it waited for, e.g. build workers). The input uses
TINY images (a few 48-96 px JPEGs of the offline photos, the same bytes copied to a file per sample) so that
100k samples build, synthesise and load in a few minutes on 2 cores; memory that grows with image size
(a batch's pixels) is therefore not what this checks: it checks what grows with the NUMBER of samples.

* ``build``: ``vlmdata build INPUT -o OUT --max-count 1000`` (default workers, Energon index included);
* ``synth``: ``vlmdata synth --profile P -n N --variants 8 --max-count 1000`` (P profiled from the 1k build;
  ``--variants 8`` bounds the image cache);
* ``loader``: one pass of ``make_loader(OUT, micro_batch_size=8, num_epochs=1, shuffle=True)`` over the
  dataset built at that size, in one process (workers 0); ``--loader-images shapes`` runs it without
  decoding (the index, the plan, tokenization and collation; not the pixels).

Prints a markdown table (MiB, and each size over the smallest) with the load average at start and end.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import numpy as np
from PIL import Image

from vlmdata.sources.photos import PHOTOS, llava_record, package_file

LOADER_PASS = r"""
import sys, warnings
warnings.filterwarnings("ignore")
from vlmdata.loaders.api import make_loader
n = 0
for b in make_loader(sys.argv[1], micro_batch_size=8, num_epochs=1, shuffle=True, seq_length=1024, images=sys.argv[2]):
    n += b["input_ids"].shape[0]
print(n)
"""


def tiny_jpegs(k: int = 6) -> list[bytes]:
    out = []
    rng = np.random.default_rng(0)
    for name in sorted(PHOTOS)[:k]:
        p, rel, _ = PHOTOS[name]
        im = Image.open(package_file(p, rel)).convert("RGB")
        side = int(rng.integers(48, 97))
        im.thumbnail((side, side))
        buf = io.BytesIO()
        im.save(buf, "JPEG", quality=85)
        out.append(buf.getvalue())
    return out


def make_input(folder: str, n: int, jpegs: list[bytes]) -> str:
    os.makedirs(os.path.join(folder, "images"), exist_ok=True)
    jsonl = os.path.join(folder, "data.jsonl")
    with open(jsonl, "w") as f:
        for i in range(n):
            rel = f"images/{i:07d}.jpg"
            with open(os.path.join(folder, rel), "wb") as im:
                im.write(jpegs[i % len(jpegs)])
            caption = f"A small photo, number {i}, of something worth describing in a sentence."
            f.write(json.dumps(llava_record(f"s{i}", rel, "<image>\nDescribe this image.", caption)) + "\n")
    return jsonl


def peak(argv: list[str], env: dict) -> tuple[float, float]:
    """(peak RSS MiB, wall s) of one subprocess."""
    t = time.perf_counter()
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    err = p.stderr.read().decode(errors="replace") if p.stderr else ""
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(argv[:4])} ... exited {p.returncode}: {err[-2000:]}")
    return ru.ru_maxrss / 1024, time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1000,10000,100000", help="sample counts (default 1000,10000,100000)")
    ap.add_argument("--tmp", default=None, help="folder for inputs and outputs (default: the system temp)")
    ap.add_argument("--skip", default="", help="comma list of measurements to skip: build,synth,loader")
    ap.add_argument(
        "--loader-images",
        default="decode",
        choices=("decode", "shapes"),
        help="the loader pass's images mode: decode (default) or shapes (no decode: what grows with the "
        "number of samples without the per-image compute, which Bridge's min_pixels upscale of "
        "tiny images makes slow)",
    )
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    skip = set(filter(None, args.skip.split(",")))
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])),
        "PYTHONWARNINGS": "ignore",
    }
    py = [sys.executable, "-m", "vlmdata"]
    load0 = os.getloadavg()
    rows: dict[str, dict[int, tuple[float, float]]] = {"build": {}, "synth": {}, "loader": {}}
    jpegs = tiny_jpegs()
    if args.tmp:
        os.makedirs(args.tmp, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=args.tmp, prefix="vlmdata-rss-") as tmp:
        profile = None
        for n in sizes:
            src = make_input(os.path.join(tmp, f"in{n}"), n, jpegs)
            out = os.path.join(tmp, f"ds{n}")
            rows["build"][n] = peak(py + ["build", src, "-o", out, "--max-count", "1000", "-q"], env)
            print(f"build {n}: {rows['build'][n][0]:.0f} MiB, {rows['build'][n][1]:.1f} s", flush=True)
            if profile is None:
                profile = os.path.join(tmp, "profile.json")
                peak(py + ["profile", out, "-o", profile, "-q"], env)
            if "synth" not in skip:
                rows["synth"][n] = peak(
                    py
                    + [
                        "synth",
                        "--profile",
                        profile,
                        "-n",
                        str(n),
                        "-o",
                        os.path.join(tmp, f"syn{n}"),
                        "--variants",
                        "8",
                        "--max-count",
                        "1000",
                        "-q",
                    ],
                    env,
                )
                print(f"synth {n}: {rows['synth'][n][0]:.0f} MiB, {rows['synth'][n][1]:.1f} s", flush=True)
            if "loader" not in skip:
                rows["loader"][n] = peak([sys.executable, "-c", LOADER_PASS, out, args.loader_images], env)
                print(f"loader {n}: {rows['loader'][n][0]:.0f} MiB, {rows['loader'][n][1]:.1f} s", flush=True)
            subprocess.run(["rm", "-rf", src, os.path.join(tmp, f"syn{n}")], check=False)
    load1 = os.getloadavg()
    head = "| command | " + " | ".join(f"{n:,} samples MiB (s)" for n in sizes) + f" | {sizes[-1]:,} / {sizes[0]:,} |"
    lines = ["", head, "|---|" + "---|" * (len(sizes) + 1)]
    for name, r in rows.items():
        if not r:
            continue
        cells = [f"{r[n][0]:.0f} ({r[n][1]:.0f} s)" for n in sizes]
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {r[sizes[-1]][0] / r[sizes[0]][0]:.2f}x |")
    foot = (
        f"peak RSS (ru_maxrss via wait4), tiny 48-96 px JPEGs; load average {load0[0]:.2f} at start, "
        f"{load1[0]:.2f} at end; {os.cpu_count()} cores"
    )
    lines += ["", foot]
    print("\n".join(lines))


if __name__ == "__main__":
    main()
