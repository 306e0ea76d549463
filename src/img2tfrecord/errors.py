"""Errors that map to the CLI's exit codes: 2 for usage errors, 1 for data/I-O failures."""

from __future__ import annotations


class Img2TFRecordError(Exception):
    """Base class; `exit_code` is what the CLI exits with."""

    exit_code = 1


class UsageError(Img2TFRecordError):
    """The user asked for something impossible (missing input, bad option, output exists). Exit 2."""

    exit_code = 2


class DataError(Img2TFRecordError):
    """The data or the disk failed (--strict with bad inputs, I/O failure, corrupt shard). Exit 1."""

    exit_code = 1


class WorkerDied(DataError):
    """A worker process vanished (OOM killer, crash); finished shards are kept for --resume. Exit 1."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM stopped a conversion; finished shards were kept for --resume."""

    def __init__(self, done: int, total: int) -> None:
        super().__init__(f"{done} of {total} shards finished")
        self.done = done
        self.total = total


def plural(n: int, word: str, words: str | None = None) -> str:
    """'1 record', '2 records', '1 class', '3 classes' (`words` for irregular plurals)."""
    return f"{n:,} {word if n == 1 else words or word + 's'}"
