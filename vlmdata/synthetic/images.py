"""Synthetic image payloads: a spec in, encoded bytes out, and a pool that keeps generation cheap.

:class:`SyntheticImage` describes one payload (pixel size, target encoded bytes, format,
chroma subsampling, progressive, preferred quality). ``generate(seed)`` renders
:mod:`~vlmdata.synthetic.pixels` content at a detail level read from a size model, then lets
:func:`~vlmdata.synthetic.jpeg.search_to_target` fine-tune the quality (usually one or two
encodes). The size model is a per-process table of bytes per pixel against detail, measured on
a few calibration renders the first time a (format, quality, subsampling, progressive) is used
(about 20 small encodes).

:class:`ImagePool` is the in-process source's generator. It keeps, per spec, ``slots`` encoded
images and serves ``seed`` from slot ``seed % slots`` (content seeded by the spec and the slot,
so the bytes for a (spec, seed) do not depend on request order or threads). After warm-up a
request is a dict lookup. Generation uses threads, not processes: the work is numpy uint8 maths
and Pillow drawing/encoding, which run in C without the GIL, the results are bytes that would
otherwise be pickled across processes, and data-loader workers already give process parallelism.
Specs that vary continuously never repeat; quantise them (e.g. sizes to 16 px, bytes to 5 %) to
get reuse, or set ``slots=0`` for fresh images every time (then ``map`` overlaps them in threads).
"""

from __future__ import annotations

import hashlib
import math
import threading
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Iterable, Iterator

import numpy as np

from vlmdata.dataset.images import require_storable
from vlmdata.errors import OptionsError
from vlmdata.sources.base import MAX_IMAGE_BYTES
from vlmdata.synthetic import pixels
from vlmdata.synthetic.jpeg import DEFAULT_QUALITY, SUBSAMPLINGS, Encoded, encode, search_to_target

_CAL_SIZE = (384, 288)
_CAL_SEEDS = (101, 202)
_CAL_RUNGS = range(-16, 17, 2)  # detail 1/16 .. 16 in half-octave steps
_CAL_BANK_SIZE = 512  # a small bank with the default bank's amplitudes: cheap rung planes
_cal: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}
_cal_bank: pixels.FieldBank | None = None
_cal_lock = threading.Lock()


class ImageSpec:
    """What every synthetic payload spec shares (a frozen dataclass of its own fields: ``SyntheticImage``,
    ``generate.GrayImage``): the checks of its size, byte target and format, and ``generate(seed)``, the bytes of
    its ``encode(seed)``."""

    width: int
    height: int
    target_bytes: int
    fmt: str

    def __post_init__(self):
        if self.width < 1 or self.height < 1 or self.target_bytes < 1:
            raise OptionsError(f"`width`, `height` and `target_bytes` must be >= 1: bad synthetic image spec {self}")
        require_storable(self.width, self.height, "synthetic image")  # a twin image is one vlmdata would store
        if self.target_bytes > MAX_IMAGE_BYTES:
            raise OptionsError(f"synthetic image of {self.target_bytes:,} bytes: at most {MAX_IMAGE_BYTES:,}")
        if self.fmt.upper() not in ("JPEG", "PNG"):
            raise OptionsError(f"`fmt` must be JPEG or PNG, got {self.fmt!r}")

    def generate(self, seed: int) -> bytes:
        """Encoded bytes, deterministic for (spec, seed)."""
        return self.encode(seed).data

    def encode(self, seed: int) -> Encoded:  # pragma: no cover - each spec encodes its own way
        raise NotImplementedError


@dataclass(frozen=True)
class SyntheticImage(ImageSpec):
    """One synthetic payload to generate."""

    width: int
    height: int
    target_bytes: int
    subsampling: str = "4:2:0"
    progressive: bool = False
    fmt: str = "JPEG"
    quality: int | None = None  # preferred JPEG quality (e.g. jpeg_info of real data); default 90
    tolerance: float = 0.10

    def __post_init__(self):
        super().__post_init__()
        if self.subsampling not in SUBSAMPLINGS:
            raise OptionsError(f"`subsampling` must be one of {SUBSAMPLINGS}, got {self.subsampling!r}")

    def size_model_quality(self, quality: int) -> int:
        """The quality whose size model gives the first ``detail`` guess (the search then starts from
        ``quality`` itself)."""
        return quality

    def encode(self, seed: int) -> Encoded:
        """:meth:`generate` with the search outcome (quality, detail, encodes, ratio)."""
        w, h = self.width, self.height
        q = self.quality or DEFAULT_QUALITY
        d = detail_for(
            self.target_bytes / (w * h), self.fmt, self.size_model_quality(q), self.subsampling, self.progressive
        )
        return search_to_target(
            pixels.render(w, h, seed, d),
            self.target_bytes,
            self.fmt,
            self.subsampling,
            self.progressive,
            self.tolerance,
            quality=q,
            detail=d,
            render=lambda dd: pixels.render(w, h, seed, dd),
        )


