"""Errors that map to the CLI's exit codes: 2 for usage errors, 1 for data/I-O failures; and how a
message names an option for its audience.

The same message reaches two audiences: the CLI's user types `--overwrite` and `--split
train=0.8`, a Python caller passes `overwrite=True` and `split="train=0.8"`. A message is written
once, naming each option with `option(name, value)` (or `said(cli, python)` for other words that
differ); that leaves a marker holding both spellings, and `wording()` renders the markers for the
current audience: Python's unless the CLI has entered `cli_wording()`. Errors render when shown
(`str(e)`), so one raised in a worker process and sent back reads right where it is shown;
messages the library emits and returns (warnings, a dry run's `refused`) are rendered on the way
out. The markers are three control characters (GS, RS, US) in that order: a file name holding
exactly that sequence would be shown altered, any other control character is shown escaped by
the CLI (cli/text.py).
"""

from __future__ import annotations

import contextlib
import difflib
import re
import shlex
from collections.abc import Iterable, Iterator
from typing import Any

_OPEN, _SEP, _CLOSE = "\x1d", "\x1e", "\x1f"  # group, record, unit separators: never in our text
_MARKER = re.compile(f"{_OPEN}([^{_SEP}]*){_SEP}([^{_CLOSE}]*){_CLOSE}")
_NAME_ONLY = object()
_cli = False  # process-wide (the library's threads build messages too); see cli_wording()


def said(cli: str, python: str) -> str:
    """Words that differ between the audiences ("run the same command" / "call convert() again")."""
    return f"{_OPEN}{cli}{_SEP}{python}{_CLOSE}"


def option(name: str, value: Any = _NAME_ONLY, *, cli: str | None = None) -> str:
    """An option in a message: `option("overwrite", True)` is `--overwrite` for the CLI and
    `overwrite=True` for Python; `option("fsync", False)` `--no-fsync` / `fsync=False`;
    `option("split", "train=1.1")` `--split train=1.1` / `split='train=1.1'`; `option("split")`
    names it: `--split` / `split`. `cli`: the CLI's name when it differs (`extract` for extract_dir)."""
    flag = "--" + (cli or name.replace("_", "-"))
    if value is _NAME_ONLY:
        return said(flag, name)
    if value is True or value is False:
        return said(flag if value else "--no-" + flag[2:], f"{name}={value}")
    return said(f"{flag} {shlex.quote(str(value))}", f"{name}={value!r}")


def wording(text: str, cli: bool | None = None) -> str:
    """`text` with its option markers rendered for the CLI or Python (default: the current audience)."""
    side = 1 if (_cli if cli is None else cli) else 2
    return _MARKER.sub(lambda m: m[side], text) if _OPEN in text else text


@contextlib.contextmanager
def cli_wording() -> Iterator[None]:
    """Messages made or shown inside the block speak of options (`--overwrite`): the CLI's commands."""
    global _cli
    before, _cli = _cli, True
    try:
        yield
    finally:
        _cli = before


class Img2TFRecordError(Exception):
    """Base class; `exit_code` is what the CLI exits with. Its message names options for the
    audience it is shown to (see `option`)."""

    exit_code = 1
    kind = "error"  # what `--json` names it (error.kind): a CI script's switch

    def __str__(self) -> str:
        return wording(super().__str__())

    def learnt(self) -> dict[str, Any]:
        """What the failed run found out, beside its message (`--json` puts it in the answer)."""
        return {}


class UsageError(Img2TFRecordError):
    """The user asked for something impossible (missing input, bad option, output exists). Exit 2."""

    exit_code = 2
    kind = "usage"


class DataError(Img2TFRecordError):
    """The data or the disk failed (--strict with bad inputs, I/O failure, corrupt shard). Exit 1."""

    exit_code = 1
    kind = "data"


