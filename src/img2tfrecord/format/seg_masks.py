"""How `load(as_dict=True)` hands back a segmentation record's mask (`convert --masks-dir`): its PNG
of class ids decoded as the `segmentation_mask` entry, HxWx1 like the image.

One dtype for the whole dataset, since a `tf.data` element has one: uint16 when dataset.json's
counts hold an id past 255, else uint8. A record stores its mask in 8 bits where its own ids fit,
so in a 16-bit dataset an 8-bit PNG is decoded as 8 bits and widened (decoding it straight to
uint16 would scale each id by 257).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from img2tfrecord.format.schema import SEGMENTATION_ENCODED

MASK_KEY = "segmentation_mask"


def mask_dtype(metadata: dict[str, Any] | None) -> str | None:
    """ "uint16" or "uint8" for a segmentation dataset (its widest id), None for any other."""
    seg = (metadata or {}).get("segmentation")
    if not seg:
        return None
    ids = [int(k) for counts in seg.get("per_split", {}).values() for k in counts.get("pixels", {})]
    return "uint16" if any(i > 255 for i in ids) else "uint8"


def mask_decoder(tf: Any, metadata: dict[str, Any] | None) -> Callable[[Any], Any] | None:
    """A graph function (parsed example) -> its mask, HxWx1 of `mask_dtype`; None without masks."""
    dtype = mask_dtype(metadata)
    if dtype is None:
        return None

    def decode(ex: Any) -> Any:
        png = ex[SEGMENTATION_ENCODED]
        if dtype == "uint8":
            return tf.io.decode_png(png, channels=1, dtype=tf.uint8)
        sixteen = tf.equal(tf.strings.substr(png, 24, 1), b"\x10")  # the IHDR's bit depth
        return tf.cond(
            sixteen,
            lambda: tf.io.decode_png(png, channels=1, dtype=tf.uint16),
            lambda: tf.cast(tf.io.decode_png(png, channels=1, dtype=tf.uint8), tf.uint16),
        )

    return decode


def resized_mask(tf: Any, mask: Any, image_size: tuple[int, int] | None) -> Any:
    """The mask at load()'s `image_size`, by nearest neighbour (ids stay ids, the dtype kept)."""
    return mask if image_size is None else tf.image.resize(mask, image_size, method="nearest")
