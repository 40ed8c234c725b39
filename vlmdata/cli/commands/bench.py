"""vlmdata bench build|loader|synth: side-by-side benchmarks (interleaved rounds, CPU and wall time, load)."""

from __future__ import annotations

import argparse
import difflib
import os

from vlmdata.benchmarks.timing import BenchmarkError, markdown_table
from vlmdata.cli.args import non_negative_int, positive_int, worker_counts
from vlmdata.cli.console import EXIT_OK, UserError, out, print_json, progress
from vlmdata.qwen.spec import SPECS

BENCHMARKS = ("build", "loader", "synth")


def _benchmark(text: str) -> str:
    if text not in BENCHMARKS:
        close = difflib.get_close_matches(text, BENCHMARKS, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise argparse.ArgumentTypeError(
            f"unknown benchmark {text!r}{hint} (benchmarks: {', '.join(BENCHMARKS)}; vlmdata bench loader DATASET)"
        )
    return text


def add_parser(sub):
    p = sub.add_parser(
        "bench",
        help="benchmarks (bench build|loader|synth)",
        description=(
            "Side-by-side benchmarks: contenders interleaved in rotating order over --rounds rounds (after --warmup\n"
            "untimed ones), wall and CPU time per round, per-round ratios (median, min-max), load average at start/end.\n"
            "  build INPUT     the whole `vlmdata build` command vs a plain webdataset.ShardWriter script + `energon\n"
            "                  prepare` (subprocesses, same process count); INPUT a LLaVA .jsonl, or --photos N\n"
            "  loader DATASET  samples per CPU-s from shards to Bridge-ready batches: bridge-hf-pil, bridge-hf-tv,\n"
            "                  hf-wds-fast (webdataset + qwen_vl_utils + HF fast processor + Bridge-style collate),\n"
            "                  bridge-collate / energon-bridge (with Megatron Bridge), vlmdata, vlmdata-exact,\n"
            "                  vlmdata-host-pillow / -nvjpeg (the host's share with image_device: pixels finished\n"
            "                  on the GPU), jpeg-decode (decode only: the decode-bound limit); --workers N,M adds\n"
            "                  vlmdata-wN\n"
            "  synth DATASET   synthetic twin generation and twin preprocessing vs real decode + preprocess\n"
            "The loader and synth benchmarks run on one core (torch threads 1)."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("what", metavar="BENCHMARK", type=_benchmark, help="the benchmark to run: build, loader or synth")
    p.add_argument(
        "target",
        metavar="INPUT|DATASET",
        nargs="?",
        help="build: a LLaVA .jsonl; loader, synth: a vlmdata dataset folder (e.g. the sample data: "
        "python -c 'import vlmdata; print(vlmdata.sample_data_path())')",
    )
    p.add_argument("--rounds", type=positive_int, default=5, help="timed rounds (default 5)")
    p.add_argument("--warmup", type=non_negative_int, default=1, help="untimed warm-up rounds first (default 1)")
    p.add_argument(
        "--photos",
        type=non_negative_int,
        default=0,
        help="build without INPUT: make a LLaVA .jsonl over N COCO-like photos first (not timed)",
    )
    p.add_argument(
        "--max-count", type=positive_int, default=250, help="build: samples per shard, both sides (default 250)"
    )
    p.add_argument(
        "--model",
        default="qwen3-vl",
        choices=sorted(SPECS),
        help="loader, synth: Qwen-VL family whose batches are built (default qwen3-vl)",
    )
    p.add_argument(
        "--samples",
        type=positive_int,
        default=64,
        help="loader, synth: samples per contender per round (default 64; the dataset is cycled)",
    )
    p.add_argument("--micro-batch-size", type=positive_int, default=4, help="loader: samples per batch (default 4)")
    p.add_argument(
        "--seq-length",
        type=positive_int,
        default=4096,
        help="loader: seq_length given to every path's collate (default 4096)",
    )
    p.add_argument(
        "--workers",
        type=worker_counts,
        default=(),
        metavar="N[,M...]",
        help="loader: DataLoader worker counts of extra vlmdata-wN contenders (e.g. 1,2); build: the "
        "process count of both sides (one number; default 1)",
    )
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    return p


def _call(args, on_round):
    if args.what == "build":
        # imported when this benchmark runs: `vlmdata bench --help` stays light
        from vlmdata.benchmarks.build import BuildBenchOptions, bench_build

        if len(args.workers) > 1 or 0 in args.workers:
            raise UserError(f"bench build --workers takes one number >= 1, got {','.join(map(str, args.workers))}")
        opts = BuildBenchOptions(
            rounds=args.rounds,
            warmup=args.warmup,
            workers=(args.workers or (1,))[0],
            max_count=args.max_count,
            photos=args.photos,
        )
        return bench_build(args.target, opts, on_round=on_round)
    if not args.target or not os.path.exists(args.target):
        raise UserError(f"{args.target}: not found (give a vlmdata dataset folder, e.g. the output of vlmdata build)")
    if args.what == "loader":
        # imported when this benchmark runs: `vlmdata bench --help` stays light
        from vlmdata.benchmarks.loader import LoaderBenchOptions, bench_loader

        opts = LoaderBenchOptions(
            model=args.model,
            samples=args.samples,
            micro_batch_size=args.micro_batch_size,
            seq_length=args.seq_length,
            rounds=args.rounds,
            warmup=args.warmup,
            workers=tuple(args.workers),
        )
        return bench_loader(args.target, opts, on_round=on_round)
    # imported when this benchmark runs: `vlmdata bench --help` stays light
    from vlmdata.benchmarks.synth import SynthBenchOptions, bench_synth

    opts = SynthBenchOptions(model=args.model, samples=args.samples, rounds=args.rounds, warmup=args.warmup)
    return bench_synth(args.target, opts, on_round=on_round)


def run(args) -> int:
    if args.what == "build" and not args.target and not args.photos:
        raise UserError("bench build: give INPUT (a LLaVA .jsonl) or --photos N")
    with progress(
        f"bench {args.what}", total=args.rounds + args.warmup, unit="rounds", quiet=args.quiet or args.json
    ) as advance:
        try:
            res = _call(args, lambda done, total: advance())
        except BenchmarkError as e:
            raise UserError(str(e)) from None
    if args.json:
        print_json(res)
        return EXIT_OK
    unit = "samples"
    if args.what == "build":
        i = res["input"]
        title = (
            f"bench build: {i['samples']} samples, {i['images']} images, {i['image_bytes'] / 1e6:.1f} MB of JPEG; "
            f"{res['options']['workers']} process(es) a side"
        )
    elif args.what == "loader":
        title = (
            f"bench loader: {res['samples']} samples a round of {args.target}, {res['model']}, micro-batch "
            f"{res['micro_batch_size']}, one core; baseline {res['baseline']}"
        )
    else:
        title = f"bench synth: {res['samples']} samples a round of {args.target}, {res['model']}, one core"
    out.print(markdown_table(res["timing"], unit=unit, title=title), markup=False, soft_wrap=True)
    if args.what == "loader":
        for name, d in res["vlmdata_vs_decode"].items():
            out.print(
                f"{name} at {d['median']:.0%} ({d['min']:.0%}-{d['max']:.0%}) of the jpeg-decode rate per CPU-s",
                markup=False,
            )
    for n in res.get("notes", []):
        out.print(f"note: {n}", markup=False, soft_wrap=True)
    return EXIT_OK