class UnusableImages(DataError):
    """--strict found images it cannot convert: every one of them, once all were checked. Exit 1.

    `skipped`: each as dataset.json lists skips (path, split, reason)."""

    kind = "unusable_images"
    NAMED = 5  # named in the message; `skipped` holds them all

    def __init__(self, skipped: list[dict[str, str]]) -> None:
        self.skipped = skipped = sorted(skipped, key=lambda s: s["path"])
        n = len(skipped)
        strict = option("strict", True)
        if n == 1:
            super().__init__(f"{strict}: {skipped[0]['path']}: {skipped[0]['reason']}; nothing was published")
            return
        named = ", ".join(s["path"] for s in skipped[: self.NAMED])
        more = f" and {n - self.NAMED:,} more" if n > self.NAMED else ""
        listed = said("each is listed above as skipped", "each is in the exception's .skipped")
        super().__init__(f"{strict}: {n:,} unusable images ({listed}): {named}{more}; nothing was published")

    def __reduce__(self) -> Any:  # raised in a worker process, re-raised in the caller's
        return (type(self), (self.skipped,))

    def learnt(self) -> dict[str, Any]:
        return {"skipped": self.skipped}


class UnknownParameter(UsageError, TypeError):
    """A keyword the public API does not take (`convert(..., shard=4)`): a TypeError, as Python's
    own would be, that names the function's parameters instead of an internal function's."""


def check_keywords(function: str, given: Iterable[str], accepted: Iterable[str]) -> None:
    """Raise UnknownParameter for the first of `given` not in `accepted`, with a close match."""
    names = list(accepted)
    for key in given:
        if key not in names:
            close = difflib.get_close_matches(key, names, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise UnknownParameter(
                f"{function}() got an unexpected keyword argument {key!r}{hint}; its parameters: {', '.join(names)}"
            )


class WorkerDied(DataError):
    """A worker process vanished (OOM killer, crash); finished shards are kept for --resume. Exit 1."""

    kind = "worker_died"


class Interrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM stopped a conversion; finished shards were kept for --resume.

    `publishing`: it came while the finished dataset was being put in place; `in_place`: why
    that is not one atomic step there (then OUTPUT may be incomplete), else None; `published`:
    it came once the dataset was in place (nothing is left to do); `kept_in`: the folder that holds
    the finished shards (the workspace beside OUTPUT, `.out.img2tfrecord`), as the user's path spells it."""

    def __init__(
        self,
        done: int,
        total: int,
        publishing: bool = False,
        in_place: str | None = None,
        published: bool = False,
        kept_in: str | None = None,
    ) -> None:
        super().__init__(f"{done} of {total} shards finished")
        self.done = done
        self.total = total
        self.publishing = publishing
        self.in_place = in_place
        self.published = published
        self.kept_in = kept_in

    def learnt(self) -> dict[str, Any]:
        """What `--json` adds to the answer of an interrupted run."""
        return {"shards_finished": self.done, "shards_total": self.total, "published": self.published}

    def describe(self, output: str) -> str:
        """One line (what the CLI prints): what is true of OUTPUT now, and what to run."""
        again = f"{said('run the same command', 'call convert() again')} with {option('resume', True)}"
        if self.published:
            return f"interrupted after the dataset was published in {output}: it is complete, nothing is left to do"
        if self.publishing and self.in_place:
            return wording(
                f"interrupted while publishing: {output} is incomplete (readers refuse it); {again} to finish it"
            )
        kept = f", kept in {self.kept_in}" if self.kept_in and self.done else ""
        return wording(
            f"interrupted: nothing was published ({self.done} of {self.total} shards finished{kept}; {again} to continue)"
        )


def plural(n: int, word: str, words: str | None = None) -> str:
    """'1 record', '2 records', '1 class', '3 classes' (`words` for irregular plurals)."""
    return f"{n:,} {word if n == 1 else words or word + 's'}"


_SIZE_UNITS = (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("KB", 1e3))


def size_text(n: float, per: str = "") -> str:
    """Bytes as every message says them: decimal units ("850.0 KB", "1.2 MB", "3.4 GB", "120 bytes";
    never "0.0 MB"), the units of disk makers and of `df -H`. One formatter, so that convert's
    summary and inspect's table say the same figure for the same shards."""
    for unit, size in _SIZE_UNITS:
        if n >= size:
            return f"{n / size:,.1f} {unit}{per}"
    return f"{n:,.0f} {'byte' if round(n) == 1 else 'bytes'}{per}"
