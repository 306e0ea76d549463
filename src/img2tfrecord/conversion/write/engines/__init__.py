"""Engines run a plan's shards: the local one with worker processes, the Beam one on a runner.

Both have one interface, `Engine.run(plan, staging, settings, emit) -> [ShardOutcome]` (in plan
order), and run the same per-shard code (`encode.encode_shard` + `write.write_shard`), so the
bytes they write are the same. `conversion.convert` builds one and hands it the plan; nothing
here imports the engine modules themselves (Beam is an optional, heavy import).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from img2tfrecord.conversion.events import EventSink
    from img2tfrecord.conversion.plan.job import Plan
    from img2tfrecord.conversion.plan.options import ShardSettings
    from img2tfrecord.conversion.write.shards import ShardOutcome


class Engine(Protocol):
    """Writes every shard of `plan` into `staging` with `settings`; returns their outcomes."""

    name: str
    resumable: bool  # finished shards are journaled, so an interrupted run can be resumed

    def run(self, plan: Plan, staging: str, settings: ShardSettings, emit: EventSink) -> list[ShardOutcome]: ...
