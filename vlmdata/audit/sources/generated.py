"""The audit's generated sources, written as shards first and read like the real ones: the synthetic twin of
every real sample (``synthetic.twin``, paired) or the samples of a profile (``vlmdata synth --profile``, not
paired). Both go inside the work folder (``TWIN_DIR``, ``PROFILE_DIR``).
"""

from __future__ import annotations

import os
import tempfile

from vlmdata import storage
from vlmdata.audit.sources.registry import (
    PROFILE_DIR,
    SYNTHETIC_PROFILE_DEFINITION,
    TWIN_DIR,
    AuditError,
    AuditSource,
    Input,
)
from vlmdata.ingest import write_dataset
from vlmdata.profile.document import ProfileError, load_profile
from vlmdata.synthetic.source import SyntheticSource
from vlmdata.synthetic.twin import write_twin


def prepare_synthetic(
    source: AuditSource,
    shards: list[str],
    *,
    profile: str | None,
    seed: int,
    model: str,
    work_dir: str | None,
    twin_keys: set[str] | None,
) -> Input:
    """The ``synthetic`` source's input (``inputs.prepare_input``): the twin of the real shards (paired), or, with
    ``profile``, the profile's samples (not paired); written to ``work_dir`` (a temporary folder when None)."""
    work = work_dir or tempfile.mkdtemp(prefix="vlmdata-audit-")
    if profile:
        return Input(source.name, profile_shards(profile, seed, work), {}, False, SYNTHETIC_PROFILE_DEFINITION)
    path = twin_shards(shards, work, seed=seed, model=model, twin_keys=twin_keys)
    return Input(source.name, path, {}, True, source.definition)


def twin_shards(shards: list[str], work: str, *, seed: int, model: str, twin_keys: set[str] | None) -> str:
    """The synthetic twin of the real ``shards``, written to ``work``/``TWIN_DIR``; its path."""
    path = os.path.join(work, TWIN_DIR)
    write_twin(shards, path, seed=seed, model=model, only_keys=twin_keys)
    return path


def profile_shards(profile: str, seed: int, work: str) -> str:
    """The profile's synthetic samples (one per stored row) written as shards, like ``vlmdata synth``."""
    shown = storage.redact_text(profile)
    if not os.path.isfile(profile):
        raise AuditError(f"profile {shown!r} does not exist")
    try:
        prof = load_profile(profile)
    except ProfileError as e:
        raise AuditError(f"profile {shown!r}: {storage.redact_text(e)}") from None
    n = len(prof["rows"]["samples"]["n_images"])
    out = os.path.join(work, PROFILE_DIR)
    src = SyntheticSource(prof, seed, variants=0, threads=0)
    write_dataset(
        out,
        src.take(n),
        kind="synth",
        options={"generator": "profile", "seed": seed, "samples": n},
        source={"format": "synthetic", **src.describe()},
        overwrite=True,
        max_count=64,
        energon=False,
    )
    return out
