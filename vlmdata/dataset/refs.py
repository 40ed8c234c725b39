"""Sample references: where each sample's members lie in its shard, the unit the loaders plan with.

``SampleRef`` is one sample (shard number, key, ext -> (offset, size), and the error of a sample known bad
at index time); ``ShardIndex`` holds one shard's references compactly, since a loader keeps the index of every
shard. Made by ``dataset.scan.scan_shard``; read with ``dataset.reader.ShardReader``.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import overload


@dataclass
class SampleRef:
    """Where one sample's members lie: ext -> (offset, size). ``error`` marks a sample known bad at index time."""

    shard: int
    key: str
    members: dict[str, tuple[int, int]] = field(default_factory=dict)
    error: tuple[str, str] | None = None  # (reason, detail)


class ShardIndex(Sequence[SampleRef]):
    """One shard's sample references, stored compactly: a loader keeps the index of every shard (exact
    resume and random access need it), so its size is what grows with the dataset. As ``SampleRef``
    objects it costs ~740 bytes a sample (measured with tracemalloc); here ~60 (keys in one UTF-8 blob,
    member offsets and sizes in ``array``s, errors in a dict of the few bad samples). Items are
    ``SampleRef`` objects made on access, equal to the ones it was built from."""

    __slots__ = ("shard", "_keys", "_key_ends", "_mstart", "_mext", "_moff", "_msize", "_exts", "_errors")

    def __init__(self, shard: int, refs: Iterable[SampleRef]):
        keys = bytearray()
        key_ends, mstart = array("q"), array("q", [0])
        mext, moff, msize = array("H"), array("q"), array("q")
        exts: list[str] = []
        ext_ids: dict[str, int] = {}
        errors: dict[int, tuple[str, str]] = {}
        for j, r in enumerate(refs):
            keys += r.key.encode("utf-8", "surrogatepass")  # any str round-trips (tar names may hold escapes)
            key_ends.append(len(keys))
            for ext, (off, n) in r.members.items():
                k = ext_ids.get(ext)
                if k is None:
                    k = ext_ids[ext] = len(exts)
                    exts.append(ext)
                mext.append(k)
                moff.append(off)
                msize.append(n)
            mstart.append(len(moff))
            if r.error is not None:
                errors[j] = r.error
        self.shard = shard
        self._keys, self._key_ends, self._mstart = bytes(keys), key_ends, mstart
        self._mext, self._moff, self._msize, self._exts, self._errors = mext, moff, msize, exts, errors

    def __len__(self) -> int:
        return len(self._key_ends)

    @overload
    def __getitem__(self, j: int) -> SampleRef: ...
    @overload
    def __getitem__(self, j: slice) -> list[SampleRef]: ...
    def __getitem__(self, j):
        if isinstance(j, slice):
            return [self[i] for i in range(*j.indices(len(self)))]
        n = len(self)
        if j < 0:
            j += n
        if not 0 <= j < n:
            raise IndexError(f"sample {j} of a shard of {n}")
        key = self._keys[self._key_ends[j - 1] if j else 0 : self._key_ends[j]].decode("utf-8", "surrogatepass")
        members = {
            self._exts[self._mext[m]]: (self._moff[m], self._msize[m])
            for m in range(self._mstart[j], self._mstart[j + 1])
        }
        return SampleRef(self.shard, key, members, self._errors.get(j))
