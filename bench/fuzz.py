"""Fuzz corpus and runner: hostile inputs against build, validate, inspect, profile, synth and the loader.

    python bench/fuzz.py                 # the whole corpus (>= 300 cases; ~15-30 min on 2 busy cores)
    python bench/fuzz.py --quick         # the fast subset the test suite runs (tests/system/test_fuzz.py)
    python bench/fuzz.py --classes images,shards --json out.json --show-all

Every case generates its inputs in a fresh folder, then runs steps: a ``vlmdata`` command line or a
Python function, each in a forked child (stdout/stderr captured, its own timeout, optional file-size
limit or signal). Each step is classified:

- hang: the step ran past its timeout;
- traceback: a Python traceback in its output, an exit code outside 0-3, or a death by a signal the
  runner did not send, or a build skip with reason ``unexpected_error`` (a bug turned into a skip);
- leak: a secret (URL credentials, credential environment variables) in the output or in any file
  written;
- silent corruption / data loss: an invariant broke: the source or a protected folder changed, a
  file appeared outside the output folder, ``seen != written + skipped``, the loader's
  ``yielded + skipped`` differs from the manifest or names a key that is not the lost one,
  ``validate`` passed a corrupted dataset, a resumed build differs from a clean one;
- mismatch: a clean outcome other than the expected one (an exit code or skip reason not expected);
- otherwise the case is a clear error (its first step failed as expected, with one line on stderr and
  no traceback) or a correct run.

It prints one line per case that is not clean (``--show-all``: every case) and the totals: cases,
clear errors, correct runs, tracebacks, hangs, silent corruption/data loss, leaks, mismatches. Exit 1
when any case is a traceback, hang, loss, leak or mismatch.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import multiprocessing as mp
import os
import random
import shutil
import signal
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

SECRET = "FUZZs3cr3tVALUE9f8e7d6c"
KEYID = "AKIAFUZZKEYID0000042"
SECRET_ENV = {
    "AWS_ACCESS_KEY_ID": KEYID,
    "AWS_SECRET_ACCESS_KEY": SECRET,
    "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
    "AWS_MAX_ATTEMPTS": "1",
    "AWS_RETRY_MODE": "standard",
    "AWS_DEFAULT_REGION": "us-east-1",
}
CATEGORIES = ("clear error", "correct run", "traceback", "hang", "silent corruption/data loss", "leak", "mismatch")
WORST = ("hang", "traceback", "leak", "silent corruption/data loss", "mismatch")


# ----------------------------------------------------------------------------- cases and steps


@dataclass
class Step:
    name: str
    argv: list[str] | None = None  # a vlmdata command line
    fn: Callable | None = None  # or a function run in the child: returns a JSON-able dict
    args: tuple = ()
    ok: tuple = (0,)  # exit codes that are the expected outcome
    check: Callable | None = None  # (case dir, Result) -> (category, message) | None
    timeout: float = 120.0
    env: dict = field(default_factory=dict)
    fsize: int | None = None  # RLIMIT_FSIZE for the child (a full disk)
    kill: tuple | None = None  # (seconds, signal): the runner signals the child


@dataclass
class Result:
    code: int | None
    out: str
    err: str
    timed_out: bool
    data: dict | None
    signalled: bool = False


@dataclass
class Case:
    name: str
    cls: str
    make: Callable  # (Ctx) -> list[Step]
    quick: bool = False


class Ctx:
    """A case's folder and what the runner must protect and scan in it."""

    def __init__(self, root: Path):
        self.root = root
        self.protected: list[Path] = []
        self.outputs: list[Path] = []

    def path(self, *parts) -> str:
        return str(self.root.joinpath(*parts))

    def out(self, name: str = "out") -> str:
        p = self.root / name
        self.outputs.append(p)
        return str(p)

    def protect(self, p) -> str:
        self.protected.append(Path(p))
        return str(p)


# ----------------------------------------------------------------------------- input generators


def jpeg(w=48, h=32, q=85, color=(120, 40, 30), **kw) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (w, h), color).save(buf, "JPEG", quality=q, **kw)
    return buf.getvalue()


def image(fmt="PNG", w=48, h=32, mode="RGB", **kw) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    img = Image.new(mode, (w, h), 128 if mode in ("L", "P", "I;16", "1") else (128,) * len(mode))
    img.save(buf, fmt, **kw)
    return buf.getvalue()


def noise_jpeg(w=160, h=120, seed=0) -> bytes:
    from PIL import Image

    rng = random.Random(seed)
    img = Image.frombytes("RGB", (w, h), bytes(rng.getrandbits(8) for _ in range(w * h * 3)))
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality=90)
    return buf.getvalue()


def oriented(o: int) -> bytes:
    from PIL import Image

    exif = Image.Exif()
    exif[0x0112] = o
    buf = io.BytesIO()
    Image.new("RGB", (60, 20), (200, 20, 20)).save(buf, "JPEG", exif=exif.tobytes())
    return buf.getvalue()


def write(p: Path, data) -> None:
    p.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        p.write_text(data, encoding="utf-8", errors="surrogatepass")
    else:
        p.write_bytes(data)


def folder(ctx: Ctx, n: int = 3, name: str = "src", extra: dict | None = None) -> str:
    """``n`` good image + caption pairs plus ``extra`` files (name -> bytes/str, or a callable(path))."""
    src = ctx.root / name
    src.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        write(src / f"good{i}.jpg", jpeg(40 + i, 30, color=(20 * i, 90, 140)))
        write(src / f"good{i}.txt", f"a good caption {i}")
    for k, v in (extra or {}).items():
        p = src / k if isinstance(k, str) else Path(os.fsdecode(os.fsencode(str(src)) + b"/" + k))
        if callable(v):
            p.parent.mkdir(parents=True, exist_ok=True)
            v(p)
        else:
            write(p, v)
    return ctx.protect(src)


def rec(image, answer="an answer", q="<image>\nWhat is it?", **kw) -> dict:
    return {"image": image, "conversations": [{"from": "human", "value": q}, {"from": "gpt", "value": answer}], **kw}


def jsonl(ctx: Ctx, lines: list, n_good: int = 3, name: str = "data.jsonl", raw: bytes | None = None) -> str:
    """A LLaVA JSONL with ``n_good`` good records (images in imgs/) and ``lines`` (dicts or raw strings)."""
    d = ctx.root / "src"
    for i in range(max(n_good, 1)):
        write(d / "imgs" / f"{i}.jpg", jpeg(40 + i, 30))
    body = [json.dumps(rec(f"imgs/{i}.jpg")) for i in range(n_good)]
    body += [x if isinstance(x, str) else json.dumps(x) for x in lines]
    data = ("\n".join(body) + "\n").encode("utf-8", "surrogatepass")
    write(d / name, raw if raw is not None else data)
    ctx.protect(d)
    return str(d / name)


# ----------------------------------------------------------------------------- checks


def manifest(out: str) -> dict | None:
    try:
        return json.loads(Path(out, "manifest.json").read_text())
    except (OSError, ValueError):
        return None


def check_build(out: str, written: int | None = None, reasons: dict | None = None, min_written: int = 0):
    def check(root, res):
        m = manifest(out)
        if m is None:
            return None if res.code != 0 else ("silent corruption/data loss", "exit 0 without a manifest")
        acc = m["accounting"]
        if acc["seen"] != acc["written"] + acc["skipped"] or acc["written"] != m["totals"]["samples"]:
            return "silent corruption/data loss", f"accounting does not balance: {acc}"
        if "unexpected_error" in acc["skipped_by_reason"]:
            ex = [s for s in acc["skipped_samples"] if s["reason"] == "unexpected_error"][0]
            return "traceback", f"a bug became a skip: {ex['detail']}"
        if written is not None and acc["written"] != written:
            return "mismatch", f"wrote {acc['written']}, expected {written}; skips {acc['skipped_by_reason']}"
        if acc["written"] < min_written:
            return "mismatch", f"wrote {acc['written']}, expected at least {min_written}"
        if reasons is not None and acc["skipped_by_reason"] != reasons:
            return "mismatch", f"skips {acc['skipped_by_reason']}, expected {reasons}"
        return None

    return check


def loader_accounting(root: str, on_error: str = "skip", workers: int = 0) -> dict:
    """Run one epoch of the vlmdata loader; return what it yielded and skipped and the manifest's keys."""
    from vlmdata.dataset.manifest import load_manifest, shard_keys
    from vlmdata.loaders.api import make_loader

    ld = make_loader(
        root,
        tokenizer=_tokenizer(),
        micro_batch_size=3,
        seq_length=None,
        min_pixels=32 * 32,
        max_pixels=64 * 64,
        shuffle=False,
        on_error=on_error,
        num_workers=workers,
    )
    got = []
    for _ in ld:
        got += ld.last_keys
    m = load_manifest(root)
    keys = [k for e in m["shards"] for k in (shard_keys(e) or [])]
    return {
        "yielded": got,
        "skipped": ld.stats.skipped_samples,
        "total": m["totals"]["samples"],
        "keys": keys,
        "has_runs": all("key_runs" in e for e in m["shards"]),
    }


def check_loader(lost: list | None = None):
    """yielded + skipped == manifest samples; no key twice; skipped keys are the lost ones when known."""

    def check(root, res):
        d = res.data
        if d is None:
            return None
        y, s = d["yielded"], [x["key"] for x in d["skipped"]]
        if len(y) + len(s) != d["total"]:
            return (
                "silent corruption/data loss",
                f"loader: {len(y)} yielded + {len(s)} skipped != {d['total']} in the manifest",
            )
        if len(set(y)) != len(y):
            return "silent corruption/data loss", "loader yielded a key twice"
        if d["has_runs"] and d["keys"] and sorted(y + s) != sorted(d["keys"]):
            return "silent corruption/data loss", "loader's keys are not the manifest's keys"
        if lost is not None and d["has_runs"] and sorted(s) != sorted(lost):
            return "silent corruption/data loss", f"loader named {sorted(s)[:4]}, lost {sorted(lost)[:4]}"
        return None

    return check


def pipeline(ctx: Ctx, src: str, build_args=(), written=None, reasons=None, min_written=1, loader=True) -> list[Step]:
    """build, then validate, inspect, profile and one loader epoch on what it wrote: all must be clean."""
    out = ctx.out("out")
    steps = [
        Step(
            "build",
            ["build", src, "-o", out, "-q", "--workers", "1", *build_args],
            ok=(0,),
            check=check_build(out, written, reasons, min_written),
        )
    ]
    steps += [
        Step("validate", ["validate", out, "-q"]),
        Step("inspect", ["inspect", out, "-q"]),
        Step(
            "profile", ["profile", out, "-o", ctx.path("p.json"), "-q", "--decode-images", "4", "--decode-repeats", "1"]
        ),
    ]
    if loader:
        steps.append(Step("loader", fn=loader_accounting, args=(out,), check=check_loader()))
    return steps


_TOK = None


def _tokenizer():
    global _TOK
    if _TOK is None:
        from vlmdata.qwen.spec import load_qwen_tokenizer

        _TOK = load_qwen_tokenizer()
    return _TOK


# ----------------------------------------------------------------------------- class: malformed images


def _image_cases() -> list[Case]:
    cases = []
    base = jpeg(64, 48)

    def add(name, data, expect, fname="bad.jpg", caption="the bad one"):
        def make(ctx, data=data, expect=expect, fname=fname, caption=caption):
            payload = data() if callable(data) else data
            src = folder(ctx, 3, extra={fname: payload, os.path.splitext(fname)[0] + ".txt": caption})
            written = 4 if expect is None else 3
            return pipeline(ctx, src, written=written, reasons=None if expect is None else {expect: 1})

        cases.append(Case(f"image/{name}", "images", make))

    for frac in (0.1, 0.3, 0.5, 0.7, 0.9, 0.99):
        add(f"jpeg_truncated_{frac}", base[: int(len(base) * frac)], "undecodable_image")
    add("jpeg_no_eoi", base[:-2], "undecodable_image")
    add("jpeg_trailing_garbage", base + b"trailer" * 2000, None)
    add("jpeg_trailing_nuls_small", base + bytes(40), None)
    add("jpeg_trailing_nuls_large", base + bytes(100_000), None)
    rng = random.Random(13)
    for k in range(8):  # single bit flips in the header region: any outcome but a crash

        def flipped(k=k):
            d = bytearray(base)
            pos = random.Random(k).randrange(2, 200)
            d[pos] ^= 1 << random.Random(k + 99).randrange(8)
            return bytes(d)

        cases.append(
            Case(
                f"image/jpeg_header_bitflip_{k}",
                "images",
                lambda ctx, f=flipped: pipeline(
                    ctx, folder(ctx, 3, extra={"bad.jpg": f(), "bad.txt": "x"}), min_written=3
                ),
            )
        )
    for k in range(6):  # byte flips in the entropy-coded data

        def scan_flip(k=k):
            d = bytearray(noise_jpeg(seed=k))
            for _ in range(20):
                d[random.Random(k * 31 + _).randrange(len(d) // 2, len(d) - 4)] ^= 0xFF
            return bytes(d)

        cases.append(
            Case(
                f"image/jpeg_scan_corrupt_{k}",
                "images",
                lambda ctx, f=scan_flip: pipeline(
                    ctx, folder(ctx, 3, extra={"bad.jpg": f(), "bad.txt": "x"}), min_written=3
                ),
            )
        )
    add("garbage", b"this is not an image at all", "undecodable_image")
    add("empty", b"", "undecodable_image")
    add("random_bytes", bytes(rng.getrandbits(8) for _ in range(5000)), "undecodable_image")
    add("png_truncated", image("PNG", 64, 48)[:-30], "undecodable_image", fname="bad.png")
    add("png_no_iend", image("PNG", 64, 48)[:-12], "undecodable_image", fname="bad.png")
    add("png_trailing", image("PNG", 64, 48) + b"x" * 3000, None, fname="bad.png")
    add("png_16bit", image("PNG", 64, 48, mode="I;16"), None, fname="bad.png")
    add("png_palette_transparency", lambda: image("PNG", 64, 48, mode="P", transparency=0), None, fname="bad.png")
    add("png_la", image("PNG", 64, 48, mode="LA"), None, fname="bad.png")
    add("png_bomb_header", _png_header(60000, 60000), "too_large", fname="bad.png")
    add("png_zero_width_header", _png_header(0, 10), "undecodable_image", fname="bad.png")
    add("thin_1x20000", image("PNG", 1, 20000, mode="L"), "bad_aspect_ratio", fname="bad.png")
    add("wide_20000x1", image("PNG", 20000, 1, mode="L"), "bad_aspect_ratio", fname="bad.png")
    add("aspect_200_ok", image("PNG", 2, 400, mode="L"), None, fname="bad.png")
    add("webp", image("WEBP", 64, 48), None, fname="bad.webp")
    add("webp_truncated", image("WEBP", 64, 48)[:-20], "undecodable_image", fname="bad.webp")
    add("gif", image("GIF", 64, 48, mode="P"), None, fname="bad.gif")
    add("bmp", image("BMP", 64, 48), None, fname="bad.bmp")
    add("tiff", image("TIFF", 64, 48), None, fname="bad.tiff")
    add("cmyk_jpeg", image("JPEG", 64, 48, mode="CMYK"), None)
    add("progressive_jpeg", jpeg(64, 48, progressive=True), None)
    add("greyscale_jpeg", image("JPEG", 64, 48, mode="L"), None)
    add("png_named_jpg", image("PNG", 64, 48), None)
    add("text_named_png", b"hello", "undecodable_image", fname="bad.png")
    add("heic", b"\0\0\0\x18ftypheic" + bytes(100), "unsupported_format", fname="bad.heic")
    add("avif", b"\0\0\0\x18ftypavif" + bytes(100), "unsupported_format", fname="bad.avif")
    add("ico_named_png", image("ICO", 32, 32), "unsupported_format", fname="bad.png")
    for o in range(2, 9):
        add(f"exif_orientation_{o}", oriented(o), None)
    add("mpo_like_two_jpegs", base + base, None)
    return cases


def _png_header(w: int, h: int) -> bytes:
    import struct
    import zlib

    ihdr = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)
    chunk = lambda t, d: struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d))  # noqa: E731
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 100)) + chunk(b"IEND", b"")
    )


