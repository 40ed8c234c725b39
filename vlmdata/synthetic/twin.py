"""Synthetic twins of a real dataset, sample by sample: the audit's *paired* synthetic source.

The twin of real sample KEY has the same key and the same conversation structure (roles, part order,
where the images stand), each text part replaced by generated text of exactly the same number of
tokens (``TextMaker`` with the Qwen tokenizer), and each image replaced by a generated image of the same
width, height and format, with the real image's JPEG quality estimate, chroma subsampling and
progressive mode, encoded to within 10% of its byte size (``spec_for_row`` of the image's profile row,
the generator ``vlmdata synth --profile`` uses). So visual tokens, text tokens, images per sample,
decode cost and bytes match sample by sample, and only the pixel content differs.

The shard layout is mirrored: twin shard ``i`` holds the twins of real shard ``i``'s samples, in the
same order. A loader given the twin dataset and the same seed and options as the real one therefore
yields, at every step, the twins of the real samples of that step (its plan is a function of the shard
sizes and the seed alone). A real sample that cannot be read (bad JSON, unreadable image header, a
truncated shard) gets a *placeholder* twin, a JSON member without a conversation, which the loader
skips at the same position, so the pairing survives bad real samples; samples outside ``only_keys``
get placeholders too (they are never reached by a run that only needs those keys).
The twin dataset is an audit artifact: its manifest's ``kind`` is ``twin`` (no Energon metadata) and
``validate`` reports placeholders as bad samples. It is written through the one dataset write path
(``ingest.writer.DatasetWriter``: the lock, the output-folder rules, the write order); an earlier twin in the
folder is replaced, a folder of other files is refused.
"""

from __future__ import annotations

import hashlib
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from vlmdata.dataset.reader import BadSampleError, ShardReader, parse_raw, scan_shard
from vlmdata.dataset.schema import FORMAT_EXT, ImageInfo, Sample, dumps
from vlmdata.dataset.shards import Entry, ShardPlan, ShardRecord, shard_name
from vlmdata.ingest.writer import DatasetWriter
from vlmdata.profile.measure import get_tokenizer, image_row
from vlmdata.qwen.spec import BRIDGE_MAX_PIXELS, BRIDGE_MIN_PIXELS, get_spec
from vlmdata.synthetic.generate import mix, spec_for_row
from vlmdata.synthetic.text import TextMaker

TWIN_PREFIX = "twin"


def placeholder(key: str, reason: str) -> Entry:
    """A JSON-only sample without a conversation: every reader skips it (reason ``bad_json``)."""
    meta = {"schema": "vlmdata.sample/1", "key": key, "conversation": None, "twin_placeholder": reason}
    return Entry(0, key, dumps(meta), [])


class TwinMaker:
    """Builds the twin of one real sample (thread-safe; deterministic for (seed, key))."""

    def __init__(
        self,
        seed: int = 0,
        tokenizer=None,
        model: str = "qwen3-vl",
        min_pixels: int = BRIDGE_MIN_PIXELS,
        max_pixels: int = BRIDGE_MAX_PIXELS,
    ):
        self.seed = int(seed)
        self.text = TextMaker(tokenizer if tokenizer is not None else get_tokenizer(None))
        self.spec, self.min_pixels, self.max_pixels = get_spec(model), min_pixels, max_pixels
        self.substitutions: dict[str, int] = {}

    def _seed(self, key: str, *parts: int) -> int:
        k = int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "little")
        return mix(self.seed, k, *parts)

    def twin(self, sample: Sample) -> Sample:
        """The twin of ``sample`` (ValueError if one of its images has an unreadable header)."""
        images, infos = [], []
        for j, data in enumerate(sample.images):
            row = image_row(bytes(data), self.spec, self.min_pixels, self.max_pixels)
            spec, note = spec_for_row(row)
            if note:
                self.substitutions[note] = self.substitutions.get(note, 0) + 1
            out = spec.encode(self._seed(sample.key, 0, j)).data
            images.append(out)
            infos.append(
                ImageInfo(f"{j}.{FORMAT_EXT[spec.fmt.upper()]}", spec.width, spec.height, spec.fmt.upper(), len(out))
            )
        conv = []
        for t, turn in enumerate(sample.conversation):
            content = turn.get("content")
            if isinstance(content, str):
                content = self._text(sample.key, t, 0, content)
            elif isinstance(content, list):
                content = [
                    {**p, "text": self._text(sample.key, t, k, p.get("text") or "")}
                    if isinstance(p, dict) and p.get("type") == "text"
                    else p
                    for k, p in enumerate(content)
                ]
            conv.append({**turn, "content": content})
        return Sample(
            key=sample.key,
            conversation=conv,
            images=images,
            image_info=infos,
            source_id=f"twin:{sample.source_id}",
            synthetic={"generator": "twin", "seed": self.seed, "of": sample.key},
        )

    def _text(self, key: str, turn: int, part: int, text: str) -> str:
        return self.text.make(self.text.count(text), self._seed(key, 1, turn, part))


