"""What the audit checks before it measures anything, so that a bad argument fails in a second with one line
instead of a traceback after minutes of measuring.

- ``check_device(device, loader)``: "cpu", "cuda" or "cuda:N" (an existing GPU); anything else (``tpu``,
  ``cuda:x``, ``cuda:7`` on a one-GPU host) is an ``AuditError``, never torch's own RuntimeError
  (``check_device_name``: the name alone, which ``AuditConfig`` checks when it is made); the loader option
  ``image_device`` names a GPU only when the run is on one, and its nvJPEG decoder needs torchvision;
- ``check_out_dir(out, real=..., profile=...)``: the report folder can be written (created, a probe file written
  and removed: ``storage.check_writable``), ``report.json`` / ``report.md`` / ``report.html`` there replace only an
  earlier audit report, and the generated inputs (``synthetic-twin/``, ``synthetic-profile/``: ``inputs.TWIN_DIR``,
  ``inputs.PROFILE_DIR``) replace only what an earlier audit wrote, never the real dataset, the profile or a
  folder of other files (``dataset.resolve.check_output``);
- ``check_report_dir(out, inputs)``: the same for ``audit compare -o`` (the logs are its inputs);
- ``check_paths(real=..., profile=...)``: a path with credentials, a query or a fragment is refused whether or
  not the run would use it (an unused ``--profile`` would otherwise be written into report.json).

Messages name library parameters (```out```, ```device```); the CLI shows them as flags. Depends on
``storage``, ``dataset`` and ``audit.inputs`` (torch is imported only by ``check_device``).
"""

from __future__ import annotations

import importlib.util
import json
import os
from typing import Any

from vlmdata import storage
from vlmdata.audit.sources.registry import PROFILE_DIR, TWIN_DIR, AuditError
from vlmdata.dataset.manifest import MANIFEST_NAME
from vlmdata.dataset.resolve import OutputRefused, check_output
from vlmdata.ingest.output import STATE_DIR

# the files ``report.write_report`` writes into an output folder, and how each starts
REPORT_FILES = ("report.json", "report.md", "report.html")
_REPORT_MD_HEAD = b"# vlmdata audit"
_REPORT_HTML_HEAD = b"<!DOCTYPE html><html><head><meta charset='utf-8'><title>vlmdata audit</title>"


def check_device_name(device: str) -> None:
    """AuditError unless ``device`` names a device the audit runs on: "cpu", "cuda" or "cuda:N" (whether that GPU
    exists is ``check_device``'s).

    Args:
        device: the device text as given (``--device``).
    """
    import torch  # the audit needs it anyway; kept out of this module's import for `vlmdata --help`

    if not isinstance(device, str) or not device.strip():
        raise AuditError(f"`device` must be cpu, cuda or cuda:N, got {device!r}")
    try:
        d = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        raise AuditError(f"`device` {device!r} is not a device the audit runs on (cpu, cuda or cuda:N)") from None
    if d.type not in ("cpu", "cuda"):
        raise AuditError(f"`device` {device!r}: the audit runs on cpu or cuda (cuda:N), not {d.type}")
    if d.type == "cpu" and d.index not in (None, 0):
        raise AuditError(f"`device` {device!r}: there is one cpu device (cpu)")


def check_device(device: str, loader: Any = None) -> None:
    """AuditError unless ``device`` is "cpu", "cuda" or "cuda:N" with that GPU present, and the loader options'
    ``image_device`` (images finished in the training process) can run: cpu, or a GPU of a run on cuda, and its
    nvJPEG decoder (the default) with torchvision installed; either failed in the warm-up with a traceback.

    Args:
        device: the device text as given (``--device``).
        loader: the run's ``LoaderOptions`` (``image_device``, ``image_decoder``), or None.
    """
    import torch  # the audit needs it anyway; kept out of this module's import for `vlmdata --help`

    check_device_name(device)
    d = torch.device(device)
    image_device = getattr(loader, "image_device", None)
    if image_device is not None:
        try:
            kind = torch.device(image_device).type
        except (RuntimeError, TypeError, ValueError):
            kind = None
        if kind not in ("cpu", "cuda"):
            raise AuditError(f"loader option image_device={image_device!r} is not cpu, cuda or cuda:N")
        if kind == "cuda" and d.type != "cuda":
            raise AuditError(
                f"loader option image_device={image_device!r} finishes the images on a GPU, but `device` is "
                f"{device!r}: drop it, or run the audit on cuda"
            )
        if getattr(loader, "image_decoder", None) == "nvjpeg" and importlib.util.find_spec("torchvision") is None:
            raise AuditError(
                f"loader option image_device={image_device!r} decodes with nvJPEG (image_decoder=nvjpeg), which needs "
                "torchvision: install it, or add --loader-arg image_decoder=pillow"
            )
    if d.type == "cuda":
        if not torch.cuda.is_available():
            raise AuditError(f"`device` {device!r} but no CUDA device is available")
        if d.index is not None and d.index >= torch.cuda.device_count():
            raise AuditError(f"`device` {device!r} but this host has {torch.cuda.device_count()} CUDA device(s)")