# ----------------------------------------------------------------------------- class: sidecars and records


def _sidecar_cases() -> list[Case]:
    cases = []

    def add(name, files: dict, reason):
        def make(ctx, files=files, reason=reason):
            extra = {"bad.jpg": jpeg()}
            extra.update(files)
            src = folder(ctx, 3, extra=extra)
            return pipeline(
                ctx, src, written=4 if reason is None else 3, reasons=None if reason is None else {reason: 1}
            )

        cases.append(Case(f"sidecar/{name}", "sidecars", make))

    add("deep_json", {"bad.json": "[" * 100_000}, "bad_json")
    add("deep_json_object", {"bad.json": '{"a":' * 50_000 + "1" + "}" * 50_000}, "bad_json")
    add("int_5000_digits", {"bad.json": '{"caption": "x", "n": ' + "9" * 5000 + "}"}, "bad_json")
    add("lone_surrogate_json", {"bad.json": '{"caption": "a \\ud800 b"}'}, "bad_text")
    add("lone_surrogate_end", {"bad.json": '{"caption": "tail \\udfff"}'}, "bad_text")
    add("nul_in_caption", {"bad.json": '{"caption": "a\\u0000b"}'}, "bad_text")
    add("invalid_utf8_txt", {"bad.txt": b"caf\xe9 au lait"}, "bad_caption")
    add("bom_txt", {"bad.txt": b"\xef\xbb\xbfa caption with a BOM"}, None)
    add("crlf_txt", {"bad.txt": "line one\r\nline two\r\n"}, None)
    add("empty_txt", {"bad.txt": ""}, "empty_caption")
    add("whitespace_txt", {"bad.txt": "  \n\t "}, "empty_caption")
    add(
        "huge_caption_over_cap", {"bad.txt": lambda p: p.write_bytes(b"x" * (16 * 1024 * 1024 + 10))}, "unreadable_file"
    )
    add("big_caption_under_cap", {"bad.txt": "y" * 200_000}, None)
    for tok in ("<|im_end|>", "<|im_start|>", "<|image_pad|>", "<|vision_start|>", "<|endoftext|>", "<|video_pad|>"):
        add(f"control_token_{tok.strip('<|>')}", {"bad.txt": f"a cat {tok} user: hi"}, "control_token")
    add("harmless_tags", {"bad.txt": "a <image> tag, <think> and <tool_call> words"}, None)
    add("sidecar_fifo", {"bad.txt": lambda p: os.mkfifo(p)}, "unreadable_file")
    add("sidecar_dev_zero", {"bad.txt": lambda p: os.symlink("/dev/zero", p)}, "unreadable_file")
    add("sidecar_dev_urandom", {"bad.json": lambda p: os.symlink("/dev/urandom", p)}, "unreadable_file")
    add("sidecar_directory", {"bad.txt": lambda p: p.mkdir()}, "missing_caption")
    add("sidecar_broken_symlink", {"bad.txt": lambda p: os.symlink("/nonexistent/x", p)}, "unreadable_file")
    add("json_list", {"bad.json": "[1, 2]"}, "bad_record")
    add("json_number", {"bad.json": "42"}, "bad_record")
    add("json_null", {"bad.json": "null"}, "bad_record")
    add("json_string", {"bad.json": '"a caption as a JSON string"'}, None)
    add("json_no_caption_key", {"bad.json": '{"title": "x"}'}, "bad_record")
    add("json_caption_not_string", {"bad.json": '{"caption": {"a": 1}}'}, "bad_record")
    add("json_bad_role", {"bad.json": '{"conversations": [{"from": "alien", "value": "x"}]}'}, "bad_record")
    add("json_conversations_not_list", {"bad.json": '{"conversations": "x"}'}, "bad_record")
    add(
        "json_two_placeholders_one_image",
        {
            "bad.json": json.dumps(
                {"conversations": [{"from": "human", "value": "<image><image>"}, {"from": "gpt", "value": "x"}]}
            )
        },
        "bad_record",
    )
    add("json_truncated", {"bad.json": '{"caption": "x'}, "bad_json")
    add("json_bom", {"bad.json": b'\xef\xbb\xbf{"caption": "bom json"}'}, None)
    add("json_invalid_utf8", {"bad.json": b'{"caption": "\xff\xfe"}'}, "bad_json")
    return cases


def _record_cases() -> list[Case]:
    cases = []

    def add(name, lines, reasons, n_good=3, raw=None, written=None):
        def make(ctx, lines=lines, reasons=reasons, n_good=n_good, raw=raw, written=written):
            src = jsonl(ctx, lines, n_good, raw=raw(ctx) if raw else None)
            n_bad = sum(reasons.values()) if reasons else 0
            if written is None and raw is None:
                written = n_good + len(lines) - n_bad
            return pipeline(ctx, src, written=written, reasons=reasons)

        cases.append(Case(f"record/{name}", "records", make))

    add("deep_line", ["[" * 60_000], {"bad_json": 1})
    add("int_digits_line", ['{"id": ' + "1" * 6000 + "}"], {"bad_json": 1})
    add(
        "float_huge",
        [
            '{"id": 1e999999, "image": "imgs/0.jpg", "conversations": [{"from": "human", "value": "q"}, '
            '{"from": "gpt", "value": "a"}]}'
        ],
        None,
    )
    add("lone_surrogate_answer", [rec("imgs/0.jpg", answer="x \ud800 y")], {"bad_text": 1})
    add("lone_surrogate_id", [dict(rec("imgs/0.jpg"), id="\udc80id")], None)
    add("nul_in_path", [rec("imgs/0\u0000.jpg")], {"bad_path": 1})
    add("path_not_string", [rec(12345)], {"bad_path": 1})
    add("path_empty", [rec("")], {"bad_path": 1})
    add("path_list_of_mixed", [rec(["imgs/0.jpg", None], q="<image><image>")], {"bad_path": 1})
    add("missing_image", [rec("imgs/none.jpg")], {"missing_file": 1})
    add("image_is_dir", [rec("imgs")], {"unreadable_file": 1})
    add("not_an_object", ["[1, 2, 3]"], {"bad_record": 1})
    add("bare_string", ['"hello"'], {"bad_record": 1})
    add("no_conversations", [{"image": "imgs/0.jpg"}], {"bad_record": 1})
    add("empty_conversations", [{"image": "imgs/0.jpg", "conversations": []}], {"bad_record": 1})
    add("role_unknown", [{"image": "imgs/0.jpg", "conversations": [{"from": "x", "value": "y"}]}], {"bad_record": 1})
    add(
        "value_not_text", [{"image": "imgs/0.jpg", "conversations": [{"from": "human", "value": 5}]}], {"bad_record": 1}
    )
    add("placeholders_mismatch", [rec(["imgs/0.jpg", "imgs/1.jpg"], q="<image>")], {"bad_record": 1})
    add("empty_answer", [rec("imgs/0.jpg", answer="   ")], {"empty_caption": 1})
    add("control_token_answer", [rec("imgs/0.jpg", answer="ok<|im_end|>\n<|im_start|>user\nx")], {"control_token": 1})
    add("control_token_question", [rec("imgs/0.jpg", q="<image>\n<|image_pad|> count")], {"control_token": 1})
    add("blank_lines", ["", "   ", ""], None, written=3)
    add("truncated_json", ['{"image": "imgs/0.jpg", "conv'], {"bad_json": 1})
    add("invalid_utf8_line", ["\udcff"], {"bad_json": 1})
    add("remote_http", [rec("http://example.com/x.jpg")], {"bad_path": 1})
    add("s3_with_credentials", [rec(f"s3://{KEYID}:{SECRET}@bucket/x.jpg")], {"bad_path": 1})
    add("s3_signed_query", [rec(f"s3://bucket/x.jpg?X-Amz-Signature={SECRET}")], {"bad_path": 1})
    add("messages_no_list", [{"messages": "x"}], {"bad_record": 1})
    add("crlf_lines", [], None, raw=lambda ctx: (json.dumps(rec("imgs/0.jpg")) + "\r\n").encode() * 3)
    add("bom_jsonl", [], None, raw=lambda ctx: b"\xef\xbb\xbf" + (json.dumps(rec("imgs/0.jpg")) + "\n").encode() * 3)
    add("bom_json_array", [], None, raw=lambda ctx: b"\xef\xbb\xbf" + json.dumps([rec("imgs/0.jpg")] * 3).encode())

    def messages(ctx):
        d = ctx.root / "src"
        write(d / "i.jpg", jpeg())
        good = {
            "messages": [
                {"role": "user", "content": [{"type": "image", "image": "i.jpg"}, {"type": "text", "text": "q"}]},
                {"role": "assistant", "content": [{"type": "text", "text": "a"}]},
            ]
        }
        bad = [
            {"messages": [{"role": "user", "content": [{"type": "image"}]}, {"role": "assistant", "content": "a"}]},
            {
                "messages": [
                    {"role": "user", "content": [{"type": "video", "video": "v.mp4"}]},
                    {"role": "assistant", "content": "a"},
                ]
            },
            {
                "messages": [{"role": "user", "content": "<image>"}, {"role": "assistant", "content": "a"}],
                "images": ["../../etc/passwd"],
            },
        ]
        write(d / "m.jsonl", "\n".join(json.dumps(x) for x in [good] * 4 + bad) + "\n")
        ctx.protect(d)
        return pipeline(ctx, str(d / "m.jsonl"), written=4, reasons={"bad_path": 1, "bad_record": 1, "outside_root": 1})

    cases.append(Case("record/messages_variants", "records", messages))
    return cases


# ----------------------------------------------------------------------------- class: hostile paths and names


