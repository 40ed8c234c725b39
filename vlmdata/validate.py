"""``vlmdata validate``: re-read every shard and check it against the manifest and the schema."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from typing import Callable

from . import storage
from .images import ImageProblem, probe
from .manifest import load_manifest
from .schema import check_meta
from .tario import TarReadError, iter_raw_samples


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

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> dict:
        return {"ok": self.ok, "shards": self.shards, "samples": self.samples, "images": self.images,
                "problems": [p.__dict__ for p in self.problems]}


class _HashingReader:
    """File wrapper that hashes exactly the bytes read."""

    def __init__(self, f):
        self.f, self.sha, self.n = f, hashlib.sha256(), 0

    def read(self, n=-1):
        b = self.f.read(n)
        self.sha.update(b)
        self.n += len(b)
        return b


def check_sample(shard: str, key: str, files: dict[str, bytes], decode: bool = True) -> list[Problem]:
    out = []
    if "json" not in files:
        return [Problem(shard, key, "no KEY.json")]
    try:
        meta = json.loads(files["json"].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        return [Problem(shard, key, f"json does not parse: {e}")]
    out += [Problem(shard, key, p) for p in check_meta(meta, key, {k: len(v) for k, v in files.items()})]
    for i, info in enumerate(meta.get("images") or []):
        name = info.get("file") if isinstance(info, dict) else None
        if name not in files:
            continue
        try:
            fmt, w, h = probe(files[name], verify="full" if decode else "header")
        except ImageProblem as e:
            out.append(Problem(shard, key, f"image {name}: {e.detail}"))
            continue
        if (w, h) != (info.get("width"), info.get("height")) or fmt.replace("MPO", "JPEG") != info.get("format"):
            out.append(Problem(shard, key, f"image {name} is {fmt} {w}x{h}, json says {info.get('format')} {info.get('width')}x{info.get('height')}"))
    return out


def validate(root: str, progress: Callable[[int], None] | None = None, decode: bool = True) -> ValidationReport:
    manifest = load_manifest(root)
    root = storage.local(root)
    remote = storage.is_url(root)
    if remote and not root.endswith(".json"):
        present = {storage.basename(p) for p in storage.ls(root)}  # one listing instead of a HEAD per shard
    elif remote:
        root = storage.dirname(root)
        present = {storage.basename(p) for p in storage.ls(root)}
    rep = ValidationReport()
    for entry in manifest["shards"]:
        name = entry["name"]
        path = storage.join(root, name) if remote else os.path.join(root, name)
        rep.shards += 1
        if (name not in present) if remote else not os.path.exists(path):
            rep.problems.append(Problem(name, "", "shard file missing"))
            continue
        count, keys = 0, []
        with (storage.open(path, "rb", block_size=8 << 20) if remote else open(path, "rb")) as f:
            hr = _HashingReader(f)
            try:
                for raw in iter_raw_samples(hr):
                    count += 1
                    keys.append(raw.key)
                    rep.images += sum(1 for k in raw.files if k != "json")
                    rep.problems += check_sample(name, raw.key, raw.files, decode)
                    if progress:
                        progress(1)
            except TarReadError as e:
                rep.problems.append(Problem(name, e.key or "", str(e)))
            while hr.read(1 << 20):
                pass
        rep.samples += count
        if hr.sha.hexdigest() != entry["sha256"]:
            rep.problems.append(Problem(name, "", "sha256 differs from the manifest"))
        if hr.n != entry["bytes"]:
            rep.problems.append(Problem(name, "", f"{hr.n} bytes, manifest says {entry['bytes']}"))
        if count != entry["samples"]:
            rep.problems.append(Problem(name, "", f"{count} samples, manifest says {entry['samples']}"))
        if keys and (keys[0] != entry["first_key"] or keys[-1] != entry["last_key"]):
            rep.problems.append(Problem(name, "", f"keys {keys[0]}..{keys[-1]}, manifest says {entry['first_key']}..{entry['last_key']}"))
        if len(set(keys)) != len(keys):
            rep.problems.append(Problem(name, "", "duplicate keys"))
    if rep.samples != manifest["totals"]["samples"]:
        rep.problems.append(Problem("-", "", f"{rep.samples} samples in shards, manifest totals say {manifest['totals']['samples']}"))
    return rep
