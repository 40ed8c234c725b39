"""``VlmdataDatasetProvider``: vlmdata as Megatron Bridge's ``ConfigContainer.dataset``.

    from vlmdata.loaders.bridge import VlmdataDatasetProvider
    cfg.dataset = VlmdataDatasetProvider(source="/data/shards", model="qwen3-vl", seq_length=4096,
                                         dataloader_type="cyclic", num_workers=4)

It derives from Bridge's ``DatasetProvider`` (data/base.py, a ``DataloaderConfig``) when Bridge is
importable, else from a stand-in with the same fields, so this module imports without Bridge.
``build_datasets(context)`` returns (train, valid, test):

* ``dataloader_type`` "single" / "cyclic" / "batch": map-style datasets whose item ``i`` is sample
  ``perm_epoch[i % N]`` (a seeded permutation per pass, ``epoch = i // N``), ``len = max(requested, N)``
  (so they repeat up to the requested counts and cover a global batch); Bridge's samplers split by DP
  rank and resume from consumed_samples. ``collate_fn`` builds the Bridge batch (GenericVisualInputs).
  A bad sample is replaced by the next good one in the permutation and counted/logged with shard and key
  (``on_error="raise"`` raises instead).
* "external": an endless ``make_loader`` iterator for the DP rank of ``context.pg_collection.dp`` that wraps
  across epochs (``wrap_epochs``: an epoch's last micro-batch is completed by the next epoch's first samples, so
  every micro-batch Bridge's step receives holds ``micro_batch_size`` samples).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from vlmdata.dataset.reader import BadSampleError, ShardReader, parse_raw, record_skip
from vlmdata.loaders.options import LoaderOptions
from vlmdata.qwen.spec import BRIDGE_MAX_PIXELS, BRIDGE_MIN_PIXELS

try:  # Bridge is optional
    from megatron.bridge.data.base import DatasetProvider as _Base  # type: ignore

    HAVE_BRIDGE = True
except Exception:  # ImportError, or its CUDA-only deps failing at import
    HAVE_BRIDGE = False

    @dataclass(kw_only=True)
    class _Base:  # the fields of Bridge's DataloaderConfig
        dataloader_type: str | None = None
        num_workers: int = 2
        data_sharding: bool = True
        pin_memory: bool = True
        drop_last: bool = True
        persistent_workers: bool = True
        trust_remote_code: bool | None = None
        dataloader_save: str | None = None
        dataloader_load: str | None = None

        def finalize(self) -> None:
            if self.num_workers == 0 and self.persistent_workers:
                self.persistent_workers = False


class MapDataset:
    """Map-style view of a shard dataset (or a ``get(i)`` source) for Bridge's samplers."""

    def __init__(self, source: str, options: LoaderOptions, tokenizer, length: int, seed: int):
        from vlmdata.loaders.api import make_loader  # torch: imported when Bridge builds datasets, not at import

        self._proto = make_loader(source, options.replace(num_workers=0, rank=0, world_size=1), tokenizer=tokenizer)
        st = self._proto.stream
        self.kind, self.payload, self.processor = st.kind, st.payload, st.processor
        self.collate_fn = _BridgeCollate(st.collator)
        self.plan = st.plan  # kind "shards": plan.ref(i) is sample i (compact index, no per-sample objects)
        self.n = st.plan.epoch_samples
        self.length = max(length, self.n)
        self.seed = seed
        self.on_error = options.on_error
        self.skipped: list[dict] = []
        self._perm: dict[int, list[int]] = {}
        self._reader = None

    def __len__(self) -> int:
        return self.length

    def _order(self, epoch: int) -> list[int]:
        if epoch not in self._perm:
            p = list(range(self.n))
            random.Random(hash((self.seed, epoch)) & 0xFFFFFFFF).shuffle(p)
            self._perm = {epoch: p}
        return self._perm[epoch]

    def __getitem__(self, i: int):

        epoch, j = divmod(int(i), self.n)
        order = self._order(epoch)
        for step in range(self.n):
            idx = order[(j + step) % self.n]
            try:
                if self.kind == "source":
                    return self.processor(self.payload.get(epoch * self.n + idx))
                if self._reader is None:
                    self._reader = ShardReader(self.payload)
                ref = self.plan.ref(idx)
                if ref.error is not None:
                    raise BadSampleError(ref.error[1], key=ref.key, reason=ref.error[0])

                return self.processor(parse_raw(self._reader.read(ref), ref.key))
            except BadSampleError as e:
                shard = self.payload[self.plan.ref(idx).shard] if self.kind == "shards" else f"source[{idx}]"
                if self.on_error == "raise":
                    raise
                self.skipped.append(record_skip(shard, e.key, e.reason, str(e)))
        raise RuntimeError("no usable sample in the dataset")


