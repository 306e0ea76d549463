"""Resuming an interrupted conversion: a journal of finished shards in the staging folder.

Every shard that closes (fsync'd, checksummed) is recorded in ``<staging>/journal.jsonl``: a first
line with a fingerprint of the job (options, classes and the exact shard plan: which files, their
sizes, in which shard), then one line per finished shard, appended (so recording a shard costs
the same for the first and the ten-thousandth; a line cut short by a crash is ignored).
``--resume`` reuses the shards whose bytes still match the recorded checksum and converts only
the rest, so the result is byte-identical to an uninterrupted run; a
different fingerprint (input or options changed) is refused rather than silently mixed.
"""

from __future__ import annotations

import hashlib
import json
import threading
from typing import TYPE_CHECKING

from img2tfrecord import fs
from img2tfrecord.errors import UsageError
from img2tfrecord.writer import ShardOutcome

if TYPE_CHECKING:  # pragma: no cover
    from img2tfrecord.pipeline import Job

JOURNAL = "journal.jsonl"


def fingerprint(job: Job) -> str:
    """Hash of everything that decides the output bytes (not the engine or worker count)."""
    h = hashlib.sha256()
    h.update(json.dumps({"options": job.options, "classes": job.classes}, sort_keys=True, default=str).encode())
    for shard in job.plan:
        h.update(shard.name.encode())
        for t in shard.tasks:
            h.update(f"\0{t[1]}\0{t[5]}".encode("utf-8", "surrogateescape"))
    return h.hexdigest()


class Journal:
    """Append-only record of finished shards; safe to call from the shard-closing thread."""

    def __init__(self, staging: str, job_fingerprint: str, done: dict[str, ShardOutcome] | None = None) -> None:
        self.staging = staging
        self.path = fs.join(staging, JOURNAL)
        self.fingerprint = job_fingerprint
        self.done: dict[str, ShardOutcome] = dict(done or {})
        self._lock = threading.Lock()
        self._save()

    def record(self, outcome: ShardOutcome) -> None:
        with self._lock:
            self.done[outcome.info.file] = outcome
            if fs.is_remote(self.path):  # object stores cannot append: rewrite
                self._save()
            else:
                with open(self.path, "a", encoding="utf-8") as f:
                    f.write(json.dumps(outcome.to_dict()) + "\n")

    def _save(self) -> None:
        lines = [{"fingerprint": self.fingerprint}] + [o.to_dict() for o in self.done.values()]
        fs.write_text(self.path, "".join(json.dumps(line) + "\n" for line in lines))


def load_done(job: Job, staging: str) -> dict[str, ShardOutcome]:
    """The finished shards of an interrupted run of this same job, verified by their checksum.

    Raises UsageError when the journal belongs to a different input or different options.
    """
    path = fs.join(staging, JOURNAL)
    if not fs.exists(path):
        return {}
    entries = []
    for line in fs.read_bytes(path).splitlines():
        try:
            entries.append(json.loads(line))
        except ValueError:
            break  # a line cut short by a crash: what follows it is not trusted
    if not entries or not isinstance(entries[0], dict):
        return {}
    if entries[0].get("fingerprint") != fingerprint(job):
        raise UsageError(
            f"the interrupted run in {job.output_dir} had a different input or different options; "
            "run without --resume to start over"
        )
    planned = {s.name for s in job.plan}
    done = {}
    for d in entries[1:]:
        try:
            outcome = ShardOutcome.from_dict(d)
        except (TypeError, KeyError):
            continue  # written by another version
        name = outcome.info.file
        path = fs.join(staging, name)
        if name in planned and fs.exists(path) and _intact(path, outcome):
            if not outcome.info.index or fs.exists(fs.join(staging, outcome.info.index)):
                done[name] = outcome
    return done


def _intact(path: str, outcome: ShardOutcome) -> bool:
    """The shard's bytes are those journaled: its checksum matches (or, with --checksum none, its size)."""
    if fs.getsize(path) != outcome.info.bytes:
        return False
    return all(fs.checksum(path, name) == digest for name, digest in outcome.info.checksums.items())


def prune(staging: str, keep: set[str]) -> None:
    """After an interruption: drop partial files, keep finished shards (+ indexes) and the journal."""
    try:
        names = fs.listdir(staging)
    except Exception:
        return
    for name in names:
        if name != JOURNAL and name not in keep and name.removesuffix(".idx") not in keep:
            try:
                fs.remove(fs.join(staging, name))
            except Exception:
                pass
