"""What changed between a dataset and its input: the catalog (format.catalog) against a fresh walk.

An image is *added* when the catalog has no row for its path, *removed* when the walk no longer
finds a row's path, *changed* when its size or mtime differs (or, with `check_content`, the xxh3
digest of its bytes; or its class or split, which only a --file-list or a split folder can move; or,
in a detection dataset, its boxes as planned from the annotations, against the catalog's digest of them:
a row without one, from before it was kept, counts as changed only when the annotations did),
and *unchanged* otherwise (a row converted from a remote listing knows neither size nor mtime:
it counts as unchanged unless `check_content`, and the new catalog records what the stat found).
A file skipped last time is tried again when it changed, or when its skip was an OS or I/O error
(`skips.is_passing`: no verdict about its content), and else stays skipped (with its reason);
a row below a folder the walk cannot list now (or a link whose target is missing) is kept as it
is, not removed (`unlisted`); a copy dropped last time (--dedupe drop) stays dropped
unless it changed or `versions.dedupe` restores it (its kept copy left). Classes keep their labels: the dataset's classes in
their order, then the classes the walk finds that it lacks, sorted (unless the dataset was made
with --labels: that list stays the set of classes); a class with no image left keeps its label.
"""

from __future__ import annotations

import itertools
from array import array
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from img2tfrecord.conversion.plan.enrich import Enricher
from img2tfrecord.conversion.plan.enrichers import discover_input
from img2tfrecord.conversion.plan.job import Drop
from img2tfrecord.conversion.plan.labels import updated_class_list
from img2tfrecord.conversion.plan.skips import is_passing
from img2tfrecord.conversion.plan.splits import Discovery, prior_of, recorded_rule
from img2tfrecord.conversion.plan.table import ImageTable, class_counts
from img2tfrecord.conversion.plan.walk import stat_remote
from img2tfrecord.format.catalog import CONVERTED, NO_BOXES, SKIPPED, Catalog
from img2tfrecord.format.options import recorded_value
from img2tfrecord.format.schema import utf8_text

_UNSEEN = bytes([1]) + bytes(255)  # a bytes.translate table: 0 (not seen) -> 1, else 0
KINDS = ("added", "removed", "changed", "unchanged", "retried")
# counted per split, not per class; "unlisted": kept rows below a folder the walk could not list
AFTER = ("still_skipped", "still_dropped", "restored", "unlisted")


@dataclass
class SplitChanges:
    """One split's changes. `encode` holds the image numbers (of the walk's table) to convert, in
    plan order; `gone` the catalog rows whose records leave the dataset (removed or changed)."""

    encode: array = field(default_factory=lambda: array("q"))
    gone: set[int] = field(default_factory=set)
    # KINDS -> images, plus "still_skipped", "still_dropped" and "restored" (versions.dedupe)
    counts: Counter[str] = field(default_factory=Counter)
    per_class: dict[str, Counter[str]] = field(default_factory=dict)

    def count(self, kind: str, cls: str) -> None:
        self.counts[kind] += 1
        self.per_class.setdefault(cls, Counter())[kind] += 1


@dataclass
class Changes:
    """The whole difference, and what the new version is built from."""

    found: Discovery
    catalog: Catalog
    classes: list[str]  # the new version's classes, in label order
    new_classes: list[str]
    vanished_classes: list[str]
    splits: dict[str, SplitChanges]
    kept_rows: list[int]  # catalog rows that stay as they are (unchanged records, still skipped files)
    # kept rows whose size and mtime the catalog did not know (a dataset converted from a remote
    # listing): row -> (size, mtime_ns) as the walk's stat found them, for the new catalog
    refreshed: dict[int, tuple[int, int]] = field(default_factory=dict)
    # --dedupe drop (versions.dedupe.resolve): images to encode that are later copies (Task.rel ->
    # its Drop: digest, the kept copy's rel), for the engine to leave out; kept rows that are later copies
    # now (-> their digest: a converted one's record leaves, a skipped one is a dropped copy now);
    # and the kept copy of each copy it placed, by path as dataset.json writes them
    drop: dict[str, Drop] = field(default_factory=dict)
    demoted: dict[int, bytes] = field(default_factory=dict)
    kept_copy: dict[str, str] = field(default_factory=dict)
    # what the walk could not read differs from what dataset.json lists (a folder listed again):
    # a new version says so, though no record changes
    walk_skips_changed: bool = False
    # a detection dataset's annotations are not the bytes dataset.json records: a new version records
    # them, though no box of an image it holds may have changed
    annotations_changed: bool = False
    removed_records: int = 0  # records whose image the walk no longer finds (versions.guard's count)

    @property
    def nothing(self) -> bool:
        """No image to encode, no record or catalog row to drop, no new class: the dataset is current."""
        return (
            not self.new_classes
            and not self.walk_skips_changed
            and not self.annotations_changed
            and not any(sc.encode or sc.gone or sc.counts["removed"] for sc in self.splits.values())
        )

    def split_counts(self) -> dict[str, dict[str, list[int]]]:
        """Images per class and split (records, skipped and dropped copies) before and after, for
        the classes whose counts change: class -> split -> [before, after] (the catalog's rows, the walk's images)."""
        before = Counter(zip(self.catalog.classes.codes, self.catalog.splits.codes))
        out: dict[str, dict[str, list[int]]] = {}
        cv, sv = self.catalog.classes.values, self.catalog.splits.values
        for (ci, si), n in before.items():
            out.setdefault(cv[ci], {}).setdefault(sv[si], [0, 0])[0] += n
        for split, view in self.found.splits.items():
            for cls, n in class_counts(view).items():
                out.setdefault(utf8_text(cls), {}).setdefault(split, [0, 0])[1] += n
        order = {s: i for i, s in enumerate(dict.fromkeys([*self.found.splits, *sv]))}
        return {
            c: dict(sorted(v.items(), key=lambda kv: order[kv[0]]))
            for c, v in sorted(out.items())
            if any(a != b for a, b in v.values())
        }

    def summary(self) -> dict[str, Any]:
        detection = {"annotations_changed": self.annotations_changed} if self.found.boxes is not None else {}
        return {
            **detection,
            "split_counts": self.split_counts(),
            "new_classes": self.new_classes,
            "vanished_classes": self.vanished_classes,
            "splits": {
                s: {
                    **{k: sc.counts.get(k, 0) for k in (*KINDS, *AFTER)},
                    "classes": {c: {k: n.get(k, 0) for k in KINDS} for c, n in sorted(sc.per_class.items())},
                }
                for s, sc in self.splits.items()
            },
        }


