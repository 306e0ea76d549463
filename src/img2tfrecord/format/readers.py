"""Readers of a dataset folder as its publishers see them: an open folder with a shared flock on it.

`load()` opens the dataset folder once, takes a shared flock on it, and (on Linux) gives
TensorFlow the shards as `/proc/self/fd/N/NAME`: paths that resolve through that open folder.
A publish never changes a version's folder: it renames the whole folder out of the way and the
new one in (`conversion.write.publish`). So a reader keeps reading the version it opened, whole, even
while a newer one is published: its paths still lead to the old folder, wherever it was moved.

The publisher, in turn, removes an old version only when it can take the exclusive flock on its
folder (`in_use`: no reader left); otherwise the folder is kept beside OUTPUT and removed by a
later command that finds it free. Without flock (not POSIX) or /proc, readers fall back to plain
paths, and a shard replaced under one is refused (`loader`), never read as a mix.

The open folder is closed only once nothing can read through it, which is later than when the
last Python object holding it goes: `next(iter(load(...)))` drops the dataset and its iterator in
one statement, the dataset first, and TensorFlow tears the iterator down after, waiting for its
prefetch threads, one of which may be opening the next shard as `/proc/self/fd/N/NAME` just
then. Closed at that moment, the open fails and `ignore_errors` retries it forever: the teardown
never ends (a hang, seen in the docs' own example). So a folder let go is retired, not closed
(`_retire`), and closed (`_reap`) once the Python frame whose statement let it go has moved on:
that statement, teardown included, has then finished. A reaper thread does this within ~20 ms,
and `pin` and `in_use` do it first, so a command in the same process sees the folder free.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
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

_PROC_FD = "/proc/self/fd"


@dataclass(frozen=True)
class Pin:
    """An open dataset folder a reader holds (shared flock) for as long as it may read it."""

    fd: int
    prefix: str  # the folder for the reader's paths: /proc/self/fd/N where /proc exists

    def path(self, name: str) -> str:
        return os.path.join(self.prefix, name)


class Holder:
    """Keeps a `Pin`'s folder open while anything that reads through it lives (retired when collected)."""

    def __init__(self, pin: Pin) -> None:
        self.pin = pin
        weakref.finalize(self, _retire, pin.fd)


