"""Resuming an interrupted conversion: a journal of finished shards in the staging folder.

Every shard that closes (fsync'd, checksummed) is recorded in ``<staging>/journal.json`` together
with a fingerprint of the job (options, classes and the exact shard plan: which files, their
sizes, in which shard). ``--resume`` reuses the shards whose bytes still match the recorded
checksum and converts only the rest, so the result is byte-identical to an uninterrupted run; a
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

JOURNAL = "journal.json"


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
            self._save()

    def _save(self) -> None:
        data = {"fingerprint": self.fingerprint, "shards": {n: o.to_dict() for n, o in self.done.items()}}
        fs.write_text(self.path, json.dumps(data))


def load_done(job: Job, staging: str) -> dict[str, ShardOutcome]:
    """The finished shards of an interrupted run of this same job, verified by their checksum.

    Raises UsageError when the journal belongs to a different input or different options.
    """
    path = fs.join(staging, JOURNAL)
    if not fs.exists(path):
        return {}
    try:
        data = json.loads(fs.read_bytes(path))
    except ValueError:
        return {}  # a journal cut short by a crash: start over
    if data.get("fingerprint") != fingerprint(job):
        raise UsageError(
            f"the interrupted run in {job.output_dir} had a different input or different options; "
            "run without --resume to start over"
        )
    planned = {s.name for s in job.plan}
    done = {}
    for name, d in data.get("shards", {}).items():
        outcome = ShardOutcome.from_dict(d)
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
