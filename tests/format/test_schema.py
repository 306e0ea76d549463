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


_FLT_MAX = 3.4028234663852886e38  # float32's largest
_KEYS = st.sampled_from(["image/class/label", "image/class/text", "image/a", "image/object/bbox/xmin", "image/zz", "a"])
_EXTRA = st.one_of(
    st.tuples(st.just("int64"), st.lists(st.integers(-(2**63), 2**63 - 1) | st.integers(0, 200), max_size=20)),
    st.tuples(
        st.just("float"),
        st.lists(
            st.floats(width=32)
            | st.floats(allow_nan=False)
            | st.sampled_from([3.5e38, 3.4028235e38, -1e300, _FLT_MAX + 2.0**102, _FLT_MAX + 2.0**103]),
            max_size=20,
        ),
    ),
    st.tuples(st.just("bytes"), st.lists(st.text(max_size=80) | st.binary(max_size=300), max_size=8)),
)


@settings(max_examples=examples(300), deadline=None)
@given(extra=st.dictionaries(_KEYS, _EXTRA, max_size=6), payload=st.binary(max_size=200))
def test_records_with_extra_features_match_tensorflow(extra, payload):
    """Metadata columns and a detection image's boxes merged into the fixed schema, one of a fixed key
    replacing it: TF's exact bytes, floats beyond float32 made infinite as TF makes them."""
    import math

    import tensorflow as tf

    from img2tfrecord.format.schema import MetaValue

    def feature(kind: str, values: list) -> tf.train.Feature:
        if kind == "int64":
            return tf.train.Feature(int64_list=tf.train.Int64List(value=values))
        if kind == "float":
            return tf.train.Feature(float_list=tf.train.FloatList(value=values))
        return tf.train.Feature(
            bytes_list=tf.train.BytesList(value=[v.encode() if isinstance(v, str) else v for v in values])
        )

    fixed = {
        "image/encoded": feature("bytes", [payload]),
        "image/format": feature("bytes", [b"PNG"]),
        "image/height": feature("int64", [3]),
        "image/width": feature("int64", [4]),
        "image/channels": feature("int64", [1]),
        "image/colorspace": feature("bytes", [b"GRAYSCALE"]),
        "image/class/label": feature("int64", [2]),
        "image/class/text": feature("bytes", [b"dog"]),
        "image/filename": feature("bytes", [b"dog/a.png"]),
    }
    ex = tf.train.Example(features=tf.train.Features(feature=fixed | {k: feature(*v) for k, v in extra.items()}))
    ours = serialize_example(
        encoded=payload,
        image_format="PNG",
        height=3,
        width=4,
        channels=1,
        label=2,
        text=b"dog",
        filename=b"dog/a.png",
        extra=tuple(MetaValue(k, kind, tuple(values)) for k, (kind, values) in extra.items()),
    )
    assert ours == ex.SerializeToString(deterministic=True)
    for key, (kind, values) in extra.items():
        if kind == "float" and values:
            assert [math.isinf(v) for v in parse_example(ours)[key]] == [
                abs(v) >= _FLT_MAX + 2.0**103 for v in values
            ]  # halfway rounds to even: up
