"""Test helpers: real images made with Pillow, the real TF reader, a TensorFlow-free subprocess.

Imported as `from helpers import ...` (conftest.py holds only fixtures)."""

from __future__ import annotations

import io
import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def natural_image(w: int, h: int, seed: int, mode: str = "RGB") -> Image.Image:
    """Smooth gradients + a shape + grain: compresses like a photo, differs per seed."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    a, b, c = rng.uniform(0.2, 1.0, 3)
    arr = np.stack([x * 255 * a / w, y * 255 * b / h, (x + y) * 128 * c / (w + h) + 60], -1)
    cx, cy, r = rng.integers(0, w), rng.integers(0, h), max(3, min(w, h) // 4)
    arr[(x - cx) ** 2 + (y - cy) ** 2 < r * r] = rng.integers(0, 255, 3)
    arr += rng.normal(0, 6, arr.shape)
    im = Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8), "RGB")
    return im if mode == "RGB" else im.convert(mode)


def save(im: Image.Image, path: Path, fmt: str | None = None, **kw: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    im.save(path, fmt, **kw)
    return path


def make_dataset(
    root: Path, classes: dict[str, int], *, seed: int = 0, size: tuple[int, int] = (40, 30)
) -> dict[str, list[Path]]:
    """root/CLASS/img_NNN.{jpg,png}: alternating JPEG and PNG, varied sizes."""
    rnd = random.Random(seed)
    out: dict[str, list[Path]] = {}
    for ci, (cls, n) in enumerate(classes.items()):
        for i in range(n):
            w, h = size[0] + rnd.randint(0, 12), size[1] + rnd.randint(0, 12)
            im = natural_image(w, h, seed * 1000 + ci * 100 + i)
            ext = "png" if i % 3 == 0 else "jpg"
            out.setdefault(cls, []).append(save(im, root / cls / f"img_{i:03d}.{ext}", quality=90))
    return out


def tree_with_broken(root: Path) -> Path:
    """24 images of 3 classes + 3 truncated JPEGs: with seed 0 and OPTIONS of test_beam (train=3
    shards), two land in the same train shard, so the split is re-cut after the skips."""
    files = make_dataset(root, {"cat": 8, "dog": 9, "fox": 7})
    jpeg = next(p for p in files["dog"] if p.suffix == ".jpg").read_bytes()
    for i in range(3):
        (root / "dog" / f"broken_{i}.jpg").write_bytes(jpeg[:300])
    (root / "notes.txt").write_text("not an image")
    return root


def read_records(path: Path | str, compression: str = "") -> list[dict[str, Any]]:
    """Every record of the shards of a dataset dir (or one file), parsed with tf.io.parse_single_example."""
    import tensorflow as tf

    p = Path(path)
    if p.is_dir():
        manifest = json.loads((p / "dataset.json").read_text())
        files = [str(p / sh["file"]) for sp in manifest["splits"].values() for sh in sp["shards"]]
        compression = (manifest["options"]["compression"] or "").upper()
    else:
        files = [str(p)]
    spec = {
        "image/encoded": tf.io.FixedLenFeature([], tf.string),
        "image/format": tf.io.FixedLenFeature([], tf.string),
        "image/height": tf.io.FixedLenFeature([], tf.int64),
        "image/width": tf.io.FixedLenFeature([], tf.int64),
        "image/channels": tf.io.FixedLenFeature([], tf.int64),
        "image/colorspace": tf.io.FixedLenFeature([], tf.string),
        "image/class/label": tf.io.FixedLenFeature([], tf.int64),
        "image/class/text": tf.io.FixedLenFeature([], tf.string),
        "image/filename": tf.io.FixedLenFeature([], tf.string),
    }
    out = []
    for f in files:
        for raw in tf.data.TFRecordDataset(f, compression_type=compression):
            ex = tf.io.parse_single_example(raw, spec)
            out.append({k.rsplit("/", 1)[1]: v.numpy() for k, v in ex.items()} | {"shard": os.path.basename(f)})
    return out


def decode(rec: dict[str, Any]) -> np.ndarray:
    """Pixels of a record the way a TensorFlow reader gets them."""
    import tensorflow as tf

    if rec["format"] == b"RAW":
        return np.frombuffer(rec["encoded"], np.uint8).reshape(rec["height"], rec["width"], rec["channels"])
    return tf.io.decode_image(rec["encoded"], expand_animations=False).numpy()


def pillow_pixels(path: Path, mode: str | None = None) -> np.ndarray:
    im = Image.open(path)
    if mode:
        im = im.convert(mode)
    arr = np.asarray(im)
    return arr[..., None] if arr.ndim == 2 else arr


def run_without_tensorflow(code: str, *args: Any) -> Any:
    """Run `code` in a fresh interpreter (stdout: one JSON value) and return what it printed.

    For the `tfrecord` package (PyPI): it registers TensorFlow's own protos (`tensorflow.BytesList`,
    ...) in protobuf's default pool, so importing it where TensorFlow is loaded fails with
    "duplicate symbol". Its users (PyTorch) have no TensorFlow in the process anyway.
    """
    res = subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout)


def png_bytes(im: Image.Image) -> bytes:
    buf = io.BytesIO()
    im.save(buf, "PNG")
    return buf.getvalue()


def build_dir(out: Path) -> Path:
    """Where a run into `out` builds its dataset (beside it: conversion.write.publish's workspace)."""
    from img2tfrecord.conversion.write.workspace import workspace

    return Path(workspace(str(out)).build)


def journal_file(out: Path) -> Path:
    """The --resume journal of a run into `out`."""
    from img2tfrecord.conversion.write.workspace import JOURNAL, workspace

    return Path(workspace(str(out)).journal_dir) / JOURNAL


def upload(src: Path, dst: str) -> None:
    """Copy a local tree to a tf.io.gfile file system (TensorFlow's in-memory ram://, for remote tests)."""
    from img2tfrecord.tf_import import tensorflow

    gfile = tensorflow().io.gfile
    for folder, _, files in os.walk(src):
        rel = os.path.relpath(folder, src)
        target = dst if rel == "." else f"{dst}/{rel}"
        gfile.makedirs(target)
        for f in files:
            with gfile.GFile(f"{target}/{f}", "wb") as out:
                out.write(Path(folder, f).read_bytes())


def examples(n: int) -> int:
    """A property test's example count under the loaded Hypothesis profile (tests/conftest.py): `n`
    in `make test`, ten times `n` in `make test-explore`."""
    from hypothesis import settings

    return max(1, n * settings.default.max_examples // 100)
