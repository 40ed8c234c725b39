"""Fidelity of one dataset (or profile) to another: two-sample KS distances and medians per metric.

``compare(a, b)`` takes two profiles (``vlmdata.profile.measure`` documents; a dataset folder is
profiled first by :func:`load_side`) and tests, per metric, the two-sample Kolmogorov-Smirnov
distance ``sup |F_a(x) - F_b(x)|`` of the stored rows against a threshold; decode time is tested
by the ratio of medians ``b / a`` (decode times of two runs are too noisy for a KS test; the KS
distance is still reported). A is the reference (real data), B the candidate (synthetic).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

from vlmdata.errors import VlmdataError
from vlmdata.profile.measure import ProfileError, ProfileOptions, load_profile, metric_values, profile_dataset
from vlmdata.storage.files import open_input

METRICS = (
    "pixels_per_image",
    "aspect_ratio",
    "bytes_per_image",
    "visual_tokens_per_sample",
    "text_tokens_per_sample",
    "images_per_sample",
    "decode_ms_per_image",
)
# Issue 3 goals: 0.05 visual tokens/sample and pixels/image, 0.10 bytes/image, decode median in [0.9, 1.1].
DEFAULT_THRESHOLDS = {
    "pixels_per_image": 0.05,
    "aspect_ratio": 0.05,
    "bytes_per_image": 0.10,
    "visual_tokens_per_sample": 0.05,
    "text_tokens_per_sample": 0.10,
    "images_per_sample": 0.05,
}
DEFAULT_DECODE_RATIO = (0.9, 1.1)
PASS, FAIL, SKIP = "PASS", "FAIL", "SKIP"


def ks_distance(a, b) -> float:
    """Two-sample Kolmogorov-Smirnov statistic (0 for identical samples, 1 for disjoint ones)."""
    a = np.sort(np.asarray(a, dtype=np.float64))
    b = np.sort(np.asarray(b, dtype=np.float64))
    if a.size == 0 or b.size == 0:
        raise ValueError("KS distance of an empty sample")
    x = np.concatenate([a, b])
    fa = np.searchsorted(a, x, side="right") / a.size
    fb = np.searchsorted(b, x, side="right") / b.size
    return float(np.max(np.abs(fa - fb)))


def ks_critical(n: int, m: int, alpha: float = 0.05) -> float:
    """The KS distance above which two samples of sizes n and m differ at level alpha (asymptotic)."""
    c = np.sqrt(-0.5 * np.log(alpha / 2))
    return float(c * np.sqrt((n + m) / (n * m)))


class ThresholdError(VlmdataError, ValueError):
    """A ``thresholds`` entry that cannot be used (not METRIC=VALUE, an unknown metric, a value out of range)."""


@dataclass
class Thresholds:
    ks: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_THRESHOLDS))
    decode_ratio: tuple[float, float] = DEFAULT_DECODE_RATIO

    def set(self, text: str) -> None:
        """Apply ``metric=value`` (a KS threshold) or ``decode_ms_per_image=LO,HI`` (ratio range)."""
        name, sep, value = text.partition("=")
        name = name.strip()
        if not sep:
            raise ThresholdError(f"threshold {text!r}: expected METRIC=VALUE")
        if name == "decode_ms_per_image" or name == "decode_ratio":
            lo, _, hi = value.partition(",")
            try:
                self.decode_ratio = (float(lo), float(hi))
            except ValueError:
                raise ThresholdError(f"threshold {text!r}: expected decode_ms_per_image=LO,HI") from None
            if not 0 < self.decode_ratio[0] <= self.decode_ratio[1]:
                raise ThresholdError(f"threshold {text!r}: need 0 < LO <= HI")
            return
        if name not in self.ks:
            raise ThresholdError(f"unknown metric {name!r} (choose from {', '.join(METRICS)})")
        try:
            v = float(value)
        except ValueError:
            raise ThresholdError(f"threshold {text!r}: {value!r} is not a number") from None
        if not 0 <= v <= 1:
            raise ThresholdError(f"threshold {text!r}: a KS distance lies in [0, 1]")
        self.ks[name] = v


def is_profile_file(path: str) -> bool:
    """True for a path that should be read as a profile (a .json file that is not LLaVA/messages records)."""
    return os.path.isfile(path) and path.endswith(".json") and not _looks_like_source(path)


def load_side(path: str, opts: ProfileOptions | None = None, progress=None) -> tuple[dict, str]:
    """(profile, kind) for a profile file or a dataset/source path (profiled now with ``opts``)."""
    if is_profile_file(path):
        return load_profile(path), "profile"
    if not os.path.exists(path):
        raise ProfileError(f"{path}: no such file or directory")
    return profile_dataset(path, opts or ProfileOptions(), progress=progress), "dataset"


def _looks_like_source(path: str) -> bool:
    """A .json that is LLaVA/messages records rather than a profile (peek at the first bytes)."""
    with open_input(path) as f:  # regular files only (a FIFO blocked)
        head = f.read(4096).lstrip()
    return head.startswith(b"[") or (b'"conversations"' in head or b'"messages"' in head) and b'"schema"' not in head


def options_from(profile: dict, tokenizer: str | None = None) -> ProfileOptions:
    """Profile options that make a dataset comparable with ``profile`` (same model and limits)."""
    m = profile["model"]
    tok = tokenizer or (profile.get("tokenizer") or {}).get("path")
    return ProfileOptions(
        model=m["name"],
        min_pixels=int(m["min_pixels"]),
        max_pixels=int(m["max_pixels"]),
        tokenizer=tok if tok and os.path.isdir(tok) else tokenizer,
    )


def _median(v) -> float | None:
    return float(np.median(v)) if len(v) else None


def compare(a: dict, b: dict, thresholds: Thresholds | None = None) -> dict:
    """Per-metric KS distance, medians, PASS/FAIL; ``passed`` is True when no metric fails."""
    th = thresholds or Thresholds()
    va, vb = metric_values(a), metric_values(b)
    rows = []
    for name in METRICS:
        x, y = va[name], vb[name]
        row = {
            "metric": name,
            "n_a": len(x),
            "n_b": len(y),
            "median_a": _median(x),
            "median_b": _median(y),
            "ks": None,
            "ks_critical_5pct": None,
            "threshold": None,
            "ratio": None,
            "status": SKIP,
        }
        if not x or not y:
            row["note"] = "no data on " + (" and ".join(s for s, v in (("A", x), ("B", y)) if not v))
            rows.append(row)
            continue
        row["ks"] = round(ks_distance(x, y), 4)
        row["ks_critical_5pct"] = round(ks_critical(len(x), len(y)), 4)
        if name == "decode_ms_per_image":
            ratio = row["median_b"] / row["median_a"] if row["median_a"] else float("inf")
            lo, hi = th.decode_ratio
            row.update(
                ratio=round(ratio, 4),
                threshold=[lo, hi],
                test="median ratio B/A within range",
                status=PASS if lo <= ratio <= hi else FAIL,
            )
        else:
            t = th.ks[name]
            row.update(threshold=t, test="KS <= threshold", status=PASS if row["ks"] <= t else FAIL)
            if row["median_a"]:
                row["ratio"] = round(row["median_b"] / row["median_a"], 4)
        rows.append(row)
    return {"metrics": rows, "passed": all(r["status"] != FAIL for r in rows), "warnings": _warnings(a, b)}


def _warnings(a: dict, b: dict) -> list[str]:
    out = []
    ma, mb = a.get("model", {}), b.get("model", {})
    keys = ("name", "min_pixels", "max_pixels")
    if any(ma.get(k) != mb.get(k) for k in keys):
        out.append(
            "visual tokens were counted for different models or pixel limits: "
            f"A {[ma.get(k) for k in keys]} vs B {[mb.get(k) for k in keys]}"
        )
    ta, tb = a.get("tokenizer") or {}, b.get("tokenizer") or {}
    if ta.get("tokenizer_json_sha256") != tb.get("tokenizer_json_sha256") or ta.get("vocab_size") != tb.get(
        "vocab_size"
    ):
        out.append("text tokens were counted with different tokenizers")
    da, db = a.get("decode") or {}, b.get("decode") or {}
    if (
        da.get("decoder")
        and db.get("decoder")
        and (da.get("decoder") != db.get("decoder") or da.get("machine") != db.get("machine"))
    ):
        out.append(
            f"decode times come from different decoders or machines: {da.get('decoder')} on "
            f"{da.get('machine')} vs {db.get('decoder')} on {db.get('machine')}"
        )
    return out


def side_summary(path: str, kind: str, p: dict) -> dict:
    s = p.get("summary", {})
    return {
        "path": os.path.abspath(path),
        "kind": kind,
        "source": p.get("source", {}),
        "samples": s.get("samples"),
        "images": s.get("images"),
        "stored_samples": p["rows"]["stored_samples"],
        "model": p.get("model", {}).get("name"),
        "profile_sha256": p.get("_sha256"),
    }
