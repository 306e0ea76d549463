"""Shards: how many, which images go where, writing them, and publishing them atomically.

The shard plan cuts a split's shuffled candidate list at ``round(n * i / k)`` (as TFDS does), so
every shard mixes classes. A skipped image would leave its shard one record short; when that
makes a split's counts differ by more than one, `rebalance` re-cuts the written records (records
are copied, not re-encoded) so that counts always differ by at most one.

Shards are written into a hidden staging folder inside the output directory and renamed into
place only when the whole run succeeded, so an interrupted or failed run never leaves a file under
a final shard name; ``dataset.json`` is written last. Any engine (local processes, Beam workers)
runs the same `write_shard`, so the bytes do not depend on the engine.
"""

from __future__ import annotations

import base64
import contextlib
import os
import sys
from array import array
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from img2tfrecord import fs
from img2tfrecord.conversion.encode.example import DROPPED, Result, to_record
from img2tfrecord.conversion.plan.job import MIN_INDEXED_RECORDS, Drop, PlannedShard, shard_bounds
from img2tfrecord.conversion.plan.options import (
    DEFAULT_CHECKSUM,
    TF_COMPRESSION,
    ShardSettings,
)
from img2tfrecord.conversion.plan.table import Task
from img2tfrecord.conversion.write.spans import Span, copy_spans
from img2tfrecord.errors import DataError
from img2tfrecord.format.catalog import kind_key
from img2tfrecord.format.framing import RECORD_OVERHEAD, read_records, record_spans
from img2tfrecord.format.naming import shard_name, shard_split
from img2tfrecord.format.schema import utf8_text
from img2tfrecord.tf_import import RecordIOError, record_io, tensorflow

WRITEBACK_BYTES = 16 * 1024 * 1024  # with writeback on, ask the kernel to flush every this many bytes


@dataclass
class ShardInfo:
    """What the manifest records of a written shard."""

    file: str
    records: int = 0
    bytes: int = 0
    checksums: dict[str, str] = field(default_factory=dict)  # algorithm -> hex digest of the file
    index: str | None = None

    def as_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"file": self.file, "records": self.records, "bytes": self.bytes, **self.checksums}
        if self.index:
            d["index"] = self.index
        return d


class ShardWriter:
    """One shard file written with tf.io.TFRecordWriter; closes with fsync, checksum and DALI index."""

    def __init__(
        self,
        directory: str,
        name: str,
        compression: str | None = None,
        index: bool = False,
        final_name: str | None = None,
        checksum: str = DEFAULT_CHECKSUM,
        writeback: bool = False,
    ) -> None:
        self.path = fs.join(directory, name)
        self.spool = fs.spool(self.path)  # an object store's shard: written here, uploaded at close
        self.info = ShardInfo(final_name or name)
        self.index = index
        self.checksum = checksum
        self._written = self._flushed = 0  # uncompressed record bytes; how many were handed to writeback
        self._wb_fd: int | None = None
        self._sizes = array("q")
        self._writer = record_writer(self.spool or self.path, compression)
        if writeback and not compression and not fs.is_remote(self.path):
            self._wb_fd = os.open(self.path, os.O_RDONLY)

    def write(self, record: bytes) -> None:
        try:
            self._writer.write(record)
        except RecordIOError as e:  # the writer alone loaded (see tf_import): its status, as an OSError
            raise OSError(f"{self.path}: {e}") from None
        size = len(record) + RECORD_OVERHEAD
        self._sizes.append(size)
        self.info.records += 1
        self._written += size
        if self._wb_fd is not None and self._written - self._flushed >= WRITEBACK_BYTES:
            with _as_os_error(self.path):
                self._writer.flush()
            fs.start_writeback(self._wb_fd, self._flushed, self._written - self._flushed)
            self._flushed = self._written

    @property
    def sizes(self) -> array:
        """The framed size of every record written so far (the catalog's record lengths)."""
        return self._sizes

    def close(self, durable: bool = True) -> ShardInfo:
        """Close, measure, checksum and index the shard; `durable=False` leaves the fsync to the caller."""
        with _as_os_error(self.path):
            self._writer.close()
        if self._wb_fd is not None:
            fs.start_writeback(self._wb_fd, self._flushed, 0)  # 0: to the end of the file
            os.close(self._wb_fd)
            self._wb_fd = None
        if self.spool is None:
            return seal(self.path, self.info, self._sizes, self.index, durable, self.checksum)
        try:
            info = seal(self.spool, self.info, self._sizes, self.index, False, self.checksum)
        except BaseException:
            fs.unspool(self.spool)
            raise
        fs.upload(self.spool, self.path, with_index=self.index)
        return info


