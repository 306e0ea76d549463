"""The record schema: feature keys, their types, and a TensorFlow-free Example writer and parser.

The keys are the ones TensorFlow's Inception/ImageNet converters write, so existing readers work.

Writing: `serialize_example` encodes the fixed schema's protobuf bytes directly (the hot path:
~15 us per 100 KB image against ~45 us for building a message), exactly as
`tf.train.Example.SerializeToString(deterministic=True)` does (tests compare them).
Reading without TensorFlow (`inspect`): `tf.train.Example` is a plain protobuf message, so we
declare the same tiny messages (`Example`, `Features`, `Feature` and the value lists, field
numbers as in TensorFlow's `example.proto`/`feature.proto`) in a private descriptor pool and
parse with the `protobuf` runtime TensorFlow itself depends on.
"""

from __future__ import annotations

import functools
import math
import re
import struct
from typing import Any, NamedTuple

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


class MetaValue(NamedTuple):
    """One feature beyond the fixed schema (a metadata column, or a multi-label image's labels):
    its key, kind (int64, float, bytes) and values (text as str, written as UTF-8); plain JSON, so
    a Beam plan file carries it."""

    key: str
    kind: str
    values: tuple[Any, ...]


class Declared(NamedTuple):
    """How a dataset declares one feature: its kind and whether a record holds a list of them."""

    kind: str
    is_list: bool


LIST_KEYS = ("image/class/label", "image/class/text")  # lists in a multi-label dataset

# The Object Detection API's keys beyond ours (`convert --annotations`): key -> (kind, a list per record).
DETECTION_FEATURES: dict[str, Declared] = {
    "image/source_id": Declared("bytes", False),
    "image/key/sha256": Declared("bytes", False),
    **{f"image/object/bbox/{k}": Declared("float", True) for k in ("xmin", "xmax", "ymin", "ymax")},
    "image/object/class/label": Declared("int64", True),
    "image/object/class/text": Declared("bytes", True),
    "image/object/is_crowd": Declared("int64", True),
    "image/object/area": Declared("float", True),
    "image/object/difficult": Declared("int64", True),
    "image/object/truncated": Declared("int64", True),
}


# A segmentation dataset's keys (`convert --masks-dir`), DeepLab's and the Model Garden's: the mask as a PNG of class ids.
SEGMENTATION_ENCODED = "image/segmentation/class/encoded"
SEGMENTATION_FORMAT = "image/segmentation/class/format"
SEGMENTATION_FEATURES: dict[str, Declared] = {
    SEGMENTATION_ENCODED: Declared("bytes", False),
    SEGMENTATION_FORMAT: Declared("bytes", False),
}


def declared_features(metadata: dict[str, Any] | None) -> dict[str, Declared]:
    """Every feature of a dataset's records, from dataset.json's `metadata` entry (None: the fixed
    schema): the fixed keys, lists for a multi-label dataset, the Object Detection API's for a detection
    one, then `image/<column>` of each column."""
    out = {key: Declared(kind, False) for key, kind in FEATURE_TYPES.items()}
    if not metadata:
        return out
    if metadata.get("multi_label"):
        out.update({key: Declared(FEATURE_TYPES[key], True) for key in LIST_KEYS})
    if metadata.get("detection"):
        out.update(DETECTION_FEATURES)
        if metadata["detection"].get("masks"):  # --masks: each object's mask, a PNG
            out["image/object/mask"] = Declared("bytes", True)
    if metadata.get("segmentation"):
        out.update(SEGMENTATION_FEATURES)
    for name, col in (metadata.get("columns") or {}).items():
        out["image/" + name] = Declared(str(col.get("type")), bool(col.get("list")))
    return out


COLORSPACES: dict[int, str] = {1: "GRAYSCALE", 2: "GRAYSCALE_ALPHA", 3: "RGB", 4: "RGBA"}

# Values of image/format.
FORMAT_RAW = "RAW"

# Images with more pixels are refused before decoding (convert --max-pixels, inspect's decoders).
DEFAULT_MAX_PIXELS = 100_000_000


def _build_classes() -> tuple[Any, Any, Any]:
    """Declare tensorflow.Example & co. in a private pool (no clash with TensorFlow's own)."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    fdp = descriptor_pb2.FileDescriptorProto(
        name="img2tfrecord_example.proto", package="img2tfrecord_pb", syntax="proto3"
    )
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


_CLASSES = ("Example", "Feature", "Features")
_classes: dict[str, Any] = {}


def _message(name: str) -> Any:
    """The protobuf class `name` (`Example`, `Feature`, `Features`), built at first use: writing never
    needs them (records are encoded by hand), and protobuf's import with these classes cost ~35 ms
    of every command's start (-X importtime)."""
    if not _classes:
        _classes.update(zip(_CLASSES, _build_classes()))
    return _classes[name]