def walk(
    input_dir: str,
    options: dict[str, Any],
    old_classes: list[str],
    file_list: str | None,
    cat: Catalog | None = None,
    enrichers: Sequence[Enricher] = (),
) -> Discovery:
    """The input as `convert` would list it with the dataset's options and `enrichers` (the same
    walk, conversion.plan.enrichers), with labels that keep their meaning; under the exact split
    rule, the images `cat` holds keep their splits (conversion.plan.splits)."""
    fixed = options.get("labels")  # the dataset was made with --labels: that list is the set of classes
    split, seed = options.get("split"), int(recorded_value(options, "seed"))
    labels = list(old_classes) if fixed is not None else None
    # the labels a labeller writes into its columns (multi-label lists) keep their meaning; a class
    # folder's are given below, and its walk must not count a vanished class as one of --labels
    labelled = any(e.labels_images for e in enrichers)
    known = None if fixed is not None or not labelled else list(old_classes)
    offset = int(recorded_value(options, "label_offset"))
    rule = recorded_rule(options)
    if split and rule.name != "hash" and cat is not None:
        rule = rule._replace(prior=prior_of(cat.rels.blob, cat.rels.ends, cat.splits.codes, cat.splits.values, seed))
    found = discover_input(
        input_dir,
        enrichers,
        file_list=file_list,
        split=split,
        seed=seed,
        label_offset=offset,
        rule=rule,
        labels=labels,
        known_classes=known,
    )
    table = _table(found)
    if table.remote:  # what the listing left at 0: one stat per image (walk_remote.stat_remote)
        stat_remote(table)
    texts = [utf8_text(c) for c in table.classes]
    final = updated_class_list(list(old_classes), texts).classes if fixed is None else list(old_classes)
    position = {c: i for i, c in enumerate(final)}
    table.labels[:] = [position[t] + offset for t in texts]
    found.classes = final
    return found


def _unlisted(skipped: list[dict[str, str]]) -> tuple[str, ...]:
    """The paths the walk could not list (a folder, '/'-ended, or an entry it could not tell the
    kind of, such as a link whose target is missing): rows at or below them are kept."""
    return tuple(s["path"] for s in skipped)


def _below(path: str, unlisted: tuple[str, ...]) -> bool:
    return any(path == p or path.startswith(p if p.endswith("/") else p + "/") for p in unlisted)


def _table(found: Discovery) -> ImageTable:
    return next(iter(found.splits.values())).table


@dataclass
class _Rows:
    """The catalog's rows as the two passes over them leave them, shared so that each pass is one
    loop over its own columns: which rows the walk found, which stay, and each split's changes."""

    splits: dict[str, SplitChanges]
    seen: bytearray  # 1: the walk found the row's path
    kept: list[int] = field(default_factory=list)
    refreshed: dict[int, tuple[int, int]] = field(default_factory=dict)
    removed_records: int = 0


