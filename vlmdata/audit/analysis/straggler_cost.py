"""The per-micro-batch cost model of the straggler simulation (``vlmdata.audit.analysis.straggler_model``): its formula,
its fit on measured micro-batches and its calibration per source. Pure numpy/scipy.

    micro_ms = fixed_ms + per_token_ms * B*S + per_patch_ms * sum_i n_i + per_patch_sq_ms * sum_i n_i**2

``optimizer_ms`` is paid once per global step. ``fit_cost_model`` fits the four coefficients by
non-negative least squares on the measured micro-batches of all sources jointly (one model runs them all);
``calibrate`` scales the joint fit per source to its measured mean; ``cost_ms`` evaluates the formula on
scalars or arrays alike.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vlmdata.audit.sources.registry import AuditError

__all__ = ["CostModel", "fit_cost_model", "calibrate", "cost_ms", "TERMS", "MICRO_KEYS"]

COLLINEAR_TOL = 1e-6  # a regressor is not identifiable when the others explain it to this relative residual
TERMS = ("fixed_ms", "per_token_ms", "per_patch_ms", "per_patch_sq_ms")
MICRO_KEYS = ("ms", "tokens_total", "patches", "patch_sq")


@dataclass(frozen=True)
class CostModel:
    """Time of one micro-batch's forward+backward (ms) = fixed_ms + per_token_ms * padded_tokens
    + per_patch_ms * patches + per_patch_sq_ms * sum over images of patches_i**2 (the vision attention);
    optimizer_ms once per global step. Every coefficient is finite and >= 0."""

    fixed_ms: float
    per_token_ms: float
    per_patch_ms: float
    per_patch_sq_ms: float
    optimizer_ms: float
    fit: dict = field(default_factory=dict)  # how it was obtained: n micro-batches, r2, residual rms, sources used

    def __post_init__(self) -> None:
        for name in (*TERMS, "optimizer_ms"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or not np.isfinite(value) or value < 0:
                raise AuditError(f"CostModel.{name} must be a finite number >= 0, got {value!r}")


# --------------------------------------------------------------------------- fitting


def fit_cost_model(micro: list[dict], optimizer_ms: float) -> CostModel:
    """Fit the per-micro-batch cost model to measured micro-batches (all sources jointly).

    Non-negative least squares (``scipy.optimize.nnls``) on columns scaled to unit norm. A term whose
    regressor is zero everywhere (no images) or explained by the terms before it (order: fixed, tokens,
    patches, patch_sq; e.g. patch_sq when every image has the same size, tokens when every micro-batch
    is padded to the same length) is not identifiable: it is set to 0 and ``fit["dropped"]`` says why.

    Args:
        micro: one dict per measured micro-batch: ``{"ms": float, "tokens_total": padded B*S,
            "patches": int, "patch_sq": sum of per-image patches**2, "source": str}``.
        optimizer_ms: the optimizer step's time (once per global step).

    Returns:
        A ``CostModel``; its ``fit`` holds n_micro_batches, r2 (None when every ms is equal),
        residual_rms_ms, the sources used (with counts), the fitted and the dropped terms.

    Raises:
        AuditError: fewer than 2 micro-batches, a missing key, or a non-finite / negative value.
    """
    # scipy: heavy, and needed only once a model is fitted (the report's modules, read by `vlmdata audit
    # --help`, import this one)
    from scipy.optimize import nnls

    y, x, sources = _design(micro)
    if not isinstance(optimizer_ms, int | float) or not np.isfinite(optimizer_ms) or optimizer_ms < 0:
        raise AuditError(f"`optimizer_ms` must be a finite number >= 0, got {optimizer_ms!r}")
    keep, dropped = _identifiable(x)
    cols = x[:, keep]
    norms = np.linalg.norm(cols, axis=0)
    scaled, _ = nnls(cols / norms, y)
    coef = np.zeros(len(TERMS))
    coef[keep] = scaled / norms
    resid = y - x @ coef
    ss_res = float(resid @ resid)
    ss_tot = float(((y - y.mean()) ** 2).sum())
    fit = {
        "n_micro_batches": len(y),
        "r2": (1.0 - ss_res / ss_tot) if ss_tot > 0 else None,
        "residual_rms_ms": float(np.sqrt(ss_res / len(y))),
        "sources": dict(sorted(sources.items())),
        "terms": [TERMS[k] for k in keep],
        "dropped": dropped,
        "method": "non-negative least squares (scipy.optimize.nnls) on all sources jointly",
    }
    return CostModel(*(float(c) for c in coef), optimizer_ms=float(optimizer_ms), fit=fit)


def _design(micro: list[dict]) -> tuple[np.ndarray, np.ndarray, Counter]:
    if not isinstance(micro, list | tuple) or len(micro) < 2:
        n = len(micro) if isinstance(micro, list | tuple) else type(micro).__name__
        raise AuditError(f"`micro`: fit_cost_model needs at least 2 measured micro-batches, got {n}")
    rows, y, sources = [], [], Counter()
    for i, m in enumerate(micro):
        if not isinstance(m, dict):
            raise AuditError(f"micro[{i}] must be a dict with keys {MICRO_KEYS + ('source',)}, got {type(m).__name__}")
        missing = [k for k in MICRO_KEYS if k not in m]
        if missing:
            raise AuditError(f"micro[{i}] lacks {', '.join(missing)}")
        vals = []
        for k in MICRO_KEYS:
            v = m[k]
            if isinstance(v, bool) or not isinstance(v, int | float | np.integer | np.floating):
                raise AuditError(f"micro[{i}][{k!r}] must be a number, got {v!r}")
            if not np.isfinite(v) or v < 0:
                raise AuditError(f"micro[{i}][{k!r}] must be finite and >= 0, got {v!r}")
            vals.append(float(v))
        y.append(vals[0])
        rows.append([1.0, *vals[1:]])
        sources[str(m.get("source", "?"))] += 1
    return np.asarray(y), np.asarray(rows), sources


def _identifiable(x: np.ndarray) -> tuple[list[int], dict[str, str]]:
    keep, dropped = [0], {}
    for j in range(1, x.shape[1]):
        col = x[:, j]
        if not col.any():
            dropped[TERMS[j]] = "its regressor is 0 in every micro-batch" + (" (no images)" if j >= 2 else "")
            continue
        base = x[:, keep]
        beta = np.linalg.lstsq(base, col, rcond=None)[0]
        if np.linalg.norm(col - base @ beta) <= COLLINEAR_TOL * np.linalg.norm(col):
            names = ", ".join(TERMS[k] for k in keep)
            dropped[TERMS[j]] = f"not identifiable: its regressor is collinear with {names} (set to 0)"
            continue
        keep.append(j)
    return keep, dropped


# --------------------------------------------------------------------------- one micro-batch


def cost_ms(cost: CostModel, tokens_total: Any, patches: Any, patch_sq: Any) -> Any:
    """The cost formula, on scalars or arrays (one order of operations for both, so they agree exactly)."""
    return (
        cost.fixed_ms + cost.per_token_ms * tokens_total + cost.per_patch_ms * patches + cost.per_patch_sq_ms * patch_sq
    )


def calibrate(cost: CostModel, micro: list[dict]) -> dict[str, CostModel]:
    """One cost model per source: the joint fit scaled so that its mean over each source's measured
    micro-batches equals their measured mean (the joint fit gives how cost varies with tokens and patches; the
    scale absorbs what a linear model misses per source, e.g. a decoder bound by kernel launches on short
    image-free batches). The optimizer term is not scaled. The factors are in each model's ``fit``.

    A joint fit that predicts 0 ms for every micro-batch of a source (e.g. all its cost on the patch terms and
    the source has no images) cannot be scaled: that source gets its measured mean as a fixed cost per
    micro-batch (``fit["calibration"]`` says so), never a model of zero time."""
    by: dict[str, list[dict]] = {}
    for m in micro:
        by.setdefault(str(m.get("source")), []).append(m)
    out = {}
    for name, ms in by.items():
        pred = [float(cost_ms(cost, m["tokens_total"], m["patches"], m["patch_sq"])) for m in ms]
        meas = [float(m["ms"]) for m in ms]
        if sum(pred) <= 0:
            out[name] = CostModel(
                sum(meas) / len(meas),
                0.0,
                0.0,
                0.0,
                cost.optimizer_ms,
                {
                    **cost.fit,
                    "calibration_factor": None,
                    "calibrated_on": len(ms),
                    "calibration": "the joint fit predicts 0 ms for this source: its measured mean as a fixed cost",
                },
            )
            continue
        f = sum(meas) / sum(pred)
        out[name] = CostModel(
            cost.fixed_ms * f,
            cost.per_token_ms * f,
            cost.per_patch_ms * f,
            cost.per_patch_sq_ms * f,
            cost.optimizer_ms,
            {**cost.fit, "calibration_factor": f, "calibrated_on": len(ms)},
        )
    return out
