"""Measure a dataset: ``profile_dataset(path)`` -> a profile document (``profile.document``, docs/profiles.md).

``profile_dataset`` reads a vlmdata dataset (shards + manifest), a single shard, an image folder or LLaVA/messages
JSON (``profile.inputs``: the readers of ``vlmdata build``, the build's validity rule) and returns:

- ``rows``: per-sample rows (images, prompt/answer text tokens, turns, visual tokens) and the image rows of each
  (``profile.images.image_row``: width, height, format, mode, bytes, JPEG quality estimate, chroma subsampling,
  progressive, visual tokens), reservoir-sampled to ``cap`` samples with a fixed seed and kept in dataset order:
  a generator samples whole rows, so sizes, images per sample and text lengths stay correlated as in the data;
- ``summary``: statistics over *all* samples (not only the stored rows);
- ``decode``: full-decode time per image on this machine (thread CPU time, the fastest of ``repeats`` decodes per
  image) on a reservoir subset of images, with the decoder named;
- ``model``/``tokenizer``: what the token counts mean (Qwen-VL ``smart_resize`` under min/max pixels; text tokens
  of every text part without special tokens: ``profile.tokens``).

Its phases: check the arguments, count every sample as it streams past (``_Tally``), time the decode subset,
assemble the document (``_document``). Every parameter is type-checked (``ProfileError`` naming it).

The names of the modules this one was split from stay importable from here (``ProfileError``, ``load_profile``,
``get_tokenizer``, ``image_row``, ...).
"""

from __future__ import annotations

import os
from collections import Counter
from typing import Callable

import numpy as np

from vlmdata import __version__ as VLMDATA_VERSION
from vlmdata.profile.document import (
    IMAGE_COLUMNS,
    PROFILE_SCHEMA,
    SAMPLE_COLUMNS,
    ProfileError,
    check_outputs,
    is_profile,
    load_profile,
    metric_values,
    profile_sha256,
    sample_rows,
    validate_profile,
    write_profile,
)
from vlmdata.profile.images import decode_ms, decoder_name, image_row, measure_decode
from vlmdata.profile.options import DEFAULT_CAP, DEFAULT_DECODE_IMAGES, MODELS, ProfileOptions
from vlmdata.profile.reads import InputSample, open_input
from vlmdata.profile.tokens import count_text_tokens, get_tokenizer, tokenizer_for_profile, tokenizer_record
from vlmdata.qwen.spec import QwenSpec, get_spec

TEXT_BATCH = 256  # samples whose text is tokenized in one batch call


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


class _Tally:
    """What a profile counts while its samples stream past: per-sample and per-image columns for the summary, the
    reservoir of stored rows (``cap``) and the reservoir of images to time (``decode_images``), both seeded by
    ``seed``. Text is tokenized ``TEXT_BATCH`` samples at a time (``flush``)."""

    def __init__(self, opts: ProfileOptions, tok, progress: Callable[[int], None] | None):
        self.opts, self.tok, self.progress = opts, tok, progress
        self.rng = np.random.default_rng([opts.seed, 0x9F0F11E])
        self.drng = np.random.default_rng([opts.seed, 0xDEC0DE])
        self.kept: list[tuple[int, dict, list[dict]]] = []  # reservoir of (index, sample row, image rows)
        self.dec: list[bytes] = []  # reservoir of image bytes for decode timing
        self.samples = 0
        self.images = 0
        self.cols: dict[str, list] = {
            k: [] for k in ("n_images", "prompt", "answer", "visual", "px", "aspect", "bytes", "bpp", "vt_img")
        }
        self.counts: dict[str, Counter] = {k: Counter() for k in ("format", "subsampling", "progressive", "mode")}
        self.quality: list[int] = []
        self.batch: list[tuple[InputSample, list[dict]]] = []

    def add(self, sample: InputSample, rows: list[dict]) -> None:
        """One readable sample and the rows of its images."""
        for data, r in zip(sample.images, rows):
            self._image(data, r)
        self.batch.append((sample, rows))
        if len(self.batch) >= TEXT_BATCH:
            self.flush()

    def _image(self, data: bytes, r: dict) -> None:
        px = r["width"] * r["height"]
        self.cols["px"].append(px)
        self.cols["aspect"].append(r["width"] / r["height"])
        self.cols["bytes"].append(r["bytes"])
        self.cols["bpp"].append(r["bytes"] / px)
        self.cols["vt_img"].append(r["visual_tokens"])
        self.counts["format"][r["format"]] += 1
        self.counts["mode"][r["mode"]] += 1
        if r["subsampling"]:
            self.counts["subsampling"][r["subsampling"]] += 1
        if r["format"] == "JPEG":
            self.counts["progressive"]["progressive" if r["progressive"] else "baseline"] += 1
        if r["quality"] is not None:
            self.quality.append(r["quality"])
        want = self.opts.decode_images
        if want:
            if len(self.dec) < want:
                self.dec.append(data)
            else:
                j = int(self.drng.integers(0, self.images + 1))
                if j < want:
                    self.dec[j] = data
        self.images += 1

    def flush(self) -> None:
        """Count the text tokens of the samples added since the last flush and make their sample rows."""
        if not self.batch:
            return
        texts = count_text_tokens(self.tok, [s.conversation for s, _ in self.batch])
        for (_, rows), (prompt, answer, turns) in zip(self.batch, texts):
            vt = sum(r["visual_tokens"] for r in rows)
            srow = {
                "n_images": len(rows),
                "prompt_tokens": prompt,
                "answer_tokens": answer,
                "turns": turns,
                "visual_tokens": vt,
            }
            self.cols["n_images"].append(len(rows))
            self.cols["prompt"].append(prompt)
            self.cols["answer"].append(answer)
            self.cols["visual"].append(vt)
            if self.samples < self.opts.cap:
                self.kept.append((self.samples, srow, rows))
            else:
                j = int(self.rng.integers(0, self.samples + 1))
                if j < self.opts.cap:
                    self.kept[j] = (self.samples, srow, rows)
            self.samples += 1
        if self.progress:
            self.progress(len(self.batch))
        self.batch.clear()

    def stored_rows(self) -> tuple[dict, dict]:
        """(sample columns, image columns) of the stored rows, in dataset order."""
        srows: dict[str, list] = {k: [] for k in SAMPLE_COLUMNS}
        irows: dict[str, list] = {k: [] for k in IMAGE_COLUMNS}
        for _, srow, rows in sorted(self.kept, key=lambda t: t[0]):
            srow = dict(srow, first_image=len(irows["width"]))
            for k in SAMPLE_COLUMNS:
                srows[k].append(srow[k])
            for r in rows:
                for k in IMAGE_COLUMNS:
                    irows[k].append(r[k])
        return srows, irows

    def summary(self, skipped: Counter) -> dict:
        cols, counts = self.cols, self.counts
        text = [p + a for p, a in zip(cols["prompt"], cols["answer"])]
        return {
            "samples": self.samples,
            "images": self.images,
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
            "jpeg_quality": _stats(self.quality),
            "formats": dict(sorted(counts["format"].items())),
            "modes": dict(sorted(counts["mode"].items())),
            "subsampling": dict(sorted(counts["subsampling"].items())),
            "jpeg_coding": dict(sorted(counts["progressive"].items())),
        }