def _path_cases() -> list[Case]:
    cases = []

    def add(name, make):
        cases.append(Case(f"path/{name}", "paths", make))

    def confined(ref_of, reason, allow=False, written=3):
        def make(ctx):
            write(ctx.root / "outside.jpg", jpeg())
            src = jsonl(ctx, [rec(ref_of(ctx))])
            return pipeline(
                ctx,
                src,
                ["--allow-outside-root"] if allow else [],
                written=written,
                reasons=None if reason is None else {reason: 1},
            )

        return make

    add("absolute_outside", confined(lambda c: c.path("outside.jpg"), "outside_root"))
    add("dotdot_outside", confined(lambda c: "../outside.jpg", "outside_root"))
    add("dotdot_nonexistent", confined(lambda c: "../../../../no/such.jpg", "outside_root"))
    add("file_url_outside", confined(lambda c: "file://" + c.path("outside.jpg"), "outside_root"))
    add("etc_passwd", confined(lambda c: "/etc/passwd", "outside_root"))
    add("dev_zero_absolute", confined(lambda c: "/dev/zero", "outside_root"))
    add("allowed_outside", confined(lambda c: c.path("outside.jpg"), None, allow=True, written=4))
    add("allowed_dev_zero", confined(lambda c: "/dev/zero", "unreadable_file", allow=True))
    add("allowed_proc", confined(lambda c: "/proc/self/environ", "undecodable_image", allow=True))
    add("inside_dotdot_back", confined(lambda c: "imgs/../imgs/0.jpg", None, written=4))
    add("long_path", confined(lambda c: "imgs/" + "x" * 5000 + ".jpg", "unreadable_file"))
    add(
        "fifo_image",
        lambda ctx: pipeline(
            ctx,
            folder(ctx, 3, extra={"f.jpg": lambda p: os.mkfifo(p), "f.txt": "x"}),
            written=3,
            reasons={"unreadable_file": 1},
        ),
    )
    add(
        "dev_zero_image",
        lambda ctx: pipeline(
            ctx,
            folder(ctx, 3, extra={"z.jpg": lambda p: os.symlink("/dev/zero", p), "z.txt": "x"}),
            written=3,
            reasons={"unreadable_file": 1},
        ),
    )
    add(
        "dev_urandom_image",
        lambda ctx: pipeline(
            ctx,
            folder(ctx, 3, extra={"u.jpg": lambda p: os.symlink("/dev/urandom", p), "u.txt": "x"}),
            written=3,
            reasons={"unreadable_file": 1},
        ),
    )
    add(
        "socket_image",
        lambda ctx: pipeline(
            ctx, folder(ctx, 3, extra={"s.jpg": _socket, "s.txt": "x"}), written=3, reasons={"unreadable_file": 1}
        ),
    )
    add(
        "non_utf8_name",
        lambda ctx: pipeline(ctx, folder(ctx, 3, extra={b"caf\xe9.jpg": jpeg(), b"caf\xe9.txt": "cafe"}), written=4),
    )
    add(
        "newline_in_name",
        lambda ctx: pipeline(ctx, folder(ctx, 3, extra={"a\nb.jpg": jpeg(), "a\nb.txt": "nl"}), written=4),
    )
    add(
        "unicode_name",
        lambda ctx: pipeline(ctx, folder(ctx, 3, extra={"猫 🐱.jpg": jpeg(), "猫 🐱.txt": "cat"}), written=4),
    )
    add(
        "dir_symlink",
        lambda ctx: pipeline(ctx, folder(ctx, 2, extra={"link": lambda p: _linked_dir(ctx, p)}), written=3),
    )
    add(
        "dir_symlink_loop",
        lambda ctx: pipeline(ctx, folder(ctx, 2, extra={"loop": lambda p: os.symlink(".", p)}), written=2),
    )
    add("dir_named_jpg", lambda ctx: pipeline(ctx, folder(ctx, 2, extra={"d.jpg": lambda p: p.mkdir()}), written=2))
    add(
        "file_symlink_outside",
        lambda ctx: pipeline(
            ctx,
            folder(
                ctx,
                2,
                extra={
                    "l.jpg": lambda p: (write(ctx.root / "real.jpg", jpeg()), os.symlink(ctx.root / "real.jpg", p)),
                    "l.txt": "x",
                },
            ),
            written=3,
        ),
    )
    for prefix in ("../x", "a/b", "/abs", "p" * 300, ".hidden", "x y", "ü", "-dash", "..", "a\0b"):

        def make(ctx, prefix=prefix):
            out = ctx.out("out")
            return [Step("build", ["build", folder(ctx, 2), "-o", out, "-q", "--prefix", prefix], ok=(2,))]

        add(f"prefix_{prefix[:12].encode('unicode_escape').decode()}", make)

    def bad_out(target, ok=(2,), tag=None):
        def make(ctx):
            src = folder(ctx, 2)
            o = target(ctx)
            return [Step("build", ["build", src, "-o", o, "-q"], ok=ok)]

        add(f"out_{tag}", make)

    bad_out(lambda c: c.path("src", "good0.jpg"), tag="is_a_file")
    bad_out(lambda c: "/proc/vlmdata-fuzz-out", tag="proc")
    bad_out(lambda c: "/sys/vlmdata-fuzz-out", tag="sys")
    bad_out(lambda c: c.path("src", "good0.jpg", "sub"), tag="under_a_file")
    bad_out(lambda c: c.out("deep/a/b/c"), ok=(0,), tag="new_nested")
    bad_out(lambda c: "\0nul", tag="nul")
    add(
        "image_root_missing",
        lambda ctx: [
            Step("build", ["build", jsonl(ctx, []), "-o", ctx.out(), "-q", "--image-root", ctx.path("nope")], ok=(2,))
        ],
    )
    add(
        "image_root_is_file",
        lambda ctx: [
            Step("build", ["build", jsonl(ctx, []), "-o", ctx.out(), "-q", "--image-root", jsonl(ctx, [])], ok=(2,))
        ],
    )
    add("source_fifo", lambda ctx: [Step("build", ["build", _fifo(ctx, "s.jsonl"), "-o", ctx.out(), "-q"], ok=(2,))])
    add(
        "source_dev_zero",
        lambda ctx: [Step("build", ["build", "/dev/zero", "-o", ctx.out(), "-q", "--format", "llava"], ok=(2,))],
    )
    add("source_nul", lambda ctx: [Step("build", ["build", "a\0b", "-o", ctx.out(), "-q"], ok=(2,))])
    add(
        "source_empty_folder",
        lambda ctx: [Step("build", ["build", _mkdir(ctx, "empty"), "-o", ctx.out(), "-q"], ok=(2,))],
    )
    add(
        "source_empty_jsonl",
        lambda ctx: [
            Step("build", ["build", _file(ctx, "e.jsonl", ""), "-o", ctx.out(), "-q", "--format", "llava"], ok=(2,))
        ],
    )
    add(
        "source_bad_parquet",
        lambda ctx: [Step("build", ["build", _file(ctx, "x.parquet", b"PAR1junk"), "-o", ctx.out(), "-q"], ok=(2,))],
    )
    return cases


def _socket(p: Path) -> None:
    import socket

    s = socket.socket(socket.AF_UNIX)
    s.bind(str(p))
    s.close()


def _linked_dir(ctx: Ctx, p: Path) -> None:
    other = ctx.root / "other"
    write(other / "x.jpg", jpeg())
    write(other / "x.txt", "linked")
    os.symlink(other, p)


def _fifo(ctx: Ctx, name: str) -> str:
    os.mkfifo(ctx.root / name)
    return ctx.path(name)


def _mkdir(ctx: Ctx, name: str) -> str:
    (ctx.root / name).mkdir()
    return ctx.path(name)


def _file(ctx: Ctx, name: str, data) -> str:
    write(ctx.root / name, data)
    return ctx.path(name)


# ----------------------------------------------------------------------------- class: output folder, kills, disk


def _same_as_clean(ctx: Ctx, src: str, out: str, build_args: tuple):
    """The dataset in ``out`` equals a clean build of ``src`` (shards byte-identical, manifests equal)."""

    def check(root, res):
        if res.code != 0:
            return None
        from vlmdata.ingest import BuildOptions, build

        clean = ctx.path("clean")
        if not os.path.exists(clean):
            build(src, clean, BuildOptions(max_count=int(build_args[1]), workers=1), energon=True)
        a, b = manifest(clean), manifest(out)
        if b is None:
            return "silent corruption/data loss", "no manifest after the build finished"
        for m in (a, b):
            m["options"].pop("workers", None)
        if a != b:
            return "silent corruption/data loss", "the finished dataset differs from a clean build (manifest)"
        for s in a["shards"]:
            if Path(clean, s["name"]).read_bytes() != Path(out, s["name"]).read_bytes():
                return "silent corruption/data loss", f"{s['name']} differs from a clean build"
        return None

    return check


def finish(argv: list[str]) -> dict:
    """``vlmdata build ... --resume``; when there is nothing to resume (killed before it began, or after
    it finished) the plain build or nothing: the dataset must end complete either way."""
    from vlmdata.cli.main import main

    out = argv[argv.index("-o") + 1]
    if os.path.exists(os.path.join(out, "manifest.json")) and not os.path.exists(os.path.join(out, ".vlmdata-build")):
        return {"how": "already complete"}
    code = main(argv + ["--resume"])
    if code == 2 and not os.path.exists(os.path.join(out, ".vlmdata-build", "options.json")):
        code = main(argv + (["--overwrite"] if os.path.exists(out) and os.listdir(out) else []))
        if code == 2 and os.path.exists(out):
            shutil.rmtree(out)
            code = main(argv)
    if code != 0:
        raise SystemExit(code)
    return {"how": "resumed"}


def _output_cases() -> list[Case]:
    cases = []

    def add(name, make):
        cases.append(Case(f"output/{name}", "output", make))

    def big_src(ctx, n=40):
        return folder(ctx, n)

    for i, (delay, sig, workers) in enumerate(
        [
            (0.2, signal.SIGKILL, 1),
            (0.6, signal.SIGKILL, 1),
            (1.2, signal.SIGKILL, 2),
            (2.0, signal.SIGKILL, 2),
            (3.0, signal.SIGKILL, 1),
            (0.8, signal.SIGINT, 1),
            (1.5, signal.SIGINT, 2),
            (0.8, signal.SIGTERM, 1),
            (1.5, signal.SIGTERM, 2),
            (2.5, signal.SIGKILL, 2),
        ]
    ):

        def make(ctx, delay=delay, sig=sig, workers=workers):
            src = big_src(ctx)
            out = ctx.out("out")
            argv = ["build", src, "-o", out, "-q", "--max-count", "3", "--workers", str(workers)]
            return [
                Step("killed", argv, ok=(0, 2, -sig), kill=(delay, sig)),
                Step("finish", fn=finish, args=(argv,), check=_same_as_clean(ctx, src, out, ("--max-count", "3"))),
            ]

        add(f"{signal.Signals(sig).name.lower()}_after_{delay}s_w{workers}", make)
    for limit in (1500, 4000, 9000, 20000, 50000):

        def make(ctx, limit=limit):
            src = big_src(ctx, 12)
            out = ctx.out("out")
            argv = ["build", src, "-o", out, "-q", "--max-count", "2", "--workers", "1"]
            return [
                Step("disk_full", argv, ok=(0, 2), fsize=limit),
                Step("finish", fn=finish, args=(argv,), check=_same_as_clean(ctx, src, out, ("--max-count", "2"))),
            ]

        add(f"disk_full_{limit}", make)

    def overwrite_nondataset(ctx):
        src = folder(ctx, 2)
        out = ctx.out("out")
        write(Path(out) / "precious.txt", "user data")
        ctx.protect(out)
        return [Step("build", ["build", src, "-o", out, "-q", "--overwrite"], ok=(2,))]

    add("overwrite_not_a_dataset", overwrite_nondataset)

    def overwrite_source(ctx, which):
        src = folder(ctx, 2)
        target = {"src": src, "parent": ctx.path(), "grandparent": str(ctx.root.parent)}[which]
        return [Step("build", ["build", src, "-o", target, "-q", "--overwrite"], ok=(2,))]

    for which in ("src", "parent", "grandparent"):
        add(f"overwrite_{which}_of_source", lambda ctx, w=which: overwrite_source(ctx, w))

    def overwrite_image_root(ctx):
        js = jsonl(ctx, [])
        return [
            Step(
                "build",
                ["build", js, "-o", ctx.path("src", "imgs"), "-q", "--overwrite", "--image-root", ctx.path("src")],
                ok=(2,),
            )
        ]

    add("overwrite_image_root", overwrite_image_root)

    def overwrite_then_bad_source(ctx, bad):
        src = folder(ctx, 2)
        out = ctx.out("out")
        from vlmdata.ingest import BuildOptions, build

        build(src, out, BuildOptions(workers=1))
        ctx.protect(out)
        return [Step("build", ["build", bad(ctx), "-o", out, "-q", "--overwrite"], ok=(2,))]

    add(
        "overwrite_bad_parquet_keeps_old",
        lambda ctx: overwrite_then_bad_source(ctx, lambda c: _file(c, "b.parquet", b"x")),
    )
    add("overwrite_empty_source_keeps_old", lambda ctx: overwrite_then_bad_source(ctx, lambda c: _mkdir(c, "empty")))
    add("overwrite_missing_source_keeps_old", lambda ctx: overwrite_then_bad_source(ctx, lambda c: c.path("nope")))
    add("overwrite_dictdict_no_train", lambda ctx: overwrite_then_bad_source(ctx, _datasetdict_no_train))

    def overwrite_dataset(ctx):
        src = folder(ctx, 3)
        out = ctx.out("out")
        from vlmdata.ingest import BuildOptions, build

        build(folder(ctx, 5, name="src2"), out, BuildOptions(workers=1, max_count=1))
        return [
            Step("build", ["build", src, "-o", out, "-q", "--overwrite"], check=check_build(out, written=3)),
            Step("validate", ["validate", out, "-q"]),
        ]

    add("overwrite_a_dataset", overwrite_dataset)

    def resume_missing(ctx):
        return [
            Step(
                "build",
                ["build", folder(ctx, 2), "-o", ctx.path("nope"), "-q", "--resume"],
                ok=(2,),
                check=lambda root, res: (
                    ("silent corruption/data loss", "--resume created the folder")
                    if os.path.exists(ctx.path("nope"))
                    else None
                ),
            )
        ]

    add("resume_missing_folder", resume_missing)

    def resume_changed(ctx):
        src = big_src(ctx, 30)
        ctx.protected.clear()  # this case changes the source on purpose
        out = ctx.out("out")
        argv = ["build", src, "-o", out, "-q", "--max-count", "2", "--workers", "1"]
        return [
            Step("killed", argv, ok=(0, 2, -9), kill=(1.0, signal.SIGKILL)),
            Step("change", fn=lambda: (write(Path(src) / "good29.txt", "changed"), {})[1]),
            Step(
                "resume",
                argv + ["--resume"],
                ok=(2,),
                check=lambda root, res: (
                    None
                    if "changed" in res.err or "no interrupted" in res.err or "already complete" in res.err
                    else ("silent corruption/data loss", "resumed a changed source")
                ),
            ),
        ]

    add("resume_after_source_changed", resume_changed)

    def resume_other_options(ctx):
        src = big_src(ctx, 30)
        out = ctx.out("out")
        argv = ["build", src, "-o", out, "-q", "--max-count", "2", "--workers", "1"]
        return [
            Step("killed", argv, ok=(0, 2, -9), kill=(1.0, signal.SIGKILL)),
            Step("resume", argv[:-4] + ["--max-count", "3", "--resume"], ok=(2,)),
        ]

    add("resume_other_options", resume_other_options)

    def concurrent(ctx):
        src = big_src(ctx, 30)
        out = ctx.out("out")
        from vlmdata.ingest import BuildOptions, build

        build(src, out, BuildOptions(workers=1))
        return [Step("race", fn=_race, args=(src, out)), Step("validate", ["validate", out, "-q"])]

    add("concurrent_overwrite_builds", concurrent)

    def lock_held(ctx):
        src = folder(ctx, 2)
        out = ctx.out("out")
        return [Step("locked", fn=_with_lock, args=(out, ["build", src, "-o", out, "-q"]), ok=(0,))]

    add("lock_held_by_another", lock_held)

    def synth_overwrite_source(ctx):
        src = folder(ctx, 2)
        return [Step("synth", ["synth", "--mock", "imagefree", "-n", "2", "-o", src, "--overwrite", "-q"], ok=(2,))]

    add("synth_overwrite_non_dataset", synth_overwrite_source)
    return cases


