"""``vlmdata bench loader``: shards -> Bridge-ready Qwen-VL batches, vlmdata's loader against Bridge's paths.

Every contender turns the same number of samples of DATASET into batches in this process (one core:
``torch.set_num_threads(1)``), interleaved in rotating order over rounds (``timing``); the figure is
samples per CPU-second, and ratios are per round against the fastest baseline (by median CPU rate):

* ``bridge-hf-pil``: Bridge's ``qwen2_5_collate_fn`` path replicated with the real HF processor, PIL
  backend (``vlmdata.baselines.bridge_hf.BridgeReference``), on samples parsed once before timing;
* ``bridge-hf-tv``: the same with the torchvision ("fast") image processor (needs torchvision);
* ``hf-wds-fast``: the fastest HF path a user would write: ``webdataset.WebDataset`` reading the shards,
  ``qwen_vl_utils.fetch_image`` pre-resize (vlmdata's line-by-line copy when qwen-vl-utils is not
  installed), the HF fast image processor (PIL one without torchvision; the result names it),
  tokenizer + chat template, and the Bridge-style collate (loss mask, labels, padding);
* ``bridge-collate`` / ``energon-bridge``: Bridge's own collate / Energon + Bridge's task encoder (only where
  Megatron Bridge imports);
* ``vlmdata`` / ``vlmdata-exact``: ``make_loader`` (fast image path / bit-exact Pillow path), each a
  persistent endless iterator, as in training: a round pulls the next ``samples`` samples;
* ``vlmdata-host-pillow`` / ``vlmdata-host-nvjpeg``: the host's share of ``make_loader(image_device=...)``
  with ``image_decoder`` "pillow" (the workers decode, the device resizes, normalises and patchifies) or
  "nvjpeg" (the device decodes too): the batches stop before ``finish_batch``, whose device time
  ``bench/gpu_decode.py`` measures on a GPU; a training host runs exactly this much per sample;
* ``jpeg-decode``: decoding the same samples' images to pixels and nothing else (the decode-bound limit);
* ``vlmdata-wN`` (``workers``): a fresh loader with N DataLoader workers per round (worker start-up
  included; their CPU is counted when they exit).

The tokenizer is loaded once and shared by every contender; a warm-up round is run before timing.
"""

from __future__ import annotations

import importlib.util
import io
import itertools
import os
from collections.abc import Callable
from dataclasses import dataclass, field

from PIL import Image

from vlmdata.baselines.bridge_hf import BridgeReference
from vlmdata.benchmarks.loader_paths import ExamplesReference, energon_iter, import_bridge, wds_examples
from vlmdata.benchmarks.timing import BenchmarkError, Contender, interleave, spread
from vlmdata.dataset.reader import BadSampleError, parse_raw
from vlmdata.dataset.tar import iter_shard
from vlmdata.loaders.api import make_loader, resolve_shards
from vlmdata.qwen.spec import SPECS, build_qwen_processor, load_qwen_tokenizer
from vlmdata.qwen.vision import qvu_fetch_image

BASELINE_PREFIXES = ("bridge", "hf-", "energon")


@dataclass(frozen=True)
class LoaderBenchOptions:
    """Options of ``bench_loader``.

    Args:
        model: Qwen-VL family (a key of ``vlmdata.qwen.SPECS``).
        samples: samples per contender per round (the dataset is repeated when smaller).
        micro_batch_size: samples per batch.
        seq_length: sequence length given to every collate.
        rounds: timed rounds.
        warmup: untimed rounds first.
        workers: DataLoader worker counts for extra ``vlmdata-wN`` contenders.
    """

    model: str = "qwen3-vl"
    samples: int = 64
    micro_batch_size: int = 4
    seq_length: int = 4096
    rounds: int = 5
    warmup: int = 1
    workers: tuple[int, ...] = field(default_factory=tuple)

    def __post_init__(self):
        if self.model not in SPECS:
            raise BenchmarkError(f"model must be one of {', '.join(sorted(SPECS))}, got {self.model!r}")
        for name in ("samples", "micro_batch_size", "seq_length", "rounds"):
            if int(getattr(self, name)) < 1:
                raise BenchmarkError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.warmup < 0 or any(w < 0 for w in self.workers):
            raise BenchmarkError("warmup and workers must be >= 0")


