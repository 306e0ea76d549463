"""16-bit grey pixels: kept 16-bit where the target holds it, else brought to 8 bits as TensorFlow
does; used by the encoder (conversion.encode.example) and the segmentation masks (seg_masks).
numpy is imported inside: only 16-bit and float images need it, never the main process."""

from __future__ import annotations

from typing import Any

from PIL import Image

from img2tfrecord.conversion.encode.source import SkipImage

SIXTEEN = ("I;16", "I;16L", "I;16B", "I;16N")


def eight_bit(arr) -> Image.Image:  # type: ignore[no-untyped-def]
    """16-bit grey to 8 bits the way TensorFlow's `convert_image_dtype` does (v >> 8)."""
    import numpy as np  # only for 16-bit and float images; the main process never needs numpy (~16 MB)

    return Image.fromarray((np.asarray(arr, dtype=np.uint16) >> 8).astype(np.uint8))  # uint8 2-D: mode L


def sixteen_bit(im: Image.Image) -> Image.Image:
    """A 16-bit grey, 32-bit integer or float image as 16-bit grey, if that loses nothing."""
    import numpy as np

    arr = np.asarray(im)
    if im.mode in SIXTEEN:
        return gray16(arr)
    if not arr.size:
        raise SkipImage("image has no pixels")
    lo, hi = arr.min(), arr.max()
    if im.mode == "F" and not np.array_equal(arr, np.round(arr)):
        raise SkipImage(
            f"floating-point pixels ({lo:g}..{hi:g}): no lossless format TensorFlow decodes; convert them to 8- or 16-bit integers first"
        )
    if lo < 0 or hi > 65535:
        kind = "floating-point" if im.mode == "F" else "32-bit integer"
        raise SkipImage(
            f"{kind} pixel values {lo:g}..{hi:g} do not fit 16 bits (PNG, the deepest format TensorFlow decodes, holds 0..65535)"
        )
    return gray16(arr)


def gray16(arr: Any) -> Image.Image:
    """A 2-D array as Pillow's "I;16" (native-order uint16, the mode is inferred from the dtype:
    Pillow 13 refuses `fromarray(arr, "I;16")`, older Pillow deprecates the mode argument)."""
    import numpy as np

    return Image.fromarray(np.ascontiguousarray(arr, dtype="<u2"))


def resize16(im: Image.Image, size: tuple[int, int], resample: Image.Resampling) -> Image.Image:
    """Resize 16-bit grey in 32-bit integers (bicubic overshoots: clipped back to 0..65535)."""
    import numpy as np

    arr = np.asarray(im.convert("I").resize(size, resample))
    return gray16(np.clip(arr, 0, 65535))
