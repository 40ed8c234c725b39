"""The Energon index of vlmdata shards, written from the shard layout the writer already knows.

``energon prepare`` (megatron-energon's ``BaseWebdatasetFactory.prepare_dataset``) re-reads every shard
with ``tarfile`` to find each member's offset, and importing megatron-energon costs more CPU (torch) than
a small build. The shard writer knows every member's name and size, so its layout (``Layout``: the
``(member name, data size)`` pairs in tar order) is all the index needs. ``write_index`` writes, for the
shards in the order given:

- ``NAME.tar.idx`` beside each shard: the byte offset of every sample's first member, then the offset of
  the end-of-archive block (``struct`` ``"Q"``, as Energon's ``TarIndexWriter``);
- ``.nv-meta/index.sqlite``: the ``samples`` and ``sample_parts`` tables, built with the same SQL
  statements in the same order and batches as Energon's single-worker ``prepare`` (``SqliteIndexWriter``
  fed by its aggregator, ``INDEX_BATCH_SIZE`` items per batch), so the file is byte-identical to the one
  ``energon prepare --num-workers 1`` writes with the same sqlite library (with more workers Energon's
  own row order depends on scheduling; the rows are the same);
- ``.nv-meta/.info.json`` (energon version and per-shard sample counts) and ``.nv-meta/split.yaml``
  (split parts as regex patterns, shard names brace-collapsed as Energon does);
- ``.nv-meta/index.uuid``: a fresh random UUID, as Energon writes it (the one file that differs between
  any two runs, Energon's own included).

Member names are split into sample key and part with Energon's own rules (``SPLIT_NAME_RE``,
``SKIP_META_RE``). File modes follow Energon's (index files: the shard's mode plus owner read/write).
``scan_layout`` reads a shard's layout from its headers alone (a resumed build's earlier shards).
``check_index`` is validate's check that the index on disk is the one the shards give: every ``.tar.idx``
byte for byte, and every row of ``index.sqlite``'s two tables (a flipped byte that Energon would read as a
wrong offset is a problem, not a pass).
tests/dataset/test_nvmeta_index.py compares every file byte for byte against the installed megatron-energon's.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import struct
import uuid
from collections.abc import Iterable, Iterator
from importlib import metadata

from vlmdata.dataset.tar import BLOCK, parse_header
from vlmdata.errors import VlmdataError
from vlmdata.storage.files import NotRegularFile, open_input

Layout = list[tuple[str, int]]  # (member name, data size) in tar order

# megatron.energon.flavors.webdataset.config
SPLIT_NAME_RE = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")
SKIP_META_RE = re.compile(r"__[^/]*__($|/)")
INDEX_BATCH_SIZE = 4096
META = ".nv-meta"

_CREATE_SAMPLES = """
                CREATE TABLE IF NOT EXISTS samples (
                    tar_file_id INTEGER NOT NULL,
                    sample_key TEXT NOT NULL UNIQUE,
                    sample_index INTEGER NOT NULL,
                    byte_offset INTEGER,
                    byte_size INTEGER
                )
                """
_CREATE_PARTS = """
                CREATE TABLE IF NOT EXISTS sample_parts (
                    tar_file_id INTEGER,
                    sample_index INTEGER,
                    part_name TEXT,
                    content_byte_offset INTEGER,
                    content_byte_size INTEGER
                )
                """
_INSERT_SAMPLES = """
                INSERT INTO samples (tar_file_id, sample_key, sample_index, byte_offset, byte_size)
                VALUES (?, ?, ?, ?, ?)
                """
_INSERT_PARTS = """
            INSERT INTO sample_parts (tar_file_id, sample_index, part_name, content_byte_offset, content_byte_size)
            VALUES (?, ?, ?, ?, ?)
            """
_INDEXES = (
    "CREATE INDEX IF NOT EXISTS idx_samples_by_tar_and_idx ON samples(tar_file_id, sample_index)",
    "CREATE INDEX IF NOT EXISTS idx_sample_parts_seq ON sample_parts(tar_file_id, sample_index, content_byte_offset)",
    (
        "CREATE INDEX IF NOT EXISTS idx_sample_parts_full ON sample_parts(tar_file_id, sample_index, part_name, "
        "content_byte_offset, content_byte_size)"
    ),
)


class EnergonIndexError(VlmdataError):
    """A shard's layout cannot be indexed (duplicate sample key, empty shard)."""