def read_samples(dataset: str, n: int | None = None) -> list:
    """The readable samples of ``dataset`` in shard order (the first ``n``; repeated when it has fewer),
    parsed by vlmdata."""

    out: list = []
    shards = resolve_shards(dataset)
    while n is None or len(out) < n:
        before = len(out)
        for p in shards:
            for r in iter_shard(p):
                if "json" in r.files:
                    try:
                        out.append(parse_raw(r.files, r.key))
                    except BadSampleError:
                        continue
                if n is not None and len(out) >= n:
                    return out
        if len(out) == before:
            raise BenchmarkError(f"dataset: {dataset} has no readable sample")
        if n is None:
            break
    return out


def _chunks(items: list, n: int):
    """Endless: the next ``n`` items of ``items`` cycled, as a list, each call."""
    it = itertools.cycle(items)
    while True:
        yield [next(it) for _ in range(n)]


def _pull(it, n: int, count: Callable[[dict], int]) -> None:
    got = 0
    while got < n:
        got += count(next(it))


class _Contenders:
    """The loader benchmark's contenders, built one family at a time (``bench_loader``'s phases): every contender
    walks the dataset in shard order, ``n`` samples a round, so a round's samples are the same for all (the
    pre-parsed ones cycle over the parsed dataset; the readers repeat the shards)."""

    def __init__(self, dataset: str, opts: LoaderBenchOptions):
        self.dataset, self.opts = dataset, opts
        self.n, self.mbs, self.seq, self.model = opts.samples, opts.micro_batch_size, opts.seq_length, opts.model
        self.tok = load_qwen_tokenizer()
        self.everything = read_samples(dataset)
        self.shards = resolve_shards(dataset)
        self.notes: list[str] = []
        self.what: dict[str, str] = {}
        self.contenders: list[Contender] = []
        self.has_tv = importlib.util.find_spec("torchvision") is not None
        self.ref = BridgeReference(build_qwen_processor(self.model, tokenizer=self.tok))

    def groups_of(self, chunk: list) -> list[list]:
        return [chunk[i : i + self.mbs] for i in range(0, len(chunk), self.mbs)]

    def add(self, name: str, desc: str, run: Callable[[], object]) -> None:
        self.what[name] = desc
        self.contenders.append(Contender(name, run, units=self.n))

    def bridge_hf(self) -> None:
        """Bridge's collate replicated with the HF processor (PIL, and torchvision when installed)."""
        seq, pil_chunks = self.seq, _chunks(self.everything, self.n)
        self.add(
            "bridge-hf-pil",
            "Bridge collate replicated, HF processor (PIL backend), pre-parsed samples",
            lambda: [self.ref.collate(g, sequence_length=seq) for g in self.groups_of(next(pil_chunks))],
        )
        if not self.has_tv:
            self.notes.append("bridge-hf-tv not run: torchvision is not installed")
            return
        ref_tv = BridgeReference(build_qwen_processor(self.model, tokenizer=self.tok, backend="torchvision"))
        tv_chunks = _chunks(self.everything, self.n)
        self.add(
            "bridge-hf-tv",
            "Bridge collate replicated, HF fast processor (torchvision), pre-parsed samples",
            lambda: [ref_tv.collate(g, sequence_length=seq) for g in self.groups_of(next(tv_chunks))],
        )

    def hf_fast(self) -> None:
        """The fastest HF path: webdataset + qwen_vl_utils + HF fast image processor + tokenizer + Bridge-style
        collate."""
        fetch, qvu = qvu_fetch_image, "vlmdata's copy of qwen_vl_utils.fetch_image"
        if importlib.util.find_spec("qwen_vl_utils") is not None:
            try:
                import qwen_vl_utils  # pyright: ignore[reportMissingImports]  # optional: the real pre-resize

                fetch, qvu = (lambda im: qwen_vl_utils.fetch_image({"image": im})), "qwen_vl_utils.fetch_image"
            except (ImportError, RuntimeError, AttributeError, OSError) as e:  # it can fail without torchvision
                self.notes.append(f"qwen_vl_utils not importable ({type(e).__name__}); hf-wds-fast uses vlmdata's copy")
        backend = "torchvision" if self.has_tv else "pil"
        hf = ExamplesReference(
            BridgeReference(build_qwen_processor(self.model, tokenizer=self.tok, backend=backend), fetch_image=fetch)
        )
        wds_it, n, seq = wds_examples(self.shards), self.n, self.seq

        def run() -> None:
            for g in self.groups_of([next(wds_it) for _ in range(n)]):
                hf.collate(g, sequence_length=seq)

        image = "fast (torchvision)" if self.has_tv else "PIL"
        self.add(
            "hf-wds-fast", f"webdataset + {qvu} + HF {image} image processor + tokenizer + Bridge-style collate", run
        )
        if not self.has_tv:
            self.notes.append("hf-wds-fast uses the PIL image processor: the fast one needs torchvision")

    def bridge_native(self) -> None:
        """Megatron Bridge's own collate and its Energon path, when Bridge imports."""
        bridge, why = import_bridge()
        if bridge is None:
            self.notes.append(f"bridge-collate and energon-bridge not run: {why}")
            return
        if why:
            self.notes.append(why)
        proc, seq, br_chunks = self.ref.processor, self.seq, _chunks(self.everything, self.n)
        self.add(
            "bridge-collate",
            "Megatron Bridge's qwen2_5_collate_fn on the same examples",
            lambda: [
                bridge["collate"](self.ref._examples(g), proc, sequence_length=seq)
                for g in self.groups_of(next(br_chunks))
            ],
        )
        if not os.path.isdir(os.path.join(self.dataset, ".nv-meta")):
            self.notes.append(f"energon-bridge not run: {self.dataset} has no .nv-meta (build it with vlmdata build)")
            return
        en_it = energon_iter(bridge, self.dataset, proc, self.model, self.mbs, seq)
        self.add(
            "energon-bridge",
            "Energon + Bridge's QwenVLTaskEncoder on DATASET/.nv-meta",
            lambda: _pull(en_it, self.n, lambda b: len(b["__keys__"])),
        )

    def loader(self, exact: bool, nw: int = 0, **device):
        return make_loader(
            self.dataset,
            model=self.model,
            tokenizer=self.tok,
            seq_length=self.seq,
            micro_batch_size=self.mbs,
            num_workers=nw,
            exact_images=exact,
            num_epochs=None,
            shuffle=False,
            **device,
        )

    def vlmdata(self) -> None:
        """vlmdata's loader: fast and bit-exact image paths, the host's share of the device path, workers."""
        n = self.n

        def host_share(decoder: str):
            ld = self.loader(False, image_device="cuda", image_decoder=decoder)
            ld.image_device = None  # stop before finish_batch: the device's share is timed on a GPU
            return iter(ld)

        fast_it, exact_it = iter(self.loader(False)), iter(self.loader(True))
        self.add(
            "vlmdata",
            "make_loader, fast image path, persistent iterator (reads the shards)",
            lambda: _pull(fast_it, n, _rows),
        )
        self.add(
            "vlmdata-exact",
            "make_loader, bit-exact Pillow image path, persistent iterator",
            lambda: _pull(exact_it, n, _rows),
        )
        for decoder in ("pillow", "nvjpeg"):
            self.add(
                f"vlmdata-host-{decoder}",
                f"make_loader(image_device=..., image_decoder={decoder!r}): the host's share, batches before finish_batch",
                lambda it=host_share(decoder): _pull(it, n, _rows),
            )
        for nw in self.opts.workers:

            def fresh(nw=nw) -> None:
                it = iter(self.loader(False, nw))
                _pull(it, n, _rows)
                del it  # shuts the workers down, so their CPU is counted (RUSAGE_CHILDREN)

            self.add(
                f"vlmdata-w{nw}",
                f"make_loader with {nw} DataLoader workers, fresh per round (start-up included)",
                fresh,
            )

    def decode_only(self) -> None:
        """Pillow decode of the same samples' images, nothing else: the floor any loader pays."""
        dec_chunks = _chunks(self.everything, self.n)

        def run() -> None:
            for b in (im for s in next(dec_chunks) for im in s.images):
                with Image.open(io.BytesIO(b)) as im:
                    im.convert("RGB") if im.mode != "RGB" else im.load()

        self.add("jpeg-decode", "Pillow decode of the same samples' images to RGB pixels, nothing else", run)


