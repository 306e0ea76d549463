"""A detection record's boxes as the contact sheet and the report draw them (`convert --annotations`).

The Object Detection API's keys hold a box as four parallel float lists, normalised to the pixels
as stored, beside the class id and name lists. A record from elsewhere may hold anything there:
a coordinate that is NaN or infinite, a box past the image or inside out, or lists of different
lengths. Drawing must not fail on any of it, so each box is checked here once: one with a
non-finite coordinate, or of no area once clipped to [0, 1], is left out; lists of unequal
length give as many boxes as the shortest coordinate list; a missing id or name is None.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from typing import Any, NamedTuple

from img2tfrecord.inspection.wire import WireFeature

XMIN, YMIN, XMAX, YMAX = (f"image/object/bbox/{k}" for k in ("xmin", "ymin", "xmax", "ymax"))
CLASS_LABEL = "image/object/class/label"
CLASS_TEXT = "image/object/class/text"
BOX_KEYS = frozenset({XMIN, YMIN, XMAX, YMAX, CLASS_LABEL, CLASS_TEXT})  # collected whole by the walk

MAX_DRAWN = 100  # boxes drawn on one thumbnail at most: a thumbnail shows no more, and a page stays small

# One outline colour per class id (id k: PALETTE[(k - 1) % 12]; no id: the first), distinct on
# photos and on the grey of an empty cell (Trubetskoy's 20 distinct colours, the first twelve).
PALETTE: tuple[tuple[int, int, int], ...] = (
    (230, 25, 75),
    (60, 180, 75),
    (0, 130, 200),
    (245, 130, 48),
    (145, 30, 180),
    (70, 240, 240),
    (240, 50, 230),
    (210, 245, 60),
    (250, 190, 212),
    (0, 128, 128),
    (170, 110, 40),
    (128, 0, 0),
)


class Box(NamedTuple):
    """One drawable box: corners in [0, 1] of the stored pixels (x0 < x1, y0 < y1), its class id and name."""

    x0: float
    y0: float
    x1: float
    y1: float
    label: int | None
    text: str | None

    @property
    def colour(self) -> tuple[int, int, int]:
        return colour(self.label)

    @property
    def hex(self) -> str:
        return "#{:02x}{:02x}{:02x}".format(*self.colour)


def colour(label: int | None) -> tuple[int, int, int]:
    """The outline colour of class id `label` (ids from 1, as the Object Detection API numbers them)."""
    return PALETTE[(label - 1) % len(PALETTE)] if isinstance(label, int) else PALETTE[0]


def _values(fm: Mapping[str, WireFeature], key: str, kind: str) -> list[Any]:
    f = fm.get(key)
    return list(f.values or []) if f is not None and f.kind == kind else []


def boxes_of(fm: Mapping[str, WireFeature]) -> tuple[Box, ...]:
    """The drawable boxes of a record walked with `collect=BOX_KEYS`; what cannot be drawn left out."""
    coords = [_values(fm, k, "float") for k in (XMIN, YMIN, XMAX, YMAX)]
    labels = _values(fm, CLASS_LABEL, "int64")
    texts = _values(fm, CLASS_TEXT, "bytes")
    out = []
    for i, (a, b, c, d) in enumerate(zip(*coords)):
        if not all(math.isfinite(v) for v in (a, b, c, d)):
            continue
        x0, y0, x1, y1 = (min(1.0, max(0.0, v)) for v in (a, b, c, d))
        if not (x1 > x0 and y1 > y0):
            continue
        text = bytes(texts[i]).decode("utf-8", "replace") if i < len(texts) else None
        out.append(Box(x0, y0, x1, y1, labels[i] if i < len(labels) else None, text))
    return tuple(out)


@functools.lru_cache(maxsize=1)
def small_font() -> Any:
    """The font of a box's class name on the contact sheet: Pillow's own, small."""
    from PIL import ImageFont

    return ImageFont.load_default(size=9)


def draw_boxes(draw: Any, boxes: tuple[Box, ...], left: int, top: int, width: int, height: int) -> None:
    """Outline each box on the thumbnail at (left, top) of `width` x `height` pixels, in its class's
    colour, with its class name in a tab at its top left when the box is wide and tall enough."""
    font = small_font()
    for b in boxes[:MAX_DRAWN]:
        x0, y0 = left + round(b.x0 * width), top + round(b.y0 * height)
        x1, y1 = max(x0, left + round(b.x1 * width) - 1), max(y0, top + round(b.y1 * height) - 1)
        draw.rectangle([x0, y0, x1, y1], outline=b.colour, width=1 if min(x1 - x0, y1 - y0) < 6 else 2)
        if not b.text:
            continue
        name = _short(b.text)
        room = draw.textlength(name, font=font) + 4
        if x1 - x0 + 1 >= room and y1 - y0 + 1 >= 24:
            draw.rectangle([x0, y0, x0 + room - 1, y0 + 10], fill=b.colour)
            dark = sum(b.colour) > 450  # a light colour: black text reads on it
            draw.text((x0 + 2, y0), name, fill=(0, 0, 0) if dark else (255, 255, 255), font=font)


def _short(text: str, limit: int = 24) -> str:
    """A class name as one short drawable line: control characters become spaces."""
    text = "".join(" " if ch < " " or "\x7f" <= ch <= "\x9f" else ch for ch in text[: limit + 1])
    return text if len(text) <= limit else text[: limit - 1] + "…"
