"""The report's pictures: a seeded sample of each class's records, read where the catalog says they are.

Only the sampled records are read: an uncompressed shard at the records' offsets (the sum of
the earlier records' lengths, `Catalog.offsets`), a compressed one streamed up to its last
sampled record. Thumbnails are `sheet._thumbnail`'s (the pixels as TensorFlow decodes them),
stored in the page as JPEG data URIs, within a byte budget so the page stays small whatever
the number of classes. A detection record's boxes (`inspection.boxes`, at most `MAX_DRAWN` a
thumbnail) go with its thumbnail, drawn over it by the template, and count in the budget.
"""

from __future__ import annotations

import base64
import io
import random
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from img2tfrecord.format import framing
from img2tfrecord.format.catalog import Catalog
from img2tfrecord.format.layout import Manifest, pixel_limit
from img2tfrecord.format.schema import utf8_text
from img2tfrecord.inspection.boxes import MAX_DRAWN, Box
from img2tfrecord.inspection.records import NotExample, parse_record
from img2tfrecord.inspection.sheet import _thumbnail

SIDE = 128  # thumbnail, pixels square at most
QUALITY = 75
BUDGET = 7 << 20  # bytes of thumbnails (base64) a page holds at most: the page stays under 10 MB
MAX_THUMBS = 2000  # records sampled at most (classes past it are shown without thumbnails): bounded time
BOX_BYTES = 200  # what one box's overlay element costs the page, at most (its class name is cut to fit)


@dataclass
class Thumb:
    """One sampled record as the page shows it. `uri` is None when its image does not decode.

    `scale` is thumbnail pixels per image pixel: what a drawing over the thumbnail (boxes, say)
    multiplies the record's coordinates by."""

    row: int
    split: str
    cls: str
    label: int | None
    filename: str
    path: str  # as dataset.json writes it
    uri: str | None = None
    width: int = 0
    height: int = 0
    scale: float = 0.0
    boxes: tuple[Box, ...] = ()  # a detection record's boxes, drawn over the thumbnail
    more_boxes: int = 0  # its boxes past MAX_DRAWN, not drawn

    @property
    def cost(self) -> int:
        """Bytes of the page this thumbnail takes at most: its data URI and its boxes."""
        return len(self.uri or "") + BOX_BYTES * len(self.boxes)


@dataclass
class DupGroup:
    """A group of byte-identical files from dataset.json's duplicate report, with its first members' thumbnails."""

    files: list[str]
    classes: list[str]
    splits: list[str]
    conflicting: bool  # across labels
    across: bool  # across splits
    thumbs: list[Thumb]


@dataclass
class Sample:
    by_class: dict[str, list[Thumb]]
    classes_left_out: int  # classes past the budget, shown without thumbnails
    unreadable: int  # sampled records whose image could not be shown
    box_classes: Counter[str] = field(default_factory=Counter)  # boxes per class name on the shown thumbnails

    @property
    def boxes(self) -> int:
        return sum(self.box_classes.values())


def pick(cat: Catalog, classes: list[str], per_class: int, seed: int) -> dict[str, list[int]]:
    """Up to `per_class` converted rows of each class, drawn by a generator seeded with the seed and
    the class name (another class's images coming or going does not change a class's sample), in
    catalog (path) order."""
    rows: dict[str, list[int]] = {c: [] for c in classes}
    names = cat.classes.values
    for r, (code, on) in enumerate(zip(cat.classes.codes, cat.converted())):
        if on:
            rows.setdefault(names[code], []).append(r)
    out = {}
    for c, rs in rows.items():
        k = min(per_class, len(rs))
        out[c] = sorted(random.Random(f"{seed}:{c}").sample(rs, k))
    return out