def _rows(b: dict) -> int:
    return int(b["input_ids"].shape[0])


def bench_loader(
    dataset: str, opts: LoaderBenchOptions | None = None, on_round: Callable[[int, int], object] | None = None
) -> dict:
    """Samples per CPU-second of Bridge's data paths, the fastest HF path, JPEG decode alone and vlmdata's
    loader on the same samples of ``dataset``, interleaved rounds.

    Args:
        dataset: vlmdata dataset folder.
        opts: ``LoaderBenchOptions``.
        on_round: progress callback (round done, rounds in all).

    Returns:
        ``{"benchmark": "loader", "dataset", "model", "samples", "micro_batch_size", "contenders": {name: what},
        "baseline", "rows": [{"name", "samples_per_cpu_s", "samples_per_s", "ratio_cpu", ...}],
        "vlmdata_vs_decode", "notes", "timing": TimingResult.summary(baseline)}``.
    """
    # heavy: torch and transformers only for this benchmark
    import torch

    opts = opts or LoaderBenchOptions()
    if not os.path.exists(dataset):
        raise BenchmarkError(f"dataset: {dataset} not found")
    torch.set_num_threads(1)
    c = _Contenders(dataset, opts)
    c.bridge_hf()
    c.hf_fast()
    c.bridge_native()
    c.vlmdata()
    c.decode_only()
    # the vlmdata-wN contenders were added by vlmdata(); keep the historical order (decode before workers)
    order = [x for x in c.contenders if not x.name.startswith("vlmdata-w")] + [
        x for x in c.contenders if x.name.startswith("vlmdata-w")
    ]
    result = interleave(order, rounds=opts.rounds, warmup=opts.warmup, on_round=on_round)
    return _loader_result(c, order, result)


