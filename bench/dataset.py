"""The benchmark's dataset: deterministic, photo-like images made with Pillow and numpy.

10 class folders, mostly JPEG (quality 75-95, short side 300-500, long side 400-700, ~90 KB on
average), plus a few PNG and grayscale files. Content has smooth regions (an upsampled colour
field), edges (filled shapes), mid-frequency texture and grain, so it compresses like a photo
rather than like flat colour or pure noise. Cached under bench/.cache/ (made once).
"""

from __future__ import annotations

import io
import os
import sys

import numpy as np
from PIL import Image, ImageDraw

CACHE = os.path.join(os.path.dirname(os.path.abspath(__file__)), ".cache")
CLASSES = [f"class_{i:02d}" for i in range(10)]


def photo_like(seed: int) -> tuple[Image.Image, int, str]:
    """One image, its JPEG quality, and its file extension."""
    rng = np.random.default_rng(seed)
    short, long_ = int(rng.integers(300, 501)), int(rng.integers(400, 701))
    long_ = max(long_, short)
    w, h = (long_, short) if rng.random() < 0.7 else (short, long_)
    base = Image.fromarray(rng.uniform(0, 255, (6, 8, 3)).astype(np.uint8)).resize((w, h), Image.BICUBIC)
    draw = ImageDraw.Draw(base)
    for _ in range(int(rng.integers(4, 10))):
        x0, y0 = int(rng.integers(0, w)), int(rng.integers(0, h))
        box = [x0, y0, x0 + int(rng.integers(20, w // 2)), y0 + int(rng.integers(20, h // 2))]
        colour = tuple(int(c) for c in rng.integers(0, 255, 3))
        (draw.ellipse if rng.random() < 0.5 else draw.rectangle)(box, fill=colour)
    arr = np.asarray(base).astype(np.float32)
    texture = Image.fromarray(rng.uniform(0, 255, (h // 4, w // 4)).astype(np.uint8)).resize((w, h), Image.BILINEAR)
    arr += (np.asarray(texture, np.float32)[..., None] - 128) * 0.4
    arr += rng.normal(0, 12, arr.shape)
    im = Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8))
    kind = rng.random()
    if kind < 0.03:
        return im, 0, "png"
    if kind < 0.06:
        return im.convert("L"), int(rng.integers(75, 96)), "jpg"
    return im, int(rng.integers(75, 96)), "jpg"


def make(n: int = 4000) -> str:
    """Create (once) and return bench/.cache/images-N."""
    root = os.path.join(CACHE, f"images-{n}")
    done = os.path.join(root, ".complete")
    if os.path.exists(done):
        return root
    base = os.path.join(CACHE, "images-4000")
    if n != 4000 and n % 4000 == 0:  # larger sets: hard links to the 4,000 (same bytes, new names)
        make(4000)
        for c in CLASSES:
            os.makedirs(os.path.join(root, c), exist_ok=True)
            for name in os.listdir(os.path.join(base, c)):
                for copy in range(n // 4000):
                    dst = os.path.join(root, c, f"{copy}_{name}")
                    if not os.path.exists(dst):
                        os.link(os.path.join(base, c, name), dst)
    else:
        for i in range(n):
            cls = CLASSES[i % len(CLASSES)]
            os.makedirs(os.path.join(root, cls), exist_ok=True)
            im, quality, ext = photo_like(i)
            buf = io.BytesIO()
            im.save(buf, "PNG" if ext == "png" else "JPEG", **({"quality": quality} if quality else {}))
            with open(os.path.join(root, cls, f"img_{i:06d}.{ext}"), "wb") as f:
                f.write(buf.getvalue())
            if i % 500 == 0:
                print(f"  generating bench images: {i}/{n}", file=sys.stderr)
    open(done, "w").close()
    return root


if __name__ == "__main__":
    print(make(int(sys.argv[1]) if len(sys.argv) > 1 else 4000))
