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
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field

from PIL import Image

from vlmdata.baselines.bridge_hf import BridgeReference
from vlmdata.benchmarks.timing import BenchmarkError, Contender, interleave, spread
from vlmdata.dataset.reader import BadSampleError, parse_raw
from vlmdata.dataset.tar import iter_shard
from vlmdata.loaders.api import make_loader, resolve_shards
from vlmdata.qwen.spec import SPECS, build_qwen_processor, get_spec, load_qwen_tokenizer
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


def import_bridge() -> tuple[dict | None, str]:
    """({"collate", "encoder", "energon"}, note) with Megatron Bridge's Qwen-VL collate and Energon task
    encoder, or (None, why). On a CPU host without transformer-engine, Bridge cannot be imported; if this is
    a source checkout, tests/bridge/te_stub.py (the contract test's import-time stub) is installed first."""
    if importlib.util.find_spec("megatron") is None or importlib.util.find_spec("megatron.bridge") is None:
        return None, "Megatron Bridge is not installed (scripts/bridge_env.sh builds a venv with it)"
    note = ""
    if importlib.util.find_spec("transformer_engine") is None:
        stub = os.path.join(
            os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
            "tests",
            "bridge",
            "te_stub.py",
        )
        if not os.path.isfile(stub):
            return None, "Megatron Bridge needs transformer_engine, which is not installed"
        spec = importlib.util.spec_from_file_location("vlmdata_te_stub", stub)
        if spec is None or spec.loader is None:
            return None, f"cannot load {stub}"
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        mod.install()
        note = "transformer_engine stubbed at import (tests/bridge/te_stub.py): CPU host, data path only"
    try:
        import logging
        import warnings

        warnings.filterwarnings("ignore", category=FutureWarning)
        logging.getLogger("megatron.energon").setLevel(logging.ERROR)
        # heavy and optional: only when Bridge is installed
        from megatron import energon
        from megatron.bridge.models.qwen_vl.data.collate_fn import qwen2_5_collate_fn  # pyright: ignore[reportMissingImports]  (optional: Megatron Bridge)
        from megatron.bridge.models.qwen_vl.data.energon import QwenVLTaskEncoder  # pyright: ignore[reportMissingImports]
    except (ImportError, RuntimeError, AttributeError, OSError) as e:
        return None, f"Megatron Bridge is not importable here ({type(e).__name__}: {e})"
    return {"collate": qwen2_5_collate_fn, "encoder": QwenVLTaskEncoder, "energon": energon}, note


def _pull(it, n: int, count: Callable[[dict], int]) -> None:
    got = 0
    while got < n:
        got += count(next(it))


def _wds_examples(shards: list[str]):
    """Endless Bridge HF examples from the shards with webdataset: {"conversation"} with PIL images inline."""
    import webdataset as wds  # optional: the HF path's reader

    ds = wds.WebDataset(shards, shardshuffle=False, empty_check=False).repeat()  # pyright: ignore[reportAttributeAccessIssue]
    for s in ds:
        if "json" not in s:
            continue
        meta = json.loads(s["json"])
        conv = meta.get("conversation")
        if not conv:
            continue
        imgs = iter(Image.open(io.BytesIO(s[im["file"]])) for im in meta.get("images") or [])
        yield {
            "conversation": [
                {
                    "role": t["role"],
                    "content": [
                        {"type": "image", "image": next(imgs)} if p.get("type") == "image" else dict(p)
                        for p in t["content"]
                    ],
                }
                for t in conv
            ]
        }


class _ExamplesReference:
    """``BridgeReference`` fed Bridge HF examples (already holding PIL images) instead of vlmdata Samples."""

    def __init__(self, ref):
        self.ref = ref
        ref._examples = lambda examples: examples  # the examples are already Bridge's shape

    def collate(self, examples, sequence_length):
        return self.ref.collate(examples, sequence_length=sequence_length)