@contextlib.contextmanager
def _as_os_error(path: str) -> Iterator[None]:
    """The record writer loaded alone (see tf_import) raises TensorFlow's status as a
    RecordIOError; callers (and the engines' error handling) expect an OSError naming the file.
    (`ShardWriter.write`, once per record, does the same inline: a try costs nothing there.)"""
    try:
        yield
    except RecordIOError as e:
        raise OSError(f"{path}: {e}") from None


def preload_writer(staging: str) -> None:
    """`load_writer` for a background thread: an error is raised again, with its message, where
    the first shard needs the writer."""
    try:
        load_writer(staging)
    except BaseException:
        pass


@contextlib.contextmanager
def preloading(staging: str, first: Iterable[str] = ()) -> Iterator[None]:
    """The record writer loading in a thread while the block runs, for `update()` called from
    Python (while it reads the catalog, walks and diffs): `tf_import.record_io_loading`, which says
    why `first` (the extension modules the block imports) come first and why the thread is joined.
    Nothing to do when the writer is loaded or loading already (the `update` command starts it
    before it imports the library) or when `staging` is remote (writing there takes all of
    TensorFlow, which reading the remote dataset.json imported already)."""
    from img2tfrecord.tf_import import record_io_loading, record_io_requested

    if fs.via_tensorflow(staging) or record_io_requested():
        yield
        return
    with record_io_loading(first):
        yield


def load_writer(staging: str) -> None:
    """Load what writing into `staging` needs (to do it ahead, in a thread): TensorFlow's record
    writer alone for a local folder (~0.4 s, see tf_import), all of TensorFlow for a `tf.io.gfile` one."""
    if fs.via_tensorflow(staging):
        tensorflow()
    else:
        record_io()  # an object store's shards are written locally first (`fs.spool`)


def record_writer(path: str, compression: str | None) -> Any:
    """TensorFlow's record writer for `path`: for a local path the C++ `RecordWriter` that
    `tf.io.TFRecordWriter` subclasses, loaded without the rest of TensorFlow when it is not
    imported (`tf_import.record_io`; same bytes, compressed or not); for any other
    `tf.io.gfile` file system, `tf.io.TFRecordWriter` itself."""
    if fs.is_remote(path):
        tf = tensorflow()
        return tf.io.TFRecordWriter(path, tf.io.TFRecordOptions(compression_type=TF_COMPRESSION[compression]))
    rio = record_io()
    with _as_os_error(path):
        return rio.RecordWriter(os.fsencode(path), rio.RecordWriterOptions(TF_COMPRESSION[compression].encode()))


def seal(path: str, info: ShardInfo, sizes: Iterable[int], index: bool, durable: bool, checksum: str) -> ShardInfo:
    """Fill in a finished shard's size and checksum and write its DALI index (offset, size per record)."""
    if durable:
        fs.fsync(path)
    info.bytes = fs.getsize(path)
    info.checksums = {} if checksum == "none" else {checksum: fs.checksum(path, checksum)}
    if index:
        info.index = info.file + ".idx"
        lines, pos = [], 0
        for size in sizes:
            lines.append(f"{pos} {size}\n")
            pos += size
        fs.write_text(path + ".idx", "".join(lines))
    return info


