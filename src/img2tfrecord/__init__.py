"""img2tfrecord: image folders to sharded TFRecord datasets, and back.

Importing this package does not import TensorFlow; the functions that need it import it lazily.
"""

from __future__ import annotations

from typing import Any

from img2tfrecord._version import __version__

__all__ = ["__version__", "convert", "update", "compact", "load", "FEATURES", "read_records", "parse_example"]


def __getattr__(name: str) -> Any:
    # Lazy attributes keep `import img2tfrecord` (and the CLI's --help) free of TensorFlow.
    if name == "convert":
        from img2tfrecord.conversion.convert import convert

        return convert
    if name == "update":  # bring a dataset up to date with its input (new shards for what changed)
        from img2tfrecord.conversion.versions.update import update

        return update
    if name == "compact":  # fold updated shards into a fresh conversion's layout
        from img2tfrecord.conversion.versions.compact import compact

        return compact
    if name == "load":
        from img2tfrecord.loader import load

        return load
    if name == "read_records":  # without TensorFlow: serialized records of a shard, CRC-checked
        from img2tfrecord.format.framing import read_records

        return read_records
    if name == "parse_example":  # without TensorFlow: one serialized Example -> {key: [values]}
        from img2tfrecord.format.schema import parse_example

        return parse_example
    if name == "FEATURES":
        from img2tfrecord.loader import features_spec

        return features_spec()
    raise AttributeError(f"module 'img2tfrecord' has no attribute {name!r}")
