"""A local Hugging Face dataset: a ``save_to_disk`` folder, or parquet files, with an image column
and a text or conversation column. Nothing is downloaded.

Image cells hold bytes (used as they are) or file paths; a path must stay inside the dataset's folder
unless ``allow_outside_root`` (``base.confine``). A null image cell (``None``, a list holding ``None``,
a ``{"bytes": None, "path": None}`` dict), or a caption row without any image, is a ``missing_image`` skip:
never a text-only "Describe this image." sample. A dataset that cannot be opened, or a row that cannot
be read, is a ``SourceError`` naming the dataset (and the row)."""

from __future__ import annotations

import io
import os
from typing import Any, Iterator, cast

from vlmdata.dataset.schema import safe_label
from vlmdata.sources.base import BadPath, SourceError, SourceItem, confine, walk_files
from vlmdata.sources.text import BadRecord, caption_conversation, from_turns

IMAGE_COLUMNS = ("image", "images", "img", "jpg", "png")
TEXT_COLUMNS = ("conversations", "messages", "caption", "text", "answer", "txt")


def _parquet_files(path: str) -> list[str]:
    """Every ``*.parquet`` below a folder, sorted (``base.walk_files``: no symlink loops, nothing above it)."""
    return sorted(os.path.join(path, r) for r in walk_files(path) if r.endswith(".parquet"))


def is_hf_dir(path: str) -> bool:
    return os.path.isdir(path) and (
        os.path.exists(os.path.join(path, "dataset_info.json"))
        or os.path.exists(os.path.join(path, "dataset_dict.json"))
        or bool(_parquet_files(path))
    )


def _open(path: str):
    import datasets

    datasets.disable_progress_bars()
    if os.path.isfile(path) and path.endswith(".parquet"):
        files = [path]
    elif os.path.exists(os.path.join(path, "dataset_info.json")) or os.path.exists(
        os.path.join(path, "dataset_dict.json")
    ):
        ds = datasets.load_from_disk(path)
        if isinstance(ds, datasets.DatasetDict):
            if "train" not in ds:
                raise SourceError(f"{path}: DatasetDict without a 'train' split (has {list(ds)})")
            ds = ds["train"]
        return ds
    else:
        files = _parquet_files(path)
    if not files:
        raise SourceError(f"{path}: no parquet files and no save_to_disk dataset")
    return datasets.load_dataset("parquet", data_files=files, split="train")


def _image_bytes(value, root: str, allow_outside_root: bool = False) -> list[bytes | str]:
    """Image cell(s) as encoded bytes (or file paths, confined to ``root``) without decoding."""
    values = value if isinstance(value, list) else [value]
    out = []
    for v in values:
        if isinstance(v, dict):
            if v.get("bytes"):
                out.append(bytes(v["bytes"]))
            elif v.get("path"):
                out.append(confine(v["path"], root, allow_outside_root))
            else:
                raise BadPath("missing_image", "image cell is null (neither bytes nor path)")
        elif isinstance(v, (bytes, bytearray)):
            out.append(bytes(v))
        elif isinstance(v, str):
            out.append(confine(v, root, allow_outside_root))
        elif hasattr(v, "save"):  # a PIL image (a decoded column): encode it losslessly
            buf = io.BytesIO()
            v.save(buf, format=v.format or "PNG")
            out.append(buf.getvalue())
        elif v is None:
            raise BadPath("missing_image", "image cell is null")
        else:
            raise BadRecord(f"image cell of type {type(v).__name__}")
    return out


def iter_hf(
    path: str,
    prompt: str,
    image_column: str | None,
    text_column: str | None,
    allow_outside_root: bool = False,
    image_root: str | None = None,
) -> Iterator[SourceItem]:
    import datasets  # heavy: imported only when a Hugging Face source is read

    try:
        ds = _open(path)
    except SourceError:
        raise
    except Exception as e:
        raise SourceError(f"{path}: cannot open as a Hugging Face dataset ({type(e).__name__}: {e})") from None
    cols = ds.column_names
    icol = image_column or next((c for c in IMAGE_COLUMNS if c in cols), None)
    tcol = text_column or next((c for c in TEXT_COLUMNS if c in cols), None)
    for want, got, kind in ((image_column, icol, "image"), (text_column, tcol, "text")):
        if got is None or got not in cols:
            raise SourceError(f"{path}: no {kind} column {want or ''} (columns: {cols}); name it with {kind}_column")
    assert icol is not None and tcol is not None  # checked just above
    # undecoded access: image features give {"bytes", "path"} dicts
    feats = {c: f for c, f in ds.features.items()}
    if isinstance(feats.get(icol), datasets.Image):
        ds = ds.cast_column(icol, datasets.Image(decode=False))
    elif isinstance(feats.get(icol), datasets.Sequence) or isinstance(feats.get(icol), list):
        inner = feats[icol].feature if hasattr(feats[icol], "feature") else feats[icol][0]
        if isinstance(inner, datasets.Image):
            # datasets' FeatureType annotation omits what its own Sequence() returns
            ds = ds.cast_column(icol, datasets.Sequence(datasets.Image(decode=False)))  # pyright: ignore[reportArgumentType]
    idcol = next((c for c in ("id", "key", "__key__") if c in cols), None)
    name = safe_label(os.path.basename(os.path.normpath(path)))
    # relative image paths in the cells: against image_root, else the dataset's own folder
    root = os.path.abspath(image_root or (path if os.path.isdir(path) else os.path.dirname(path)))
    rows = cast("Iterator[dict[str, Any]]", iter(ds))  # an unformatted Dataset yields dict rows
    index = 0
    while True:
        try:
            row = next(rows)
        except StopIteration:
            return
        except Exception as e:  # noqa: BLE001 - arrow/parquet raise many types for a damaged file
            raise SourceError(
                f"{path}: cannot read row {index} ({type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''})"
            ) from None
        item = SourceItem(
            index=index,
            input=f"{name}[{index}]",
            source_id=safe_label(row[idcol], 200) if idcol else f"{name}[{index}]",
        )
        index += 1
        try:
            item.images = _image_bytes(row[icol], root, allow_outside_root)
            text = row[tcol]
            if isinstance(text, list):
                role_key, text_key = (
                    ("from", "value")
                    if text and isinstance(text[0], dict) and "from" in text[0]
                    else ("role", "content")
                )
                item.conversation = from_turns(text, len(item.images), role_key, text_key)
            elif isinstance(text, str) and text.strip():
                if not item.images:
                    raise BadPath("missing_image", f"column {icol} holds no image for this caption")
                item.conversation = caption_conversation(text, prompt, len(item.images))
            elif text is None or isinstance(text, str):
                item.error = ("empty_caption", f"column {tcol} is empty")
            else:  # a number, a mapping, bytes: not a caption (never reported as an empty one)
                item.error = ("bad_record", f"column {tcol} holds {type(text).__name__}, not text or turns")
        except BadPath as e:
            item.error = (e.reason, e.detail)
        except BadRecord as e:
            item.error = ("bad_record", safe_label(e, 300))
        except Exception as e:  # noqa: BLE001 - a PIL cell that cannot be re-encoded
            item.error = ("bad_record", f"image cell unusable ({type(e).__name__}: {safe_label(e, 200)})")
        yield item