def _close(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.close(fd)


class _Retired(NamedTuple):
    """A folder let go, and where: the thread, and the id and position of the Python frame whose
    statement let it go (the statement that may still be tearing down an iterator)."""

    fd: int
    thread: int
    frame: int
    lasti: int


_retired: list[_Retired] = []
# Reentrant: a Holder's finalizer (`_retire`) runs wherever the garbage collector does, and that
# can be inside `_reap` or `_retire` themselves, in the thread that holds the lock.
_retired_lock = threading.RLock()
_reaper: list[threading.Thread] = []  # the reaper thread while one runs
_OURS = (os.path.normcase(weakref.__file__), os.path.normcase(__file__))
_NO_FRAME = 0  # no frame has this id: moved on at the next pass
_REAPER = "img2tfrecord-close"  # the closing thread's name


def _retire(fd: int) -> None:
    """A Holder's finalizer: note the folder and the frame that let it go; the reaper closes it.

    A collection inside the reaper itself (its own pass allocates) has no statement of the user's
    to wait for: the folder is closed by its next pass. (Watched like any other, its frame would
    be the thread's `run`, which never moves on while the reaper runs: the folder never closed.)"""
    if threading.current_thread().name == _REAPER:  # by name: it may not be in `_reaper` yet
        with _retired_lock:
            _retired.append(_Retired(fd, threading.get_ident(), _NO_FRAME, 0))
        return
    frame: Any = sys._getframe(1)
    while frame is not None and os.path.normcase(frame.f_code.co_filename) in _OURS:
        frame = frame.f_back
    if frame is None:  # no Python frame to watch (interpreter shutdown, a bare C thread): nothing reads on
        _close(fd)
        return
    with _retired_lock:
        _retired.append(_Retired(fd, threading.get_ident(), id(frame), frame.f_lasti))
        _ensure_reaper()


def _ensure_reaper() -> None:
    """A reaper thread while anything is retired (the caller holds the lock)."""
    if _reaper or not _retired:
        return
    try:
        thread = threading.Thread(target=_reap_until_done, name=_REAPER, daemon=True)
        thread.start()
    except RuntimeError:  # no new threads at interpreter shutdown: the process closes them
        return
    _reaper.append(thread)


def _moved_on(r: _Retired, frames: dict[int, Any]) -> bool:
    """Whether the statement that let `r` go has finished: its frame is gone or past it."""
    frame = frames.get(r.thread)
    while frame is not None:
        if id(frame) == r.frame:
            return frame.f_lasti != r.lasti
        frame = frame.f_back
    return True


def _reap() -> bool:
    """Close the retired folders whose statement has finished; whether any is left. The list is
    taken whole first, so a folder retired meanwhile (a collection inside this) is not lost; the
    pass holds the lock, so `in_use` in another thread waits for it rather than finding a folder
    this pass was about to close still open. The threads' frames are let go after the lock: a
    frame that ended meanwhile frees its locals then, and their finalizers may run anything."""
    with _retired_lock:
        pending = _retired[:]
        _retired.clear()
        frames = sys._current_frames()
        keep = [r for r in pending if not _moved_on(r, frames)]
        for r in pending:
            if r not in keep:
                _close(r.fd)
        _retired.extend(keep)
        if threading.current_thread() not in _reaper:
            _ensure_reaper()  # a reaper that found the list empty meanwhile may have ended
        left = bool(_retired)
    del frames  # frames hold their locals: not a moment longer
    return left


def _reap_until_done() -> None:
    while True:
        time.sleep(0.02)
        if not _reap():
            with _retired_lock:
                if not _retired:
                    _reaper.clear()
                    return


def pin(folder: str) -> Pin | None:
    """Open `folder` and take a shared flock on it; None where that cannot be done (not POSIX, a
    remote path, an error: the reader then reads by name).

    A publish renames folders: the folder opened is checked, once locked, to still be the one the
    path names (else a new version came in meanwhile, and that one is opened instead)."""
    try:
        import fcntl
    except ImportError:  # not POSIX
        return None
    _reap()
    flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)
    for _ in range(10):
        try:
            fd = os.open(folder, flags)
        except OSError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
        except OSError:
            _close(fd)
            return None
        proc = os.path.join(_PROC_FD, str(fd))
        held = Pin(fd, proc if os.path.isdir(proc) else folder)
        if names(held, folder):
            return held
        _close(fd)
    return None


def in_use(folder: str) -> bool:
    """Whether a reader holds `folder` (a shared flock); False when it is free or cannot be checked.

    Free, it is left locked by nobody: the caller removes it right away (a reader that opens it
    after this finds it renamed or gone, and opens the folder the path names now)."""
    try:
        import fcntl
    except ImportError:
        return False
    _reap()
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        _close(fd)
    return False


def names(pinned: Pin, folder: str) -> bool:
    """Whether `folder` still names the folder `pinned` holds (no publish switched it since)."""
    try:
        here, named = os.fstat(pinned.fd), os.stat(folder)
    except OSError:
        return False
    return (here.st_dev, here.st_ino) == (named.st_dev, named.st_ino)


def open_folder(directory: Any) -> Manifest | None:
    """A dataset folder's dataset.json, read through the folder held open (a shared flock, as
    `load()` holds it): the Manifest reads the folder's other files there too (`Manifest.at`,
    `ShardRef.source`), so inspect and report read the version whose dataset.json they read,
    whole, whatever is published meanwhile. By name where it cannot be held (remote, no flock)."""
    folder = str(directory)
    pinned = None if fs.is_remote(folder) else pin(folder)
    if pinned is None:
        check_complete(folder)
        return read_manifest(directory)
    holder = Holder(pinned)  # the folder is let go when the last reader of it is
    check_complete(folder, pinned.prefix)
    man = read_manifest(directory, pinned.prefix)
    if man is not None:
        man.reads, man.holder = fs.as_path(pinned.prefix), holder
    return man


# --------------------------------------------------------------------------- load()'s files


class Source(NamedTuple):
    """What `load` reads: the shard files as shown in messages and as TensorFlow opens them (through
    the dataset folder load() holds open, `format.readers`), and what is known of them."""

    shown: list[str]
    reads: list[str]
    man: Manifest | None
    records: int | None
    holder: Holder | None = None
    folder: str | None = None


def split_files(path: str | os.PathLike[str] | Sequence[str | os.PathLike[str]], split: str) -> Source:
    """The shard files of `load`'s `path`; a dataset folder is held open (`format.readers`)."""
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