class _BridgeCollate:
    def __init__(self, collator):
        self.collator = collator

    def __call__(self, items):
        batch = self.collator(items)
        if HAVE_BRIDGE:
            batch["visual_inputs"] = batch["visual_inputs"].to_bridge()
        return batch


@dataclass(kw_only=True)
class VlmdataDatasetProvider(_Base):  # pyright: ignore[reportGeneralTypeIssues]  # Bridge's class or the fallback above
    """vlmdata real / synthetic / mock data for Bridge's Qwen-VL steps (see module docstring)."""

    source: str = "sample_shards"
    valid_source: str | None = None
    model: str = "qwen3-vl"
    tokenizer_path: str | None = None
    seq_length: int = 4096
    pad_to_max_length: bool = False
    pack_sequences_in_batch: bool = False
    min_pixels: int = BRIDGE_MIN_PIXELS
    max_pixels: int = BRIDGE_MAX_PIXELS
    seed: int = 1234
    on_error: str = "skip"
    micro_batch_size: int = 1  # used by "external" only; Bridge batches map-style datasets itself
    skip_getting_attention_mask_from_dataset: bool = True
    loader_options: LoaderOptions | dict = field(default_factory=dict)  # every other loader option

    def options(self) -> LoaderOptions:
        """The ``LoaderOptions`` of this provider: ``loader_options`` with the fields Bridge owns (its names,
        e.g. ``pack_sequences_in_batch``) applied on top."""
        base = (
            self.loader_options
            if isinstance(self.loader_options, LoaderOptions)
            else LoaderOptions().replace(**self.loader_options)
        )
        return base.replace(
            model=self.model,
            seq_length=self.seq_length,
            pad_to_max_length=self.pad_to_max_length,
            packing=self.pack_sequences_in_batch,
            min_pixels=self.min_pixels,
            max_pixels=self.max_pixels,
            seed=self.seed,
            on_error=self.on_error,
        )

    def _tokenizer(self):
        from vlmdata.qwen.tokenize import shared_tokenizer  # transformers: only when Bridge builds datasets

        return shared_tokenizer(self.tokenizer_path)

    def build_datasets(self, context):
        if self.dataloader_type == "external":
            rank, world = 0, 1
            pg = getattr(context, "pg_collection", None)
            dp = getattr(pg, "dp", None) if pg is not None else None
            if dp is not None:
                import torch

                rank, world = torch.distributed.get_rank(dp), torch.distributed.get_world_size(dp)
            # torch: imported when Bridge builds the datasets, not when the provider is configured
            from vlmdata.loaders.api import make_loader

            def it(source):
                opts = self.options().replace(
                    micro_batch_size=self.micro_batch_size,
                    num_workers=self.num_workers,
                    rank=rank,
                    world_size=world,
                    num_epochs=None,
                    wrap_epochs=True,  # every micro-batch whole, as Bridge's own datasets (they wrap)
                    bridge_visual_inputs=HAVE_BRIDGE,
                )
                return iter(make_loader(source, opts, tokenizer=self._tokenizer()))

            train = it(self.source)
            valid = it(self.valid_source) if self.valid_source and context.valid_samples else None
            return train, valid, None
        opts, tok = self.options(), self._tokenizer()
        train = MapDataset(self.source, opts, tok, context.train_samples, self.seed)
        valid = (
            MapDataset(self.valid_source, opts, tok, context.valid_samples, self.seed + 1)
            if self.valid_source and context.valid_samples
            else None
        )
        return train, valid, None
