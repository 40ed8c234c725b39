"""Regenerate ``sample_shards/``: a small real image-text dataset built with ``vlmdata build``.

    python scripts/make_sample_data.py [--out sample_shards]

The source (offline photos, cropped and captioned) comes from ``vlmdata.sources.photos.make_source``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile

from vlmdata.ingest import BuildOptions, build
from vlmdata.sources.photos import make_source


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="sample_shards")
    ap.add_argument("--source-out", help="also keep the generated source folder here")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        src = args.source_out or tmp
        make_source(src)
        out = os.path.abspath(args.out)
        readme = None  # the licences of the photos live beside the shards: keep them
        if os.path.isfile(os.path.join(out, "README.md")):
            with open(os.path.join(out, "README.md"), encoding="utf-8") as f:
                readme = f.read()
        if os.path.exists(out):
            shutil.rmtree(out)
        cwd = os.getcwd()
        os.chdir(src)  # the manifest records the source path as given: keep it machine-independent
        try:
            m = build("data.jsonl", out, BuildOptions(max_count=16, workers=1))
        finally:
            os.chdir(cwd)
        if readme is not None:
            with open(os.path.join(out, "README.md"), "w", encoding="utf-8") as f:
                f.write(readme)
    print(
        json.dumps(
            {"totals": m["totals"], "accounting": {k: v for k, v in m["accounting"].items() if k != "skipped_samples"}}
        )
    )


if __name__ == "__main__":
    main()