@dataclass
class ShardOutcome:
    """Everything the manifest needs from one written shard (engines send these back)."""

    split: str
    info: ShardInfo
    class_counts: dict[str, int] = field(default_factory=dict)
    skipped: list[dict[str, str]] = field(default_factory=list)
    formats: dict[str, int] = field(default_factory=dict)
    transcoded: dict[str, int] = field(default_factory=dict)
    depths: dict[str, int] = field(default_factory=dict)  # bits per sample ("8", "16") -> records
    reduced: dict[str, int] = field(default_factory=dict)  # why fewer bits were stored -> records
    orientation_ignored: int = 0
    mask_pixels: dict[str, int] = field(default_factory=dict)  # --masks-dir: class id -> pixels of the masks
    mask_images: dict[str, int] = field(default_factory=dict)  # class id -> masks that hold it
    images: int = 0  # every planned image, skipped and dropped ones included
    bytes_read: int = 0  # their source bytes
    converted_bytes: int = 0  # source bytes of the images written as records (what rates count)
    # The content digest (xxh3-128, 32 hex digits) of every record, in record order, run together:
    # 32 bytes a record where a [digest, path, class] list per record cost ~300 in the calling
    # process and the journal; paths and classes come back from the plan (finalize.written).
    digests: str = ""
    dropped: list[dict[str, str]] = field(default_factory=list)  # duplicates left out (--dedupe drop)
    # framed size of every record, in order (the catalog's); an `array` (8 bytes a record, not a
    # ~36-byte list entry), written as `pack_ints` text (~5 characters a record) in the journal
    lengths: array = field(default_factory=lambda: array("q"))
    # each record's stored kind (catalog.kind_key: format, bits, transcoded, reduced), as an index
    # into `kinds`: what `update` needs to recount formats and depths after removing records
    kinds: list[str] = field(default_factory=list)
    kind_of: array = field(default_factory=lambda: array("I"))
    # the positions in the shard's tasks of the `skipped` and `dropped` images: the catalog matches
    # them by position, as their names (utf8_text) are lossy ("\xff" undecodable, or typed)
    skipped_at: array = field(default_factory=lambda: array("I"))
    dropped_at: array = field(default_factory=lambda: array("I"))
    # each record's stored height, width and channels, three entries a record (the catalog's: the
    # report's size distributions without reading every record); empty in an older journal
    shapes: array = field(default_factory=lambda: array("I"))
    # while the shard is written (`add`, then `close`): its digests, and each kind's index in `kinds`
    _digests: list[str] = field(default_factory=list, init=False, repr=False, compare=False)
    _kind_index: dict[tuple[str, str, str, str], int] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def add(self, position: int, task: Task, result: Result, dropped: Drop | None = None) -> None:
        """Count one planned image, the `position`-th of the shard's tasks: a record written, a
        duplicate left out (`dropped`: its digest and the kept copy's path) or a skip (its reason)."""
        self.images += 1
        self.bytes_read += result.size
        rel = utf8_text(task.rel)  # names in the manifest are written exactly as in the records
        if dropped is not None:
            self.dropped_at.append(position)
            self.dropped.append(
                {
                    "path": rel,
                    "split": self.split,
                    "class": utf8_text(task.text),
                    "digest": dropped.digest,
                    "duplicate_of": utf8_text(dropped.kept),
                }
            )
        elif result.kind != "skip":
            self._record(result, utf8_text(task.text))
        if result.reason:
            self.skipped.append({"path": rel, "split": self.split, "reason": result.reason})
            self.skipped_at.append(position)

    def _record(self, result: Result, text: str) -> None:
        """A record written: its class, format, depth and kind, shape and digest."""
        self._digests.append(result.digest)
        self.class_counts[text] = self.class_counts.get(text, 0) + 1
        self.formats[result.fmt] = self.formats.get(result.fmt, 0) + 1
        if result.transcoded:
            self.transcoded[result.transcoded] = self.transcoded.get(result.transcoded, 0) + 1
        depth = str(result.depth)
        self.depths[depth] = self.depths.get(depth, 0) + 1
        if result.reduced:
            self.reduced[result.reduced] = self.reduced.get(result.reduced, 0) + 1
        kind = (result.fmt, depth, result.transcoded or "", result.reduced or "")
        code = self._kind_index.get(kind)  # by the tuple: no kind_key string made per record
        if code is None:
            code = self._kind_index[kind] = len(self._kind_index)
        self.kind_of.append(code)
        self.shapes.extend((result.height or 0, result.width or 0, result.channels or 0))
        self.orientation_ignored += result.orientation_ignored
        self.converted_bytes += result.size
        for c, n in (result.mask_pixels or {}).items():
            self.mask_pixels[c] = self.mask_pixels.get(c, 0) + n
            self.mask_images[c] = self.mask_images.get(c, 0) + 1

    def close(self, lengths: array, digests: bool) -> None:
        """The shard is written: its records' framed `lengths`, the digests run together (or none:
        `digests` False, a run without content digests) and the kinds named."""
        self.digests = "".join(self._digests) if digests else ""
        self.lengths = lengths
        self.kinds = [kind_key(*kind) for kind in self._kind_index]
        self._digests, self._kind_index = [], {}

    def to_dict(self) -> dict[str, Any]:
        """The outcome as JSON-ready data (journal, Beam outcome files, worker results)."""
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "info" and not f.name.startswith("_")}
        d = {k: v for k, v in d.items() if v or k not in _MASKS}  # a journal as before without --masks-dir
        return d | {"info": asdict(self.info)} | {k: pack_ints(getattr(self, k)) for k in _PACKED}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ShardOutcome:
        if isinstance(d.get("digests"), list):  # a journal of a version that kept [digest, path, class]
            d = d | {"digests": "".join(entry[0] for entry in d["digests"])}
        # lists in older journals
        packed: dict[str, Any] = {k: unpack_ints(d[k]) for k in _PACKED if k in d}
        return cls(**(d | packed | {"info": ShardInfo(**d["info"])}))


