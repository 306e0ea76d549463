"""COCO segmentations kept by the stream for `convert --masks` (conversion.plan.coco).

COCO train2017 has 860k segmentations, most of instances_train2017.json's 448 MB. A list of lists
of Python floats per object would cost ~10 times the text, so the stream puts every coordinate in
one flat float64 array (float64, not float32: pycocotools rounds `5 * x + 0.5` to whole numbers, and
a coordinate such as 100.7 stored in float32 lands on the other side of that rounding), each
polygon's end in another, and RLE counts as numbers (iscrowd's uncompressed form) or as COCO's
compressed text in one byte array; per object a kind and where its parts start. An annotation's
parts are written as its events arrive and cut off again when it turns out unusable, so nothing is
held twice. `segment` rebuilds one object's `Segment` when the walk looks its image up.
"""

from __future__ import annotations

from array import array
from typing import Any

from img2tfrecord.conversion.plan.coco_polygons import Reach
from img2tfrecord.conversion.plan.raw_boxes import Segment

SEG = "annotations.item.segmentation"
PREFIXES = frozenset({SEG, *(f"{SEG}.{p}" for p in ("item", "item.item", "counts", "counts.item", "size.item"))})
_NUMBERS = frozenset({"integer", "double", "number"})  # ijson's C backend says "number" for all, ints as int
NONE, POLYGONS, COUNTS, TEXT, RLE = 0, 1, 2, 3, 4  # RLE: a map whose counts have not come yet


class Segments:
    """Every kept annotation's segmentation, in the order of the stream's boxes."""

    def __init__(self) -> None:
        self.kind, self.first, self.n = array("b"), array("q"), array("q")
        self.height, self.width = array("q"), array("q")
        self.coords = array("d")  # every polygon's x, y, ...
        self.poly_end = array("q")  # per polygon: its end in coords
        self.counts = array("q")  # uncompressed RLE counts
        self.text = bytearray()  # compressed RLE counts
        self._reach: list[list[float]] | None = None  # per polygon: xmin, ymin, xmax, ymax, outline (`reach`)
        self.begin()

    def begin(self) -> None:
        """A new annotation starts: nothing of it is known."""
        self._kind, self._bad, self._size = NONE, False, array("q")
        self._marks = (len(self.coords), len(self.poly_end), len(self.counts), len(self.text))

    def event(self, prefix: str, event: str, value: Any) -> None:
        """One ijson event below an annotation's `segmentation`."""
        if prefix == SEG:
            if event == "start_array":
                self._set(POLYGONS)
            elif event == "start_map":
                self._set(RLE)
            elif event not in ("end_array", "end_map", "map_key"):
                self._bad = True
        elif prefix == SEG + ".item":
            if event == "end_array" and self._kind == POLYGONS:
                self.poly_end.append(len(self.coords))
            elif event != "start_array" or self._kind != POLYGONS:
                self._bad = True
        elif prefix == SEG + ".item.item":
            if event in _NUMBERS:
                self.coords.append(value)
            else:
                self._bad = True
        elif prefix == SEG + ".counts":
            self._counts(event, value)
        elif prefix == SEG + ".counts.item":
            if event in _NUMBERS and isinstance(value, int) and value >= 0 and self._kind == COUNTS:
                self.counts.append(value)
            else:
                self._bad = True
        elif event in _NUMBERS and isinstance(value, int):  # SEG.size.item
            self._size.append(value)
        else:
            self._bad = True

    def _set(self, kind: int) -> None:
        self._bad |= self._kind != NONE  # two segmentations in one annotation
        self._kind = kind

    def _counts(self, event: str, value: Any) -> None:
        if event == "end_array":
            return
        if self._kind != RLE:
            self._bad = True
        elif event == "string" and value.isascii():
            self._kind = TEXT
            self.text += value.encode("ascii")
        elif event == "start_array":
            self._kind = COUNTS
        else:
            self._bad = True

    def commit(self) -> bool:
        """Keep the annotation's segmentation (its box is kept); False when it has none that
        pycocotools can rasterize: polygons of at least 3 points, or an RLE with counts and a size."""
        coords, polys, counts, text = self._marks
        ends = self.poly_end[polys:]
        starts = [coords, *ends[:-1]]
        if self._kind == POLYGONS:
            whole = bool(ends) and ends[-1] == len(self.coords)  # no number after the last polygon's end
            usable = whole and all(e - s >= 6 and (e - s) % 2 == 0 for s, e in zip(starts, ends))
            first, n = polys, len(ends)
        else:
            usable = self._kind in (COUNTS, TEXT) and len(self._size) == 2 and min(self._size) > 0
            first, n = (counts, len(self.counts) - counts) if self._kind == COUNTS else (text, len(self.text) - text)
        if self._bad or not usable:
            self.discard()
            return False
        self.kind.append(self._kind)
        self.first.append(first)
        self.n.append(n)
        h, w = self._size if self._kind != POLYGONS else (0, 0)
        self.height.append(h)
        self.width.append(w)
        return True

    def discard(self) -> None:
        """Forget what the current annotation wrote (its box is not kept)."""
        coords, polys, counts, text = self._marks
        del self.coords[coords:], self.poly_end[polys:], self.counts[counts:], self.text[text:]

    def segment(self, i: int) -> Segment:
        """The `i`th kept annotation's segmentation."""
        kind, first, n = self.kind[i], self.first[i], self.n[i]
        if kind == POLYGONS:
            start = self.poly_end[first - 1] if first else 0
            polygons = []
            for end in self.poly_end[first : first + n]:
                polygons.append(tuple(self.coords[start:end]))
                start = end
            return Segment(polygons=tuple(polygons))
        h, w = self.height[i], self.width[i]
        if kind == COUNTS:
            return Segment(counts=tuple(self.counts[first : first + n]), height=h, width=w)
        return Segment(text=self.text[first : first + n].decode("ascii"), height=h, width=w)

    def reach(self, i: int) -> Reach | None:
        """The `i`th kept segmentation's extent and outline (None: an RLE), from every polygon's,
        computed at once when first asked (after the stream: nothing is added then)."""
        if self.kind[i] != POLYGONS:
            return None
        if self._reach is None:
            self._reach = _polygon_reach(self.coords, self.poly_end)
        xmin, ymin, xmax, ymax, outline = self._reach
        a, b = self.first[i], self.first[i] + self.n[i]
        if b == a + 1:
            return Reach(xmin[a], ymin[a], xmax[a], ymax[a], outline[a])
        return Reach(min(xmin[a:b]), min(ymin[a:b]), max(xmax[a:b]), max(ymax[a:b]), sum(outline[a:b]))


