"""The audit's input sources: their names, definitions, and what each hands the loader.

Every source goes through the same loader with the same options; only the data differs. Sources are
*paired* with ``real`` when step k of the source sees the same sample positions as step k of real
(the same plan: same shard layout, seed and loader options):

- ``real``: the real shards (``AuditConfig.real``), decoded and preprocessed as Bridge's collate does.
- ``synthetic`` (paired): the synthetic twin of every real sample (``vlmdata.synthetic.twin``): same
  images per sample, image sizes, formats, JPEG settings and bytes (within 10%), same text tokens per
  part; generated pixels and words; written as shards first and read like the real ones, so host costs
  match. With ``AuditConfig.profile`` it is instead sampled from that profile (not paired).
- ``imagefree`` (paired): each real sample's own conversation with its image parts removed, read from
  the real shards without touching the image members: the only difference from real is the images.
- ``imagefree-fixed``: text only with a fixed 16-token prompt and 256-token answer (a fixed-length text
  mock); not paired.
- ``bridge-noise``: Megatron Bridge's ``MockVLMSFTDatasetConfig`` (one 256x256 uniform-noise image held
  in memory, 10-29 words of its 110-word vocabulary); not paired.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from typing import Any

from vlmdata.errors import VlmdataError
from vlmdata.synthetic.names import BRIDGE_NOISE, IMAGEFREE, IMAGEFREE_FIXED

REAL, SYNTHETIC = "real", "synthetic"
SOURCES = (IMAGEFREE, BRIDGE_NOISE, SYNTHETIC, REAL)  # the default set, in the default order
ALL_SOURCES = (IMAGEFREE, IMAGEFREE_FIXED, BRIDGE_NOISE, SYNTHETIC, REAL)
MOCKS = (IMAGEFREE, IMAGEFREE_FIXED, BRIDGE_NOISE)  # the sources whose figure the verdict judges
DEFINITIONS = {
    "real": "the real shards, decoded and preprocessed as Megatron Bridge's Qwen-VL collate does",
    "synthetic": "paired: each real sample's synthetic twin (same images per sample, image sizes, formats, JPEG "
    "settings and bytes within 10%, same text tokens per part; generated pixels and words), read "
    "from shards like the real ones",
    "synthetic-profile": "sampled from a profile's joint distribution (vlmdata synth --profile), read from shards; "
    "not paired with real",
    "imagefree": "paired: each real sample's own conversation with its image parts removed (no image I/O, no "
    "vision work); the only difference from real is the images",
    "imagefree-fixed": "text only, a fixed 16-token prompt and 256-token answer per sample (a fixed-length text "
    "mock); not paired",
    "bridge-noise": "Megatron Bridge's MockVLMSFTDatasetConfig: one 256x256 uniform-noise RGB image held in memory "
    "(no file, no decode) and 10-29 words from its 110-word vocabulary; not paired",
}


class AuditError(VlmdataError):
    """The audit cannot run as asked (bad source, loader option, workload, sequence length): one line for
    the user. Messages name library parameters (``seq_length``); the CLI maps them to its flags."""


@dataclass(frozen=True)
class Input:
    """What the loader is given for one source."""

    name: str
    source: Any  # a dataset path, a mock name, or a source object
    options: dict = field(default_factory=dict)  # extra loader options (e.g. images="drop")
    paired: bool = False
    definition: str = ""


def check_sources(sources: tuple[str, ...]) -> None:
    unknown = [s for s in sources if s not in ALL_SOURCES]
    if unknown:
        raise AuditError(f"unknown source {unknown[0]!r}; choose from {', '.join(ALL_SOURCES)}")
    if REAL not in sources or len(sources) < 2:
        raise AuditError("sources must include real and at least one other source (the verdict compares to real)")
    if len(set(sources)) != len(sources):
        raise AuditError(f"sources repeat a name: {', '.join(sources)}")


def real_shards(real: str) -> list[str]:
    """The real dataset's shard paths in loader order (AuditError when there are none)."""
    from vlmdata.loaders.api import resolve_shards  # heavy imports stay out of the CLI's start-up

    try:
        return resolve_shards(real)
    except (ValueError, OSError) as e:
        hint = _build_hint(real)
        raise AuditError(f"real dataset {real!r}: {e}" + (f"; {hint}" if hint else "")) from None


def _build_hint(path: str) -> str | None:
    """What to do when ``path`` is a build source (image folder, LLaVA/messages JSON, HF dataset), not shards."""
    from vlmdata.sources import SourceError, detect_format  # only on this error path

    if not os.path.exists(path):
        return None
    try:
        fmt = detect_format(path)
    except (SourceError, ValueError, OSError):
        return None
    what = {
        "folder": "an image folder",
        "llava": "LLaVA JSON",
        "messages": "messages JSON",
        "hf": "a Hugging Face dataset",
    }.get(fmt, f"a {fmt} source")
    return f"it is {what}, not vlmdata shards: run `vlmdata build {path} -o SHARDS` first, then audit SHARDS"


def prepare_input(
    name: str,
    shards: list[str],
    *,
    profile: str | None = None,
    seed: int = 0,
    model: str = "qwen3-vl",
    work_dir: str | None = None,
    twin_keys: set[str] | None = None,
) -> Input:
    """The loader input of source ``name``; ``synthetic`` writes the twin (or the profile's shards) first.

    Args:
        name: a source name (``ALL_SOURCES``).
        shards: the real dataset's shards (``real_shards``).
        profile: a profile.json to sample the synthetic source from (unpaired) instead of the twin.
        seed: content seed of synthetic data.
        model: the loader's model family.
        work_dir: where generated shards go (a temporary folder when None).
        twin_keys: twin only these real sample keys (the others get placeholders the run never reaches).
    """
    if name == "real":
        return Input(name, shards, {}, False, DEFINITIONS["real"])
    if name == "imagefree":
        return Input(name, shards, {"images": "drop"}, True, DEFINITIONS["imagefree"])
    if name in ("imagefree-fixed", "bridge-noise"):
        return Input(name, name, {}, False, DEFINITIONS[name])
    if name == "synthetic":
        work = work_dir or tempfile.mkdtemp(prefix="vlmdata-audit-")
        if profile:
            return Input(name, _profile_shards(profile, seed, work), {}, False, DEFINITIONS["synthetic-profile"])
        from vlmdata.synthetic.twin import write_twin  # heavy imports stay out of the CLI's start-up

        path = os.path.join(work, "synthetic-twin")
        write_twin(shards, path, seed=seed, model=model, only_keys=twin_keys)
        return Input(name, path, {}, True, DEFINITIONS["synthetic"])
    raise AuditError(f"unknown source {name!r}; choose from {', '.join(ALL_SOURCES)}")


def _profile_shards(profile: str, seed: int, work: str) -> str:
    """The profile's synthetic samples (one per stored row) written as shards, like ``vlmdata synth``."""
    # the build / profile / synthetic stack: imported when a profile is given, not by `vlmdata audit --help`
    from vlmdata.build.builder import write_dataset
    from vlmdata.profile.measure import ProfileError, load_profile
    from vlmdata.synthetic.source import SyntheticSource

    if not os.path.isfile(profile):
        raise AuditError(f"profile {profile!r} does not exist")
    try:
        prof = load_profile(profile)
    except ProfileError as e:
        raise AuditError(f"profile {profile!r}: {e}") from None
    n = len(prof["rows"]["samples"]["n_images"])
    out = os.path.join(work, "synthetic-profile")
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