def energon_version() -> str:
    """What Energon records as its version (``megatron.energon.__version__``) without importing it."""
    try:
        return metadata.version("megatron-energon")
    except metadata.PackageNotFoundError:
        return "unknown"


def scan_layout(path: str) -> Layout:
    """The layout of a vlmdata shard read from its member headers (data is skipped with seeks)."""
    out: Layout = []
    with open_input(path, "rb", buffering=0) as f:  # a FIFO shard is refused, never read
        pos = 0
        while True:
            f.seek(pos)
            hdr = f.read(BLOCK)
            if len(hdr) < BLOCK or hdr == bytes(BLOCK):
                return out
            name, size, typ = parse_header(hdr)
            if typ in (b"0", b"\0"):
                out.append((name, size))
            pos += BLOCK + -(-size // BLOCK) * BLOCK


def _items(tar_id: int, layout: Layout) -> Iterator[tuple]:
    """Energon's ``_preprocess_tar`` item stream for one shard: ("p", part row) / ("s", sample row) / ("i", count).
    Also collects the .tar.idx offsets (a list given as the last item)."""
    offsets: list[int] = []
    pos = 0
    count = 0
    last = None
    sample = None
    for name, size in layout:
        here = pos
        pos += BLOCK + -(-size // BLOCK) * BLOCK
        if SKIP_META_RE.match(name):
            continue
        m = SPLIT_NAME_RE.match(name)
        if m is None:
            continue
        base, part = m.group(1), m.group(2)
        if base != last:
            offsets.append(here)
            if sample is not None:
                yield "s", (*sample, here - sample[3])
            sample = (tar_id, base, count, here)
            last = base
            count += 1
        yield "p", (tar_id, count - 1, part, here + BLOCK, size)
    offsets.append(pos)
    if sample is not None:
        yield "s", (*sample, pos - sample[3])
    yield "i", (count, offsets)


def _batches(items: Iterable, n: int) -> Iterator[list]:
    batch: list = []
    for it in items:
        batch.append(it)
        if len(batch) >= n:
            yield batch
            batch = []
    if batch:
        yield batch


class _SqliteWriter:
    """Energon's ``SqliteIndexWriter`` (sample tables, no media metadata): the same statements in the same order."""

    def __init__(self, path: str):
        self.db = sqlite3.connect(path)
        db = self.db
        db.execute("PRAGMA busy_timeout = 5000;")
        db.execute("DROP INDEX IF EXISTS idx_samples_sample_key")
        db.execute("DROP INDEX IF EXISTS idx_samples_by_tar_and_idx")
        db.execute("DROP TABLE IF EXISTS samples")
        db.execute("DROP INDEX IF EXISTS idx_sample_parts_seq")
        db.execute("DROP INDEX IF EXISTS idx_sample_parts_full")
        db.execute("DROP TABLE IF EXISTS sample_parts")
        db.execute(_CREATE_SAMPLES)
        db.execute(_CREATE_PARTS)

    def flush(self, samples: list, parts: list) -> None:
        if samples:
            self.db.execute("SAVEPOINT append_samples_batch")
            try:
                self.db.executemany(_INSERT_SAMPLES, samples)
            except sqlite3.IntegrityError:
                raise EnergonIndexError(f"duplicate sample key among {samples[0][1]!r}..{samples[-1][1]!r}") from None
            self.db.execute("RELEASE SAVEPOINT append_samples_batch")
        if parts:
            self.db.executemany(_INSERT_PARTS, parts)
        samples.clear()
        parts.clear()

    def close(self, finish: bool = True) -> None:
        if finish:
            for sql in _INDEXES:
                self.db.execute(sql)
            self.db.commit()
        self.db.close()


def _mode_chmod(path: str, mode: int | None) -> None:
    if mode is not None:
        try:
            os.chmod(path, mode)
        except OSError:
            pass


def write_index(
    root: str, shards: list[tuple[str, Layout | None]], split_parts_patterns: list[tuple[str, str]]
) -> dict[str, int]:
    """Write the Energon index of ``shards`` (name relative to ``root``, layout or None to scan it) into
    ``root`` (module docstring). Returns the sample count of each shard. ``.nv-meta`` must not hold an
    older index.sqlite (the caller clears it). EnergonIndexError for a shard with no samples or a duplicate key."""
    meta = os.path.join(root, META)
    os.makedirs(meta, exist_ok=True)
    try:
        dir_mode = os.stat(root).st_mode | 0o700
        file_mode: int | None = os.stat(os.path.join(root, shards[0][0])).st_mode | 0o600 if shards else None
        os.chmod(meta, dir_mode)
    except OSError:
        file_mode = None
    sqlite_path = os.path.join(meta, "index.sqlite")
    db = _SqliteWriter(sqlite_path)
    counts: dict[str, int] = {}
    samples: list = []
    parts: list = []
    ok = False
    try:
        for tar_id, (name, layout) in enumerate(shards):
            path = os.path.join(root, name)
            if layout is None:
                layout = scan_layout(path)
            for batch in _batches(_items(tar_id, layout), INDEX_BATCH_SIZE):
                for kind, row in batch:
                    if kind == "p":
                        parts.append(row)
                    elif kind == "s":
                        samples.append(row)
                    else:
                        db.flush(samples, parts)
                        count, offsets = row
                        if count == 0:
                            raise EnergonIndexError(f"{name}: no samples")
                        counts[name] = count
                        _write_tar_idx(path, offsets)
                db.flush(samples, parts)
        ok = True
    finally:
        db.close(ok)
    _mode_chmod(sqlite_path, file_mode)
    _write_text(os.path.join(meta, "index.uuid"), str(uuid.uuid4()), file_mode)
    info = {"energon_version": energon_version(), "shard_counts": counts}
    _write_text(os.path.join(meta, ".info.json"), json.dumps(info, indent=2), file_mode)
    names = list(counts)
    split = {
        part: collapse([n for n in names if any(re.compile(p).match(n) for p in _braceexpand_simple(pattern))])
        for part, pattern in split_parts_patterns
    }
    _write_text(os.path.join(meta, "split.yaml"), _split_yaml(split), file_mode)
    return counts


def _expected(root: str, names: list[str]) -> Iterator[tuple[str, bytes, list, list]]:
    """(shard name, its .tar.idx bytes, its sample rows, its part rows) as ``write_index`` writes them."""
    for tar_id, name in enumerate(names):
        samples: list = []
        parts: list = []
        offsets: list[int] = []
        for kind, row in _items(tar_id, scan_layout(os.path.join(root, name))):
            if kind == "p":
                parts.append(row)
            elif kind == "s":
                samples.append(row)
            else:
                offsets = row[1]
        yield name, struct.pack(f"{len(offsets)}Q", *offsets), samples, parts


def check_index(root: str, names: list[str]) -> list[str]:
    """Problems of the Energon index of ``names`` (shards in manifest order) under ``root``: a ``.tar.idx`` or an
    ``index.sqlite`` row that differs from what the shards give (module docstring). Empty when it matches."""
    problems: list[str] = []
    db_path = os.path.join(root, META, "index.sqlite")
    try:
        db = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    except sqlite3.Error as e:
        return [f"{META}/index.sqlite cannot be opened ({e})"]
    try:
        verdict = [r[0] for r in db.execute("PRAGMA integrity_check(5)")]
        if verdict != ["ok"]:
            problems.append(f"{META}/index.sqlite is damaged (sqlite integrity check: {'; '.join(verdict)[:160]})")
            return problems
        got_samples = db.execute(
            "SELECT tar_file_id, sample_key, sample_index, byte_offset, byte_size FROM samples "
            "ORDER BY tar_file_id, sample_index"
        )
        got_parts = db.execute(
            "SELECT tar_file_id, sample_index, part_name, content_byte_offset, content_byte_size FROM sample_parts "
            "ORDER BY tar_file_id, sample_index, content_byte_offset"
        )
        bad_rows: set[str] = set()
        for name, idx, samples, parts in _expected(root, names):
            try:
                with open_input(os.path.join(root, name + ".idx")) as f:
                    on_disk = f.read(len(idx) + 1)
            except OSError:
                on_disk = None  # reported as missing by the caller
            if on_disk is not None and on_disk != idx:
                problems.append(
                    f"{name}.idx does not match the shard (Energon would read wrong sample offsets): rebuild the "
                    "dataset, or re-index it"
                )
            if [tuple(r) for r in got_samples.fetchmany(len(samples))] != samples:
                bad_rows.add(name)
            if [tuple(r) for r in got_parts.fetchmany(len(parts))] != parts:
                bad_rows.add(name)
        if got_samples.fetchone() is not None or got_parts.fetchone() is not None:
            problems.append(f"{META}/index.sqlite has rows for samples the shards do not hold")
        if bad_rows:
            problems.append(
                f"{META}/index.sqlite rows differ from the shards for {', '.join(sorted(bad_rows)[:3])}"
                + (" ..." if len(bad_rows) > 3 else "")
                + " (Energon would read wrong samples): rebuild the dataset, or re-index it"
            )
    except NotRegularFile as e:  # a shard or .idx that is a FIFO or device: refused, never read
        problems.append(f"the Energon index cannot be checked: {str(e)[:200]}")
    except (sqlite3.Error, OSError, ValueError) as e:
        problems.append(f"{META}/index.sqlite is unreadable ({type(e).__name__}: {str(e)[:120]})")
    finally:
        db.close()
    return problems


def _braceexpand_simple(pattern: str) -> list[str]:
    if "{" in pattern:  # Energon brace-expands split patterns; vlmdata's have no braces
        raise ValueError(f"split pattern with braces is not supported: {pattern!r}")
    return [pattern]


def _write_tar_idx(tar_path: str, offsets: list[int]) -> None:
    final = tar_path + ".idx"
    with open(final + ".tmp", "wb") as f:
        f.write(struct.pack(f"{len(offsets)}Q", *offsets))
    os.replace(final + ".tmp", final)
    try:
        os.chmod(final, os.stat(tar_path).st_mode | 0o600)
    except OSError:
        pass


def _write_text(path: str, text: str, mode: int | None) -> None:
    with open(path, "w") as f:
        f.write(text)
    _mode_chmod(path, mode)


def _split_yaml(split: dict[str, list[str]]) -> str:
    """``yaml.dump({"split_parts": split, "exclude": []}, sort_keys=False)`` for plain shard names."""
    import yaml  # only here: a few ms, and only builds that write the index need it

    return yaml.dump({"split_parts": split, "exclude": []}, sort_keys=False)


# ---------------------------------------------------------------- megatron.energon.bracecollapse (keep_order=True)
# Copyright (c) 2025, NVIDIA CORPORATION. SPDX-License-Identifier: BSD-3-Clause (streaming mode, restated)

_NUM_RE = re.compile(r"\d+")


def _tokenize(s: str) -> tuple[list[str], list[tuple[str, int, int]]]:
    lits, nums, pos = [], [], 0
    for m in _NUM_RE.finditer(s):
        lits.append(s[pos : m.start()])
        raw = m.group(0)
        nums.append((raw, int(raw), len(raw)))
        pos = m.end()
    lits.append(s[pos:])
    return lits, nums


def _build_expr(lits, nums, var_idx: int, start_raw: str, end_raw: str) -> str:
    parts: list[str] = []
    for i in range(len(nums)):
        parts.append(lits[i])
        parts.append(f"{{{start_raw}..{end_raw}}}" if i == var_idx else nums[i][0])
    parts.append(lits[-1])
    return "".join(parts)


def collapse(strings: list[str]) -> list[str]:
    """Energon's order-preserving brace collapse: runs of names that differ in one numeric slot, same
    width, ascending by one, become ``a{000..009}b``."""
    out: list[str] = []
    n, i = len(strings), 0
    while i < n:
        lits0, nums0 = _tokenize(strings[i])
        if not nums0:
            out.append(strings[i])
            i += 1
            continue
        var_idx, start_raw, prev_nums, run_end, j = -1, "", nums0, i, i + 1
        while j < n:
            lits1, nums1 = _tokenize(strings[j])
            if lits1 != lits0 or len(nums1) != len(nums0):
                break
            diff = [k for k, (a, b) in enumerate(zip(prev_nums, nums1)) if a[1] != b[1]]
            if len(diff) != 1:
                break
            k = diff[0]
            if nums1[k][2] != prev_nums[k][2]:
                break
            if var_idx == -1:
                var_idx, start_raw = k, nums0[k][0]
            elif var_idx != k:
                break
            if nums1[k][1] != prev_nums[k][1] + 1:
                break
            run_end, prev_nums, j = j, nums1, j + 1
        if run_end - i + 1 >= 2 and var_idx != -1:
            out.append(_build_expr(lits0, nums0, var_idx, start_raw, prev_nums[var_idx][0]))
            i = run_end + 1
        else:
            out.append(strings[i])
            i += 1
    return out