def offsets_of(cat: Catalog, rows: list[int]) -> dict[int, int]:
    """`Catalog.offsets` of `rows` alone: the lengths of the records before each in its shard,
    summed over the shards these rows are in only (numpy: ~10 ms where all offsets take ~1 s at 100,000)."""
    import numpy as np

    codes = np.frombuffer(cat.shards.codes, np.uint32)
    records = np.frombuffer(cat.records, np.int32)
    lengths = np.frombuffer(cat.lengths, np.int64)
    conv = np.frombuffer(cat.converted(), np.uint8).astype(bool)
    out: dict[int, int] = {}
    for code in sorted({cat.shards.codes[r] for r in rows}):
        mine = np.flatnonzero(conv & (codes == code))
        mine = mine[np.argsort(records[mine], kind="stable")]
        starts = np.concatenate(([0], np.cumsum(lengths[mine])[:-1]))
        at = dict(zip(mine.tolist(), starts.tolist()))
        out.update({r: at[r] for r in rows if cat.shards.codes[r] == code})
    return out


@dataclass(frozen=True)
class Thumbs:
    """`read_thumbs`' answer: the thumbnails by catalog row, and how many records could not be read."""

    by_row: dict[int, Thumb] = field(default_factory=dict)
    unreadable: int = 0


def read_thumbs(man: Manifest, cat: Catalog, rows: Iterable[int]) -> Thumbs:
    """Thumbnails of catalog `rows`, reading those records only."""
    wanted = sorted(set(rows))
    if not wanted:
        return Thumbs()
    offsets = offsets_of(cat, wanted)
    by_shard: dict[str, list[int]] = {}
    for r in wanted:
        by_shard.setdefault(cat.shards[r], []).append(r)
    out: dict[int, Thumb] = {}
    bad = 0
    limit = pixel_limit(man)
    for shard, rs in sorted(by_shard.items()):
        rs.sort(key=offsets.__getitem__)
        at = {offsets[r]: r for r in rs}
        try:
            records = list(framing.records_at(man.at(shard), [offsets[r] for r in rs], man.compression))
        except (OSError, framing.FramingError):
            records = []
        for rec in records:
            r = at[rec.offset]
            thumb = _thumb(cat, r, rec, limit)
            bad += thumb.uri is None
            out[r] = thumb
        for r in rs:
            if r not in out:
                bad += 1
                out[r] = _blank(cat, r)
    return Thumbs(by_row=out, unreadable=bad)


def _blank(cat: Catalog, r: int) -> Thumb:
    path = utf8_text(cat.rels[r].decode("utf-8", "surrogateescape"))
    return Thumb(r, cat.splits[r], cat.classes[r], None, path.rsplit("/", 1)[-1], path)


def _thumb(cat: Catalog, r: int, rec: framing.RawRecord, max_pixels: int) -> Thumb:
    t = _blank(cat, r)
    if not rec.crc_ok:
        return t
    try:
        info = parse_record(rec)
    except NotExample:
        return t
    t.label = info.label
    t.filename = info.filename or t.filename
    try:
        img = _thumbnail(info, max_pixels, SIDE)
    except Exception:
        img = None
    if img is None:
        return t
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality=QUALITY, optimize=True)
    t.uri = "data:image/jpeg;base64," + base64.b64encode(buf.getvalue()).decode("ascii")
    t.width, t.height = img.size
    t.scale = img.width / info.width if info.width else 0.0
    t.boxes, t.more_boxes = info.objects[:MAX_DRAWN], max(0, len(info.objects) - MAX_DRAWN)
    return t


def sample(man: Manifest, cat: Catalog, classes: list[str], per_class: int, seed: int) -> Sample:
    """Each class's sampled thumbnails, classes in label order until the byte budget is spent."""
    picked, total = {}, 0
    for c, rs in pick(cat, classes, per_class, seed).items():
        if total + len(rs) > MAX_THUMBS:
            break
        picked[c], total = rs, total + len(rs)
    left_out = len(classes) - len(picked)
    read = read_thumbs(man, cat, [r for rs in picked.values() for r in rs])
    thumbs, bad = read.by_row, read.unreadable
    by_class: dict[str, list[Thumb]] = {}
    spent = 0
    for c, rs in picked.items():
        cost = sum(thumbs[r].cost for r in rs)
        if spent + cost > BUDGET:
            left_out += 1
            continue
        spent += cost
        by_class[c] = [thumbs[r] for r in rs]
    drawn = Counter(b.text or "(no name)" for ts in by_class.values() for t in ts if t.uri for b in t.boxes)
    return Sample(by_class, left_out, bad, drawn)
