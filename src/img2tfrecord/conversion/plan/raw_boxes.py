"""An annotation's boxes before they meet the images (conversion.plan.annotations, plan.coco): one
module of plain types, so every format's reader builds the same thing without importing the others."""

from __future__ import annotations

from array import array
from dataclasses import dataclass
from typing import Any, NamedTuple


class Segment(NamedTuple):
    """One object's COCO segmentation (`convert --masks`), as the annotation gives it, for pycocotools
    to rasterize in the worker: polygons, or a run-length encoding (RLE) of a `height` x `width`
    image, its counts as numbers (iscrowd's uncompressed form) or COCO's compressed text. Plain
    values, so Beam's plan file (JSON) carries them."""

    polygons: tuple[tuple[float, ...], ...] = ()  # each [x1, y1, x2, y2, ...] in pixels
    counts: tuple[int, ...] = ()  # uncompressed RLE
    text: str = ""  # compressed RLE
    height: int = 0  # an RLE's size (0 for polygons: the image's)
    width: int = 0


class SegmentRows(NamedTuple):
    """An image's masks as the plan holds them until its shard is handed out: rows of the COCO
    reader's store (a Python tuple of floats per coordinate, for every image at once, would cost
    ~4 times the annotation file), made `Segment`s by `resolve` when the image's Task is made."""

    store: Any  # plan.coco_masks.Segments
    rows: array

    def resolve(self) -> tuple[Segment, ...]:
        return tuple(self.store.segment(i) for i in self.rows)


@dataclass(frozen=True, slots=True, kw_only=True)
class RawBox:
    """One object as the annotation gives it: corners in pixels (normalised for YOLO). Built and
    read by name only (nine numbers side by side are where a positional swap goes unseen)."""

    name: str  # class name
    xmin: float
    ymin: float
    xmax: float
    ymax: float
    is_crowd: int = 0
    area: float = -1.0  # COCO's own area (pixels); -1: the box's
    difficult: int = 0
    truncated: int = 0
    mask: int = -1  # --masks: its segmentation's row in the COCO reader's store (plan.coco_masks.Segments)


@dataclass(frozen=True, slots=True, kw_only=True)
class ImageBoxes:
    """One image's annotation: the size the tool recorded (0, 0 for YOLO) and its objects; by name only."""

    width: int
    height: int
    source_id: str  # COCO's image id, else the annotation's name for the image
    boxes: tuple[RawBox, ...]
    refused: str = ""  # why the image is skipped (COCO: its entry is not used), or ""