def diff(
    found: Discovery, cat: Catalog, old_classes: list[str], check_content: bool = False, same_annotations: bool = True
) -> Changes:
    """Classify every image of the walk and every row of the catalog (see the module docstring);
    `same_annotations`: a detection dataset's annotation bytes are the ones dataset.json records."""
    table = _table(found)
    texts = [utf8_text(c) for c in table.classes]
    group_class = [texts[g.cls] for g in table.groups]
    rows = _Rows(splits={s: SplitChanges() for s in found.splits}, seen=bytearray(len(cat)))
    _classify_found(found, cat, group_class, check_content, rows, same_annotations)
    unlisted = _unlisted(found.skipped)
    _classify_unseen(cat, unlisted, rows)
    group_of = table.group_of
    present = {group_class[g] for view in found.splits.values() for g in set(map(group_of.__getitem__, view.order))}
    present |= {cat.classes[r] for r in rows.kept} if unlisted else set()
    return Changes(
        found=found,
        catalog=cat,
        classes=found.classes,
        new_classes=[c for c in found.classes if c not in old_classes],
        vanished_classes=[c for c in old_classes if c not in present],
        splits=rows.splits,
        kept_rows=sorted(rows.kept),
        refreshed=rows.refreshed,
        removed_records=rows.removed_records,
    )


def _classify_found(
    found: Discovery, cat: Catalog, group_class: list[str], check_content: bool, rows: _Rows, same_annotations: bool
) -> None:
    """The walk's images against their rows: added, changed, retried, or kept as they are (one
    function, so that the columns stay locals of its loop)."""
    from img2tfrecord.conversion.encode.example import digest_file

    table = _table(found)
    group_code = [cat.classes.lookup.get(c, -1) for c in group_class]  # the class as the catalog codes it
    row_of = {rel: r for r, rel in enumerate(cat.rels)}
    seen, kept, refreshed, splits = rows.seen, rows.kept, rows.refreshed, rows.splits
    # the catalog's columns and the table's, as locals: this loop runs once per image of the dataset
    sizes, mtimes, states, split_codes, class_codes = (
        cat.sizes,
        cat.mtimes,
        cat.states,
        cat.splits.codes,
        cat.classes.codes,
    )
    names, offsets, groups, group_of = table.names, table.offsets, table.groups, table.group_of
    passing = [is_passing(v) for v in cat.reasons.values]  # a skip that was an OS error: no verdict
    reasons = cat.reasons.codes
    prefixes = [g.prefix for g in groups]
    stamped, boxes = bool(table.enrichers), cat.boxes.blob  # the enrichers' stamps; the ones the catalog keeps
    for s, view in found.splits.items():
        sc = splits[s]
        tally: Counter[tuple[str, str]] = Counter()  # (kind, class) -> images
        here = cat.splits.lookup.get(s, -1)
        for i in view.order:
            g = group_of[i]
            rel = prefixes[g] + names[offsets[i] : offsets[i + 1]]
            cls = group_class[g]
            r = row_of.get(rel)
            if r is None:
                sc.encode.append(i)
                tally["added", cls] += 1
                continue
            seen[r] = 1
            state = states[r]
            unknown = sizes[r] == 0 and mtimes[r] == 0  # converted from a listing (remote input)
            same = unknown or (sizes[r] == table.sizes[i] and mtimes[r] == table.mtimes[i])
            if same and stamped:  # what an enricher adds changed (a box changed, added or removed): the record changes
                had = boxes[8 * r : 8 * r + 8]
                same = table.stamp(i) == had if had != NO_BOXES else same_annotations
            if unknown and state == CONVERTED and not check_content:
                refreshed[r] = (table.sizes[i], table.mtimes[i])  # known from now on
            moved = split_codes[r] != here or class_codes[r] != group_code[g]
            if same and not moved and state != SKIPPED and check_content and cat.has_digests:  # a dropped copy too
                refreshed.pop(r, None)
                digest = digest_file(table.task(i).path)
                same = digest is not None and bytes.fromhex(digest) == cat.digests[r]
            if same and not moved and not (state == SKIPPED and passing[reasons[r]]):
                kept.append(r)
                tally[
                    "unchanged" if state == CONVERTED else "still_skipped" if state == SKIPPED else "still_dropped", cls
                ] += 1
                continue
            if state == CONVERTED:  # its record leaves the shard that holds it, in the split it was in
                splits.setdefault(cat.splits[r], SplitChanges()).gone.add(r)
            sc.encode.append(i)
            tally["retried" if state == SKIPPED else "changed", cls] += 1
        for (kind, cls), n in tally.items():
            sc.counts[kind] += n
            sc.per_class.setdefault(cls, Counter())[kind] += n


def _classify_unseen(cat: Catalog, unlisted: tuple[str, ...], rows: _Rows) -> None:
    """The rows the walk did not find: removed, unless below a path it could not list (kept)."""
    for r in itertools.compress(range(len(cat)), rows.seen.translate(_UNSEEN)):
        s = cat.splits[r]
        sc = rows.splits.setdefault(s, SplitChanges())
        if unlisted and _below(utf8_text(cat.rels[r].decode("utf-8", "surrogateescape")), unlisted):
            rows.kept.append(r)  # below a folder the walk could not list: not known to be gone
            sc.counts["unlisted"] += 1
            continue
        if cat.states[r] == CONVERTED:
            sc.gone.add(r)
            rows.removed_records += 1
        sc.count("removed", cat.classes[r])
