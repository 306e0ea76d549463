"""Helpers for the inspect/reader tests: real images (Pillow), real shards (TensorFlow's writer),
hand-written dataset.json per docs/schema.md, and a raw framing writer for foreign or damaged files."""

from __future__ import annotations

import hashlib
import io
import json
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from img2tfrecord.format.framing import masked_crc
from img2tfrecord.format.schema import FEATURE_TYPES, serialize_example

CLASS_COLORS = {"cat": (220, 40, 40), "dog": (40, 200, 40), "fox": (40, 60, 220), "owl": (200, 200, 40)}
MODE_CHANNELS = {"L": 1, "LA": 2, "RGB": 3, "RGBA": 4}


def picture(w: int, h: int, color: tuple[int, int, int], mode: str = "RGB") -> Image.Image:
    """A flat class colour with a black top-left quadrant (so orientation is visible)."""
    arr = np.empty((h, w, 3), np.uint8)
    arr[:] = color
    arr[: h // 2, : w // 2] = 0
    im = Image.fromarray(arr, "RGB")
    if mode == "RGBA":
        im = im.convert("RGBA")
        im.putalpha(200)
    elif mode == "LA":
        im = im.convert("LA")
    elif mode != "RGB":
        im = im.convert(mode)
    return im


def encode(im: Image.Image, fmt: str) -> bytes:
    if fmt == "RAW":
        return np.asarray(im).tobytes()
    buf = io.BytesIO()
    im.save(buf, fmt, **({"quality": 95} if fmt == "JPEG" else {}))
    return buf.getvalue()


def pixels(im: Image.Image) -> np.ndarray:
    arr = np.asarray(im)
    return arr[..., None] if arr.ndim == 2 else arr


@dataclass
class Item:
    """One image as the truth the tests compare against."""

    split: str
    cls: str
    filename: str
    fmt: str
    mode: str
    w: int
    h: int
    label: int = 0
    encoded: bytes = b""

    @property
    def channels(self) -> int:
        return MODE_CHANNELS[self.mode]

    @property
    def image(self) -> Image.Image:
        return picture(self.w, self.h, CLASS_COLORS[self.cls], self.mode)

    def serialize(self) -> bytes:
        return serialize_example(
            encoded=self.encoded,
            image_format=self.fmt,
            height=self.h,
            width=self.w,
            channels=self.channels,
            label=self.label,
            text=self.cls.encode(),
            filename=self.filename.encode(),
        )


# (format, mode) pairs whose TensorFlow-decoded channel count is the mode's
VARIANTS = [
    ("JPEG", "RGB"),
    ("PNG", "RGBA"),
    ("PNG", "L"),
    ("BMP", "RGB"),
    ("RAW", "RGB"),
    ("PNG", "LA"),
    ("JPEG", "L"),
    ("RAW", "RGBA"),
]


def make_items(
    classes: list[str],
    per_class: dict[str, int],
    *,
    split: str = "train",
    variants=VARIANTS,
    label_offset: int = 0,
    seed: int = 0,
) -> list[Item]:
    """Images of every class, cycling through formats/modes and a few sizes."""
    items = []
    k = seed
    for ci, cls in enumerate(classes):
        for i in range(per_class.get(cls, 0)):
            fmt, mode = variants[k % len(variants)]
            w, h = 20 + (k * 7) % 23, 16 + (k * 5) % 19
            ext = {"JPEG": "jpg", "PNG": "png", "BMP": "bmp", "RAW": "jpg"}[fmt]
            it = Item(split, cls, f"{cls}/{split}_{i:03d}.{ext}", fmt, mode, w, h, label=ci + label_offset)
            it.encoded = encode(it.image, fmt)
            items.append(it)
            k += 1
    # interleave classes like a shuffled dataset, deterministically
    return sorted(items, key=lambda it: hashlib.md5(it.filename.encode()).hexdigest())


def write_dataset(
    out: Path,
    items: list[Item],
    classes: list[str],
    shards: dict[str, int],
    *,
    compression: str | None = None,
    index: bool = False,
    label_offset: int = 0,
) -> dict[str, Any]:
    """Write shards with tf.io.TFRecordWriter plus labels.txt and dataset.json, as `convert` does."""
    from img2tfrecord.tf_import import tensorflow

    tf = tensorflow()
    out.mkdir(parents=True, exist_ok=True)
    splits: dict[str, Any] = {}
    for split, n in shards.items():
        mine = [it for it in items if it.split == split]
        bounds = [(len(mine) * i // n, len(mine) * (i + 1) // n) for i in range(n)]
        entries = []
        for i, (a, b) in enumerate(bounds):
            name = f"{split}-{i:05d}-of-{n:05d}"
            opts = tf.io.TFRecordOptions(compression_type=(compression or "").upper())
            offset, idx_lines = 0, []
            with tf.io.TFRecordWriter(str(out / name), opts) as w:
                for it in mine[a:b]:
                    rec = it.serialize()
                    w.write(rec)
                    idx_lines.append(f"{offset} {len(rec) + 16}\n")
                    offset += len(rec) + 16
            entry = {
                "file": name,
                "records": b - a,
                "bytes": (out / name).stat().st_size,
                "sha256": hashlib.sha256((out / name).read_bytes()).hexdigest(),
            }
            if index:
                (out / (name + ".idx")).write_text("".join(idx_lines))
                entry["index"] = name + ".idx"
            entries.append(entry)
        counts = {c: sum(1 for it in mine if it.cls == c) for c in classes}
        splits[split] = {"records": len(mine), "class_counts": counts, "shards": entries}
    manifest = {
        "format_version": 1,
        "tool": {"name": "img2tfrecord", "version": "0.1.0", "engine": "local"},
        "classes": classes,
        "label_offset": label_offset,
        "options": {
            "seed": 0,
            "encoding": "keep",
            "compression": compression,
            "index": index,
            "shards": shards,
        },
        "features": dict(FEATURE_TYPES),
        "splits": splits,
        "skipped": [],
        "transcoded": {},
        "formats": {},
        "ignored_files": 0,
    }
    (out / "labels.txt").write_text("".join(c + "\n" for c in classes))
    (out / "dataset.json").write_text(json.dumps(manifest, indent=2))
    return manifest


def frame(data: bytes) -> bytes:
    """One TFRecord frame: length, masked CRC of length, data, masked CRC of data."""
    length = struct.pack("<Q", len(data))
    return length + struct.pack("<I", masked_crc(length)) + data + struct.pack("<I", masked_crc(data))


def write_frames(path: Path, payloads: list[bytes]) -> list[int]:
    """Write records with our own framing; returns each record's byte offset."""
    offsets, pos = [], 0
    with open(path, "wb") as f:
        for p in payloads:
            offsets.append(pos)
            fr = frame(p)
            f.write(fr)
            pos += len(fr)
    return offsets


def example(features: dict[str, tuple[str, list]]) -> bytes:
    """A tf.train.Example from {key: (kind, values)}, kind in bytes/float/int64."""
    from img2tfrecord.format.schema import Example

    ex = Example()
    for key, (kind, values) in features.items():
        lst = getattr(ex.features.feature[key], kind + "_list")
        lst.SetInParent()  # an empty list is still a typed feature
        lst.value.extend(values)
    return ex.SerializeToString(deterministic=True)


def record_offsets(path: Path) -> list[int]:
    """Byte offset of every record of an uncompressed TFRecord file."""
    data = path.read_bytes()
    offs, pos = [], 0
    while pos < len(data):
        offs.append(pos)
        (n,) = struct.unpack_from("<Q", data, pos)
        pos += n + 16
    return offs
