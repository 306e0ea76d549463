"""Look inside TFRecord files: a streaming reader, stats, verify, extract and a contact sheet.

Why pure Python and not `tf.data.TFRecordDataset`? A report of damage has to say *where*
(record index and byte offset), and TensorFlow only says "corrupted record at 1234" for the
first problem and stops. Reading the framing ourselves also keeps memory flat: one record in
memory at a time, and a length field is checked against what the file still holds before any
buffer is allocated (a flipped bit must not ask for 2**60 bytes). TensorFlow is imported only by
`--verify`, to decode images exactly as training will.

Statistics are kept as counters (value -> count), so medians and histograms cost memory in
proportion to the number of *distinct* sizes and labels, never to the number of records.
"""

from __future__ import annotations

import gzip
import hashlib
from concurrent.futures import ThreadPoolExecutor
import io
import os
import re
import struct
import threading
import warnings
import zlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Iterable, Iterator, Sequence

import google_crc32c
from google.protobuf.message import DecodeError

from img2tfrecord import cstderr
from img2tfrecord.fs import CHECKSUMS, hasher
from img2tfrecord.errors import DataError, UsageError
from img2tfrecord.loader import (
    FOOTER_BYTES,
    HEADER_BYTES,
    LABELS,
    MANIFEST,
    SHARD_RE,
    HeaderError,
    Manifest,
    ShardRef,
    detect_compression,
    mask_crc,
    masked_crc,
    record_length,
    resolve_paths,
)
from img2tfrecord.format.schema import COLORSPACES, DEFAULT_MAX_PIXELS, FEATURE_TYPES, FORMAT_RAW, Example, filename_problem

JSON_FORMAT_VERSION = 1
_CHUNK = 1 << 22  # reads from streams of unknown size grow by at most 4 MiB at a time
# A bigger record is CRC-checked while streaming past it but never held in memory: a gzip file of
# a few MB can hold a record of gigabytes (valid CRC and all), and no image record is this big.
MAX_RECORD_BYTES = 256 << 20
# Images whose header (or image/height x image/width) claims more pixels are not decoded: a 1 MB
# PNG can decode to gigabytes. convert's default --max-pixels; a dataset.json's own value wins.
MAX_PIXELS = DEFAULT_MAX_PIXELS
MAX_PROBLEMS_PER_FILE = 50
OUR_FORMATS = ("JPEG", "PNG", "BMP", FORMAT_RAW)

# --------------------------------------------------------------------------- framing


class FramingError(Exception):
    """The file cannot be read past this point (truncated, corrupt length, broken compression)."""

    def __init__(self, index: int, offset: int, message: str) -> None:
        super().__init__(message)
        self.index = index
        self.offset = offset
        self.message = message


@dataclass(frozen=True, slots=True)
class RawRecord:
    """One framed record. `offset` is where its header starts (in the decompressed stream).

    A record longer than the reader's `max_record_bytes` comes with empty `data` and its length
    in `skipped_length` (its CRC was still checked, so `crc_ok` holds).
    """

    index: int
    offset: int
    data: bytes
    crc_ok: bool
    skipped_length: int | None = None

    @property
    def oversize(self) -> bool:
        return self.skipped_length is not None

    @property
    def length(self) -> int:
        """The data length from the header (not len(data) when oversize)."""
        return len(self.data) if self.skipped_length is None else self.skipped_length


class _CountingReader:
    """The raw file as it is read: counts (and optionally hashes) every byte.

    Sitting under the decompressor, it gives the checksum of the file on disk and the progress in
    on-disk bytes from the same single pass that reads the records.
    """

    def __init__(self, f: BinaryIO, checksum: str | None) -> None:
        self._f = f
        self._hash = hasher(checksum) if checksum else None
        self.pos = 0
        self.mode = "rb"

    def read(self, n: int = -1) -> bytes:
        b = self._f.read(n)
        if self._hash is not None:
            self._hash.update(b)
        self.pos += len(b)
        return b

    def drain(self) -> None:
        """Read to the end, so the hash covers bytes the record reader never needed."""
        while self.read(_CHUNK):
            pass

    def hexdigest(self) -> str | None:
        return self._hash.hexdigest() if self._hash is not None else None


class _ZlibReader:
    """A streaming reader of one zlib stream (TensorFlow's "ZLIB" compression)."""

    def __init__(self, raw: _CountingReader) -> None:
        self._raw = raw
        self._d = zlib.decompressobj()

    def read(self, n: int) -> bytes:
        out: list[bytes] = []
        need = n
        while need > 0 and not self._d.eof:
            chunk = self._d.unconsumed_tail or self._raw.read(1 << 16)
            piece = self._d.decompress(chunk, need)  # with no input left, this drains zlib's own buffer
            if not chunk and not piece:
                raise EOFError("it ends early (file truncated?)")
            out.append(piece)
            need -= len(piece)
        return b"".join(out)


def _read_exact(stream: Any, n: int) -> bytes:
    """Up to `n` bytes (fewer only at the end), read in bounded chunks."""
    if n <= _CHUNK:
        return stream.read(n)
    parts, got = [], 0
    while got < n:
        b = stream.read(min(_CHUNK, n - got))
        if not b:
            break
        parts.append(b)
        got += len(b)
    return b"".join(parts)


def _skip(stream: Any, n: int) -> tuple[int, int]:
    """Read up to `n` bytes in bounded chunks, keeping none: (bytes read, their unmasked CRC-32C)."""
    got = crc = 0
    while got < n:
        b = stream.read(min(_CHUNK, n - got))
        if not b:
            break
        crc = google_crc32c.extend(crc, b)
        got += len(b)
    return got, crc


def _iter_framed(stream: Any, size: int | None, max_record: int = MAX_RECORD_BYTES) -> Iterator[RawRecord]:
    """Records from a (decompressed) stream; `size` is the total when known, to bound lengths.

    Memory: one record of at most `max_record` bytes. Each step consumes at least 16 bytes or
    ends, so any input ends.
    """
    index = offset = 0
    while True:
        head = stream.read(HEADER_BYTES)
        if not head:
            return
        try:
            length = record_length(head, None if size is None else size - offset)
        except HeaderError as e:
            raise FramingError(index, offset, str(e)) from None
        if length > max_record:
            got, crc = _skip(stream, length)
            data = b""
        else:
            data = _read_exact(stream, length)
            got, crc = len(data), None
        if got < length:
            raise FramingError(index, offset, f"truncated record: {got:,} of {length:,} data bytes")
        foot = stream.read(FOOTER_BYTES)
        if len(foot) < FOOTER_BYTES:
            raise FramingError(index, offset, "truncated record: its data CRC is missing")
        (data_crc,) = struct.unpack("<I", foot)
        ok = (masked_crc(data) if crc is None else mask_crc(crc)) == data_crc
        yield RawRecord(index, offset, data, ok, None if crc is None else length)
        offset += HEADER_BYTES + length + FOOTER_BYTES
        index += 1


