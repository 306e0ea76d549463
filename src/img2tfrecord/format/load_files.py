"""load()'s files: what the path given to load() names, and the shard files it reads.

A dataset folder is read through the folder held open (`format.pinning`): the shards TensorFlow
opens are those of the version whose dataset.json load() read, whatever is published meanwhile.
A list of files or a glob is read by name; a shard replaced under such a reader is refused
(`replaced` says which version replaced which).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any, NamedTuple

from img2tfrecord import fs
from img2tfrecord.errors import DataError, UsageError
from img2tfrecord.format.layout import (
    Manifest,
    check_complete,
    glob_paths,
    is_shard_candidate,
    read_manifest,
    refuse_unfinished,
    shard_files_in,
    special_kind,
)
from img2tfrecord.format.manifest import MANIFEST_NAME as MANIFEST
from img2tfrecord.format.pinning import Holder, names, pin


class Source(NamedTuple):
    """What `load` reads: the shard files as shown in messages and as TensorFlow opens them (through
    the dataset folder load() holds open, `format.pinning`), and what is known of them."""

    shown: list[str]
    reads: list[str]
    man: Manifest | None
    records: int | None
    holder: Holder | None = None
    folder: str | None = None


def split_files(path: str | os.PathLike[str] | Sequence[str | os.PathLike[str]], split: str) -> Source:
    """The shard files of `load`'s `path`; a dataset folder is held open (`format.pinning`)."""
    if not isinstance(path, (str, os.PathLike)):
        files = [os.fspath(p) for p in path]
        if not files:
            raise UsageError("load: the list of files is empty")
        return Source(files, files, None, None)
    text = os.fspath(path)
    p = fs.as_path(text)
    if p.is_file() and p.name == MANIFEST:
        p = p.parent
    if p.is_dir():
        return folder_files(p, split)
    if p.is_file():
        return Source([text], [text], None, None)
    if (kind := special_kind(p)) is not None:
        raise UsageError(f"load: {text!r} is {kind}, not a TFRecord file or a dataset directory")
    files = [os.fspath(m) for m in glob_paths(text) if is_shard_candidate(m)]
    if not files:
        if not p.exists():  # a run into it killed, or its switch cut short: what to run, as inspect says it
            refuse_unfinished(text)
        raise UsageError(f"load: {text!r} is no directory, file or glob that matches shard files")
    return Source(files, files, None, None)


def folder_files(p: Any, split: str) -> Source:
    """A dataset folder's shards of `split`, read through the folder held open (locally): the
    version read is the one whose dataset.json was read, whatever is published meanwhile."""
    folder = str(p)
    for _ in range(10):
        pinned = None if fs.is_remote(folder) else pin(folder)
        check_complete(folder)
        man = read_manifest(p)
        if pinned is not None and not names(pinned, folder):  # a new version came in meanwhile
            Holder(pinned)  # closed when collected
            continue
        holder = Holder(pinned) if pinned is not None else None
        if man is not None:
            refs = man.shards(split)
            if not refs:
                raise UsageError(f"{p / MANIFEST}: split {split!r} has no shards")
            records = man.splits[split].get("records")
            shown = [os.fspath(r.path) for r in refs]
            count = records if isinstance(records, int) else None
        else:
            found = shard_files_in(p, split)
            if not found:
                raise UsageError(f"{p}: no {MANIFEST} and no {split}-NNNNN-of-NNNNN shard files")
            shown, count = [os.fspath(f) for f in found], None
        reads = [pinned.path(os.path.basename(f)) for f in shown] if pinned is not None else shown
        return Source(shown, reads, man, count, holder, folder)
    raise DataError(f"{folder}: a new version is published there again and again; call load() later")


def identity(path: str) -> tuple[int, int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


def replaced(src: Source, i: int) -> str:
    """Our line for a shard that changed under a reader: the dataset, the version read, the newer one."""
    shown = src.shown[i]
    old = src.man.data.get("version") if src.man is not None else None
    if src.folder is None or old is None:
        return f"{shown} was removed or replaced while load() read it: call load() again"
    try:
        new = json.loads(fs.read_bytes(fs.join(src.folder, MANIFEST))).get("version")
    except (OSError, ValueError, AttributeError):
        new = None
    now = f"version {new}" if new is not None and new != old else "a newer version"
    return (
        f"{src.folder}: {now} replaced version {old} while load() read it, and "
        f"{os.path.basename(shown)} of version {old} is gone: call load() again to read {now}"
    )
