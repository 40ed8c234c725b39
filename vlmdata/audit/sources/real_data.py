"""The audit's real source: its shards, the check that it is real data, and the default ``seq_length`` it fits.

**The real source must be real** (``real_shards`` / ``check_real``): a dataset whose manifest says it was
generated (``kind`` "synth": ``vlmdata synth --mock imagefree`` or ``--profile``; "twin": an audit's
synthetic twin), or whose manifest counts no images, is refused as the real source; and the real source is
always decoded (``images="decode"``): a user loader option ``images`` (``--loader-arg images=drop``) is
refused (``check_loader_options``), since it would turn every source, real included, into something else.
Shards without a manifest are accepted when no manifest beside them says they were generated.

``fit_seq_length`` gives the audit's default ``seq_length`` for a dataset: the default when every sample
of the first epoch (at most ``FIT_SAMPLES``) fits it, else the longest sample rounded up to 128, so that a
realistic multi-image dataset does not fail the default run (an explicit ``seq_length`` is never changed;
the census still refuses one that is too short).
"""

from __future__ import annotations

import os

from vlmdata import storage
from vlmdata.audit.sources.registry import FIT_SAMPLES, GENERATED_KINDS, AuditError
from vlmdata.dataset.manifest import MANIFEST_NAME, ManifestError, load_manifest
from vlmdata.dataset.resolve import open_dataset
from vlmdata.errors import VlmdataError
from vlmdata.loaders.api import make_loader
from vlmdata.loaders.options import LoaderOptions
from vlmdata.loaders.reads import resolve_shards
from vlmdata.sources import FORMATS, SourceError, detect_format


def real_shards(real: str) -> list[str]:
    """The real dataset's shard paths in loader order; AuditError when there are none or when the dataset is
    not real data (``check_real``)."""
    shown = storage.redact_text(real)
    try:
        shards = resolve_shards(real)
    except (VlmdataError, ValueError, OSError) as e:
        hint = _build_hint(real)
        raise AuditError(f"real dataset {shown!r}: {storage.redact_text(e)}" + (f"; {hint}" if hint else "")) from None
    check_real(real, shards)
    return shards


def _manifests_of(real: str, shards: list[str]) -> list[tuple[str, dict]]:
    """(folder, manifest) of the dataset ``real`` names, or of every local folder of its shards that has one."""
    ref = open_dataset(real)
    if ref.kind == "dataset" and ref.manifest is not None:
        return [(ref.shown, ref.manifest)]
    out = []
    for folder in dict.fromkeys(os.path.dirname(s) for s in shards if not storage.is_url(s)):
        if os.path.isfile(os.path.join(folder, MANIFEST_NAME)):
            try:
                out.append((folder, load_manifest(folder)))
            except ManifestError:
                continue  # a broken manifest beside loose shards: the loader reads the shards as they are
    return out


def check_real(real: str, shards: list[str]) -> None:
    """AuditError when the real source is not real data: a manifest of kind "synth" or "twin" (module
    docstring), or a dataset whose manifest counts samples but no images."""
    shown = storage.redact_text(real)
    for folder, m in _manifests_of(real, shards):
        kind = m.get("kind")
        if kind in GENERATED_KINDS:
            src: dict = m["source"] if isinstance(m.get("source"), dict) else {}
            what = src.get("generator") or src.get("mock") or src.get("format") or kind
            raise AuditError(
                f"real dataset {shown!r} is not real data: its manifest ({folder}) says it is "
                f"{GENERATED_KINDS[kind]} ({what}); the real source must be real: build it from your data with "
                "`vlmdata build SOURCE -o SHARDS`"
            )
        totals: dict = m["totals"] if isinstance(m.get("totals"), dict) else {}
        if totals.get("samples") and totals.get("images") == 0:
            raise AuditError(
                f"real dataset {shown!r} holds {totals['samples']} samples and no images: the audit compares "
                "image workloads, so the real source must carry the real images"
            )


def fit_seq_length(
    real: str, default: int, *, micro_batch_size: int = 1, seed: int = 0, loader_options: dict | None = None
) -> int:
    """The audit's default ``seq_length`` for ``real`` (module docstring): ``default`` when the longest of
    the first ``FIT_SAMPLES`` samples of one epoch fits it, else that length rounded up to a multiple of 128.

    Args:
        real: the real dataset (as ``real_shards`` takes it).
        default: the device's default sequence length.
        micro_batch_size: samples per batch (the loader reads whole batches).
        seed: the run's seed (the sample order).
        loader_options: the user's other loader options (pixel limits change visual tokens).
    """
    opts = {k: v for k, v in (loader_options or {}).items() if k not in ("images", "image_device", "image_decoder")}
    try:
        o = LoaderOptions(seq_length=None, micro_batch_size=micro_batch_size, seed=seed, num_workers=0).replace(
            **opts, images="shapes", num_epochs=1, rank=0, world_size=1
        )
        loader = make_loader(real_shards(real), o)
    except (VlmdataError, ValueError, OSError):
        return default  # the run itself reports the problem, with its own words
    longest, seen = 0, 0
    for _ in loader.iter_inline():
        lengths = getattr(loader, "last_lengths", None) or []
        longest, seen = max([longest, *lengths]), seen + len(lengths)
        if seen >= FIT_SAMPLES:
            break
    return default if longest <= default else -(-longest // 128) * 128


def _build_hint(path: str) -> str | None:
    """What to do when ``path`` is a build source (image folder, LLaVA/messages JSON, HF dataset), not shards."""
    if not os.path.exists(path) or _shards_or_nothing(path):
        return None
    try:
        fmt = detect_format(path)
    except (SourceError, ValueError, OSError):
        return None
    entry = FORMATS.get(fmt)
    what = entry.description if entry is not None else f"a {fmt} source"
    return f"it is {what}, not vlmdata shards: run `vlmdata build {path} -o SHARDS` first, then audit SHARDS"


def _shards_or_nothing(path: str) -> bool:
    """Whether folder ``path`` is empty or holds a dataset's files (a manifest or shards): not a build source, so
    no `vlmdata build` hint (an empty folder or a broken manifest read 'it is an image folder')."""
    if not os.path.isdir(path):
        return False
    try:
        with os.scandir(path) as it:
            names = [e.name for _, e in zip(range(10_000), it)]  # a bounded look: a huge folder is not read whole
    except OSError:
        return True
    return not names or MANIFEST_NAME in names or any(n.endswith(".tar") for n in names)