class TFRecordFile:
    """Stream the records of one TFRecord file, compressed or not, with bounded memory.

    Iterating yields `RawRecord`s (a data-CRC mismatch is flagged on the record, since framing
    stays intact); damage that makes the rest unreadable raises `FramingError`.
    """

    def __init__(
        self, path: str | os.PathLike[str], compression: str = "auto", *, checksum: str | None = None, max_record_bytes: int | None = None
    ) -> None:
        self.path = Path(path)
        self.size = self.path.stat().st_size
        self.compression = detect_compression(self.path) if compression == "auto" else compression
        self.max_record_bytes = MAX_RECORD_BYTES if max_record_bytes is None else max_record_bytes
        self._checksum = checksum
        self._raw: _CountingReader | None = None

    @property
    def bytes_read(self) -> int:
        """On-disk bytes consumed so far (for progress)."""
        return self._raw.pos if self._raw else 0

    @property
    def checksum(self) -> str | None:
        """Hex digest of the whole file (with the algorithm asked for), once iteration has ended."""
        return self._raw.hexdigest() if self._raw else None

    def __iter__(self) -> Iterator[RawRecord]:
        with open(self.path, "rb") as f:
            self._raw = raw = _CountingReader(f, self._checksum)
            stream: Any
            if self.compression == "gzip":
                stream = gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[arg-type]
            elif self.compression == "zlib":
                stream = _ZlibReader(raw)
            else:
                stream = raw
            it = _iter_framed(stream, self.size if self.compression == "none" else None, self.max_record_bytes)
            index = offset = 0
            while True:
                try:
                    rec = next(it)
                except StopIteration:
                    break
                except FramingError:
                    raw.drain()  # the hash still covers the whole file
                    raise
                except (EOFError, OSError, zlib.error) as e:  # gzip.BadGzipFile is an OSError
                    raw.drain()
                    if self.compression == "none":
                        raise FramingError(index, offset, f"read error: {e}") from e
                    raise FramingError(index, offset, f"{self.compression} stream is damaged: {e}") from e
                index, offset = rec.index + 1, rec.offset + HEADER_BYTES + rec.length + FOOTER_BYTES
                yield rec
            raw.drain()


def read_records(path: str | os.PathLike[str], compression: str = "auto", max_record_bytes: int | None = None) -> Iterator[bytes]:
    """The serialized records of a TFRecord file, without TensorFlow; raises DataError on damage.

    A record longer than `max_record_bytes` (default MAX_RECORD_BYTES) is a DataError too:
    raise the limit to read it.
    """
    f = TFRecordFile(path, compression, max_record_bytes=max_record_bytes)
    try:
        for rec in f:
            if not rec.crc_ok:
                raise DataError(f"{path}: record {rec.index} at byte {rec.offset}: data CRC mismatch")
            if rec.oversize:
                raise DataError(f"{path}: record {rec.index} at byte {rec.offset}: {rec.length:,} data bytes, more than max_record_bytes={f.max_record_bytes:,}")
            yield rec.data
    except FramingError as e:
        raise DataError(f"{path}: record {e.index} at byte {e.offset}: {e.message}") from e


# --------------------------------------------------------------------------- one record

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

_IMAGE_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\xff\xd8\xff", "JPEG"),
    (b"\x89PNG\r\n\x1a\n", "PNG"),
    (b"GIF87a", "GIF"),
    (b"GIF89a", "GIF"),
    (b"BM", "BMP"),
)
_EXTENSIONS = {"JPEG": (".jpg", ".jpeg", ".jpe", ".jfif"), "PNG": (".png",), "BMP": (".bmp",), "GIF": (".gif",), "WEBP": (".webp",)}


def sniff_image_format(data: bytes) -> str | None:
    """JPEG/PNG/GIF/BMP/WEBP from the first bytes; None if it is none of them."""
    for magic, name in _IMAGE_MAGIC:
        if data.startswith(magic):
            return name
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "WEBP"
    return None


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

    def row(self) -> dict[str, Any]:
        """The record's line of the report's table."""
        return {
            "index": self.index,
            "offset": self.offset,
            "filename": self.filename,
            "label": self.label,
            "text": self.text,
            "height": self.height,
            "width": self.width,
            "channels": self.channels,
            "format": self.format,
            "encoded_bytes": len(self.image) if self.image is not None else None,
        }


def parse_record(rec: RawRecord) -> RecordInfo:
    """Parse a record as a tf.train.Example and pick out the image facts; raises NotExample."""
    ex = Example()
    try:
        ex.ParseFromString(rec.data)
    except DecodeError as e:
        raise NotExample(f"not a tf.train.Example ({str(e).replace('img2tfrecord_pb.', 'tensorflow.')})") from e  # our private pool's name
    if rec.data and not ex.HasField("features"):
        raise NotExample("not a tf.train.Example (protobuf without a features field)")
    fm = ex.features.feature
    features: dict[str, tuple[str | None, int]] = {}
    for key, feat in fm.items():
        kind = feat.WhichOneof("kind")
        features[key] = (kind[:-5], len(getattr(feat, kind).value)) if kind else (None, 0)

    def first(role: str, kind: str) -> Any:
        for key in ROLE_KEYS[role]:
            got = features.get(key)
            if got and got[0] == kind and got[1]:
                return getattr(fm[key], kind + "_list").value[0]
        return None

    def text(role: str) -> str | None:
        v = first(role, "bytes")
        return v.decode("utf-8", "replace") if v is not None else None

    info = RecordInfo(rec.index, rec.offset, features)
    info.image = first("image", "bytes")
    if info.image is None:  # a foreign key name: take the first bytes feature that is an image
        for key, (kind, n) in sorted(features.items()):
            if kind == "bytes" and n:
                v = fm[key].bytes_list.value[0]
                if sniff_image_format(v[:16]):
                    info.image = v
                    break
    info.format = text("format")
    if info.format is not None:
        info.format = info.format[:64].upper()  # a name; a longer value is garbage, keep it small
        if info.format == "JPG":
            info.format = "JPEG"
    elif info.image is not None:
        info.format = sniff_image_format(info.image[:16])
    info.height, info.width, info.channels = first("height", "int64"), first("width", "int64"), first("channels", "int64")
    info.colorspace = text("colorspace")
    info.label = first("label", "int64")
    info.text = text("text")
    info.filename = text("filename")
    if info.image is not None and info.format != FORMAT_RAW and None in (info.height, info.width, info.channels):
        _fill_size_from_header(info)
    return info


