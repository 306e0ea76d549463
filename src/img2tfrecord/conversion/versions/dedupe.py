"""`update` of a `--dedupe drop` dataset: which copy of each content the new version keeps.

`convert --dedupe drop` keeps the first copy of each content in plan order (splits in order, each
in hash order: `conversion.plan.splits`) and drops the others. Plan order is a pure function of the
seed and the paths, so the new version can keep exactly the copy a fresh conversion of the new
input would keep: for each digest that the change touches (the digest of an image to encode, or
of a record that leaves), its copies in the new version are the old rows that stay (converted or
dropped) and the images to encode, and the first of them in plan order is kept:

- an image to encode that is a later copy is dropped (the engine leaves it out: `Plan.drop`);
- an image to encode that comes before the record kept so far is encoded, and that record is
  dropped (`demoted`: its shard is rewritten without it, its catalog row becomes a dropped one);
- a copy dropped before whose kept copy left (removed or changed) and that is now the first is
  encoded again (`restored`: read from the input as an added image would be).

A file convert skipped (invalid) has a content too, and convert drops its later copies: the
catalog keeps no digest for it, so when there are images to encode the files still skipped are
read for theirs (there are few), and a skipped file that left is found as the `duplicate_of` of
its dropped copies in the previous dataset.json. So `update` then `compact` gives what
`convert --dedupe drop` gives (tests/versions/test_update_dedupe.py).
"""

from __future__ import annotations

import bisect
from array import array
from typing import NamedTuple

from img2tfrecord.conversion.plan.job import Drop
from img2tfrecord.conversion.plan.splits import order_key
from img2tfrecord.conversion.plan.table import TaskView, decode_name
from img2tfrecord.conversion.versions.changes import Changes
from img2tfrecord.conversion.versions.manifest import text_of
from img2tfrecord.format.catalog import CONVERTED, DROPPED, NO_DIGEST, SKIPPED
from img2tfrecord.format.schema import utf8_text


class _Copy(NamedTuple):
    """One copy of a content in the new version, sortable in plan order."""

    split: int  # the split's place in the plan
    key: int  # splits.order_key
    image: int  # the walk's image number (equal keys keep image order, as the plan does)
    row: int  # its catalog row, -1 for an image to encode


