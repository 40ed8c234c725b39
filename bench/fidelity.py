"""Issue 3 goals, measured: profile a real photo check set, synthesize its twin, compare.

Check set: ``vlmdata.sources.photos.make_source`` with its own seed and size (not the tests' seeds or
sizes): real offline photographs cropped to random aspect ratios (0.6-1.8) and long sides
320-1280 px, JPEG q80-95 (15% 4:4:4), one- to three-image samples, one PNG page, two bad inputs.

Steps (one process, one run):
1. ``vlmdata profile`` of the LLaVA JSONL source (real bytes) -> real.json
2. ``vlmdata synth --profile real.json -n <rows>`` -> shards; ``vlmdata profile`` of them -> synth.json
3. ``vlmdata compare real.json synth.json`` -> KS per metric, decode median ratio (separate runs)
4. decode ratio again, interleaved: each real image and its synthetic twin (same profile row)
   decoded alternately, fastest of ``--repeats`` thread-CPU decodes each; median over images
5. throughput per core, side by side: real decode + Qwen3-VL preprocess (vlmdata.qwen.image,
   fast path and HF-exact path) vs the in-process ``SyntheticSource`` (fresh generation on one
   thread, and from its warm pool)

    . /work/venv/bin/activate && python bench/fidelity.py --markdown /tmp/fidelity.md
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import sys
import tempfile
import time

import numpy as np
import PIL
from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from vlmdata.dataset.manifest import shard_paths  # noqa: E402
from vlmdata.dataset.tar import iter_shard  # noqa: E402
from vlmdata.profile.compare import compare  # noqa: E402
from vlmdata.profile.measure import ProfileOptions, get_tokenizer, load_profile  # noqa: E402
from vlmdata.sources.photos import make_source  # noqa: E402


def cpu_decode_ms(data: bytes) -> float:
    t = time.thread_time_ns()
    with Image.open(io.BytesIO(data)) as im:
        im.load()
    return (time.thread_time_ns() - t) / 1e6


def rate(fn, items, min_seconds: float) -> float:
    """Items per CPU second of ``fn`` over ``items`` (cycled) on this thread: per-core throughput,
    unaffected by other processes taking the core away (thread CPU time, not wall clock)."""
    fn(items[0])
    n, t0 = 0, time.thread_time()
    while True:
        for it in items:
            fn(it)
            n += 1
        dt = time.thread_time() - t0
        if dt >= min_seconds:
            return n / dt


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--single", type=int, default=400, help="single-image samples in the check set (default 400)")
    ap.add_argument("--multi", type=int, default=80, help="multi-image samples in the check set (default 80)")
    ap.add_argument("--seed", type=int, default=20261, help="check-set seed (the tests use 0 and 7)")
    ap.add_argument("--synth-seed", type=int, default=5, help="synth seed")
    ap.add_argument("--repeats", type=int, default=5, help="decodes per image for the interleaved check")
    ap.add_argument("--seconds", type=float, default=3.0, help="seconds per throughput figure")
    ap.add_argument("--workdir", help="keep files here (default: a temporary folder)")
    ap.add_argument("--markdown", help="also write the result table here")
    args = ap.parse_args(argv)

    work = args.workdir or tempfile.mkdtemp(prefix="vlmdata-fidelity-")
    os.makedirs(work, exist_ok=True)
    t_all = time.perf_counter()
    src = make_source(os.path.join(work, "real"), n_single=args.single, n_multi=args.multi, seed=args.seed)
    tok = get_tokenizer(None)

    from vlmdata.cli.main import main as cli

    real_json, synth_json, synth_out = (os.path.join(work, n) for n in ("real.json", "synth.json", "synth"))
    t = time.perf_counter()
    assert cli(["profile", src, "-o", real_json, "-q", "--plot", os.path.join(work, "real.png")]) == 0
    t_profile = time.perf_counter() - t
    real = load_profile(real_json)
    rows = real["rows"]["stored_samples"]
    t = time.perf_counter()
    assert (
        cli(
            [
                "synth",
                "--profile",
                real_json,
                "-n",
                str(rows),
                "-o",
                synth_out,
                "--seed",
                str(args.synth_seed),
                "--overwrite",
                "-q",
            ]
        )
        == 0
    )
    t_synth = time.perf_counter() - t
    assert cli(["profile", synth_out, "-o", synth_json, "-q"]) == 0
    synth = load_profile(synth_json)
    res = compare(real, synth)
    cli(["compare", real_json, synth_json, "--plot", os.path.join(work, "compare.png")])

    # ---- interleaved decode check: real image i and its twin (same row, same position)
    from vlmdata.profile.measure import open_input

    _, real_samples, _ = open_input(src, ProfileOptions())
    real_images = [s.images for s in real_samples]
    twins: list[tuple[bytes, bytes]] = []
    bytes_err = []
    for path in shard_paths(synth_out):
        for raw in iter_shard(path):
            meta = json.loads(raw.files["json"])
            row = meta["synthetic"]["row"]
            for j, info in enumerate(meta["images"]):
                twins.append((real_images[row][j], raw.files[info["file"]]))
                bytes_err.append(len(raw.files[info["file"]]) / len(real_images[row][j]) - 1)
    for r, s in twins[:5]:
        cpu_decode_ms(r), cpu_decode_ms(s)
    ratios, rms, sms = [], [], []
    for r, s in twins:
        a = min(cpu_decode_ms(r) for _ in range(args.repeats))
        b = min(cpu_decode_ms(s) for _ in range(args.repeats))
        rms.append(a)
        sms.append(b)
        ratios.append(b / a)
    inter_ratio = float(np.median(sms) / np.median(rms))

    # ---- throughput per core: real decode + preprocess vs in-process synthetic source
    from vlmdata.qwen.image import preprocess_image
    from vlmdata.synthetic.source import SyntheticSource

    flat_real = [r for r, _ in twins]
    fast = rate(lambda b: preprocess_image(b, "qwen3-vl"), flat_real, args.seconds)
    exact = rate(lambda b: preprocess_image(b, "qwen3-vl", draft=False), flat_real, args.seconds)
    decode_only = rate(lambda b: Image.open(io.BytesIO(b)).load(), flat_real, args.seconds)
    ss = SyntheticSource(real, seed=args.synth_seed + 1, tokenizer=tok, threads=0)  # one thread
    ss.get(0)  # field bank and the first size-model calibrations
    t = time.thread_time()
    cold = ss.take(rows)  # first epoch: every image generated (render + encode to target) on this thread
    cold_rate = sum(len(s.images) for s in cold) / (time.thread_time() - t)
    t, n = time.thread_time(), 0
    while time.thread_time() - t < args.seconds:
        for s in ss.take(rows, start=rows):  # the second epoch: same rows, images from the pool
            n += len(s.images)
    warm_rate = n / (time.thread_time() - t)

    ks = {m["metric"]: m for m in res["metrics"]}
    goals = [
        (
            "KS visual tokens per sample",
            ks["visual_tokens_per_sample"]["ks"],
            "<= 0.05",
            ks["visual_tokens_per_sample"]["ks"] <= 0.05,
        ),
        ("KS pixels per image", ks["pixels_per_image"]["ks"], "<= 0.05", ks["pixels_per_image"]["ks"] <= 0.05),
        ("KS bytes per image", ks["bytes_per_image"]["ks"], "<= 0.10", ks["bytes_per_image"]["ks"] <= 0.10),
        (
            "decode median ratio synth/real (profiles, separate runs)",
            ks["decode_ms_per_image"]["ratio"],
            "0.9-1.1",
            0.9 <= ks["decode_ms_per_image"]["ratio"] <= 1.1,
        ),
        (
            "decode median ratio synth/real (interleaved twins)",
            round(inter_ratio, 4),
            "0.9-1.1",
            0.9 <= inter_ratio <= 1.1,
        ),
        (
            "in-process generation (warm pool) / real decode+preprocess (fast path), per core",
            round(warm_rate / fast, 2),
            ">= 2",
            warm_rate / fast >= 2,
        ),
    ]
    lines = [
        f"Check set: vlmdata.sources.photos.make_source(n_single={args.single}, n_multi={args.multi}, seed={args.seed}): "
        f"{real['summary']['samples']} samples, {real['summary']['images']} images "
        f"(skipped {real['summary']['skipped']}); formats {real['summary']['formats']}, subsampling "
        f"{real['summary']['subsampling']}; synth seed {args.synth_seed}, {rows} samples.",
        "",
        "| metric | median real | median synth | KS | threshold | result |",
        "|---|---|---|---|---|---|",
    ]
    for m in res["metrics"]:
        th = m["threshold"]
        th = f"ratio {th[0]}-{th[1]} (got {m['ratio']})" if isinstance(th, list) else f"KS <= {th}"
        lines.append(
            f"| {m['metric']} | {m['median_a']:.4g} | {m['median_b']:.4g} | {m['ks']} | {th} | {m['status']} |"
        )
    be = np.abs(np.array(bytes_err))
    lines += [
        "",
        f"Bytes per image vs its target: max |error| {be.max() * 100:.1f}%, mean {be.mean() * 100:.1f}%, "
        f"{(be <= 0.10).mean() * 100:.1f}% within 10%.",
        f"Interleaved twins ({len(twins)} pairs, fastest of {args.repeats} thread-CPU decodes each): median real "
        f"{np.median(rms):.3f} ms, synth {np.median(sms):.3f} ms, ratio of medians {inter_ratio:.3f}; per-pair ratio "
        f"p10/p50/p90 {np.percentile(ratios, 10):.3f}/{np.median(ratios):.3f}/{np.percentile(ratios, 90):.3f}.",
        "",
        "| throughput per core (images per thread-CPU second) | images/s |",
        "|---|---|",
        f"| real decode only (PIL) | {decode_only:.0f} |",
        f"| real decode + Qwen3-VL preprocess, vlmdata fast path (draft) | {fast:.0f} |",
        f"| real decode + Qwen3-VL preprocess, HF-exact path | {exact:.0f} |",
        f"| SyntheticSource, fresh generation (first epoch, one thread, text included) | {cold_rate:.0f} |",
        f"| SyntheticSource, warm pool (later epochs, text included) | {warm_rate:.0f} |",
        f"| warm / fast-path real | {warm_rate / fast:.1f}x |",
        f"| fresh / fast-path real | {cold_rate / fast:.2f}x |",
        "",
        "| goal | value | target | met |",
        "|---|---|---|---|",
        *[f"| {g} | {v} | {t} | {'yes' if ok else 'NO'} |" for g, v, t, ok in goals],
        "",
        f"Python {platform.python_version()}, Pillow {PIL.__version__}, numpy {np.__version__}, {os.cpu_count()} CPUs; "
        f"profile {t_profile:.1f} s, synth {t_synth:.1f} s, whole run {time.perf_counter() - t_all:.0f} s; "
        f"files in {work}",
    ]
    text = "\n".join(lines)
    print(text)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text + "\n")
    return 0 if all(ok for *_, ok in goals) else 1


if __name__ == "__main__":
    sys.exit(main())
