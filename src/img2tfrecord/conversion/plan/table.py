"""The plan's images as columns, and `Task`, the one image a worker is handed.

A plan of 100 M images must fit a Beam driver. Held as a Python object per image (a `Task`,
its three path strings and its size int, ~500-700 bytes), one million cost 665 MB and
100 M would need ~70 GB. So the walk writes every image into an `ImageTable` instead:

* one bytes blob of names (each image's path below its group's prefix, e.g. ``img_0042.jpg``
  below ``train/cat/``), with an `array` of offsets;
* integer arrays for the size, the mtime (st_mtime_ns, from the same stat) and the group (split
  folder + class) of each image;
* and, per split, an `array` of image numbers in plan order (conversion.plan.splits sorts it by hash).

That is ~53 bytes an image (names ~17, offsets 8, size 8, mtime 8, group 4, order 8). `bench/plan.py`
measures the whole `convert --dry-run` process on 1 M files at ~72 bytes an image at its peak RSS
(~91 on 300 k files since the mtime column and the hash order, 74 before on the same run)
(walk, sort, hash order and the summary included; target 150), where the old plan took ~705, and
tests/plan/test_plan_table.py traces ~99 at the peak and ~46 kept for 50,000 files. A shard's `Task`s are made when the shard is
handed to a worker (`TaskView`: a sequence over the columns, pickled as a plain tuple), so a
run holds the Python objects of the shards in flight only.

Image numbers are given in `image/filename` order within a split (the walk lays class folders
out in the order of their ``class/`` prefix and sorts each folder), so sorting a split is sorting
integers, and ordering it by the seeded path hash (conversion.plan.splits) is a sort of integers too:
the plan is exactly the one a list of Tasks gives (`tests/plan/test_plan.py` pins it; test_plan_table.py
compares it with a list-of-Tasks reference).

Names are kept as the bytes of ``str.encode("utf-8", "surrogateescape")``, which on POSIX are the
file system's own bytes, so undecodable names survive exactly.
"""

from __future__ import annotations

import itertools
import os
import posixpath
from array import array
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any, NamedTuple, overload

from img2tfrecord import fs
from img2tfrecord.conversion.plan.raw_boxes import Segment, SegmentRows
from img2tfrecord.format.schema import MetaValue


@dataclass(slots=True, kw_only=True)
class Task:
    """One image of the plan, as a worker gets it (made per shard from the table, or read back
    from Beam's plan file, where it is written field by field by name). Built by keyword only (a
    slotted dataclass, not a tuple), so a new per-image field is one line here, where the table
    fills it, and where the worker reads it; Beam's plan file carries it by name."""

    path: str  # where to read it (local path or URL)
    rel: str  # relative to the input: how the manifest, dedupe and resume name it
    filename: str  # image/filename (rel without a split folder, or a --file-list row as written)
    label: int
    text: str  # the class name (image/class/text)
    size: int  # bytes, from the walk (0 when a remote listing gave none)
    mtime_ns: int = 0  # modification time, from the same stat as `size` (0 when unknown: remote walk)
    meta: tuple[MetaValue, ...] = ()  # metadata features (conversion.plan.metadata), sorted by key
    objects: Objects | None = None  # an annotated image's boxes (conversion.plan.detection), else None
    mask: str | None = None  # where its segmentation mask is read (--masks-dir: conversion.plan.seg_pairs)


@dataclass(slots=True, kw_only=True)
class Objects:
    """An annotated image's objects, clipped and normalised to [0, 1] in the pixels as stored in the
    file (`--annotations`); the encoder checks the size and turns them with the pixels. Plain
    values, so Beam's plan file (JSON) carries them, by field name. Built by keyword only: ten
    columns of numbers side by side are where a positional swap would go unseen."""

    width: int  # the image size the annotation recorded (0, 0: none, YOLO): must be the stored one
    height: int
    source_id: str  # image/source_id
    xmin: tuple[float, ...]
    ymin: tuple[float, ...]
    xmax: tuple[float, ...]
    ymax: tuple[float, ...]
    label: tuple[int, ...]  # label map ids, from 1
    text: tuple[str, ...]
    is_crowd: tuple[int, ...]
    area: tuple[float, ...]  # pixels of the annotation's image; normalised (a fraction) when width is 0
    difficult: tuple[int, ...]
    truncated: tuple[int, ...]
    # --masks: each object's segmentation, for the encoder to rasterize (rows of the store in the plan's table)
    masks: tuple[Segment, ...] | SegmentRows | None = None


