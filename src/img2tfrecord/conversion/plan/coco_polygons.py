"""COCO polygons made safe to rasterize (`convert --masks`), one rule for the plan and the worker.

pycocotools draws a polygon's outline at 5 times the pixel grid, every point of it in memory, with
the coordinates cast to C ints: a polygon of `[1e300, 2, -1e300, 4, 5, 1e300]` on an 80x80 image
asked for 22 GB (the kernel killed the run, no message), `1e8` overflowed into a segfault. So:

- a polygon within `[-width, 2 * width] x [-height, 2 * height]` is rasterized as given (exactly
  COCO's own API: real polygons stray a little past the edge);
- a segmentation reaching beyond that is clipped to that frame (Sutherland-Hodgman: the region
  inside the image kept, up to the rounding of pycocotools' grid where a cut edge crosses it; the
  new edges run along the frame, outside the image), and named as a box problem ("... clipped");
  one with nothing left inside the frame is dropped, named;
- a segmentation whose outline, once so, is longer than `OUTLINE` times the image's width plus
  height (what pycocotools' memory follows; real ones are a few times) is dropped, named.

The plan (conversion.plan.detection.clip) decides; the worker (conversion.encode.masks) clips by
the same `clip_far` before rasterizing, so its memory is bounded by the image's size.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from typing import Any, NamedTuple

OUTLINE = 100  # times (width + height): the longest outline a segmentation may have
Polygon = tuple[float, ...]  # x1, y1, x2, y2, ... in pixels


class Reach(NamedTuple):
    """A segmentation's extent and outline (the sum of its edges' longer side, as pycocotools
    walks them, the closing edge included)."""

    xmin: float
    ymin: float
    xmax: float
    ymax: float
    outline: float


def far(reach: Reach, width: int, height: int) -> bool:
    """Whether a segmentation of this reach goes beyond what is rasterized as given."""
    return reach.xmin < -width or reach.ymin < -height or reach.xmax > 2 * width or reach.ymax > 2 * height


def reach_of(polygons: Sequence[Polygon], with_outline: bool = True) -> Reach:
    """`Reach` of `polygons` (each of 3 points or more); its outline 0 unless `with_outline`."""
    xmin = min(min(p[0::2]) for p in polygons)
    ymin = min(min(p[1::2]) for p in polygons)
    xmax = max(max(p[0::2]) for p in polygons)
    ymax = max(max(p[1::2]) for p in polygons)
    return Reach(xmin, ymin, xmax, ymax, sum(outline(p) for p in polygons) if with_outline else 0.0)


def outline(p: Polygon) -> float:
    """One polygon's outline: each edge's longer side, the closing edge included."""
    xs, ys = p[0::2], p[1::2]
    return sum(  # past a double: inf, which is over any bound (fsum would raise)
        max(abs(x1 - x0), abs(y1 - y0)) for x0, y0, x1, y1 in zip(xs, ys, (*xs[1:], xs[0]), (*ys[1:], ys[0]))
    )


def clip_far(polygons: Sequence[Polygon], width: int, height: int) -> tuple[Polygon, ...]:
    """`polygons` as they are rasterized: as given when none is far; else each clipped to the
    frame `far` measures against, those with nothing left inside it left out."""
    polys = tuple(polygons)
    if not polys or not far(reach_of(polys, with_outline=False), width, height):
        return polys
    box = (-float(width), -float(height), 2.0 * width, 2.0 * height)
    return tuple(q for p in polys if len(q := _clip(p, *box)) >= 6)


def problem(polygons: Sequence[Polygon], width: int, height: int, reach: Reach | None = None) -> str:
    """Why a segmentation is clipped or dropped ("" when it is rasterized as given); `reach`:
    its Reach when known (the plan computes every one at once)."""
    reach = reach or reach_of(polygons)
    if far(reach, width, height):
        clipped = clip_far(polygons, width, height)
        if not clipped:
            return "its segmentation lies far outside the image: dropped"
        reach = reach_of(clipped)
        why = "its segmentation reaches far outside the image: clipped"
    else:
        why = ""
    if reach.outline > OUTLINE * (width + height):
        return f"its segmentation's outline is longer than {OUTLINE} times the image's width and height: dropped"
    return why


def _clip(p: Polygon, x0: float, y0: float, x1: float, y1: float) -> Polygon:
    """Polygon `p` clipped to the rectangle (Sutherland-Hodgman, one side at a time), for any
    finite coordinates (`_cross`)."""
    pts: list[tuple[float, float]] = list(zip(p[0::2], p[1::2]))
    for axis, bound, low in ((0, x0, True), (0, x1, False), (1, y0, True), (1, y1, False)):
        if not pts:
            break
        out: list[tuple[float, float]] = []
        prev = pts[-1]
        prev_in = (prev[axis] >= bound) if low else (prev[axis] <= bound)
        for cur in pts:
            cur_in = (cur[axis] >= bound) if low else (cur[axis] <= bound)
            if cur_in != prev_in:
                out.append(_cross(prev, cur, axis, bound))
            if cur_in:
                out.append(cur)
            prev, prev_in = cur, cur_in
        pts = out
    return tuple(v for pt in pts for v in pt)


_FLOAT_BELOW = 2.0**20  # coordinates below this: a crossing in floats is off by 1e-10 pixels at most


def _cross(a: Any, b: Any, axis: int, bound: float) -> tuple[float, float]:
    """Where edge a-b crosses the line `axis` = `bound` (a and b on either side of it); exactly
    (fractions) when a coordinate is so large that a float's rounding there exceeds the image."""
    o = 1 - axis
    if max(abs(a[0]), abs(a[1]), abs(b[0]), abs(b[1])) < _FLOAT_BELOW:
        other = a[o] + (b[o] - a[o]) * ((bound - a[axis]) / (b[axis] - a[axis]))
    else:
        at, ao = Fraction(a[axis]), Fraction(a[o])
        other = float(ao + (Fraction(b[o]) - ao) * ((Fraction(bound) - at) / (Fraction(b[axis]) - at)))
    other = min(max(a[o], b[o]), max(min(a[o], b[o]), other))
    return (bound, other) if axis == 0 else (other, bound)
