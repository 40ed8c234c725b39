"""vlmdata demo: build + validate + inspect a sample dataset made from offline photos.

``-o OUT`` follows ``vlmdata build -o``'s rules: a non-empty OUT is refused unless ``--overwrite`` (the demo used to
pass ``--overwrite`` itself, so ``demo -o my_dataset`` silently replaced a user's dataset with the demo's)."""

from __future__ import annotations

import argparse
import importlib
import os
import tempfile

from vlmdata.cli.args import positive_int
from vlmdata.cli.console import EXIT_OK, UserError, out


def add_parser(sub):
    p = sub.add_parser(
        "demo",
        help="build, validate and inspect a small real dataset from offline photos",
        description="Make a LLaVA-style source from the real photos shipped in scikit-image, matplotlib and\n"
        "scikit-learn, build shards from it, validate them and print the summary.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("-o", "--out", help="dataset folder (default: a temporary folder)")
    p.add_argument("--overwrite", action="store_true", help="replace the vlmdata dataset in OUT (as build --overwrite)")
    p.add_argument(
        "--workers", type=positive_int, default=os.cpu_count() or 1, help="build worker processes (default: all cores)"
    )
    return p


def run(args) -> int:
    # The three commands it chains are loaded as cli/main loads a chosen command, when this one runs:
    # importing them at the top would add ~250 ms (build 156 ms, validate 166 ms, -X importtime) to
    # `vlmdata demo --help`. The photo source (numpy, PIL) likewise.
    from vlmdata.sources.photos import make_source

    build_cmd, validate_cmd, inspect_cmd = (
        importlib.import_module(f"vlmdata.cli.commands.{name}") for name in ("build", "validate", "inspect")
    )

    for pkg in ("skimage", "sklearn", "matplotlib"):
        try:
            __import__(pkg)
        except ImportError:
            raise UserError(
                f"vlmdata demo reads the photos shipped in scikit-image, scikit-learn and matplotlib: "
                f"pip install 'vlmdata[photos]' ({pkg} is missing)"
            ) from None

    with tempfile.TemporaryDirectory() as tmp:
        src = make_source(os.path.join(tmp, "source"))
        dest = args.out or os.path.join(tmp, "shards")
        parser = argparse.ArgumentParser()
        sub = parser.add_subparsers()
        for mod in (build_cmd, validate_cmd, inspect_cmd):
            mod.add_parser(sub).add_argument("-q", "--quiet", action="store_true")
        steps = [
            (
                build_cmd,
                ["build", src, "-o", dest, "--max-count", "16", "--workers", str(args.workers)]
                + (["--overwrite"] if args.overwrite else []),
            ),
            (validate_cmd, ["validate", dest]),
            (inspect_cmd, ["inspect", dest]),
        ]
        for mod, argv in steps:
            if not args.quiet:
                out.rule(f"vlmdata {' '.join(a if a not in (src, dest) else os.path.basename(a) for a in argv)}")
            code = mod.run(parser.parse_args(argv + (["-q"] if args.quiet else [])))
            if code != EXIT_OK:
                return code
    return EXIT_OK
