"""The class list: its order gives the labels (sorted names, or a --labels file's order)."""

from __future__ import annotations

from img2tfrecord.errors import UsageError, option


def read_labels_file(path: str) -> list[str]:
    """One class name per line; blank lines and surrounding whitespace ignored; no duplicates."""
    try:
        with open(path, encoding="utf-8") as f:
            names = [line.strip() for line in f if line.strip()]
    except OSError as e:
        raise UsageError(f"cannot read {option('labels')} file {path}: {e.strerror}") from None
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise UsageError(f"{option('labels')} file {path} lists {', '.join(dupes)} more than once")
    if not names:
        raise UsageError(f"{option('labels')} file {path} is empty")
    return names


def class_list(found: set[str], labels: list[str] | None, no_classes: str) -> list[str]:
    """The classes, in label order: --labels as given, else the names found, sorted."""
    classes = list(labels) if labels is not None else sorted(found)
    if not classes:
        raise UsageError(no_classes)
    return classes
