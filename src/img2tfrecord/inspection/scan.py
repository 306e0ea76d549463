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

import os
import sys
from collections import Counter, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from img2tfrecord import cstderr, fs
from img2tfrecord.errors import DataError, UsageError, option
from img2tfrecord.format import framing, pinning
from img2tfrecord.format.catalog import Catalog
from img2tfrecord.format.framing import FramingError, TFRecordFile
from img2tfrecord.format.layout import Manifest, ShardRef, pixel_limit, resolve_paths
from img2tfrecord.format.schema import declared_features
from img2tfrecord.format.split_groups import group_pattern
from img2tfrecord.fs import CHECKSUMS
from img2tfrecord.inspection import dataset_lists, outputs
from img2tfrecord.inspection.catalog_check import Loaded, check_catalog, load_catalog
from img2tfrecord.inspection.checks import (
    Problem,
    _check_dataset,
    _IndexChecker,
    _Problems,
    _schema_problems,
    check_image,
)
from img2tfrecord.inspection.decode import Decoder
from img2tfrecord.inspection.extract import Extractor
from img2tfrecord.inspection.records import NotExample, RecordInfo, parse_record
from img2tfrecord.inspection.seg_classes import segmentation_classes
from img2tfrecord.inspection.sheet import ContactSheet
from img2tfrecord.inspection.stats import Stats

JSON_FORMAT_VERSION = 1

# Without --verify or --extract, a record longer than this is CRC-checked while streaming past it
# and counted as not read, not held: a report needs no record of tens of megabytes, and a gzip
# file of a few hundred kilobytes can hold one. --verify and --extract read records up to
# framing.MAX_RECORD_BYTES, since every image must be decoded or written.
REPORT_RECORD_BYTES = 64_000_000

# --------------------------------------------------------------------------- framing


# --------------------------------------------------------------------------- one record


# --------------------------------------------------------------------------- statistics


# --------------------------------------------------------------------------- problems


# --------------------------------------------------------------------------- verification


# --------------------------------------------------------------------------- extract


# --------------------------------------------------------------------------- contact sheet


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
        return {
            "path": str(self.ref.path),
            "split": self.ref.split,
            "exists": self.exists,
            "checksum": self.checksum,
            "problems": self.problems,
            **self.stats.to_dict(),
        }


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
    # dataset.json's lineage of each dataset read ({dir, version, parent, created}), so a training
    # job can log which version it read
    lineage: list[dict[str, Any]] = field(default_factory=list)
    split_groups: dict[str, Any] | None = None  # --split-group: the groups that cross splits
    exported: dict[str, Any] | None = None  # --export-list: the file written
    segmentation: list[dict[str, Any]] = field(default_factory=list)  # seg_classes of each mask dataset

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
            "lineage": self.lineage,
            # only when asked for (--split-group, --export-list): the report's keys are otherwise as before
            **({"split_groups": self.split_groups} if self.split_groups is not None else {}),
            **({"exported": self.exported} if self.exported is not None else {}),
            **({"segmentation": self.segmentation} if self.segmentation else {}),
        }


