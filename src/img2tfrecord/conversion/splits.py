"""Split assignment and plan order: which split each image goes to, and in which order a split's
images are written. Shared by the folder walk (conversion.walk) and --file-list (conversion.filelist),
which only list files into an `ImageTable`; everything here works on the table's image numbers.

Both are a pure function of the seed and the image's own relative path (`Task.rel`): its seeded
64-bit hash (`order_key`: XXH3-64, a specified algorithm, so the same on every Python version and
platform, unlike `hash()`) is a point of [0, 2^64). `--split train=0.8,validation=0.2` gives train
the slice [0, 0.8 * 2^64) and validation the rest (`split_bounds`, `split_of`), and a split is
written in the order of the same hash. So adding or removing other images never moves an image to
another split, and the images that stay keep their relative order (what `update` builds on; a
split cut from a seeded reshuffle moved 5 of 4,000 images each way when one file was added). The
price: a class's share of a split follows the fraction within binomial noise instead of exactly
(a class of 5 may get no validation image; that is warned of by name). Split folders (`train/`,
`validation/`) are used as they are, each ordered by the hash. Two images whose hashes are equal
(about n^2 / 2^65: one in ~3,700 datasets of 100 M images) keep image/filename order.

Shards are contiguous runs of that order (plan.shard_bounds), and the hash does not know the class,
so every shard mixes the classes as a shuffle did.
"""

from __future__ import annotations

import bisect
import functools
from array import array
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import chain
from typing import TYPE_CHECKING, NamedTuple

import xxhash

from img2tfrecord.conversion.table import ImageTable, TaskView, encode_name
from img2tfrecord.errors import UsageError, option, plural
from img2tfrecord.format.manifest import shown
from img2tfrecord.format.schema import utf8_text

if TYPE_CHECKING:
    import numpy as np

SPLIT_DIR_NAMES = {"train": "train", "validation": "validation", "val": "validation", "test": "test"}


FEW_CLASSES = 5  # more classes than this with no images are said in one line (ImageNet-21k's --labels: 21,841)


class Missing(NamedTuple):
    """Classes of --labels that the input does not have at all, and what is missing for one, for many."""

    classes: set[str]
    one: Callable[[str], str]  # "its folder IN/zebra is missing"
    many: str  # "their folders in IN are missing"


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
    skipped: list[dict[str, str]] = field(default_factory=list)  # what the walk could not read: path, split, reason
    notes: list[str] = field(default_factory=list)  # said once, not warnings (junk folders ignored)


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
            raise UsageError(f"bad {option('split', spec)}: expected e.g. train=0.8,validation=0.2")
        if name in fractions:
            raise UsageError(f"bad {option('split', spec)}: {name} given twice")
        fractions[name] = frac
    if abs(sum(fractions.values()) - 1.0) > 1e-6:
        raise UsageError(f"bad {option('split', spec)}: the fractions add up to {sum(fractions.values()):g}, not 1")
    return fractions


HASH_SPACE = 1 << 64
_SEED_MASK = HASH_SPACE - 1


def order_key(rel: str | bytes, seed: int) -> int:
    """The image's place in [0, 2^64): decides its split and its order within the split.

    `rel` is `Task.rel` (the path below INPUT, '/'-separated; for a --file-list row outside INPUT,
    the path as written), as str or as the table's bytes (`table.encode_name`)."""
    return xxhash.xxh3_64_intdigest(encode_name(rel) if isinstance(rel, str) else rel, seed & _SEED_MASK)


def split_bounds(fractions: Mapping[str, float]) -> list[int]:
    """The exclusive upper end of each split's slice of [0, 2^64), in the fractions' order; the last
    is 2^64, so fractions that add up to 1 within rounding leave no gap."""
    bounds, acc = [], 0.0
    for frac in fractions.values():
        acc += frac
        bounds.append(min(HASH_SPACE, int(acc * HASH_SPACE)))
    if bounds:
        bounds[-1] = HASH_SPACE
    return bounds