def boxes_digest(objects: Objects | None) -> bytes:
    """xxh3-64 of an image's boxes as planned (after clipping: size, source_id, coordinates, labels,
    names, flags, area, --masks' segmentations), 8 bytes; the catalog keeps it so that `update`
    finds the images whose annotation changed (format.catalog's `boxes`). An image with no
    `Objects` (not detection): none. The numbers are hashed as their 8-byte values, the texts as
    UTF-8 with a NUL after each (repr() of every float took ~30 us an image)."""
    if objects is None:
        return bytes(8)
    import xxhash

    h = xxhash.xxh3_64(array("q", (objects.width, objects.height)).tobytes())
    h.update(objects.source_id.encode("utf-8", "surrogateescape") + b"\0")
    for floats in (objects.xmin, objects.ymin, objects.xmax, objects.ymax, objects.area):
        h.update(len(floats).to_bytes(4, "little") + array("d", floats).tobytes())
    for ints in (objects.label, objects.is_crowd, objects.difficult, objects.truncated):
        h.update(len(ints).to_bytes(4, "little") + array("q", ints).tobytes())
    h.update("\0".join(objects.text).encode("utf-8", "surrogateescape") + b"\0")
    masks = objects.masks
    if masks is not None:  # rows of the COCO reader's store resolved: their repr would be an object's address
        h.update(repr(_plain(masks.resolve() if isinstance(masks, SegmentRows) else masks)).encode())
    return h.digest()


def _plain(v: Any) -> Any:
    """--masks' segmentations as nested tuples of plain values, however the plan holds them: read
    back from JSON (Beam's plan file: lists) or as Segments."""
    return tuple(_plain(x) for x in v) if isinstance(v, (list, tuple)) else v


NO_STAMP = bytes(8)  # format.catalog.NO_BOXES: a row whose stamp is not known


def stamp_of(enrichers: Sequence[Any], table: ImageTable, i: int) -> bytes:
    """Image `i`'s stamp as the catalog keeps it, from its enrichers' (conversion.plan.enrich), 8 bytes:
    NO_STAMP when no enricher gives one,
    one enricher's stamp as it is, else the xxh3-64 of them all in the enrichers' order."""
    got = [s for e in enrichers if (s := e.stamp(table, i)) is not None]
    if not got:
        return NO_STAMP
    if len(got) == 1 and len(got[0]) == len(NO_STAMP):
        return got[0]
    import xxhash

    return xxhash.xxh3_64(b"".join(len(s).to_bytes(4, "little") + s for s in got)).digest()


class BoxCounts(NamedTuple):
    """A detection walk's boxes per image (conversion.plan.detection), kept on its `Discovery` so
    that an update can count the boxes of the version it publishes (`detection.published`)."""

    per_image: dict[str, tuple[str, ...]]  # an image's path (as the records name it) -> its kept boxes' classes
    problems: list[dict[str, str]]  # the boxes clipped or dropped: path, box, class, reason
    skipped_empty: int  # images left out by --skip-empty
    digest: str = ""  # the annotations' xxh3_128 as read now: an update's dataset.json records it
    classes: tuple[str, ...] = ()  # the class list, in label order: `boxes_per_class`'s order


class Group(NamedTuple):
    """Images that share a prefix and a class: a class folder (of one split folder), or a class of a file list."""

    prefix: bytes  # every image's rel starts with it (b"train/cat/"); b"" for a file list
    cls: int  # index into ImageTable.classes
    strip: int  # characters of rel that are not part of image/filename (the split folder "train/")


def encode_name(name: str) -> bytes:
    return name.encode("utf-8", "surrogateescape")


def decode_name(data: bytes | bytearray) -> str:
    return data.decode("utf-8", "surrogateescape")