_MODE_CHANNELS = {"1": 1, "L": 1, "I": 1, "I;16": 1, "F": 1, "LA": 2, "La": 2, "RGB": 3, "YCbCr": 3, "RGBA": 4, "CMYK": 4}


def _fill_size_from_header(info: RecordInfo) -> None:
    """Size from the image header (Pillow reads no pixels for this) when the record lacks it."""
    from PIL import Image  # noqa: PLC0415

    try:
        with warnings.catch_warnings(), Image.open(io.BytesIO(info.image or b"")) as im:
            warnings.simplefilter("ignore")  # DecompressionBombWarning: only the header is read
            w, h = im.size
            c = _MODE_CHANNELS.get(im.mode)
            if im.mode == "P":
                c = 4 if "transparency" in im.info else 3
    except Exception:  # noqa: BLE001 - any undecodable header just leaves the size unknown
        return
    info.height = info.height if info.height is not None else h
    info.width = info.width if info.width is not None else w
    info.channels = info.channels if info.channels is not None else c


# --------------------------------------------------------------------------- statistics


def _median(c: Counter) -> int | None:
    """Lower median of a value -> count histogram."""
    n = sum(c.values())
    if not n:
        return None
    target, acc = (n - 1) // 2, 0
    for v in sorted(c):
        acc += c[v]
        if acc > target:
            return v
    return None  # pragma: no cover


def _range(c: Counter) -> dict[str, int] | None:
    return {"min": min(c), "median": _median(c), "max": max(c)} if c else None


@dataclass
class _FeatureStat:
    types: set[str] = field(default_factory=set)
    min_values: int | None = None
    max_values: int | None = None
    records: int = 0

    def add(self, kind: str | None, n: int) -> None:
        self.types.add(kind or "empty")
        self.min_values = n if self.min_values is None else min(self.min_values, n)
        self.max_values = n if self.max_values is None else max(self.max_values, n)
        self.records += 1

    def merge(self, o: "_FeatureStat") -> None:
        self.types |= o.types
        for attr, fn in (("min_values", min), ("max_values", max)):
            a, b = getattr(self, attr), getattr(o, attr)
            setattr(self, attr, b if a is None else a if b is None else fn(a, b))
        self.records += o.records


class Stats:
    """Everything the report says about a set of records, in memory independent of their number."""

    def __init__(self, keep_first: int) -> None:
        self.keep_first = keep_first
        self.records = 0
        self.bytes = 0
        self.compressions: set[str] = set()
        self.examples = 0
        self.non_examples = 0
        self.features: dict[str, _FeatureStat] = {}
        self.labels: Counter[int] = Counter()
        self.label_names: dict[int, str | None] = {}
        self.unlabelled = 0
        self.formats: Counter[str] = Counter()
        self.heights: Counter[int] = Counter()
        self.widths: Counter[int] = Counter()
        self.channels: Counter[int] = Counter()
        self.first: list[dict[str, Any]] = []

    def add(self, info: RecordInfo, label_name: str | None) -> None:
        self.examples += 1
        for key, (kind, n) in info.features.items():
            self.features.setdefault(key, _FeatureStat()).add(kind, n)
        if info.label is None:
            self.unlabelled += 1
        else:
            self.labels[info.label] += 1
            if self.label_names.get(info.label) is None:
                self.label_names[info.label] = label_name
        if info.image is not None:
            fmt = info.format or "unknown"
            if fmt == "PNG" and info.image[24:25] == b"\x10" and info.image[12:16] == b"IHDR":  # IHDR bit depth 16
                fmt = "PNG 16-bit"  # decode with dtype=tf.uint16 to keep the bits
            self.formats[fmt] += 1
        if info.height is not None:
            self.heights[info.height] += 1
        if info.width is not None:
            self.widths[info.width] += 1
        if info.channels is not None:
            self.channels[info.channels] += 1
        if len(self.first) < self.keep_first:
            self.first.append(info.row())

    def merge(self, o: "Stats", path: str | None = None) -> None:
        self.records += o.records
        self.bytes += o.bytes
        self.compressions |= o.compressions
        self.examples += o.examples
        self.non_examples += o.non_examples
        for key, fs in o.features.items():
            self.features.setdefault(key, _FeatureStat()).merge(fs)
        self.labels.update(o.labels)
        for label, name in o.label_names.items():
            if self.label_names.get(label) is None:
                self.label_names[label] = name
        self.unlabelled += o.unlabelled
        self.formats.update(o.formats)
        self.heights.update(o.heights)
        self.widths.update(o.widths)
        self.channels.update(o.channels)
        for row in o.first[: max(0, self.keep_first - len(self.first))]:
            self.first.append({"file": path, **row} if path else row)

    def to_dict(self) -> dict[str, Any]:
        comp = sorted(self.compressions)
        return {
            "records": self.records,
            "bytes": self.bytes,
            "compression": comp[0] if len(comp) == 1 else ("mixed" if comp else None),
            "examples": self.examples,
            "non_examples": self.non_examples,
            "features": {
                k: {"types": sorted(f.types), "min_values": f.min_values, "max_values": f.max_values, "records": f.records}
                for k, f in sorted(self.features.items())
            },
            "labels": [{"label": lab, "name": self.label_names.get(lab), "count": n} for lab, n in sorted(self.labels.items())],
            "unlabelled": self.unlabelled,
            "formats": dict(sorted(self.formats.items(), key=lambda kv: (-kv[1], kv[0]))),
            "height": _range(self.heights),
            "width": _range(self.widths),
            "channels": {str(c): n for c, n in sorted(self.channels.items())},
            "first_records": list(self.first),
        }


# --------------------------------------------------------------------------- problems


@dataclass(frozen=True)
class Problem:
    """One thing wrong, located as precisely as the damage allows."""

    file: str
    record: int | None
    offset: int | None
    message: str
    compressed: bool = False

    def __str__(self) -> str:
        where = self.file
        if self.record is not None:
            where += f": record {self.record}"
        if self.offset is not None:
            where += f" at byte {self.offset:,}" + (" (decompressed)" if self.compressed else "")
        return f"{where}: {self.message}"

    def to_dict(self) -> dict[str, Any]:
        return {"file": self.file, "record": self.record, "offset": self.offset, "message": self.message}


