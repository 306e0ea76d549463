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
    """Ctrl-C or SIGTERM stopped a conversion; finished shards were kept for --resume.

    `publishing`: it came while the finished dataset was being put in place; `in_place`: why
    that is not one atomic step there (then OUTPUT may be incomplete), else None; `published`:
    it came once the dataset was in place (nothing is left to do)."""

    def __init__(
        self, done: int, total: int, publishing: bool = False, in_place: str | None = None, published: bool = False
    ) -> None:
        super().__init__(f"{done} of {total} shards finished")
        self.done = done
        self.total = total
        self.publishing = publishing
        self.in_place = in_place
        self.published = published

    def describe(self, output: str) -> str:
        """The one line the CLI prints: what is true of OUTPUT now, and what to run."""
        if self.published:
            return f"interrupted after the dataset was published in {output}: it is complete, nothing is left to do"
        if self.publishing and self.in_place:
            return (
                f"interrupted while publishing: {output} is incomplete (readers refuse it); "
                "run the same command with --resume to finish it"
            )
        return (
            f"interrupted: nothing was published ({self.done} of {self.total} shards finished; "
            "run the same command with --resume to continue)"
        )


def plural(n: int, word: str, words: str | None = None) -> str:
    """'1 record', '2 records', '1 class', '3 classes' (`words` for irregular plurals)."""
    return f"{n:,} {word if n == 1 else words or word + 's'}"