def split_of(rel: str | bytes, seed: int, fractions: Mapping[str, float] | None) -> str:
    """The split `--split` (`fractions`, as dataset.json's options record it; None: no --split)
    puts the image `rel` in. Not for split folders (INPUT/train/...): those are the image's split."""
    if not fractions:
        return "train"
    names, bounds = _cut(tuple(fractions.items()))
    return names[bisect.bisect_right(bounds, order_key(rel, seed))]


@functools.lru_cache(maxsize=8)
def _cut(fractions: tuple[tuple[str, float], ...]) -> tuple[tuple[str, ...], list[int]]:
    """The split names and bounds of `fractions`, made once per --split (split_of runs per image)."""
    return tuple(name for name, _ in fractions), split_bounds(dict(fractions))


def table_keys(table: ImageTable, seed: int) -> array:
    """`order_key` of every image of `table`, by image number (an array of uint64, 8 bytes an image)."""
    h, s = xxhash.xxh3_64_intdigest, seed & _SEED_MASK
    names, offsets, group_of = table.names, table.offsets, table.group_of
    prefixes = [g.prefix for g in table.groups]
    return array("Q", (h(prefixes[group_of[i]] + names[offsets[i] : offsets[i + 1]], s) for i in range(len(table))))


def _in_order(parts: list[Sequence[int]]) -> np.ndarray:
    """Image numbers of some groups, sorted (= image/filename order within a split): an int64 array."""
    import numpy as np

    if all(isinstance(p, range) for p in parts):
        ranges = sorted(parts, key=lambda r: r.start)  # type: ignore[attr-defined]
        if ranges and all(a.stop == b.start for a, b in zip(ranges, ranges[1:])):  # type: ignore[attr-defined]
            return np.arange(ranges[0].start, ranges[-1].stop, dtype=np.int64)  # type: ignore[attr-defined]
        return np.fromiter(chain.from_iterable(ranges), dtype=np.int64)
    return np.sort(np.fromiter(chain.from_iterable(parts), dtype=np.int64))


def _by_key(keys: np.ndarray, numbers: np.ndarray) -> memoryview:
    """`numbers` (sorted image numbers) in the order of their keys, ties in image/filename order,
    as a view of int64 (what a `TaskView` indexes). Few copies: at 100 M images each is 800 MB."""
    import numpy as np

    whole = len(numbers) == len(keys) and (not len(numbers) or (numbers[0] == 0 and numbers[-1] == len(keys) - 1))
    idx = np.argsort(keys if whole else keys[numbers], kind="stable")  # every image, or a subset
    if not whole:
        idx = numbers[idx]
    return idx.astype(np.int64, copy=False).data.cast("B").cast("q")


def _classes_missing(
    table: ImageTable, every: np.ndarray, pools: dict[str, np.ndarray], split: Mapping[str, float]
) -> list[str]:
    """A warning per split that gets no image of a class that should have one there (its images
    times the fraction >= 1): hash splits follow the fractions only on average."""
    import numpy as np

    if not len(every):
        return []
    cls_of_group = np.array([g.cls for g in table.groups], dtype=np.int64)
    group_of = np.frombuffer(table.group_of, dtype=np.uintc)
    n = len(table.classes)
    totals = np.bincount(cls_of_group[group_of[every]], minlength=n)
    out = []
    for s, numbers in pools.items():
        got = np.bincount(cls_of_group[group_of[numbers]], minlength=n)
        missing = [int(c) for c in np.flatnonzero((got == 0) & (totals * split[s] >= 1))]
        if missing:
            names = ", ".join(repr(table.classes[c]) for c in missing[:5]) + (", ..." if len(missing) > 5 else "")
            out.append(
                f"split {s} has no image of {plural(len(missing), 'class', 'classes')} ({names}) though "
                f"{'its' if len(missing) == 1 else 'their'} share would be at least one: an image's split is a hash "
                "of its path (stable when images are added or removed), so small classes follow the fractions "
                "only on average; add images or use split folders (INPUT/train/, INPUT/validation/)"
            )
    return out