_MASKS = ("mask_pixels", "mask_images")
_PACKED = ("lengths", "kind_of", "skipped_at", "dropped_at", "shapes")  # ShardOutcome's integer arrays, packed in JSON
_WIDTHS = {1: "B", 2: "H", 4: "I", 8: "Q"}


def pack_ints(values: array) -> str:
    """Non-negative integers as JSON-ready text: ``"W:"`` and the base64 of their little-endian
    bytes, W (1, 2, 4 or 8) the fewest bytes that hold the largest; "" for none."""
    if not len(values):
        return ""
    top = max(values)
    width = next(w for w in _WIDTHS if top < 1 << (8 * w))
    packed = array(_WIDTHS[width], values)
    if sys.byteorder == "big":
        packed.byteswap()
    return f"{width}:{base64.b64encode(packed.tobytes()).decode()}"


def unpack_ints(text: str | list[int]) -> array:
    """`pack_ints`'s integers back (a list: a journal of an older version); ValueError if damaged."""
    if isinstance(text, list):
        return array("q", text)
    if not isinstance(text, str):
        raise ValueError("packed integers are text")
    if not text:
        return array("q")
    width, _, data = text.partition(":")
    if width not in ("1", "2", "4", "8"):
        raise ValueError(f"packed integers of width {width!r}")
    out = array(_WIDTHS[int(width)])
    out.frombytes(base64.b64decode(data, validate=True))
    if sys.byteorder == "big":
        out.byteswap()
    return out


