"""update's layout: which old shards are kept, rewritten or emptied, and how many new shards each
split gets (the dataset's shard rule), and about how many bytes that writes."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from img2tfrecord.conversion.plan.options import ShardSettings
from img2tfrecord.conversion.plan.table import TaskView
from img2tfrecord.conversion.versions.changes import Changes
from img2tfrecord.conversion.versions.recorded import Recorded
from img2tfrecord.conversion.write import shards as writer
from img2tfrecord.format.catalog import CONVERTED


@dataclass
class Layout:
    """Per split: the old shards kept as they are, those rewritten, those emptied, and the new ones."""

    kept: dict[str, list[dict[str, Any]]]
    rewritten: dict[str, list[tuple[dict[str, Any], list[int]]]]  # (old entry, record numbers kept)
    emptied: dict[str, list[str]]
    new_counts: dict[str, int]  # shards for the images to encode
    per_shard: int  # records a new shard holds at most
    # a split no old record stays in: the shards of no record a fresh convert writes for it, should
    # every image it has be skipped or dropped (`_empty_counts`)
    empty: dict[str, int] = field(default_factory=dict)


def layout_of(changes: Changes, rec: Recorded, settings: ShardSettings) -> Layout:
    """Which old shards are kept, rewritten or emptied, and how many new shards each split gets: the
    splits in the order a fresh convert lists them (the walk's), then those with no image left.

    New shards follow the dataset's shard-size rule (`shard_request`): without --shards, convert's
    own (`plan.auto_shard_counts` over the new images' estimated bytes: 100-200 MiB a shard); with
    a count, the shard size that count gave, i.e. at most the split's average records per shard.
    A shard of no record is kept only as a fresh convert writes it (a split whose every image is
    skipped or dropped: `Layout.empty`), so an updated dataset lists such a split as convert does."""
    cat = rec.catalog
    records: dict[str, list[tuple[int, int]]] = {}  # shard -> (record, row) of its records
    for r, state in enumerate(cat.states):
        if state == CONVERTED:
            records.setdefault(cat.shards[r], []).append((cat.records[r], r))
    splits = rec.manifest.get("splits") or {}
    total = sum(int(sp.get("records") or 0) for sp in splits.values())
    count = sum(len(sp.get("shards") or []) for sp in splits.values())
    overall = max(1, math.ceil(total / count)) if count else 1
    out = Layout({}, {}, {}, {}, overall)
    by_bytes = _byte_rule_counts(changes, settings) if rec.manifest.get("shard_request") is None else None
    fresh: dict[str, int] = {}
    for s in dict.fromkeys([*changes.splits, *splits]):  # the walk's order, as convert's; then the vanished
        entries = (splits.get(s) or {}).get("shards") or []
        gone = changes.splits[s].gone if s in changes.splits else set()
        kept, rewritten, emptied = [], [], []
        for entry in entries:
            rows = sorted(records.get(entry["file"], []))
            keep = [n for n, r in rows if r not in gone]
            if keep and len(keep) == len(rows):
                kept.append(entry)
            elif keep:
                rewritten.append((entry, keep))
            else:  # a shard of no record too (all its images skipped): it stays only as convert writes it
                emptied.append(entry["file"])
        n = len(changes.splits[s].encode) if s in changes.splits else 0
        if not kept and not rewritten and len(changes.found.splits.get(s) or ()):
            empty = (fresh := fresh or _empty_counts(changes, rec, settings))[s]
            if not n and len(entries) == empty and all(not int(e.get("records") or 0) for e in entries):
                kept, emptied = entries, []  # convert's shards of no record already: linked as they are
            else:
                out.empty[s] = empty
        out.kept[s], out.rewritten[s], out.emptied[s] = kept, rewritten, emptied
        if by_bytes is not None:
            k = by_bytes.get(s, 0) if n else 0
        else:
            per = max(1, math.ceil(int(splits[s]["records"]) / len(entries))) if entries else overall
            k = math.ceil(n / per) if n else 0
            if k:
                k = writer.recut_count(k, n, settings.index)  # no shard of one record with an index
        out.new_counts[s] = k
    return out


def _empty_counts(changes: Changes, rec: Recorded, settings: ShardSettings) -> dict[str, int]:
    """Per split of the walk, the shards a fresh convert writes for it when every image is skipped
    or dropped: its plan's count (over all the images the walk found, with dataset.json's shard
    rule), re-cut as `write.rebalance` re-cuts no record (with --index: one shard)."""
    from img2tfrecord.conversion.plan.job import auto_shard_counts, estimate_task_bytes, min_shard_records

    views = changes.found.splits
    request = rec.manifest.get("shard_request")
    if isinstance(request, dict):  # a split folder gone since: convert would refuse to name it
        request = {s: k for s, k in request.items() if s in views}
    counts = auto_shard_counts(
        {s: estimate_task_bytes(v, settings.encode) for s, v in views.items()},
        {s: len(v) for s, v in views.items()},
        request,
        min_shard_records(settings.index),
    ).counts
    return {s: writer.recut_count(k, 0, settings.index) for s, k in counts.items()}


def _byte_rule_counts(changes: Changes, settings: ShardSettings) -> dict[str, int]:
    """New shards per split by convert's default rule, applied to the images to encode."""
    from img2tfrecord.conversion.plan.job import auto_shard_counts, estimate_task_bytes, min_shard_records

    if not changes.found.splits:
        return {}
    table = next(iter(changes.found.splits.values())).table
    views = {s: TaskView(table, sc.encode) for s, sc in changes.splits.items()}
    counts = auto_shard_counts(  # its warnings are convert's; update warns of a one-record shard itself
        {s: estimate_task_bytes(v, settings.encode) for s, v in views.items()},
        {s: len(v) for s, v in views.items()},
        None,
        min_shard_records(settings.index),
    ).counts
    return counts


def needed(changes: Changes, layout: Layout, settings: ShardSettings) -> int:
    """About how many bytes the new version writes: its new shards (estimated as convert does) and
    the rewritten ones (at most their old size); kept shards cost nothing (links). What the dry run
    says; the space check adds `margin` (the catalog and metadata, and room to spare)."""
    from img2tfrecord.conversion.plan.job import estimate_task_bytes

    table = next(iter(changes.found.splits.values())).table
    new = sum(estimate_task_bytes(TaskView(table, sc.encode), settings.encode) for sc in changes.splits.values())
    rewritten = sum(int(e.get("bytes") or 0) for v in layout.rewritten.values() for e, _ in v)
    return new + rewritten


def margin(changes: Changes) -> int:
    """The space check's safety margin over `needed`: 64 bytes a catalog row and 64 KB."""
    return 64 * len(changes.catalog) + 65536
