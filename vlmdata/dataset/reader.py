"""The random-access reader of the on-disk format: a shard -> sample references (where each sample's
members lie), one sample's members, one parsed ``Sample``.

* ``scan_shard`` locates every sample by a strict tar header scan (a deep scan when the shard is damaged),
  reconciled with the manifest's record of the shard: samples the scan cannot find are reported as lost
  (``SampleRef.error``), never silently dropped;
* ``ShardReader`` reads one sample's contiguous members (one ranged GET on object storage);
* ``parse_raw`` is the one sample parser: a sample's members -> ``Sample``, with the build's validity rule,
  raising ``BadSampleError`` with the build's skip reason.

Tar headers are parsed by ``dataset.tar`` (the one tar reader); the loaders, the synthetic twin and the
profile read samples through this module.
"""

from __future__ import annotations

import logging
import os
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import BinaryIO, Literal, overload

from vlmdata import storage
from vlmdata.dataset.images import ImageProblem, check_image
from vlmdata.dataset.manifest import ManifestError, load_manifest, shard_keys
from vlmdata.dataset.schema import BadJSON, Sample, conversation_problem, count_image_parts, loads
from vlmdata.dataset.tar import BadHeader, parse_header
from vlmdata.errors import VlmdataError

log = logging.getLogger("vlmdata.loaders")


class BadSampleError(VlmdataError):
    def __init__(self, message: str, shard: str | None = None, key: str | None = None, reason: str = "error"):
        super().__init__(message)
        self.shard, self.key, self.reason = shard, key, reason


# ----------------------------------------------------------------------------- shard index


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


_ZERO_BLOCK = bytes(512)
_MAX_PADDING = 20 * 512  # zero bytes a tar writer may leave after the end-of-archive blocks (record padding)


class _Broken(Exception):
    refs: list[SampleRef]  # what _strict_scan had read when it broke (set there)

    def __init__(self, reason: str, detail: str, pos: int):
        super().__init__(detail)
        self.reason, self.detail, self.pos = reason, detail, pos


def _regular(typ: bytes) -> bool:
    return typ in (b"0", b"\0", b"7")


def _add_member(refs: list[SampleRef], seen: set, shard_idx: int, name: str, at: int, size: int) -> None:
    d, _, base = name.rpartition("/")
    stem, _, ext = base.partition(".")
    key = f"{d}/{stem}" if d else stem
    cur = refs[-1] if refs else None
    if cur is None or cur.key != key or ext in cur.members:
        cur = SampleRef(shard_idx, key)
        if key in seen:
            cur.error = ("duplicate_key", f"key {key} occurs more than once in the shard")
        seen.add(key)
        refs.append(cur)
    cur.members[ext] = (at, size)


