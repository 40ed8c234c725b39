"""Energon metadata for a vlmdata dataset: ``.nv-meta/`` (as megatron-energon writes it), and its check.

``prepare_energon`` writes the index and ``split.yaml`` (``vlmdata.dataset.nvmeta_index``: byte-identical to
``energon prepare``'s, from the shard layouts the writer recorded, without importing megatron-energon),
``dataset.yaml`` and ``vlmdata_loader.py`` (the ``sample_loader`` Energon imports and runs) and returns
what the manifest records about them (``energon_record``): the sha256 of the loader and of ``dataset.yaml``. ``check_energon`` is what
``vlmdata validate`` runs: ``.nv-meta`` is present and complete, its shard list and counts equal the
manifest's, ``split.yaml`` sound (``check_split``: the ``train`` and ``val`` parts Bridge reads present, ``train``
listing every shard exactly once, no part listing a shard twice or a stranger, nothing excluded), every
``.tar.idx`` and every ``index.sqlite`` row equal what the shards give
(``nvmeta_index.check_index``), the loader and ``dataset.yaml`` are byte-identical to what the build recorded (for a
manifest from before the record existed: to a file some vlmdata release wrote, else a problem; the
missing record itself is only a warning), and only then, when nothing is wrong, Energon opens the
dataset and reads a sample through the loader (code that does not match is never executed).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import itertools
import json
import os
import re
import shutil

import braceexpand  # megatron-energon's dependency: the expansion Energon applies to split.yaml

from vlmdata.dataset.nvmeta_index import check_index, write_index
from vlmdata.storage import read_regular, redact_text

DATASET_YAML = """\
# Written by vlmdata. Samples are Megatron Bridge ChatML samples (conversation + imgs), no pickle.
__module__: {module}
__class__: ChatMLWebdataset
sample_loader: vlmdata_loader.py:sample_loader
part_filter: vlmdata_loader.py:part_filter
"""
TARGETS = {"vlmdata": "vlmdata.energon_sample", "bridge": "megatron.bridge.data.energon.task_encoder_utils"}
LOADER_NAME = "vlmdata_loader.py"
LOADER_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "nvmeta_loader.py")
# sha256 of every vlmdata_loader.py a vlmdata release has written (git history of energon_loader.py), so
# that datasets built before the manifest recorded the hash can still be told apart from edited ones.
KNOWN_LOADER_SHA256 = frozenset(
    {
        "324d656e42c272b1d0c3e0c49e066cdd583e8b1c0060a8a6b8d82b2e4fcae994",
        "88775693ca8f8bc5805e8b7cbbc37a2b9a541a4cef6b331d4035096a0a144bbf",
    }
)
NV_META_FILES = (".info.json", "dataset.yaml", "split.yaml", "index.sqlite", "index.uuid", LOADER_NAME)


# split.yaml parts, as Energon regex patterns over the shard names. Every shard is in ``train`` *and* in
# ``val``: a built dataset is one training set, and holding shards out of it behind the user's back would
# silently drop data (and is impossible for a one-shard dataset); but Megatron Bridge's Energon data
# module asks for ``split_part="val"`` whenever validation runs (``do_validation=True`` and
# ``eval_iters > 0``, its defaults) and Energon fails with "Invalid split part: 'val'" if the part is
# missing. So validation works out of the box and measures loss on (a sample of) the training data.
# For a held-out validation set build a second dataset and point Bridge at an Energon metadataset, or
# edit split.yaml (docs/FORMAT.md, docs/bridge-contract.md section 4).
SPLIT_PARTS_PATTERNS = [("train", ".*"), ("val", ".*")]


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def loader_sha256() -> str:
    """sha256 of the sample loader this vlmdata writes."""
    with open(LOADER_SOURCE, "rb") as f:
        return _sha256(f.read())


def dataset_yaml(target: str = "vlmdata") -> str:
    return DATASET_YAML.format(module=TARGETS[target])


def energon_record(target: str = "vlmdata") -> dict:
    """What the manifest records about ``.nv-meta`` (computed before it is written)."""
    return {
        "sample_loader_sha256": loader_sha256(),
        "dataset_yaml_sha256": _sha256(dataset_yaml(target).encode()),
        "target": target,
    }


def prepare_energon(
    root: str, shard_names: list[str], workers: int = 1, target: str = "vlmdata", layouts: dict | None = None
) -> dict:
    """Index the shards for Energon, write split.yaml (every shard in ``train`` and in ``val``, see
    ``SPLIT_PARTS_PATTERNS``) and dataset.yaml. Returns ``energon_record(target)``.

    The index (``NAME.tar.idx``, ``.nv-meta/index.sqlite``, ``.info.json``, ``split.yaml``, ``index.uuid``)
    is written by ``vlmdata.dataset.nvmeta_index`` from each shard's layout (``layouts``: shard name -> the
    ``(member name, size)`` list the shard writer recorded; a shard without one has its headers read),
    byte-identical to what ``energon prepare`` writes, without importing megatron-energon (torch).
    ``workers`` is accepted for compatibility and unused (the index is written in one pass)."""
    meta = os.path.join(root, ".nv-meta")
    if os.path.isdir(meta):
        shutil.rmtree(meta)
    layouts = layouts or {}
    write_index(root, [(n, layouts.get(n)) for n in shard_names], SPLIT_PARTS_PATTERNS)
    shutil.copyfile(LOADER_SOURCE, os.path.join(meta, LOADER_NAME))
    with open(os.path.join(meta, "dataset.yaml"), "w") as f:
        f.write(dataset_yaml(target))
    return energon_record(target)


def check_energon(root: str, manifest: dict, open_with_energon: bool = True) -> tuple[list[str], list[str]]:
    """Check a local dataset's ``.nv-meta`` against its manifest (module docstring).

    Args:
        root: the dataset folder.
        manifest: its loaded manifest.
        open_with_energon: when nothing else is wrong, open the dataset with Energon and read a sample.

    Returns:
        (problems, warnings): lists of one-line messages."""
    problems: list[str] = []
    warnings: list[str] = []
    record = manifest.get("energon", "absent")
    if record is None or not manifest.get("shards"):
        return problems, warnings  # built without Energon metadata, or nothing to index
    meta = os.path.join(root, ".nv-meta")
    if not os.path.isdir(meta):
        return ["no .nv-meta folder: Energon (and Megatron Bridge's Energon path) cannot read this dataset"], warnings
    missing = [f for f in NV_META_FILES if not os.path.isfile(os.path.join(meta, f))]
    if missing:
        problems.append(f".nv-meta is incomplete: {', '.join(missing)} missing (interrupted build?)")
    missing_idx = [s["name"] for s in manifest["shards"] if not os.path.isfile(os.path.join(root, s["name"] + ".idx"))]
    if missing_idx:
        problems.append(
            f"Energon index files missing: {', '.join(n + '.idx' for n in missing_idx[:5])}"
            + (" ..." if len(missing_idx) > 5 else "")
        )
    try:
        with open(os.path.join(meta, ".info.json"), "rb") as f:
            counts = json.loads(f.read()).get("shard_counts")
        want = {s["name"]: s["samples"] for s in manifest["shards"]}
        if counts != want:
            problems.append(".nv-meta/.info.json lists other shards or sample counts than the manifest")
    except (OSError, ValueError, AttributeError, RecursionError):
        if ".info.json" not in missing:
            problems.append(".nv-meta/.info.json is unreadable")
    if "split.yaml" not in missing:
        problems += check_split(meta, [s["name"] for s in manifest["shards"]])
    if not missing and not missing_idx:  # the index is what the shards give, byte for byte and row for row
        try:
            problems += check_index(root, [s["name"] for s in manifest["shards"]])
        except (OSError, ValueError) as e:
            problems.append(f"the Energon index cannot be checked: {e}")
    loader_ok = _check_file(
        os.path.join(meta, LOADER_NAME),
        record,
        "sample_loader_sha256",
        KNOWN_LOADER_SHA256,
        "vlmdata_loader.py (the code Energon runs)",
        problems,
        warnings,
    )
    yaml_known = {_sha256(dataset_yaml(t).encode()) for t in TARGETS}
    yaml_ok = _check_file(
        os.path.join(meta, "dataset.yaml"),
        record,
        "dataset_yaml_sha256",
        yaml_known,
        "dataset.yaml",
        problems,
        warnings,
    )
    if open_with_energon and not problems and loader_ok and yaml_ok:
        problem = _open_with_energon(root)
        if problem:
            problems.append(problem)
    return problems, warnings


MAX_SPLIT_BYTES = 1 << 20  # split.yaml (brace-collapsed names: a few hundred bytes for thousands of shards)
SPLIT_NEEDS = ("train", "val")  # the parts Megatron Bridge's Energon data module asks for (val: validation)


def check_split(meta: str, names: list[str]) -> list[str]:
    """Problems of ``.nv-meta/split.yaml`` against the manifest's shard ``names``: the parts Bridge reads are
    there (``train``; ``val``, which Bridge asks for whenever validation runs), ``train`` lists every shard exactly
    once, no part lists a shard twice or a name that is no shard, ``exclude`` excludes no shard. Entries are
    brace-expanded as Energon expands them (at most a few times the shard count: a ``{0..10**12}`` range is not
    enumerated). Empty when the split is sound."""
    import yaml  # only here: validate of an Energon dataset

    where = ".nv-meta/split.yaml"
    try:
        data = yaml.safe_load(read_regular(os.path.join(meta, "split.yaml"), MAX_SPLIT_BYTES, "split.yaml"))
    except (OSError, ValueError, RecursionError, yaml.YAMLError) as e:  # NotRegularFile and FileTooLarge are OSErrors
        return [f"{where} is unreadable ({redact_text(str(e).splitlines()[0][:160]) if str(e) else type(e).__name__})"]
    parts = data.get("split_parts") if isinstance(data, dict) else None
    if not isinstance(parts, dict):
        return [f"{where} has no split_parts mapping: Energon cannot tell which shards to read"]
    known, problems, limit = set(names), [], 4 * len(names) + 16
    for part in SPLIT_NEEDS:
        if part not in parts:
            problems.append(
                f"{where} has no {part!r} part: Megatron Bridge's Energon data module asks for it"
                + (' whenever validation runs (Energon: "Invalid split part")' if part == "val" else "")
            )
    for part, entries in parts.items():
        listed = _expand(entries, limit)
        if listed is None:
            problems.append(f"{where}: part {str(part)[:40]!r} is not a list of shard names (or lists far too many)")
            continue
        dup = sorted({n for n in listed if listed.count(n) > 1})
        unknown = sorted(set(listed) - known)
        if dup:
            problems.append(f"{where}: part {part!r} lists {_few(dup)} more than once: Energon reads them twice")
        if unknown:
            problems.append(f"{where}: part {part!r} lists {_few(unknown)}, not shards of this dataset")
        absent = [n for n in names if n not in set(listed)]
        if part == "train" and absent:
            problems.append(
                f"{where}: part 'train' lists {len(names) - len(absent)} of {len(names)} shards (missing {_few(absent)}):"
                " Energon would train on part of the data"
            )
    excluded = _expand(data.get("exclude") or [], limit)
    hit = sorted(set(excluded or []) & known)
    if excluded is None or hit:
        problems.append(
            f"{where}: exclude " + (f"removes {_few(hit)}: Energon would skip its samples" if hit else "is not a list")
        )
    return problems


def _expand(entries, limit: int) -> list[str] | None:
    """Energon's brace expansion of a part's entries, None when they are not a list of strings or expand to more
    than ``limit`` names."""
    if not isinstance(entries, list) or not all(isinstance(e, str) for e in entries):
        return None
    out: list[str] = []
    for e in entries:
        if _expansion_bound(e) > limit:  # braceexpand builds every range in memory: count first
            return None
        try:
            out += itertools.islice(braceexpand.braceexpand(e), limit + 1 - len(out))
        except (ValueError, RecursionError):
            return None
        if len(out) > limit:
            return None
    return out


_GROUP = re.compile(r"\{([^{}]*)\}")
_RANGE = re.compile(r"^(-?\d+)\.\.(-?\d+)(?:\.\.-?(\d+))?$|^([A-Za-z])\.\.([A-Za-z])")


def _expansion_bound(pattern: str) -> float:
    """An upper bound of the names ``braceexpand(pattern)`` gives: the product of every innermost group's size."""
    bound = 1.0
    for group in _GROUP.findall(pattern):
        m = _RANGE.match(group)
        if m and m.group(1) is not None and max(len(m.group(1)), len(m.group(2))) > 18:
            return float("inf")  # a range of 10^18 or more (int() refuses 4,300+ digits)
        if m and m.group(1) is not None:
            size = abs(int(m.group(2)) - int(m.group(1))) // max(1, int(m.group(3) or 1)) + 1
        else:
            size = 52 if m else group.count(",") + 1
        bound *= size
    return bound