def _loader_result(c: _Contenders, contenders: list[Contender], result) -> dict:
    """The report dict of ``bench_loader`` (its Returns)."""
    base_names = [x.name for x in contenders if x.name.startswith(BASELINE_PREFIXES)]
    baseline = max(base_names, key=lambda b: result.summary()["contenders"][b]["per_cpu_s"]["median"])
    summary = result.summary(baseline=baseline)
    rows = []
    for x in contenders:
        s = summary["contenders"][x.name]
        rows.append(
            {
                "name": x.name,
                "samples_per_cpu_s": s["per_cpu_s"]["median"],
                "samples_per_s": s["per_wall_s"]["median"],
                "ratio_cpu": s["ratio_cpu"],
                "ratio_wall": s["ratio_wall"],
            }
        )
    vs_decode = {
        name: spread(result.ratios(name, "jpeg-decode")) for name in ("vlmdata", "vlmdata-exact", "vlmdata-host-pillow")
    }
    return {
        "benchmark": "loader",
        "dataset": c.dataset,
        "model": c.model,
        "samples": c.n,
        "dataset_samples": len(c.everything),
        "micro_batch_size": c.mbs,
        "seq_length": c.seq,
        "cpu_count": os.cpu_count(),
        "contenders": c.what,
        "baseline": baseline,
        "rows": rows,
        "vlmdata_vs_decode": vs_decode,
        "notes": c.notes,
        "timing": summary,
    }
