"""The output directory before a run: may it be written (not empty without --overwrite), and is there space (the lock, the workspace and the publish switch are `conversion.write.publish`'s)."""

from __future__ import annotations

import os
import shlex
import shutil
from typing import NamedTuple

from img2tfrecord import fs
from img2tfrecord.conversion.events import EventSink
from img2tfrecord.conversion.plan.job import Plan
from img2tfrecord.conversion.write.publish import has_unfinished
from img2tfrecord.conversion.write.workspace import Workspace, check_foreign
from img2tfrecord.errors import DataError, UsageError, option, plural, said, size_text
from img2tfrecord.format.manifest import MANIFEST_NAME
from img2tfrecord.format.naming import LOCK_NAME, STAGING_DIR


def check_output(ws: Workspace, overwrite: bool, resume: bool = False, source: Source | None = None) -> None:
    """Refuse a non-empty output directory unless --overwrite (exit 2, before any work).

    One that holds a dataset is most likely one to update: the message names `update` (with
    `source`, the command's input) before --overwrite, which replaces it.

    --resume of an unfinished run is not refused: its OUTPUT holds the version it replaces (or,
    published in place, part of the new one). --resume on a finished dataset says there is
    nothing to resume, rather than suggesting --overwrite."""
    output_dir = ws.shown
    if fs.exists(ws.output) and not fs.isdir(ws.output):
        raise UsageError(f"output {output_dir} exists and is not a directory")
    if fs.isdir(ws.output):
        existing = [n for n in fs.listdir(ws.output) if n not in (STAGING_DIR, LOCK_NAME)]
        if existing and not overwrite and not (resume and has_unfinished(ws)):
            if resume and MANIFEST_NAME in existing:
                raise UsageError(
                    f"{option('resume', True)}: {output_dir} holds a finished dataset, there is nothing to resume; "
                    f"to convert again, drop {option('resume')} and add {option('overwrite', True)}"
                )
            if MANIFEST_NAME in existing and source is not None:
                raise UsageError(
                    f"output {output_dir} holds a dataset: to bring it up to date with {source.input_dir}, "
                    f"{source.update(output_dir)}; to replace it, add {option('overwrite', True)}"
                )
            raise UsageError(
                f"output {output_dir} is not empty ({plural(len(existing), 'entry', 'entries')}): choose another folder or add {option('overwrite', True)}"
            )
        if overwrite:
            check_foreign(ws)


class Source(NamedTuple):
    """What a convert reads (its INPUT, its --file-list): the `update` a dataset in OUTPUT takes."""

    input_dir: str
    file_list: str | None = None

    def update(self, output_dir: str) -> str:
        """'run: img2tfrecord update IN OUT' (CLI) / "call update('IN', 'OUT')" (Python)."""
        args = [self.input_dir, output_dir] + (["--file-list", self.file_list] if self.file_list else [])
        more = f", file_list={self.file_list!r}" if self.file_list else ""
        return said(
            f"run: {shlex.join(['img2tfrecord', 'update', *args])}",
            f"call update({self.input_dir!r}, {output_dir!r}{more})",
        )


def free_bytes(output_dir: str) -> int | None:
    """Free bytes on the disk that holds (or will hold) `output_dir`; None when unknown (remote)."""
    if fs.is_remote(output_dir):
        return None
    path = os.path.abspath(output_dir)
    while not os.path.exists(path):
        path = os.path.dirname(path)
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return None


def _space_note(plan: Plan) -> str:
    free = free_bytes(plan.output_dir)
    note = f"the dataset needs about {size_text(plan.estimated_bytes)}"
    return note + (f" and {size_text(free)} are free there" if free is not None else "")


def _describe_io(e: BaseException) -> str:
    msg = getattr(e, "message", None) or getattr(e, "strerror", None) or str(e)
    return msg.strip().splitlines()[0] if msg.strip() else type(e).__name__


def _check_space(plan: Plan, emit: EventSink) -> None:
    """Fail before any work when the output disk clearly cannot hold the dataset."""
    check_space(plan.output_dir, plan.estimated_bytes, plan.settings.encode.reencodes, emit)


def check_space(
    folder: str,
    needed: int,
    estimated: bool,
    emit: EventSink,
    *,
    writes: str = "the dataset needs",
    what: str = "the output",
) -> None:
    """Fail before any work when `folder`'s disk clearly cannot hold `needed` bytes (convert's and
    update's rule); when `estimated` (images re-encoded: a rough figure) only warn."""
    free = free_bytes(folder)
    if free is None or needed <= free:
        return
    note = f"{writes} about {size_text(needed)} and {size_text(free)} are free there"
    if estimated:  # a rough estimate: say so, but let the user try
        emit("warning", f"{what} may not fit: {note}")
        return
    raise DataError(f"not enough space in {folder}: {note}; free some space or choose another disk")