def _few(names: list[str]) -> str:
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def _check_file(
    path: str, record, field: str, known: frozenset | set, what: str, problems: list, warnings: list
) -> bool:
    try:
        with open(path, "rb") as f:
            got = _sha256(f.read())
    except OSError:
        return False  # reported as missing
    want = record.get(field) if isinstance(record, dict) else None
    if want is not None:
        if got != want:
            problems.append(f".nv-meta/{os.path.basename(path)}: sha256 differs from the manifest: {what} was edited")
            return False
        return True
    if got not in known:
        problems.append(f".nv-meta/{os.path.basename(path)} matches no file vlmdata writes: {what} was edited")
        return False
    warnings.append(
        f"manifest records no {field} (dataset built by an older vlmdata); .nv-meta/"
        f"{os.path.basename(path)} matches a file vlmdata wrote"
    )
    return True


def _open_with_energon(root: str) -> str | None:
    """None when Energon opens the dataset and reads its first sample through the loader, else the problem."""
    try:
        from megatron.energon import WorkerConfig, get_loader, get_train_dataset  # heavy: only for this check

        wc = WorkerConfig(rank=0, world_size=1, num_workers=0)
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            ds = get_train_dataset(
                root,
                batch_size=None,
                shuffle_buffer_size=None,
                max_samples_per_sequence=None,
                worker_config=wc,
                repeat=False,
            )
            next(iter(get_loader(ds)))
    except Exception as e:  # noqa: BLE001 - whatever Energon raises, the dataset is not readable by it
        first = str(e).strip().splitlines()[0][:200] if str(e).strip() else ""
        return f"Energon cannot read the dataset ({type(e).__name__}: {redact_text(first)})"
    return None
