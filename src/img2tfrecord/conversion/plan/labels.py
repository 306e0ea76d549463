"""The class list: its order gives the labels (sorted names, or a --labels file's order), and every
name must be one that labels.txt can hold (`format.manifest.class_name_problem`), so a published
labels.txt always passes its own `inspect --verify` and reads back as the same classes.

The names' rules, the --labels file's read and the bounded reading of the text files that name
inputs live in format.class_names (the options' table parses --labels with them); re-exported here.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from img2tfrecord.errors import UsageError
from img2tfrecord.format.class_names import (  # re-exported: the walk's and the annotations' readers use them
    MAX_LABELS_BYTES as MAX_LABELS_BYTES,
)
from img2tfrecord.format.class_names import check_class_list as check_class_list
from img2tfrecord.format.class_names import check_regular_file as check_regular_file
from img2tfrecord.format.class_names import class_name_problem, shown
from img2tfrecord.format.class_names import not_regular as not_regular
from img2tfrecord.format.class_names import read_labels_file as read_labels_file
from img2tfrecord.format.class_names import read_text_input as read_text_input


def check_class_names(names: Iterable[str], what: str, fix: str) -> None:
    """UsageError for the first name labels.txt could not hold; `what` names where it came from."""
    for name in names:
        if problem := class_name_problem(name):
            raise UsageError(f"{what} {shown(name)} {problem}: {fix}")


def class_list(found: set[str], labels: list[str] | None, no_classes: str, known: list[str] | None = None) -> list[str]:
    """The classes, in label order: --labels as given; else `known` (an existing dataset's classes,
    `convert --like`), each keeping its label, then the other names found, sorted (update's rule:
    `updated_class_list`); else the names found, sorted."""
    if labels is None and known is not None:
        classes = updated_class_list(list(known), found).classes
    else:
        classes = list(labels) if labels is not None else sorted(found)
    if not classes:
        raise UsageError(no_classes)
    if labels is not None:
        check_class_list(classes, range(1, len(classes) + 1), "the labels", "entry")
    return classes


class ClassUpdate(NamedTuple):
    """The class list of an updated dataset (issue 22's label rule) and what changed in it."""

    classes: list[str]  # label order: the previous classes as they were, then the new ones
    new: list[str]  # found now, not before: appended, in sorted order
    vanished: list[str]  # before, not found now: they keep their label (and get 0 images)


def updated_class_list(previous: list[str], found: Iterable[str]) -> ClassUpdate:
    """Labels never change meaning: every previous class keeps its label number (a vanished one
    too), a new class gets the next free number, in sorted order among the new ones. Pass
    `classes` to `plan_job(labels=...)`, so a model trained on version 1 reads version 5 right."""
    known = set(previous)
    now = set(found)
    new = sorted(now - known)
    check_class_names(new, "the class", "rename it")
    return ClassUpdate([*previous, *new], new, [c for c in previous if c not in now])
