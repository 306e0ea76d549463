"""An annotated image's boxes as its record stores them (`convert --annotations`).

The plan clipped and normalised the boxes in the pixels as stored in the file
(conversion.plan.detection). Here, per image, after the encoder has read it: an image whose
annotation recorded another size than the file stores is skipped (a tool that applied the EXIF
orientation, or another file of the same name), and when the encoder turned the pixels upright
(EXIF orientation, in the modes that re-encode), the boxes turn with them. Normalised boxes need
nothing for `--resize`. Masks (`--masks`) are made here too, by conversion.encode.masks.
"""

from __future__ import annotations

import hashlib

from img2tfrecord.conversion.encode import masks
from img2tfrecord.conversion.plan.raw_boxes import Segment, SegmentRows
from img2tfrecord.conversion.plan.table import Objects
from img2tfrecord.format.schema import MetaValue

_Box = tuple[float, float, float, float]  # xmin, ymin, xmax, ymax, normalised


def size_problem(objects: Objects, *, width: int, height: int) -> str | None:
    """Why the boxes do not fit an image that stores `width` x `height` pixels, or None."""
    if objects.width <= 0 or (objects.width, objects.height) == (width, height):
        return masks.problem(_segments(objects), width, height)
    turned = " (its width and height swapped: a tool that applied the EXIF orientation?)"
    return (
        f"the annotation is of a {objects.width}x{objects.height} image, the file stores {width}x{height} pixels"
        + (turned if (objects.height, objects.width) == (width, height) else "")
        + "; boxes follow the pixels as stored"
    )


def _segments(objects: Objects) -> tuple[Segment, ...] | None:
    """The masks' segmentations (--masks), made from the plan's rows when its Task was."""
    assert not isinstance(objects.masks, SegmentRows), "a Task's masks are Segments"
    return objects.masks


def turn(box: _Box, orientation: int) -> _Box:
    """A normalised box after the pixels were turned upright from EXIF `orientation` (2-8), as Pillow's
    transposes do (ImageOps.exif_transpose)."""
    x0, y0, x1, y1 = box
    return {
        2: (1 - x1, y0, 1 - x0, y1),  # mirrored left-right
        3: (1 - x1, 1 - y1, 1 - x0, 1 - y0),  # 180
        4: (x0, 1 - y1, x1, 1 - y0),  # mirrored top-bottom
        5: (y0, x0, y1, x1),  # transposed
        6: (1 - y1, x0, 1 - y0, x1),  # turned 90 clockwise
        7: (1 - y1, 1 - x1, 1 - y0, 1 - x0),  # transversed
        8: (y0, 1 - x1, y1, 1 - x0),  # turned 90 counter-clockwise
    }.get(orientation, box)


def features(
    objects: Objects, payload: bytes, *, width: int, height: int, orientation: int, out: tuple[int, int]
) -> tuple[MetaValue, ...]:
    """The Object Detection API's features of one record; `width` x `height` the pixels as stored
    in the source file, `orientation` the EXIF turn the encoder applied (1: none), `out` the
    record's width and height (the masks' size)."""
    xmin, ymin, xmax, ymax = objects.xmin, objects.ymin, objects.xmax, objects.ymax
    if orientation not in (1, 0):
        turned = [turn(b, orientation) for b in zip(xmin, ymin, xmax, ymax)]
        xmin, ymin, xmax, ymax = (tuple(b[i] for b in turned) for i in range(4))
    scale = width * height if objects.width <= 0 else 1  # YOLO's areas are fractions of the image
    mask_feature: tuple[MetaValue, ...] = ()
    if objects.masks is not None:  # --masks
        pngs = masks.pngs(_segments(objects) or (), width, height, orientation, out)
        mask_feature = (MetaValue("image/object/mask", "bytes", pngs),)
    return (
        MetaValue("image/key/sha256", "bytes", (hashlib.sha256(payload).hexdigest(),)),
        MetaValue("image/object/area", "float", objects.area if scale == 1 else tuple(a * scale for a in objects.area)),
        MetaValue("image/object/bbox/xmax", "float", xmax),
        MetaValue("image/object/bbox/xmin", "float", xmin),
        MetaValue("image/object/bbox/ymax", "float", ymax),
        MetaValue("image/object/bbox/ymin", "float", ymin),
        MetaValue("image/object/class/label", "int64", objects.label),
        MetaValue("image/object/class/text", "bytes", objects.text),
        MetaValue("image/object/difficult", "int64", objects.difficult),
        MetaValue("image/object/is_crowd", "int64", objects.is_crowd),
        *mask_feature,
        MetaValue("image/object/truncated", "int64", objects.truncated),
        MetaValue("image/source_id", "bytes", (objects.source_id,)),
    )
