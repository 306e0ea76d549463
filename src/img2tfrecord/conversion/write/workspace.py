"""Where a run builds OUTPUT's next version: the workspace beside OUTPUT (or inside it, when the
version is published in place), and which entries of OUTPUT are a dataset's.

The layout and the reasons for publishing in place are in `conversion.write.publish`'s docstring;
this module only names the folders (no side effect) and tells ours from the user's files, so
that `--overwrite` never drops a folder that is not ours.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass

from img2tfrecord import fs
from img2tfrecord.conversion.write.output_lock import WORKSPACE_LOCK
from img2tfrecord.errors import UsageError, option
from img2tfrecord.format.catalog import CATALOG_NAME
from img2tfrecord.format.manifest import LABEL_MAP_NAME, LABELS_NAME, MANIFEST_NAME
from img2tfrecord.format.naming import LOCK_NAME, PUBLISHING_NAME, SHARD_RE, STAGING_DIR
from img2tfrecord.format.tfds import FILE_NAMES as TFDS_NAMES
from img2tfrecord.format.workspace_journal import ASIDE_NAME, JOURNAL_NAME, workspace_name

JOURNAL = JOURNAL_NAME  # finished shards, for --resume: conversion.write.resume writes it under this name
BUILD = "dataset"
ASIDE = ASIDE_NAME  # the old version, after a plain-rename switch (readers look for it: format.workspace_journal)
OLD = "old-"  # old versions, kept while a reader holds them (`format.pinning`)
PUBLISHED = "published"


@dataclass(frozen=True)
class Workspace:
    """Where a run builds the next version of `output`, and how it is switched in.

    `root` holds the journal; `build` the new version; `lock_path` the lock (None on object
    stores: no locks there). `in_place` names why there is no atomic switch (None: there is one)."""

    output: str
    root: str
    build: str
    lock_path: str | None
    in_place: str | None = None
    given: str = ""  # OUTPUT as the user wrote it, for messages

    @property
    def shown(self) -> str:
        return self.given or self.output

    @property
    def journal_dir(self) -> str:
        return self.root

    @property
    def shown_root(self) -> str:
        """The folder that holds a run's journal and finished shards, as the user's OUTPUT spells it:
        `.out.img2tfrecord` beside `out`, or `out/.img2tfrecord-staging` in place."""
        if self.in_place or fs.is_remote(self.output):
            return fs.join(self.shown, os.path.basename(self.root))
        head = os.path.dirname(os.path.normpath(self.shown))
        return os.path.join(head, os.path.basename(self.root))


def workspace(output_dir: str) -> Workspace:
    """The workspace of `output_dir` (a trailing slash, `.` or a symlink name the same folder)."""
    return dataclasses.replace(_workspace(output_dir), given=output_dir)


def _workspace(output_dir: str) -> Workspace:
    if fs.is_remote(output_dir):
        out = output_dir.rstrip("/")
        staging = fs.join(out, STAGING_DIR)
        return Workspace(out, staging, staging, None, "object stores have no atomic rename")
    out = os.path.realpath(fs.local(output_dir))
    parent, name = os.path.split(out)
    staging = os.path.join(out, STAGING_DIR)
    if not name:
        return Workspace(out, staging, staging, os.path.join(out, LOCK_NAME), "it is the root folder")
    root = os.path.join(parent, workspace_name(name))
    if not _writable(parent):
        return Workspace(out, staging, staging, os.path.join(out, LOCK_NAME), f"{parent} is not writable")
    lock = os.path.join(root, WORKSPACE_LOCK)
    why = None
    if os.path.isdir(out) and os.path.ismount(out):
        why = f"{out} is a mount point"
    elif os.path.exists(os.path.join(staging, JOURNAL)):
        why = "an unfinished run there is resumed in place"
    elif os.path.exists(os.path.join(staging, PUBLISHING_NAME)):
        why = "a publish in place there was cut short"
    elif _inside(_cwd(), out) and not os.path.exists(os.path.join(root, JOURNAL)):
        why = "it is the current directory"
    if why:
        return Workspace(out, staging, staging, lock, why)
    return Workspace(out, root, os.path.join(root, BUILD), lock)


def _writable(path: str) -> bool:
    while not os.path.exists(path):  # created by the run: the nearest folder that exists decides
        up = os.path.dirname(path)
        if up == path:
            return False
        path = up
    return os.access(path, os.W_OK | os.X_OK)


def _cwd() -> str:
    try:
        return os.getcwd()
    except OSError:  # the current directory was removed
        return ""


def _inside(path: str, folder: str) -> bool:
    if not path:
        return False
    path = os.path.realpath(path)
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def is_ours(name: str) -> bool:
    """A name a dataset (or a run writing one) puts in OUTPUT: shards, indexes, metadata, the
    catalog, temp files."""
    base = name.removesuffix(".tmp")
    return (
        SHARD_RE.match(base.removesuffix(".idx")) is not None
        or base in (MANIFEST_NAME, LABELS_NAME, LABEL_MAP_NAME, CATALOG_NAME, *TFDS_NAMES)
        or name in (STAGING_DIR, LOCK_NAME)
    )


def foreign_entries(output_dir: str) -> list[str]:
    """Entries of an existing OUTPUT that are not part of a dataset (kept across --overwrite)."""
    try:
        return sorted(n for n in fs.listdir(output_dir) if not is_ours(n))
    except OSError:
        return []


def check_foreign(ws: Workspace) -> None:
    """Refuse, before any work, an --overwrite that would have to drop a folder that is not ours:
    the switch replaces OUTPUT whole, and only files can be carried over (hard links)."""
    if ws.in_place or not os.path.isdir(ws.output):
        return
    dirs = [n for n in foreign_entries(ws.output) if os.path.isdir(os.path.join(ws.output, n))]
    if dirs:
        shown = ", ".join(d + "/" for d in dirs[:3]) + (f" and {len(dirs) - 3} more" if len(dirs) > 3 else "")
        raise UsageError(
            f"output {ws.shown} holds {shown}, not part of a dataset; {option('overwrite', True)} replaces the folder whole "
            "and keeps only plain files: move the folder away, or choose another output"
        )
