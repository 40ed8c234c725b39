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


class BridgeConfigError(VlmdataError):
    """A Megatron Bridge config YAML (``vlmdata.audit.settings.bridge_config``) cannot be used: the file is missing, not a
    regular file, too large, not YAML, not a ``ConfigContainer`` mapping, or a field has the wrong type; the message
    names the file and, where there is one, the field's YAML path.

    Attributes:
        path: the file as given.
        field: the dotted YAML path of the offending field (``train.micro_batch_size``), or None.
    """

    def __init__(self, message: str, path: str = "", field: str | None = None):
        super().__init__(message)
        self.path = path
        self.field = field