_BLOCK = 1 << 16  # polygons at a time: numpy's temporaries stay a few MB whatever the file


def _polygon_reach(coords: array, poly_end: array) -> list[list[float]]:
    """Per polygon its xmin, ymin, xmax, ymax and outline (coco_polygons.outline's, by numpy: the
    plan asks for every segmentation's, 860k of them in COCO train2017)."""
    import numpy as np

    cols: list[list[float]] = [[], [], [], [], []]
    for b0 in range(0, len(poly_end), _BLOCK):
        first = poly_end[b0 - 1] if b0 else 0
        ends = np.frombuffer(poly_end[b0 : b0 + _BLOCK], dtype=np.int64)
        c = np.frombuffer(coords[first : int(ends[-1])], dtype=np.float64)
        xs, ys = c[0::2], c[1::2]
        last = (ends - first) // 2  # each polygon's end, in points
        starts = np.concatenate(([0], last[:-1]))
        nxt = np.arange(1, len(xs) + 1)
        nxt[last - 1] = starts  # the closing edge
        with np.errstate(over="ignore", invalid="ignore"):
            edge = np.maximum(np.abs(xs[nxt] - xs), np.abs(ys[nxt] - ys))
        for col, got in zip(
            cols,
            (
                np.minimum.reduceat(xs, starts),
                np.minimum.reduceat(ys, starts),
                np.maximum.reduceat(xs, starts),
                np.maximum.reduceat(ys, starts),
                np.add.reduceat(edge, starts),
            ),
        ):
            col.extend(got.tolist())
    return cols