def check_paths(*, real: str | None = None, profile: str | None = None) -> None:
    """AuditError for an input path that carries credentials (``storage.check_url``), used or not."""
    for name, p in (("real", real), ("profile", profile)):
        if p is None:
            continue
        try:
            storage.check_url(p)
        except storage.CredentialsInURL as e:
            raise AuditError(f"`{name}`: {e}") from None


def _head(path: str, n: int = 256) -> bytes:
    got = storage.read_regular_parts(path, 1 << 40, n, 0, "report file")
    return got if isinstance(got, bytes) else got[0]


def is_report_file(path: str) -> bool:
    """Whether ``path`` is a report file an earlier audit wrote (the only kind ``check_out_dir`` lets it replace)."""
    name = os.path.basename(path)
    try:
        if name == "report.json":
            doc = json.loads(storage.read_regular(path, 1 << 30, "report.json"))
            return isinstance(doc, dict) and str(doc.get("schema", "")).startswith("vlmdata.audit/")
        if name == "report.md":
            return _head(path).startswith(_REPORT_MD_HEAD)
        if name == "report.html":
            return _head(path).startswith(_REPORT_HTML_HEAD)
    except (OSError, ValueError, RecursionError):
        return False
    return False


def _is_generated_dataset(path: str) -> bool:
    """An empty folder, or a dataset an earlier audit generated (manifest kind "twin" or "synth"), or one it was
    writing when it was interrupted (no manifest yet; the writer's state ``.vlmdata-build/options.json`` says
    "twin" or "synth": vlmdata's own, replaced by the rerun)."""
    if not os.path.isdir(path) or os.path.islink(path):
        return False
    if not os.listdir(path):
        return True
    for name in (MANIFEST_NAME, os.path.join(STATE_DIR, "options.json")):
        try:
            doc = json.loads(storage.read_regular(os.path.join(path, name), 1 << 30, name))
        except (OSError, ValueError, RecursionError):
            continue
        return isinstance(doc, dict) and doc.get("kind") in ("twin", "synth")
    return False


def _owned(path: str) -> bool:
    return _is_generated_dataset(path) if os.path.basename(path) in (TWIN_DIR, PROFILE_DIR) else is_report_file(path)


def check_out_dir(out: str, *, real: str | None = None, profile: str | None = None) -> None:
    """Before measuring: the audit's output folder (module docstring).

    Args:
        out: the folder (``-o``).
        real: the real dataset path (an input: never written over, never inside a generated folder).
        profile: the profile the synthetic source is sampled from, if any.

    Raises:
        AuditError: naming ```out``` and the reason.
    """
    try:
        check_output(
            out,
            inputs=[real, profile],
            folder=True,
            names=(*REPORT_FILES, TWIN_DIR, PROFILE_DIR),
            own=_owned,
            what="`out`",
        )
        storage.check_writable(out, folder=True, what="`out`")
    except (OutputRefused, storage.StorageError) as e:
        raise AuditError(str(e)) from None


def check_report_dir(out: str, inputs=()) -> None:
    """Before reading the logs: ``audit compare -o`` can write its reports there and replaces only earlier
    ones, never one of ``inputs`` (the two logs)."""
    try:
        check_output(out, inputs=inputs, folder=True, names=REPORT_FILES, own=is_report_file, what="`out`")
        storage.check_writable(out, folder=True, what="`out`")
    except (OutputRefused, storage.StorageError) as e:
        raise AuditError(str(e)) from None