def _datasetdict_no_train(ctx: Ctx) -> str:
    import datasets

    datasets.DatasetDict({"test": datasets.Dataset.from_dict({"caption": ["x"]})}).save_to_disk(ctx.path("dd"))
    return ctx.path("dd")


def _race(src: str, out: str) -> dict:
    import subprocess

    cmd = [
        sys.executable,
        "-m",
        "vlmdata",
        "build",
        src,
        "-o",
        out,
        "--overwrite",
        "-q",
        "--workers",
        "1",
        "--max-count",
        "2",
    ]
    procs = [subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True) for _ in range(3)]
    res = [(p.wait(timeout=300), p.stderr.read()) for p in procs]
    for code, err in res:
        if "Traceback" in err:
            sys.stderr.write(err)
        if not (code == 0 or (code == 2 and "another vlmdata build" in err)):
            raise SystemExit(f"error: a racing build exited {code}: {err.strip()[-200:]}")
    if not any(code == 0 for code, _ in res):
        raise SystemExit("error: no racing build finished")
    return {"codes": [c for c, _ in res]}


def _with_lock(out: str, argv: list[str]) -> dict:
    import fcntl

    from vlmdata.cli.main import main

    os.makedirs(out, exist_ok=True)
    fd = os.open(os.path.join(out, ".vlmdata.lock"), os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=lambda: q.put(main(argv)))
    p.start()
    p.join(60)
    code = q.get(timeout=5)
    os.close(fd)
    if code != 2:
        raise SystemExit(f"error: a build ran while another held the lock (exit {code})")
    return {"locked_exit": code}


# ----------------------------------------------------------------------------- class: corrupted shards

_CLEAN: dict[str, str] = {}


def clean_dataset(kind: str = "new") -> str:
    """A 24-sample, 4-shard dataset (one input skipped, so keys have a gap), built once per run."""
    if kind in _CLEAN and os.path.isdir(_CLEAN[kind]):  # an earlier run in this process may have cleaned up
        return _CLEAN[kind]
    from vlmdata.ingest import BuildOptions, build

    base = Path(tempfile.mkdtemp(prefix="vlmdata-fuzz-clean-"))
    src = base / "src"
    src.mkdir()
    for i in range(25):
        write(src / f"{i:02d}.jpg", jpeg(40 + i, 32, color=(10 * i % 255, 80, 160)))
        write(src / f"{i:02d}.txt", f"caption {i}" if i != 7 else "")
    out = base / "ds"
    build(str(src), str(out), BuildOptions(max_count=6, workers=1))
    if kind == "old":  # as written before key runs and the Energon record existed
        m = json.loads((out / "manifest.json").read_text())
        for e in m["shards"]:
            e.pop("key_runs")
        m.pop("energon")
        (out / "manifest.json").write_text(json.dumps(m))
    _CLEAN[kind] = str(out)
    return str(out)


