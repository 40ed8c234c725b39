"""``vlmdata bench build``: the whole ``vlmdata build`` command against a plain script + ``energon prepare``.

Both sides are whole commands run as subprocesses, interleaved in rotating order (``timing``), on the
same LLaVA JSONL input, with the same number of processes:

* ``vlmdata-build``: ``python -m vlmdata build INPUT -o OUT --workers W --max-count M --overwrite -q``
  (start-up, source reading, checks, shards, manifest and the Energon index it always writes);
* ``plain+energon``: ``PLAIN_SCRIPT`` (what people write by hand: ``webdataset.ShardWriter``, one
  process, reads every image file and caption, no checks) and then
  ``energon prepare OUT --non-interactive --split-parts train:.* --num-workers W``;
* ``plain`` (reference only): the plain script without the index.

The CPU time of each side is its subprocesses' (``RUSAGE_CHILDREN``); ratios are per round
``plain+energon / vlmdata-build``. ``make_photo_input`` writes a LLaVA JSONL over COCO-like JPEGs
(``vlmdata.sources.photos``) when no input is given.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass

from vlmdata.benchmarks.timing import BenchmarkError, Contender, interleave, run_command
from vlmdata.sources.photos import make_large_source, make_source

# The hand-written baseline: imports webdataset only, so its start-up is a plain script's.
PLAIN_SCRIPT = r"""
import json, os, sys
import webdataset as wds
jsonl, out, maxcount = sys.argv[1], sys.argv[2], int(sys.argv[3])
os.makedirs(out, exist_ok=True)
root = os.path.dirname(os.path.abspath(jsonl))
n = 0
with wds.ShardWriter(os.path.join(out, "shard-%06d.tar"), maxcount=maxcount, maxsize=512 * 1024 * 1024,
                     verbose=0) as sink:
    with open(jsonl) as f:
        for i, line in enumerate(f):
            if not line.strip():
                continue
            rec = json.loads(line)
            images = rec.get("image") or []
            images = images if isinstance(images, list) else [images]
            sample = {"__key__": f"s{i:09d}", "json": json.dumps(rec).encode()}
            try:
                for j, rel in enumerate(images):
                    with open(os.path.join(root, rel), "rb") as im:
                        sample[f"{j}.jpg"] = im.read()
            except OSError:
                continue
            sink.write(sample)
            n += 1