def __getattr__(name: str) -> Any:
    """`from img2tfrecord.format.schema import Example` (and Feature, Features), lazily."""
    if name in _CLASSES:
        return _message(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def utf8_text(name: str) -> str:
    """A file or folder name as valid UTF-8 text.

    Names that are not valid UTF-8 on disk arrive from `os.listdir` with surrogate escapes; their
    undecodable bytes are written as `\\xNN` so records and manifests always hold valid UTF-8.
    """
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")


def filename_problem(name: str) -> str | None:
    """Why `name` is not a valid `image/filename` (docs/schema.md), or None if it is.

    The one definition that `convert` writes to and `inspect --verify` checks. Valid are:

    * a path below the input: relative, `/`-separated, no empty, `.` or `..` component
      (`dog/sub/a.jpg`); any other character, a backslash included, is part of a name;
    * a `--file-list` row outside INPUT, as listed: an absolute path (`/data/x.jpg`), a URL
      (`gs://other-bucket/x.jpg`), or a relative path that leaves INPUT, normalized (`../x.jpg`).
    """
    if not name:
        return "is empty"
    if name.startswith("/") or _SCHEME.match(name):
        return None
    parts = name.split("/")
    ups = next((i for i, p in enumerate(parts) if p != ".."), len(parts))  # a leading ../../ leaves INPUT
    if ups == len(parts) or any(p in ("", ".", "..") for p in parts[ups:]):
        return "is not a relative /-separated path (an empty, '.' or '..' component)"
    return None


def _slow_varint(n: int) -> bytes:
    n &= 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


_ONE_BYTE = tuple(bytes((n,)) for n in range(0x80))


def _varint(n: int) -> bytes:
    """Protobuf base-128 varint; negative int64s take ten bytes (two's complement), as protobuf does.
    One- and two-byte values (ids, flags, a feature's lengths: ~100 a detection record) without a loop."""
    if 0 <= n < 0x80:
        return _ONE_BYTE[n]
    if 0x80 <= n < 0x4000:
        return bytes(((n & 0x7F) | 0x80, n >> 7))
    return _slow_varint(n)


def _field(tag: int, body: bytes) -> bytes:
    """A length-delimited field: tag, length, bytes."""
    return bytes((tag,)) + _varint(len(body)) + body


@functools.lru_cache(maxsize=4096)
def _key_field(key: str) -> bytes:
    return _field(0x0A, key.encode("ascii"))


def _entry_head(key: str, value_len: int) -> bytes:
    """Head of one `Features.feature` map entry (key + Feature header) whose Feature holds `value_len` bytes."""
    k = _key_field(key)
    n = _varint(value_len)
    return b"\x0a" + _varint(len(k) + 1 + len(n) + value_len) + k + b"\x12" + n


def _bytes_feature(value: bytes) -> bytes:
    return _field(0x0A, _field(0x0A, value))  # Feature.bytes_list(1) -> BytesList.value(1)


def _int64_feature(value: int) -> bytes:
    return _field(0x1A, _field(0x0A, _varint(value)))  # Feature.int64_list(3) -> packed Int64List.value(1)


def _entry(key: str, feature: bytes) -> bytes:
    return _entry_head(key, len(feature)) + feature


@functools.lru_cache(maxsize=4096)
def _int_entry(key: str, value: int) -> bytes:
    return _entry(key, _int64_feature(value))


@functools.lru_cache(maxsize=4096)
def _bytes_entry(key: str, value: bytes) -> bytes:
    """Cached: formats, colorspaces and class names repeat on every record."""
    return _entry(key, _bytes_feature(value))


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
    extra: tuple[MetaValue, ...] = (),
) -> bytes:
    """Serialize one image record: exactly `tf.train.Example.SerializeToString(deterministic=True)`.

    Encoded by hand because it is the hot path: building the message costs ~45 us per 100 KB
    image, this ~15 us (most of it the one copy of the payload). Deterministic serialization writes the
    feature map sorted by key, so the entries below are in key order. `extra`: features beyond the
    fixed schema (metadata columns, a detection image's boxes), merged into that order; one of a
    fixed key (a multi-label image's class/label and class/text) takes its place. `message_classes`
    parse it back; tests compare the bytes with TensorFlow's.
    """
    n = len(encoded)
    inner = _varint(n)
    list_len = 1 + len(inner) + n  # BytesList: tag, length, payload
    feature_len = 1 + len(_varint(list_len)) + list_len  # Feature: bytes_list tag, length, BytesList
    entries = (  # in _FIXED_KEYS' order; image/encoded's without its payload
        _int_entry("image/channels", channels),
        _int_entry("image/class/label", label),
        _bytes_entry("image/class/text", text),
        _bytes_entry("image/colorspace", COLORSPACES[channels].encode("ascii")),
        b"".join((_entry_head("image/encoded", feature_len), b"\x0a", _varint(list_len), b"\x0a", inner)),
        _entry("image/filename", _bytes_feature(filename)),
        _bytes_entry("image/format", image_format.encode("ascii")),
        _int_entry("image/height", height),
        _int_entry("image/width", width),
    )
    if extra:
        return _with_extra(dict(zip(_FIXED_KEYS, entries)), encoded, extra)
    before, after = b"".join(entries[:_PAYLOAD_AFTER]), b"".join(entries[_PAYLOAD_AFTER:])
    features_len = len(before) + n + len(after)
    return b"".join((b"\x0a", _varint(features_len), before, encoded, after))  # Example.features(1)


