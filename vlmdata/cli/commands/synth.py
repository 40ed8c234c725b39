"""vlmdata synth --profile profile.json -n N -o OUT | vlmdata synth --mock imagefree|bridge-noise -n N -o OUT"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

from rich.table import Table

from vlmdata.cli.args import cli_flags, parse_size
from vlmdata.cli.console import EXIT_OK, UserError, counts, human_bytes, out, print_json, progress
from vlmdata.dataset.images import DEFAULT_MAX_IMAGE_PIXELS, MAX_ASPECT_RATIO
from vlmdata.ingest import BuildError, write_dataset
from vlmdata.ingest.engines import ENGINES, EngineError
from vlmdata.profile.measure import ProfileError, get_tokenizer, load_profile
from vlmdata.synthetic.mocks import IMAGEFREE_ANSWER_TOKENS, IMAGEFREE_PROMPT_TOKENS, MOCKS


def add_parser(sub):
    p = sub.add_parser(
        "synth",
        help="synthetic shards from a profile, or the mock data of today's benchmarks",
        description=(
            'Write shards in the `vlmdata build` format (manifest kind "synth", each KEY.json\'s "synthetic" set):\n'
            "  --profile P: rows of the profile's joint distribution; every image generated to its row's size, bytes\n"
            "      (within 10%), format, quality and chroma subsampling, photo-like pixels; text to the exact token counts\n"
            "  --mock bridge-noise: Megatron Bridge's MockVLMSFTDatasetConfig data (256x256 uniform noise, stored as\n"
            "      lossless PNG; prompt 'Describe this image.'; 10-29 words of Bridge's vocabulary)\n"
            "  --mock imagefree: text only, text lengths from --profile or --prompt-tokens/--answer-tokens\n"
            "Byte-identical output for the same arguments and seed (whatever --workers)."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--profile", help="profile.json (from `vlmdata profile`)")
    p.add_argument("--mock", choices=MOCKS, help="write mock data instead of a profile's twin")
    p.add_argument("-n", "--samples", type=int, required=True, help="samples to write (> 0)")
    p.add_argument("-o", "--out", required=True, help="output folder (must be empty unless --overwrite)")
    p.add_argument("--seed", type=int, default=0, help="seed (default 0)")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="generation threads (default: all cores)")
    p.add_argument(
        "--variants",
        type=int,
        default=0,
        help="distinct images per profile row across epochs when -n exceeds the rows (0 = always new; default 0)",
    )
    p.add_argument("--tokenizer", help="tokenizer folder (default: the profile's, else the shipped Qwen tokenizer)")
    p.add_argument(
        "--prompt-tokens",
        type=int,
        default=IMAGEFREE_PROMPT_TOKENS,
        help=f"imagefree without --profile: prompt tokens per sample (default {IMAGEFREE_PROMPT_TOKENS})",
    )
    p.add_argument(
        "--answer-tokens",
        type=int,
        default=IMAGEFREE_ANSWER_TOKENS,
        help=f"imagefree without --profile: answer tokens per sample (default {IMAGEFREE_ANSWER_TOKENS})",
    )
    p.add_argument("--image-size", default="256x256", help="bridge-noise: WIDTHxHEIGHT (default 256x256, Bridge's)")
    p.add_argument("--num-images", type=int, default=1, help="bridge-noise: images per sample (default 1)")
    p.add_argument("--num-base-examples", type=int, default=1000, help="bridge-noise: distinct examples (default 1000)")
    p.add_argument("--prefix", default="shard", help="shard file name prefix (default: shard)")
    p.add_argument("--max-count", type=int, default=1000, help="samples per shard at most (default 1000)")
    p.add_argument(
        "--max-size", type=parse_size, default="512MiB", help="bytes per shard at most (default 512MiB; 0 = none)"
    )
    p.add_argument("--overwrite", action="store_true", help="replace a non-empty OUT")
    p.add_argument(
        "--engine",
        choices=ENGINES,
        default=None,
        help="run the shard writes on 'local' processes or on Ray ('ray'; pip install 'vlmdata[ray]'); "
        "samples are generated in this process either way (default: inline)",
    )
    p.add_argument("--address", help="with --engine ray: an existing Ray cluster ('auto', 'ray://head:10001')")
    p.add_argument("--json", action="store_true", help="print the manifest summary as JSON")
    return p


def _size(text: str) -> tuple[int, int]:
    w, sep, h = text.lower().partition("x")
    try:
        size = (int(w), int(h))
    except ValueError:
        raise UserError(f"--image-size {text!r}: expected WIDTHxHEIGHT, e.g. 256x256") from None
    if not sep or min(size) <= 0:
        raise UserError(f"--image-size {text!r}: expected two positive numbers WIDTHxHEIGHT")
    if size[0] * size[1] > DEFAULT_MAX_IMAGE_PIXELS or max(size) / min(size) > MAX_ASPECT_RATIO:
        raise UserError(
            f"--image-size {text!r}: at most {DEFAULT_MAX_IMAGE_PIXELS:,} pixels and an aspect ratio of "
            f"{MAX_ASPECT_RATIO} (the image validity rule of vlmdata build)"
        )
    return size


def make_source(args):
    """(source, options dict) for the arguments (the in-process source that the shards are ``take(n)`` of)."""
    # imported when the command runs: `vlmdata --help` and this command's --help stay light
    from vlmdata.synthetic.source import MockSource, SyntheticSource

    threads = max(0, args.workers if args.workers > 1 else 0)
    if args.mock is None and not args.profile:
        raise UserError("give --profile PROFILE (a profile's synthetic twin) or --mock imagefree|bridge-noise")
    if args.mock == "bridge-noise":
        if args.profile:
            raise UserError("--mock bridge-noise takes no --profile (Bridge's mock has fixed shapes)")
        if args.num_images < 0 or args.num_base_examples <= 0:
            raise UserError("--num-images must be >= 0 and --num-base-examples > 0")
        opts = {
            "image_size": _size(args.image_size),
            "num_images": args.num_images,
            "num_base_examples": args.num_base_examples,
        }
        return MockSource("bridge-noise", args.seed, threads=threads, encoded=True, **opts), opts
    prof = load_profile(args.profile) if args.profile else None
    tok = get_tokenizer(args.tokenizer) if args.tokenizer else None
    if args.mock == "imagefree":
        if args.prompt_tokens < 0 or args.answer_tokens < 1:
            raise UserError("--prompt-tokens must be >= 0 and --answer-tokens >= 1")
        opts = (
            {"profile": args.profile}
            if prof
            else {"prompt_tokens": args.prompt_tokens, "answer_tokens": args.answer_tokens}
        )
        kw: dict[str, Any] = (
            {"profile": prof} if prof else {"prompt_tokens": args.prompt_tokens, "answer_tokens": args.answer_tokens}
        )
        return MockSource("imagefree", args.seed, threads=threads, tokenizer=tok, **kw), opts
    if args.variants < 0:
        raise UserError("--variants must be >= 0")
    src = SyntheticSource(prof, args.seed, tokenizer=tok, variants=args.variants, threads=threads, pool_bytes=256 << 20)
    return src, {"profile": args.profile, "variants": args.variants}


def run(args) -> int:
    if args.samples <= 0:
        raise UserError(f"-n must be a positive number of samples, got {args.samples}")
    if args.workers < 1:
        raise UserError(f"--workers must be >= 1, got {args.workers}")
    if args.max_count < 1:
        raise UserError("--max-count must be at least 1")
    if args.address and args.engine != "ray":
        raise UserError("--address is for --engine ray")
    t0 = time.perf_counter()
    try:
        src, opts = make_source(args)
        options = {
            "generator": args.mock or "profile",
            "seed": args.seed,
            "samples": args.samples,
            **opts,
            "max_count": args.max_count,
            "max_size": args.max_size or None,
            "prefix": args.prefix,
        }
        source = {"format": "synthetic", **src.describe()}
        with progress(
            f"synth {args.mock or 'profile'}", total=args.samples, unit="samples", quiet=args.quiet or args.json
        ) as advance:
            m = write_dataset(
                args.out,
                _stream(src, args.samples),
                kind="synth",
                options=options,
                source=source,
                overwrite=args.overwrite,
                prefix=args.prefix,
                max_count=args.max_count,
                max_size=args.max_size or None,
                workers=args.workers if args.engine else 1,
                progress=advance,
                engine=args.engine,
                address=args.address,
            )
    except (ProfileError, BuildError, EngineError, ValueError) as e:
        raise UserError(cli_flags(str(e).splitlines()[0])) from None
    dt = time.perf_counter() - t0
    summary = {"out": os.path.abspath(args.out), "generator": source, "totals": m["totals"], "seconds": round(dt, 2)}
    if args.json:
        print_json(summary)
    else:  # -q hides progress only, never this summary
        t = Table(title=f"synthesized {args.out}", show_header=False)
        t.add_row("generator", f"{source.get('generator')} (seed {args.seed})")
        t.add_row("shards", str(m["totals"]["shards"]))
        t.add_row("samples", str(m["totals"]["samples"]))
        t.add_row("images", str(m["totals"]["images"]))
        t.add_row("bytes", human_bytes(m["totals"]["bytes"]))
        if source.get("substitutions"):
            t.add_row("format substitutions", counts(source["substitutions"]))
        t.add_row("time", f"{dt:.1f} s")
        out.print(t)
    return EXIT_OK


def _stream(src, n: int):
    """The first ``n`` samples of the source, generated ahead on its threads."""
    from itertools import islice

    return islice(iter(src), n)