def resolve(changes: Changes, seed: int, dropped_before: dict[str, str]) -> None:
    """Decide (see the module docstring) into `changes`: `drop` for the engine; `demoted` rows (a
    converted one's record joins its split's `gone`); restored ones leave `kept_rows` and join
    `encode` in plan order; `kept_copy` for dataset.json. `dropped_before`: the previous
    dataset.json's dropped copies (path -> kept copy). Reads the images to encode (their digests, as
    convert's pre-pass does) and, when there are some, the files still skipped; nothing else."""
    from img2tfrecord.conversion.encode.example import digest_file

    cat, views = changes.catalog, changes.found.splits
    if not views:
        return
    table = next(iter(views.values())).table
    place = {s: j for j, s in enumerate(views)}
    copies: dict[bytes, list[_Copy]] = {}
    for s, sc in changes.splits.items():
        for i in sc.encode:
            hexed = digest_file(table.task(i).path)
            if hexed is not None:  # unreadable: encoded and skipped, as convert does
                rel = table.rel_bytes(i)
                copies.setdefault(bytes.fromhex(hexed), []).append(_Copy(place[s], order_key(rel, seed), i, -1))
    for sc in changes.splits.values():
        for r in sc.gone:
            if cat.digests[r] != NO_DIGEST:
                copies.setdefault(cat.digests[r], [])
    kept = set(changes.kept_rows)
    _skipped_copies_left(changes, kept, dropped_before, copies)
    if not copies:
        return
    new_copies = any(copies.values())  # images to encode with a digest
    restored: list[int] = []
    blob, w, states = bytes(cat.digests.blob), cat.digests.width, cat.states  # once per kept row: locals
    for r in changes.kept_rows:
        if states[r] != SKIPPED:
            digest = blob[r * w : r * w + w]
            if digest not in copies:
                continue
        elif new_copies:  # an invalid file has a content too, and convert drops its copies: read it
            if cat.splits[r] not in place:
                continue
            hexed = digest_file(table.task(_image_of(views[cat.splits[r]], cat.rels[r], seed)).path)
            digest = bytes.fromhex(hexed) if hexed is not None else NO_DIGEST
            if digest not in copies:
                continue
        else:
            continue
        s = cat.splits[r]
        if s in place:
            copies[digest].append(
                _Copy(place[s], order_key(cat.rels[r], seed), _image_of(views[s], cat.rels[r], seed), r)
            )
    for digest, group in copies.items():
        if not group:
            continue
        group.sort()
        first = group[0]
        first_rel = decode_name(cat.rels[first.row]) if first.row >= 0 else table.rel(first.image)
        if first.row >= 0 and cat.states[first.row] == DROPPED:
            restored.append(first.row)
        for c in group[1:]:
            name = decode_name(cat.rels[c.row]) if c.row >= 0 else table.rel(c.image)
            changes.kept_copy[utf8_text(name)] = utf8_text(first_rel)
            if c.row < 0:
                changes.drop[name] = Drop(digest=digest.hex(), kept=first_rel)
            elif cat.states[c.row] != DROPPED:  # converted (its record leaves) or skipped: dropped now
                changes.demoted[c.row] = digest
                sc = changes.splits[cat.splits[c.row]]
                if cat.states[c.row] == CONVERTED:
                    sc.gone.add(c.row)
                else:
                    sc.counts["still_skipped"] -= 1
                    sc.counts["still_dropped"] += 1
    if restored:
        _restore(changes, restored, kept, seed)


def _skipped_copies_left(
    changes: Changes, kept: set[int], dropped_before: dict[str, str], copies: dict[bytes, list[_Copy]]
) -> None:
    """The dropped copies of a skipped file that is removed or changed: their content joins
    `copies`, so the first of them is tried again (the catalog knows no digest of a skipped file;
    the previous dataset.json says which file each dropped copy was a copy of)."""
    cat = changes.catalog
    if not dropped_before:
        return
    gone = {text_of(cat.rels[r]) for r in range(len(cat)) if cat.states[r] == SKIPPED and r not in kept}
    if not gone:
        return
    for r in kept:
        if cat.states[r] == DROPPED and dropped_before.get(text_of(cat.rels[r])) in gone:
            copies.setdefault(cat.digests[r], [])


def _image_of(view: TaskView, rel: bytes, seed: int) -> int:
    """The walk's image number of `rel` in `view` (hash order, ties in image order), by bisection."""
    table = view.table
    order = view.order
    j = bisect.bisect_left(order, order_key(rel, seed), key=lambda i: order_key(table.rel_bytes(i), seed))
    while j < len(order) and table.rel_bytes(order[j]) != rel:
        j += 1
    if j == len(order):
        raise AssertionError(f"{rel!r}: kept by the diff but not found by the walk")
    return int(order[j])


def _restore(changes: Changes, rows: list[int], kept: set[int], seed: int) -> None:
    """Move dropped rows to the images to encode of their split, in plan order."""
    cat, views = changes.catalog, changes.found.splits
    table = next(iter(views.values())).table
    by_split: dict[str, list[int]] = {}
    for r in rows:
        s = cat.splits[r]
        by_split.setdefault(s, []).append(_image_of(views[s], cat.rels[r], seed))
        kept.discard(r)
        sc = changes.splits[s]
        sc.counts["still_dropped"] -= 1
        sc.count("restored", cat.classes[r])
    changes.kept_rows = sorted(kept)
    for s, images in by_split.items():
        sc = changes.splits[s]
        merged = sorted([*sc.encode, *images], key=lambda i: (order_key(table.rel_bytes(i), seed), i))
        sc.encode = array("q", merged)