def _energon_iter(bridge: dict, dataset: str, proc, model: str, mbs: int, seq_length: int):
    """Bridge's Energon path: energon.get_train_dataset (no shuffle) + QwenVLTaskEncoder (its defaults:
    max_visual_tokens=16384, so every image is also run through the processor once to count tokens, then
    qwen2_5_collate_fn), one process, reading the dataset's own .nv-meta."""

    e = bridge["energon"]
    enc = bridge["encoder"](
        tokenizer=proc.tokenizer,
        image_processor=proc,
        patch_size=get_spec(model).patch_size,
        max_padding_length=seq_length,
    )
    ds = e.get_train_dataset(
        dataset,
        batch_size=mbs,
        task_encoder=enc,
        split_part="train",
        worker_config=e.WorkerConfig(rank=0, world_size=1, num_workers=0),
        shuffle_buffer_size=None,
        max_samples_per_sequence=None,
        repeat=True,
    )
    return iter(e.get_loader(ds))


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
    n, mbs, seq, model = opts.samples, opts.micro_batch_size, opts.seq_length, opts.model
    tok = load_qwen_tokenizer()
    # every contender walks the dataset in shard order, n samples a round, so a round's samples are the same
    # for all (the pre-parsed ones cycle over the parsed dataset; the readers repeat the shards)
    everything = read_samples(dataset)
    shards = resolve_shards(dataset)

    def groups_of(chunk: list) -> list[list]:
        return [chunk[i : i + mbs] for i in range(0, len(chunk), mbs)]

    notes: list[str] = []
    what: dict[str, str] = {}
    contenders: list[Contender] = []
    has_tv = importlib.util.find_spec("torchvision") is not None

    def add(name: str, desc: str, run: Callable[[], object]) -> None:
        what[name] = desc
        contenders.append(Contender(name, run, units=n))

    ref = BridgeReference(build_qwen_processor(model, tokenizer=tok))
    pil_chunks = _chunks(everything, n)
    add(
        "bridge-hf-pil",
        "Bridge collate replicated, HF processor (PIL backend), pre-parsed samples",
        lambda: [ref.collate(g, sequence_length=seq) for g in groups_of(next(pil_chunks))],
    )
    if has_tv:
        ref_tv = BridgeReference(build_qwen_processor(model, tokenizer=tok, backend="torchvision"))
        tv_chunks = _chunks(everything, n)
        add(
            "bridge-hf-tv",
            "Bridge collate replicated, HF fast processor (torchvision), pre-parsed samples",
            lambda: [ref_tv.collate(g, sequence_length=seq) for g in groups_of(next(tv_chunks))],
        )
    else:
        notes.append("bridge-hf-tv not run: torchvision is not installed")

    # the fastest HF path: webdataset + qwen_vl_utils + HF fast image processor + tokenizer + Bridge-style collate
    fetch, qvu = qvu_fetch_image, "vlmdata's copy of qwen_vl_utils.fetch_image"
    if importlib.util.find_spec("qwen_vl_utils") is not None:
        try:
            import qwen_vl_utils  # pyright: ignore[reportMissingImports]  # optional: the real pre-resize

            fetch, qvu = (lambda im: qwen_vl_utils.fetch_image({"image": im})), "qwen_vl_utils.fetch_image"
        except (ImportError, RuntimeError, AttributeError, OSError) as e:  # it can fail without torchvision
            notes.append(f"qwen_vl_utils not importable ({type(e).__name__}); hf-wds-fast uses vlmdata's copy")
    backend = "torchvision" if has_tv else "pil"
    hf = _ExamplesReference(
        BridgeReference(build_qwen_processor(model, tokenizer=tok, backend=backend), fetch_image=fetch)
    )
    wds_it = _wds_examples(shards)

    def hf_fast() -> None:
        for g in groups_of([next(wds_it) for _ in range(n)]):
            hf.collate(g, sequence_length=seq)

    add(
        "hf-wds-fast",
        f"webdataset + {qvu} + HF {'fast (torchvision)' if has_tv else 'PIL'} image processor "
        "+ tokenizer + Bridge-style collate",
        hf_fast,
    )
    if not has_tv:
        notes.append("hf-wds-fast uses the PIL image processor: the fast one needs torchvision")

    bridge, why = import_bridge()
    if bridge is None:
        notes.append(f"bridge-collate and energon-bridge not run: {why}")
    else:
        if why:
            notes.append(why)
        proc = ref.processor
        br_chunks = _chunks(everything, n)
        add(
            "bridge-collate",
            "Megatron Bridge's qwen2_5_collate_fn on the same examples",
            lambda: [
                bridge["collate"](ref._examples(g), proc, sequence_length=seq) for g in groups_of(next(br_chunks))
            ],
        )
        if os.path.isdir(os.path.join(dataset, ".nv-meta")):
            en_it = _energon_iter(bridge, dataset, proc, model, mbs, seq)
            add(
                "energon-bridge",
                "Energon + Bridge's QwenVLTaskEncoder on DATASET/.nv-meta",
                lambda: _pull(en_it, n, lambda b: len(b["__keys__"])),
            )
        else:
            notes.append(f"energon-bridge not run: {dataset} has no .nv-meta (build it with vlmdata build)")

    def loader(exact: bool, nw: int = 0, **device):
        return make_loader(
            dataset,
            model=model,
            tokenizer=tok,
            seq_length=seq,
            micro_batch_size=mbs,
            num_workers=nw,
            exact_images=exact,
            num_epochs=None,
            shuffle=False,
            **device,
        )

    def host_share(decoder: str):
        ld = loader(False, image_device="cuda", image_decoder=decoder)
        ld.image_device = None  # stop before finish_batch: the device's share is timed on a GPU
        return iter(ld)

    def rows_in(b: dict) -> int:
        return int(b["input_ids"].shape[0])

    fast_it, exact_it = iter(loader(False)), iter(loader(True))
    add(
        "vlmdata",
        "make_loader, fast image path, persistent iterator (reads the shards)",
        lambda: _pull(fast_it, n, rows_in),
    )
    add(
        "vlmdata-exact",
        "make_loader, bit-exact Pillow image path, persistent iterator",
        lambda: _pull(exact_it, n, rows_in),
    )
    for decoder in ("pillow", "nvjpeg"):
        add(
            f"vlmdata-host-{decoder}",
            f"make_loader(image_device=..., image_decoder={decoder!r}): the host's share, batches before finish_batch",
            lambda it=host_share(decoder): _pull(it, n, rows_in),
        )
    dec_chunks = _chunks(everything, n)

    def decode_only() -> None:
        for b in (im for s in next(dec_chunks) for im in s.images):
            with Image.open(io.BytesIO(b)) as im:
                im.convert("RGB") if im.mode != "RGB" else im.load()

    add("jpeg-decode", "Pillow decode of the same samples' images to RGB pixels, nothing else", decode_only)
    for nw in opts.workers:

        def fresh(nw=nw) -> None:
            it = iter(loader(False, nw))
            _pull(it, n, rows_in)
            del it  # shuts the workers down, so their CPU is counted (RUSAGE_CHILDREN)

        add(f"vlmdata-w{nw}", f"make_loader with {nw} DataLoader workers, fresh per round (start-up included)", fresh)

    result = interleave(contenders, rounds=opts.rounds, warmup=opts.warmup, on_round=on_round)
    base_names = [c.name for c in contenders if c.name.startswith(BASELINE_PREFIXES)]
    baseline = max(base_names, key=lambda b: result.summary()["contenders"][b]["per_cpu_s"]["median"])
    summary = result.summary(baseline=baseline)
    rows = []
    for c in contenders:
        s = summary["contenders"][c.name]
        rows.append(
            {
                "name": c.name,
                "samples_per_cpu_s": s["per_cpu_s"]["median"],
                "samples_per_s": s["per_wall_s"]["median"],
                "ratio_cpu": s["ratio_cpu"],
                "ratio_wall": s["ratio_wall"],
            }
        )
    vs_decode = {
        "vlmdata": spread(result.ratios("vlmdata", "jpeg-decode")),
        "vlmdata-exact": spread(result.ratios("vlmdata-exact", "jpeg-decode")),
        "vlmdata-host-pillow": spread(result.ratios("vlmdata-host-pillow", "jpeg-decode")),
    }
    return {
        "benchmark": "loader",
        "dataset": dataset,
        "model": model,
        "samples": n,
        "dataset_samples": len(everything),
        "micro_batch_size": mbs,
        "seq_length": seq,
        "cpu_count": os.cpu_count(),
        "contenders": what,
        "baseline": baseline,
        "rows": rows,
        "vlmdata_vs_decode": vs_decode,
        "notes": notes,
        "timing": summary,
    }
