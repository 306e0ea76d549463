"""update under passing faults: an image this run could not read keeps the record it had.

A changed image (or one whose link's target is missing now) is encoded again; when reading it
fails with an OS or I/O error (`skips.is_passing`: permission denied, EIO, a remote store's
error...), the error says nothing about its content, so the record an earlier version made of it
stays, with its catalog row as it was (its old size and mtime: the next update sees it changed and
tries it again). Known only once the encoder has run, so `update` lays out the old shards again
after this (`assemble.keep_unread`, then `assemble.slots_of`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from img2tfrecord.conversion.plan.job import PlannedShard
from img2tfrecord.conversion.plan.skips import is_passing
from img2tfrecord.conversion.plan.table import TaskView, encode_name
from img2tfrecord.conversion.versions.changes import Changes
from img2tfrecord.conversion.write.shards import ShardOutcome
from img2tfrecord.errors import plural
from img2tfrecord.format.catalog import SKIPPED, Catalog


def unread_paths(planned: Sequence[PlannedShard], outcomes: Sequence[ShardOutcome]) -> set[bytes]:
    """The paths (catalog form) of the images the encoder skipped for a passing error."""
    out: set[bytes] = set()
    for sh, o in zip(planned, outcomes):
        for k, skip in enumerate(o.skipped):
            if not is_passing(skip["reason"]):
                continue
            tasks = sh.tasks
            if isinstance(tasks, TaskView) and k < len(o.skipped_at):
                out.add(tasks.table.rel_bytes(tasks.order[int(o.skipped_at[k])]))
            else:
                out.add(encode_name(skip["path"]))
    return out


def keep_records(changes: Changes, unread: set[bytes]) -> set[bytes]:
    """Take the records of `unread` images out of what leaves (`SplitChanges.gone`) into the kept
    rows; return the paths whose records are kept (their new skipped rows are left out)."""
    if not unread:
        return set()
    cat, kept = changes.catalog, set()
    for sc in changes.splits.values():
        for r in sorted(sc.gone):
            if cat.rels[r] in unread:
                sc.gone.discard(r)
                changes.kept_rows.append(r)
                kept.add(cat.rels[r])
    changes.kept_rows.sort()
    return kept


def kept_back_warning(n: int, version: int) -> str:
    return (
        f"{plural(n, 'changed image')} could not be read now; "
        f"{'its record' if n == 1 else 'their records'} of version {version} {'stays' if n == 1 else 'stay'}, "
        "and the next update tries again"
    )


def recorded_walk_skips(manifest: dict[str, Any], cat: Catalog) -> list[Any]:
    """dataset.json's skips of the walk (folders it could not list): they come first, before one
    per skipped catalog row (as convert's finalize and `versions.manifest.manifest_of` list them)."""
    listed = list(manifest.get("skipped") or [])
    return listed[: max(0, len(listed) - cat.states.count(SKIPPED))]
