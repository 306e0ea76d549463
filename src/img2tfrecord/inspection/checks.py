"""Problems and the checks that find them: image decoding with TensorFlow, our schema, DALI indexes, dataset.json against the files."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from img2tfrecord.format.framing import FOOTER_BYTES, HEADER_BYTES, RawRecord
from img2tfrecord.format.images import MAX_PIXELS, image_problem, sniff_image_format, tf_error_message
from img2tfrecord.format.layout import Manifest, ShardRef
from img2tfrecord.format.manifest import LABELS_NAME as LABELS
from img2tfrecord.format.manifest import MANIFEST_NAME as MANIFEST
from img2tfrecord.format.naming import SHARD_RE
from img2tfrecord.format.schema import (
    COLORSPACES,
    FEATURE_TYPES,
    FORMAT_RAW,
    filename_problem,
)
from img2tfrecord.inspection.records import OUR_FORMATS, RecordInfo

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


class _ImageChecker:
    """Decodes every image the way training will (TensorFlow) and compares the stored shape."""

    def __init__(self) -> None:
        from img2tfrecord.tf_import import tensorflow

        self.tf = tf = tensorflow()
        # A graph function, not eager ops: eager dispatch holds the GIL (2 threads: 565 -> 600
        # img/s in a micro test); a traced decode lets them overlap (460 -> 700-1,087 img/s).
        self.shape_of = tf.function(
            lambda data: tf.shape(tf.io.decode_image(data, channels=0, expand_animations=False)),
            input_signature=[tf.TensorSpec([], tf.string)],
            autograph=False,
        )

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
            yield f"image does not decode: {tf_error_message(e)}"
            return
        if info.format in OUR_FORMATS or info.format is None:
            sniffed = sniff_image_format(info.image[:16])
            if info.format and sniffed and sniffed != info.format:
                yield f"image/format says {info.format} but the bytes are {sniffed}"
        if (
            any(d is not None for d in declared)
            and tuple(d if d is not None else s for d, s in zip(declared, shape)) != shape
        ):
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
        self.f = open(path, encoding="ascii", errors="replace")
        self.line = 0
        self.bad = 0

    def record(self, rec: RawRecord) -> None:
        want = f"{rec.offset} {HEADER_BYTES + rec.length + FOOTER_BYTES}"
        got = self.f.readline(_IDX_LINE).strip()
        self.line += 1
        if got != want and self.bad < 3:
            self.bad += 1
            self.problems.add(
                rec.index, rec.offset, f"{self.name} line {self.line} says {_show(got)}, the record is {want!r}"
            )

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
            sink.append(
                Problem(where, None, None, f"split {name}: {info['records']} records, but its shards list {listed}")
            )
        want = {k: v for k, v in (info.get("class_counts") or {}).items() if v}
        got = dict(class_counts.get((id(man), name), Counter()))
        if "class_counts" in info and want != got:
            diff = ", ".join(
                f"{k}: {got.get(k, 0)} (listed {want.get(k, 0)})"
                for k in sorted(set(want) | set(got))
                if want.get(k, 0) != got.get(k, 0)
            )
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