def write_shard(
    shard: PlannedShard,
    results: Iterable[Result],
    staging: str,
    settings: ShardSettings,
    *,
    on_skip: Callable[[str, str], None] | None = None,
    on_image: Callable[[int], None] | None = None,
    drop: Mapping[str, Drop] | None = None,
    durable: bool | None = None,
    writeback: bool = False,
) -> ShardOutcome:
    """Write the encoded results of `shard.tasks` (same order) into staging/<shard name> and close it
    (checksum, index; fsync if `settings.fsync`, unless `durable=False`: the caller does it). `on_skip(rel, reason)` and `on_image(bytes written: 0 if not)`
    report as it goes. `drop` maps the rel path of each duplicate to leave out to its `Drop` (its digest, the kept copy's path);
    their results are `encoder.DROPPED`. `durable=False` skips the fsync (the caller does it);
    `writeback` starts the disk writing while the shard is still being written (see fs.start_writeback).
    """
    sw = ShardWriter(
        staging, shard.name, settings.compression, settings.index, checksum=settings.checksum, writeback=writeback
    )
    out = ShardOutcome(shard.split, sw.info)  # --strict is enforced once every image was tried (finalize)
    try:
        for position, (task, result) in enumerate(zip(shard.tasks, results)):
            if result.kind == DROPPED:
                assert drop is not None
                out.add(position, task, result, drop[task.rel])
            else:
                if result.kind != "skip":
                    sw.write(to_record(task, result))
                out.add(position, task, result)
            if result.reason and on_skip:
                on_skip(utf8_text(task.rel), result.reason)
            if on_image:  # the bytes of images written; 0 for one skipped or dropped (never an empty image)
                on_image(0 if result.reason or result.kind == DROPPED else result.size)
    except BaseException:  # the shard given up: its local copy too, for an object store
        fs.unspool(sw.spool)
        raise
    sw.close(settings.fsync if durable is None else durable)
    out.close(sw.sizes, settings.digests)
    return out


