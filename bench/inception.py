"""A contender in the style of Inception's `build_image_data.py` (tensorflow/models, research/inception).

What that script does, in TensorFlow 2 (eager instead of a shared tf.Session): N Python threads,
each owning a contiguous range of the shuffled file list cut into `shards / threads` shards of its
own; per image, read the file, decode it with `tf.io.decode_jpeg(channels=3)` for the dimensions,
re-encode PNGs to JPEG at quality 100 first; build the Example with `tf.train.Feature`
constructors; one `tf.io.TFRecordWriter` per shard. Labels from 1, as the script numbers them.
Prints {"images", "bytes", "steady_seconds"} as JSON (steady = after `import tensorflow`).

Usage: python bench/inception.py INPUT_DIR OUTPUT_DIR [--threads 2] [--shards 8]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import threading
import time

import numpy as np
import tensorflow as tf


def _bytes(v: bytes) -> tf.train.Feature:
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=[v]))


def _int(v: int) -> tf.train.Feature:
    return tf.train.Feature(int64_list=tf.train.Int64List(value=[v]))


def _find_files(root: str) -> list[tuple[str, int, str]]:
    classes = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
    files = []
    for label, cls in enumerate(classes, start=1):  # the script leaves 0 for "background"
        files += [(os.path.join(root, cls, n), label, cls) for n in sorted(os.listdir(os.path.join(root, cls)))]
    random.seed(12345)
    random.shuffle(files)
    return files


def _process(path: str) -> tuple[bytes, int, int]:
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] == b"\x89PNG\r\n\x1a\n":  # the script checks the name; the bench's PNGs are named .png
        data = tf.io.encode_jpeg(tf.io.decode_png(data, channels=3), format="rgb", quality=100).numpy()
    image = tf.io.decode_jpeg(data, channels=3)
    return data, int(image.shape[0]), int(image.shape[1])


def _thread(
    files: list, ranges: list[tuple[int, int]], out_dir: str, first_shard: int, total: int, tally: list
) -> None:
    n = nbytes = 0
    for i, (a, b) in enumerate(ranges):
        name = os.path.join(out_dir, f"train-{first_shard + i:05d}-of-{total:05d}")
        with tf.io.TFRecordWriter(name) as writer:
            for path, label, text in files[a:b]:
                data, height, width = _process(path)
                example = tf.train.Example(
                    features=tf.train.Features(
                        feature={
                            "image/height": _int(height),
                            "image/width": _int(width),
                            "image/colorspace": _bytes(b"RGB"),
                            "image/channels": _int(3),
                            "image/class/label": _int(label),
                            "image/class/text": _bytes(text.encode()),
                            "image/format": _bytes(b"JPEG"),
                            "image/filename": _bytes(os.path.basename(path).encode()),
                            "image/encoded": _bytes(data),
                        }
                    )
                )
                writer.write(example.SerializeToString())
                n += 1
                nbytes += os.path.getsize(path)
    tally.append((n, nbytes))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("input")
    ap.add_argument("output")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--shards", type=int, default=8)
    args = ap.parse_args()
    assert not args.shards % args.threads, "the script asserts shards % threads == 0"
    start = time.perf_counter()
    files = _find_files(args.input)
    os.makedirs(args.output, exist_ok=True)
    # As the script: the list cut into `threads` contiguous ranges, each cut into its shards.
    spacing = np.linspace(0, len(files), args.threads + 1).astype(int)
    per_thread = args.shards // args.threads
    tally: list = []
    threads = []
    for t in range(args.threads):
        cuts = np.linspace(spacing[t], spacing[t + 1], per_thread + 1).astype(int)
        ranges = list(zip(cuts[:-1], cuts[1:]))
        th = threading.Thread(target=_thread, args=(files, ranges, args.output, t * per_thread, args.shards, tally))
        th.start()
        threads.append(th)
    for th in threads:
        th.join()
    n, nbytes = sum(x[0] for x in tally), sum(x[1] for x in tally)
    print(json.dumps({"images": n, "bytes": nbytes, "steady_seconds": time.perf_counter() - start}))


if __name__ == "__main__":
    main()