def _refuse_white_space_twins(absent: set[str], excluded: Mapping[str, int], what: str) -> None:
    """UsageError when a --labels name is not found but a class left out differs from it only in the
    white space around it ("cat " listed, folder "cat"; or a stripped copy of a labels.txt): names
    are matched exactly, so either would be dropped with only a warning, almost surely by mistake."""
    found: dict[str, str] = {}
    for c in sorted(excluded):
        found.setdefault(c.strip(), c)
    for name in sorted(absent):
        twin = found.get(name.strip())
        if twin is not None:
            raise UsageError(
                f"{option('labels')} names the class {shown(name)}, the input has {shown(twin)}: the same name with "
                f"other white space around it; names are matched exactly (labels.txt keeps them as they are): "
                f"correct the line, or rename the {what}"
            )


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
    missing: Missing | None = None,
) -> Discovery:
    """Hash splits and hash order over the table's image numbers (see the module docstring): shared
    by the folder walk and --file-list. `per_class` holds the image numbers of each class and split
    folder, in image/filename order; `missing`: the classes of --labels not found at all, and
    what to say of them."""
    classes = table.classes
    if excluded:
        unlisted = sorted(excluded)
        n = sum(excluded.values())
        warnings.append(
            f"{plural(len(unlisted), what, whats)} not in {option('labels')} {'is' if len(unlisted) == 1 else 'are'} left out "
            f"({plural(n, 'image')}): " + ", ".join(unlisted[:5]) + ("..." if len(unlisted) > 5 else "")
        )
    absent = missing.classes if missing else set()  # named by --labels, not found at all
    if absent and excluded:
        _refuse_white_space_twins(absent, excluded, what)
    unfound = [c for c in classes if c in absent]
    empty = [c for c in classes if c not in absent and not any(len(v) for v in per_class.get(c, {}).values())]
    if missing and len(unfound) > FEW_CLASSES:
        warnings.append(
            f"{len(unfound):,} classes of {option('labels')} have no images ({', '.join(map(repr, unfound[:FEW_CLASSES]))}, "
            f"...): {missing.many}; their labels are kept"
        )
    elif missing:
        warnings.extend(
            f"class {c!r} of {option('labels')} has no images: {missing.one(c)}; its label is kept" for c in unfound
        )
    if len(empty) > FEW_CLASSES:
        warnings.append(
            f"{len(empty):,} classes have no images ({', '.join(map(repr, empty[:FEW_CLASSES]))}, ...); "
            "their labels are kept"
        )
    else:
        warnings.extend(f"class {c!r} has no images; its label is kept" for c in empty)

    import numpy as np  # deferred: importing conversion.splits stays light

    keys = np.frombuffer(table_keys(table, seed), dtype=np.uint64) if len(table) else np.empty(0, np.uint64)
    pools: dict[str, np.ndarray] = {}
    if presplit:
        for s in split_keys:
            pools[s] = _in_order([per_class[c][s] for c in classes if s in per_class.get(c, {})])
    else:
        every = _in_order([numbers for c in classes for numbers in per_class.get(c, {}).values()])
        if split:
            bounds = np.array(split_bounds(split)[:-1], dtype=np.uint64)
            which = np.searchsorted(bounds, keys[every], side="right").astype(np.uint16)
            pools = {s: every[which == j] for j, s in enumerate(split)}
            del which
            warnings.extend(_classes_missing(table, every, pools, split))
        else:
            pools = {"train": every}
    undecodable = [n for n in classes if not n.isascii() and utf8_text(n) != n]
    if not table.names.isascii() or not all(g.prefix.isascii() for g in table.groups):  # else none can be
        undecodable += [
            name
            for numbers in pools.values()
            for i in numbers.tolist()
            if not (name := table.task(i).filename).isascii() and utf8_text(name) != name
        ]
    if undecodable:
        warnings.append(
            f"{plural(len(undecodable), 'name')} {'is' if len(undecodable) == 1 else 'are'} not valid UTF-8 (e.g. '{utf8_text(undecodable[0])}'): records, "
            "labels.txt and dataset.json hold the undecodable bytes as \\xNN escapes; rename the files to keep their names exact"
        )
    splits: dict[str, TaskView] = {}
    for s in list(pools):
        splits[s] = TaskView(table, _by_key(keys, pools.pop(s)))
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