class _Problems:
    """The problems of one file, capped so a wrecked file cannot flood memory or the terminal."""

    def __init__(self, file: str, sink: list[Problem], compressed: bool = False) -> None:
        self.file, self.sink, self.compressed = file, sink, compressed
        self.count = 0
        self.omitted = 0

    def add(self, record: int | None, offset: int | None, message: str) -> None:
        self.count += 1
        if self.count > MAX_PROBLEMS_PER_FILE:
            self.omitted += 1
            return
        self.sink.append(Problem(self.file, record, offset, message, self.compressed))


# --------------------------------------------------------------------------- verification


def _tf_message(e: Exception) -> str:
    """TensorFlow's op error without the `{{function_node ...}}` and `[Op:...]` wrapping."""
    msg = getattr(e, "message", None) or str(e)
    msg = re.sub(r"\{\{[^}]*\}\}\s*", "", msg)
    msg = re.sub(r"\s*\[Op:\w+\].*$", "", msg, flags=re.S)
    return msg.strip().splitlines()[0] if msg.strip() else type(e).__name__


def _header_pixels(data: bytes) -> tuple[int, str] | None:
    """(pixels, " (WxH)" or "") from an image's header, read by Pillow without decoding; None if unreadable."""
    from PIL import Image  # noqa: PLC0415

    try:
        with warnings.catch_warnings(), Image.open(io.BytesIO(data)) as im:
            warnings.simplefilter("ignore")  # DecompressionBombWarning: we judge the size ourselves
            w, h = im.size
            return w * h, f" ({w:,}x{h:,})"
    except Image.DecompressionBombError as e:  # Pillow's own limit, unless convert lifted it
        m = re.search(r"\((\d+) pixels\)", str(e))
        return (int(m[1]) if m else 1 << 62), ""
    except Exception:  # noqa: BLE001 - no readable header: the decoder will say what is wrong
        return None


def image_problem(image: bytes, fmt: str | None, h: int | None, w: int | None, c: int | None, max_pixels: int = MAX_PIXELS) -> str | None:
    """Why an image must not be decoded (impossible RAW shape, too many pixels), from sizes and header only.

    Decoders allocate what the header says before reading pixel data, so a small record can
    claim gigabytes (a PNG of 50000x50000 zeros is 2 MB); this check costs no decoding.
    """
    if fmt == FORMAT_RAW:
        if h is None or w is None or c is None:
            return "RAW image without image/height, image/width and image/channels"
        if not 1 <= c <= 4 or h <= 0 or w <= 0:
            return f"RAW image with impossible shape {h}x{w}x{c}"
        if len(image) != h * w * c:
            return f"RAW image holds {len(image):,} bytes, but {h}x{w}x{c} needs {h * w * c:,}"
        return None
    if h is not None and w is not None and h > 0 and w > 0 and h * w > max_pixels:
        return f"image/height x image/width claim {h:,}x{w:,} = {h * w:,} pixels, more than the {max_pixels:,} decoded; not decoded"
    head = _header_pixels(image)
    if head is not None and head[0] > max_pixels:
        return f"image header claims {head[0]:,} pixels{head[1]}, more than the {max_pixels:,} decoded; not decoded (decompression bomb?)"
    return None


def pixel_limit(man: Manifest | None) -> int:
    """The most pixels an image may have to be decoded: dataset.json's --max-pixels, else MAX_PIXELS."""
    opt = ((man.data.get("options") or {}) if man is not None else {}).get("max_pixels")
    return opt if isinstance(opt, int) and not isinstance(opt, bool) and opt > 0 else MAX_PIXELS


class _ImageChecker:
    """Decodes every image the way training will (TensorFlow) and compares the stored shape."""

    def __init__(self) -> None:
        from img2tfrecord.tf_import import tensorflow  # noqa: PLC0415

        self.tf = tf = tensorflow()
        # A graph function, not eager ops: eager dispatch holds the GIL (threads do not scale),
        # a traced function runs the decode in TensorFlow's own threads (2 threads: ~1.8x).
        self.shape_of = tf.function(
            lambda data: tf.shape(tf.io.decode_image(data, channels=0, expand_animations=False)),
            input_signature=[tf.TensorSpec([], tf.string)], autograph=False,
        )  # fmt: skip

    def check(self, info: RecordInfo, max_pixels: int = MAX_PIXELS) -> Iterator[str]:
        if info.image is None:
            return
        if info.format is None:  # not an image we know (e.g. a serialized tensor): nothing to decode
            return
        declared = (info.height, info.width, info.channels)
        problem = image_problem(info.image, info.format, *declared, max_pixels=max_pixels)
        if problem is not None:
            yield problem
            return
        if info.format == FORMAT_RAW:
            return
        try:
            shape = tuple(int(d) for d in self.shape_of(self.tf.constant(info.image)).numpy())
        except (self.tf.errors.OpError, ValueError) as e:
            yield f"image does not decode: {_tf_message(e)}"
            return
        if info.format in OUR_FORMATS or info.format is None:
            sniffed = sniff_image_format(info.image[:16])
            if info.format and sniffed and sniffed != info.format:
                yield f"image/format says {info.format} but the bytes are {sniffed}"
        if any(d is not None for d in declared) and tuple(d if d is not None else s for d, s in zip(declared, shape)) != shape:
            got = "x".join("?" if d is None else str(d) for d in declared)
            yield f"stored shape {got} but the image decodes to {shape[0]}x{shape[1]}x{shape[2]}"


def _show(value: str, limit: int = 80) -> str:
    """repr() of a value from a record, cut short: messages stay one readable line."""
    r = repr(value[: limit + 1])
    return r if len(value) <= limit else r[:-1] + "..." + r[-1]


def _schema_problems(info: RecordInfo, man: Manifest) -> Iterator[str]:
    """Checks that only hold for our own datasets (README "Record schema")."""
    for key, kind in FEATURE_TYPES.items():
        got = info.features.get(key)
        if got is None:
            yield f"missing feature {key}"
        elif got != (kind, 1):
            yield f"{key}: expected one {kind} value, found {got[1]} of type {got[0] or 'none'}"
    if info.format is not None and info.format not in OUR_FORMATS:
        yield f"image/format {_show(info.format)} is not one of {', '.join(OUR_FORMATS)}"
    if info.channels is not None and info.colorspace is not None and COLORSPACES.get(info.channels) != info.colorspace:
        yield f"image/colorspace {_show(info.colorspace)} does not fit {info.channels} channels"
    if info.label is not None and man.classes:
        name = man.class_name(info.label)
        if name is None:
            yield f"label {info.label} is outside dataset.json's classes (offset {man.label_offset}, {len(man.classes)} classes)"
        elif info.text is not None and info.text != name:
            yield f"label {info.label} is {_show(name)} in dataset.json but image/class/text says {_show(info.text)}"
    if info.filename is not None and (problem := filename_problem(info.filename)):
        yield f"image/filename {_show(info.filename)} {problem}"