def make_image(
    width: int,
    height: int,
    target_bytes: int,
    subsampling: str = "4:2:0",
    progressive: bool = False,
    seed: int = 0,
    *,
    fmt: str = "JPEG",
    quality: int | None = None,
) -> bytes:
    """Encoded synthetic image of ``width`` x ``height`` within 10% of ``target_bytes`` (best effort)."""
    return SyntheticImage(width, height, target_bytes, subsampling, progressive, fmt, quality).generate(seed)


def _calibration(fmt: str, quality: int, subsampling: str, progressive: bool) -> tuple[np.ndarray, np.ndarray]:
    """(log detail, log bytes-per-pixel) over the ladder for these encoder settings (cached)."""
    global _cal_bank
    key = (fmt.upper(), quality, subsampling, progressive)
    table = _cal.get(key)
    if table is None:
        with _cal_lock:
            table = _cal.get(key)
            if table is None:
                _cal_bank = _cal_bank or pixels.FieldBank(_CAL_BANK_SIZE)
                w, h = _CAL_SIZE
                logd, logb = [], []
                for k in _CAL_RUNGS:
                    d = 2.0 ** (k / pixels.RUNGS_PER_OCTAVE)
                    sizes = [
                        len(encode(pixels.render(w, h, s, d, _cal_bank), fmt, quality, subsampling, progressive))
                        for s in _CAL_SEEDS
                    ]
                    logd.append(math.log(d))
                    logb.append(math.log(np.mean(sizes) / (w * h)))
                table = _cal[key] = (np.array(logd), np.maximum.accumulate(np.array(logb)))
    return table


def detail_for(
    bytes_per_pixel: float,
    fmt: str = "JPEG",
    quality: int = DEFAULT_QUALITY,
    subsampling: str = "4:2:0",
    progressive: bool = False,
) -> float:
    """The content detail whose images encode to about ``bytes_per_pixel`` at these settings."""
    logd, logb = _calibration(fmt, quality, subsampling, progressive)
    return float(math.exp(np.interp(math.log(bytes_per_pixel), logb, logd)))


def _content_seed(spec: SyntheticImage, slot: int) -> int:
    h = hashlib.blake2b(repr((sorted(asdict(spec).items()), slot)).encode(), digest_size=8)
    return int.from_bytes(h.digest(), "little") >> 1


class ImagePool:
    """Thread-safe cache of encoded synthetic images (see the module docstring)."""

    def __init__(self, slots: int = 32, threads: int = 0, max_bytes: int = 256 << 20):
        self.slots = int(slots)
        self.max_bytes = int(max_bytes)
        self._cache: OrderedDict[tuple[SyntheticImage, int], bytes] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self._executor = ThreadPoolExecutor(threads, thread_name_prefix="vlmdata-synth") if threads > 0 else None
        self.hits = self.misses = 0

    def get(self, spec: SyntheticImage, seed: int) -> bytes:
        """Bytes for ``seed``: slot ``seed % slots`` of ``spec`` (generated on first use)."""
        if self.slots <= 0:
            with self._lock:
                self.misses += 1
            return spec.generate(seed)
        key = (spec, seed % self.slots)
        with self._lock:
            data = self._cache.get(key)
            if data is not None:
                self._cache.move_to_end(key)
                self.hits += 1
                return data
            self.misses += 1
        data = spec.generate(_content_seed(spec, key[1]))  # outside the lock; deterministic
        with self._lock:
            if key not in self._cache:
                self._cache[key] = data
                self._bytes += len(data)
                while self._bytes > self.max_bytes and len(self._cache) > 1:
                    _, old = self._cache.popitem(last=False)
                    self._bytes -= len(old)
        return data

    def map(self, items: Iterable[tuple[SyntheticImage, int]], prefetch: int = 16) -> Iterator[bytes]:
        """``get`` over ``(spec, seed)`` items in order, generated ``prefetch`` ahead on the threads."""
        if self._executor is None:
            for spec, seed in items:
                yield self.get(spec, seed)
            return
        pending = []
        for spec, seed in items:
            pending.append(self._executor.submit(self.get, spec, seed))
            if len(pending) > prefetch:
                yield pending.pop(0).result()
        for fut in pending:
            yield fut.result()

    def prefill(self, specs: Iterable[SyntheticImage]) -> None:
        """Generate every slot of ``specs`` now (on the threads when there are any)."""
        items = [(s, k) for s in specs for k in range(max(self.slots, 0))]
        for _ in self.map(items):
            pass

    def stats(self) -> dict:
        with self._lock:
            return {"entries": len(self._cache), "bytes": self._bytes, "hits": self.hits, "misses": self.misses}

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True)

    def __enter__(self) -> "ImagePool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
