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

import os
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import Any, Iterator

import numpy as np
import torch

from vlmdata.dataset.reader import (
    BadSampleError,
    SampleRef,
    ShardIndex,
    ShardReader,
    parse_raw,
    record_skip,
    scan_shard,
)
from vlmdata.dataset.resolve import open_dataset
from vlmdata.dataset.schema import Sample
from vlmdata.errors import OptionsError, VlmdataError
from vlmdata.loaders.collate import Collator, Processed
from vlmdata.loaders.device_images import defer_image, finish_batch
from vlmdata.loaders.options import IMAGE_MODES, LoaderOptions
from vlmdata.loaders.pipeline import Consumed, Plan, Stats, check_epoch, check_fit
from vlmdata.loaders.pixel_rows import preprocess_rows
from vlmdata.qwen.spec import BRIDGE_MAX_PIXELS, BRIDGE_MIN_PIXELS, get_spec
from vlmdata.qwen.tokenize import ChatTokenizer, TokenizerArgumentError
from vlmdata.qwen.vision import preprocess_shape
from vlmdata.synthetic.names import IMAGEFREE, IMAGEFREE_FIXED, MOCKS
from vlmdata.synthetic.source import MockSource, SyntheticSource

PROCESSOR_MODES = (*IMAGE_MODES, "device")  # + "device": decode left to the training device (image_device)


# ----------------------------------------------------------------------------- sources


class LoaderSourceError(VlmdataError, ValueError):
    """``make_loader`` cannot use its ``source``: a wrong type, nothing there, no shards in it."""


class LoaderStateError(VlmdataError, ValueError):
    """``load_state_dict`` was given something that is not this loader's ``state_dict()``."""


def resolve_shards(source: str) -> list[str]:
    """The shard paths a source names (``vlmdata.dataset.resolve.open_dataset``: a dataset folder in
    manifest order, a folder of ``*.tar``, a glob, one ``.tar``; local or fsspec URLs); LoaderSourceError
    when it names none."""
    if not isinstance(source, (str, os.PathLike)) or not str(os.fspath(source)).strip():
        raise LoaderSourceError(f"`source` must be a dataset path, got {source!r}"[:200])
    ref = open_dataset(source)
    if not ref.shards and ref.kind != "dataset":  # a dataset without shards is an empty epoch, not a bad path
        if ref.kind == "missing":
            raise LoaderSourceError(f"no tar shards found for {ref.shown!r}: nothing is there")
        raise LoaderSourceError(
            f"no tar shards found for {ref.shown!r}: it holds no .tar shards (an image folder or JSON is a build "
            "source: `vlmdata build` it first)"
        )
    return list(ref.shards)


SOURCE_KINDS = (
    "a dataset folder, a glob or a .tar (local or URL), a list of .tar paths, a profile .json, a mock name "
    f"({', '.join((*MOCKS, IMAGEFREE_FIXED))}) or an object with get(i) -> Sample"
)


def open_source(source, seed: int) -> tuple[str, Any]:
    """(kind, payload): ("shards", paths) or ("source", object with .get(i) -> Sample); LoaderSourceError for
    anything else (``SOURCE_KINDS``)."""
    if hasattr(source, "get") and callable(source.get) and not isinstance(source, Mapping):
        return "source", source
    if isinstance(source, (list, tuple)):
        if not source or not all(isinstance(p, (str, os.PathLike)) and str(os.fspath(p)).strip() for p in source):
            raise LoaderSourceError(f"`source` as a list must hold .tar paths, got {list(source)!r}"[:200])
        return "shards", [str(os.fspath(p)) for p in source]
    if not isinstance(source, (str, os.PathLike)) or isinstance(os.fspath(source), bytes):
        raise LoaderSourceError(f"`source` must be {SOURCE_KINDS}; got {type(source).__name__}")
    source = str(os.fspath(source))
    if not source.strip():
        raise LoaderSourceError(f"`source` is an empty path; give {SOURCE_KINDS}")
    if source in MOCKS or source == IMAGEFREE_FIXED:
        return "source", MockSource(IMAGEFREE if source == IMAGEFREE_FIXED else source, seed)
    if source.endswith(".json") and os.path.isfile(source):
        return "source", SyntheticSource(source, seed)
    return "shards", resolve_shards(source)


