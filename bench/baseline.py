"""The straightforward converter that tutorials show, as the benchmark's baseline.

One process; per image: read the file, get its shape with tf.io.decode_image, build the Example
with nested tf.train.Feature(...) constructors, write it with tf.io.TFRecordWriter.
Prints {"images", "bytes", "steady_seconds"} as JSON (steady = after `import tensorflow`).
Usage: python bench/baseline.py INPUT_DIR OUTPUT_FILE
"""

from __future__ import annotations

import json
import os
import sys
import time

import tensorflow as tf


def _bytes(v: bytes) -> tf.train.Feature:
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=[v]))


def _int(v: int) -> tf.train.Feature:
    return tf.train.Feature(int64_list=tf.train.Int64List(value=[v]))


def main(input_dir: str, output: str) -> None:
    start = time.perf_counter()
    classes = sorted(d for d in os.listdir(input_dir) if os.path.isdir(os.path.join(input_dir, d)))
    n = nbytes = 0
    with tf.io.TFRecordWriter(output) as writer:
        for label, cls in enumerate(classes):
            for name in sorted(os.listdir(os.path.join(input_dir, cls))):
                with open(os.path.join(input_dir, cls, name), "rb") as f:
                    data = f.read()
                h, w, c = tf.io.decode_image(data, expand_animations=False).shape
                example = tf.train.Example(
                    features=tf.train.Features(
                        feature={
                            "image/encoded": _bytes(data),
                            "image/format": _bytes(b"JPEG"),
                            "image/height": _int(h),
                            "image/width": _int(w),
                            "image/channels": _int(c),
                            "image/colorspace": _bytes(b"RGB"),
                            "image/class/label": _int(label),
                            "image/class/text": _bytes(cls.encode()),
                            "image/filename": _bytes(name.encode()),
                        }
                    )
                )
                writer.write(example.SerializeToString())
                n += 1
                nbytes += len(data)
    print(json.dumps({"images": n, "bytes": nbytes, "steady_seconds": time.perf_counter() - start}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
