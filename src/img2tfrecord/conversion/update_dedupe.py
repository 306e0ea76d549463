"""`update` of a `--dedupe drop` dataset: which copy of each content the new version keeps.

`convert --dedupe drop` keeps the first copy of each content in plan order (splits in order, each
in hash order: `conversion.splits`) and drops the others. Plan order is a pure function of the
seed and the paths, so the new version can keep exactly the copy a fresh conversion of the new
input would keep: for each digest that the change touches (the digest of an image to encode, or
of a record that leaves), its copies in the new version are the old rows that stay (converted or
dropped) and the images to encode, and the first of them in plan order is kept:

- an image to encode that is a later copy is dropped (the engine leaves it out: `Plan.drop`);
- an image to encode that comes before the record kept so far is encoded, and that record is
  dropped (`demoted`: its shard is rewritten without it, its catalog row becomes a dropped one);
- a copy dropped before whose kept copy left (removed or changed) and that is now the first is
  encoded again (`restored`: read from the input as an added image would be).

So `update` then `compact` gives what `convert --dedupe drop` gives. Not knowable: the digest of a
file that was skipped (unreadable or invalid: the catalog has no digest for it), so a copy of it
is not recognised as one; convert drops it, update tries it and skips it too. No record differs.
"""

from __future__ import annotations

import bisect
from array import array
from typing import NamedTuple

from img2tfrecord.conversion.changes import Changes
from img2tfrecord.conversion.splits import order_key
from img2tfrecord.conversion.table import TaskView, decode_name
from img2tfrecord.format.catalog import CONVERTED, DROPPED, NO_DIGEST


class _Copy(NamedTuple):
    """One copy of a content in the new version, sortable in plan order."""

    split: int  # the split's place in the plan
    key: int  # splits.order_key
    image: int  # the walk's image number (equal keys keep image order, as the plan does)
    row: int  # its catalog row, -1 for an image to encode


def resolve(changes: Changes, seed: int) -> None:
    """Decide (see the module docstring) into `changes`: `drop` for the engine; `demoted` rows join
    their split's `gone`; restored ones leave `kept_rows` and join `encode` in plan order. Reads
    the images to encode (their digests, as convert's pre-pass does), nothing else."""
    from img2tfrecord.conversion.encode import digest_file

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
    if not copies:
        return
    kept = set(changes.kept_rows)
    restored: list[int] = []
    for r in changes.kept_rows:
        digest = cat.digests[r]
        if digest in copies and cat.states[r] in (CONVERTED, DROPPED) and cat.splits[r] in place:
            s = cat.splits[r]
            key = order_key(cat.rels[r], seed)
            copies[digest].append(_Copy(place[s], key, _image_of(views[s], cat.rels[r], key, seed), r))
    for digest, group in copies.items():
        if not group:
            continue
        group.sort()
        first = group[0]
        first_rel = decode_name(cat.rels[first.row]) if first.row >= 0 else table.rel(first.image)
        if first.row >= 0 and cat.states[first.row] == DROPPED:
            restored.append(first.row)
        for c in group[1:]:
            if c.row < 0:
                changes.drop[table.rel(c.image)] = (digest.hex(), first_rel)
            elif cat.states[c.row] == CONVERTED:
                changes.demoted.add(c.row)
                changes.splits[cat.splits[c.row]].gone.add(c.row)
    if restored:
        _restore(changes, restored, kept, seed)


def _image_of(view: TaskView, rel: bytes, key: int, seed: int) -> int:
    """The walk's image number of `rel` in `view` (hash order, ties in image order), by bisection."""
    table = view.table
    order = view.order
    j = bisect.bisect_left(order, key, key=lambda i: order_key(table.rel_bytes(i), seed))
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
        by_split.setdefault(s, []).append(_image_of(views[s], cat.rels[r], order_key(cat.rels[r], seed), seed))
        kept.discard(r)
        sc = changes.splits[s]
        sc.counts["still_dropped"] -= 1
        sc.count("restored", cat.classes[r])
    changes.kept_rows = sorted(kept)
    for s, images in by_split.items():
        sc = changes.splits[s]
        merged = sorted([*sc.encode, *images], key=lambda i: (order_key(table.rel_bytes(i), seed), i))
        sc.encode = array("q", merged)