print(n)
"""


@dataclass(frozen=True)
class BuildBenchOptions:
    """Options of ``bench_build``.

    Args:
        rounds: timed rounds.
        warmup: untimed rounds first.
        workers: processes on both sides (``vlmdata build --workers``, ``energon prepare --num-workers``).
        max_count: samples per shard on both sides.
        tmp: folder for the outputs (default: the system temp).
        photos: with no source, make the input first: a LLaVA JSONL over this many COCO-like photos
            (``make_photo_input``) in the temporary folder (not timed).
    """

    rounds: int = 5
    warmup: int = 1
    workers: int = 1
    max_count: int = 250
    tmp: str | None = None
    photos: int = 0

    def __post_init__(self):
        for name in ("rounds", "workers", "max_count"):
            if int(getattr(self, name)) < 1:
                raise BenchmarkError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.warmup < 0 or self.photos < 0:
            raise BenchmarkError(f"warmup and photos must be >= 0, got {self.warmup} and {self.photos}")


def make_photo_input(folder: str, samples: int, seed: int = 0, large: bool = False) -> str:
    """A LLaVA JSONL over ``samples`` COCO-like JPEGs (10% multi-image) in ``folder``; the bad records
    that ``vlmdata.sources.photos`` adds on purpose are dropped so both sides write the same samples.
    ``large``: the large set instead (2.0-4.2 MP photos, one per sample; ``photos.make_large_source``)."""
    if samples < 1:
        raise BenchmarkError(f"samples must be >= 1, got {samples}")
    if large:
        return make_large_source(folder, samples, seed)
    n_multi = samples // 10
    jsonl = make_source(folder, n_single=samples - n_multi, n_multi=n_multi, seed=seed)
    with open(jsonl) as f:
        lines = [line for line in f if "bad-" not in line]
    with open(jsonl, "w") as f:
        f.writelines(lines)
    return jsonl


def _input_facts(jsonl: str) -> dict:
    root = os.path.dirname(os.path.abspath(jsonl))
    n = images = nbytes = 0
    with open(jsonl) as f:
        for line in f:
            if not line.strip():
                continue
            rec = json.loads(line)
            ims = rec.get("image") or []
            ims = ims if isinstance(ims, list) else [ims]
            n += 1
            images += len(ims)
            nbytes += sum(os.path.getsize(os.path.join(root, p)) for p in ims if os.path.isfile(os.path.join(root, p)))
    return {"samples": n, "images": images, "image_bytes": nbytes}


def _energon_argv(out: str, workers: int) -> list[str]:
    exe = os.path.join(os.path.dirname(sys.executable), "energon")
    head = [exe] if os.path.isfile(exe) else [sys.executable, "-m", "megatron.energon.cli.main"]
    return head + [
        "prepare",
        out,
        "--non-interactive",
        "--split-parts",
        "train:.*",
        "--num-workers",
        str(workers),
        "--no-progress",
        "--force-overwrite",
        "--sample-type",
        "CrudeWebdataset",
    ]


def _remover(path: str) -> Callable[[], None]:
    return lambda: shutil.rmtree(path, ignore_errors=True)


def bench_build(
    source: str | None, opts: BuildBenchOptions | None = None, on_round: Callable[[int, int], object] | None = None
) -> dict:
    """Interleaved rounds of the whole ``vlmdata build`` command against a plain script + ``energon prepare``.

    Args:
        source: a LLaVA JSONL file (image paths relative to its folder); None with ``opts.photos``.
        opts: ``BuildBenchOptions``.
        on_round: progress callback (round done, rounds in all).

    Returns:
        ``{"input": {...}, "options": {...}, "timing": TimingResult.summary(baseline="plain+energon")}``.
    """
    opts = opts or BuildBenchOptions()
    if source is None and not opts.photos:
        raise BenchmarkError("source: give a LLaVA .jsonl file, or photos > 0 to make one")
    if source is not None and not (os.path.isfile(source) and source.endswith((".jsonl", ".json"))):
        raise BenchmarkError(f"source: {source!r} is not a LLaVA .jsonl file (the plain script reads that format only)")
    env = {"PYTHONPATH": os.pathsep.join(p for p in [_package_root(), os.environ.get("PYTHONPATH", "")] if p)}
    with tempfile.TemporaryDirectory(dir=opts.tmp, prefix="vlmdata-bench-build-") as tmp:
        if source is None:
            source = make_photo_input(os.path.join(tmp, "input"), opts.photos)
        facts = _input_facts(source)
        out_v, out_p, out_r = (os.path.join(tmp, n) for n in ("vlmdata", "plain", "plain-only"))
        vlm = [
            sys.executable,
            "-m",
            "vlmdata",
            "build",
            source,
            "-o",
            out_v,
            "--workers",
            str(opts.workers),
            "--max-count",
            str(opts.max_count),
            "--overwrite",
            "-q",
        ]
        plain = [sys.executable, "-c", PLAIN_SCRIPT, source, out_p, str(opts.max_count)]
        plain_only = [sys.executable, "-c", PLAIN_SCRIPT, source, out_r, str(opts.max_count)]

        def plain_energon() -> None:
            for argv in (plain, _energon_argv(out_p, opts.workers)):
                run_command(argv, "plain+energon")

        contenders = [
            Contender("vlmdata-build", vlm, units=facts["samples"], before=_remover(out_v), env=env),
            Contender("plain+energon", plain_energon, units=facts["samples"], before=_remover(out_p)),
            Contender("plain", plain_only, units=facts["samples"], before=_remover(out_r)),
        ]
        result = interleave(contenders, rounds=opts.rounds, warmup=opts.warmup, on_round=on_round)
        written = _count_samples(out_v)
    return {
        "benchmark": "build",
        "input": {"source": source, "photos": opts.photos, **facts, "written_by_vlmdata": written},
        "options": {"workers": opts.workers, "max_count": opts.max_count, "cpu_count": os.cpu_count()},
        "timing": result.summary(baseline="plain+energon"),
    }


def _count_samples(out: str) -> int | None:
    try:
        with open(os.path.join(out, "manifest.json")) as f:
            return int(json.load(f)["totals"]["samples"])
    except (OSError, ValueError, KeyError):
        return None


def _package_root() -> str:
    """The folder holding this ``vlmdata`` package, so the subprocess imports the same copy."""
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
