"""vlmdata profile SHARDS -o profile.json"""

from __future__ import annotations

import argparse
import os

from rich.markup import escape
from rich.table import Table

from vlmdata import storage
from vlmdata.cli.console import EXIT_OK, UserError, counts, human_bytes, out, print_json, progress
from vlmdata.cli.source_args import add_source_args, source_request
from vlmdata.dataset.manifest import MANIFEST_NAME, ManifestError, load_manifest
from vlmdata.profile.measure import (
    DEFAULT_CAP,
    DEFAULT_DECODE_IMAGES,
    MODELS,
    ProfileOptions,
    check_outputs,
    profile_dataset,
    write_profile,
)
from vlmdata.qwen.spec import BRIDGE_MAX_PIXELS, BRIDGE_MIN_PIXELS


def add_parser(sub):
    p = sub.add_parser(
        "profile",
        help="measure a dataset's workload shape into a profile.json",
        description=(
            "Record a compact empirical joint distribution of a dataset (per-sample rows: images, prompt/answer text\n"
            "tokens, visual tokens; per-image rows: size, format, bytes, JPEG quality/subsampling/progressive), summary\n"
            "statistics and measured decode time per image. The input is a vlmdata dataset folder (or one .tar shard),\n"
            "or directly an image folder / LLaVA or messages JSON / Hugging Face dataset (the readers of `vlmdata build`,\n"
            "with the same source flags)."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("input", help="dataset folder (manifest.json), .tar shard, image folder or .json/.jsonl source")
    p.add_argument("-o", "--out", required=True, help="profile JSON to write")
    p.add_argument("--model", default="qwen3-vl", help=f"visual-token model: {', '.join(MODELS)} (default qwen3-vl)")
    p.add_argument(
        "--min-pixels",
        type=int,
        default=BRIDGE_MIN_PIXELS,
        help=f"processor min_pixels (default {BRIDGE_MIN_PIXELS}, Megatron Bridge's)",
    )
    p.add_argument(
        "--max-pixels",
        type=int,
        default=BRIDGE_MAX_PIXELS,
        help=f"processor max_pixels (default {BRIDGE_MAX_PIXELS}, Megatron Bridge's)",
    )
    p.add_argument(
        "--tokenizer", help="local Hugging Face tokenizer folder (default: the Qwen tokenizer shipped offline)"
    )
    p.add_argument(
        "-n",
        "--max-rows",
        type=int,
        default=DEFAULT_CAP,
        help=f"sample rows stored at most, reservoir-sampled (default {DEFAULT_CAP})",
    )
    p.add_argument("--seed", type=int, default=0, help="reservoir seed (default 0)")
    p.add_argument(
        "--decode-images",
        type=int,
        default=DEFAULT_DECODE_IMAGES,
        help=f"images to time a full decode of (default {DEFAULT_DECODE_IMAGES}; 0 = skip)",
    )
    p.add_argument("--decode-repeats", type=int, default=3, help="decodes per timed image, fastest kept (default 3)")
    add_source_args(p, shards=True)
    p.add_argument("--plot", help="also write histograms to this PNG (needs matplotlib)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    return p


def known_samples(path: str) -> int | None:
    """Samples in a local dataset folder's manifest (the progress total), else None (a source: unknown)."""
    if not os.path.isfile(os.path.join(path, MANIFEST_NAME)):
        return None
    try:
        return int(load_manifest(path)["totals"]["samples"])
    except (ManifestError, KeyError, TypeError, ValueError):
        return None  # profile_dataset reports a broken manifest itself


def run(args) -> int:
    with storage.redacting():
        return _run(args)


def _run(args) -> int:
    if args.max_rows <= 0:
        raise UserError(f"-n/--max-rows must be a positive number of rows, got {args.max_rows}")
    for name in ("min_pixels", "max_pixels", "decode_repeats"):
        if getattr(args, name) <= 0:
            raise UserError(f"--{name.replace('_', '-')} must be positive, got {getattr(args, name)}")
    if args.decode_images < 0:
        raise UserError(f"--decode-images must be >= 0, got {args.decode_images}")
    opts = ProfileOptions(
        model=args.model,
        min_pixels=args.min_pixels,
        max_pixels=args.max_pixels,
        tokenizer=args.tokenizer,
        cap=args.max_rows,
        seed=args.seed,
        decode_images=args.decode_images,
        decode_repeats=args.decode_repeats,
        source=source_request(args),
    )
    check_outputs(args.out, args.plot, inputs=[args.input])  # before profiling: never over an input
    try:
        with progress(
            "profile", total=known_samples(args.input), unit="samples", quiet=args.quiet or args.json
        ) as advance:
            prof = profile_dataset(args.input, opts, progress=advance)
        sha = write_profile(prof, args.out)
        if args.plot:
            # imported when the command runs: `vlmdata --help` and this command's --help stay light
            from vlmdata.profile.plots import plot_profiles  # matplotlib: only when a plot is asked for

            shown = storage.redact(args.input)  # never a credential in a picture
            plot_profiles(
                [prof],
                args.plot,
                [os.path.basename(os.path.normpath(shown))],
                title=f"{shown} ({prof['model']['name']})",
            )
    except OSError as e:  # the plot file (a ProfileError is printed by vlmdata.cli.main)
        raise UserError(escape(f"{args.plot}: {e.strerror or e}")) from None
    s, d = prof["summary"], prof["decode"]
    if args.json:
        print_json(
            {
                "out": os.path.abspath(args.out),
                "sha256": sha,
                "summary": s,
                "decode": {k: v for k, v in d.items() if k != "ms"},
                "rows": prof["rows"]["stored_samples"],
            }
        )
    else:  # -q hides progress only, never this summary
        t = Table(title=f"profile of {storage.redact(args.input)} -> {args.out}")
        for c in ("metric", "p10", "median", "p90", "mean"):
            t.add_column(c, justify="left" if c == "metric" else "right")
        for key in (
            "images_per_sample",
            "pixels_per_image",
            "aspect_ratio",
            "bytes_per_image",
            "visual_tokens_per_image",
            "visual_tokens_per_sample",
            "prompt_tokens",
            "answer_tokens",
            "text_tokens_per_sample",
            "jpeg_quality",
        ):
            st = s[key]
            if st.get("n"):
                t.add_row(key, *(f"{st[k]:.4g}" for k in ("p10", "p50", "p90", "mean")))
        if d.get("images"):
            t.add_row(
                "decode ms per image",
                f"{d['p10_ms']:.3g}",
                f"{d['median_ms']:.3g}",
                f"{d['p90_ms']:.3g}",
                f"{d['mean_ms']:.3g}",
            )
        out.print(t)
        out.print(
            f"{s['samples']} samples, {s['images']} images ({prof['rows']['stored_samples']} rows stored), "
            f"formats {counts(s['formats'])}, subsampling {counts(s['subsampling'])}, "
            f"skipped {counts(s['skipped'], '0')}; "
            f"{prof['model']['name']} min/max pixels {opts.min_pixels}/{opts.max_pixels}; "
            f"decoder {d.get('decoder', '-')}; {human_bytes(os.path.getsize(args.out))} written"
        )
    return EXIT_OK
