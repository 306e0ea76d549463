"""Problems and the checks that find them: image decoding with TensorFlow, our schema, DALI indexes, dataset.json against the files."""

from __future__ import annotations

import io
import re
import warnings
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator
from img2tfrecord.format.framing import FOOTER_BYTES, HEADER_BYTES
from img2tfrecord.loader import LABELS, MANIFEST
from img2tfrecord.format.naming import SHARD_RE
from img2tfrecord.format.layout import Manifest, ShardRef
from img2tfrecord.format.schema import COLORSPACES, DEFAULT_MAX_PIXELS, FEATURE_TYPES, FORMAT_RAW, filename_problem
from img2tfrecord.inspection.records import OUR_FORMATS, RecordInfo
from img2tfrecord.format.framing import RawRecord
from img2tfrecord.format.images import sniff_image_format


# Images whose header (or image/height x image/width) claims more pixels are not decoded: a 1 MB
# PNG can decode to gigabytes. convert's default --max-pixels; a dataset.json's own value wins.
MAX_PIXELS = DEFAULT_MAX_PIXELS


MAX_PROBLEMS_PER_FILE = 50


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
