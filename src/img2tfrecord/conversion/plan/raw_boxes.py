"""An annotation's boxes before they meet the images (conversion.plan.annotations, plan.coco): one
module of plain types, so every format's reader builds the same thing without importing the others."""

from __future__ import annotations

from typing import NamedTuple


class RawBox(NamedTuple):
    """One object as the annotation gives it: corners in pixels (normalised for YOLO)."""

    name: str  # class name
    xmin: float
    ymin: float
    xmax: float
    ymax: float
    is_crowd: int = 0
    area: float = -1.0  # COCO's own area (pixels); -1: the box's
    difficult: int = 0
    truncated: int = 0


class ImageBoxes(NamedTuple):
    """One image's annotation: the size the tool recorded (0, 0 for YOLO) and its objects."""

    width: int
    height: int
    source_id: str  # COCO's image id, else the annotation's name for the image
    boxes: tuple[RawBox, ...]
