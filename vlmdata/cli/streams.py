"""Every byte the command line writes, scrubbed of secrets; a stream that cannot be written is one error.

Output contract (``guarded_streams``, which ``vlmdata.cli.main`` wraps every command in):

- every byte written to stdout or stderr is scrubbed of secrets first (``storage.redact_text``: URL
  credentials, signed-URL parameters, credential environment variables), whoever writes it (a command, a
  wrapper message echoing a raw argument, argparse, a warning, a traceback);
- a stream that cannot be written (``> /dev/full``, a closed pipe) raises ``OutputError`` / ``BrokenPipeError``,
  which ``main`` turns into one line (or silence for a closed pipe) instead of a traceback.
"""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from typing import Iterable, Iterator

from vlmdata.errors import VlmdataError
from vlmdata.storage import redact_text


class OutputError(VlmdataError):
    """stdout or stderr cannot be written (a full disk, a device that refuses writes): one line, exit 2."""


class GuardedStream:
    """A text stream that scrubs every write with ``storage.redact_text`` and reports its own OS errors as
    ``OutputError`` (a closed pipe stays ``BrokenPipeError``); everything else is the wrapped stream's."""

    def __init__(self, stream, name: str):
        self.stream, self.name = stream, name

    def write(self, text: str) -> int:
        try:
            self.stream.write(redact_text(text) if text else text)
        except BrokenPipeError:
            raise
        except OSError as e:
            raise OutputError(f"cannot write to {self.name}: {e.strerror or e}") from None
        return len(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        try:
            self.stream.flush()
        except BrokenPipeError:
            raise
        except OSError as e:
            raise OutputError(f"cannot write to {self.name}: {e.strerror or e}") from None

    def __getattr__(self, name: str):
        return getattr(self.stream, name)


@contextmanager
def guarded_streams() -> Iterator[None]:
    """Run a block with ``sys.stdout`` and ``sys.stderr`` wrapped in ``GuardedStream`` (restored after)."""
    old = sys.stdout, sys.stderr
    sys.stdout = old[0] if isinstance(old[0], GuardedStream) else GuardedStream(old[0], "stdout")
    sys.stderr = old[1] if isinstance(old[1], GuardedStream) else GuardedStream(old[1], "stderr")
    try:
        yield
    finally:
        sys.stdout, sys.stderr = old


def silence(stream) -> None:
    """Point a stream that cannot be written at /dev/null, so its buffered text can be flushed at exit
    (Python would otherwise print 'Exception ignored ...' and exit 120)."""
    try:
        fd = stream.fileno()
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, fd)
        os.close(null)
    except (OSError, ValueError, AttributeError):
        pass