_FIXED_KEYS = tuple(sorted(FEATURE_TYPES))  # the fixed schema's keys, in the order a record holds them
_PAYLOAD_AFTER = _FIXED_KEYS.index("image/encoded") + 1  # entries up to image/encoded's head precede the payload


def _with_extra(entries: dict[str, bytes], encoded: bytes, extra: tuple[MetaValue, ...]) -> bytes:
    """The record of `entries` (the fixed schema's, image/encoded's without its payload) and
    `extra`'s, in key order, with the payload copied once."""
    for key, kind, values in extra:  # plain lists too, after a Beam plan file's JSON
        entries[key] = _entry(key, _list_feature(kind, values))
    parts = []
    for key in sorted(entries):
        parts.append(entries[key])
        if key == "image/encoded":
            parts.append(encoded)
    return b"".join((b"\x0a", _varint(sum(map(len, parts))), *parts))


def _list_feature(kind: str, values: tuple[Any, ...]) -> bytes:
    """A Feature of any number of values, as protobuf's deterministic serialization writes it
    (packed int64 and float lists; an empty packed list is no field at all)."""
    if kind == "bytes":
        return _field(0x0A, b"".join(map(_bytes_value, values)))
    if not values:
        return _field(0x1A if kind == "int64" else 0x12, b"")
    if kind == "int64":  # ids and flags take one byte each
        small = max(values) < 0x80 and min(values) >= 0
        return _field(0x1A, _field(0x0A, bytes(values) if small else b"".join(map(_varint, values))))
    return _field(0x12, _field(0x0A, _floats(values)))


def _bytes_value(v: str | bytes) -> bytes:
    """One BytesList value; a short text (a class name, an id) from a cache: they repeat."""
    if isinstance(v, str) and len(v) <= 64:
        return _short_text(v)
    return _field(0x0A, v.encode("utf-8") if isinstance(v, str) else v)


@functools.lru_cache(maxsize=4096)
def _short_text(v: str) -> bytes:
    return _field(0x0A, v.encode("utf-8"))


def _floats(values: tuple[float, ...]) -> bytes:
    """Little-endian float32s as C's cast makes them, as protobuf does: a number beyond float32's
    range becomes an infinity (struct refuses it)."""
    try:
        return struct.pack(f"<{len(values)}f", *values)
    except OverflowError:
        return b"".join(map(_float32, values))


def _float32(v: float) -> bytes:
    try:
        return struct.pack("<f", v)
    except OverflowError:
        return struct.pack("<f", math.copysign(math.inf, v))


def parse_example(data: bytes) -> dict[str, list]:
    """Parse any serialized tf.train.Example without TensorFlow: key -> list of values.

    Raises `google.protobuf.message.DecodeError` when `data` is not an Example.
    """
    ex = _message("Example")()
    ex.ParseFromString(data)
    out: dict[str, list] = {}
    for key, feat in ex.features.feature.items():
        kind = feat.WhichOneof("kind")
        out[key] = list(getattr(feat, kind).value) if kind else []
    return out


def feature_kinds(data: bytes) -> dict[str, tuple[str | None, int]]:
    """key -> (kind, number of values) of a serialized Example; kind is bytes/float/int64 or None."""
    ex = _message("Example")()
    ex.ParseFromString(data)
    res: dict[str, tuple[str | None, int]] = {}
    for key, feat in ex.features.feature.items():
        kind = feat.WhichOneof("kind")
        res[key] = (kind.removesuffix("_list") if kind else None, len(getattr(feat, kind).value) if kind else 0)
    return res