def _read(reader: ShardReader, ref, only_keys: set | None) -> Sample | Entry:
    """The real sample of ``ref`` (read in one thread: a reader's file is not shared) or its placeholder."""
    if ref.error is not None:
        return placeholder(ref.key, ref.error[0])
    if only_keys is not None and ref.key not in only_keys:
        return placeholder(ref.key, "not_needed")
    try:
        return parse_raw(reader.read(ref), ref.key)
    except BadSampleError as e:
        return placeholder(ref.key, e.reason)
    except OSError as e:
        return placeholder(ref.key, f"unreadable: {type(e).__name__}")


def _twin_entry(maker: TwinMaker, item: Sample | Entry) -> Entry:
    if isinstance(item, Entry):
        return item
    try:
        return Entry.from_sample(maker.twin(item), 0)
    except ValueError as e:  # an unreadable image header
        return placeholder(item.key, f"unreadable: {e}")


def write_twin(
    shards: list[str],
    out: str,
    *,
    seed: int = 0,
    model: str = "qwen3-vl",
    tokenizer=None,
    only_keys: set[str] | None = None,
    threads: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> dict:
    """Write the twin of the dataset whose shards are ``shards`` (in loader order) into folder ``out``.

    Args:
        shards: the real dataset's shard paths, in the order its loader reads them.
        out: output folder: new, empty, or a vlmdata dataset such as an earlier twin (replaced); gets shards
            ``twin-NNNNNN.tar`` and ``manifest.json``, no ``.nv-meta``.
        seed: content seed of the generated text and images.
        model: the model family whose visual-token rule the image rows record.
        tokenizer: the tokenizer that counts text tokens (default: the offline Qwen tokenizer).
        only_keys: twin only these sample keys; the others get placeholders.
        threads: image generation threads (default: up to 8, by the CPU count).
        progress: called with the number of samples done.

    Returns:
        The twin dataset's manifest (``kind`` "twin"; ``source.placeholders`` counts the placeholders).
    """
    maker = TwinMaker(seed, tokenizer, model)
    threads = threads or max(1, min(8, os.cpu_count() or 1))
    with DatasetWriter(out, overwrite=True, energon=None) as writer:
        writer.start({"kind": "twin", "seed": seed})  # the state marks an interrupted twin as vlmdata's own
        records, index, placeholders = _write_shards(writer, maker, shards, only_keys, threads, progress)
        return writer.finish(
            records,
            seen=index,
            tail=[],
            workers=1,
            kind="twin",
            prefix=TWIN_PREFIX,
            options={"seed": seed, "model": model, "only_keys": None if only_keys is None else len(only_keys)},
            source={
                "format": "twin",
                "of": list(shards),
                "placeholders": placeholders,
                "substitutions": dict(sorted(maker.substitutions.items())),
            },
        )


def _write_shards(
    writer: DatasetWriter, maker: TwinMaker, shards: list[str], only_keys: set | None, threads: int, progress
) -> tuple[list[ShardRecord], int, int]:
    """Twin shard ``i`` of real shard ``i``, for each; (records, samples, placeholders)."""
    records: list[ShardRecord] = []
    index = placeholders = 0
    with ThreadPoolExecutor(threads, thread_name_prefix="vlmdata-twin") as pool:
        for no, path in enumerate(shards):
            reader = ShardReader([path])
            try:
                items = [_read(reader, ref, only_keys) for ref in scan_shard(path, 0)]
            finally:
                reader.close()
            entries = list(pool.map(lambda it: _twin_entry(maker, it), items))
            for e in entries:
                e.index = index
                index += 1
                placeholders += not e.images and b'"twin_placeholder"' in e.meta
            plan = ShardPlan(no, shard_name(TWIN_PREFIX, no), entries, index - len(entries), index, [])
            records.append(writer.write(plan))  # an empty real shard: an empty twin shard keeps the shard count
            if progress:
                progress(len(entries))
    return records, index, placeholders
