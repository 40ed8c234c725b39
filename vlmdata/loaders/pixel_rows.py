"""Pixel rows written once, straight into the batch's buffer.

A decoded image's pixel rows (float32 ``[gh*gw, 3*T*p*p]``, 24 bytes per pixel for T=2) are the bulk of a
Qwen-VL batch (~80 MB for four 1 MP images). Patchifying every image into its own array and then joining
them with ``np.concatenate`` / ``torch.cat`` writes every byte twice. Here the sample processor keeps each
image as ``PixelRows``: the uint8 image at its final size (3 bytes per pixel) plus how to patchify it, and
the collator allocates one ``[N, patch_dim]`` float32 buffer per batch and patchifies each image into its
slice (``batch_pixels``). The values are those of ``vision.preprocess_any`` bit for bit (same resize, same
``image.patchify``; tests/test_loader_levers.py checks it), and a processed sample waiting for its batch
holds 8x less memory. Batch buffers come from a small pool (``BufferPool``) and go back to it when the
batch is freed, so the pages are mapped once, not for every batch.

``PixelRows`` also behaves as an array where one is expected (``np.asarray(rows)`` patchifies it), so a
caller that reads ``Processed.pixel_values`` directly still gets the pixel rows.
"""

from __future__ import annotations

import io
import threading
import weakref

import numpy as np
from PIL import Image

from vlmdata.errors import OptionsError
from vlmdata.qwen.image import patchify, resized_array
from vlmdata.qwen.spec import QwenSpec, get_spec
from vlmdata.qwen.vision import bridge_resized


class PixelRows:
    """One image's pixel rows, not yet written: ``array`` uint8 at the final size ((H, W, 3), (H, W), or
    (3, H, W) when ``chw``); ``shape`` is the (rows, patch_dim) that ``write_into`` fills. Picklable."""

    __slots__ = ("array", "chw", "shape", "spec")

    def __init__(self, array: np.ndarray, spec: QwenSpec, chw: bool):
        self.array, self.spec, self.chw = array, spec, chw
        h, w = array.shape[1:] if chw else array.shape[:2]
        p = spec.patch_size
        self.shape = ((h // p) * (w // p), spec.patch_dim)

    @property
    def grid(self) -> tuple[int, int, int]:
        h, w = self.array.shape[1:] if self.chw else self.array.shape[:2]
        return 1, h // self.spec.patch_size, w // self.spec.patch_size

    def write_into(self, out: np.ndarray) -> None:
        """Patchify into ``out`` (a C-contiguous float32 slice of exactly ``shape``)."""
        patchify(self.array, self.spec, self.chw, out=out)

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        a = patchify(self.array, self.spec, self.chw)
        return a if dtype is None else a.astype(dtype, copy=False)

    def __getstate__(self):
        return self.array, self.spec, self.chw, self.shape

    def __setstate__(self, state):
        self.array, self.spec, self.chw, self.shape = state


class _Lease:
    """The numpy base of one handed-out buffer: while any array or tensor over it lives, so does the
    lease; when the last one goes, its finalizer gives the block back to the pool."""

    def __init__(self, block: np.ndarray, n: int):
        self.block = block
        self.__array_interface__ = {
            "shape": (n,),
            "typestr": "<f4",
            "version": 3,
            "data": (block.__array_interface__["data"][0], False),
        }


class BufferPool:
    """Batch buffers recycled once their batch is freed (by the training loop, or by the DataLoader
    worker after sending it), so each batch's pixel rows land in memory already mapped: a fresh
    ~80 MB buffer costs as much in page faults (the kernel zeroing every page) as writing it. At most
    ``keep`` idle blocks are kept; a buffer handed out is never handed out again while anything uses it."""

    def __init__(self, keep: int = 2):
        self.keep = keep
        self._idle: list[np.ndarray] = []
        self._lock = threading.RLock()  # a finalizer may run inside empty() (gc)

    def empty(self, shape: tuple[int, int]) -> np.ndarray:
        """An uninitialised C-contiguous float32 array of ``shape`` (rows, cols)."""
        n = shape[0] * shape[1]
        with self._lock:
            fits = [b for b in self._idle if b.size >= n]
            block = min(fits, key=lambda b: b.size) if fits else None
            if block is not None:
                self._idle = [b for b in self._idle if b is not block]  # by identity (== is elementwise)
        if block is None:
            block = np.empty(n + n // 8, dtype=np.float32)  # 1/8 spare: the next batch's rows usually fit
        lease = _Lease(block, n)
        weakref.finalize(lease, self._give_back, block)
        return np.asarray(lease).reshape(shape)

    def _give_back(self, block: np.ndarray) -> None:
        with self._lock:
            self._idle.append(block)
            if len(self._idle) > self.keep:
                smallest = min(self._idle, key=lambda b: b.size)
                self._idle = [b for b in self._idle if b is not smallest]

    def clear(self) -> None:
        with self._lock:
            self._idle.clear()


BUFFERS = BufferPool()  # one per process (a forked worker starts with a copy of the parent's idle blocks)


def preprocess_rows(
    data,
    spec: str | QwenSpec,
    min_pixels: int,
    max_pixels: int,
    resize: str = "bridge",
    exact: bool = False,
) -> tuple[PixelRows, tuple[int, int, int]]:
    """``vision.preprocess_any`` with the patchify left for the batch buffer: (PixelRows, (1, gh, gw)).

    Args:
        data: encoded image bytes or a PIL image.
        spec, min_pixels, max_pixels, resize, exact: as ``vision.preprocess_any``.

    Returns:
        (rows, grid); ``np.asarray(rows)`` equals ``preprocess_any(...)[0]`` bit for bit."""
    s = get_spec(spec)
    if resize == "bridge":
        a, chw = bridge_resized(data, s, min_pixels, max_pixels, exact)
    elif resize == "hf":
        resampler = "pil" if exact else "torch"
        if isinstance(data, Image.Image):
            a, chw = resized_array(data, s, min_pixels, max_pixels, not exact, resampler)
        else:
            with Image.open(io.BytesIO(bytes(data))) as img:
                a, chw = resized_array(img, s, min_pixels, max_pixels, not exact, resampler)
    else:
        raise OptionsError(f"`resize` must be 'bridge' or 'hf', got {resize!r}")
    rows = PixelRows(a, s, chw)
    return rows, rows.grid


def batch_pixels(parts: list, patch_dim: int) -> np.ndarray:
    """One float32 ``[sum rows, patch_dim]`` buffer holding ``parts`` (PixelRows or float32 arrays) in order,
    each written once; a single array part is returned as it is (made contiguous).

    Args:
        parts: the batch's images' pixel rows, in batch order.
        patch_dim: 3 * temporal_patch_size * patch_size**2 of the model.

    Returns:
        The batch's ``pixel_values`` as a numpy array (``torch.from_numpy`` shares it)."""
    if len(parts) == 1 and isinstance(parts[0], np.ndarray):
        return np.ascontiguousarray(parts[0])
    out = BUFFERS.empty((sum(p.shape[0] for p in parts), patch_dim))
    at = 0
    for p in parts:
        n = p.shape[0]
        if isinstance(p, PixelRows):
            p.write_into(out[at : at + n])
        else:
            out[at : at + n] = p
        at += n
    return out
