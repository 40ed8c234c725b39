"""The one error base: every error vlmdata raises because of a user's input or environment derives
from ``VlmdataError``, so a caller (the CLI above all) catches one class and prints one line.

Library messages name the parameter (``seq_length``) and the input (path, shard, key), never a CLI flag:
the CLI maps parameter names to flags (``vlmdata.cli.args``). Subclasses stay where their concept lives
(``BuildError`` in build, ``AuditError`` in audit, ...) and keep their older bases (``ValueError``,
``OSError``) where callers relied on them. Internal signals that never reach a user (a sample that
needs its full bytes, a broken worker) are not ``VlmdataError``.

Depends on nothing.
"""


class VlmdataError(Exception):
    """Base of every user-facing vlmdata error: the message says what input is wrong and how."""


class OptionsError(VlmdataError, ValueError):
    """An options object (``BuildOptions``, ``LoaderOptions``, ...) got an unknown or invalid value;
    the message names the parameter."""
