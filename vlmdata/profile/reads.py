"""What a profile reads: the samples of a dataset folder, a shard, or a source (image folder, LLaVA/messages JSON,
Hugging Face dataset: the readers of ``vlmdata build``, handed ``ProfileOptions.source`` whole), each kept only when it passes the build's validity rule (text and image headers);
what fails is counted by reason, never raised (``open_input``).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Iterator

from vlmdata import storage
from vlmdata.dataset.images import ImageProblem, check_image
from vlmdata.dataset.manifest import ManifestError
from vlmdata.dataset.resolve import open_dataset
from vlmdata.dataset.schema import BadJSON, conversation_problem, count_image_parts, loads, safe_label
from vlmdata.dataset.tar import TarReadError, iter_raw_samples, iter_shard
from vlmdata.profile.document import ProfileError
from vlmdata.profile.options import ProfileOptions
from vlmdata.sources import SourceError, open_source
from vlmdata.sources.base import MAX_IMAGE_BYTES


@dataclass
class InputSample:
    conversation: list[dict]
    images: list[bytes]
    label: str


def _read_shard(path: str):
    if storage.is_url(storage.local(path)):
        with storage.open(path, "rb") as f:
            yield from iter_raw_samples(f)
    else:
        yield from iter_shard(path)


def _sample_problem(conv, images: list[bytes]) -> str | None:
    """The reason a sample fails the validity rule the build applies (text and image headers), or None."""
    bad = conversation_problem(conv)
    if bad:
        return bad[0]
    if count_image_parts(conv) != len(images):
        return "bad_record"
    for data in images:
        try:
            check_image(data)
        except ImageProblem as e:
            return e.reason
    return None


def _iter_shard_samples(paths: list[str], skipped: Counter, counts: list[int] | None = None) -> Iterator[InputSample]:
    """Samples of the shards; a damaged shard or sample is counted in ``skipped`` (by reason), never raised.
    ``counts``: the manifest's sample count per shard (a missing or cut shard counts its lost samples)."""
    for n, path in enumerate(paths):
        got = 0
        try:
            for raw in _read_shard(path):
                got += 1
                try:
                    meta = loads(raw.files["json"]) if "json" in raw.files else None
                    infos = meta.get("images") if isinstance(meta, dict) else None
                    conv = meta.get("conversation") if isinstance(meta, dict) else None
                    if not isinstance(infos, list):
                        raise KeyError("images")
                    images = [raw.files[i["file"]] for i in infos]
                except (BadJSON, KeyError, TypeError):
                    skipped["bad_sample"] += 1
                    continue
                reason = _sample_problem(conv, images)
                if reason:
                    skipped[reason] += 1
                    continue
                assert conv is not None  # _sample_problem rejects a missing conversation
                yield InputSample(conv, images, f"{storage.basename(path)}:{safe_label(raw.key, 200)}")
        except TarReadError:
            lost = (counts[n] - got) if counts and counts[n] > got else 1
            skipped["truncated_tar"] += lost
        except FileNotFoundError:
            skipped["missing_shard"] += counts[n] if counts else 1
        except (OSError, storage.StorageError):
            skipped["read_error"] += (counts[n] - got) if counts and counts[n] > got else 1


def open_input(path: str, opts: ProfileOptions) -> tuple[dict, Iterator[InputSample], Counter]:
    """(source description, samples, skip counter) for a dataset folder, shard, image folder or JSON
    (what the path names is decided by ``vlmdata.dataset.resolve.open_dataset``)."""
    skipped: Counter = Counter()
    try:
        ref = open_dataset(path)
    except (ManifestError, storage.StorageError) as e:
        raise ProfileError(storage.redact_text(e)) from None
    except OSError as e:
        raise ProfileError(f"{safe_label(storage.redact_text(path))}: {storage.redact_text(e)}") from None
    if ref.kind == "missing":
        raise ProfileError(
            f"{safe_label(ref.shown) if ref.remote else safe_label(ref.path)}: no such file or "
            f"{'folder' if ref.remote else 'directory'}"
        )
    if ref.kind == "dataset":
        m = ref.manifest or {}
        desc = {
            "path": ref.shown,
            "kind": "shards",
            "manifest_kind": m.get("kind"),
            "manifest_samples": m.get("totals", {}).get("samples"),
        }
        return desc, _iter_shard_samples(list(ref.shards), skipped, [e["samples"] for e in m["shards"]]), skipped
    if ref.kind == "shard":
        return {"path": ref.shown, "kind": "shard"}, _iter_shard_samples(list(ref.shards), skipped), skipped
    return _open_source_input(ref.path, ref.shown, opts, skipped)


def _open_source_input(
    path: str, shown: str, opts: ProfileOptions, skipped: Counter
) -> tuple[dict, Iterator[InputSample], Counter]:

    try:
        fmt, items = open_source(path, opts.source)  # the request whole
    except SourceError as e:
        raise ProfileError(str(e)) from None

    def read(ref) -> bytes:
        if not isinstance(ref, str):
            return bytes(ref)
        if storage.is_url(ref):
            data = storage.cat(ref)
            if len(data) > MAX_IMAGE_BYTES:
                raise storage.FileTooLarge(27, "image too large")
            return data
        return storage.read_regular(ref, MAX_IMAGE_BYTES, "image file")

    def gen() -> Iterator[InputSample]:
        while True:
            try:
                item = next(items)
            except StopIteration:
                return
            except SourceError as e:
                raise ProfileError(str(e)) from None
            except (OSError, storage.StorageError) as e:
                raise ProfileError(f"{shown}: {storage.redact_text(getattr(e, 'strerror', None) or e)}") from None
            try:
                if item.error or not item.conversation:
                    skipped[item.error[0] if item.error else "bad_record"] += 1
                    continue
                images = [read(ref) for ref in item.images]
            except FileNotFoundError:
                skipped["missing_file"] += 1
                continue
            except (OSError, storage.StorageError):
                skipped["unreadable_file"] += 1
                continue
            except Exception:  # noqa: BLE001 - one input never stops a profile (as in the build)
                skipped["unexpected_error"] += 1
                continue
            reason = _sample_problem(item.conversation, images)
            if reason:
                skipped[reason] += 1
                continue
            yield InputSample(item.conversation, images, item.input)

    return {"path": shown, "kind": fmt}, gen(), skipped