def _strict_scan(f, size: int, shard_idx: int) -> list[SampleRef]:
    """Header-only walk from member to member; _Broken at the first inconsistency (the refs so far are
    in the exception's ``refs`` attribute)."""
    refs: list[SampleRef] = []
    seen: set = set()
    pos = 0
    long_name = None
    try:
        while True:
            if pos + 512 > size:
                raise _Broken("truncated_tar", f"archive ends at byte {size} without end-of-archive blocks", pos)
            f.seek(pos)
            hdr = f.read(512)
            if len(hdr) < 512:
                raise _Broken(
                    "truncated_tar", f"archive ends at byte {pos + len(hdr)} without end-of-archive blocks", pos
                )
            if hdr == _ZERO_BLOCK:
                rest = size - pos
                if rest > _MAX_PADDING or f.read(rest).strip(b"\0"):
                    raise _Broken("corrupt_tar", f"data after an end-of-archive block at byte {pos}", pos)
                return refs
            try:
                name, msize, typ = parse_header(hdr)
            except BadHeader as e:
                raise _Broken("corrupt_tar", f"corrupt tar header at byte {pos}: {e}", pos) from None
            data_at = pos + 512
            if data_at + msize > size:
                raise _Broken(
                    "truncated_tar", f"member at byte {pos} needs {msize} bytes, the archive has {size - data_at}", pos
                )
            pos = data_at + -(-msize // 512) * 512
            if typ == b"L":  # GNU long name for the next member
                f.seek(data_at)
                long_name = f.read(msize).split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
                continue
            if typ in (b"x", b"g"):  # pax headers: vlmdata writes none; a pax path is read by the deep scan
                continue
            if not _regular(typ):
                long_name = None
                continue
            _add_member(refs, seen, shard_idx, long_name or name, data_at, msize)
            long_name = None
    except _Broken as e:
        e.refs = refs
        raise


def _deep_scan(f, size: int, shard_idx: int) -> list[SampleRef]:
    """Every block with a valid ustar header, wherever it is (recovers the samples after a corrupt header or
    an inflated size field). A member whose data runs past the end (``truncated_tar``) or over the next
    header (``corrupt_tar``), and a sample without its JSON or an image its JSON lists, is an error ref."""
    found: list[tuple[int, str, int, bytes]] = []
    chunk = 1 << 20
    base = 0
    while base < size:
        f.seek(base)
        buf = f.read(min(chunk + 512, size - base))
        if not buf:
            break
        j = buf.find(b"ustar", 257)
        while j >= 0:
            at = j - 257
            if at % 512 == 0 and at < chunk and at + 512 <= len(buf):
                try:
                    name, msize, typ = parse_header(buf[at : at + 512])
                    found.append((base + at, name, msize, typ))
                except BadHeader:
                    pass
            j = buf.find(b"ustar", j + 1)
        base += chunk
    refs: list[SampleRef] = []
    seen: set = set()
    bad: dict[int, tuple[str, str]] = {}
    long_name = None
    for i, (at, name, msize, typ) in enumerate(found):
        nxt = found[i + 1][0] if i + 1 < len(found) else size
        past_end = at + 512 + msize > size
        overlaps = not past_end and at + 512 + msize > nxt
        if typ == b"L" and not (past_end or overlaps):
            f.seek(at + 512)
            long_name = f.read(msize).split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
            continue
        if not _regular(typ):
            long_name = None
            continue
        _add_member(refs, seen, shard_idx, long_name or name, at + 512, 0 if past_end or overlaps else msize)
        long_name = None
        if past_end:
            bad.setdefault(
                id(refs[-1]),
                (
                    "truncated_tar",
                    f"member at byte {at} needs {msize} bytes, the archive has {max(0, size - at - 512)}",
                ),
            )
        elif overlaps:
            bad.setdefault(
                id(refs[-1]),
                ("corrupt_tar", f"member at byte {at} claims {msize} bytes, over the next member (corrupt size field)"),
            )
    for r in refs:
        if r.error is None and id(r) in bad:
            r.error = bad[id(r)]
        elif r.error is None and not _complete(f, r):
            r.error = ("corrupt_tar", "sample incomplete: its JSON or an image it lists is missing from the shard")
    return refs


def _complete(f, ref: SampleRef) -> bool:
    """Whether a sample has its JSON and every image its JSON lists (used for the sample at a break)."""
    if "json" not in ref.members:
        return False
    off, n = ref.members["json"]
    if n > 64 << 20:
        return False
    f.seek(off)
    try:
        meta = loads(f.read(n))
    except BadJSON:
        return False
    infos = meta.get("images") if isinstance(meta, dict) else None
    if not isinstance(infos, list):
        return False
    return all(isinstance(i, dict) and i.get("file") in ref.members for i in infos)


_MANIFESTS: dict[str, tuple[tuple, dict | None]] = {}


def manifest_entry(path: str) -> dict | None:
    """The manifest entry of the shard at ``path`` from the ``manifest.json`` beside it (cached per folder
    and manifest version), or None when there is none or it cannot be read."""
    folder, name = storage.dirname(path), storage.basename(path)
    mpath = storage.join(folder, "manifest.json")
    try:
        if storage.is_url(storage.local(mpath)):
            tag: tuple = ("url",)
        else:
            st = os.stat(mpath)
            tag = (st.st_mtime_ns, st.st_size)
    except (OSError, storage.StorageError, ValueError):
        return None
    hit = _MANIFESTS.get(folder)
    if hit is None or hit[0] != tag:
        try:
            m = load_manifest(folder)
        except (ManifestError, OSError, storage.StorageError):
            m = None
        _MANIFESTS[folder] = hit = (tag, m)
    m = hit[1]
    if m is None:
        return None
    return next((e for e in m["shards"] if e["name"] == name), None)


def _lost(shard_idx: int, key: str, reason: str, detail: str) -> SampleRef:
    return SampleRef(shard_idx, key, {}, (reason, detail))


def _reconcile(refs: list[SampleRef], broken: _Broken | None, entry: dict | None, shard_idx: int) -> list[SampleRef]:
    """``refs`` made to account for exactly the manifest's samples: a lost sample becomes an error ref with its
    true key (from ``key_runs``), or, for a manifest without runs, with a key naming its place."""
    reason, detail = (
        (broken.reason, broken.detail)
        if broken
        else ("missing_sample", "sample listed in the manifest is not in the shard")
    )
    if entry is None:
        if broken and not any(r.error for r in refs):  # an unknown number of samples lost: name the place
            return refs + [_lost(shard_idx, f"<after {refs[-1].key if refs else 'start'}>", reason, detail)]
        return refs
    keys = shard_keys(entry)
    n = entry["samples"]
    if keys is not None:
        pool: dict[str, list[SampleRef]] = {}
        for r in refs:
            pool.setdefault(r.key, []).append(r)
        out = []
        for k in keys:
            got = pool.get(k)
            if got:
                r = got.pop(0)
                out.append(r)
            else:
                out.append(_lost(shard_idx, k, reason, detail))
        return out
    # an older manifest (no key runs): keep what is there, drop unlisted duplicates, pad with named losses
    out = [r for r in refs if not (r.error and r.error[0] == "duplicate_key")]
    dups = [r for r in refs if r.error and r.error[0] == "duplicate_key"]
    while len(out) < n and dups:
        out.append(dups.pop(0))
    if len(out) > n:
        out = out[:n]
    last = out[-1].key if out else "start"
    out += [
        _lost(
            shard_idx,
            entry["last_key"] if i == n - len(out) - 1 else f"<sample {len(out) + i + 1} of {n}, after {last}>",
            reason,
            detail,
        )
        for i in range(n - len(out))
    ]
    return out


def scan_shard(path: str, shard_idx: int = 0, expected: "dict | None | Literal[False]" = None) -> list[SampleRef]:
    """Locate every sample's members by reading only the tar headers (``path`` may be an fsspec URL).

    The result accounts for exactly the shard's samples in the manifest beside it (``expected``: its
    manifest entry; None: looked up with ``manifest_entry``; False: no manifest): every sample that cannot
    be read is a ``SampleRef`` whose ``error`` is (reason, detail) and whose key is the sample's true key
    (``truncated_tar``, ``corrupt_tar``, ``duplicate_key``, ``missing_sample``, ``missing_shard``,
    ``read_error``). After a break (a corrupt header, a member past the end, data after the end of the
    archive) or a disagreement with the manifest, the whole file is scanned for intact headers
    (``_deep_scan``), so the samples after a damaged member are still read. Never raises for a damaged
    or missing shard."""
    entry = manifest_entry(path) if expected is None else (expected or None)
    broken: _Broken | None = None
    try:
        size = storage.size(path)
        with storage.open(path, "rb") as f:
            try:
                refs = _strict_scan(f, size, shard_idx)
                if entry is not None and (
                    len(refs) != entry["samples"]
                    or (refs and (refs[0].key != entry.get("first_key") or refs[-1].key != entry.get("last_key")))
                ):
                    raise _Broken("corrupt_tar", "the shard's samples differ from its manifest entry", 0)
                if any(r.error for r in refs):
                    raise _Broken("corrupt_tar", "a key occurs twice in the shard (a sample renamed or copied)", 0)
            except _Broken as e:
                broken = e
                refs = _deep_scan(f, size, shard_idx)
    except FileNotFoundError:
        broken = _Broken("missing_shard", "shard file missing", 0)
        refs = []
    except (OSError, storage.StorageError, ValueError) as e:
        broken = _Broken("read_error", f"shard unreadable: {getattr(e, 'strerror', None) or e}", 0)
        refs = []
    return _reconcile(refs, broken, entry, shard_idx)


def read_members(f, ref: SampleRef) -> dict[str, bytes]:
    """The bytes of a sample's members; OSError when the file is shorter than the index says."""
    out = {}
    for ext, (off, n) in ref.members.items():
        f.seek(off)
        data = f.read(n)
        if len(data) != n:
            raise OSError(f"member {ref.key}.{ext} cut short: {len(data)} of {n} bytes (the shard changed?)")
        out[ext] = data
    return out


# ----------------------------------------------------------------------------- plan


def parse_raw(files: dict[str, bytes], key: str, check_images: bool = True, with_images: bool = True) -> Sample:
    """A tar sample (ext -> bytes) -> Sample; raises BadSampleError(reason) when unusable.

    The checks are the validity rule the build applies (``schema.conversation_problem``, and with
    ``check_images`` ``images.check_image`` at header level), so a sample is skipped here under the
    same reason the build would have given: ``missing_json``, ``bad_json``, ``bad_record``,
    ``empty_caption``, ``bad_text``, ``control_token``, ``missing_image``, ``corrupt_sample`` (an image
    whose size differs from its JSON), ``undecodable_image``, ``too_large``, ``bad_aspect_ratio``,
    ``unsupported_format``. ``with_images=False`` parses the JSON alone (the image members need not be
    read: the image-free view); the sample then has no image bytes."""
    if "json" not in files:
        raise BadSampleError(f"sample {key} has no {key}.json", key=key, reason="missing_json")
    try:
        meta = loads(files["json"])
    except BadJSON as e:
        raise BadSampleError(f"sample {key}: bad json ({e})", key=key, reason="bad_json") from None
    conv = meta.get("conversation") if isinstance(meta, dict) else None
    if not isinstance(conv, list):
        raise BadSampleError(f"sample {key}: json has no conversation list", key=key, reason="bad_json")
    bad = conversation_problem(conv)
    if bad:
        raise BadSampleError(f"sample {key}: {bad[1]}", key=key, reason=bad[0])
    infos = meta.get("images") or []
    if not isinstance(infos, list):
        raise BadSampleError(f"sample {key}: json 'images' is not a list", key=key, reason="bad_json")
    if count_image_parts(conv) != len(infos):
        raise BadSampleError(
            f"sample {key}: {count_image_parts(conv)} image parts but {len(infos)} images", key=key, reason="bad_json"
        )
    images = []
    for i, info in enumerate(infos if with_images else []):
        name = info.get("file") if isinstance(info, dict) else None
        if not isinstance(name, str) or name == "json" or name not in files:
            raise BadSampleError(f"sample {key}: image file {key}.{name} missing", key=key, reason="missing_image")
        data = files[name]
        if check_images:
            try:
                check_image(data)
            except ImageProblem as e:
                raise BadSampleError(f"sample {key}: image {name}: {e.detail}", key=key, reason=e.reason) from None
        if isinstance(info.get("bytes"), int) and info["bytes"] != len(data):
            raise BadSampleError(
                f"sample {key}: image {name} has {len(data)} bytes, its json says {info['bytes']}",
                key=key,
                reason="corrupt_sample",
            )
        images.append(data)
    source_id = meta.get("source_id", "")
    return Sample(
        key=key,
        conversation=conv,
        images=images,
        source_id=source_id if isinstance(source_id, str) else "",
        synthetic=meta.get("synthetic") if isinstance(meta.get("synthetic"), dict) else None,
    )


class ShardReader:
    """Opens shard files lazily and keeps them open (one reader per worker). Shards on object storage
    (URLs) are read with one ranged GET per sample (its members are contiguous in the tar)."""

    def __init__(self, paths: list[str]):
        self.paths = paths
        self._files: dict[int, BinaryIO] = {}

    def read(self, ref: SampleRef) -> dict[str, bytes]:
        """The sample's members; OSError when the shard is shorter than its index (it changed)."""
        path = self.paths[ref.shard]
        if storage.is_url(storage.local(path)):
            if not ref.members:
                return {}
            start = min(off for off, _ in ref.members.values())
            end = max(off + n for off, n in ref.members.values())
            fs, inner = storage.fs_and_path(path)
            blob = fs.cat_file(inner, start=start, end=end)
            if len(blob) != end - start:
                raise OSError(f"sample {ref.key}: read {len(blob)} of {end - start} bytes (the shard changed?)")
            return {ext: blob[off - start : off - start + n] for ext, (off, n) in ref.members.items()}
        f = self._files.get(ref.shard)
        if f is None:
            f = self._files[ref.shard] = open(self.paths[ref.shard], "rb")
        return read_members(f, ref)

    def close(self):
        for f in self._files.values():
            f.close()
        self._files.clear()


def record_skip(shard: str | None, key: str | None, reason: str, detail: str) -> dict:
    rec = {"shard": shard, "key": key, "reason": reason, "detail": detail}
    log.warning("vlmdata loader skipped sample: shard=%s key=%s reason=%s: %s", shard, key, reason, detail)
    return rec
