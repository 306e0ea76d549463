"""TensorFlow Datasets metadata, so that `tfds.builder_from_directory(out)` opens an output as it is.

TFDS reads a directory of TFRecords through three files beside the shards: `dataset_info.json`
(the `DatasetInfo` proto as JSON: splits, shard lengths, the file-name template, supervised keys),
`features.json` (how to decode each Example key) and, for a `ClassLabel`, a names file. They are
built here from the manifest alone, as plain JSON (TFDS is not imported at convert time), and hold
nothing but what the manifest holds, so the same input and options give the same bytes.

The features are declared flat, one per Example key (`image/encoded`, `image/class/label`, ...):
TFDS serializes nested dicts by joining keys with `/`, so a flat key with a `/` reads the same
record bytes, and, unlike a nested `image` dict, it can be named in `supervised_keys`
(`as_supervised=True` yields `(image, label)`). The shapes follow tensorflow-datasets 4.9.10.

Not expressible: gzip/zlib shards (TFDS' TFRecord reader takes no compression type), so no
metadata is written for them (`files` returns {}).
"""

from __future__ import annotations

import json
from typing import Any

from img2tfrecord._version import __version__
from img2tfrecord.format.schema import declared_features

DATASET_INFO_NAME = "dataset_info.json"
FEATURES_NAME = "features.json"
# TFDS' name for the names file of the flat feature "image/class/label": its `/` become `.`
# (tensorflow_datasets.core.features.feature.convert_feature_name_to_filename).
LABEL_NAMES_NAME = "image.class.label.labels.txt"
FILE_NAMES = (DATASET_INFO_NAME, FEATURES_NAME, LABEL_NAMES_NAME)
FILEPATH_TEMPLATE = "{SPLIT}-{SHARD_X_OF_Y}"  # writer.shard_name: train-00002-of-00016
IMAGE_KEY, LABEL_KEY = "image/encoded", "image/class/label"

_TFDS = "tensorflow_datasets.core.features."
_FIXED_CHANNELS = {"1": 1, "3": 3}  # --channels; "keep" leaves each image its own


def files(manifest: dict[str, Any]) -> dict[str, str]:
    """File name -> text of the TFDS metadata for an output whose manifest is `manifest`.

    Empty when TFDS cannot read the shards (compressed). The names file is left out when the
    class names would not survive TFDS' reading of it (see `label_names`).
    """
    if (manifest.get("options") or {}).get("compression"):
        return {}
    out = {
        DATASET_INFO_NAME: _json(dataset_info(manifest)),
        FEATURES_NAME: _json(features(manifest)),
    }
    names = label_names(manifest)
    if names is not None:
        out[LABEL_NAMES_NAME] = "".join(n + "\n" for n in names)
    return out


def dataset_info(manifest: dict[str, Any]) -> dict[str, Any]:
    """The `DatasetInfo` proto as JSON: one entry per split with its true shard lengths."""
    splits = []
    for name, info in (manifest.get("splits") or {}).items():
        shards = info.get("shards") or []
        splits.append(
            {
                "name": name,
                "filepathTemplate": FILEPATH_TEMPLATE,
                "shardLengths": [str(s["records"]) for s in shards],  # int64 in proto JSON: strings
                "numBytes": str(sum(s["bytes"] for s in shards)),
            }
        )
    return {
        "name": "img2tfrecord",
        "version": "1.0.0",
        "description": f"Converted by img2tfrecord {__version__}; dataset.json beside this file is the manifest.",
        "fileFormat": "tfrecord",
        "splits": splits,
        "supervisedKeys": {"tuple": {"items": [{"featureKey": IMAGE_KEY}, {"featureKey": LABEL_KEY}]}},
    }


