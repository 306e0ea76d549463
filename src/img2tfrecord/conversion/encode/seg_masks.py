"""An image's segmentation mask as its record stores it (`convert --masks-dir`): class ids in a lossless PNG.

What a mask's pixels mean (the classic mistake is to read a palette mask's colours): a one-channel
mask's values (L, I;16, 1-bit) are the class ids; a palette (P) mask's palette indices are, never
its colours (Pascal VOC's `SegmentationClass`); an RGB mask's colours are looked up in the colour
map (conversion.plan.mask_colors), and a pixel of a colour not in it skips the image, naming the
colour and how many pixels have it. The ids are written as `image/segmentation/class/encoded`, a
PNG of 8 bits, or of 16 where an id passes 255, with `image/segmentation/class/format` "png": the
keys DeepLab's converters write and the Model Garden's segmentation decoder reads.

Size and orientation (the rule): the mask is drawn on the pixels the record stores. Where the
encoder turns a photo upright (its EXIF orientation, in the modes that re-encode), that is the
upright photo, so a mask drawn on what a viewer shows fits it as it is; where it keeps the file's
bytes (`--encoding keep`, whose readers ignore EXIF), that is the file's own pixel grid. A mask of
another size is a skip with both sizes (and, when only width and height are swapped, the likely
cause). `--resize` resizes the mask with the image, by nearest neighbour, so ids stay ids.
"""

from __future__ import annotations

import functools
import io
from typing import Any, NamedTuple

from PIL import Image

from img2tfrecord.conversion.encode.sixteen import gray16
from img2tfrecord.conversion.encode.source import SkipImage, describe_error, read_source
from img2tfrecord.conversion.plan.mask_colors import MaskSettings, mask_settings
from img2tfrecord.conversion.plan.options import EncodeOptions
from img2tfrecord.format.schema import SEGMENTATION_ENCODED, SEGMENTATION_FORMAT, MetaValue

_SWAPPED = (5, 6, 7, 8)


class StoredMask(NamedTuple):
    """A mask as its record holds it: the features, and the pixels of each class id (dataset.json's counts)."""

    features: tuple[MetaValue, ...]
    pixels: dict[
        str, int
    ]  # class id (as text, a JSON key) -> its pixels in the stored mask  # EXIF orientations whose upright image has width and height swapped


def stored_size(source: tuple[int, int], turned: int) -> tuple[int, int]:
    """The (width, height) of the pixels a record stores before any resize: the source's, upright
    when the encoder turned it (`turned`: the EXIF orientation it applied, 1 none)."""
    return (source[1], source[0]) if turned in _SWAPPED else source


def mask_features(
    path: str,
    opts: EncodeOptions,
    *,
    source: tuple[int, int],
    turned: int,
    kept_turn: bool,
    out: tuple[int, int],
) -> StoredMask | str:
    """The mask at `path` as the record's features, or why the image is skipped. `source`: the
    (width, height) the image file stores; `turned`: the EXIF orientation the encoder applied (1:
    none, the file's pixels kept as they are); `kept_turn`: the file has an EXIF orientation the
    record leaves to its reader (keep mode); `out`: the record's (width, height)."""
    settings = _settings(opts.mask_colors, opts.mask_ignore)
    size = stored_size(source, turned)
    try:
        im = Image.open(io.BytesIO(read_source(path, opts.max_pixels)))
        if im.format != "PNG":
            return f"its mask {path} is not a PNG ({im.format or 'unknown format'})"
        if im.size != size:  # told by the header, before any pixel is decoded
            return f"its mask {path} is {im.size[0]}x{im.size[1]}, the image stores {size[0]}x{size[1]} pixels" + (
                _swapped(turned, kept_turn) if im.size == (size[1], size[0]) else ""
            )
        im.load()
    except SkipImage as e:
        return f"its mask {path}: {e}"
    except Exception as e:  # Pillow raises OSError, SyntaxError, ValueError, EOFError...
        return f"its mask {path} cannot be read: {describe_error(e)}"
    ids = class_ids(im, settings)
    if isinstance(ids, str):
        return f"its mask {path} {ids}"
    return stored(ids, out)


@functools.lru_cache(maxsize=4)
def _settings(colors: str | None, ignore: int) -> MaskSettings:
    """The colour map, read once a worker (the plan checked it: conversion.plan.job)."""
    return mask_settings(colors, ignore)