class _Progress:
    """A tqdm bar over on-disk bytes, shown only on a terminal."""

    def __init__(self, total: int, enabled: bool) -> None:
        self.bar = None
        if enabled:
            from tqdm import tqdm

            self.bar = tqdm(
                total=total, unit="B", unit_scale=True, unit_divisor=1000, desc="verify", disable=None, leave=False
            )

    @staticmethod
    def starting(decoder: Decoder) -> None:
        """TensorFlow's start-up (~5 s) as its own step, on the line the bar then draws over: the
        import used to happen inside the first batch, the bar sitting frozen meanwhile."""
        sys.stderr.write("verify: starting TensorFlow (a few seconds, once)...")
        sys.stderr.flush()
        decoder.start()

    def update(self, n: int) -> None:
        if self.bar is not None and n:  # only the reading thread updates it
            self.bar.update(n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


class _Feeds(NamedTuple):
    """What every record of every file feeds besides its file's stats: one inspect() run's, built
    once and handed to each file whole."""

    keep_first: int  # the table's rows (Stats)
    verify: bool
    decoder: Decoder | None
    extractor: Extractor | None
    sheet: ContactSheet | None
    bar: _Progress
    read_limit: int  # the longest record read whole (_read_limit)


class _Read(NamedTuple):
    """A file read to its end, whose problems may still wait for its images to decode."""

    report: FileReport
    probs: _Problems
    sink: list[Problem]
    counts: dict[tuple[int, str], Counter[str]]


@dataclass
class _Tally:
    """The files read so far, added in file order once settled, so the report is the same
    whatever the decoding threads' timing."""

    total: Stats
    files: list[FileReport] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    omitted: int = 0
    # (manifest id, split) -> class name -> records, to compare with dataset.json's class_counts
    class_counts: dict[tuple[int, str], Counter[str]] = field(default_factory=dict)

    def add(self, read: _Read) -> None:
        fr, probs = read.report, read.probs
        fr.problems = probs.count
        self.problems.extend(read.sink)
        for key, c in read.counts.items():
            self.class_counts.setdefault(key, Counter()).update(c)
        self.omitted += probs.omitted
        self.files.append(fr)
        self.total.merge(fr.stats, str(fr.ref.path))


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
    split_group: str | None = None,
    export_list: str | os.PathLike[str] | None = None,
    force: bool = False,
) -> Report:
    """Read every record of the shards PATHs name, once, and report on them.

    `records` is the number of rows in the table, of images to extract (unless `extract_all`)
    and of thumbnails per class. `verify` adds image decoding, schema and manifest checks, on
    `workers` threads (default: one per core), one file each at a time: TensorFlow's decoders
    and the CRC release the GIL, so files verify in parallel; the report is the same whatever the
    number. Usage errors (bad paths, non-empty extract dir) raise before any reading, as does an
    extract dir or a contact sheet inside a dataset folder or over a file they must not replace
    (inspection.outputs; `force`: the sheet may replace a picture img2tfrecord did not write).
    `split_group` and `export_list` read the one dataset folder's catalog (inspection.dataset_lists).
    """
    if force and contact_sheet is None:
        raise UsageError(f"{option('force')} only goes with {option('contact_sheet')}")
    for p in paths:  # a bucket that does not answer: one line (exit 1), before any reading
        fs.check_remote(os.fspath(p), "dataset")
    refs = resolve_paths(paths, split, pinning.open_folder)  # each dataset folder held: one version read
    manifests = {id(r.manifest): r.manifest for r in refs if r.manifest is not None}
    read = [*(m.dir for m in manifests.values()), *(p for p in paths if os.path.isdir(p))]  # no output in them
    export_to = None  # --export-list's file, checked before any reading (a link: the file it names)
    if export_list is not None and not fs.is_remote(os.fspath(export_list)):
        export_to = outputs.check_file(export_list, outputs.FILE_LIST, False, read)
    listed = _catalog_of(refs, split_group, export_list)
    by_split = len({r.split for r in refs}) > 1  # extract into SPLIT/CLASS/ so the splits stay apart
    extractor = (
        Extractor(extract_dir, None if extract_all else records, by_split, read) if extract_dir is not None else None
    )
    sheet = ContactSheet(contact_sheet, records, force, read) if contact_sheet is not None else None
    if workers is not None and workers < 1:
        raise UsageError(f"bad {option('workers', workers)}: must be >= 1")
    decoder = Decoder(workers or os.cpu_count() or 1) if verify else None
    catalogs = {k: load_catalog(m) for k, m in manifests.items()} if verify else {}
    for man in manifests.values():
        if extractor:
            for sp in dict.fromkeys(r.split for r in refs if r.manifest is man):
                extractor.add_classes(man.classes, sp)
        if sheet:
            sheet.add_classes(man)

    tally = _read_all(refs, records, verify, decoder, extractor, sheet, catalogs, progress)
    if verify:
        for key, man in manifests.items():
            _check_dataset(man, refs, tally.class_counts, split, tally.problems)
            if split is None:
                check_catalog(catalogs[key], tally.problems)
    report = Report([os.fspath(p) for p in paths], tally.files, tally.total, tally.problems, tally.omitted, verify)
    report.lineage = [
        {"dir": str(m.dir), **{k: m.data.get(k) for k in ("version", "parent", "created")}}
        for m in manifests.values()
        if "version" in m.data
    ]
    report.segmentation = [c for m in manifests.values() if (c := segmentation_classes(m))]
    if extractor:
        report.extracted = {
            "dir": str(extractor.dir),
            "images": extractor.written,
            "skipped": extractor.skipped,
            "by_split": extractor.by_split,
            "renamed": extractor.renamed,
        }
    if sheet:
        report.contact_sheet = sheet.render()
    if listed is not None:
        man, cat = listed
        if split_group is not None:
            report.split_groups = dataset_lists.crossing_groups(cat, split_group)
        if export_list is not None:
            report.exported = dataset_lists.export_list(cat, man, export_list, export_to)
    return report


