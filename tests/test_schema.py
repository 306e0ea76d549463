"""The TensorFlow-free Example writer gives exactly TensorFlow's bytes."""

from __future__ import annotations

import pytest

from img2tfrecord.schema import parse_example, serialize_example


@pytest.mark.parametrize("payload", [b"", b"\xff\xd8" + bytes(range(256)) * 500])
def test_serialized_example_matches_tensorflow(payload):
    import tensorflow as tf

    ours = serialize_example(
        encoded=payload, image_format="JPEG", height=375, width=500, channels=3, label=7,
        text="café".encode(), filename="café/a b.jpg".encode(),
    )  # fmt: skip
    ex = tf.train.Example(features=tf.train.Features(feature={
        "image/encoded": tf.train.Feature(bytes_list=tf.train.BytesList(value=[payload])),
        "image/format": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"JPEG"])),
        "image/height": tf.train.Feature(int64_list=tf.train.Int64List(value=[375])),
        "image/width": tf.train.Feature(int64_list=tf.train.Int64List(value=[500])),
        "image/channels": tf.train.Feature(int64_list=tf.train.Int64List(value=[3])),
        "image/colorspace": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"RGB"])),
        "image/class/label": tf.train.Feature(int64_list=tf.train.Int64List(value=[7])),
        "image/class/text": tf.train.Feature(bytes_list=tf.train.BytesList(value=["café".encode()])),
        "image/filename": tf.train.Feature(bytes_list=tf.train.BytesList(value=["café/a b.jpg".encode()])),
    }))  # fmt: skip
    assert ours == ex.SerializeToString(deterministic=True)
    assert parse_example(ours)["image/class/label"] == [7]
