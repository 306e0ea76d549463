"""`update --resume`: an interrupted update keeps its finished new shards, with convert's journal.

`update` encodes its new shards with the local engine into `NEW_DIR` inside the workspace's build
folder, and journals each finished one in the workspace (`conversion.write.resume`, the journal of
`convert --resume`; its header says `"command": "update"` and its fingerprint covers the old
version's dataset.json digest, the options, the classes and each new shard's images). SIGINT or
SIGTERM (or a kill) leaves OUTPUT at the old version and the journal and the finished shards in
the workspace; the same command with --resume reuses those whose images are unchanged (checked as
convert checks them), so the result is byte-identical to an uninterrupted update. The shards
rewritten by copying records are journaled too, each under a key of what it is made from (the old
shard's name, size and checksums, the record numbers kept: `rewrite_key`, in the header's
`sources`); the links, catalog and metadata are cheap and made again.

Unlike `convert --resume`, an unfinished update whose input or dataset changed since (another
fingerprint) is not refused: what it would publish is computed from the input as it is now, so
its shards are dropped with a warning and the update starts over.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from img2tfrecord import fs
from img2tfrecord.conversion.events import EventSink
from img2tfrecord.conversion.write.output_lock import WORKSPACE_LOCK
from img2tfrecord.conversion.write.resume import (
    JOURNAL,
    Journal,
    Reusable,
    finished_count,
    header,
    journal_command,
    load_done,
    prune,
)
from img2tfrecord.conversion.write.shards import ShardOutcome
from img2tfrecord.conversion.write.workspace import Workspace
from img2tfrecord.errors import UsageError, option, plural, said, wording

if TYPE_CHECKING:  # pragma: no cover
    from img2tfrecord.conversion.plan.job import Plan

UPDATE = "update"  # the journal header's `command`


@dataclass
class ResumeState:
    """What an update run journals: whether it resumes, and its journal once the new shards are planned."""

    resume: bool
    journal: Journal | None = None
    total: int = 0  # new and rewritten shards planned
    reused: list[str] = field(default_factory=list)

    @property
    def done(self) -> int:
        return len(self.journal.done) if self.journal is not None else 0


def check_unfinished(ws: Workspace, resume: bool) -> None:
    """Refuse an update over another command's unfinished run, or over an unfinished update's
    finished shards without --resume (finished work is not thrown away unasked, as in convert)."""
    command = journal_command(ws.journal_dir)
    if command is None:
        return
    if command != UPDATE:
        raise UsageError(
            f"{ws.shown} holds an unfinished convert: finish it (convert with {option('resume', True)}) "
            f"or discard it (convert with {option('overwrite', True)}) first"
        )
    done = finished_count(ws.journal_dir) or 0
    if done and not resume:
        them = "it" if done == 1 else "them"
        raise UsageError(
            f"{ws.shown} holds an unfinished update with {plural(done, 'finished shard')}: add {option('resume', True)} "
            f"({said('same command', 'same arguments')}) to reuse {them}; what no longer fits the input is redone"
        )


def clear_build(ws: Workspace, keep: str) -> None:
    """A resumed update: empty the build folder of what the interrupted one made after encoding
    (links, rewritten shards, catalog), keeping the folder `keep` of new shards and the journal."""
    with contextlib.suppress(FileNotFoundError):
        for name in fs.listdir(ws.build):
            if name not in (keep, JOURNAL, WORKSPACE_LOCK):
                path = fs.join(ws.build, name)
                fs.rmtree(path) if fs.isdir(path) else fs.remove(path)


def rewrite_key(entry: dict[str, Any], keep: list[int]) -> str:
    """What a rewritten shard is made from: the old shard (name, size, checksums) and the records kept."""
    what = [entry.get("file"), entry.get("bytes"), entry.get("checksums"), keep]
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:16]


def journal(
    ws: Workspace, plan: Plan, work: str, state: ResumeState, emit: EventSink, rewrites: dict[str, str]
) -> Journal:
    """The journal of this update's new and rewritten shards in `work` (`rewrites`: name ->
    `rewrite_key`): with --resume, the interrupted run's finished ones that still fit are reused
    (named, with why, when one is redone)."""
    head = header(plan) | {"command": UPDATE}
    head["sources"] = head["sources"] | rewrites
    done: dict[str, ShardOutcome] = {}
    if state.resume:
        try:
            reusable = load_done(plan, work, ws.journal_dir, rewrites)
        except UsageError as e:  # another input or dataset: nothing of it fits
            emit("warning", wording(f"resuming: the unfinished update's shards are not reused: {e}"))
            reusable = Reusable()
        done = reusable.done
        for redone in reusable.redone:
            emit("warning", f"resuming: shard {redone.name} is made again: {redone.why}")
        prune(work, set(done))
        if done:
            emit("note", f"resuming: {len(done)} of {plural(len(plan.shards) + len(rewrites), 'shard')} reused")
    state.total = len(plan.shards) + len(rewrites)
    state.reused = sorted(done)
    state.journal = Journal(work, head, done, journal_dir=ws.journal_dir)
    return state.journal


def keep_finished(work: str, state: ResumeState) -> None:
    """After an interruption: the finished new shards stay (with the journal), partial files go."""
    if state.journal is not None and fs.exists(work):
        prune(work, set(state.journal.done))


def interrupted_line(output: str, done: int, total: int) -> str:
    """What the CLI says when an update is interrupted before its switch."""
    kept = f" ({done} of {plural(total, 'shard')} finished and kept)" if total else ""
    return wording(
        f"interrupted: {output} is unchanged{kept}; {said('run the same command', 'call update() again')} "
        f"with {option('resume', True)} to continue"
    )


def link_or_move(src: str, dst: str) -> bool:
    """Put a new shard at its final name: a hard link locally (the journaled file stays where
    --resume finds it until the switch; a copy where the file system has no hard links: True),
    a rename on object stores."""
    if fs.is_remote(src):
        fs.rename(src, dst)
        return False
    with contextlib.suppress(FileNotFoundError):
        os.remove(dst)
    return fs.link_or_copy(src, dst)