def _read_all(
    refs: list[ShardRef],
    records: int,
    verify: bool,
    decoder: Decoder | None,
    extractor: Extractor | None,
    sheet: ContactSheet | None,
    catalogs: Mapping[int, Loaded | None],
    progress: bool,
) -> _Tally:
    """Every file, read one after the other on this thread; with --verify their images decode on the
    decoder's threads meanwhile, and a file's report is complete once its last image is decoded.
    The decoder is closed here, whatever happens."""
    tally = _Tally(Stats(records))
    if decoder is not None and progress:
        _Progress.starting(decoder)
    bar = _Progress(sum(r.source.stat().st_size for r in refs if r.source.is_file()), progress and verify)
    feeds = _Feeds(records, verify, decoder, extractor, sheet, bar, _read_limit(verify, extractor))
    read: deque[_Read] = deque()

    def complete(wait: bool) -> None:
        while read and read[0].probs.settle(wait):  # in file order: the same report every time
            tally.add(read.popleft())

    try:
        for ref in refs:
            sink: list[Problem] = []
            counts: dict[tuple[int, str], Counter[str]] = {}
            loaded = catalogs.get(id(ref.manifest)) if ref.entry is not None else None
            fr, probs = _scan_file(ref, feeds, counts, sink, loaded)
            read.append(_Read(fr, probs, sink, counts))
            complete(wait=False)
        if decoder is not None:
            decoder.flush()
        complete(wait=True)
    finally:
        if decoder is not None:
            decoder.close()
        bar.close()
    return tally


def _catalog_of(
    refs: list[ShardRef], split_group: str | None, export_list: str | os.PathLike[str] | None
) -> tuple[Manifest, Catalog] | None:
    """The one dataset's manifest and catalog, for --split-group and --export-list (UsageError
    before any reading when PATH is not one dataset folder, or the pattern is no regular expression)."""
    if split_group is None and export_list is None:
        return None
    what = option("split_group") if split_group is not None else option("export_list")
    group_pattern(split_group)
    mans = {id(r.manifest): r.manifest for r in refs}
    man = next(iter(mans.values())) if len(mans) == 1 else None
    cat = dataset_lists.dataset_catalog(man, what)  # UsageError unless one dataset folder
    assert man is not None
    return man, cat


def _read_limit(verify: bool, extractor: Extractor | None) -> int:
    """The longest record read whole (see REPORT_RECORD_BYTES)."""
    return framing.MAX_RECORD_BYTES if verify or extractor else min(REPORT_RECORD_BYTES, framing.MAX_RECORD_BYTES)


def _class_name(info: RecordInfo, man: Manifest | None) -> str | None:
    """The label's class name: dataset.json's classes when known, else image/class/text."""
    if man is not None and info.label is not None:
        name = man.class_name(info.label)
        if name is not None:
            return name
    if info.boxes == () and info.label is None and man is not None and man.classes:
        if (man.data.get("metadata") or {}).get("detection"):  # an image without boxes counts as the first class
            return man.classes[0]  # (conversion.plan.detection), as dataset.json's class_counts count it
    return info.text


def _unboxed_as_first_class(info: RecordInfo, man: Manifest | None) -> RecordInfo:
    """A detection image without boxes (no class list) in the first class's row of the contact sheet,
    where dataset.json's class_counts and the report put it, not in a row of its own."""
    if info.boxes == () and info.label is None and man is not None and man.classes:
        if (man.data.get("metadata") or {}).get("detection"):
            return replace(info, label=man.label_offset)
    return info