# ----------------------------------------------------------------------------- per-sample processing


def without_images(conversation: list[dict]) -> list[dict]:
    """The conversation with its image parts removed (a turn left empty keeps one empty text part)."""
    out = []
    for turn in conversation:
        content = turn.get("content") if isinstance(turn, dict) else None
        if isinstance(content, list):
            parts = [p for p in content if not (isinstance(p, dict) and p.get("type") == "image")]
            turn = {**turn, "content": parts or [{"type": "text", "text": ""}]}
        out.append(turn)
    return out


class SampleProcessor:
    """Sample -> Processed (pixel rows, grids, token ids, labels, loss mask). Picklable.

    ``images``: "decode" (the real path), "shapes" (no decode: grids from the image headers, zero pixel
    rows; the batches' shapes and token ids equal the decoded ones), "drop" (the image-free view: image
    parts removed from the conversation, no pixels) or "device" (grids planned here, decode and
    preprocessing left to the training device: ``vlmdata.loaders.device_images``).

    ``seq_length`` (every mode but "shapes", whose planner checks lengths itself): a row longer than it is
    truncated to it by the collate, as Bridge's; here each such sample is checked first (``fit``): one whose
    truncation would cut an image's visual tokens (the batch would carry fewer image-pad tokens than image
    features: Bridge truncates the same way and its model then gets mismatched features) or remove every
    supervised token, or any over-long row when ``packing`` (a packed row cannot be truncated), is a bad
    sample (reasons ``image_truncated``, ``too_long``: counted and named by the loader); a text-only
    truncation is kept and counted (``Processed.truncated``, the loader's ``stats.truncated_samples``)."""

    def __init__(
        self,
        chat: ChatTokenizer,
        model: str,
        min_pixels: int,
        max_pixels: int,
        resize: str = "bridge",
        exact_images: bool = False,
        images: str = "decode",
        image_decoder: str = "nvjpeg",
        *,
        seq_length: int | None = None,
        packing: bool = False,
    ):
        if images not in PROCESSOR_MODES:
            raise OptionsError(f"`images` must be one of {IMAGE_MODES}, got {images!r}")
        self.seq_length = None if images == "shapes" else seq_length
        self.packing = packing
        self.chat, self.spec = chat, get_spec(model)
        self.min_pixels, self.max_pixels = min_pixels, max_pixels
        self.resize, self.exact_images, self.images = resize, exact_images, images
        self.image_decoder = image_decoder  # with images="device": who decodes a JPEG (device_images)

    def __call__(self, sample: Sample) -> Processed:
        pvs, grids, deferred = [], [], []
        conversation = sample.conversation
        if self.images == "drop":
            conversation = without_images(conversation)
        else:
            for i, img in enumerate(sample.images):
                try:
                    if self.images == "shapes":
                        pv, g = preprocess_shape(img, self.spec, self.min_pixels, self.max_pixels, self.resize)
                    elif self.images == "device":
                        pv, g, item = defer_image(
                            img, self.spec, self.min_pixels, self.max_pixels, self.resize, self.image_decoder
                        )
                        deferred.append(item)
                    else:  # patchified later, straight into the batch buffer (pixel_rows)
                        pv, g = preprocess_rows(
                            img, self.spec, self.min_pixels, self.max_pixels, self.resize, self.exact_images
                        )
                except Exception as e:  # PIL raises OSError, SyntaxError, ValueError... for bad bytes
                    raise BadSampleError(
                        f"image {i} undecodable: {type(e).__name__}: {e}", key=sample.key, reason="undecodable_image"
                    ) from e
                pvs.append(pv)
                grids.append(g)
        try:
            row = self.chat.tokenize(conversation, [self.chat.image_tokens(g) for g in grids])
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise BadSampleError(f"conversation unusable: {e}", key=sample.key, reason="bad_conversation") from e
        cut = self.fit(row, sample.key) if self.seq_length is not None and len(row) > self.seq_length else 0
        return Processed(sample.key, row, pvs, grids, deferred, truncated=cut)

    def fit(self, row, key: str) -> int:
        """Tokens a row longer than ``seq_length`` loses to truncation; BadSampleError when that is not a sample
        Bridge's step can train on (class docstring)."""
        limit = self.seq_length
        assert limit is not None
        n = len(row)
        if self.packing:
            raise BadSampleError(
                f"needs {n} tokens, more than seq_length={limit}: a packed row cannot be truncated (Bridge raises "
                "here); raise seq_length",
                key=key,
                reason="too_long",
            )
        pads = np.flatnonzero(np.asarray(row.mm_token_type_ids) == 1)
        if pads.size and pads[-1] >= limit:
            starts = np.flatnonzero(np.diff(pads, prepend=-2) != 1)  # one run of image-pad tokens per image
            ends = np.append(starts[1:], pads.size)
            for i, (a, b) in enumerate(zip(starts, ends)):
                if pads[b - 1] >= limit:
                    kept = int(np.sum(pads[a:b] < limit))
                    raise BadSampleError(
                        f"needs {n} tokens; truncating it to seq_length={limit} keeps {kept} of the {b - a} visual "
                        f"tokens of image {i} (Bridge truncates the same way, and its model then gets fewer image "
                        "tokens than image features); skipped: raise seq_length",
                        key=key,
                        reason="image_truncated",
                    )
        mask = np.asarray(row.loss_mask)
        if mask.any() and not mask[:limit].any():
            raise BadSampleError(
                f"needs {n} tokens; truncating it to seq_length={limit} removes every supervised token (Bridge "
                "raises here); skipped: raise seq_length",
                key=key,
                reason="too_long",
            )
        return n - limit


