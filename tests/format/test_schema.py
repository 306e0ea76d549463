"""The TensorFlow-free Example writer gives exactly TensorFlow's bytes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import examples
from img2tfrecord.format.schema import COLORSPACES, parse_example, serialize_example


@pytest.mark.parametrize("payload", [b"", b"\xff\xd8" + bytes(range(256)) * 500])
def test_serialized_example_matches_tensorflow(payload):
    import tensorflow as tf

    ours = serialize_example(
        encoded=payload,
        image_format="JPEG",
        height=375,
        width=500,
        channels=3,
        label=7,
        text="café".encode(),
        filename="café/a b.jpg".encode(),
    )
    ex = tf.train.Example(
        features=tf.train.Features(
            feature={
                "image/encoded": tf.train.Feature(bytes_list=tf.train.BytesList(value=[payload])),
                "image/format": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"JPEG"])),
                "image/height": tf.train.Feature(int64_list=tf.train.Int64List(value=[375])),
                "image/width": tf.train.Feature(int64_list=tf.train.Int64List(value=[500])),
                "image/channels": tf.train.Feature(int64_list=tf.train.Int64List(value=[3])),
                "image/colorspace": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"RGB"])),
                "image/class/label": tf.train.Feature(int64_list=tf.train.Int64List(value=[7])),
                "image/class/text": tf.train.Feature(bytes_list=tf.train.BytesList(value=["café".encode()])),
                "image/filename": tf.train.Feature(bytes_list=tf.train.BytesList(value=["café/a b.jpg".encode()])),
            }
        )
    )
    assert ours == ex.SerializeToString(deterministic=True)
    assert parse_example(ours)["image/class/label"] == [7]


@settings(max_examples=examples(300), deadline=None)
@given(
    payload=st.binary(max_size=300)
    | st.sampled_from([b"x" * 127, b"x" * 128, b"x" * 16383, b"x" * 16384, b"x" * 2_100_000]),
    height=st.integers(0, 2**31),
    width=st.integers(0, 2**31),
    channels=st.sampled_from([1, 2, 3, 4]),
    label=st.integers(-(2**63), 2**63 - 1),
    text=st.text(max_size=200),
    filename=st.text(max_size=300),
    image_format=st.sampled_from(["JPEG", "PNG", "BMP", "RAW"]),
)
def test_any_record_matches_tensorflow(payload, height, width, channels, label, text, filename, image_format):
    """Every length around varint boundaries, negative and 64-bit labels, any text: TF's exact bytes."""
    import tensorflow as tf

    def b(v: bytes):
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=[v]))

    def i(v: int):
        return tf.train.Feature(int64_list=tf.train.Int64List(value=[v]))

    ex = tf.train.Example(
        features=tf.train.Features(
            feature={
                "image/encoded": b(payload),
                "image/format": b(image_format.encode()),
                "image/height": i(height),
                "image/width": i(width),
                "image/channels": i(channels),
                "image/colorspace": b(COLORSPACES[channels].encode()),
                "image/class/label": i(label),
                "image/class/text": b(text.encode()),
                "image/filename": b(filename.encode()),
            }
        )
    )
    ours = serialize_example(
        encoded=payload,
        image_format=image_format,
        height=height,
        width=width,
        channels=channels,
        label=label,
        text=text.encode(),
        filename=filename.encode(),
    )
    assert ours == ex.SerializeToString(deterministic=True)
    assert parse_example(ours)["image/encoded"] == [payload]