_IDX_LINE = 64  # "offset size\n" is at most 42 characters; a longer line is read in pieces


class _IndexChecker:
    """Compares a DALI index (`offset size` per line) with the records as they stream by."""

    def __init__(self, path: Path, problems: _Problems) -> None:
        self.path = path
        self.name = path.name
        self.problems = problems
        self.f = open(path, encoding="ascii", errors="replace")  # noqa: SIM115 - closed in finish()
        self.line = 0
        self.bad = 0

    def record(self, rec: RawRecord) -> None:
        want = f"{rec.offset} {HEADER_BYTES + rec.length + FOOTER_BYTES}"
        got = self.f.readline(_IDX_LINE).strip()
        self.line += 1
        if got != want and self.bad < 3:
            self.bad += 1
            self.problems.add(rec.index, rec.offset, f"{self.name} line {self.line} says {_show(got)}, the record is {want!r}")

    def finish(self) -> None:
        extra = sum(1 for line in iter(lambda: self.f.readline(_IDX_LINE), "") if line.strip())
        self.f.close()
        if extra:
            self.problems.add(None, None, f"{self.name} lists {extra} more records than the shard holds")


# --------------------------------------------------------------------------- extract


_MAX_NAME_BYTES = 200  # file systems allow 255 per component; leave room for "~k" and ".png"


def _clip_name(part: str) -> str:
    """A path component short enough for any file system, kept unique by a hash of the original."""
    raw = part.encode("utf-8", "surrogateescape")
    if len(raw) <= _MAX_NAME_BYTES:
        return part
    stem, dot, ext = part.rpartition(".")
    ext = "." + ext if dot and 0 < len(ext) <= 8 else ""
    digest = hashlib.sha1(raw).hexdigest()[:10]
    keep = raw[: _MAX_NAME_BYTES - len(ext) - 11].decode("utf-8", "ignore")
    return f"{keep}~{digest}{ext}"


def _safe_parts(name: str) -> list[str]:
    """Path components of a record's filename that cannot escape the extraction directory."""
    parts = [p for p in re.split(r"[\\/]+", name) if p not in ("", ".")]
    if any(p == ".." or ":" in p for p in parts):
        parts = parts[-1:] if parts and parts[-1] != ".." else []
    return [_clip_name(p.replace("\x00", "_")) for p in parts]


def _safe_name(name: str) -> str:
    name = re.sub(r"[\\/\x00]", "_", name).strip()
    return _clip_name(name) if name not in ("", ".", "..") else "_"


class Extractor:
    """Writes images back to `DIR/<class>/<image/filename>` so `convert DIR` rebuilds them.

    Original bytes are written unchanged; RAW records become PNG. When the content's format does
    not match the file's extension (re-encoded or RAW records), the right extension is appended
    (`dog/a.jpg` -> `dog/a.jpg.png`), which keeps names unique and recognisable.
    """

    def __init__(self, directory: str | os.PathLike[str], limit: int | None) -> None:
        self.dir = Path(directory)
        if self.dir.exists() and (not self.dir.is_dir() or any(self.dir.iterdir())):
            raise UsageError(f"{self.dir}: exists and is not an empty directory; --extract needs a new or empty one")
        self.limit = limit
        self.written = 0
        self.skipped = 0
        self._used: set[str] = set()
        self.dir.mkdir(parents=True, exist_ok=True)

    @property
    def done(self) -> bool:
        return self.limit is not None and self.written >= self.limit

    def add_classes(self, names: Iterable[str]) -> None:
        """Create every class folder, even empty ones, so labels come out the same on re-convert."""
        for name in names:
            (self.dir / _safe_name(name)).mkdir(exist_ok=True)

    def add(self, info: RecordInfo, class_name: str | None) -> None:
        if self.done:
            return
        if info.image is None:
            self.skipped += 1
            return
        folder = _safe_name(class_name if class_name is not None else f"label_{info.label}" if info.label is not None else "unlabelled")
        parts = _safe_parts(info.filename or "") or [f"record-{info.index:08d}"]
        if len(parts) < 2 or parts[0] != folder:  # files go inside class folders, never beside them
            parts = [folder, *parts]
        data = info.image
        content = sniff_image_format(data[:16])
        if info.format == FORMAT_RAW:
            data = _raw_to_png(info)
            if data is None:
                self.skipped += 1
                return
            content = "PNG"
        ext = _EXTENSIONS[content][0] if content in _EXTENSIONS else ""
        rel = "/".join(parts)
        if ext and not rel.lower().endswith(_EXTENSIONS[content]):
            rel += ext
        try:
            self._write(self._unique(rel), data)
        except OSError:  # a name the file system refuses (too long, a file where a folder must go)
            fallback = self._unique(f"{folder}/record-{info.index:08d}{ext}")
            try:
                self._write(fallback, data)
            except OSError as e:
                raise DataError(f"{self.dir / fallback}: cannot write: {e.strerror or e}") from e
        self.written += 1

    def _unique(self, rel: str) -> str:
        """`rel`, or `rel` with ~1, ~2... before its extension if an earlier image (or folder) took the name."""
        base, k = rel, 1
        while rel.lower() in self._used or (self.dir / rel).exists():
            stem, dot, ext = base.rpartition(".")
            rel = f"{stem}~{k}.{ext}" if dot and "/" not in ext else f"{base}~{k}"
            k += 1
        self._used.add(rel.lower())
        return rel

    def _write(self, rel: str, data: bytes) -> None:
        target = self.dir / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "xb") as f:  # never overwrite, never follow a planted link
            f.write(data)


def _raw_to_png(info: RecordInfo) -> bytes | None:
    """Encode a RAW record's pixels as PNG (lossless, so re-converting gives the same pixels)."""
    import numpy as np  # noqa: PLC0415
    from PIL import Image  # noqa: PLC0415

    h, w, c = info.height, info.width, info.channels
    if image_problem(info.image or b"", FORMAT_RAW, h, w, c) is not None:
        return None
    arr = np.frombuffer(info.image, np.uint8).reshape(h, w, c)  # type: ignore[arg-type]
    mode = {1: "L", 2: "LA", 3: "RGB", 4: "RGBA"}[c]  # type: ignore[index]
    img = Image.fromarray(arr[:, :, 0] if c == 1 else arr, mode)
    buf = io.BytesIO()
    img.save(buf, "PNG")
    return buf.getvalue()