# ----------------------------------------------------------------------------- iterable dataset


@dataclass
class _Meta:
    worker: int
    epoch: int
    position: int  # references of this worker's share of ``epoch`` consumed after this batch
    samples: int
    skipped: list
    keys: list
    lengths: list  # token length of each sample before any truncation to seq_length
    truncated: list = dataclass_field(default_factory=list)  # {"key", "shard", "tokens", "cut"} of truncated samples


class _Stream(torch.utils.data.IterableDataset):
    """Yields (meta, batch) for epochs ``start_epoch .. end_epoch - 1`` (None: forever) of this rank; splits
    by DataLoader worker itself. One iterator spans all epochs, so DataLoader workers are started once per
    ``VlmLoader`` iteration and never at an epoch boundary."""

    def __init__(
        self,
        kind,
        payload,
        plan: Plan,
        processor: SampleProcessor,
        collator: Collator,
        *,
        rank: int,
        world: int,
        num_workers: int,
        micro_batch_size: int,
        on_error: str,
        drop_last: bool = False,
    ):
        self.kind, self.payload, self.plan = kind, payload, plan
        self.processor, self.collator = processor, collator
        self.rank, self.world, self.num_workers = rank, world, max(1, num_workers)
        self.mbs, self.on_error, self.drop_last = micro_batch_size, on_error, drop_last
        self.start_epoch = 0
        self.end_epoch: int | None = 1  # None: forever
        self.bases: dict[int, Consumed] = {}  # epoch -> positions consumed before this iteration began

    def _load(self, reader, item) -> Sample:
        if self.kind == "source":
            return self.payload.get(item)
        ref: SampleRef = self.plan.ref(item)
        shard = self.payload[ref.shard]
        if ref.error is not None:
            raise BadSampleError(ref.error[1], shard=shard, key=ref.key, reason=ref.error[0])
        drop = self.processor.images == "drop"
        try:
            if drop:  # the image-free view reads the JSON member only (no image I/O)
                files = reader.read(
                    SampleRef(ref.shard, ref.key, {k: v for k, v in ref.members.items() if k == "json"})
                )
            else:
                files = reader.read(ref)
        except OSError as e:
            raise BadSampleError(f"read failed: {e}", shard=shard, key=ref.key, reason="read_error") from e
        try:
            return parse_raw(files, ref.key, with_images=not drop)
        except BadSampleError as e:
            e.shard = shard
            raise

    def _epoch(self, reader, worker: int, epoch: int) -> Iterator[tuple[_Meta, dict | None]]:
        items = self.plan.stream(epoch, self.rank, self.world, worker, self.num_workers, self.bases.get(epoch))
        pending: list[Processed] = []
        skipped: list[dict] = []
        pos = 0
        for item in items:
            pos += 1
            try:
                sample = self._load(reader, item)
                pending.append(self.processor(sample))
            except BadSampleError as e:
                ref = self.plan.ref(item) if self.kind == "shards" else None
                shard = e.shard or (self.payload[ref.shard] if ref is not None else f"source[{item}]")
                key = e.key or (ref.key if ref is not None else str(item))
                if self.on_error == "raise":
                    raise BadSampleError(f"shard {shard} key {key}: {e}", shard, key, e.reason) from e
                skipped.append(record_skip(shard, key, e.reason, str(e)))
            if len(pending) == self.mbs:
                yield self._meta(worker, epoch, pos, pending, skipped), self.collator(pending)
                pending, skipped = [], []
        if pending and not self.drop_last:
            yield self._meta(worker, epoch, pos, pending, skipped), self.collator(pending)
        elif skipped or pending:  # tail with no batch: still report the skips and the position
            yield _Meta(worker, epoch, pos, 0, skipped, [], []), None

    def _meta(self, worker: int, epoch: int, pos: int, pending: list[Processed], skipped: list) -> _Meta:
        cut = [{"key": p.key, "tokens": len(p.row), "cut": p.truncated} for p in pending if p.truncated]
        return _Meta(
            worker, epoch, pos, len(pending), skipped, [p.key for p in pending], [len(p.row) for p in pending], cut
        )

    def iter_worker(self, worker: int) -> Iterator[tuple[_Meta, dict | None]]:
        reader = ShardReader(self.payload) if self.kind == "shards" else None
        try:
            epoch = self.start_epoch
            while self.end_epoch is None or epoch < self.end_epoch:
                yield from self._epoch(reader, worker, epoch)
                epoch += 1
        finally:
            if reader:
                reader.close()

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        return self.iter_worker(info.id if info is not None else 0)


