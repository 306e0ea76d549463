"""img2tfrecord: image folders to sharded TFRecord datasets, and back.

Importing this package does not import TensorFlow; the functions that need it import it lazily.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

__all__ = ["__version__", "convert", "load", "FEATURES"]


def __getattr__(name: str) -> Any:
    # Lazy attributes keep `import img2tfrecord` (and the CLI's --help) free of TensorFlow.
    if name == "convert":
        from img2tfrecord.pipeline import convert

        return convert
    if name == "load":
        from img2tfrecord.reader import load

        return load
    if name == "FEATURES":
        from img2tfrecord.reader import features_spec

        return features_spec()
    raise AttributeError(f"module 'img2tfrecord' has no attribute {name!r}")