# --------------------------------------------------------------------------- contact sheet

THUMB = 96  # thumbnail cell, pixels square
GAP = 6  # between cells and around the sheet
LABEL_WIDTH = 220  # the text column on the left of each row


def contact_sheet_size(rows: int, per_row: int) -> tuple[int, int]:
    """(width, height) of a contact sheet with `rows` classes and `per_row` thumbnails each."""
    return LABEL_WIDTH + per_row * (THUMB + GAP) + GAP, max(1, rows) * (THUMB + GAP) + GAP


def _thumbnail(info: RecordInfo, max_pixels: int = MAX_PIXELS) -> Any:
    """An RGB thumbnail of the pixels as stored (no EXIF rotation: what TensorFlow decodes).

    Small images are scaled up to the cell, so a 32x32 dataset is as easy to judge as a photo one.
    None when the image must not be decoded (`image_problem`).
    """
    from PIL import Image, ImageOps  # noqa: PLC0415

    if info.format == FORMAT_RAW:
        png = _raw_to_png(info)
        if png is None:
            return None
        img = Image.open(io.BytesIO(png))
    else:
        if image_problem(info.image or b"", info.format, info.height, info.width, info.channels, max_pixels) is not None:
            return None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # DecompressionBombWarning: the size was checked above
            img = Image.open(io.BytesIO(info.image or b""))
        img.draft("RGB", (THUMB, THUMB))  # JPEG: decode at reduced scale
    img.load()
    if img.mode.startswith("I"):  # a 16-bit PNG: Pillow's convert would clip to 255 (white); scale as TensorFlow does
        import numpy as np  # noqa: PLC0415

        img = Image.fromarray((np.asarray(img).astype(np.uint32) >> 8).clip(0, 255).astype(np.uint8), "L")
    if img.mode not in ("L", "LA", "RGB", "RGBA"):
        img = img.convert("RGBA" if img.mode in ("PA", "P") and "transparency" in img.info else "RGB")
    img = ImageOps.contain(img, (THUMB, THUMB))
    if img.mode in ("RGBA", "LA", "PA") or (img.mode == "P" and "transparency" in img.info):
        img = img.convert("RGBA")
        bg = Image.new("RGBA", img.size, (255, 255, 255, 255))
        return Image.alpha_composite(bg, img).convert("RGB")
    return img.convert("RGB")


# A sheet is for eyeballing: past these, labels are left out, so a file inventing a million labels
# cannot make the sheet (4 bytes a pixel in Pillow) or the thumbnails waiting for it take gigabytes.
MAX_SHEET_ROWS = 200
MAX_SHEET_CELLS = 1000  # rows x thumbnails per row: at most ~15 Mpixel, ~60 MB


def _label_text(text: str, limit: int = 60) -> str:
    """One short line of drawable text: control characters (newlines too) become spaces."""
    text = "".join(" " if ch < " " or "\x7f" <= ch <= "\x9f" else ch for ch in text[: limit + 1])
    return text if len(text) <= limit else text[: limit - 1] + "…"


