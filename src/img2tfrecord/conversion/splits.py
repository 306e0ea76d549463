"""Split assignment and plan order: which split each image goes to, and in which order a split's
images are written. Shared by the folder walk (conversion.walk) and --file-list (conversion.filelist),
which only list files into an `ImageTable`; everything here works on the table's image numbers.
"""

from __future__ import annotations

import random
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import chain

from img2tfrecord.conversion.table import ImageTable, TaskView
from img2tfrecord.errors import UsageError, plural
from img2tfrecord.format.schema import utf8_text

SPLIT_DIR_NAMES = {"train": "train", "validation": "validation", "val": "validation", "test": "test"}


@dataclass
class Discovery:
    """What the walk found: classes, candidate images per split (views over one `ImageTable`, in
    plan order), and what it ignored."""

    classes: list[str]
    splits: dict[str, TaskView]
    ignored_files: int = 0  # files that are no image candidates (notes.txt)
    warnings: list[str] = field(default_factory=list)
    presplit: bool = False
    excluded_files: int = 0  # images of classes --labels leaves out


def parse_split_spec(spec: str) -> dict[str, float]:
    """'train=0.8,validation=0.2' -> {'train': 0.8, 'validation': 0.2}; fractions must sum to 1."""
    fractions: dict[str, float] = {}
    for part in spec.split(","):
        name, sep, value = part.strip().partition("=")
        name = SPLIT_DIR_NAMES.get(name.strip().lower(), name.strip())
        try:
            frac = float(value)
        except ValueError:
            frac = -1.0
        if not sep or not name or not name.replace("_", "").isalnum() or not 0 <= frac <= 1:
            raise UsageError(f"bad --split {spec!r}: expected e.g. train=0.8,validation=0.2")
        if name in fractions:
            raise UsageError(f"bad --split {spec!r}: {name} given twice")
        fractions[name] = frac
    if abs(sum(fractions.values()) - 1.0) > 1e-6:
        raise UsageError(f"bad --split {spec!r}: the fractions add up to {sum(fractions.values()):g}, not 1")
    return fractions


def _stratify(files: Sequence[int], fractions: dict[str, float], rng: random.Random) -> dict[str, list[int]]:
    """Cut one class's files into splits by cumulative rounding, after a seeded shuffle."""
    files = list(files)
    rng.shuffle(files)
    n, out, start, acc = len(files), {}, 0, 0.0
    for name, frac in fractions.items():
        acc += frac
        end = round(n * acc)
        out[name] = files[start:end]
        start = end
    return out


def _in_order(parts: list[Sequence[int]]) -> array:
    """One split's image numbers, sorted (= image/filename order); whole groups need no sort."""
    if all(isinstance(p, range) for p in parts):
        return array("q", chain.from_iterable(sorted(parts, key=lambda r: r.start)))  # type: ignore[attr-defined]
    return array("q", sorted(chain.from_iterable(parts)))


def assemble(
    table: ImageTable,
    per_class: dict[str, dict[str, Sequence[int]]],
    excluded: dict[str, int],
    split_keys: list[str],
    *,
    presplit: bool,
    split: dict[str, float] | None,
    seed: int,
    ignored: int,
    warnings: list[str],
    what: str,
    whats: str,
    no_images: str,
) -> Discovery:
    """Stratified splits and the seeded shuffle over the table's image numbers: shared by the folder
    walk and --file-list. `per_class` holds the image numbers of each class in image/filename order."""
    classes = table.classes
    if excluded:
        unlisted = sorted(excluded)
        n = sum(excluded.values())
        warnings.append(
            f"{plural(len(unlisted), what, whats)} not in --labels {'is' if len(unlisted) == 1 else 'are'} left out "
            f"({plural(n, 'image')}): " + ", ".join(unlisted[:5]) + ("..." if len(unlisted) > 5 else "")
        )
    for c in classes:
        if not any(len(v) for v in per_class.get(c, {}).values()):
            warnings.append(f"class {c!r} has no images; its label is kept")

    parts: dict[str, list[Sequence[int]]] = {s: [] for s in split_keys}
    for c in classes:
        for skey, numbers in per_class.get(c, {}).items():
            if presplit:
                parts[skey].append(numbers)
            elif split:
                for s, part in _stratify(numbers, split, random.Random(f"img2tfrecord:{seed}:stratify:{c}")).items():
                    parts[s].append(part)
            else:
                parts["train"].append(numbers)
    undecodable = [n for n in classes if not n.isascii() and utf8_text(n) != n]
    if not table.names.isascii() or not all(g.prefix.isascii() for g in table.groups):  # else none can be
        undecodable += [
            name
            for pieces in parts.values()
            for piece in pieces
            for i in piece
            if not (name := table.task(i).filename).isascii() and utf8_text(name) != name
        ]
    if undecodable:
        warnings.append(
            f"{plural(len(undecodable), 'name')} {'is' if len(undecodable) == 1 else 'are'} not valid UTF-8 (e.g. '{utf8_text(undecodable[0])}'): records, "
            "labels.txt and dataset.json hold the undecodable bytes as \\xNN escapes; rename the files to keep their names exact"
        )
    splits: dict[str, TaskView] = {}
    for s, pieces in parts.items():
        order = _in_order(pieces)
        random.Random(f"img2tfrecord:{seed}:shuffle:{s}").shuffle(order)
        splits[s] = TaskView(table, order)
    if not any(splits.values()):
        raise UsageError(no_images)
    return Discovery(
        classes=classes,
        splits=splits,
        ignored_files=ignored,
        warnings=warnings,
        presplit=presplit,
        excluded_files=sum(excluded.values()),
    )
