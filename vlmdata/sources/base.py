"""What every source yields: cheap, picklable descriptions of inputs, in a deterministic order.

Reading image bytes and checking them happens later (in build workers), so enumerating a source
is fast and the same input always gives the same sequence of items.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union

ImageRef = Union[str, bytes]  # a file path, or the encoded bytes themselves


@dataclass
class SourceItem:
    index: int  # position in the source's order; becomes the sample key
    input: str  # where it came from, for humans: "data.jsonl:17", "photos/cat.jpg"
    source_id: str = ""
    conversation: list | None = None  # canonical messages, see schema.py
    images: list[ImageRef] = field(default_factory=list)
    error: tuple[str, str] | None = None  # (reason, detail) found while enumerating
    pending: tuple | None = None  # deferred parsing: (function, args); ``resolve()`` runs it

    def resolve(self) -> "SourceItem":
        """Finish a deferred item (parse its record): done in build workers, in parallel."""
        if self.pending is not None:
            fn, args = self.pending
            self.pending = None
            fn(self, *args)
        return self


class SourceError(Exception):
    """The source as a whole cannot be read (bad path, unknown format, unreadable file)."""
