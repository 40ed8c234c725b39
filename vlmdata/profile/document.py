"""The profile document (schema ``vlmdata.profile/1``, docs/profiles.md): its columns, its checks, its file.

A profile is a compact empirical joint distribution of a dataset's workload shape: ``rows`` (per-sample rows and
the image rows of each, columnar: ``SAMPLE_COLUMNS``, ``IMAGE_COLUMNS``), ``summary``, ``decode``, ``model`` and
``tokenizer``. This module reads and writes it (``load_profile``, ``write_profile``, ``check_outputs``), checks its
structure (``validate_profile``) and hands its rows on (``sample_rows`` to the synthetic generators,
``metric_values`` to ``vlmdata compare``). Making one is ``profile.measure``'s job.

``check_outputs(out, plot, inputs)`` runs before any profiling: the profile (and plot) can be written and replace
nothing but an earlier profile (plot: a PNG), never an input or a dataset's file (``dataset.resolve.check_output``).
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any

import numpy as np

from vlmdata import storage
from vlmdata.dataset.resolve import check_output
from vlmdata.dataset.schema import dumps, safe_label
from vlmdata.errors import VlmdataError
from vlmdata.qwen.spec import get_spec

PROFILE_SCHEMA = "vlmdata.profile/1"
SAMPLE_COLUMNS = ("n_images", "prompt_tokens", "answer_tokens", "turns", "visual_tokens", "first_image")
IMAGE_COLUMNS = ("width", "height", "format", "mode", "bytes", "quality", "subsampling", "progressive", "visual_tokens")
# what one sample row may ask for (a profile is a file from outside: a row of 10**8 answer tokens or 10**6 images
# made `vlmdata synth` run out of memory); every cell is checked by ``validate_profile``
MAX_ROW_TOKENS = 1 << 16  # prompt or answer tokens of one sample (the text generator's reach)
MAX_ROW_IMAGES = 1024  # images of one sample
# column -> (lowest, highest) of its integer cells; the other columns are strings (format, mode, subsampling,
# each may be null but format), a bool (progressive) or an integer quality 0-100 or null
_INT_SAMPLE = {
    "n_images": (0, MAX_ROW_IMAGES),
    "prompt_tokens": (0, MAX_ROW_TOKENS),
    "answer_tokens": (0, MAX_ROW_TOKENS),
    "turns": (0, MAX_ROW_TOKENS),
    "visual_tokens": (0, 1 << 40),
    "first_image": (0, 1 << 40),
}
_INT_IMAGE = {"width": (1, 1 << 31), "height": (1, 1 << 31), "bytes": (1, 1 << 40), "visual_tokens": (0, 1 << 40)}


class ProfileError(VlmdataError):
    """A profile cannot be made or read (bad input, bad profile file): one line for the user."""


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
        _check_cells(where, s, im)
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


def _int_cell(v, low: int, high: int) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and low <= v <= high


def _check_cells(where: str, s: dict, im: dict) -> None:
    """Every cell of the rows is of its column's type and range, and each sample's ``first_image`` is the running
    sum of ``n_images`` (a lying profile was an IndexError, a TypeError or a NaN in `vlmdata compare`)."""

    def bad(col: str, i: int, v, want: str):
        # as JSON writes it: the text "64" is not the number 64
        raise ProfileError(f"{where}: rows.{col}[{i}] is {json.dumps(v)[:40]}, expected {want}")

    for table, ranges in (("samples", _INT_SAMPLE), ("images", _INT_IMAGE)):
        cols = s if table == "samples" else im
        for k, (low, high) in ranges.items():
            for i, v in enumerate(cols[k]):
                if not _int_cell(v, low, high):
                    bad(f"{table}.{k}", i, v, f"an integer from {low} to {high:,}")
    first = 0
    for i, (a, c) in enumerate(zip(s["first_image"], s["n_images"])):
        if a != first:
            bad("samples.first_image", i, a, f"{first} (the images of the rows before it)")
        first += c
    for k, nullable in (("format", False), ("mode", True), ("subsampling", True)):
        for i, v in enumerate(im[k]):
            if not (isinstance(v, str) and 0 < len(v) <= 32) and not (nullable and v is None):
                bad(f"images.{k}", i, v, "a short text" + (" or null" if nullable else ""))
    for i, v in enumerate(im["progressive"]):
        if not isinstance(v, bool) and v is not None:
            bad("images.progressive", i, v, "true, false or null")
    for i, v in enumerate(im["quality"]):
        if v is not None and not _int_cell(v, 0, 100):
            bad("images.quality", i, v, "an integer from 0 to 100 or null")


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
