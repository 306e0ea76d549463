"""Split assignment and plan order: which split each image goes to, and in which order a split's
images are written. Shared by the folder walk (conversion.plan.walk) and --file-list (conversion.plan.filelist),
which only list files into an `ImageTable`; everything here works on the table's image numbers.

Both start from the seeded 64-bit hash of the image's own relative path (`Task.rel`): `order_key`,
XXH3-64, a specified algorithm, so the same on every Python version and platform, unlike `hash()`.
A split is written in the order of that hash, so the images that stay keep their relative order
when others come or go (what `update` builds on).

Which split an image goes to follows the dataset's split rule (`SplitRule`, recorded in
dataset.json's options as `split_rule`):

* ``exact`` (the default): per class, shares exact to one image (conversion.plan.quota: the class's
  images in hash order, the first floor-or-ceil(f*n) to the first split, ...); `update` keeps every
  image where it is and gives each new one to the split furthest below its class's share
  (`SplitRule.prior`: the catalog's splits); `compact --rebalance` makes the shares exact again.
* ``hash``: an image's split is a pure function of its hash: `--split train=0.8,validation=0.2`
  gives train the slice [0, 0.8 * 2^64) of the hash and validation the rest (`split_bounds`,
  `split_of`), so a class's share follows the fraction within binomial noise (a class of 5 may get
  no validation image; that is warned of by name). Datasets made before the exact rule have it.

`--split-group PATTERN` makes the images whose paths give one group key (conversion.plan.quota.group_key)
one unit that never crosses splits. Split folders (`train/`, `validation/`) and a --file-list's
split column are used as they are, each split ordered by the hash. Two images whose hashes are
equal (about n^2 / 2^65: one in ~3,700 datasets of 100 M images) keep image/filename order.

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

from img2tfrecord.conversion.plan import quota
from img2tfrecord.conversion.plan.options import SPLIT_RULES as SPLIT_RULES  # re-exported: the walk's users
from img2tfrecord.conversion.plan.table import BoxCounts, ImageTable, TaskView, decode_name, encode_name
from img2tfrecord.errors import UsageError, option, plural
from img2tfrecord.format.manifest import shown
from img2tfrecord.format.naming import SPLIT_DIR_NAMES as SPLIT_DIR_NAMES  # re-exported: the walk's users
from img2tfrecord.format.schema import utf8_text
from img2tfrecord.format.split_groups import group_key, group_pattern

if TYPE_CHECKING:
    import numpy as np

    from img2tfrecord.format.linear_re import LinearPattern

OLD_RULE = "hash"  # what a dataset.json without `split_rule` was made by


class Prior(NamedTuple):
    """The splits a dataset already gives its images (update), by path hash: `keys` the catalog's
    paths' `order_key`s, sorted (a uint64 array), `splits` the split of each (an index into `names`)."""

    keys: np.ndarray
    splits: np.ndarray
    names: Sequence[str]


def prior_of(
    blob: bytes | bytearray, ends: Sequence[int], splits: Sequence[int], names: Sequence[str], seed: int
) -> Prior:
    """The `Prior` of paths held as one blob and their end offsets (format.catalog's `Names`), each
    with its split's code into `names`: one XXH3 a path, then numpy (a dict of a million paths
    probed once an image cost ~3x as much)."""
    import numpy as np

    h, s, view = xxhash.xxh3_64_intdigest, seed & _SEED_MASK, memoryview(blob)
    starts = [0, *ends[:-1]]
    keys = np.fromiter((h(view[a:b], s) for a, b in zip(starts, ends)), dtype=np.uint64, count=len(ends))
    view.release()
    order = np.argsort(keys, kind="stable")
    return Prior(keys[order], np.asarray(splits, dtype=np.int64)[order], list(names))


class SplitRule(NamedTuple):
    """How `--split` fractions pick an image's split (see the module docstring)."""

    name: str = "exact"  # SPLIT_RULES
    group: str | None = None  # --split-group's regular expression
    prior: Prior | None = None  # update: images the dataset holds keep their split


EXACT = SplitRule()


