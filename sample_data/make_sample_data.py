"""Regenerate sample_data/: 3 classes of small drawn shapes (mixed JPEG/PNG, one grayscale,
one GIF, one CMYK JPEG, one truncated JPEG and a notes file) -- `make demo` converts it.

Run: python sample_data/make_sample_data.py  (deterministic: same files every time)
"""

from __future__ import annotations

import os
import random

import numpy as np
from PIL import Image, ImageDraw

HERE = os.path.dirname(os.path.abspath(__file__))


def shape_image(kind: str, rng: random.Random, size: tuple[int, int]) -> Image.Image:
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
    return im


def main() -> None:
    rng = random.Random(7)
    for kind in ("circle", "square", "triangle"):
        folder = os.path.join(HERE, kind)
        os.makedirs(folder, exist_ok=True)
        for i in range(10):
            size = rng.choice([(96, 72), (72, 96), (80, 80), (120, 90)])
            im = shape_image(kind, rng, size)
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
    # One broken file (skipped with its reason) and one non-image file (ignored).
    with open(os.path.join(HERE, "triangle", "triangle_05.jpg"), "rb") as f:
        data = f.read()
    with open(os.path.join(HERE, "triangle", "triangle_broken.jpg"), "wb") as f:
        f.write(data[: len(data) // 2])
    with open(os.path.join(HERE, "notes.txt"), "w") as f:
        f.write("Sample images for `make demo`; regenerate with make_sample_data.py.\n")


if __name__ == "__main__":
    main()
