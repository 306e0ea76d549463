"""`compact --rebalance`: the one step that moves images between splits, to make every class's
shares exact again (conversion.plan.quota) after removals, or to bring a dataset made by the old hash
rule to the exact rule.

It re-splits the dataset's planned images (records, skipped images, dropped copies: the catalog's
rows) as a fresh convert of the same tree splits them: per class, by the seeded path hash, with
`--split-group`'s groups kept whole. Only the catalog's split column changes, and dataset.json's
options then record the exact rule; `compact` copies the records into that layout (a record holds
no split, so nothing is re-encoded). It says how many images moved, from which split to which.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, NamedTuple

from img2tfrecord.conversion.plan import quota
from img2tfrecord.conversion.plan.splits import order_key
from img2tfrecord.errors import UsageError, option
from img2tfrecord.format.catalog import CONVERTED, DROPPED, SKIPPED, Catalog
from img2tfrecord.format.conversion_options import ConversionOptions
from img2tfrecord.format.split_groups import group_key, group_pattern


class Rebalanced(NamedTuple):
    """The dataset re-split: its catalog and dataset.json options, and what moved."""

    catalog: Catalog
    options: dict[str, Any]
    report: dict[str, Any]  # {moved, from: {"train -> validation": images}, rule_before}


def rebalanced(options: dict[str, Any], cat: Catalog, output_dir: str) -> Rebalanced:
    """Each planned row's split as the exact rule gives it (see the module docstring). `options`:
    dataset.json's."""
    made = ConversionOptions.from_json(options)
    fractions = made.split
    if not isinstance(fractions, dict) or not fractions:
        raise UsageError(
            f"{option('rebalance', True)} re-splits by {option('split')}'s fractions; {output_dir} was made without "
            "them (its split folders or file list gave each image's split)"
        )
    seed = made.seed
    names = list(fractions)
    rows = [r for r, s in enumerate(cat.states) if s in (CONVERTED, SKIPPED, DROPPED)]
    rows.sort(key=cat.rels.__getitem__)  # image/filename order within a class: a fresh walk's ties
    which = _assign(cat, rows, names, list(fractions.values()), seed, made.split_group)
    moved: Counter[str] = Counter()
    new = cat.take(range(len(cat)))
    for r in rows:
        to = names[int(which[r])]
        if to != cat.splits[r]:
            moved[f"{cat.splits[r]} -> {to}"] += 1
            new.splits[r] = to
    report = {
        "moved": sum(moved.values()),
        "from": dict(sorted(moved.items())),
        "rule_before": made.split_rule,
    }
    return Rebalanced(new, {**options, "split_rule": "exact", "split_group": made.split_group}, report)


def _assign(cat: Catalog, rows: list[int], names: list[str], fracs: list[float], seed: int, group: Any) -> Any:
    """The exact rule's split index of each row (by row number), as `splits.assign` gives a walk's."""
    import numpy as np

    which = np.full(len(cat), quota.NO_SPLIT, dtype=np.uint8)
    keys = np.zeros(len(cat), dtype=np.uint64)
    for r in rows:
        keys[r] = order_key(cat.rels[r], seed)
    per_class: dict[int, list[int]] = {}
    for r in rows:
        per_class.setdefault(cat.classes.codes[r], []).append(r)
    pattern = group_pattern(str(group)) if group else None
    if pattern is None:
        quota.exact(keys, [np.asarray(v, dtype=np.int64) for v in per_class.values()], fracs, which)
        return which
    units: dict[object, quota.Unit] = {}
    for c, members in per_class.items():
        for r in members:
            g = group_key(pattern, cat.rels[r].decode("utf-8", "surrogateescape"))
            key: object = r if g is None else g
            if key not in units:
                units[key] = quota.Unit(int(keys[r]) if g is None else order_key(g, seed))
            units[key].add(r, c)
    quota.fill(quota.ordered(units), {c: len(v) for c, v in per_class.items()}, fracs, which)
    return which
