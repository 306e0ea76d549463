"""--dedupe drop in the local engine: which later copies each shard leaves out, decided before any
shard is written (so every worker knows, and a resumed run decides as the first did), and which
journaled shards a resumed run must convert again because those decisions changed."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from img2tfrecord.conversion.plan.job import Drop
from img2tfrecord.conversion.plan.options import ShardSettings
from img2tfrecord.conversion.write.dedupe import Deduper
from img2tfrecord.conversion.write.shards import ShardOutcome
from img2tfrecord.format.schema import utf8_text

if TYPE_CHECKING:
    from img2tfrecord.conversion.plan.job import Plan, Task

DIGEST_BATCH = 64 * 256  # files whose digests are asked for at once (their Tasks held meanwhile)


def stale_drops(plan: Plan, done: dict[str, ShardOutcome], drop: dict[str, Drop]) -> list[str]:
    """The journaled shards (a resumed run) whose dropped copies are not the ones `drop` decides now.

    A shard's journal fingerprint covers its own images, not the copies elsewhere that decide what
    it drops: a kept copy removed or edited between the interruption and --resume makes one of its
    copies the first, to be written, where the finished shard left it out (and a new earlier copy
    the reverse). Those shards are converted again."""
    stale = []
    for shard in plan.shards:
        outcome = done.get(shard.name)
        if outcome is None:
            continue
        now: dict[int | str | None, str | None]
        then: dict[int | str | None, str | None]
        if len(outcome.dropped_at) == len(outcome.dropped):  # by position in the shard
            now = {i: drop[t.rel].digest for i, t in enumerate(shard.tasks) if t.rel in drop}
            then = {int(i): d.get("digest") for i, d in zip(outcome.dropped_at, outcome.dropped)}
        else:  # a journal from before dropped_at: by path
            now = {utf8_text(t.rel): drop[t.rel].digest for t in shard.tasks if t.rel in drop}
            then = {d.get("path"): d.get("digest") for d in outcome.dropped}
        if now != then:
            stale.append(shard.name)
    return stale


def drop_map(
    plan: Plan, settings: ShardSettings, digest_all: Callable[[list[str]], list[str | None]]
) -> dict[str, Drop]:
    """--dedupe drop: rel path of each later copy -> its `Drop` (digest, the first copy's rel path), in plan order.

    Decided before any shard is written, from a content hash of every planned file (~40 us per
    100 KB file), so every shard knows what to leave out whichever worker writes it, and a resumed
    run decides exactly as the first. The plan's Tasks are made DIGEST_BATCH at a time, not all at once.
    """
    if settings.dedupe != "drop":
        return {}
    if plan.drop is not None:  # decided across versions (update)
        return plan.drop
    first = Deduper("drop")
    out: dict[str, Drop] = {}
    batch: list[Task] = []

    def decide() -> None:
        for t, d in zip(batch, digest_all([t.path for t in batch])):
            if d is not None and (kept := first.admit(d, t.rel)) is not None:
                out[t.rel] = Drop(digest=d, kept=kept)
        batch.clear()

    for shard in plan.shards:
        batch.extend(shard.tasks)
        if len(batch) >= DIGEST_BATCH:
            decide()
    decide()
    return out
