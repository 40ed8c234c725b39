"""vlmdata synth --profile profile.json -n N -o OUT | vlmdata synth --mock MOCK -n N -o OUT (the registered mocks)"""

from __future__ import annotations

import argparse
import os
import textwrap
import time
from itertools import islice

from rich.table import Table

from vlmdata.cli.args import cli_flags, parse_size
from vlmdata.cli.console import EXIT_OK, UserError, counts, human_bytes, out, print_json, progress
from vlmdata.ingest import BuildError, write_dataset
from vlmdata.ingest.engines import ENGINES, EngineError
from vlmdata.ingest.options import DEFAULT_MAX_COUNT, DEFAULT_PREFIX
from vlmdata.profile.measure import ProfileError, get_tokenizer, load_profile
from vlmdata.synthetic.bridge_noise import BRIDGE_IMAGE_SIZE, BRIDGE_NUM_BASE_EXAMPLES
from vlmdata.synthetic.mocks import IMAGEFREE_ANSWER_TOKENS, IMAGEFREE_PROMPT_TOKENS, MOCKS


def _writable(mock) -> bool:
    return mock.synth


def _mock_lines() -> str:
    """One description paragraph per mock this command writes (the registry's definitions)."""
    return "".join(
        textwrap.fill(f"--mock {m.name}: {m.definition}", 110, initial_indent="  ", subsequent_indent="      ") + "\n"
        for m in MOCKS.entries()
        if _writable(m)
    )


def add_parser(sub):
    p = sub.add_parser(
        "synth",
        help="synthetic shards from a profile, or the mock data of today's benchmarks",
        description=(
            'Write shards in the `vlmdata build` format (manifest kind "synth", each KEY.json\'s "synthetic" set):\n'
            "  --profile P: rows of the profile's joint distribution; every image generated to its row's size, bytes\n"
            "      (within 10%), format, quality and chroma subsampling, photo-like pixels; text to the exact token counts\n"
            + _mock_lines()
            + "Mock images are stored as lossless PNG. Byte-identical output for the same arguments and seed (whatever\n"
            "--workers)."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--profile", help="profile.json (from `vlmdata profile`)")
    p.add_argument(
        "--mock", choices=MOCKS.names(_writable), help="write mock data (a registered mock) instead of a profile's twin"
    )
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
    size = "x".join(map(str, BRIDGE_IMAGE_SIZE))
    p.add_argument("--image-size", default=size, help=f"bridge-noise: WIDTHxHEIGHT (default {size}, Bridge's)")
    p.add_argument("--num-images", type=int, default=1, help="bridge-noise: images per sample (default 1)")
    p.add_argument(
        "--num-base-examples",
        type=int,
        default=BRIDGE_NUM_BASE_EXAMPLES,
        help=f"bridge-noise: distinct examples (default {BRIDGE_NUM_BASE_EXAMPLES})",
    )
    p.add_argument("--prefix", default=DEFAULT_PREFIX, help=f"shard file name prefix (default: {DEFAULT_PREFIX})")
    p.add_argument(
        "--max-count",
        type=int,
        default=DEFAULT_MAX_COUNT,
        help=f"samples per shard at most (default {DEFAULT_MAX_COUNT})",
    )
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
    if not sep:
        raise UserError(f"--image-size {text!r}: expected two positive numbers WIDTHxHEIGHT")
    return size  # its limits are the generator's (`image_size`)


# a mock option -> its value from this command's flags; a mock's ``params`` name the options it takes
FLAG_OPTIONS = {
    "image_size": lambda a: _size(a.image_size),
    "num_images": lambda a: a.num_images,
    "num_base_examples": lambda a: a.num_base_examples,
    "prompt_tokens": lambda a: a.prompt_tokens,
    "answer_tokens": lambda a: a.answer_tokens,
}
FLAG_DEFAULTS = {  # each mock flag's value when not given (a flag at another value was given)
    "image_size": "x".join(map(str, BRIDGE_IMAGE_SIZE)),
    "num_images": 1,
    "num_base_examples": BRIDGE_NUM_BASE_EXAMPLES,
    "prompt_tokens": IMAGEFREE_PROMPT_TOKENS,
    "answer_tokens": IMAGEFREE_ANSWER_TOKENS,
}


def _refuse_unused(args, mock) -> None:
    """A flag that the chosen source does not take is an error, not silently ignored."""
    for k, default in FLAG_DEFAULTS.items():
        if getattr(args, k) == default or (mock is not None and k in mock.params and not args.profile):
            continue
        takers = ", ".join(m.name for m in MOCKS.entries() if _writable(m) and k in m.params)
        what = f"--mock {mock.name}" if mock is not None else "a profile's twin"
        what += " with --profile" if mock is not None and args.profile else ""
        raise UserError(f"--{k.replace('_', '-')} does not apply to {what}: it is an option of --mock {takers}")
    if mock is not None and args.variants:
        raise UserError(f"--variants does not apply to --mock {mock.name}: it is an option of --profile twins")


def make_source(args):
    """(source, options dict) for the arguments (the in-process source that the shards are ``take(n)`` of)."""
    # the generators (numpy image synthesis, ~35 ms): imported when the command runs, not by its --help
    from vlmdata.synthetic.source import SyntheticSource

    threads = max(0, args.workers if args.workers > 1 else 0)
    if args.mock is None and not args.profile:
        raise UserError(
            f"give --profile PROFILE (a profile's synthetic twin) or --mock {'|'.join(MOCKS.names(_writable))}"
        )
    _refuse_unused(args, MOCKS[args.mock] if args.mock is not None else None)
    if args.mock is not None:
        return _mock_source(args, threads)
    if args.variants < 0:
        raise UserError("--variants must be >= 0")
    prof = load_profile(args.profile)
    tok = get_tokenizer(args.tokenizer) if args.tokenizer else None
    src = SyntheticSource(prof, args.seed, tokenizer=tok, variants=args.variants, threads=threads, pool_bytes=256 << 20)
    return src, {"profile": args.profile, "variants": args.variants}


def _mock_source(args, threads: int):
    """A registered mock fed the flags its ``params`` name; with --profile (a mock that takes one) the profile
    replaces the flag options. The manifest records the options as given."""
    from vlmdata.synthetic.source import MockSource  # the generators: not by --help (make_source)

    mock = MOCKS[args.mock]
    if args.profile and "profile" not in mock.params:
        raise UserError(f"--mock {mock.name} takes no --profile (its shapes are fixed)")
    extra: dict = {"encoded": True} if "encoded" in mock.params else {}  # shards store encoded images
    if args.profile:
        opts, kw = {"profile": args.profile}, {"profile": load_profile(args.profile)}
    else:
        opts = kw = {k: value(args) for k, value in FLAG_OPTIONS.items() if k in mock.params}
    if args.tokenizer and "tokenizer" in mock.params:
        extra["tokenizer"] = get_tokenizer(args.tokenizer)
    return MockSource(mock.name, args.seed, threads=threads, **kw, **extra), opts


def run(args) -> int:
    if args.samples <= 0:
        raise UserError(f"-n must be a positive number of samples, got {args.samples}")
    if args.workers < 1:
        raise UserError(f"--workers must be >= 1, got {args.workers}")
    if args.seed < 0:  # numpy's seed would say "expected non-negative integer", naming nothing
        raise UserError(f"--seed must be >= 0, got {args.seed}")
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
    return islice(iter(src), n)