def recorded_rule(options: Mapping[str, object], prior: Prior | None = None) -> SplitRule:
    """The split rule dataset.json's options record (none recorded: the old hash rule)."""
    name = options.get("split_rule") or OLD_RULE
    group = options.get("split_group")
    return SplitRule(str(name), str(group) if group else None, prior)


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
    loose: str = ""  # the warning about images outside any class folder, left out ("" if none): --strict refuses it
    boxes: BoxCounts | None = None  # a detection walk's boxes per image (conversion.plan.detection)


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
    rule: SplitRule = EXACT,
) -> Discovery:
    """Hash splits and hash order over the table's image numbers (see the module docstring): shared
    by the folder walk and --file-list. `per_class` holds the image numbers of each class and split
    folder, in image/filename order; `missing`: the classes of --labels not found at all, and
    what to say of them; `rule`: how --split's fractions pick a split (`SplitRule`)."""
    classes = table.classes
    _class_warnings(classes, per_class, excluded, missing, warnings, what, whats)

    import numpy as np  # deferred: importing conversion.plan.splits stays light

    keys = np.frombuffer(table_keys(table, seed), dtype=np.uint64) if len(table) else np.empty(0, np.uint64)
    if presplit:
        pools = {s: _in_order([per_class[c][s] for c in classes if s in per_class.get(c, {})]) for s in split_keys}
    else:
        pools = _drawn(table, per_class, keys, split, seed, rule, warnings)
    if undecodable := _undecodable(table, pools):
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


def _class_warnings(
    classes: list[str],
    per_class: Mapping[str, Mapping[str, Sequence[int]]],
    excluded: Mapping[str, int],
    missing: Missing | None,
    warnings: list[str],
    what: str,
    whats: str,
) -> None:
    """Add to `warnings` the classes left out (not in --labels) and those without images, found or
    not: their labels are kept, so a user sees why a class is empty. Many are said in one line."""
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


def _drawn(
    table: ImageTable,
    per_class: dict[str, dict[str, Sequence[int]]],
    keys: np.ndarray,
    split: dict[str, float] | None,
    seed: int,
    rule: SplitRule,
    warnings: list[str],
) -> dict[str, np.ndarray]:
    """Each split's image numbers (sorted) when no split folders give them: --split's fractions by
    `rule`, or all in train. Hash splits add a warning for a class a split got no image of."""
    import numpy as np

    every = _in_order([numbers for c in table.classes for numbers in per_class.get(c, {}).values()])
    if split and rule.name == "hash" and not rule.group:
        bounds = np.array(split_bounds(split)[:-1], dtype=np.uint64)
        which = np.searchsorted(bounds, keys[every], side="right").astype(np.uint16)
        pools = {s: every[which == j] for j, s in enumerate(split)}
        del which
        warnings.extend(_classes_missing(table, every, pools, split))
    elif split:
        which = assign(table, per_class, keys, split, seed, rule)
        pools = {s: np.flatnonzero(which == j) for j, s in enumerate(split)}
        del which
        if rule.name == "hash":
            warnings.extend(_classes_missing(table, every, pools, split))
    else:
        pools = {"train": every}
    return pools


def _undecodable(table: ImageTable, pools: Mapping[str, np.ndarray]) -> list[str]:
    """The class and file names that are not valid UTF-8 (records keep them as \\xNN escapes),
    read per image only when the table's bytes are not all ASCII."""
    undecodable = [n for n in table.classes if not n.isascii() and utf8_text(n) != n]
    if not table.names.isascii() or not all(g.prefix.isascii() for g in table.groups):  # else none can be
        undecodable += [
            name
            for numbers in pools.values()
            for i in numbers.tolist()
            if not (name := table.task(i).filename).isascii() and utf8_text(name) != name
        ]
    return undecodable


def assign(
    table: ImageTable,
    per_class: dict[str, dict[str, Sequence[int]]],
    keys: np.ndarray,
    fractions: Mapping[str, float],
    seed: int,
    rule: SplitRule,
) -> np.ndarray:
    """A uint8 array by image number: the index (in `fractions`' order) of each image's split,
    `quota.NO_SPLIT` for the images of no class of `per_class` (the arithmetic is conversion.plan.quota's).

    The common case (convert, no groups) is a numpy sort per class. Groups and update's new images
    are placed one unit at a time in Python: a cost per group or new image; update's look-up of
    the images the dataset holds is one dict probe per image, as its diff's."""
    import numpy as np

    names, fracs = list(fractions), list(fractions.values())
    which = np.full(len(table), quota.NO_SPLIT, dtype=np.uint8)
    index = {c: i for i, c in enumerate(table.classes)}
    classes = {index[c]: _numbers(parts.values()) for c, parts in per_class.items() if c in index}
    pattern = group_pattern(rule.group)
    if rule.name == "hash":  # --split-group over the old rule: a group's split is its key's hash slice
        bounds = np.array(split_bounds(fractions)[:-1], dtype=np.uint64)
        units = _units(table, classes, keys, seed, pattern)
        for u in units.values():
            which[u.images] = int(np.searchsorted(bounds, np.uint64(u.key), side="right"))
        return which
    if rule.prior is None and pattern is None:
        quota.exact(keys, list(classes.values()), fracs, which)
        return which
    if rule.prior is None:  # convert with groups
        units = _units(table, classes, keys, seed, pattern)
        quota.fill(quota.ordered(units), {c: len(n) for c, n in classes.items()}, fracs, which)
        return which
    counts = _held(keys, classes, which, names, rule)
    if pattern is None:
        quota.top_up(quota.ordered(_singles(classes, keys, which)), counts, fracs, which)
        return which
    held = _held_groups(table, classes, which, pattern)
    units = _units(table, classes, keys, seed, pattern, which)
    new: dict[object, quota.Unit] = {}
    for k, u in units.items():
        if k in held:  # a group the dataset already holds: its new images join it
            which[u.images] = held[k]
        else:
            new[k] = u
    quota.top_up(quota.ordered(new), counts, fracs, which)
    return which


