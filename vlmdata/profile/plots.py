"""Histograms of one or more profiles (matplotlib, Agg backend; matplotlib is optional: ``pip install vlmdata[plot]``)."""

from __future__ import annotations

import numpy as np

from vlmdata.profile.measure import ProfileError, metric_values

PANELS = [  # (metric key, title, transform, log x)
    ("pixels_per_image", "image size (megapixels)", lambda v: np.asarray(v) / 1e6, False),
    ("aspect_ratio", "aspect ratio (W/H)", None, True),
    ("bytes_per_image", "encoded bytes per image (KB)", lambda v: np.asarray(v) / 1e3, True),
    ("visual_tokens_per_image", "visual tokens per image", None, False),
    ("visual_tokens_per_sample", "visual tokens per sample", None, False),
    ("text_tokens_per_sample", "text tokens per sample (prompt + answer)", None, True),
    ("images_per_sample", "images per sample", None, False),
    ("decode_ms_per_image", "decode ms per image", None, True),
]


def _values(profile: dict) -> dict:
    v = metric_values(profile)
    v["visual_tokens_per_image"] = list(map(float, profile["rows"]["images"]["visual_tokens"]))
    return v


def plot_profiles(profiles: list[dict], path: str, labels: list[str] | None = None, title: str | None = None) -> str:
    """Write a PNG grid of histograms; several profiles are overlaid (same bins)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ProfileError("`plot` needs matplotlib (pip install 'vlmdata[plot]')") from None
    labels = labels or [f"profile {i}" for i in range(len(profiles))]
    values = [_values(p) for p in profiles]
    fig, axes = plt.subplots(2, 4, figsize=(17, 7.5))
    for ax, (key, name, fn, logx) in zip(axes.flat, PANELS):
        series = [np.asarray(fn(v[key]) if fn else v[key], dtype=np.float64) for v in values]
        series = [s[np.isfinite(s)] for s in series]
        allv = np.concatenate([s for s in series if s.size]) if any(s.size for s in series) else np.array([])
        if allv.size == 0:
            ax.set_title(f"{name}\n(no data)")
            continue
        lo, hi = float(allv.min()), float(allv.max())
        if key == "images_per_sample":
            bins = np.arange(lo - 0.5, hi + 1.5, 1.0)
        elif logx and lo > 0 and hi > lo:
            bins = np.geomspace(lo, hi, 40)
            ax.set_xscale("log")
        else:
            bins = np.linspace(lo, hi if hi > lo else lo + 1, 40)
        for s, lab in zip(series, labels):
            if s.size:
                ax.hist(
                    s,
                    bins=bins,
                    alpha=0.55 if len(series) > 1 else 0.9,
                    label=f"{lab} (n={s.size})",
                    density=len(series) > 1,
                )
        ax.set_title(name, fontsize=10)
        ax.tick_params(labelsize=8)
        if len(series) > 1:
            ax.legend(fontsize=7)
    if title:
        fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