def _checked(path, opts, progress) -> ProfileOptions:
    if not isinstance(path, (str, os.PathLike)) or not os.fspath(path):
        raise ProfileError(f"`path` must be a dataset or source path, got {path!r}"[:200])
    if progress is not None and not callable(progress):
        raise ProfileError(f"`progress` must be a callable or None, got {type(progress).__name__}")
    if opts is not None and not isinstance(opts, ProfileOptions):
        raise ProfileError(f"`opts` must be a ProfileOptions, got {type(opts).__name__}")
    opts = opts or ProfileOptions()
    opts.check()
    return opts


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
    opts = _checked(path, opts, progress)
    spec = get_spec(opts.model)
    tok = get_tokenizer(opts.tokenizer)
    source, samples, skipped = open_input(path, opts)
    tally = _Tally(opts, tok, progress)
    for s in samples:
        try:
            rows = [image_row(d, spec, opts.min_pixels, opts.max_pixels) for d in s.images]
        except ValueError:
            skipped["undecodable_image"] += 1
            continue
        tally.add(s, rows)
    tally.flush()
    if tally.samples == 0:
        raise ProfileError(f"{path}: no readable samples" + (f" ({dict(skipped)} skipped)" if skipped else ""))
    decode = measure_decode(tally.dec, opts.decode_repeats) if tally.dec else {"images": 0}
    return _document(opts, spec, tok, source, tally, tally.summary(skipped), decode)


def _document(opts: ProfileOptions, spec: QwenSpec, tok, source: dict, tally: _Tally, summary: dict, decode: dict):
    srows, irows = tally.stored_rows()
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
            "total_samples": tally.samples,
            "stored_samples": len(tally.kept),
            "sample_columns": list(SAMPLE_COLUMNS),
            "image_columns": list(IMAGE_COLUMNS),
            "samples": srows,
            "images": irows,
        },
        "summary": summary,
        "decode": decode,
    }


__all__ = [
    "DEFAULT_CAP",
    "DEFAULT_DECODE_IMAGES",
    "IMAGE_COLUMNS",
    "MODELS",
    "PROFILE_SCHEMA",
    "SAMPLE_COLUMNS",
    "InputSample",
    "ProfileError",
    "ProfileOptions",
    "check_outputs",
    "count_text_tokens",
    "decode_ms",
    "decoder_name",
    "get_tokenizer",
    "image_row",
    "is_profile",
    "load_profile",
    "measure_decode",
    "metric_values",
    "open_input",
    "profile_dataset",
    "profile_sha256",
    "sample_rows",
    "tokenizer_for_profile",
    "tokenizer_record",
    "validate_profile",
    "write_profile",
]