def features(manifest: dict[str, Any]) -> dict[str, Any]:
    """features.json: a flat `FeaturesDict` of every schema key."""
    leaves = {}
    for key, d in declared_features(manifest.get("metadata")).items():
        if key == IMAGE_KEY:
            leaves[key] = image_feature(manifest)
        elif d.is_list:  # a metadata list column, or a multi-label image's labels
            dtype = {"int64": "int64", "float": "float32", "bytes": "string"}[d.kind]
            leaves[key] = {
                "pythonClassName": _TFDS + "tensor_feature.Tensor",
                "tensor": {"shape": _dims([None]), "dtype": dtype, "encoding": "none"},
            }
        elif key == LABEL_KEY:
            leaves[key] = label_feature(manifest)
        elif d.kind in ("int64", "float"):
            leaves[key] = _scalar("int64" if d.kind == "int64" else "float32")
        else:
            leaves[key] = {"pythonClassName": _TFDS + "text_feature.Text", "text": {}}
    return {
        "type": _TFDS + "features_dict.FeaturesDict",
        "content": {"features": leaves},
        "proto_cls": "tensorflow_datasets.FeaturesDict",
    }


def image_feature(manifest: dict[str, Any]) -> dict[str, Any]:
    """How TFDS decodes image/encoded, from the options that shaped it.

    JPEG/PNG/BMP bytes (keep, png, jpeg): an `Image`, decoded by `tf.image.decode_image` to the
    channel count `--channels` fixed (else each image's own: shape (None, None, None)); height and
    width are fixed by `--resize WxH`. RAW pixels: a uint8 `Tensor` of shape (H, W, C) when
    `--resize WxH` and `--channels` fix it, else the flat bytes (reshape them with image/height,
    image/width, image/channels: TFDS stores no per-record shape for a bytes-encoded Tensor).
    """
    opts = manifest.get("options") or {}
    channels = _FIXED_CHANNELS.get(str(opts.get("channels")))
    resize = opts.get("resize")
    height, width = (resize[1], resize[0]) if isinstance(resize, list) else (None, None)  # --resize WxH
    dtype = manifest.get("dtype") or "uint8"  # uint16 when any record is a 16-bit PNG (RAW is always uint8)
    if opts.get("encoding") == "raw":
        shape: list[int | None] = [height, width, channels] if None not in (height, width, channels) else [None]
        return {
            "pythonClassName": _TFDS + "tensor_feature.Tensor",
            "tensor": {"shape": _dims(shape), "dtype": "uint8", "encoding": "bytes"},
        }
    image: dict[str, Any] = {"shape": _dims([height, width, channels]), "dtype": dtype}
    if opts.get("encoding") in ("jpeg", "png") and channels is not None:  # TFDS refuses a format with channels None
        image["encodingFormat"] = opts["encoding"]
    return {"pythonClassName": _TFDS + "image_feature.Image", "image": image}


def label_names(manifest: dict[str, Any]) -> list[str] | None:
    """The `ClassLabel` names in label order, or None when there is no ClassLabel or TFDS would misread them.

    A positive `label_offset` puts placeholder names before the classes (Inception's tooling
    leaves label 0 for "background"). TFDS strips each line and drops empty ones, so a class
    name with surrounding white space or a line break cannot be written.
    """
    offset = int(manifest.get("label_offset") or 0)
    classes = list(manifest.get("classes") or [])
    if offset < 0 or not classes:
        return None
    names = [f"(unused {i})" for i in range(offset)] + classes
    if any(not n or n != n.strip() or "\n" in n for n in names) or len(set(names)) != len(names):
        return None
    return names


def label_feature(manifest: dict[str, Any]) -> dict[str, Any]:
    """A `ClassLabel` over label_offset + classes labels; a plain int64 for a negative offset."""
    offset = int(manifest.get("label_offset") or 0)
    classes = manifest.get("classes") or []
    if offset < 0 or not classes:  # ClassLabel's values are 0..num_classes-1 (-1: no label)
        return _scalar("int64")
    return {
        "pythonClassName": _TFDS + "class_label_feature.ClassLabel",
        "classLabel": {"numClasses": str(offset + len(classes))},
    }


def _scalar(dtype: str) -> dict[str, Any]:
    return {"pythonClassName": _TFDS + "scalar.Scalar", "tensor": {"shape": {}, "dtype": dtype, "encoding": "none"}}


def _dims(shape: list[int | None]) -> dict[str, Any]:
    return {"dimensions": ["-1" if d is None else str(d) for d in shape]}


def _json(obj: dict[str, Any]) -> str:
    return json.dumps(obj, indent=2, ensure_ascii=False) + "\n"
