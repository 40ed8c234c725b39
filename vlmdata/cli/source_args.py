"""The source flags that ``vlmdata build`` and ``vlmdata profile`` share: one flag per ``SourceRequest`` field, and
the request made from them.

``add_source_args(p)`` adds ``--format``, ``--image-root``, ``--prompt``, ``--image-column``, ``--text-column``
and ``--allow-outside-root`` (defaults read from ``SourceRequest()``, the format choices from the registry);
``source_request(args)`` turns the parsed flags into the ``SourceRequest`` that the command's options object
holds, one argument per field (a field without its flag here fails both commands' tests:
``tests/sources/test_request.py``). A new field of ``SourceRequest`` is one flag here and reaches both commands.

Depends on ``sources`` only.
"""

from __future__ import annotations

import argparse

from vlmdata.sources import FORMATS, SourceRequest
from vlmdata.sources.request import names


def add_source_args(p: argparse.ArgumentParser, shards: bool = False) -> None:
    """The source flags on parser ``p`` (``shards``: the command also reads vlmdata datasets, which the flags do
    not concern: their help says so)."""
    d = SourceRequest()  # every default is the library's
    only = "; source inputs only, not a dataset's shards" if shards else ""
    p.add_argument("--format", choices=FORMATS, default=d.format, help=f"source format (default: detected{only})")
    p.add_argument(
        "--image-root",
        default=d.image_root,
        help="folder that relative image paths in JSON sources are relative to (default: the JSON file's folder)",
    )
    p.add_argument("--prompt", default=d.prompt, help=f"user prompt for caption-only sources (default: {d.prompt!r})")
    p.add_argument("--image-column", default=d.image_column, help="HF dataset image column (default: detected)")
    p.add_argument(
        "--text-column", default=d.text_column, help="HF dataset text/conversation column (default: detected)"
    )
    p.add_argument(
        "--allow-outside-root",
        action="store_true",
        default=d.allow_outside_root,
        help="read image paths in records (JSON, HF path cells) that point outside the source root "
        "(the image root / dataset folder); default: skip them as outside_root",
    )


def source_request(args: argparse.Namespace) -> SourceRequest:
    """The ``SourceRequest`` the flags of ``add_source_args`` ask for (checked: a ``SourceOptionsError`` naming
    the field, shown as its flag by ``vlmdata.cli.main``)."""
    return SourceRequest(**{name: getattr(args, name) for name in names()})


__all__ = ["add_source_args", "source_request"]
