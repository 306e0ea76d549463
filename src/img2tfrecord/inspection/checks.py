"""Problems and the checks that find them: image decoding with TensorFlow (`decode`), our schema, DALI indexes, dataset.json against the files."""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any

from img2tfrecord.format.framing import FOOTER_BYTES, HEADER_BYTES, RawRecord
from img2tfrecord.format.images import image_problem, sniff_image_format
from img2tfrecord.format.layout import Manifest, ShardRef
from img2tfrecord.format.manifest import LABELS_NAME as LABELS
from img2tfrecord.format.manifest import MANIFEST_NAME as MANIFEST
from img2tfrecord.format.naming import SHARD_RE
from img2tfrecord.format.schema import (
    COLORSPACES,
    FORMAT_RAW,
    Declared,
    declared_features,
    filename_problem,
)
from img2tfrecord.fs import AnyPath, children
from img2tfrecord.inspection.decode import Decoded, Decoder, Slot
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


class _Later:
    """A record's image checks that wait for TensorFlow's decode (see `_Problems.add_later`)."""

    __slots__ = ("slot", "record", "offset", "check")

    def __init__(self, slot: Slot, record: int, offset: int, check: Callable[[Decoded], Iterator[str]]) -> None:
        self.slot, self.record, self.offset, self.check = slot, record, offset, check


class _Problems:
    """The problems of one file, capped so a wrecked file cannot flood memory or the terminal.

    Problems are kept in record order even though images decode on other threads: behind a record
    whose decode is pending (`add_later`), later problems wait in `_waiting` until `settle` finds
    it decoded; the queue holds at most the records of the batches in flight.
    """

    def __init__(self, file: str, sink: list[Problem], compressed: bool = False) -> None:
        self.file, self.sink, self.compressed = file, sink, compressed
        self.count = 0
        self.omitted = 0
        self._waiting: deque[_Later | tuple[int | None, int | None, str]] = deque()

    def add(self, record: int | None, offset: int | None, message: str) -> None:
        if self._waiting:
            self._waiting.append((record, offset, message))
        else:
            self._emit(record, offset, message)

    def add_later(self, slot: Slot, record: int, offset: int, check: Callable[[Decoded], Iterator[str]]) -> None:
        """The messages of `check(decoded)`, once `slot`'s image is decoded, in this record's place."""
        self.settle()
        self._waiting.append(_Later(slot, record, offset, check))

    def settle(self, wait: bool = False) -> bool:
        """Pass on the problems that no longer wait (all of them if `wait`); True when none waits."""
        while self._waiting:
            item = self._waiting[0]
            if isinstance(item, _Later):
                if not wait and not item.slot.ready():
                    return False
                for message in item.check(item.slot.result()):
                    self._emit(item.record, item.offset, message)
            else:
                self._emit(*item)
            self._waiting.popleft()
        return True

    def _emit(self, record: int | None, offset: int | None, message: str) -> None:
        self.count += 1
        if self.count > MAX_PROBLEMS_PER_FILE:
            self.omitted += 1
            return
        self.sink.append(Problem(self.file, record, offset, message, self.compressed))


def check_image(info: RecordInfo, max_pixels: int, decoder: Decoder, problems: _Problems) -> None:
    """Check one record's image: sizes and header now, TensorFlow's decode on the decoder's threads."""
    if info.image is None:
        return
    if info.format is None:  # not an image we know (e.g. a serialized tensor): nothing to decode
        return
    declared = (info.height, info.width, info.channels)
    problem = image_problem(info.image, info.format, *declared, max_pixels=max_pixels)
    if problem is not None:
        problems.add(info.index, info.offset, problem)
        return
    if info.format == FORMAT_RAW:
        return
    sniffed = sniff_image_format(info.image[:16]) if info.format in OUR_FORMATS else None
    check = partial(_decoded_problems, info.format, declared, sniffed)
    problems.add_later(decoder.submit(info.image), info.index, info.offset, check)


def _decoded_problems(
    fmt: str, declared: tuple[int | None, int | None, int | None], sniffed: str | None, decoded: Decoded
) -> Iterator[str]:
    """What TensorFlow's decode of an image says against its record: undecodable, wrong format or shape."""
    if decoded == declared and (not sniffed or sniffed == fmt):  # the common case: nothing to say
        return
    if isinstance(decoded, str):
        yield f"image does not decode: {decoded}"
        return
    if sniffed and sniffed != fmt:
        yield f"image/format says {fmt} but the bytes are {sniffed}"
    shape = decoded
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


def _schema_problems(info: RecordInfo, man: Manifest, declared: dict[str, Declared] | None = None) -> Iterator[str]:
    """Checks that only hold for our own datasets (docs/schema.md); `declared`: the manifest's
    `declared_features`, when the caller made them once for all its records."""
    if declared is None:
        declared = declared_features(man.data.get("metadata"))
    for key, d in declared.items():
        got = info.features.get(key)
        if got is None:
            yield f"missing feature {key}"
        elif d.is_list and got[0] not in (d.kind, None):
            yield f"{key}: expected a list of {d.kind} values, found {got[1]} of type {got[0]}"
        elif not d.is_list and got != (d.kind, 1):
            yield f"{key}: expected one {d.kind} value, found {got[1]} of type {got[0] or 'none'}"
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

    def __init__(self, path: AnyPath, problems: _Problems) -> None:
        self.path = path
        self.name = path.name
        self.problems = problems
        self.f = path.open(encoding="ascii", errors="replace")
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
    for p in children(man.folder):  # the folder as read (held open), named as given
        m = SHARD_RE.match(p.name)
        if m and p.is_file() and p.name not in listed_files and (split is None or m["split"] == split):
            sink.append(Problem(str(man.dir / p.name), None, None, f"a shard file that {MANIFEST} does not list"))
    labels, source = man.dir / LABELS, man.at(LABELS)
    if split is None and man.classes and not source.is_file():  # convert always writes it beside dataset.json
        sink.append(Problem(str(labels), None, None, f"missing ({MANIFEST} lists {len(man.classes)} classes)"))
    elif split is None and man.classes:
        try:
            lines = source.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as e:
            sink.append(Problem(str(labels), None, None, f"unreadable: {e}"))
        else:
            if lines != man.classes:
                sink.append(Problem(str(labels), None, None, f"does not match {MANIFEST}'s classes"))
