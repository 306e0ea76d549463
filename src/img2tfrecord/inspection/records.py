"""One record as inspect sees it: which keys hold the image, label and shape, whatever tool wrote it."""

from __future__ import annotations

import io
import warnings
from dataclasses import dataclass
from typing import Any

from img2tfrecord.format.framing import RawRecord
from img2tfrecord.format.images import MODE_CHANNELS, sniff_image_format
from img2tfrecord.format.schema import FORMAT_RAW
from img2tfrecord.inspection.boxes import BOX_KEYS, CLASS_TEXT, Box, boxes_of
from img2tfrecord.inspection.wire import WireError, parse_example

OUR_FORMATS = ("JPEG", "PNG", "BMP", FORMAT_RAW)


# Where other tools keep the same facts (Inception/ImageNet tooling uses our keys; TFDS and
# hand-written converters often use the short ones). First match wins.
ROLE_KEYS: dict[str, tuple[str, ...]] = {
    "image": ("image/encoded", "image", "image_raw", "image/raw", "encoded", "img", "jpeg", "png"),
    "format": ("image/format", "format"),
    "height": ("image/height", "height"),
    "width": ("image/width", "width"),
    "channels": ("image/channels", "channels", "image/depth", "depth"),
    "colorspace": ("image/colorspace", "colorspace"),
    "label": ("image/class/label", "label", "image/label", "class", "label_id"),
    "text": ("image/class/text", "image/class/synset", "label_text", "class_name", "text"),
    "filename": ("image/filename", "filename", "file_name", "image/source_id", "path"),
}


class NotExample(Exception):
    """The record is framed correctly but is not a tf.train.Example."""


@dataclass(slots=True)
class RecordInfo:
    """What one Example says about its image, whichever keys its writer used."""

    index: int
    offset: int
    features: dict[str, tuple[str | None, int]]
    image: bytes | None = None
    format: str | None = None  # as stored in image/format, else sniffed from the bytes
    height: int | None = None
    width: int | None = None
    channels: int | None = None
    colorspace: str | None = None
    label: int | None = None
    text: str | None = None
    filename: str | None = None
    more_keys: int = 0  # feature keys past MAX_RECORD_KEYS, not in `features`
    boxes: tuple[str, ...] | None = None  # a detection record's box classes (image/object/class/text); None: none
    objects: tuple[Box, ...] = ()  # its boxes that can be drawn (`boxes.boxes_of`)

    def row(self) -> dict[str, Any]:
        """The record's line of the report's table."""
        return {
            "index": self.index,
            "offset": self.offset,
            "filename": _clip(self.filename),
            "label": self.label,
            "text": _clip(self.text),
            "height": self.height,
            "width": self.width,
            "channels": self.channels,
            "format": self.format,
            "encoded_bytes": len(self.image) if self.image is not None else None,
            **({"boxes": len(self.boxes)} if self.boxes is not None else {}),
        }


# Every key a role can come from: always kept, whatever else a record holds.
ALL_ROLE_KEYS = frozenset(k for keys in ROLE_KEYS.values() for k in keys)

# ...and a detection record's box keys, whose values are collected
_KEPT_KEYS = ALL_ROLE_KEYS | BOX_KEYS

MAX_RECORD_KEYS = 256  # other keys kept per record (in wire order); the rest are counted in `more_keys`

MAX_TEXT = 1000  # characters of a filename or class text shown in a report row


def _clip(text: str | None, limit: int = MAX_TEXT) -> str | None:
    """A value from a record, short enough for a report: the first `limit` characters and "…"."""
    return text if text is None or len(text) <= limit else text[:limit] + "…"


def parse_record(rec: RawRecord) -> RecordInfo:
    """Parse a record as a tf.train.Example and pick out the image facts; raises NotExample.

    The walk is `wire.parse_example`'s: memory is the record plus its kept keys, whatever
    values it holds; of a detection record's box keys the first `wire.MAX_COLLECTED` values each
    (so `boxes` and the counts of boxes per class cover a record's first 1,000 boxes).
    """
    try:
        ex = parse_example(rec.data, _KEPT_KEYS, MAX_RECORD_KEYS, collect=BOX_KEYS)
    except WireError as e:
        raise NotExample(f"not a tf.train.Example ({e})") from None
    if rec.data and not ex.has_features:
        raise NotExample("not a tf.train.Example (protobuf without a features field)")
    fm = ex.features
    features: dict[str, tuple[str | None, int]] = {key: (f.kind, f.count) for key, f in fm.items()}

    def first(role: str, kind: str) -> Any:
        for key in ROLE_KEYS[role]:
            f = fm.get(key)
            if f is not None and f.kind == kind and f.count:
                return bytes(f.first) if isinstance(f.first, memoryview) else f.first
        return None

    def text(role: str) -> str | None:
        v = first(role, "bytes")
        return v.decode("utf-8", "replace") if v is not None else None

    info = RecordInfo(rec.index, rec.offset, features, more_keys=ex.more_keys)
    info.image = first("image", "bytes")
    if info.image is None:  # a foreign key name: take the first bytes feature that is an image
        for key in sorted(fm):
            f = fm[key]
            if (
                f.kind == "bytes"
                and f.count
                and isinstance(f.first, memoryview)
                and sniff_image_format(bytes(f.first[:16]))
            ):
                info.image = bytes(f.first)
                break
    info.format = text("format")
    if info.format is not None:
        info.format = info.format[:64].upper()  # a name; a longer value is garbage, keep it small
        if info.format == "JPG":
            info.format = "JPEG"
    elif info.image is not None:
        info.format = sniff_image_format(info.image[:16])
    info.height, info.width, info.channels = (
        first("height", "int64"),
        first("width", "int64"),
        first("channels", "int64"),
    )
    info.colorspace = text("colorspace")
    info.label = first("label", "int64")
    info.text = text("text")
    info.filename = text("filename")
    if CLASS_TEXT in fm and fm[CLASS_TEXT].kind in ("bytes", None):  # a detection record: its boxes' classes
        values = fm[CLASS_TEXT].values or ()
        info.boxes = tuple(bytes(v).decode("utf-8", "replace") for v in values if isinstance(v, memoryview))
    info.objects = boxes_of(fm) if not BOX_KEYS.isdisjoint(fm) else ()  # most records have no boxes
    if info.image is not None and info.format != FORMAT_RAW and None in (info.height, info.width, info.channels):
        _fill_size_from_header(info)
    return info


def _fill_size_from_header(info: RecordInfo) -> None:
    """Size from the image header (Pillow reads no pixels for this) when the record lacks it."""
    from PIL import Image

    try:
        with warnings.catch_warnings(), Image.open(io.BytesIO(info.image or b"")) as im:
            warnings.simplefilter("ignore")  # DecompressionBombWarning: only the header is read
            w, h = im.size
            c = MODE_CHANNELS.get(im.mode)
            if im.mode == "P":
                c = 4 if "transparency" in im.info else 3
    except Exception:
        return
    info.height = info.height if info.height is not None else h
    info.width = info.width if info.width is not None else w
    info.channels = info.channels if info.channels is not None else c
