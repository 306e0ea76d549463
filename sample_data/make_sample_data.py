"""Regenerate sample_data/: 3 classes of small drawn shapes (mixed JPEG/PNG, one grayscale,
one GIF, one CMYK JPEG, one truncated JPEG and a notes file) -- `make demo` converts it -- and
annotations.json, the same images as a COCO object detection set (each shape's box, in pixels as
stored), which `make demo`'s second step converts with `--annotations`.

Run: python sample_data/make_sample_data.py  (deterministic: same files every time)
"""

from __future__ import annotations

import json
import os
import random

import numpy as np
from PIL import Image, ImageDraw

HERE = os.path.dirname(os.path.abspath(__file__))


def shape_image(kind: str, rng: random.Random, size: tuple[int, int]) -> tuple[Image.Image, list[int]]:
    """The image and its shape's box as COCO writes one: [x, y, width, height] in pixels."""
    w, h = size
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([(x * 255 // w), (y * 255 // h), np.full_like(x, rng.randrange(256))], axis=-1).astype(np.float32)
    noise = np.random.default_rng(rng.randrange(1 << 30)).normal(0, 12, (h, w, 3))
    im = Image.fromarray(np.clip(base * 0.6 + noise + 40, 0, 255).astype(np.uint8), "RGB")
    d = ImageDraw.Draw(im)
    cx, cy, r = w // 2 + rng.randint(-8, 8), h // 2 + rng.randint(-6, 6), min(w, h) // 3
    color = tuple(rng.randrange(150, 256) for _ in range(3))
    if kind == "circle":
        d.ellipse([cx - r, cy - r, cx + r, cy + r], fill=color, outline=(0, 0, 0), width=2)
    elif kind == "square":
        d.rectangle([cx - r, cy - r, cx + r, cy + r], fill=color, outline=(0, 0, 0), width=2)
    else:
        d.polygon([(cx, cy - r), (cx - r, cy + r), (cx + r, cy + r)], fill=color, outline=(0, 0, 0))
    return im, [cx - r, cy - r, 2 * r + 1, 2 * r + 1]


def main() -> None:
    rng = random.Random(7)
    coco: dict[str, list[dict]] = {"images": [], "annotations": [], "categories": []}
    for category, kind in enumerate(("circle", "square", "triangle"), start=1):
        coco["categories"].append({"id": category, "name": kind})
        folder = os.path.join(HERE, kind)
        os.makedirs(folder, exist_ok=True)
        for i in range(10):
            size = rng.choice([(96, 72), (72, 96), (80, 80), (120, 90)])
            im, box = shape_image(kind, rng, size)
            name = os.path.join(folder, f"{kind}_{i:02d}")
            if i == 0:
                im.convert("L").save(name + ".png")  # grayscale
            elif i % 3 == 0:
                im.save(name + ".png")
            elif i == 7 and kind == "circle":
                im.convert("P", palette=Image.Palette.ADAPTIVE).save(name + ".gif")  # transcoded to PNG
            elif i == 7 and kind == "square":
                im.convert("CMYK").save(name + ".jpg", quality=90)  # CMYK JPEG: transcoded to RGB JPEG
            else:
                im.save(name + ".jpg", quality=rng.choice([80, 90, 95]))
            _annotate(
                coco, category, box, size, next(n for n in os.listdir(folder) if n.startswith(f"{kind}_{i:02d}."))
            )
    # One broken file (skipped with its reason) and one non-image file (ignored).
    with open(os.path.join(HERE, "triangle", "triangle_05.jpg"), "rb") as f:
        data = f.read()
    with open(os.path.join(HERE, "triangle", "triangle_broken.jpg"), "wb") as f:
        f.write(data[: len(data) // 2])
    with open(os.path.join(HERE, "annotations.json"), "w") as f:
        f.write(_coco_text(coco))
    with open(os.path.join(HERE, "notes.txt"), "w") as f:
        f.write("Sample images for `make demo`; regenerate with make_sample_data.py.\n")


def _annotate(coco: dict[str, list[dict]], category: int, box: list[int], size: tuple[int, int], name: str) -> None:
    """One image and its one box in the COCO set; file names are relative to sample_data/."""
    kind = name.split("_")[0]
    image_id = len(coco["images"]) + 1
    coco["images"].append({"id": image_id, "file_name": f"{kind}/{name}", "width": size[0], "height": size[1]})
    x, y, w, h = box
    coco["annotations"].append(
        {"id": image_id, "image_id": image_id, "category_id": category, "bbox": box, "area": w * h, "iscrowd": 0}
    )


def _coco_text(coco: dict[str, list[dict]]) -> str:
    """The COCO set as JSON with one image, box or category a line: readable, and diffs by the line."""
    parts = [f'"{key}": [\n' + ",\n".join("  " + json.dumps(row) for row in rows) + "\n]" for key, rows in coco.items()]
    return "{\n" + ",\n".join(parts) + "\n}\n"


if __name__ == "__main__":
    main()
