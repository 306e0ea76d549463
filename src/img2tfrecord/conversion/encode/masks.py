"""An annotated image's instance masks as its record stores them (`convert --masks`).

The plan carries each kept object's COCO segmentation (conversion.plan.coco_masks); here, in the
worker, pycocotools rasterizes it exactly as COCO's own API does (`COCO.annToRLE`: polygons merged
by `frPyObjects`, RLE decoded), at the image's stored size; the mask turns with the pixels when the
encoder turned them upright, and follows `--resize` by nearest neighbour, so every mask is the
record's height x width, as the Model Garden's decoder stacks them. Each is a one-channel PNG of
0 and 1, the Object Detection API's `image/object/mask`.
"""

from __future__ import annotations

import io
from typing import Any

from PIL import Image

from img2tfrecord.conversion.encode.source import EXIF_TRANSPOSE
from img2tfrecord.conversion.plan.coco_polygons import clip_far
from img2tfrecord.conversion.plan.raw_boxes import Segment


def rle_total(text: str) -> int:
    """The pixels a compressed RLE's counts cover (COCO's text form: 5 bits a character, 0x20 more
    to come, runs after the second stored as differences), so that a count of the wrong image is
    refused before pycocotools writes its runs into a mask of the image's size."""
    total, i = 0, 0
    prev: list[int] = []
    data = text.encode("ascii")
    while i < len(data):
        x = k = 0
        more = True
        while more:
            c = data[i] - 48
            x |= (c & 0x1F) << (5 * k)
            more = bool(c & 0x20)
            i, k = i + 1, k + 1
            if not more and c & 0x10:
                x |= -1 << (5 * k)
        if len(prev) > 2:
            x += prev[-2]
        if x < 0:
            return -1
        prev.append(x)
        total += x
    return total


def problem(segments: tuple[Segment, ...] | None, width: int, height: int) -> str | None:
    """Why the masks cannot be made for an image that stores `width` x `height` pixels, or None."""
    for i, s in enumerate(segments or ()):
        if s.polygons:
            continue
        if (s.height, s.width) != (height, width):
            return f"mask {i}'s RLE is of a {s.width}x{s.height} image, the file stores {width}x{height} pixels"
        try:
            total = sum(s.counts) if s.counts else rle_total(s.text)
        except (IndexError, UnicodeEncodeError):
            total = -1
        if total != width * height:
            return f"mask {i}'s RLE counts cover {total} pixels, not the image's {width * height}"
    return None


def _rle(mask: Any, s: Segment, height: int, width: int) -> Any:
    """The object's RLE as COCO.annToRLE makes it (pycocotools' `mask` module as `mask`); polygons
    reaching far outside the image clipped to it first (plan.coco_polygons: pycocotools' memory
    follows the outline; the plan dropped a box whose segmentation is still too long or empty)."""
    if s.polygons:
        polygons = clip_far(s.polygons, width, height)
        if not polygons:  # none of it inside (the plan dropped such a box): an empty mask
            import numpy as np  # deferred, as pycocotools (which needs it)

            return mask.encode(np.zeros((height, width), dtype=np.uint8, order="F"))
        return mask.merge(mask.frPyObjects([list(p) for p in polygons], height, width))
    if s.counts:
        return mask.frPyObjects({"counts": list(s.counts), "size": [s.height, s.width]}, height, width)
    return {"counts": s.text.encode("ascii"), "size": [s.height, s.width]}


def pngs(
    segments: tuple[Segment, ...], width: int, height: int, orientation: int, out: tuple[int, int]
) -> tuple[bytes, ...]:
    """Each object's mask as PNG bytes: rasterized at the stored `width` x `height`, turned from EXIF
    `orientation` as the pixels were, resized to `out` (the record's width, height) by nearest neighbour."""
    from pycocotools import mask  # deferred: only --masks needs it (convert checks it is installed)

    got = []
    for s in segments:
        im = Image.fromarray(mask.decode(_rle(mask, s, height, width)).copy(order="C"))  # uint8: mode L
        if orientation in EXIF_TRANSPOSE:
            im = im.transpose(EXIF_TRANSPOSE[orientation])
        if im.size != out:
            im = im.resize(out, Image.Resampling.NEAREST)
        buf = io.BytesIO()
        im.save(buf, "PNG")
        got.append(buf.getvalue())
    return tuple(got)
