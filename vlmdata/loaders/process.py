"""One sample -> ``Processed``: pixel rows (or shapes, or deferred images), grids, token ids, labels, loss mask.

``SampleProcessor`` is what a loader's workers run per sample (picklable); a sample it cannot use raises
``BadSampleError`` with the reason the loader counts (``undecodable_image``, ``bad_conversation``,
``image_truncated``, ``too_long``).
"""

from __future__ import annotations

import numpy as np

from vlmdata.dataset.reader import BadSampleError
from vlmdata.dataset.schema import Sample
from vlmdata.errors import OptionsError
from vlmdata.loaders.collate import Processed
from vlmdata.loaders.device_images import defer_image
from vlmdata.loaders.options import IMAGE_MODES
from vlmdata.loaders.pixel_rows import preprocess_rows
from vlmdata.qwen.spec import get_spec
from vlmdata.qwen.tokenize import ChatTokenizer
from vlmdata.qwen.vision import preprocess_shape

PROCESSOR_MODES = (*IMAGE_MODES, "device")  # + "device": decode left to the training device (image_device)


def without_images(conversation: list[dict]) -> list[dict]:
    """The conversation with its image parts removed (a turn left empty keeps one empty text part)."""
    out = []
    for turn in conversation:
        content = turn.get("content") if isinstance(turn, dict) else None
        if isinstance(content, list):
            parts = [p for p in content if not (isinstance(p, dict) and p.get("type") == "image")]
            turn = {**turn, "content": parts or [{"type": "text", "text": ""}]}
        out.append(turn)
    return out


class SampleProcessor:
    """Sample -> Processed (pixel rows, grids, token ids, labels, loss mask). Picklable.

    ``images``: "decode" (the real path), "shapes" (no decode: grids from the image headers, zero pixel
    rows; the batches' shapes and token ids equal the decoded ones), "drop" (the image-free view: image
    parts removed from the conversation, no pixels) or "device" (grids planned here, decode and
    preprocessing left to the training device: ``vlmdata.loaders.device_images``).

    ``seq_length`` (every mode but "shapes", whose planner checks lengths itself): a row longer than it is
    truncated to it by the collate, as Bridge's; here each such sample is checked first (``fit``): one whose
    truncation would cut an image's visual tokens (the batch would carry fewer image-pad tokens than image
    features: Bridge truncates the same way and its model then gets mismatched features) or remove every
    supervised token, or any over-long row when ``packing`` (a packed row cannot be truncated), is a bad
    sample (reasons ``image_truncated``, ``too_long``: counted and named by the loader); a text-only
    truncation is kept and counted (``Processed.truncated``, the loader's ``stats.truncated_samples``)."""

    def __init__(
        self,
        chat: ChatTokenizer,
        model: str,
        min_pixels: int,
        max_pixels: int,
        resize: str = "bridge",
        exact_images: bool = False,
        images: str = "decode",
        image_decoder: str = "nvjpeg",
        *,
        seq_length: int | None = None,
        packing: bool = False,
    ):
        if images not in PROCESSOR_MODES:
            raise OptionsError(f"`images` must be one of {IMAGE_MODES}, got {images!r}")
        self.seq_length = None if images == "shapes" else seq_length
        self.packing = packing
        self.chat, self.spec = chat, get_spec(model)
        self.min_pixels, self.max_pixels = min_pixels, max_pixels
        self.resize, self.exact_images, self.images = resize, exact_images, images
        self.image_decoder = image_decoder  # with images="device": who decodes a JPEG (device_images)

    def __call__(self, sample: Sample) -> Processed:
        pvs, grids, deferred = [], [], []
        conversation = sample.conversation
        if self.images == "drop":
            conversation = without_images(conversation)
        else:
            for i, img in enumerate(sample.images):
                try:
                    if self.images == "shapes":
                        pv, g = preprocess_shape(img, self.spec, self.min_pixels, self.max_pixels, self.resize)
                    elif self.images == "device":
                        pv, g, item = defer_image(
                            img, self.spec, self.min_pixels, self.max_pixels, self.resize, self.image_decoder
                        )
                        deferred.append(item)
                    else:  # patchified later, straight into the batch buffer (pixel_rows)
                        pv, g = preprocess_rows(
                            img, self.spec, self.min_pixels, self.max_pixels, self.resize, self.exact_images
                        )
                except Exception as e:  # PIL raises OSError, SyntaxError, ValueError... for bad bytes
                    raise BadSampleError(
                        f"image {i} undecodable: {type(e).__name__}: {e}", key=sample.key, reason="undecodable_image"
                    ) from e
                pvs.append(pv)
                grids.append(g)
        try:
            row = self.chat.tokenize(conversation, [self.chat.image_tokens(g) for g in grids])
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise BadSampleError(f"conversation unusable: {e}", key=sample.key, reason="bad_conversation") from e
        cut = self.fit(row, sample.key) if self.seq_length is not None and len(row) > self.seq_length else 0
        return Processed(sample.key, row, pvs, grids, deferred, truncated=cut)

    def fit(self, row, key: str) -> int:
        """Tokens a row longer than ``seq_length`` loses to truncation; BadSampleError when that is not a sample
        Bridge's step can train on (class docstring)."""
        limit = self.seq_length
        assert limit is not None
        n = len(row)
        if self.packing:
            raise BadSampleError(
                f"needs {n} tokens, more than seq_length={limit}: a packed row cannot be truncated (Bridge raises "
                "here); raise seq_length",
                key=key,
                reason="too_long",
            )
        pads = np.flatnonzero(np.asarray(row.mm_token_type_ids) == 1)
        if pads.size and pads[-1] >= limit:
            starts = np.flatnonzero(np.diff(pads, prepend=-2) != 1)  # one run of image-pad tokens per image
            ends = np.append(starts[1:], pads.size)
            for i, (a, b) in enumerate(zip(starts, ends)):
                if pads[b - 1] >= limit:
                    kept = int(np.sum(pads[a:b] < limit))
                    raise BadSampleError(
                        f"needs {n} tokens; truncating it to seq_length={limit} keeps {kept} of the {b - a} visual "
                        f"tokens of image {i} (Bridge truncates the same way, and its model then gets fewer image "
                        "tokens than image features); skipped: raise seq_length",
                        key=key,
                        reason="image_truncated",
                    )
        mask = np.asarray(row.loss_mask)
        if mask.any() and not mask[:limit].any():
            raise BadSampleError(
                f"needs {n} tokens; truncating it to seq_length={limit} removes every supervised token (Bridge "
                "raises here); skipped: raise seq_length",
                key=key,
                reason="too_long",
            )
        return n - limit