class ImageTable:
    """Every planned image, column by column (see the module docstring).

    `root` is joined with an image's rel to give the path to read, unless `paths` holds one for it
    (a --file-list row naming a file elsewhere).
    """

    def __init__(self, root: str, remote: bool, classes: list[str], labels: list[int], split_rel: bool = False) -> None:
        self.root = root
        self.remote = remote
        self.classes = classes  # class names (image/class/text), by class index
        self.labels = labels  # label of each class index
        self.groups: list[Group] = []
        self.names = bytearray()
        self.offsets = array("q", [0])
        self.sizes = array("q")
        self.mtimes = array("q")  # st_mtime_ns of each image, 0 when unknown
        self.group_of = array("I")
        self.paths: dict[int, str] = {}
        self.meta: dict[int, tuple[MetaValue, ...]] = {}  # image number -> its metadata features
        self.objects: dict[int, Objects] = {}  # image number -> its boxes (--annotations)
        self.columns: dict[str, dict[int, Any]] = {}  # an enricher's own column -> image number -> value (a Task field)
        self.enrichers: Sequence[Any] = ()  # the walk's enrichers (plan.enrich): the catalog's stamps come from them
        self._sep = split_rel and not remote and os.sep != "/"  # a walk's paths join folder by folder

    def __len__(self) -> int:
        return len(self.sizes)

    def new_group(self, prefix: str, cls: int, strip: int = 0) -> int:
        self.groups.append(Group(encode_name(prefix), cls, strip))
        return len(self.groups) - 1

    def extend(
        self,
        group: int | Iterable[int],
        names: Sequence[bytes],
        sizes: Iterable[int],
        mtimes: Iterable[int] | None = None,
    ) -> range:
        """Append images (names below their group's prefix, in order); returns their image numbers.
        `group` is one group for all of them, or one per image; `mtimes` None means unknown (0)."""
        start = len(self.sizes)
        self.names += b"".join(names)
        self.offsets.extend(itertools.islice(itertools.accumulate(map(len, names), initial=self.offsets[-1]), 1, None))
        self.sizes.extend(sizes)
        self.mtimes.extend(itertools.repeat(0, len(names)) if mtimes is None else mtimes)
        self.group_of.extend(itertools.repeat(group, len(names)) if isinstance(group, int) else group)
        if not len(self.sizes) == len(self.mtimes) == len(self.group_of) == len(self.offsets) - 1 == start + len(names):
            raise ValueError("one size, one mtime and one group per name")
        return range(start, len(self.sizes))

    def default_path(self, rel: str) -> str:
        """Where an image named `rel` is read from, unless `paths` says otherwise."""
        if self.remote:
            return posixpath.join(self.root, rel)
        return os.path.join(self.root, *rel.split("/")) if self._sep else os.path.join(self.root, rel)

    def rel_bytes(self, i: int) -> bytes:
        return self.groups[self.group_of[i]].prefix + self.names[self.offsets[i] : self.offsets[i + 1]]

    def rel(self, i: int) -> str:
        return decode_name(self.rel_bytes(i))

    def task(self, i: int) -> Task:
        group = self.groups[self.group_of[i]]
        rel = decode_name(group.prefix + self.names[self.offsets[i] : self.offsets[i + 1]])
        path = self.paths.get(i) if self.paths else None
        if path is None:
            path = self.default_path(rel)
        return Task(
            path=path,
            rel=rel,
            filename=rel[group.strip :],
            label=self.labels[group.cls],
            text=self.classes[group.cls],
            size=self.sizes[i],
            mtime_ns=self.mtimes[i],
            meta=self.meta.get(i, ()) if self.meta else (),
            objects=self._objects(i) if self.objects else None,
            **({k: c.get(i) for k, c in self.columns.items()} if self.columns else {}),
        )

    def stamp(self, i: int) -> bytes:
        """Image `i`'s stamp as the catalog keeps it (`stamp_of`): NO_STAMP without enrichers."""
        return stamp_of(self.enrichers, self, i) if self.enrichers else NO_STAMP

    def _objects(self, i: int) -> Objects | None:
        """Image `i`'s objects, their masks made `Segment`s from the store's rows (--masks)."""
        got = self.objects.get(i)
        if got is not None and isinstance(got.masks, SegmentRows):
            return replace(got, masks=got.masks.resolve())
        return got


