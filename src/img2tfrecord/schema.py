"""The record schema: feature keys, their types, and a TensorFlow-free Example builder.

The keys are the ones TensorFlow's Inception/ImageNet converters write, so existing readers work.

Why not `tf.train.Example`? Encoding workers must not import TensorFlow (~2.5 s and ~600 MB per
process). `tf.train.Example` is a plain protobuf message, so we declare the same three tiny
messages (`Example`, `Features`, `Feature` and the value lists, field numbers as in TensorFlow's
`example.proto`/`feature.proto`) in a private descriptor pool and serialize them with the
`protobuf` runtime TensorFlow itself depends on. `deterministic=True` sorts the feature map, so
the bytes are identical to `tf.train.Example.SerializeToString(deterministic=True)`.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

# key -> (kind, human description). Kind is the tf.train.Feature list type.
FEATURE_TYPES: dict[str, str] = {
    "image/encoded": "bytes",
    "image/format": "bytes",
    "image/height": "int64",
    "image/width": "int64",
    "image/channels": "int64",
    "image/colorspace": "bytes",
    "image/class/label": "int64",
    "image/class/text": "bytes",
    "image/filename": "bytes",
}

COLORSPACES: dict[int, str] = {1: "GRAYSCALE", 2: "GRAYSCALE_ALPHA", 3: "RGB", 4: "RGBA"}

# Values of image/format.
FORMAT_RAW = "RAW"

# Images with more pixels are refused before decoding (convert --max-pixels, inspect's decoders).
DEFAULT_MAX_PIXELS = 100_000_000


def _build_classes() -> tuple[Any, Any, Any]:
    """Declare tensorflow.Example & co. in a private pool (no clash with TensorFlow's own)."""
    fdp = descriptor_pb2.FileDescriptorProto(name="img2tfrecord_example.proto", package="img2tfrecord_pb", syntax="proto3")
    F = descriptor_pb2.FieldDescriptorProto

    def msg(name: str, fields: list[tuple[str, int, int, int, str | None]], packed: bool = False):
        m = fdp.message_type.add(name=name)
        for fname, number, ftype, label, type_name in fields:
            f = m.field.add(name=fname, number=number, type=ftype, label=label)
            if type_name:
                f.type_name = type_name
        return m

    rep, opt = F.LABEL_REPEATED, F.LABEL_OPTIONAL
    msg("BytesList", [("value", 1, F.TYPE_BYTES, rep, None)])
    msg("FloatList", [("value", 1, F.TYPE_FLOAT, rep, None)])  # proto3: packed by default
    msg("Int64List", [("value", 1, F.TYPE_INT64, rep, None)])
    feature = msg(
        "Feature",
        [
            ("bytes_list", 1, F.TYPE_MESSAGE, opt, ".img2tfrecord_pb.BytesList"),
            ("float_list", 2, F.TYPE_MESSAGE, opt, ".img2tfrecord_pb.FloatList"),
            ("int64_list", 3, F.TYPE_MESSAGE, opt, ".img2tfrecord_pb.Int64List"),
        ],
    )
    feature.oneof_decl.add(name="kind")
    for f in feature.field:
        f.oneof_index = 0
    features = msg("Features", [("feature", 1, F.TYPE_MESSAGE, rep, ".img2tfrecord_pb.Features.FeatureEntry")])
    entry = features.nested_type.add(name="FeatureEntry")
    entry.field.add(name="key", number=1, type=F.TYPE_STRING, label=opt)
    entry.field.add(name="value", number=2, type=F.TYPE_MESSAGE, label=opt, type_name=".img2tfrecord_pb.Feature")
    entry.options.map_entry = True
    msg("Example", [("features", 1, F.TYPE_MESSAGE, opt, ".img2tfrecord_pb.Features")])

    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    get = message_factory.GetMessageClass
    return (
        get(pool.FindMessageTypeByName("img2tfrecord_pb.Example")),
        get(pool.FindMessageTypeByName("img2tfrecord_pb.Feature")),
        get(pool.FindMessageTypeByName("img2tfrecord_pb.Features")),
    )


Example, Feature, Features = _build_classes()


def utf8_text(name: str) -> str:
    """A file or folder name as valid UTF-8 text.

    Names that are not valid UTF-8 on disk arrive from `os.listdir` with surrogate escapes; their
    undecodable bytes are written as `\\xNN` so records and manifests always hold valid UTF-8.
    """
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def serialize_example(
    *,
    encoded: bytes,
    image_format: str,
    height: int,
    width: int,
    channels: int,
    label: int,
    text: bytes,
    filename: bytes,
) -> bytes:
    """Serialize one image record. Fills the message in place: one copy of the payload, not several."""
    ex = Example()
    fm = ex.features.feature
    fm["image/encoded"].bytes_list.value.append(encoded)
    fm["image/format"].bytes_list.value.append(image_format.encode("ascii"))
    fm["image/height"].int64_list.value.append(height)
    fm["image/width"].int64_list.value.append(width)
    fm["image/channels"].int64_list.value.append(channels)
    fm["image/colorspace"].bytes_list.value.append(COLORSPACES[channels].encode("ascii"))
    fm["image/class/label"].int64_list.value.append(label)
    fm["image/class/text"].bytes_list.value.append(text)
    fm["image/filename"].bytes_list.value.append(filename)
    return ex.SerializeToString(deterministic=True)


def parse_example(data: bytes) -> dict[str, list]:
    """Parse any serialized tf.train.Example without TensorFlow: key -> list of values.

    Raises `google.protobuf.message.DecodeError` when `data` is not an Example.
    """
    ex = Example()
    ex.ParseFromString(data)
    out: dict[str, list] = {}
    for key, feat in ex.features.feature.items():
        kind = feat.WhichOneof("kind")
        out[key] = list(getattr(feat, kind).value) if kind else []
    return out


def feature_kinds(data: bytes) -> dict[str, tuple[str | None, int]]:
    """key -> (kind, number of values) of a serialized Example; kind is bytes/float/int64 or None."""
    ex = Example()
    ex.ParseFromString(data)
    res: dict[str, tuple[str | None, int]] = {}
    for key, feat in ex.features.feature.items():
        kind = feat.WhichOneof("kind")
        res[key] = (kind.removesuffix("_list") if kind else None, len(getattr(feat, kind).value) if kind else 0)
    return res