def recut_count(k: int, records: int, index: bool) -> int:
    """How many shards `k` planned shards holding `records` become: with `index`, fewer when
    some would hold a single record (`MIN_INDEXED_RECORDS`); rebalance, update and compact agree."""
    return min(k, max(1, records // MIN_INDEXED_RECORDS)) if index else k


def rebalance(staging: str, infos: list[ShardInfo], settings: ShardSettings) -> list[ShardInfo]:
    """Re-cut one split's shards so record counts differ by at most one (after skipped images).

    Records move in order from the old shards into new ones: the global record order is unchanged
    and nothing is decoded, so the result is what the plan would have produced had the skipped
    files never been there. With `index`, skips that leave fewer than two records per shard make
    fewer shards (renamed `-of-` the new count), so that none holds a single record (see
    `MIN_INDEXED_RECORDS`). Uncompressed local shards are re-cut as byte ranges (each TFRecord
    record is self-framed), in the kernel and without TensorFlow; compressed or remote ones are
    re-read and re-written through TensorFlow.
    """
    index = settings.index
    counts = [i.records for i in infos]
    total, k = sum(counts), len(infos)
    k_new = recut_count(k, total, index)
    if k_new == k and max(counts) - min(counts) <= 1:
        return infos
    if k_new != k:
        split = shard_split(infos[0].file)
        targets = [ShardInfo(shard_name(split, i, k_new)) for i in range(k_new)]
    else:
        targets = [ShardInfo(i.file) for i in infos]
    cut = _recut_bytes if not settings.compression and not fs.is_remote(staging) else _recut_tf
    new = cut(staging, infos, targets, shard_bounds(total, k_new), settings)
    if k_new != k:  # the old names are not reused: remove them (and their indexes)
        for info in infos:
            fs.remove(fs.join(staging, info.file))
            if index and info.index:
                fs.remove(fs.join(staging, info.index))
    for info in new:
        fs.rename(fs.join(staging, info.file + ".rebalanced"), fs.join(staging, info.file))
        if index:
            fs.rename(
                fs.join(staging, info.file + ".rebalanced.idx"), fs.join(staging, info.index or info.file + ".idx")
            )
    return new


def _recut_tf(
    staging: str,
    infos: list[ShardInfo],
    targets: list[ShardInfo],
    bounds: list[tuple[int, int]],
    settings: ShardSettings,
) -> list[ShardInfo]:
    records = _records(staging, [i.file for i in infos], TF_COMPRESSION[settings.compression])
    new = []
    for info, (a, b) in zip(targets, bounds):
        sw = ShardWriter(
            staging,
            info.file + ".rebalanced",
            settings.compression,
            settings.index,
            final_name=info.file,
            checksum=settings.checksum,
        )
        for _ in range(b - a):
            sw.write(next(records))
        new.append(sw)
    return [sw.close(settings.fsync) for sw in new]


def _records(staging: str, files: list[str], compression: str) -> Iterator[bytes]:
    """Every record of `files` in order, read by TensorFlow: its record iterator for a local
    folder (no full import, see tf_import), tf.data for a `tf.io.gfile` one."""
    if fs.is_remote(staging) and not fs.via_tensorflow(staging):  # fsspec's store: our streaming reader
        for f in files:
            yield from read_records(fs.join(staging, f), compression.lower() or "none")
        return
    if fs.is_remote(staging):
        tf = tensorflow()
        paths = [fs.join(staging, f) for f in files]
        yield from tf.data.TFRecordDataset(paths, compression_type=compression).as_numpy_iterator()
        return
    rio = record_io()
    for f in files:
        with _as_os_error(fs.join(staging, f)):
            yield from rio.RecordIterator(os.fsencode(fs.join(staging, f)), compression.encode())


def _recut_bytes(
    staging: str,
    infos: list[ShardInfo],
    targets: list[ShardInfo],
    bounds: list[tuple[int, int]],
    settings: ShardSettings,
) -> list[ShardInfo]:
    spans: list[Span] = []  # every record, in order
    for info in infos:
        path = fs.join(staging, info.file)
        spans += [Span(path, offset, size) for offset, size in record_spans(path)]
    new = []
    for info, (a, b) in zip(targets, bounds):
        out = ShardInfo(info.file, records=b - a)
        path = fs.join(staging, info.file + ".rebalanced")
        with open(path, "wb") as dst:
            copy_spans(spans[a:b], dst)
        new.append(seal(path, out, (s.length for s in spans[a:b]), settings.index, settings.fsync, settings.checksum))
    return new


def copy_records(src: str, keep: list[int], directory: str, name: str, settings: ShardSettings) -> ShardInfo:
    """Write directory/name holding the records of shard `src` numbered `keep` (ascending), copied
    as they are: nothing is decoded or re-encoded. Uncompressed local shards are copied as byte
    ranges (runs of neighbouring records in one call, in the kernel); compressed or remote ones are
    read and written again through TensorFlow's record reader and writer. `update` uses it for a
    shard that loses records."""
    wanted = set(keep)
    if not settings.compression and not fs.is_remote(src) and not fs.is_remote(directory):
        spans = list(record_spans(src))
        if keep and keep[-1] >= len(spans):
            raise DataError(f"{src} holds {len(spans)} records; record {keep[-1]} was expected in it")
        path = fs.join(directory, name)
        with open(path, "wb") as dst:
            copy_spans((Span(src, *spans[n]) for n in keep), dst)  # neighbouring records: one copy
        sizes = [spans[n][1] for n in keep]
        return seal(path, ShardInfo(name, records=len(keep)), sizes, settings.index, settings.fsync, settings.checksum)
    sw = ShardWriter(directory, name, settings.compression, settings.index, checksum=settings.checksum)
    folder, file = src.rsplit("/", 1) if fs.is_remote(src) else os.path.split(src)
    for n, record in enumerate(_records(folder, [file], TF_COMPRESSION[settings.compression])):
        if n in wanted:
            sw.write(record)
    return sw.close(settings.fsync)
