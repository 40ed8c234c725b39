"""``vlmdata validate``: re-read every shard and check it against the manifest, the schema and Energon's metadata.

What is checked (a problem makes the report fail; a warning does not):

- every shard listed exists, reads to its end with the strict tar reader, and has the manifest's
  sha256, size, sample count, first and last key and (when recorded) exact key list; no key occurs
  twice in the dataset; the totals and the accounting add up;
- every sample follows the schema and the text rules (``schema.check_meta``: no control tokens, valid
  Unicode) and every image follows the image validity rule (``images.check_image``) at ``level``:
  by default the level the dataset was built with (``options.verify`` in the manifest: "header" for a
  default build, so a default build always passes its own validate), or "full" (``decode=True``:
  every pixel decoded) / "header" (``decode=False``); an image with an EXIF orientation is a warning
  (readers disagree on it);
- no ``.tar`` file in the dataset folder is missing from the manifest (a stray copy such as
  ``shard-000000 (1).tar`` is read by every ``glob("*.tar")`` reader, the README's webdataset recipe
  included: extra samples the manifest does not count);
- ``.nv-meta`` (``energon.check_energon``): present and complete, its shard list equal to the
  manifest's, every ``.tar.idx`` and ``index.sqlite`` row equal to what the shards give, the sample loader and dataset.yaml byte-identical to what the manifest records, and
  Energon opens the dataset and reads a sample (only once all of that holds). A manifest from before
  the loader hash was recorded gives a warning, not a failure, when the loader is one vlmdata wrote.

``validate`` of a single ``.tar`` shard checks the shard and its samples (no manifest: a warning says
that checksums and counts were not compared).

A dataset or shard that holds no sample fails (a problem, exit 1): there is nothing for a reader to read.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from typing import Callable

from vlmdata import storage
from vlmdata.dataset.images import ImageProblem, check_image
from vlmdata.dataset.manifest import ManifestError, load_manifest, shard_keys
from vlmdata.dataset.nvmeta import check_energon
from vlmdata.dataset.schema import BadJSON, check_meta, loads, safe_label
from vlmdata.dataset.tar import TarReadError, iter_raw_samples
from vlmdata.errors import OptionsError


@dataclass
class Problem:
    shard: str
    key: str
    problem: str

    def __str__(self) -> str:
        return f"{self.shard}\t{self.key or '-'}\t{self.problem}"


@dataclass
class ValidationReport:
    shards: int = 0
    samples: int = 0
    images: int = 0
    problems: list[Problem] = field(default_factory=list)
    warnings: list[Problem] = field(default_factory=list)
    level: str = "header"  # the image check applied: "header" or "full"

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> dict:
        return {
            "ok": self.ok,
            "shards": self.shards,
            "samples": self.samples,
            "images": self.images,
            "level": self.level,
            "problems": [p.__dict__ for p in self.problems],
            "warnings": [w.__dict__ for w in self.warnings],
        }


class _HashingReader:
    """File wrapper that hashes exactly the bytes read."""

    def __init__(self, f):
        self.f, self.sha, self.n = f, hashlib.sha256(), 0

    def read(self, n=-1):
        b = self.f.read(n)
        self.sha.update(b)
        self.n += len(b)
        return b


def check_sample(
    shard: str, key: str, files: dict[str, bytes], decode: bool = True, warnings: list[Problem] | None = None
) -> list[Problem]:
    """Problems of one sample (schema, text rules, images at level "full" with ``decode`` else "header")."""
    key = safe_label(key, 200)
    if "json" not in files:
        return [Problem(shard, key, "no KEY.json")]
    try:
        meta = loads(files["json"])
    except BadJSON as e:
        return [Problem(shard, key, f"json does not parse: {e}")]
    out = [Problem(shard, key, p) for p in check_meta(meta, key, {k: len(v) for k, v in files.items()})]
    for i, info in enumerate(
        meta.get("images") or [] if isinstance(meta, dict) and isinstance(meta.get("images"), list) else []
    ):
        name = info.get("file") if isinstance(info, dict) else None
        if not isinstance(name, str) or name == "json" or name not in files:
            continue
        try:
            c = check_image(files[name], verify="full" if decode else "header")
        except ImageProblem as e:
            out.append(Problem(shard, key, f"image {name}: {e.detail}"))
            continue
        if (c.width, c.height) != (info.get("width"), info.get("height")) or c.format != info.get("format"):
            out.append(
                Problem(
                    shard,
                    key,
                    f"image {name} is {c.format} {c.width}x{c.height}, json says "
                    f"{safe_label(info.get('format'), 20)} {safe_label(info.get('width'), 12)}x"
                    f"{safe_label(info.get('height'), 12)}",
                )
            )
        if c.orientation != 1 and warnings is not None:
            warnings.append(
                Problem(
                    shard,
                    key,
                    f"image {name} has EXIF orientation {c.orientation}: Hugging Face "
                    "datasets rotates it, Energon and Bridge's path do not (rebuild to store it upright)",
                )
            )
    return out


def _level(manifest: dict | None, decode: bool | None) -> str:
    if decode is not None:
        return "full" if decode else "header"
    verify = ((manifest or {}).get("options") or {}).get("verify")
    return "full" if verify == "full" else "header"


_MEMBER_KINDS = {
    b"1": "a hard link",
    b"2": "a symbolic link",
    b"3": "a character device",
    b"4": "a block device",
    b"6": "a FIFO",
}


def _read_shard(
    rep: ValidationReport, name: str, f, decode: bool, progress, all_keys: dict
) -> tuple[list[str], _HashingReader]:
    keys: list[str] = []
    links: list[tuple[str, bytes]] = []
    hr = _HashingReader(f)
    try:
        for raw in iter_raw_samples(hr, links):
            keys.append(raw.key)
            rep.images += sum(1 for k in raw.files if k != "json")
            rep.problems += check_sample(name, raw.key, raw.files, decode, rep.warnings)
            if raw.key in all_keys and all_keys[raw.key] != name:
                rep.problems.append(Problem(name, safe_label(raw.key, 200), f"key also in shard {all_keys[raw.key]}"))
            all_keys.setdefault(raw.key, name)
            if progress:
                progress(1)
    except TarReadError as e:
        rep.problems.append(Problem(name, safe_label(e.key or "", 200), str(e)))
    for member, typ in links:
        kind = _MEMBER_KINDS.get(typ, f"of type {typ.decode('latin-1')!r}")
        rep.problems.append(
            Problem(name, safe_label(member, 200), f"member is {kind}, not a file (skipped by readers)")
        )
    while hr.read(1 << 20):
        pass
    rep.samples += len(keys)
    if len(set(keys)) != len(keys):
        rep.problems.append(Problem(name, "", "duplicate keys"))
    return keys, hr


def validate(
    root: str, progress: Callable[[int], None] | None = None, decode: bool | None = None, energon: bool = True
) -> ValidationReport:
    """Check a dataset folder (local or URL) or one ``.tar`` shard; see the module docstring.

    Args:
        root: dataset folder (with manifest.json), its manifest.json, or a single .tar shard.
        progress: called with 1 per sample read.
        decode: None: the level the dataset was built with; True: decode every image; False: headers only.
        energon: check ``.nv-meta`` (local datasets: also open the dataset with Energon).

    Returns:
        A ValidationReport (``ok`` when there is no problem). Raises ManifestError when there is no usable
        manifest, OSError/StorageError when the dataset cannot be read at all.
    """
    if not isinstance(root, (str, os.PathLike)) or not str(os.fspath(root)).strip():
        raise ManifestError(f"`root` must be a dataset folder, its manifest.json or a .tar shard, got {root!r}"[:200])
    if progress is not None and not callable(progress):
        raise OptionsError(f"`progress` must be a callable or None, got {type(progress).__name__}")
    if decode is not None and not isinstance(decode, bool):
        raise OptionsError(f"`decode` must be None, True or False, got {decode!r}")
    if not isinstance(energon, bool):
        raise OptionsError(f"`energon` must be True or False, got {energon!r}")
    try:
        root = storage.local(str(os.fspath(root)))
    except storage.CredentialsInURL as e:
        raise ManifestError(str(e)) from None
    if not storage.is_url(root) and root.endswith(".tar") and os.path.isfile(root):
        return _validate_shard(root, progress, decode)
    manifest = load_manifest(root)
    remote = storage.is_url(root)
    if root.endswith(".json"):
        root = storage.dirname(root)
    present = {storage.basename(p) for p in storage.ls(root)} if remote else None
    rep = ValidationReport(level=_level(manifest, decode))
    full = rep.level == "full"
    all_keys: dict[str, str] = {}
    for entry in manifest["shards"]:
        name = entry["name"]
        path = storage.join(root, name)
        rep.shards += 1
        if (name not in present) if remote else not os.path.isfile(path):
            special = not remote and os.path.lexists(path)  # a FIFO, device or folder: refused, never opened
            rep.problems.append(Problem(name, "", "shard is not a regular file" if special else "shard file missing"))
            continue
        with storage.open(path, "rb", block_size=8 << 20) if remote else storage.open_input(path) as f:
            keys, hr = _read_shard(rep, name, f, full, progress, all_keys)
        if hr.sha.hexdigest() != entry["sha256"]:
            rep.problems.append(Problem(name, "", "sha256 differs from the manifest"))
        if hr.n != entry["bytes"]:
            rep.problems.append(Problem(name, "", f"{hr.n} bytes, manifest says {entry['bytes']}"))
        if len(keys) != entry["samples"]:
            rep.problems.append(Problem(name, "", f"{len(keys)} samples, manifest says {entry['samples']}"))
        if keys and (keys[0] != entry.get("first_key") or keys[-1] != entry.get("last_key")):
            rep.problems.append(
                Problem(
                    name,
                    "",
                    f"keys {safe_label(keys[0], 40)}..{safe_label(keys[-1], 40)}, manifest "
                    f"says {safe_label(entry.get('first_key'), 40)}..{safe_label(entry.get('last_key'), 40)}",
                )
            )
        sized = hr.n == entry["bytes"]  # a size lie: expand no key list it claims (10**10 keys hung)
        want = shard_keys(entry) if sized else None
        if "key_runs" in entry and want is None and sized:
            rep.problems.append(Problem(name, "", "manifest key_runs do not match its sample count and keys"))
        elif want is not None and keys != want and len(keys) == len(want):
            rep.problems.append(Problem(name, "", "sample keys differ from the manifest's key list"))
    _check_totals(manifest, rep)
    _check_strays(root, manifest, present, rep)
    if "energon" not in manifest:
        rep.warnings.append(
            Problem(
                "-",
                "",
                "manifest written by an older vlmdata: no sample-loader hash or key list "
                "recorded (rebuild to record them)",
            )
        )
    if energon:
        _check_nv_meta(root, manifest, remote, present, rep)
    return rep


def _check_totals(manifest: dict, rep: ValidationReport) -> None:
    t, acc = manifest["totals"], manifest["accounting"]
    shards = manifest["shards"]
    if not rep.samples and not t["samples"]:
        rep.problems.append(Problem("-", "", "the dataset holds no sample: nothing for a reader to read"))
    if rep.samples != t["samples"]:
        rep.problems.append(Problem("-", "", f"{rep.samples} samples in shards, manifest totals say {t['samples']}"))
    if sum(s["samples"] for s in shards) != t["samples"]:
        rep.problems.append(Problem("-", "", "manifest shard sample counts do not add up to its totals"))
    if "shards" in t and t["shards"] != len(shards):
        rep.problems.append(Problem("-", "", f"manifest totals say {t['shards']} shards, it lists {len(shards)}"))
    if acc["seen"] != acc["written"] + acc["skipped"]:
        rep.problems.append(
            Problem("-", "", f"accounting: seen {acc['seen']} != written {acc['written']} + skipped {acc['skipped']}")
        )
    if acc["written"] != t["samples"]:
        rep.problems.append(Problem("-", "", f"accounting says {acc['written']} written, totals say {t['samples']}"))
    if "images" in t and rep.images != t["images"] and not any(p.problem == "shard file missing" for p in rep.problems):
        rep.problems.append(Problem("-", "", f"{rep.images} images in shards, manifest totals say {t['images']}"))


def _check_strays(root: str, manifest: dict, present, rep: ValidationReport) -> None:
    """A ``.tar`` beside the manifest's shards that the manifest does not list is a problem (module docstring)."""
    names = present if present is not None else {storage.basename(p) for p in storage.ls(root)}
    listed = {s["name"] for s in manifest["shards"]}
    for name in sorted(n for n in names if n.endswith(".tar") and n not in listed):
        rep.problems.append(
            Problem(
                safe_label(name, 200),
                "",
                "a .tar the manifest does not list: glob('*.tar') readers (webdataset, the README's recipe) read "
                "its samples too; remove it or move it out of the dataset folder",
            )
        )


def _check_nv_meta(root: str, manifest: dict, remote: bool, present, rep: ValidationReport) -> None:
    if remote:
        if manifest.get("energon", "absent") is not None and manifest["shards"] and ".nv-meta" not in present:
            rep.problems.append(Problem(".nv-meta", "", "no .nv-meta folder: Energon cannot read this dataset"))
        return
    problems, warnings = check_energon(root, manifest)
    rep.problems += [Problem(".nv-meta", "", p) for p in problems]
    rep.warnings += [Problem(".nv-meta", "", w) for w in warnings]


def _validate_shard(path: str, progress, decode: bool | None) -> ValidationReport:
    rep = ValidationReport(level=_level(None, decode), shards=1)
    name = os.path.basename(path)
    with storage.open_input(path) as f:  # a FIFO is refused, never read
        _read_shard(rep, name, f, rep.level == "full", progress, {})
    rep.warnings.append(
        Problem(name, "", "a single shard: no manifest, so checksums, counts and Energon metadata were not compared")
    )
    if not rep.samples and not rep.problems:
        rep.problems.append(Problem(name, "", "the shard holds no sample: nothing for a reader to read"))
    return rep