class ContactSheet:
    """A grid of thumbnails, one row per class (label and name), up to `per_class` each.

    Rows and cells are capped (MAX_SHEET_ROWS, MAX_SHEET_CELLS); images of labels past the cap
    are counted in `omitted`.
    """

    def __init__(self, path: str | os.PathLike[str], per_class: int) -> None:
        self.path = Path(path)
        if per_class < 1:
            raise UsageError("--contact-sheet needs -n of at least 1 (thumbnails per class)")
        if self.path.parent and not self.path.parent.is_dir():
            raise UsageError(f"{self.path}: its directory does not exist")
        if self.path.is_dir():
            raise UsageError(f"{self.path}: is a directory; give a .png file name")
        self.per_class = min(per_class, MAX_SHEET_CELLS)
        self.max_rows = max(1, min(MAX_SHEET_ROWS, MAX_SHEET_CELLS // self.per_class))
        self.rows: dict[int | None, list[Any]] = {}
        self.names: dict[int | None, str | None] = {}
        self.broken = 0
        self.omitted = 0  # images whose label did not get a row

    def _row(self, label: int | None) -> list[Any] | None:
        row = self.rows.get(label)
        if row is None and len(self.rows) < self.max_rows:
            row = self.rows[label] = []
        return row

    def add_classes(self, man: Manifest) -> None:
        for i, name in enumerate(man.classes):
            if self._row(i + man.label_offset) is not None:
                self.names.setdefault(i + man.label_offset, name)

    def add(self, info: RecordInfo, class_name: str | None, max_pixels: int = MAX_PIXELS) -> None:
        if info.image is None:
            return
        cells = self._row(info.label)
        if cells is None:
            self.omitted += 1
            return
        if self.names.get(info.label) is None:
            self.names[info.label] = class_name
        if len(cells) >= self.per_class:
            return
        try:
            thumb = _thumbnail(info, max_pixels)
        except Exception:  # noqa: BLE001 - an undecodable image gets a marked cell, not a crash
            thumb = None
        if thumb is None:
            self.broken += 1
        cells.append(thumb)

    def render(self) -> dict[str, Any]:
        from PIL import Image, ImageDraw, ImageFont  # noqa: PLC0415

        keys = sorted((k for k in self.rows if k is not None)) + ([None] if None in self.rows else [])
        width, height = contact_sheet_size(len(keys), self.per_class)
        sheet = Image.new("RGB", (width, height), (255, 255, 255))
        draw = ImageDraw.Draw(sheet)
        try:
            font = ImageFont.load_default(size=14)
        except TypeError:  # Pillow < 10.1
            font = ImageFont.load_default()
        for r, key in enumerate(keys):
            y = GAP + r * (THUMB + GAP)
            name = self.names.get(key)
            label = _label_text(("no label" if key is None else f"{key}") + (f"  {name}" if name else ""))
            while draw.textlength(label, font=font) > LABEL_WIDTH - 2 * GAP and len(label) > 2:
                label = label[:-2] + "…"
            draw.text((GAP, y + THUMB // 2), label, fill=(0, 0, 0), font=font, anchor="lm")
            if not self.rows[key]:
                draw.text((LABEL_WIDTH, y + THUMB // 2), "(no images)", fill=(150, 150, 150), font=font, anchor="lm")
            for i, thumb in enumerate(self.rows[key]):
                x = LABEL_WIDTH + i * (THUMB + GAP)
                draw.rectangle([x, y, x + THUMB - 1, y + THUMB - 1], fill=(235, 235, 235))
                if thumb is None:
                    draw.line([x, y, x + THUMB - 1, y + THUMB - 1], fill=(200, 0, 0), width=3)
                    draw.line([x, y + THUMB - 1, x + THUMB - 1, y], fill=(200, 0, 0), width=3)
                    continue
                sheet.paste(thumb, (x + (THUMB - thumb.width) // 2, y + (THUMB - thumb.height) // 2))
        sheet.save(self.path, "PNG")
        return {
            "file": str(self.path), "width": width, "height": height, "rows": len(keys), "per_row": self.per_class,
            "unreadable": self.broken, "omitted": self.omitted,
        }  # fmt: skip


# --------------------------------------------------------------------------- the whole run


@dataclass
class FileReport:
    """One file's facts and how many problems it had."""

    ref: ShardRef
    stats: Stats
    exists: bool = True
    checksum: dict[str, str] | None = None  # algorithm -> hex digest, when checked
    problems: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"path": str(self.ref.path), "split": self.ref.split, "exists": self.exists, "checksum": self.checksum, "problems": self.problems, **self.stats.to_dict()}


@dataclass
class Report:
    """The result of `inspect`: `to_dict()` is exactly what `--json` prints."""

    paths: list[str]
    files: list[FileReport]
    total: Stats
    problems: list[Problem]
    problems_omitted: int
    verified: bool
    extracted: dict[str, Any] | None = None
    contact_sheet: dict[str, Any] | None = None

    @property
    def problem_count(self) -> int:
        return len(self.problems) + self.problems_omitted

    @property
    def ok(self) -> bool:
        return self.problem_count == 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "format_version": JSON_FORMAT_VERSION,
            "paths": self.paths,
            "verified": self.verified,
            "ok": self.ok,
            "files": [f.to_dict() for f in self.files],
            "total": {"files": len(self.files), **self.total.to_dict()},
            "problems": [p.to_dict() for p in self.problems],
            "problems_omitted": self.problems_omitted,
            "extracted": self.extracted,
            "contact_sheet": self.contact_sheet,
        }


class _Progress:
    """A tqdm bar over on-disk bytes, shown only on a terminal."""

    def __init__(self, total: int, enabled: bool) -> None:
        self.bar = None
        self._lock = threading.Lock()
        if enabled:
            from tqdm import tqdm  # noqa: PLC0415

            self.bar = tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, desc="verify", disable=None, leave=False)

    def update(self, n: int) -> None:
        if self.bar is not None and n:
            with self._lock:  # files are verified on several threads
                self.bar.update(n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


@cstderr.quieted
def inspect(
    paths: Sequence[str | os.PathLike[str]],
    *,
    records: int = 5,
    verify: bool = False,
    split: str | None = None,
    extract_dir: str | os.PathLike[str] | None = None,
    extract_all: bool = False,
    contact_sheet: str | os.PathLike[str] | None = None,
    progress: bool = False,
    workers: int | None = None,
) -> Report:
    """Read every record of the shards PATHs name, once, and report on them.

    `records` is the number of rows in the table, of images to extract (unless `extract_all`)
    and of thumbnails per class. `verify` adds image decoding, schema and manifest checks, on
    `workers` threads (default: one per core), one file each at a time: TensorFlow's decoders
    and the CRC release the GIL, so files verify in parallel; the report is the same whatever the
    number. Usage errors (bad paths, non-empty extract dir) raise before any reading.
    """
    refs = resolve_paths(paths, split)
    extractor = Extractor(extract_dir, None if extract_all else records) if extract_dir is not None else None
    sheet = ContactSheet(contact_sheet, records) if contact_sheet is not None else None
    checker = _ImageChecker() if verify else None
    manifests = {id(r.manifest): r.manifest for r in refs if r.manifest is not None}
    for man in manifests.values():
        if extractor:
            extractor.add_classes(man.classes)
        if sheet:
            sheet.add_classes(man)

    problems: list[Problem] = []
    omitted = 0
    total = Stats(records)
    files: list[FileReport] = []
    # (manifest id, split) -> class name -> records, to compare with dataset.json's class_counts
    class_counts: dict[tuple[int, str], Counter[str]] = {}
    bar = _Progress(sum(r.path.stat().st_size for r in refs if r.path.is_file()), progress and verify)


    def scan(ref: ShardRef) -> tuple[FileReport, _Problems, list[Problem], dict[tuple[int, str], Counter[str]]]:
        sink: list[Problem] = []
        counts: dict[tuple[int, str], Counter[str]] = {}
        fr, probs = _scan_file(ref, records, verify, checker, extractor, sheet, counts, sink, bar)
        return fr, probs, sink, counts

    n = min(workers or os.cpu_count() or 1, len(refs))
    parallel = verify and n > 1 and extractor is None and sheet is None  # extraction and the sheet keep file order
    try:
        with ThreadPoolExecutor(n if parallel else 1, thread_name_prefix="verify") as pool:
            for fr, probs, sink, counts in pool.map(scan, refs):  # in file order: the same report every time
                problems += sink
                for key, c in counts.items():
                    class_counts.setdefault(key, Counter()).update(c)
                omitted += probs.omitted
                files.append(fr)
                total.merge(fr.stats, str(fr.ref.path))
    finally:
        bar.close()
    if verify:
        for man in manifests.values():
            _check_dataset(man, refs, class_counts, split, problems)
    report = Report([os.fspath(p) for p in paths], files, total, problems, omitted, verify)
    if extractor:
        report.extracted = {"dir": str(extractor.dir), "images": extractor.written, "skipped": extractor.skipped}
    if sheet:
        report.contact_sheet = sheet.render()
    return report


def _class_name(info: RecordInfo, man: Manifest | None) -> str | None:
    """The label's class name: dataset.json's classes when known, else image/class/text."""
    if man is not None and info.label is not None:
        name = man.class_name(info.label)
        if name is not None:
            return name
    return info.text


def _scan_file(
    ref: ShardRef,
    keep_first: int,
    verify: bool,
    checker: _ImageChecker | None,
    extractor: Extractor | None,
    sheet: ContactSheet | None,
    class_counts: dict[tuple[int, str], Counter[str]],
    sink: list[Problem],
    bar: _Progress,
) -> tuple[FileReport, _Problems]:
    """One pass over one file feeding stats, checks, extraction and the contact sheet."""
    stats = Stats(keep_first)
    fr = FileReport(ref, stats)
    probs = _Problems(str(ref.path), sink)
    if not ref.path.is_file():
        fr.exists = False
        if ref.path.exists():
            probs.add(None, None, "not a regular file")
        else:
            probs.add(None, None, "listed in dataset.json but missing" if ref.entry is not None else "missing")
        fr.problems = probs.count
        return fr, probs
    man = ref.manifest
    try:
        algorithm = next((a for a in CHECKSUMS if verify and ref.entry and ref.entry.get(a)), None)  # the one dataset.json recorded
        f = TFRecordFile(ref.path, checksum=algorithm)
    except DataError as e:
        probs.add(None, None, str(e).removeprefix(f"{ref.path}: "))
        stats.bytes = ref.path.stat().st_size
        fr.problems = probs.count
        bar.update(stats.bytes)
        return fr, probs
    stats.bytes = f.size
    stats.compressions.add(f.compression)
    probs.compressed = f.compression != "none"
    if man is not None and ref.entry is not None and f.compression != man.compression:
        probs.add(None, None, f"compressed as {f.compression}, but dataset.json says {man.compression}")
    index_file = ref.path.with_name(str((ref.entry or {}).get("index") or ref.path.name + ".idx"))
    idx = _IndexChecker(index_file, probs) if verify and f.compression == "none" and index_file.is_file() else None
    counts = class_counts.setdefault((id(man), ref.split), Counter()) if man is not None and ref.split else None
    max_pixels = pixel_limit(man)
    first_non_example: tuple[int, int, str] | None = None
    last = 0
    try:
        for rec in f:
            stats.records += 1
            bar.update(f.bytes_read - last)
            last = f.bytes_read
            if idx is not None:
                idx.record(rec)
            if not rec.crc_ok:
                probs.add(rec.index, rec.offset, "data CRC mismatch: the record's bytes are corrupt")
                continue
            if rec.oversize:
                probs.add(rec.index, rec.offset, f"{rec.length:,} data bytes, more than the {f.max_record_bytes:,} inspect holds in memory: CRC checked, content not read")
                continue
            try:
                info = parse_record(rec)
            except NotExample as e:
                stats.non_examples += 1
                if first_non_example is None:
                    first_non_example = (rec.index, rec.offset, str(e))
                continue
            name = _class_name(info, man)
            stats.add(info, name)
            if counts is not None and name is not None:
                counts[name] += 1
            if checker is not None:
                for msg in checker.check(info, max_pixels):
                    probs.add(rec.index, rec.offset, msg)
            if verify and man is not None:
                for msg in _schema_problems(info, man):
                    probs.add(rec.index, rec.offset, msg)
            if extractor is not None:
                extractor.add(info, name)
            if sheet is not None:
                sheet.add(info, name, max_pixels)
    except FramingError as e:
        probs.add(e.index, e.offset, e.message)
    if first_non_example is not None:
        i, off, msg = first_non_example
        n = stats.non_examples
        what = "the record is" if stats.records == 1 else f"{n} of {stats.records} records are" if n > 1 else f"1 of {stats.records} records is"
        probs.add(i, off, f"{what} not tf.train.Example {msg.removeprefix('not a tf.train.Example ')}")
    if idx is not None:
        idx.finish()
    bar.update(f.size - last)
    fr.checksum = {algorithm: f.checksum} if algorithm and f.checksum else None
    if verify and ref.entry is not None:
        entry = ref.entry
        if isinstance(entry.get("records"), int) and entry["records"] != stats.records:
            probs.add(None, None, f"holds {stats.records} records, dataset.json says {entry['records']}")
        if isinstance(entry.get("bytes"), int) and entry["bytes"] != f.size:
            probs.add(None, None, f"is {f.size:,} bytes, dataset.json says {entry['bytes']:,}")
        if algorithm and f.checksum and entry[algorithm] != f.checksum:
            probs.add(None, None, f"{algorithm} {f.checksum[:16]}... differs from dataset.json's {str(entry[algorithm])[:16]}...")
    fr.problems = probs.count
    return fr, probs


def _check_dataset(
    man: Manifest,
    refs: list[ShardRef],
    class_counts: dict[tuple[int, str], Counter[str]],
    split: str | None,
    sink: list[Problem],
) -> None:
    """Dataset-level checks, for the splits whose every listed shard was read."""
    read = {r.path.resolve() for r in refs}
    where = str(man.dir / MANIFEST)
    covered = []
    for name, info in man.splits.items():
        if split is not None and name != split:
            continue
        shards = info.get("shards") or []
        if not all((man.dir / s["file"]).resolve() in read for s in shards):
            continue
        covered.append(name)
        listed = sum(int(s.get("records") or 0) for s in shards)
        if isinstance(info.get("records"), int) and info["records"] != listed:
            sink.append(Problem(where, None, None, f"split {name}: {info['records']} records, but its shards list {listed}"))
        want = {k: v for k, v in (info.get("class_counts") or {}).items() if v}
        got = dict(class_counts.get((id(man), name), Counter()))
        if "class_counts" in info and want != got:
            diff = ", ".join(f"{k}: {got.get(k, 0)} (listed {want.get(k, 0)})" for k in sorted(set(want) | set(got)) if want.get(k, 0) != got.get(k, 0))
            sink.append(Problem(where, None, None, f"split {name}: class counts differ from the records: {diff}"))
    if not covered:
        return
    listed_files = {s["file"] for info in man.splits.values() for s in info.get("shards") or []}
    for p in sorted(man.dir.iterdir()):
        m = SHARD_RE.match(p.name)
        if m and p.is_file() and p.name not in listed_files and (split is None or m["split"] == split):
            sink.append(Problem(str(p), None, None, f"a shard file that {MANIFEST} does not list"))
    labels = man.dir / LABELS
    if split is None and labels.is_file() and man.classes:
        try:
            lines = labels.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as e:
            sink.append(Problem(str(labels), None, None, f"unreadable: {e}"))
        else:
            if lines != man.classes:
                sink.append(Problem(str(labels), None, None, f"does not match {MANIFEST}'s classes"))


__all__ = [
    "Extractor",
    "ContactSheet",
    "FramingError",
    "Problem",
    "RawRecord",
    "Report",
    "TFRecordFile",
    "contact_sheet_size",
    "inspect",
    "parse_record",
    "read_records",
    "sniff_image_format",
]
