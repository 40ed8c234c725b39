"""``make_loader``: real shards, synthetic profiles or mocks -> Megatron Bridge Qwen-VL batches.

    from vlmdata.loaders import make_loader
    loader = make_loader("sample_shards", model="qwen3-vl", seq_length=4096, micro_batch_size=2, num_workers=2)
    for batch in loader:          # dicts: input_ids, labels, loss_mask, position_ids, attention_mask,
        ...                       #        mm_token_type_ids, visual_inputs (pixel_values, image_grid_thw)
    state = loader.state_dict()   # exact mid-epoch resume: make_loader(...).load_state_dict(state)
    loader.stats.to_json()        # samples, batches, skipped samples with shard/key/reason

See docs/loaders.md for the guarantees.
"""

from __future__ import annotations

from typing import Any

import torch

from vlmdata.dataset.reader import ShardIndex, ShardReader, scan_shard
from vlmdata.dataset.schema import Sample
from vlmdata.errors import OptionsError
from vlmdata.loaders.collate import Collator
from vlmdata.loaders.loader import LoaderStateError, VlmLoader
from vlmdata.loaders.options import LoaderOptions
from vlmdata.loaders.pipeline import Plan
from vlmdata.loaders.process import PROCESSOR_MODES, SampleProcessor, without_images
from vlmdata.loaders.reads import LoaderSourceError, open_loader_source, resolve_shards, source_kinds
from vlmdata.loaders.stream import BatchStream
from vlmdata.options_util import env_int
from vlmdata.qwen.spec import BRIDGE_MAX_PIXELS, BRIDGE_MIN_PIXELS, get_spec
from vlmdata.qwen.tokenize import ChatTokenizer, TokenizerArgumentError


def _dist_rank_world() -> tuple[int, int]:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return env_int("RANK", 0), env_int("WORLD_SIZE", 1, low=1)


def _rank_world(o: LoaderOptions) -> tuple[int, int]:
    """(rank, world size): the options', else torch.distributed's or the environment's."""
    rank, world_size = o.rank, o.world_size
    if rank is None or world_size is None:
        r, w = _dist_rank_world()
        rank = r if rank is None else rank
        world_size = w if world_size is None else world_size
    if not 0 <= rank < world_size:
        raise OptionsError(f"`rank` {rank} is outside a world of {world_size}")
    return rank, world_size


def _plan(kind: str, payload: Any, o: LoaderOptions) -> Plan:
    """The epoch plan: over every shard's samples (located once by a header scan), or over a source's indices."""
    if kind == "shards":
        refs = [ShardIndex(i, scan_shard(p, i)) for i, p in enumerate(payload)]
        return Plan("shards", refs_by_shard=refs, seed=o.seed, shuffle=o.shuffle, buffer=o.shuffle_buffer)
    return Plan("source", epoch_samples=o.epoch_samples, seed=o.seed, shuffle=o.shuffle, buffer=o.shuffle_buffer)


def make_loader(source: Any, options: LoaderOptions | None = None, *, tokenizer=None, **changes: Any) -> VlmLoader:
    """A loader of Megatron Bridge Qwen-VL batches.

    Args:
        source: a dataset folder / glob / .tar list / URL, a synthetic profile .json, a mock name
            ("imagefree", "bridge-noise"), or any object with ``get(i) -> Sample``. Synthetic and mock
            sources have ``options.epoch_samples`` per epoch.
        options: every setting (``LoaderOptions``; the defaults when None).
        tokenizer: a HF Qwen tokenizer (default: the shipped one, offline, loaded once per process:
            ``vlmdata.qwen.tokenize.shared_tokenizer``).
        **changes: options given by name instead (``make_loader(path, micro_batch_size=2)``), applied to
            ``options`` with ``LoaderOptions.replace`` (an unknown name raises ``OptionsError``).

    Returns:
        A ``VlmLoader``: iterate for batches; ``state_dict()`` / ``load_state_dict()`` resume exactly.
    """
    if options is not None and not isinstance(options, LoaderOptions):
        raise OptionsError(f"`options` must be a LoaderOptions, got {type(options).__name__}")
    o = (options or LoaderOptions()).replace(**changes)
    rank, world_size = _rank_world(o)
    kind, payload = open_loader_source(source, o.seed)
    plan = _plan(kind, payload, o)
    try:
        chat = ChatTokenizer(tokenizer, o.model, chat_template=o.chat_template)
    except TokenizerArgumentError as e:
        raise OptionsError(str(e)) from None
    spec = get_spec(o.model)
    collator = Collator(
        pad_token_id=chat.pad_token_id,
        patch_dim=spec.patch_dim,
        seq_length=o.seq_length,
        pad_to_max_length=o.pad_to_max_length,
        pad_to_multiple_of=o.pad_to_multiple_of,
        packing=o.packing,
        packing_pad_to_multiple_of=o.packing_pad_to_multiple_of,
        bridge_visual_inputs=o.bridge_visual_inputs,
        strict=o.images != "shapes",
    )  # planning batches never raise; ``last_lengths`` tells
    processor = SampleProcessor(
        chat,
        o.model,
        o.min_pixels,
        o.max_pixels,
        o.resize,
        o.exact_images,
        "device" if o.image_device is not None else o.images,
        o.image_decoder,
        seq_length=o.seq_length,
        packing=o.packing,
    )
    stream = BatchStream(
        kind,
        payload,
        plan,
        processor,
        collator,
        rank=rank,
        world=world_size,
        num_workers=o.num_workers,
        micro_batch_size=o.micro_batch_size,
        on_error=o.on_error,
        drop_last=o.drop_last,
        wrap_epochs=o.wrap_epochs,
    )
    loader = VlmLoader(stream, o.num_workers, o.num_epochs, o.prefetch_factor, o.pin_memory, o.image_device)
    loader.options = o
    return loader


def process_samples(samples: list[Sample], model: str = "qwen3-vl", tokenizer=None, **kw) -> dict:
    """Collate a list of in-memory samples into one batch (no pipeline): for tests and tools."""
    chat = kw.pop("chat", None) or ChatTokenizer(tokenizer, model, chat_template=kw.pop("chat_template", None))
    proc = SampleProcessor(
        chat,
        model,
        kw.pop("min_pixels", BRIDGE_MIN_PIXELS),
        kw.pop("max_pixels", BRIDGE_MAX_PIXELS),
        kw.pop("resize", "bridge"),
        kw.pop("exact_images", False),
    )
    col = Collator(pad_token_id=chat.pad_token_id, patch_dim=get_spec(model).patch_dim, **kw)
    return col([proc(s) for s in samples])


__all__ = [
    "PROCESSOR_MODES",
    "LoaderSourceError",
    "LoaderStateError",
    "SampleProcessor",
    "ShardReader",
    "VlmLoader",
    "make_loader",
    "open_loader_source",
    "process_samples",
    "resolve_shards",
    "source_kinds",
    "without_images",
]