def _members(data: bytes) -> list[tuple[int, str, int]]:
    out, pos = [], 0
    while pos + 512 <= len(data) and data[pos : pos + 512] != bytes(512):
        name = data[pos : pos + 100].split(b"\0", 1)[0].decode()
        size = int(data[pos + 124 : pos + 136].split(b"\0", 1)[0].strip() or b"0", 8)
        out.append((pos, name, size))
        pos += 512 + -(-size // 512) * 512
    return out


def _reheader(d: bytearray, pos: int, name: str | None = None, size: int | None = None) -> None:
    if name is not None:
        d[pos : pos + 100] = name.encode().ljust(100, b"\0")
    if size is not None:
        d[pos + 124 : pos + 136] = b"%011o\0" % size
    d[pos + 148 : pos + 156] = b" " * 8
    d[pos + 148 : pos + 156] = b"%06o\0 " % sum(d[pos : pos + 512])


OPS = (
    "truncate",
    "header_flip",
    "data_flip",
    "inflate",
    "deflate",
    "duplicate_key",
    "drop_member",
    "zero_block",
    "append_garbage",
    "delete_shard",
    "empty_shard",
    "random_shard",
    "swap_members",
)


def corrupt_shard(root: str, op: str, seed: int) -> None:
    """Apply corruption ``op`` to one shard of the dataset in ``root`` (chosen and placed by ``seed``)."""
    rng = random.Random(seed)
    shard = Path(root, f"shard-{rng.randrange(4):06d}.tar")
    d = bytearray(shard.read_bytes())
    mem = _members(bytes(d))
    pos, name, size = mem[rng.randrange(len(mem))]
    if op == "truncate":
        d = d[: rng.randrange(0, len(d) - 1)]
    elif op == "header_flip":
        d[pos + rng.randrange(0, 512)] ^= 1 << rng.randrange(8)
    elif op == "data_flip":
        if size:
            d[pos + 512 + rng.randrange(size)] ^= 0xFF
    elif op == "inflate":
        _reheader(d, pos, size=size + 512 * rng.randrange(1, 30))
    elif op == "deflate":
        _reheader(d, pos, size=max(0, size - rng.randrange(1, max(2, size))))
    elif op == "duplicate_key":
        keys = sorted({n.split(".", 1)[0] for _, n, _ in mem})
        if len(keys) > 1:
            k = rng.randrange(1, len(keys))
            for p, n, _ in mem:
                if n.split(".", 1)[0] == keys[k]:
                    _reheader(d, p, name=keys[k - 1] + "." + n.split(".", 1)[1])
    elif op == "drop_member":
        d = d[:pos] + d[pos + 512 + -(-size // 512) * 512 :]
    elif op == "zero_block":
        at = rng.randrange(0, len(d) // 512) * 512
        d[at : at + 512] = bytes(512)
    elif op == "append_garbage":
        d += bytes(rng.getrandbits(8) for _ in range(rng.randrange(1, 4000)))
    elif op == "delete_shard":
        shard.unlink()
        return
    elif op == "empty_shard":
        d = bytearray()
    elif op == "random_shard":
        d = bytearray(rng.getrandbits(8) for _ in range(len(d)))
    elif op == "swap_members":  # two samples' JSON members exchanged: keys differ from their JSON
        js = [(p, n, s) for p, n, s in mem if n.endswith(".json")]
        if len(js) >= 2:
            (p1, n1, _), (p2, n2, _) = js[0], js[1]
            _reheader(d, p1, name=n2)
            _reheader(d, p2, name=n1)
    shard.write_bytes(bytes(d))


def _shard_cases() -> list[Case]:
    cases = []
    for kind in ("new", "old"):
        for op in OPS:
            for seed in range(3 if kind == "new" else 1):

                def make(ctx, op=op, seed=seed, kind=kind):
                    root = ctx.path("ds")
                    shutil.copytree(clean_dataset(kind), root)
                    before = hashlib.sha256(
                        b"".join(p.read_bytes() for p in sorted(Path(root).glob("*.tar")))
                    ).hexdigest()
                    corrupt_shard(root, op, seed)
                    after = hashlib.sha256(
                        b"".join(p.read_bytes() for p in sorted(Path(root).glob("*.tar")))
                    ).hexdigest()
                    changed = before != after or len(list(Path(root).glob("*.tar"))) != 4
                    return [
                        Step(
                            "validate",
                            ["validate", root, "-q"],
                            ok=(1,) if changed else (0,),
                            check=lambda r, res, c=changed: (
                                ("silent corruption/data loss", "validate passed a corrupted dataset")
                                if c and res.code == 0
                                else None
                            ),
                        ),
                        Step("inspect", ["inspect", root, "-q"], ok=(0, 1)),
                        Step(
                            "profile",
                            [
                                "profile",
                                root,
                                "-o",
                                ctx.path("p.json"),
                                "-q",
                                "--decode-images",
                                "3",
                                "--decode-repeats",
                                "1",
                            ],
                            ok=(0, 2),
                        ),
                        Step("loader", fn=loader_accounting, args=(root,), check=check_loader()),
                        Step("loader_raise", fn=_raise_at_first_loss, args=(root,), ok=(0,)),
                    ]

                cases.append(Case(f"shard/{kind}_{op}_{seed}", "shards", make))
    return cases


def _raise_at_first_loss(root: str) -> dict:
    """With on_error='raise' the loader raises BadSampleError at the first sample the skip run lost."""
    from vlmdata.dataset.reader import BadSampleError

    skip = loader_accounting(root)
    try:
        raised = loader_accounting(root, on_error="raise")
    except BadSampleError as e:
        first = skip["skipped"][0]["key"] if skip["skipped"] else None
        if e.key != first:
            raise SystemExit(f"error: raised at {e.key}, the first lost sample is {first}")
        return {"raised": e.key}
    if skip["skipped"]:
        raise SystemExit(f"error: on_error='raise' yielded {len(raised['yielded'])} and did not raise")
    return {"raised": None}


# ----------------------------------------------------------------------------- class: manifests


def _manifest_cases() -> list[Case]:
    cases = []
    edits = {
        "garbage": lambda m, p: p.write_bytes(b"\x89PNG\r\n not json"),
        "empty_file": lambda m, p: p.write_bytes(b""),
        "not_object": lambda m, p: p.write_text("[1, 2]"),
        "wrong_schema": lambda m, p: p.write_text(json.dumps({**m, "schema": "other/1"})),
        "deep": lambda m, p: p.write_text("[" * 100_000),
        "int_digits": lambda m, p: p.write_text('{"schema": ' + "1" * 5000 + "}"),
        "is_a_directory": lambda m, p: (p.unlink(), p.mkdir()),
        "is_a_fifo": lambda m, p: (p.unlink(), os.mkfifo(p)),
        "shards_not_list": lambda m, p: p.write_text(json.dumps({**m, "shards": {"a": 1}})),
        "shard_escape": lambda m, p: p.write_text(json.dumps(_shard0(m, name="../../../../etc/hostname"))),
        "shard_absolute": lambda m, p: p.write_text(json.dumps(_shard0(m, name="/etc/hostname"))),
        "shard_backslash": lambda m, p: p.write_text(json.dumps(_shard0(m, name="..\\..\\x.tar"))),
        "shard_not_tar": lambda m, p: p.write_text(json.dumps(_shard0(m, name="manifest.json"))),
        "shard_duplicate": lambda m, p: p.write_text(json.dumps({**m, "shards": m["shards"] + m["shards"][:1]})),
        "shard_name_number": lambda m, p: p.write_text(json.dumps(_shard0(m, name=5))),
        "shard_samples_negative": lambda m, p: p.write_text(json.dumps(_shard0(m, samples=-1))),
        "shard_samples_string": lambda m, p: p.write_text(json.dumps(_shard0(m, samples="6"))),
        "shard_no_sha": lambda m, p: p.write_text(json.dumps(_shard0(m, drop="sha256"))),
        "shard_key_runs_bad": lambda m, p: p.write_text(json.dumps(_shard0(m, key_runs=[["s0", 10**9]]))),
        "totals_missing": lambda m, p: p.write_text(json.dumps({k: v for k, v in m.items() if k != "totals"})),
        "accounting_missing": lambda m, p: p.write_text(json.dumps({k: v for k, v in m.items() if k != "accounting"})),
        "accounting_bad_types": lambda m, p: p.write_text(json.dumps({**m, "accounting": {"seen": "x"}})),
        "energon_not_object": lambda m, p: p.write_text(json.dumps({**m, "energon": [1]})),
        "totals_lie": lambda m, p: p.write_text(json.dumps({**m, "totals": {**m["totals"], "samples": 999}})),
        "no_manifest": lambda m, p: p.unlink(),
    }
    lying = {"totals_lie", "shard_key_runs_bad"}  # readable manifests whose content is wrong: validate must fail
    for name, edit in edits.items():

        def make(ctx, edit=edit, name=name):
            root = ctx.path("ds")
            shutil.copytree(clean_dataset(), root)
            p = Path(root, "manifest.json")
            edit(json.loads(p.read_text()), p)
            usage = (1,) if name in lying else (2,)
            return [
                Step("validate", ["validate", root, "-q"], ok=usage),
                Step("inspect", ["inspect", root, "-q"], ok=(0, 1, 2)),
                Step("profile", ["profile", root, "-o", ctx.path("p.json"), "-q", "--decode-images", "0"], ok=(0, 2)),
                Step("loader", fn=_loader_expecting_error, args=(root, name in lying), ok=(0, 2)),
            ]

        cases.append(Case(f"manifest/{name}", "manifests", make))
    return cases


def _shard0(m: dict, drop: str | None = None, **changes) -> dict:
    e = dict(m["shards"][0], **changes)
    if drop:
        e.pop(drop)
    return {**m, "shards": [e] + m["shards"][1:]}


def _loader_expecting_error(root: str, may_load: bool) -> dict:
    """make_loader on a broken manifest: a clear error (ValueError family), or, for a manifest that is
    readable but lies, balanced accounting against what it says."""
    try:
        d = loader_accounting(root)
    except (ValueError, OSError) as e:
        raise SystemExit(f"error: {str(e).splitlines()[0][:200]}") from None
    if not may_load and len(d["yielded"]) + len(d["skipped"]) != d["total"]:
        raise SystemExit("error: unbalanced")
    return {"yielded": len(d["yielded"])}


# ----------------------------------------------------------------------------- class: object-storage URLs


def _url_cases() -> list[Case]:
    cases = []
    urls = {
        "userinfo": f"s3://{KEYID}:{SECRET}@bucket/data",
        "user_only": f"s3://{SECRET}@bucket/data",
        "signed_query": f"s3://bucket/data?X-Amz-Signature={SECRET}&X-Amz-Credential={KEYID}",
        "fragment": f"s3://bucket/data#{SECRET}",
        "gs_userinfo": f"gs://{KEYID}:{SECRET}@bucket/x",
    }
    for tag, url in urls.items():

        def build_in(ctx, url=url):
            return [Step("build", ["build", url, "-o", ctx.out(), "-q"], ok=(2,), env=SECRET_ENV)]

        def build_out(ctx, url=url):
            return [Step("build", ["build", folder(ctx, 2), "-o", url, "-q"], ok=(2,), env=SECRET_ENV)]

        def validate_(ctx, url=url):
            return [
                Step("validate", ["validate", url, "-q"], ok=(2,), env=SECRET_ENV),
                Step("inspect", ["inspect", url, "-q"], ok=(2,), env=SECRET_ENV),
            ]

        def profile_(ctx, url=url):
            return [Step("profile", ["profile", url, "-o", ctx.path("p.json"), "-q"], ok=(2,), env=SECRET_ENV)]

        def loader_(ctx, url=url):
            return [Step("loader", fn=_loader_url, args=(url,), ok=(2,), env=SECRET_ENV)]

        for what, make in (
            ("build_source", build_in),
            ("build_out", build_out),
            ("validate", validate_),
            ("profile", profile_),
            ("loader", loader_),
        ):
            cases.append(Case(f"url/{tag}_{what}", "urls", make))

    def unreachable(ctx):  # no credentials in the URL, endpoint refuses: a clear error, the env secret never printed
        return [
            Step("validate", ["validate", "s3://bucket/data", "-q"], ok=(2,), env=SECRET_ENV, timeout=180),
            Step("build", ["build", "s3://bucket/data", "-o", ctx.out(), "-q"], ok=(2,), env=SECRET_ENV, timeout=180),
        ]

    cases.append(Case("url/unreachable_endpoint", "urls", unreachable))

    def image_in_record(ctx):
        src = jsonl(ctx, [rec(f"s3://{KEYID}:{SECRET}@bucket/x.jpg"), rec("s3://bucket/x.jpg", id=SECRET[:4])])
        return pipeline(ctx, src, written=3, reasons={"bad_path": 1, "outside_root": 1}, loader=False)

    cases.append(Case("url/record_image_with_credentials", "urls", image_in_record))
    return cases


def _loader_url(url: str) -> dict:
    from vlmdata.loaders.api import make_loader

    try:
        make_loader(url, tokenizer=_tokenizer())
    except (ValueError, OSError) as e:
        raise SystemExit(f"error: {e}") from None
    return {}


# ----------------------------------------------------------------------------- class: options


def _option_cases() -> list[Case]:
    cases = []
    build_opts = (
        [["--max-size", v] for v in ("infk", "nan", "-1", "abc", "1e30", "100")]
        + [["--max-pixels", v] for v in ("-1", "0", "abc", "1e3")]
        + [["--max-count", v] for v in ("0", "-5", "x")]
        + [["--workers", "0"], ["--workers", "-2"]]
        + [["--min-written-fraction", v] for v in ("2", "-1", "nan", "x")]
        + [["--max-image-pixels", "0"]]
        + [
            ["--format", "bogus"],
            ["--verify", "bogus"],
            ["--prompt", "hi <|im_end|>"],
            ["--engine", "bogus"],
            ["--address", "x"],
        ]
    )
    for argv in build_opts:

        def make(ctx, argv=argv):
            return [Step("build", ["build", folder(ctx, 2), "-o", ctx.out(), "-q", *argv], ok=(2,))]

        cases.append(Case("option/build_" + "_".join(a.strip("-") for a in argv)[:40], "options", make))
    good = [["--max-pixels", "1000"], ["--max-size", "8KiB"], ["--min-written-fraction", "0"], ["--verify", "full"]]
    for argv in good:

        def make(ctx, argv=argv):
            return pipeline(ctx, folder(ctx, 3), argv, written=3)

        cases.append(Case("option/build_ok_" + "_".join(a.strip("-") for a in argv), "options", make))
    synth = [["--image-size", v] for v in ("100000x100000", "0x0", "axb", "1x300", "-5x5", "64")] + [
        ["-n", "0"],
        ["--workers", "0"],
        ["--max-size", "infk"],
        ["--prefix", "../x"],
    ]
    for argv in synth:

        def make(ctx, argv=argv):
            base = ["synth", "--mock", "bridge-noise", "-n", "2", "-o", ctx.out(), "-q"]
            return [Step("synth", base + argv, ok=(2,))]

        cases.append(Case("option/synth_" + "_".join(a.strip("-") for a in argv)[:40], "options", make))

    def synth_ok(ctx):
        out = ctx.out()
        return [
            Step("synth", ["synth", "--mock", "bridge-noise", "-n", "3", "-o", out, "-q", "--image-size", "64x48"]),
            Step("validate", ["validate", out, "-q"]),
            Step("loader", fn=loader_accounting, args=(out,), check=check_loader()),
        ]

    cases.append(Case("option/synth_ok", "options", synth_ok))
    for argv in (
        ["--max-rows", "0"],
        ["--min-pixels", "-1"],
        ["--decode-images", "-1"],
        ["--model", "nope"],
        ["--tokenizer", "/nonexistent"],
    ):

        def make(ctx, argv=argv):
            return [Step("profile", ["profile", clean_dataset(), "-o", ctx.path("p.json"), "-q", *argv], ok=(2,))]

        cases.append(Case("option/profile_" + "_".join(a.strip("-") for a in argv)[:40], "options", make))

    def profile_to_dir(ctx):
        return [
            Step(
                "profile",
                ["profile", clean_dataset(), "-o", _mkdir(ctx, "pdir"), "-q", "--decode-images", "0"],
                ok=(2,),
            )
        ]

    cases.append(Case("option/profile_out_is_dir", "options", profile_to_dir))
    for what in ("missing", "fifo", "deep", "digits"):

        def make(ctx, what=what):
            p = ctx.path("prof.json")
            if what == "fifo":
                os.mkfifo(p)
            elif what == "deep":
                write(Path(p), "[" * 100_000)
            elif what == "digits":
                write(Path(p), '{"schema": ' + "1" * 5000 + "}")
            return [Step("synth", ["synth", "--profile", p, "-n", "2", "-o", ctx.out(), "-q"], ok=(2,), timeout=60)]

        cases.append(Case(f"option/synth_profile_{what}", "options", make))
    return cases


# ----------------------------------------------------------------------------- class: loader and control tokens


def _loader_cases() -> list[Case]:
    cases = []

    def hand_made(ctx, text: str, n_images: int = 1):
        """A shard written directly (as an older or foreign writer could): the text is not checked."""
        from vlmdata.dataset.schema import ImageInfo, Sample, user_assistant
        from vlmdata.ingest import write_dataset

        out = ctx.out()
        data = jpeg(64, 48)
        samples = []
        for i in range(3):
            s = Sample(key=f"s{i:09d}", conversation=user_assistant("Describe.", text if i == 1 else "fine", n_images))
            s.images = [data] * n_images
            s.image_info = [ImageInfo(f"{j}.jpg", 64, 48, "JPEG", len(data)) for j in range(n_images)]
            samples.append(s)
        write_dataset(out, samples, kind="synth", options={}, source={"format": "test"})
        return out

    for i, tok in enumerate(
        (
            "<|image_pad|>",
            "<|im_end|>\n<|im_start|>user\nx",
            "<|vision_start|><|image_pad|><|vision_end|>",
            "<|endoftext|>",
        )
    ):

        def make(ctx, tok=tok):
            out = hand_made(ctx, f"a cat {tok} end")
            return [
                Step("validate", ["validate", out, "-q"], ok=(1,)),
                Step("tokens", fn=_pads_equal_visual_tokens, args=(out,), ok=(0,)),
                Step("loader", fn=loader_accounting, args=(out,), check=check_loader()),
            ]

        cases.append(Case(f"loader/control_token_{i}", "loader", make))

    def empty_endless(ctx):
        out = ctx.out()
        from vlmdata.ingest import BuildOptions, build

        src = folder(ctx, 1)
        Path(src, "good0.txt").write_text("")
        build(src, out, BuildOptions(workers=1))
        return [Step("endless", fn=_endless, args=(out,), ok=(2,), timeout=60)]

    cases.append(Case("loader/endless_epochs_empty_dataset", "loader", empty_endless))

    def all_bad_endless(ctx):
        root = ctx.path("ds")
        shutil.copytree(clean_dataset(), root)
        for p in Path(root).glob("*.tar"):
            p.write_bytes(b"")
        return [Step("endless", fn=_endless, args=(root,), ok=(2,), timeout=60)]

    cases.append(Case("loader/endless_epochs_all_skipped", "loader", all_bad_endless))

    def workers_accounting(ctx):
        root = ctx.path("ds")
        shutil.copytree(clean_dataset(), root)
        corrupt_shard(root, "truncate", 5)
        return [Step("loader", fn=loader_accounting, args=(root, "skip", 2), check=check_loader())]

    cases.append(Case("loader/workers_truncated_shard", "loader", workers_accounting))
    return cases


def _pads_equal_visual_tokens(root: str) -> dict:
    from vlmdata.loaders.api import make_loader

    ld = make_loader(
        root,
        tokenizer=_tokenizer(),
        micro_batch_size=1,
        seq_length=None,
        min_pixels=32 * 32,
        max_pixels=64 * 64,
        shuffle=False,
    )
    from vlmdata.qwen.tokenize import ChatTokenizer

    pad = ChatTokenizer(_tokenizer()).image_pad
    for b in ld:
        grid = b["visual_inputs"].image_grid_thw
        want = int((grid[:, 0] * grid[:, 1] * grid[:, 2]).sum()) // 4
        got = int((b["input_ids"] == pad).sum())
        if got != want:
            raise SystemExit(f"error: {got} image pads for {want} visual tokens")
    return {}


def _endless(root: str) -> dict:
    """num_epochs=None (what Bridge's provider and the audit use) must stop with an error, not spin."""
    from vlmdata.loaders.api import make_loader
    from vlmdata.loaders.pipeline import EmptyEpochError

    try:
        ld = make_loader(
            root, tokenizer=_tokenizer(), num_epochs=None, seq_length=None, min_pixels=32 * 32, max_pixels=64 * 64
        )
        for _ in ld:
            pass
    except EmptyEpochError as e:
        raise SystemExit(f"error: {e}") from None
    return {}


# ----------------------------------------------------------------------------- issue 20: shared helpers


def sample_copy(ctx: Ctx, name: str = "ds") -> str:
    """A private copy of the clean dataset (a case may write beside it or corrupt it), protected."""
    dst = ctx.root / name
    shutil.copytree(clean_dataset(), dst)
    return str(dst)


def expect_in_err(*words: str):
    """The step's one-line message must name the cause (each of ``words`` in stderr)."""

    def check(root, res):
        missing = [w for w in words if w not in res.err]
        return ("mismatch", f"message lacks {missing}: {res.err.strip()[-200:]}") if missing else None

    return check


def no_ellipsis(root, res):
    return ("silent corruption/data loss", "a table cell was cut ('…')") if "…" in res.out else None


STEP_MODULE = """
import sys, time
def raises(batch):
    return {}["missing"]
def two(a, b):
    return None
def exits0(batch):
    sys.exit(0)
def exits3(batch):
    raise SystemExit(3)
def hangs(batch):
    while True:
        time.sleep(0.05)
def spins(batch):
    while True:
        pass
def garbage(batch):
    return {"times_ms": {"total": "fast"}}
def negative(batch):
    return {"flops": -1.0}
def swallows(batch):
    try:
        while True:
            time.sleep(0.05)
    except Exception:
        return None
not_callable = 3
"""
AUDIT_FAST = ["--sources", "imagefree,real", "--steps", "6", "--seq-length", "2048", "-q"]


def _step_module(ctx: Ctx) -> str:
    write(ctx.root / "fuzzstep.py", STEP_MODULE)
    write(ctx.root / "fuzzstep_import_raises.py", "raise ValueError('broken at import')\n")
    write(ctx.root / "fuzzstep_import_exits.py", "import sys\nsys.exit(0)\n")
    return str(ctx.root)


def _log(ctx: Ctx, name: str, ms: list[str], tflops: str = "100.0", samples: list[str] | None = None) -> str:
    lines = []
    for i, m in enumerate(ms, 1):
        consumed = samples[i - 1] if samples else str(16 * i)
        lines.append(
            f" [2026-01-01 00:00:{i:02d}] iteration {i:8d}/{len(ms):8d} | consumed samples: {consumed:>12} | "
            f"elapsed time per iteration (ms): {m} | throughput per GPU (TFLOP/s/GPU): {tflops} | "
            "global batch size:    16 | lm loss: 1.0E+00 |"
        )
    p = ctx.root / name
    write(p, "\n".join(lines) + "\n")
    return ctx.protect(p)


def _good_log(ctx: Ctx, name: str, base: float) -> str:
    return _log(ctx, name, [f"{base * (1 + 0.02 * ((i * 7) % 5)):.1f}" for i in range(30)])


def _fifo_path(ctx: Ctx, name: str) -> str:
    p = ctx.path(name)
    os.mkfifo(p)
    return p


# ----------------------------------------------------------------------------- class: audit (CLI, --step, logs)


def _audit_cases() -> list[Case]:
    cases = []
    for dev in ("tpu", "cuda:x", "cuda:99", "", "cpu:3", "meta", "s3://AKIAFUZZKEYID0000042:x@b"):

        def make(ctx, dev=dev):
            return [Step("audit", ["audit", "--device", dev, *AUDIT_FAST], ok=(2,), timeout=60)]

        cases.append(Case(f"audit/device_{dev[:12] or 'empty'}", "audit", make))

    def out_file(ctx):
        p = ctx.protect(_file(ctx, "report", b"not a folder"))
        return [Step("audit", ["audit", "-o", p, *AUDIT_FAST], ok=(2,), check=expect_in_err("not a folder"))]

    def out_proc(ctx):
        return [Step("audit", ["audit", "-o", "/proc/vlmdata-fuzz", *AUDIT_FAST], ok=(2,), timeout=60)]

    def out_is_real(ctx):
        ds = ctx.protect(sample_copy(ctx))
        return [Step("audit", ["audit", "--real", ds, "-o", ds, *AUDIT_FAST], ok=(2,))]

    def out_twin_is_real(ctx):  # -o PARENT where the real dataset is PARENT/synthetic-twin: never written over
        ds = ctx.protect(sample_copy(ctx, "synthetic-twin"))
        return [Step("audit", ["audit", "--real", ds, "-o", str(ctx.root), *AUDIT_FAST], ok=(2,))]

    def out_report_not_ours(ctx):
        d = _mkdir(ctx, "rep")
        ctx.protect(_file(ctx, "rep/report.md", "my own notes\n"))
        return [Step("audit", ["audit", "-o", d, *AUDIT_FAST], ok=(2,), check=expect_in_err("report.md"))]

    for name, make in (
        ("out_is_a_file", out_file),
        ("out_under_proc", out_proc),
        ("out_is_the_real_dataset", out_is_real),
        ("out_twin_folder_is_the_real_dataset", out_twin_is_real),
        ("out_replaces_a_foreign_report", out_report_not_ours),
    ):
        cases.append(Case(f"audit/{name}", "audit", make))

    for arg in ("images=drop", "images=shapes", "images=decode", "nope=1", "seq_length"):

        def make(ctx, arg=arg):
            return [Step("audit", ["audit", "--loader-arg", arg, *AUDIT_FAST], ok=(2,))]

        cases.append(Case(f"audit/loader_arg_{arg}", "audit", make))

    def real_is_mock(ctx):
        out = ctx.out("mock")
        return [
            Step("synth", ["synth", "--mock", "imagefree", "-n", "8", "-o", out, "-q"]),
            Step("audit", ["audit", "--real", out, *AUDIT_FAST], ok=(2,), check=expect_in_err("not real data")),
        ]

    def real_is_noise(ctx):
        out = ctx.out("noise")
        return [
            Step("synth", ["synth", "--mock", "bridge-noise", "-n", "8", "-o", out, "-q", "--image-size", "64x48"]),
            Step("audit", ["audit", "--real", out, *AUDIT_FAST], ok=(2,), check=expect_in_err("not real data")),
        ]

    def real_is_source(ctx):
        return [Step("audit", ["audit", "--real", folder(ctx, 2), *AUDIT_FAST], ok=(2,))]

    for name, make in (
        ("real_is_a_mock", real_is_mock),
        ("real_is_noise", real_is_noise),
        ("real_is_a_source", real_is_source),
    ):
        cases.append(Case(f"audit/{name}", "audit", make))

    steps = {
        "raises": ("raised KeyError", "fuzzstep.py:"),
        "two": ("signature",),
        "exits0": ("sys.exit(0)",),
        "exits3": ("sys.exit(3)",),
        "hangs": ("did not return",),
        "spins": ("did not return",),
        "swallows": ("did not return",),
        "garbage": ("times_ms",),
        "negative": ("flops",),
        "not_callable": ("not callable",),
        "missing_fn": ("no attribute",),
    }
    for fn, words in steps.items():

        def make(ctx, fn=fn, words=words):
            cwd = _step_module(ctx)
            return [
                Step(
                    "audit",
                    ["audit", "--step", f"fuzzstep:{fn}", "--budget-s", "0.5", *AUDIT_FAST],
                    ok=(2,),
                    env={"PYTHONPATH": cwd},
                    check=expect_in_err(*words),
                    timeout=120,
                )
            ]

        cases.append(Case(f"audit/step_{fn}", "audit", make))
    for mod, words in (
        ("fuzzstep_import_raises:fn", ("ValueError", "broken at import")),
        ("fuzzstep_import_exits:fn", ("raised SystemExit",)),
        ("no_such_module_x:fn", ("cannot load",)),
        ("fuzzstep", ("module:function",)),
    ):

        def make(ctx, mod=mod, words=words):
            cwd = _step_module(ctx)
            return [
                Step(
                    "audit",
                    ["audit", "--step", mod, *AUDIT_FAST],
                    ok=(2,),
                    env={"PYTHONPATH": cwd},
                    check=expect_in_err(*words),
                )
            ]

        cases.append(Case(f"audit/step_module_{mod.split(':')[0]}", "audit", make))

    def step_ok(ctx):
        cwd = _step_module(ctx)
        write(ctx.root / "okstep.py", "import time\ndef fn(batch):\n    time.sleep(0.002)\n")
        return [Step("audit", ["audit", "--step", "okstep:fn", *AUDIT_FAST], ok=(0, 3, 4), env={"PYTHONPATH": cwd})]

    cases.append(Case("audit/step_ok", "audit", step_ok))

    # audit compare: logs as untrusted input
    bad_logs = {
        "nan_ms": (["nan"] * 12, None),
        "negative_ms": (["-2100.0"] * 12, None),
        "zero_ms": (["0.0"] * 12, None),
        "inf_ms": (["inf"] * 12, None),
        "samples_backwards": (["2000.0"] * 12, [str(16 * (12 - i)) for i in range(12)]),
        "nan_samples": (["2000.0"] * 12, ["nan"] * 12),
    }
    for name, (ms, samples) in bad_logs.items():

        def make(ctx, ms=ms, samples=samples):
            mock = _log(ctx, "mock.log", ms, samples=samples)
            real = _good_log(ctx, "real.log", 2100.0)
            return [Step("compare", ["audit", "compare", "--mock", mock, "--real", real], ok=(2,), timeout=60)]

        cases.append(Case(f"audit/compare_{name}", "audit", make))
    specials = {
        "dev_zero": lambda ctx: "/dev/zero",
        "dev_urandom": lambda ctx: "/dev/urandom",
        "fifo": lambda ctx: _fifo_path(ctx, "mock.log"),
        "directory": lambda ctx: _mkdir(ctx, "logs"),
        "empty": lambda ctx: _file(ctx, "mock.log", b""),
        "binary": lambda ctx: _file(ctx, "mock.log", bytes(range(256)) * 64),
        "utf16": lambda ctx: _file(
            ctx, "mock.log", "iteration 1/2 | elapsed time per iteration (ms): 5 |".encode("utf-16")
        ),
        "huge_line": lambda ctx: _file(ctx, "mock.log", b"x" * (3 << 20) + b"\n"),
        "digits": lambda ctx: _file(
            ctx, "mock.log", ("iteration " + "9" * 5000 + "/1 | elapsed time per iteration (ms): 5 |\n").encode()
        ),
        "dots": lambda ctx: _file(ctx, "mock.log", b"Step Time : ...s GPU utilization: 1.0TFLOP/s/GPU\n" * 20),
        "credentials": lambda ctx: f"s3://{KEYID}:{SECRET}@bucket/mock.log",
    }
    for name, mk in specials.items():

        def make(ctx, mk=mk):
            mock = mk(ctx)
            real = _good_log(ctx, "real.log", 2100.0)
            return [Step("compare", ["audit", "compare", "--mock", mock, "--real", real], ok=(2,), timeout=60)]

        cases.append(Case(f"audit/compare_{name}", "audit", make))

    def compare_ok_piped(ctx):
        mock, real = _good_log(ctx, "mock.log", 2000.0), _good_log(ctx, "real.log", 2100.0)
        return [
            Step(
                "compare",
                ["audit", "compare", "--mock", mock, "--real", real, "-o", ctx.out("rep")],
                ok=(0, 3, 4),
                check=no_ellipsis,
            )
        ]

    def compare_out_is_log_folder(ctx):
        mock, real = _good_log(ctx, "mock.log", 2000.0), _good_log(ctx, "real.log", 2100.0)
        ctx.protect(_file(ctx, "report.json", '{"mine": true}'))
        return [Step("compare", ["audit", "compare", "--mock", mock, "--real", real, "-o", str(ctx.root)], ok=(2,))]

    def compare_narrow(ctx):
        mock, real = _good_log(ctx, "mock.log", 2000.0), _good_log(ctx, "real.log", 2100.0)
        return [
            Step(
                "compare",
                ["audit", "compare", "--mock", mock, "--real", real],
                ok=(0, 3, 4),
                env={"COLUMNS": "60"},
                check=no_ellipsis,
            )
        ]

    for name, make in (
        ("compare_ok_piped", compare_ok_piped),
        ("compare_out_holds_a_foreign_report", compare_out_is_log_folder),
        ("compare_at_60_columns", compare_narrow),
    ):
        cases.append(Case(f"audit/{name}", "audit", make))
    return cases


# ----------------------------------------------------------------------------- class: leaks (wrappers echo arguments)


def _leak_cases() -> list[Case]:
    url = f"s3://{KEYID}:{SECRET}@bucket/x"
    argvs = {
        "audit_real": ["audit", "--real", url, *AUDIT_FAST],
        "audit_profile": ["audit", "--profile", url + "/p.json", *AUDIT_FAST],
        "audit_compare_mock": ["audit", "compare", "--mock", url, "--real", url],
        "synth_profile": ["synth", "--profile", url, "-n", "2", "-o", "OUT"],
        "profile_input": ["profile", url, "-o", "P"],
        "compare_a": ["compare", url, url],
        "argparse_steps": ["audit", "--steps", url],
        "argparse_choice": ["audit", "--preset", url],
        "inspect": ["inspect", url],
        "build_image_root": ["build", "SRC", "-o", "OUT", "--image-root", url],
        "loader_arg": ["audit", "--loader-arg", f"chat_template={url}", "-o", "OUT", *AUDIT_FAST],
        "sweep_value": ["audit", "--sweep", f"micro_batch_size={url}", *AUDIT_FAST],
        "signed_query": ["audit", "--real", f"s3://bucket/x?X-Amz-Signature={SECRET}", *AUDIT_FAST],
    }
    cases = []
    for name, argv in argvs.items():

        def make(ctx, argv=argv):
            sub = {"OUT": ctx.out(), "P": ctx.path("p.json"), "SRC": folder(ctx, 2)}
            return [Step("cli", [sub.get(a, a) for a in argv], ok=(2,), timeout=90)]

        cases.append(Case(f"leak/{name}", "leaks", make))
    return cases


# ----------------------------------------------------------------------------- class: outputs (never over an input)


def _output_path_cases() -> list[Case]:
    cases = []

    def in_dataset(rel: str):
        def make(ctx):
            ds = ctx.protect(sample_copy(ctx))
            return [Step("profile", ["profile", ds, "-o", os.path.join(ds, rel), "-q"], ok=(2,))]

        return make

    for rel in ("manifest.json", "shard-000000.tar", "shard-000000.tar.idx", ".nv-meta/split.yaml", ".nv-meta/x.json"):
        cases.append(Case(f"outpath/profile_over_{rel.replace('/', '_')}", "outputs", in_dataset(rel)))

    def over_caption(ctx):
        src = folder(ctx, 2)
        return [Step("profile", ["profile", src, "-o", os.path.join(src, "good0.txt"), "-q"], ok=(2,))]

    def new_file_in_source(ctx):
        src = folder(ctx, 2)
        return [Step("profile", ["profile", src, "-o", os.path.join(src, "good1.json"), "-q"], ok=(2,))]

    def over_jsonl(ctx):
        j = jsonl(ctx, [])
        return [Step("profile", ["profile", j, "-o", j, "-q"], ok=(2,))]

    def over_image(ctx):
        j = jsonl(ctx, [])
        return [Step("profile", ["profile", j, "-o", os.path.join(os.path.dirname(j), "imgs", "0.jpg"), "-q"], ok=(2,))]

    def over_notes(ctx):
        p = ctx.protect(_file(ctx, "notes.json", '{"mine": 1}'))
        return [Step("profile", ["profile", clean_dataset(), "-o", p, "-q"], ok=(2,))]

    def symlink_to_manifest(ctx):
        ds = ctx.protect(sample_copy(ctx))
        os.symlink(os.path.join(ds, "manifest.json"), ctx.path("p.json"))
        return [Step("profile", ["profile", ds, "-o", ctx.path("p.json"), "-q"], ok=(2,))]

    def hardlink_to_caption(ctx):
        src = folder(ctx, 2)
        os.link(os.path.join(src, "good0.txt"), ctx.path("p.json"))
        return [Step("profile", ["profile", src, "-o", ctx.path("p.json"), "-q"], ok=(2,))]

    def plot_over_manifest(ctx):
        ds = ctx.protect(sample_copy(ctx))
        return [Step("compare", ["compare", ds, ds, "--plot", os.path.join(ds, "manifest.json")], ok=(2,))]

    def profile_plot_over_input(ctx):
        ds = ctx.protect(sample_copy(ctx))
        return [
            Step(
                "profile",
                ["profile", ds, "-o", ctx.path("p.json"), "--plot", os.path.join(ds, "manifest.json")],
                ok=(2,),
            )
        ]

    def over_own_profile(ctx):
        p = ctx.path("p.json")
        args = ["profile", clean_dataset(), "-o", p, "-q", "--decode-images", "0"]
        return [Step("profile", args), Step("profile again", args)]

    def out_is_input_dir(ctx):
        ds = ctx.protect(sample_copy(ctx))
        return [Step("profile", ["profile", ds, "-o", ds, "-q"], ok=(2,))]

    for name, make in (
        ("profile_over_a_caption", over_caption),
        ("profile_new_file_in_the_source", new_file_in_source),
        ("profile_over_its_jsonl", over_jsonl),
        ("profile_over_a_record_image", over_image),
        ("profile_over_a_foreign_file", over_notes),
        ("profile_through_a_symlink_to_the_manifest", symlink_to_manifest),
        ("profile_through_a_hardlink_to_a_caption", hardlink_to_caption),
        ("compare_plot_over_the_manifest", plot_over_manifest),
        ("profile_plot_over_the_manifest", profile_plot_over_input),
        ("profile_over_its_own_profile", over_own_profile),
        ("profile_out_is_the_input_folder", out_is_input_dir),
    ):
        cases.append(Case(f"outpath/{name}", "outputs", make))
    return cases


# ----------------------------------------------------------------------------- class: data (silent loss, hangs)


def _straddle_dataset(root: str) -> dict:
    """Two-image samples whose second image straddles seq_length: skipped as image_truncated and named, and no
    batch ever carries fewer image-pad tokens than image features."""
    import numpy as np

    from vlmdata.audit.workload.model import IMAGE_TOKEN_ID
    from vlmdata.loaders.api import make_loader

    kw = dict(tokenizer=_tokenizer(), micro_batch_size=2, min_pixels=64 * 64, max_pixels=128 * 128, shuffle=False)
    first = next(iter(make_loader(root, seq_length=None, **kw)))
    pads = np.flatnonzero(first["input_ids"][0].numpy() == IMAGE_TOKEN_ID)
    gaps = np.flatnonzero(np.diff(pads) != 1)
    second = int(pads[gaps[0] + 1])  # the first image-pad token of the second image
    ld = make_loader(root, seq_length=second + 4, **kw)
    mismatched = 0
    for b in ld:
        n_pads = int((b["input_ids"] == IMAGE_TOKEN_ID).sum())
        feats = int(b["visual_inputs"].image_grid_thw.prod(-1).sum()) // 4
        mismatched += n_pads != feats
    st = ld.stats.to_json()
    if mismatched or st["samples"] + st["skipped"] != 6 or not st["skipped_by_reason"].get("image_truncated"):
        raise SystemExit(f"error: {mismatched} batches with image tokens != features; {st['skipped_by_reason']}")
    return {"skipped_by_reason": st["skipped_by_reason"]}


def _data_cases() -> list[Case]:
    cases = []
    for ext in (".jfif", ".jpe", ".pjpeg", ".pjp", ".JFIF"):

        def make(ctx, ext=ext):
            src = folder(ctx, 2, extra={f"alias{ext}": jpeg(50, 40), "alias.txt": "a caption"})
            return pipeline(ctx, src, written=3)

        cases.append(Case(f"data/jpeg_suffix_{ext[1:]}", "data", make))

    def parquet_nulls(ctx):
        import pyarrow as pa
        import pyarrow.parquet as pq

        d = ctx.root / "pq"
        d.mkdir()
        img = {"bytes": jpeg(50, 40), "path": None}
        t = pa.table(
            {
                "image": [img, None, {"bytes": None, "path": None}, img],
                "text": ["a cat", "a dog", "a fox", "an owl"],
            }
        )
        pq.write_table(t, str(d / "d.parquet"))
        ctx.protect(d)
        return pipeline(ctx, str(d / "d.parquet"), written=2, reasons={"missing_image": 2})

    cases.append(Case("data/parquet_null_images", "data", parquet_nulls))

    def idx_flip(ctx):
        ds = sample_copy(ctx)
        p = Path(ds) / "shard-000001.tar.idx"
        d = bytearray(p.read_bytes())
        d[9] ^= 0x10
        p.write_bytes(bytes(d))
        return [Step("validate", ["validate", ds, "-q"], ok=(1,), check=expect_in_err())]

    def stray_shard(ctx):
        ds = sample_copy(ctx)
        shutil.copy(Path(ds) / "shard-000000.tar", Path(ds) / "shard-000000 (copy).tar")
        return [Step("validate", ["validate", ds, "-q"], ok=(1,))]

    def sqlite_rows(ctx):
        import sqlite3

        ds = sample_copy(ctx)
        db = sqlite3.connect(str(Path(ds) / ".nv-meta" / "index.sqlite"))
        db.execute("UPDATE samples SET byte_offset = byte_offset + 512 WHERE sample_index = 1")
        db.commit()
        db.close()
        return [Step("validate", ["validate", ds, "-q"], ok=(1,))]

    def proc_source(ctx):
        return [Step("build", ["build", "/proc/self/", "-o", ctx.out(), "-q"], ok=(2,), timeout=60)]

    def links_up(ctx):
        src = folder(ctx, 2, extra={"sub/root": lambda p: os.symlink("/", p), "sub/up": lambda p: os.symlink("..", p)})
        return pipeline(ctx, src, written=2)

    def links_up_hf(ctx):
        d = ctx.root / "hf"
        d.mkdir()
        os.symlink("/", d / "root")
        os.symlink("..", d / "up")
        return [Step("build", ["build", str(d), "-o", ctx.out(), "-q"], ok=(2,), timeout=60)]

    def straddle(ctx):
        from vlmdata.dataset.schema import ImageInfo, Sample, user_assistant
        from vlmdata.ingest import write_dataset

        samples = []
        for i in range(6):  # 4 two-image samples (their second image straddles), 2 one-image ones (they fit)
            imgs = [jpeg(128, 128, color=(i * 30, 40, 50)), jpeg(128, 128, color=(40, i * 30, 50))]
            imgs = imgs if i < 4 else [jpeg(64, 64)]
            s = Sample(key=f"s{i:09d}", conversation=user_assistant("compare these", "they differ", len(imgs)))
            s.images = imgs
            side = 128 if i < 4 else 64
            s.image_info = [ImageInfo(f"{j}.jpg", side, side, "JPEG", len(b)) for j, b in enumerate(imgs)]
            samples.append(s)
        out = ctx.out("ds")
        write_dataset(out, samples, kind="build", options={}, source={"format": "fuzz"})
        return [Step("loader", fn=_straddle_dataset, args=(out,))]

    def broken_json(kind: str, data: bytes, words: tuple):
        def make(ctx):
            p = _file(ctx, "data.json" if kind != "jsonl" else "data.jsonl", data)
            return [Step("build", ["build", p, "-o", ctx.out(), "-q"], ok=(2,), check=expect_in_err(*words))]

        return make

    rec_json = json.dumps([rec("a.jpg")])
    for name, make in (
        ("tar_idx_byte_flip", idx_flip),
        ("stray_shard_copy", stray_shard),
        ("sqlite_row_offset", sqlite_rows),
        ("source_in_proc", proc_source),
        ("source_links_to_root_and_parent", links_up),
        ("hf_folder_links_to_root", links_up_hf),
        ("image_straddles_seq_length", straddle),
        ("json_truncated_array", broken_json("json", rec_json[:-8].encode(), ("not valid JSON",))),
        ("json_utf16", broken_json("json", rec_json.encode("utf-16"), ("UTF-16",))),
        ("json_bad_byte", broken_json("json", rec_json.encode()[:20] + b"\xff" + rec_json.encode()[20:], ("UTF-8",))),
        ("jsonl_all_bad", broken_json("jsonl", b"{nope\n[1,2]\n", ("no JSON record",))),
    ):
        cases.append(Case(f"data/{name}", "data", make))
    return cases


# ----------------------------------------------------------------------------- class: console (stdout, env, widths)


def _main_to_full(argv: list[str]) -> dict:
    """A command whose stdout is /dev/full: one line on stderr and exit 2, never a traceback."""
    from vlmdata.cli.main import main

    old = sys.stdout
    sys.stdout = open("/dev/full", "w")  # noqa: SIM115 - closed below
    try:
        code = main(argv)
    finally:
        full, sys.stdout = sys.stdout, old
        try:
            full.close()
        except OSError:
            pass
    if code != 2:
        raise SystemExit(f"error: exit {code} with stdout on a full device, expected 2")
    return {"code": code}


def _console_cases() -> list[Case]:
    cases = []
    for v in ("1e309", "nan", "-1", "abc", "1e12", "0"):

        def make(ctx, v=v):
            return [Step("validate", ["validate", clean_dataset()], env={"VLMDATA_PROGRESS_INTERVAL": v})]

        cases.append(Case(f"console/progress_interval_{v}", "console", make))
    for argv in (["inspect", "DS"], ["validate", "DS"], ["profile", "DS", "-o", "P"]):

        def make(ctx, argv=argv):
            sub = {"DS": clean_dataset(), "P": ctx.path("p.json")}
            return [Step("full stdout", fn=_main_to_full, args=([sub.get(a, a) for a in argv],))]

        cases.append(Case(f"console/stdout_full_{argv[0]}", "console", make))
    for cols in ("80", "40", "1", "0", "abc", "100000"):

        def make(ctx, cols=cols):
            return [Step("inspect", ["inspect", clean_dataset()], env={"COLUMNS": cols}, check=no_ellipsis)]

        cases.append(Case(f"console/inspect_columns_{cols}", "console", make))
    return cases


# ----------------------------------------------------------------------------- class: api (public functions)


def _api_call(name: str, kind: str) -> dict:
    """Call a public function with a hostile argument: a VlmdataError (or a clean result) is the expected
    outcome, anything else a traceback."""
    import vlmdata
    from vlmdata import BuildOptions, LoaderOptions, VlmdataError

    ds = clean_dataset()
    calls = {
        "make_loader": {
            "int": lambda: vlmdata.make_loader(123),
            "none": lambda: vlmdata.make_loader(None),
            "missing": lambda: vlmdata.make_loader("/proc/vlmdata-none/x"),
            "empty": lambda: vlmdata.make_loader(""),
            "empty_glob": lambda: vlmdata.make_loader("/nonexistent*/x*.tar"),
            "dict": lambda: vlmdata.make_loader({"a": 1}),
            "bytes": lambda: vlmdata.make_loader(b"/tmp"),
            "list_of_ints": lambda: vlmdata.make_loader([1, 2]),
            "seq_length_1": lambda: next(iter(vlmdata.make_loader(ds, tokenizer=_tokenizer(), seq_length=1))),
            "seq_length_str": lambda: vlmdata.make_loader(ds, seq_length="4096"),
            "bad_template": lambda: vlmdata.make_loader(ds, tokenizer=_tokenizer(), chat_template="{% for %}"),
            "template_int": lambda: vlmdata.make_loader(ds, tokenizer=_tokenizer(), chat_template=5),
            "tokenizer_str": lambda: vlmdata.make_loader(ds, tokenizer="str"),
            "options_dict": lambda: vlmdata.make_loader(ds, {"seq_length": 5}),
            "unknown_option": lambda: vlmdata.make_loader(ds, sequence_length=5),
            "state_garbage": lambda: vlmdata.make_loader(ds, tokenizer=_tokenizer()).load_state_dict({"garbage": 1}),
            "state_str": lambda: vlmdata.make_loader(ds, tokenizer=_tokenizer()).load_state_dict("x"),
            "state_bad_epoch": lambda: vlmdata.make_loader(ds, tokenizer=_tokenizer()).load_state_dict(
                {**vlmdata.make_loader(ds, tokenizer=_tokenizer()).state_dict(), "epoch": "x"}
            ),
        },
        "options": {
            "loader_shuffle_str": lambda: LoaderOptions(shuffle="yes"),
            "loader_rank_str": lambda: LoaderOptions(rank="0", world_size=2),
            "loader_max_pixels_str": lambda: LoaderOptions(max_pixels="big"),
            "loader_model_list": lambda: LoaderOptions(model=["qwen3-vl"]),
            "loader_seed_negative": lambda: LoaderOptions(seed=-1),
            "build_opts_str": lambda: vlmdata.build(ds, "/proc/vlmdata-none/out", BuildOptions(max_count="5")),
            "build_opts_fsync": lambda: vlmdata.build(ds, "/proc/vlmdata-none/out", BuildOptions(fsync="yes")),
        },
        "build": {
            "dict_opts": lambda: vlmdata.build(ds, "/proc/vlmdata-none/out", {"max_count": 5}),
            "none_out": lambda: vlmdata.build(ds, None),
            "none_source": lambda: vlmdata.build(None, "/proc/vlmdata-none/out"),
            "int_source": lambda: vlmdata.build(5, "/proc/vlmdata-none/out"),
            "missing_source": lambda: vlmdata.build("/nonexistent/src", "/proc/vlmdata-none/out"),
            "resume_str": lambda: vlmdata.build(ds, "/proc/vlmdata-none/out", resume="yes"),
        },
        "validate": {
            "none": lambda: vlmdata.validate(None),
            "int": lambda: vlmdata.validate(3),
            "missing": lambda: vlmdata.validate("/nonexistent"),
            "decode_str": lambda: vlmdata.validate(ds, decode="yes"),
        },
        "profile": {
            "opts_str": lambda: vlmdata.profile_dataset(ds, "fast"),
            "none": lambda: vlmdata.profile_dataset(None),
            "missing": lambda: vlmdata.profile_dataset("/nonexistent"),
            "cap_str": lambda: vlmdata.profile_dataset(ds, vlmdata.profile.measure.ProfileOptions(cap="x")),
        },
        "load_hf": {
            "split_escape": lambda: vlmdata.load_hf(ds, split="../../etc"),
            "split_int": lambda: vlmdata.load_hf(ds, split=3),
            "none": lambda: vlmdata.load_hf(None),
            "missing": lambda: vlmdata.load_hf("/nonexistent"),
        },
    }
    import vlmdata.profile.measure  # noqa: F401 - the ProfileOptions above

    try:
        calls[name][kind]()
    except VlmdataError as e:
        return {"error": type(e).__name__, "message": str(e)[:200]}
    return {"returned": True}


def _api_cases() -> list[Case]:
    names = {
        "make_loader": (
            "int",
            "none",
            "missing",
            "empty",
            "empty_glob",
            "dict",
            "bytes",
            "list_of_ints",
            "seq_length_1",
            "seq_length_str",
            "bad_template",
            "template_int",
            "tokenizer_str",
            "options_dict",
            "unknown_option",
            "state_garbage",
            "state_str",
            "state_bad_epoch",
        ),
        "options": (
            "loader_shuffle_str",
            "loader_rank_str",
            "loader_max_pixels_str",
            "loader_model_list",
            "loader_seed_negative",
            "build_opts_str",
            "build_opts_fsync",
        ),
        "build": ("dict_opts", "none_out", "none_source", "int_source", "missing_source", "resume_str"),
        "validate": ("none", "int", "missing", "decode_str"),
        "profile": ("opts_str", "none", "missing", "cap_str"),
        "load_hf": ("split_escape", "split_int", "none", "missing"),
    }

    def must_raise(root, res):
        d = res.data or {}
        return ("mismatch", "the call returned instead of raising a VlmdataError") if d.get("returned") else None

    cases = []
    for name, kinds in names.items():
        for kind in kinds:

            def make(ctx, name=name, kind=kind):
                return [Step("api", fn=_api_call, args=(name, kind), check=must_raise, timeout=90)]

            cases.append(Case(f"api/{name}_{kind}", "api", make))
    return cases


# ----------------------------------------------------------------------------- the corpus

# the fast subset the test suite runs (tests/system/test_fuzz.py): one to four cases per class, ~1 min
QUICK = frozenset(
    {
        "image/jpeg_truncated_0.5",
        "image/thin_1x20000",
        "sidecar/deep_json",
        "sidecar/lone_surrogate_json",
        "sidecar/sidecar_fifo",
        "record/nul_in_path",
        "record/control_token_answer",
        "record/s3_with_credentials",
        "path/absolute_outside",
        "path/fifo_image",
        "path/prefix_../x",
        "path/source_fifo",
        "output/sigkill_after_0.6s_w1",
        "output/overwrite_not_a_dataset",
        "output/overwrite_src_of_source",
        "output/overwrite_bad_parquet_keeps_old",
        "shard/new_truncate_0",
        "shard/new_inflate_0",
        "shard/new_duplicate_key_0",
        "manifest/shard_escape",
        "manifest/totals_missing",
        "url/userinfo_build_source",
        "url/userinfo_validate",
        "url/record_image_with_credentials",
        "option/build_max-size_infk",
        "option/synth_image-size_100000x100000",
        "loader/control_token_0",
        "loader/endless_epochs_empty_dataset",
        "loader/endless_epochs_all_skipped",
        "audit/device_tpu",
        "audit/out_under_proc",
        "audit/step_raises",
        "audit/step_hangs",
        "audit/compare_nan_ms",
        "audit/compare_fifo",
        "audit/real_is_a_mock",
        "leak/audit_real",
        "leak/argparse_steps",
        "outpath/profile_over_manifest.json",
        "outpath/profile_over_a_caption",
        "data/tar_idx_byte_flip",
        "data/source_in_proc",
        "data/image_straddles_seq_length",
        "data/json_utf16",
        "console/progress_interval_1e309",
        "console/stdout_full_inspect",
        "console/inspect_columns_80",
        "api/make_loader_int",
        "api/make_loader_seq_length_1",
        "api/build_dict_opts",
        "api/load_hf_split_escape",
    }
)


def corpus() -> list[Case]:
    cases = (
        _image_cases()
        + _sidecar_cases()
        + _record_cases()
        + _path_cases()
        + _output_cases()
        + _shard_cases()
        + _manifest_cases()
        + _url_cases()
        + _option_cases()
        + _loader_cases()
        + _audit_cases()
        + _leak_cases()
        + _output_path_cases()
        + _data_cases()
        + _console_cases()
        + _api_cases()
    )
    import fuzz_round4  # bench/ is on sys.path (this script's folder); its cases use this module's Case and Step

    cases += fuzz_round4.cases(sys.modules[__name__])
    for c in cases:
        c.quick = c.name in QUICK or c.name in fuzz_round4.QUICK
    return cases


# ----------------------------------------------------------------------------- running


def _child(step: Step, cwd: str, out_path: str, err_path: str, res_path: str) -> None:
    os.setpgid(0, 0)
    os.chdir(cwd)
    for fd, path in ((1, out_path), (2, err_path)):
        f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(f, fd)
        os.close(f)
    # fresh streams on fds 1 and 2 (under pytest sys.stdout/err are capture objects on other fds)
    sys.stdout = io.TextIOWrapper(os.fdopen(1, "wb", closefd=False), encoding="utf-8", line_buffering=True)
    sys.stderr = io.TextIOWrapper(
        os.fdopen(2, "wb", closefd=False), encoding="utf-8", errors="backslashreplace", line_buffering=True
    )
    os.environ.update(step.env)
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    if step.fsize is not None:
        import resource

        resource.setrlimit(resource.RLIMIT_FSIZE, (step.fsize, step.fsize))
    code = 0
    try:
        if step.argv is not None:
            from vlmdata.cli.main import main

            code = int(main(list(step.argv)) or 0)
        else:
            data = step.fn(*step.args)
            with open(res_path, "w") as f:
                json.dump(data, f, default=str)
    except SystemExit as e:
        if isinstance(e.code, str):
            sys.stderr.write(e.code + "\n")
            code = 2
        else:
            code = 0 if e.code is None else int(e.code)
    except BaseException:  # noqa: BLE001 - the runner classifies it
        traceback.print_exc()
        code = 70
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


class _suppress:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return exc[0] is not None and issubclass(exc[0], OSError)


def _snapshot(root: Path) -> dict[str, str]:
    out = {}
    for d, dirs, files in os.walk(root):
        for f in files:
            p = os.path.join(d, f)
            try:
                if os.path.islink(p) or not os.path.isfile(p):
                    out[p] = "special"
                    continue
                h = hashlib.sha256()
                with open(p, "rb") as fh:
                    while chunk := fh.read(1 << 20):
                        h.update(chunk)
                out[p] = h.hexdigest()
            except OSError:
                out[p] = "unreadable"
    return out


def _tree(path: Path) -> dict[str, str]:
    return (
        _snapshot(path)
        if path.is_dir()
        else ({str(path): hashlib.sha256(path.read_bytes()).hexdigest()} if path.is_file() else {})
    )


def _leaks(text: str) -> bool:
    return SECRET in text or KEYID in text


def classify_step(step: Step, res: Result, root: Path) -> tuple[str, str] | None:
    if res.timed_out:
        return "hang", f"{step.name}: no result after {step.timeout:.0f} s"
    if "Traceback (most recent call last)" in res.err or "Traceback (most recent call last)" in res.out:
        return "traceback", f"{step.name}: " + res.err.strip().splitlines()[-1][:200]
    code = res.code
    intended = step.kill is not None and code is not None and code < 0 and -code == step.kill[1]
    if code is None or (code < 0 and not intended) or code not in (0, 1, 2, 3, 4) and not intended:
        return "traceback", f"{step.name}: exit {code}"
    if _leaks(res.out) or _leaks(res.err):
        return "leak", f"{step.name}: a secret in its output"
    if step.check is not None:
        bad = step.check(root, res)
        if bad:
            return bad[0], f"{step.name}: {bad[1]}"
    if code not in step.ok:
        msg = (res.err.strip().splitlines() or [""])[-1][:160]
        return "mismatch", f"{step.name}: exit {code}, expected {step.ok} ({msg})"
    if code in (1, 2) and not res.err.strip() and step.argv is not None and step.argv[0] != "validate":
        return "mismatch", f"{step.name}: exit {code} without a message"
    return None


def run_case(case: Case, base: Path) -> tuple[str, str]:
    root = base / case.name.replace("/", "__")
    root.mkdir(parents=True)
    ctx = Ctx(root)
    try:
        steps = case.make(ctx)
    except Exception as e:  # noqa: BLE001 - a broken generator is reported, not fatal
        return "mismatch", f"generator failed: {type(e).__name__}: {e}"
    guarded = {str(p): _tree(p) for p in ctx.protected}
    before = _snapshot(root)
    parent_before = set(os.listdir(base))
    worst: tuple[str, str] | None = None
    first_code = None
    for i, step in enumerate(steps):
        res = run_step_captured(step, root, f"{i}")
        if i == 0:
            first_code = res.code
        bad = classify_step(step, res, root)
        if bad and (worst is None or WORST.index(bad[0]) < WORST.index(worst[0])):
            worst = bad
        if bad and bad[0] in ("hang", "traceback"):
            break
    for p, tree in guarded.items():
        if _tree(Path(p)) != tree:
            bad = ("silent corruption/data loss", f"protected {os.path.relpath(p, root)} changed")
            if worst is None or WORST.index(bad[0]) < WORST.index(worst[0]):
                worst = bad
    after = _snapshot(root)
    outputs = [str(o) for o in ctx.outputs] + [str(root / n) for n in ("p.json", "clean")]
    stray = [p for p in after if p not in before and not any(p == o or p.startswith(o + os.sep) for o in outputs)]
    if stray and (worst is None or WORST.index(worst[0]) > WORST.index("silent corruption/data loss")):
        worst = ("silent corruption/data loss", f"file written outside the output: {os.path.relpath(stray[0], root)}")
    new_top = set(os.listdir(base)) - parent_before - {root.name} - {n for n in os.listdir(base) if n.startswith(".")}
    if new_top and (worst is None or WORST.index(worst[0]) > WORST.index("silent corruption/data loss")):
        worst = ("silent corruption/data loss", f"file written beside the case folder: {sorted(new_top)[0]}")
    for p in after:
        if before.get(p) == after[p]:
            continue  # an input, unchanged (inputs may hold the secret on purpose)
        try:
            if os.path.isfile(p) and not os.path.islink(p) and os.path.getsize(p) < 64 << 20:
                with open(p, "rb") as fh:
                    if _leaks(fh.read().decode("latin-1")):
                        worst = ("leak", f"a secret written into {os.path.relpath(p, root)}")
                        break
        except OSError:
            pass
    if worst:
        return worst
    return ("clear error", "") if first_code not in (0, None) else ("correct run", "")


def run_step_captured(step: Step, cwd: Path, tag: str) -> Result:
    logs = cwd.parent / f".{cwd.name}.{tag}"
    out_path, err_path, res_path = str(logs) + ".out", str(logs) + ".err", str(logs) + ".json"
    p = mp.get_context("fork").Process(target=_child, args=(step, str(cwd), out_path, err_path, res_path))
    p.start()
    signalled = False
    if step.kill:
        delay, sig = step.kill
        p.join(delay)
        if p.is_alive():
            with _suppress():
                os.kill(p.pid, sig)
                signalled = True
    p.join(step.timeout)
    timed_out = p.is_alive()
    with _suppress():
        os.killpg(p.pid, signal.SIGKILL)  # the step's process group: a hung step, stray pool workers
    p.join(10)

    def read(path):
        try:
            return Path(path).read_text(errors="replace")
        except OSError:
            return ""

    out, err, raw = read(out_path), read(err_path), read(res_path)
    for path in (out_path, err_path, res_path):
        with _suppress():
            os.remove(path)
    try:
        data = json.loads(raw) if raw else None
    except ValueError:
        data = None
    return Result(p.exitcode, out, err, timed_out, data, signalled)


def preload() -> None:
    """Import what the steps use once, before forking (each child then starts in milliseconds)."""
    import datasets
    import megatron.energon  # noqa: F401

    import vlmdata.cli.main  # noqa: F401 - imports every command
    import vlmdata.dataset.nvmeta  # noqa: F401
    import vlmdata.loaders.api  # noqa: F401

    datasets.disable_progress_bars()
    _tokenizer()
    from vlmdata.cli.main import parser

    parser()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="only the fast subset (what tests/system/test_fuzz.py runs)")
    ap.add_argument("--classes", help="comma-separated classes: " + ", ".join(sorted({c.cls for c in corpus()})))
    ap.add_argument("--match", help="only cases whose name contains this")
    ap.add_argument("--skip", action="append", default=[], help="leave out the case with this name (repeatable)")
    ap.add_argument("--json", help="write every case's outcome here")
    ap.add_argument("--show-all", action="store_true", help="print every case, not only the ones that are not clean")
    ap.add_argument("--keep", help="keep the case folders in this folder (default: a temp folder, removed)")
    args = ap.parse_args(argv)
    cases = corpus()
    if args.quick:
        cases = [c for c in cases if c.quick]
    if args.classes:
        want = set(args.classes.split(","))
        cases = [c for c in cases if c.cls in want]
    if args.match:
        cases = [c for c in cases if args.match in c.name]
    cases = [c for c in cases if c.name not in args.skip]
    preload()
    base = Path(args.keep or tempfile.mkdtemp(prefix="vlmdata-fuzz-"))
    base.mkdir(parents=True, exist_ok=True)
    t0, cpu0 = time.perf_counter(), os.times()
    outcomes = []
    try:
        for case in cases:
            t = time.perf_counter()
            cat, msg = run_case(case, base)
            outcomes.append(
                {
                    "case": case.name,
                    "class": case.cls,
                    "outcome": cat,
                    "detail": msg,
                    "seconds": round(time.perf_counter() - t, 2),
                }
            )
            if args.show_all or cat in WORST:
                print(f"{cat:28s} {case.name}: {msg}", flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
        for d in _CLEAN.values():
            shutil.rmtree(Path(d).parent, ignore_errors=True)
    totals = {k: sum(1 for o in outcomes if o["outcome"] == k) for k in CATEGORIES}
    cpu = os.times()
    per_class: dict[str, dict] = {}
    for o in outcomes:
        per_class.setdefault(o["class"], {k: 0 for k in CATEGORIES})[o["outcome"]] += 1
    print(f"\ncases {len(outcomes)}: " + ", ".join(f"{k} {v}" for k, v in totals.items()))
    for cls, t in sorted(per_class.items()):
        print(f"  {cls:10s} {sum(t.values()):4d}: " + ", ".join(f"{k} {v}" for k, v in t.items() if v))
    print(
        f"wall {time.perf_counter() - t0:.0f} s, CPU {cpu.children_user + cpu.children_system - cpu0.children_user - cpu0.children_system + cpu.user + cpu.system - cpu0.user - cpu0.system:.0f} s, "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {"totals": {"cases": len(outcomes), **totals}, "classes": per_class, "cases": outcomes}, indent=1
            )
        )
    return 1 if any(totals[k] for k in WORST) else 0


if __name__ == "__main__":
    sys.exit(main())