def _swapped(turned: int, kept_turn: bool) -> str:
    """Why a mask may have the image's width and height swapped: drawn on the photo turned otherwise
    than the record stores it ("" when the photo has no EXIF orientation)."""
    if turned in _SWAPPED:
        return " (width and height swapped: drawn on the file's pixels as stored? the photo is stored upright, by its EXIF orientation)"
    if kept_turn:
        return (
            " (width and height swapped: drawn on the photo turned upright by its EXIF orientation? the record keeps "
            "the file's own pixels; --encoding png stores them upright)"
        )
    return ""


def class_ids(im: Image.Image, settings: MaskSettings) -> Any:
    """The class id of every pixel of mask `im` (a 2-D uint8 or uint16 array), or why there are none."""
    import numpy as np  # deferred: only segmentation needs it in the workers

    mode = im.mode
    if mode in ("L", "P", "I;16", "I;16B", "I;16L", "I"):
        arr = np.asarray(im)
    elif mode in ("LA", "PA"):
        arr = np.asarray(im)[..., 0]
    elif mode == "1":
        arr = np.asarray(im).astype(np.uint8)
    elif mode in ("RGB", "RGBA"):
        return _from_colors(np.asarray(im)[..., :3], settings)
    else:
        return f"is a {mode} image: a mask holds class ids (grey or palette) or colours of a colour map (RGB)"
    if arr.dtype.kind in "iu" and arr.size and (arr.min() < 0 or arr.max() > 65535):
        return f"holds values {arr.min()}..{arr.max()}: class ids are 0..65535"
    return arr.astype(np.uint16 if arr.dtype.itemsize > 1 else np.uint8)


def _from_colors(rgb: Any, settings: MaskSettings) -> Any:
    """An RGB mask's ids through the colour map; why not when it has none or a colour is not in it."""
    import numpy as np

    if settings.colors is None:
        return (
            "is an RGB image: its colours need a colour map (--mask-colors FILE of r,g,b,name lines, voc or cityscapes)"
        )
    keys = (rgb[..., 0].astype(np.uint32) << 16) | (rgb[..., 1].astype(np.uint32) << 8) | rgb[..., 2]
    found, inverse, counts = np.unique(keys.ravel(), return_inverse=True, return_counts=True)
    table = {(c.rgb[0] << 16) | (c.rgb[1] << 8) | c.rgb[2]: c.id for c in settings.colors}
    unlisted = [(int(n), int(k)) for k, n in zip(found, counts) if int(k) not in table]
    if unlisted:
        n, k = min(unlisted, key=lambda u: (-u[0], u[1]))  # the most frequent first, then by colour
        more = f" (and {len(unlisted) - 1} other colours not in it)" if len(unlisted) > 1 else ""
        return (
            f"has colour ({k >> 16}, {(k >> 8) & 255}, {k & 255}), which the colour map ({settings.colors_from}) "
            f"does not list: {n} pixels{more}"
        )
    ids = np.array([table[int(k)] for k in found], dtype=np.uint16)[inverse].reshape(keys.shape)
    return ids if ids.size and ids.max() > 255 else ids.astype(np.uint8)


def stored(ids: Any, out: tuple[int, int]) -> StoredMask:
    """The ids as the record stores them, a PNG of (width, height) `out` (resized by nearest
    neighbour when that is not their size): 8-bit grey, or 16-bit when an id passes 255."""
    import numpy as np

    if (ids.shape[1], ids.shape[0]) != out:
        ids = np.asarray(Image.fromarray(ids.astype(np.int32)).resize(out, Image.Resampling.NEAREST))
    wide = bool(ids.size) and int(ids.max()) > 255
    im = gray16(ids) if wide else Image.fromarray(ids.astype(np.uint8))
    buf = io.BytesIO()
    im.save(buf, "PNG")
    counts = np.bincount(ids.ravel())  # one pass (np.unique sorts every pixel: ~3x the time)
    found = np.flatnonzero(counts)
    counts = counts[found]
    features = (
        MetaValue(SEGMENTATION_ENCODED, "bytes", (buf.getvalue(),)),
        MetaValue(SEGMENTATION_FORMAT, "bytes", ("png",)),
    )
    return StoredMask(features, {str(int(k)): int(n) for k, n in zip(found, counts)})