class TaskView(Sequence[Task]):
    """Some images of a table, in plan order: a sequence of `Task`s made as they are read.

    Slicing gives a view (no copy); pickling gives a plain tuple of Tasks, so a worker process
    receives its shard and not the table.
    """

    __slots__ = ("table", "order")

    def __init__(self, table: ImageTable, order: array | memoryview) -> None:
        self.table = table
        self.order = order if isinstance(order, memoryview) else memoryview(order)

    def __len__(self) -> int:
        return len(self.order)

    @overload
    def __getitem__(self, i: int) -> Task: ...

    @overload
    def __getitem__(self, i: slice) -> TaskView: ...

    def __getitem__(self, i: int | slice) -> Task | TaskView:
        if isinstance(i, slice):
            return TaskView(self.table, self.order[i])
        return self.table.task(self.order[i])

    def __iter__(self) -> Iterator[Task]:
        return map(self.table.task, self.order)

    def __reduce__(self) -> tuple[Any, ...]:
        return (tuple, (tuple(self),))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and tuple(self) == tuple(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"TaskView({len(self)} images)"


def sizes_of(tasks: Sequence[Task]) -> array:
    """The sizes of `tasks`, in order, without making the Tasks of a view."""
    if isinstance(tasks, TaskView):
        return array("q", map(tasks.table.sizes.__getitem__, tasks.order))
    return array("q", (t.size for t in tasks))


def mtimes_of(tasks: Sequence[Task]) -> array:
    """The st_mtime_ns of `tasks`, in order (0 where unknown), without making the Tasks of a view."""
    if isinstance(tasks, TaskView):
        return array("q", map(tasks.table.mtimes.__getitem__, tasks.order))
    return array("q", (t.mtime_ns for t in tasks))


def stamps_of(tasks: Sequence[Task]) -> bytes:
    """The enrichers' stamps of `tasks` (conversion.plan.enrich), concatenated, the images without
    one left out; b"" when none has one (no enricher stamps: not detection). Part of the resume
    fingerprint: boxes edited since a run was cut short are a different plan."""
    if isinstance(tasks, TaskView):
        table = tasks.table
        if not table.enrichers:
            return b""
        return b"".join(s for i in tasks.order if (s := table.stamp(i)) != NO_STAMP)
    return b"".join(boxes_digest(t.objects) for t in tasks if t.objects is not None)


def class_counts(tasks: Sequence[Task]) -> Counter[str]:
    """Images per class name (image/class/text) among `tasks`."""
    if isinstance(tasks, TaskView):
        table = tasks.table
        per_group = Counter(map(table.group_of.__getitem__, tasks.order))
        out: Counter[str] = Counter()
        for g, n in per_group.items():
            out[table.classes[table.groups[g].cls]] += n
        return out
    return Counter(t.text for t in tasks)


def fingerprint_items(tasks: Sequence[Task]) -> bytes:
    """``\\0rel\\0size`` of every task, concatenated: what the resume fingerprint hashes."""
    if isinstance(tasks, TaskView):
        table = tasks.table
        names, offsets, sizes, group_of, groups = table.names, table.offsets, table.sizes, table.group_of, table.groups
        return b"".join(
            b"\0%s%s\0%d" % (groups[group_of[i]].prefix, names[offsets[i] : offsets[i + 1]], sizes[i])
            for i in tasks.order
        )
    return b"".join(f"\0{t.rel}\0{t.size}".encode("utf-8", "surrogateescape") for t in tasks)


def first_local_path(tasks: Sequence[Task]) -> str | None:
    """The first path of `tasks` that is a local file, or None (at once for a view of a remote walk)."""
    if isinstance(tasks, TaskView) and tasks.table.remote and not tasks.table.paths:
        return None
    return next((t.path for t in tasks if not fs.is_remote(t.path)), None)
