"""The random-access reader of the on-disk format: one sample's members, one parsed ``Sample``.

* ``ShardReader`` reads one sample's contiguous members (one ranged GET on object storage), at the place its
  ``SampleRef`` says (``dataset.refs``; made by ``dataset.scan.scan_shard``, which locates every sample of a
  shard by its tar headers, reconciled with the manifest);
* ``parse_raw`` is the one sample parser: a sample's members -> ``Sample``, with the build's validity rule,
  raising ``BadSampleError`` with the build's skip reason.

The loaders, the synthetic twin and the profile read samples through this module (``SampleRef``,
``ShardIndex``, ``scan_shard`` and ``manifest_entry`` are importable from here too).
"""

from __future__ import annotations

import logging
from typing import BinaryIO

from vlmdata import storage
from vlmdata.dataset.images import ImageProblem, check_image
from vlmdata.dataset.refs import SampleRef, ShardIndex
from vlmdata.dataset.scan import manifest_entry, scan_shard
from vlmdata.dataset.schema import BadJSON, Sample, conversation_problem, count_image_parts, loads
from vlmdata.errors import VlmdataError

log = logging.getLogger("vlmdata.loaders")


class BadSampleError(VlmdataError):
    """One sample cannot be used (``reason``: the build's skip reason); ``shard`` and ``key`` name it."""

    def __init__(self, message: str, shard: str | None = None, key: str | None = None, reason: str = "error"):
        super().__init__(message)
        self.shard, self.key, self.reason = shard, key, reason


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
            f = self._files[ref.shard] = storage.open_input(self.paths[ref.shard])  # regular files only
        return read_members(f, ref)

    def close(self):
        for f in self._files.values():
            f.close()
        self._files.clear()


def record_skip(shard: str | None, key: str | None, reason: str, detail: str) -> dict:
    rec = {"shard": shard, "key": key, "reason": reason, "detail": detail}
    log.warning("vlmdata loader skipped sample: shard=%s key=%s reason=%s: %s", shard, key, reason, detail)
    return rec


__all__ = [
    "BadSampleError",
    "SampleRef",
    "ShardIndex",
    "ShardReader",
    "manifest_entry",
    "parse_raw",
    "read_members",
    "record_skip",
    "scan_shard",
]