def _scan_file(
    ref: ShardRef,
    feeds: _Feeds,
    class_counts: dict[tuple[int, str], Counter[str]],
    sink: list[Problem],
    loaded: Loaded | None = None,
) -> tuple[FileReport, _Problems]:
    """One pass over one file feeding stats, checks, extraction and the contact sheet; `loaded`:
    the dataset's catalog, whose row each record's image/filename is checked against."""
    stats = Stats(feeds.keep_first)
    fr = FileReport(ref, stats)
    probs = _Problems(str(ref.path), sink)
    source = ref.source  # the path shown is ref.path; this is where it is read
    if not source.is_file():
        fr.exists = False
        if source.exists():
            probs.add(None, None, "not a regular file")
        else:
            probs.add(None, None, "listed in dataset.json but missing" if ref.entry is not None else "missing")
        fr.problems = probs.count
        return fr, probs
    man = ref.manifest
    try:
        algorithm = next(
            (a for a in CHECKSUMS if feeds.verify and ref.entry and ref.entry.get(a)), None
        )  # the one dataset.json recorded
        f = TFRecordFile(source, checksum=algorithm, max_record_bytes=feeds.read_limit)
    except DataError as e:
        probs.add(None, None, str(e).removeprefix(f"{source}: "))
        stats.bytes = source.stat().st_size
        fr.problems = probs.count
        feeds.bar.update(stats.bytes)
        return fr, probs
    stats.bytes = f.size
    stats.compressions.add(f.compression)
    probs.compressed = f.compression != "none"
    if man is not None and ref.entry is not None and f.compression != man.compression:
        probs.add(None, None, f"compressed as {f.compression}, but dataset.json says {man.compression}")
    last = _scan_records(f, ref, stats, probs, feeds, class_counts, loaded)
    feeds.bar.update(f.size - last)
    fr.checksum = {algorithm: f.checksum} if algorithm and f.checksum else None
    if feeds.verify and ref.entry is not None:
        _entry_problems(ref.entry, f, stats.records, algorithm, probs)
    fr.problems = probs.count
    return fr, probs


def _scan_records(
    f: TFRecordFile,
    ref: ShardRef,
    stats: Stats,
    probs: _Problems,
    feeds: _Feeds,
    class_counts: dict[tuple[int, str], Counter[str]],
    loaded: Loaded | None,
) -> int:
    """Every record of `f`, in one loop: the per-record path, so the feeds are taken into locals
    first. Returns the bytes given to the progress bar (the rest is given once the file ends)."""
    man = ref.manifest
    _keep_first, verify, decoder, extractor, sheet, bar, read_limit = feeds
    index_file = ref.source.with_name(str((ref.entry or {}).get("index") or ref.path.name + ".idx"))
    idx = _IndexChecker(index_file, probs) if verify and f.compression == "none" and index_file.is_file() else None
    counts = class_counts.setdefault((id(man), ref.split), Counter()) if man is not None and ref.split else None
    max_pixels = pixel_limit(man)
    declared = declared_features(man.data.get("metadata")) if verify and man is not None else None
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
            if rec.oversize and read_limit < framing.MAX_RECORD_BYTES:
                stats.unread += 1  # a report does without it; --verify reads it
                continue
            if rec.oversize:
                probs.add(
                    rec.index,
                    rec.offset,
                    f"{rec.length:,} data bytes, more than the {f.max_record_bytes:,} inspect holds in memory: CRC checked, content not read",
                )
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
            if decoder is not None:
                check_image(info, max_pixels, decoder, probs)
            if verify and man is not None:
                for msg in _schema_problems(info, man, declared):
                    probs.add(rec.index, rec.offset, msg)
                if loaded is not None and (wrong := loaded.name_problem(ref.path.name, rec.index, info.filename)):
                    probs.add(rec.index, rec.offset, wrong)
            if extractor is not None:
                extractor.add(info, name, ref.split)
            if sheet is not None:
                sheet.add(_unboxed_as_first_class(info, man), name, max_pixels)
    except FramingError as e:
        probs.add(e.index, e.offset, e.message)
    if first_non_example is not None:
        i, off, msg = first_non_example
        probs.add(i, off, _non_examples(stats, msg))
    if idx is not None:
        idx.finish()
    return last


def _non_examples(stats: Stats, msg: str) -> str:
    """The one problem said for all the records that are no tf.train.Example, `msg` the first's."""
    n = stats.non_examples
    what = (
        "the record is"
        if stats.records == 1
        else f"{n} of {stats.records} records are"
        if n > 1
        else f"1 of {stats.records} records is"
    )
    return f"{what} not tf.train.Example {msg.removeprefix('not a tf.train.Example ')}"


def _entry_problems(
    entry: dict[str, Any], f: TFRecordFile, records: int, algorithm: str | None, probs: _Problems
) -> None:
    """The file against its dataset.json entry: record count, size and the recorded checksum."""
    if isinstance(entry.get("records"), int) and entry["records"] != records:
        probs.add(None, None, f"holds {records} records, dataset.json says {entry['records']}")
    if isinstance(entry.get("bytes"), int) and entry["bytes"] != f.size:
        probs.add(None, None, f"is {f.size:,} bytes, dataset.json says {entry['bytes']:,}")
    if algorithm and f.checksum and entry[algorithm] != f.checksum:
        probs.add(
            None,
            None,
            f"{algorithm} {f.checksum[:16]}... differs from dataset.json's {str(entry[algorithm])[:16]}...",
        )


__all__ = ["FileReport", "Report", "inspect"]
