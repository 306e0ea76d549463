"""A segmentation dataset's mask classes as `inspect` shows them (`convert --masks-dir`, issue 43):
each class id's pixels, its share of all mask pixels and the images that hold it, summed over the
splits of dataset.json's `metadata.segmentation.per_split` (what convert counted; nothing decoded)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from img2tfrecord.format.layout import Manifest


def segmentation_classes(man: Manifest) -> dict[str, Any] | None:
    """{dir, ignore, classes: [{id, name, pixels, share, images}]} by id; None without masks."""
    seg = (man.data.get("metadata") or {}).get("segmentation")
    if not seg:
        return None
    pixels: Counter[int] = Counter()
    images: Counter[int] = Counter()
    for counts in (seg.get("per_split") or {}).values():
        pixels.update({int(k): v for k, v in counts.get("pixels", {}).items()})
        images.update({int(k): v for k, v in counts.get("images", {}).items()})
    total = sum(pixels.values()) or 1
    names = seg.get("classes") or []
    ignore = seg.get("ignore")
    rows = [
        {
            "id": i,
            "name": names[i] if i < len(names) else ("ignore" if i == ignore else None),
            "pixels": pixels[i],
            "share": round(pixels[i] / total, 6),
            "images": images[i],
        }
        for i in sorted(pixels)
    ]
    return {"dir": str(man.dir), "ignore": ignore, "classes": rows}
