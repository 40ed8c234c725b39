"""Shard -> sample references: where every sample's members lie, found by reading only the tar headers.

``scan_shard`` locates every sample by a strict header walk (``_strict_scan``), and after a break (a corrupt
header, a member past the end, data after the end of the archive) or a disagreement with the manifest, by a
deep scan for intact headers anywhere in the file (``_deep_scan``); the result is reconciled with the
manifest's record of the shard (``_reconcile``): samples the scan cannot find are reported as lost
(``SampleRef.error``), never silently dropped. Tar headers are parsed by ``dataset.tar`` (the one tar reader).
"""

from __future__ import annotations

import os
from typing import Literal

from vlmdata import storage
from vlmdata.dataset.manifest import ManifestError, load_manifest, shard_keys
from vlmdata.dataset.refs import SampleRef
from vlmdata.dataset.schema import BadJSON, loads
from vlmdata.dataset.tar import BadHeader, parse_header, pax_path

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
            if typ == b"x":  # a pax header (vlmdata writes none; other tools do for long or non-ASCII names)
                f.seek(data_at)
                long_name = pax_path(f.read(msize)) or long_name  # as dataset.tar reads it
                continue
            if typ == b"g":
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
        if typ == b"x" and not (past_end or overlaps):
            f.seek(at + 512)
            long_name = pax_path(f.read(msize)) or long_name
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