def _round_robin(iterators: list[Iterator]) -> Iterator:
    """Items of ``iterators`` in turn, skipping exhausted ones: the order a DataLoader delivers its
    workers' batches in (in-order mode), so an inline run yields exactly the batches a worker run does."""
    live = list(iterators)
    while live:
        for it in list(live):
            try:
                yield next(it)
            except StopIteration:
                live.remove(it)


@dataclass
class _Progress:
    base: Consumed  # positions consumed before the current iteration
    counts: list[int]  # positions consumed by each worker since


class VlmLoader:
    """Iterable of Bridge-ready batches with exact resume and bad-sample accounting.

    Iterating runs ``num_epochs`` epochs (None: forever), continuing from the current state; with
    ``num_workers`` > 0 the DataLoader workers are started once per iteration and stay alive across
    epochs. ``iter_inline()`` yields the same batches in the same order in this process (no workers).
    ``state_dict()`` after any batch and ``load_state_dict()`` on a loader built with the same arguments,
    except possibly ``num_workers``, resume with exactly the samples not yielded yet. An epoch that yields
    no batch at all raises ``EmptyEpochError`` (an endless loader would otherwise spin forever)."""

    def __init__(
        self,
        stream: _Stream,
        num_workers: int,
        num_epochs: int | None,
        prefetch_factor: int = 2,
        pin_memory: bool = False,
        image_device: str | None = None,
    ):
        self.stream = stream
        self.options: LoaderOptions | None = None  # set by make_loader
        self.image_device = image_device  # finish each batch's images there (device_images)
        self.num_workers = num_workers
        self.num_epochs = num_epochs
        self.prefetch_factor, self.pin_memory = prefetch_factor, pin_memory
        self.epoch = 0  # the oldest epoch not completely consumed
        self._progress: dict[int, _Progress] = {}  # epochs with consumed positions
        self.stats = Stats()
        self.collate_fn = stream.collator
        self.last_keys: list[str] = []  # sample keys of the batch just yielded (provenance; not in the batch)
        self.last_epoch: int | None = None  # epoch of the batch just yielded
        self.last_lengths: list[int] = []  # token lengths of its samples before truncation to seq_length
        self._epoch_yield: dict[int, tuple[int, list]] = {}  # epoch -> (samples yielded, skip records)

    # -- state
    def _rank_size(self) -> int:
        return self.stream.plan.rank_size(self.stream.rank, self.stream.world)

    def _workers(self) -> int:
        return max(1, self.num_workers)

    def _consumed(self, epoch: int) -> Consumed:
        p = self._progress.get(epoch)
        return Consumed() if p is None else p.base.plus(self._rank_size(), self._workers(), p.counts, epoch)

    def state_dict(self) -> dict:
        """``consumed``: positions of this rank's epoch sequence already yielded (or skipped), as a prefix
        length plus the few beyond it; ``ahead``: the same for later epochs already begun (workers run
        ahead across an epoch boundary). Independent of the number of workers."""
        ahead = {str(e): self._consumed(e).to_json() for e in sorted(self._progress) if e > self.epoch}
        return {
            "epoch": self.epoch,
            "consumed": self._consumed(self.epoch).to_json(),
            "ahead": ahead,
            "rank_samples": self._rank_size(),
            "rank": self.stream.rank,
            "world": self.stream.world,
            "seed": self.stream.plan.seed,
        }

    def load_state_dict(self, state: dict) -> None:
        """Resume from ``state_dict()`` of a loader with the same source, seed, rank and world; the number
        of workers may differ: the positions not consumed are spread over this loader's workers."""
        if not isinstance(state, Mapping):
            raise LoaderStateError(
                f"`state` must be the dict a loader's state_dict() returned, got {type(state).__name__}"
            )
        if isinstance(state.get("consumed"), (list, tuple)) and "epoch" in state:
            raise LoaderStateError("state is from an older vlmdata (per-worker counts); it cannot be resumed exactly")
        if not isinstance(state.get("consumed"), Mapping) or not {"epoch", "rank", "world", "seed"} <= set(state):
            raise LoaderStateError(
                "`state` is not a vlmdata loader state_dict() (it needs epoch, consumed, rank, world, seed; has "
                f"{', '.join(map(str, list(state)[:8])) or 'nothing'})"
            )
        for k, mine in (
            ("world", self.stream.world),
            ("rank", self.stream.rank),
            ("seed", self.stream.plan.seed),
            ("rank_samples", self._rank_size()),
        ):
            if state.get(k) != mine:
                raise LoaderStateError(f"state was saved with {k}={state.get(k)!r}, this loader has {k}={mine}")
        try:
            epoch = int(state["epoch"])
            if epoch < 0:
                raise ValueError(epoch)
            progress = {epoch: _Progress(Consumed.from_json(state["consumed"]), [0] * self._workers())}
            for e, c in (state.get("ahead") or {}).items():
                progress[int(e)] = _Progress(Consumed.from_json(c), [0] * self._workers())
        except (TypeError, ValueError, KeyError, AttributeError, OverflowError) as e:
            raise LoaderStateError(f"`state` holds a malformed position ({type(e).__name__}: {e})"[:200]) from None
        self.epoch, self._progress = epoch, progress

    def _rebase(self) -> None:
        """Fold per-worker counts into the bases (before a new iteration, whose workers restart)."""
        self._progress = {e: _Progress(self._consumed(e), [0] * self._workers()) for e in self._progress}

    def _advance(self, meta: _Meta) -> None:
        p = self._progress.setdefault(meta.epoch, _Progress(Consumed(), [0] * self._workers()))
        p.counts[meta.worker] = meta.position
        n = self._rank_size()
        while n > 0 and self._consumed(self.epoch).prefix >= n:
            samples, skips = self._epoch_yield.pop(self.epoch, (0, []))
            check_fit(self.epoch, samples, skips, self.stream.processor.seq_length)  # nothing fit seq_length
            if self.num_epochs is None:  # an endless loader must not spin on an epoch that yields nothing
                check_epoch(self.epoch, samples, skips)
            self._progress.pop(self.epoch, None)
            self.epoch += 1

    # -- iteration
    def _metas(self, inline: bool) -> Iterator[tuple[_Meta, dict | None]]:
        if self._rank_size() == 0 and self.num_epochs is None:
            check_epoch(self.epoch, 0, [])
        self._rebase()
        self.stream.start_epoch = self.epoch
        self.stream.end_epoch = None if self.num_epochs is None else self.epoch + self.num_epochs
        self.stream.bases = {e: p.base for e, p in self._progress.items()}
        if self.num_workers > 0 and not inline:
            dl = torch.utils.data.DataLoader(
                self.stream,
                batch_size=None,
                num_workers=self.num_workers,
                prefetch_factor=self.prefetch_factor,
                pin_memory=self.pin_memory,
                multiprocessing_context="fork" if hasattr(os, "fork") else None,
            )
            return iter(dl)
        return _round_robin([self.stream.iter_worker(w) for w in range(self._workers())])

    def _iterate(self, inline: bool) -> Iterator[dict]:
        for meta, batch in self._metas(inline):
            self.stats.skipped_samples.extend(meta.skipped)
            self.stats.truncated_samples.extend(meta.truncated)
            samples, skips = self._epoch_yield.setdefault(meta.epoch, (0, []))
            skips.extend(meta.skipped)
            self._epoch_yield[meta.epoch] = (samples + meta.samples, skips)
            self._advance(meta)
            if batch is None:
                continue
            self.last_keys, self.last_epoch, self.last_lengths = meta.keys, meta.epoch, meta.lengths
            self.stats.samples += meta.samples
            self.stats.batches += 1
            if self.image_device is not None:
                batch = finish_batch(batch, self.stream.processor.spec, self.image_device)
            yield batch
        # a finite run ends with every epoch consumed
        self._progress.clear()

    def __iter__(self) -> Iterator[dict]:
        return self._iterate(inline=False)

    def iter_inline(self) -> Iterator[dict]:
        """The batches ``iter(self)`` yields, in the same order, built in this process (no workers)."""
        return self._iterate(inline=True)

    def epoch_samples(self) -> int:
        """References this rank's plan holds per epoch (good and bad)."""
        return self._rank_size()


def _dist_rank_world() -> tuple[int, int]:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))


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
    rank, world_size = o.rank, o.world_size
    if rank is None or world_size is None:
        r, w = _dist_rank_world()
        rank = r if rank is None else rank
        world_size = w if world_size is None else world_size
    if not 0 <= rank < world_size:
        raise OptionsError(f"`rank` {rank} is outside a world of {world_size}")
    kind, payload = open_source(source, o.seed)
    if kind == "shards":
        plan = Plan(
            "shards",
            refs_by_shard=[ShardIndex(i, scan_shard(p, i)) for i, p in enumerate(payload)],
            seed=o.seed,
            shuffle=o.shuffle,
            buffer=o.shuffle_buffer,
        )
    else:
        plan = Plan("source", epoch_samples=o.epoch_samples, seed=o.seed, shuffle=o.shuffle, buffer=o.shuffle_buffer)
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
    stream = _Stream(
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