def _numbers(parts: object) -> np.ndarray:
    import numpy as np

    arrays = [np.asarray(p, dtype=np.int64) for p in parts]  # type: ignore[attr-defined]
    return np.concatenate(arrays) if arrays else np.empty(0, np.int64)


def _held(
    keys: np.ndarray, classes: Mapping[int, np.ndarray], which: np.ndarray, names: list[str], rule: SplitRule
) -> dict[int, list[int]]:
    """Update: `which` set for every image the dataset holds in one of `names` (found by its path
    hash in the prior's sorted keys); returns the images per split per class it holds."""
    counts: dict[int, list[int]] = {}
    if rule.prior is None:
        return counts
    import numpy as np

    prior = rule.prior
    position = {s: j for j, s in enumerate(names)}
    split_of_code = np.array([position.get(s, -1) for s in prior.names] or [-1], dtype=np.int16)
    for c, numbers in classes.items():
        mine = keys[numbers]
        if not len(prior.keys):
            found = np.full(len(numbers), -1, dtype=np.int16)
        else:  # a path's hash found in the catalog: that path (two paths of one hash: ~n^2 / 2^65)
            at = np.minimum(np.searchsorted(prior.keys, mine), len(prior.keys) - 1)
            found = np.where(prior.keys[at] == mine, split_of_code[prior.splits[at]], -1).astype(np.int16)
        mine = found >= 0
        which[numbers[mine]] = found[mine]
        counts[c] = np.bincount(found[mine], minlength=len(names)).tolist()
    return counts


def _held_groups(
    table: ImageTable, classes: Mapping[int, np.ndarray], which: np.ndarray, pattern: LinearPattern
) -> dict[object, int]:
    """The split of each group key the dataset already holds (its first image's, in image order)."""
    groups: dict[object, int] = {}
    for numbers in classes.values():
        for i in numbers[which[numbers] != quota.NO_SPLIT].tolist():
            g = group_key(pattern, table.rel(i))
            if g is not None:
                groups.setdefault(g, int(which[i]))
    return groups


def _singles(classes: Mapping[int, np.ndarray], keys: np.ndarray, which: np.ndarray) -> dict[object, quota.Unit]:
    """Update without groups: a unit for each image not placed yet (the new ones)."""
    units: dict[object, quota.Unit] = {}
    for c, numbers in classes.items():
        for i in numbers[which[numbers] == quota.NO_SPLIT].tolist():
            units[i] = quota.Unit(int(keys[i]))
            units[i].add(i, c)
    return units


def _units(
    table: ImageTable,
    classes: Mapping[int, np.ndarray],
    keys: np.ndarray,
    seed: int,
    pattern: object,
    which: np.ndarray | None = None,
) -> dict[object, quota.Unit]:
    """The images still to place (`which` unset), one unit an image or a group key; UsageError when
    `--split-group`'s pattern matches no path at all."""
    units: dict[object, quota.Unit] = {}
    matched = False
    for c, numbers in classes.items():
        for i in numbers.tolist():
            if which is not None and which[i] != quota.NO_SPLIT:
                if pattern is not None:
                    matched = matched or group_key(pattern, table.rel(i)) is not None  # type: ignore[arg-type]
                continue
            g = group_key(pattern, table.rel(i)) if pattern is not None else None  # type: ignore[arg-type]
            if g is None:
                units[i] = quota.Unit(int(keys[i]))
                units[i].add(i, c)
                continue
            matched = True
            u = units.get(g)
            if u is None:
                u = units[g] = quota.Unit(order_key(g, seed))
            u.add(i, c)
    if pattern is not None and not matched and units:
        shown = getattr(pattern, "pattern", "")
        example = decode_name(table.rel_bytes(0)) if len(table) else ""
        raise UsageError(
            f"{option('split_group', shown)} matches no image path (e.g. {example!r}): "
            "give a regular expression that finds the group in the path below INPUT"
        )
    return units
