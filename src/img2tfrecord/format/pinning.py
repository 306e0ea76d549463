"""Version pinning: a reader holds the dataset folder it opened, so it finishes the version it opened.

What happens, step by step:

1. `pin(folder)` opens the dataset folder and takes a shared flock on it. On Linux the reader then
   reads the shards as `/proc/self/fd/N/NAME`: paths that resolve through that open folder. A
   publish never changes a version's folder: it renames the whole folder out of the way and the
   new one in (`conversion.write.publish`). So the reader's paths lead to the version it opened,
   wherever it was moved, while a newer version is published.
2. A `Holder` keeps the folder open for as long as anything reads through it: load()'s dataset (and
   every iterator made from it, since an iterator holds its dataset), inspect's and report's
   `Manifest`.
3. When the last of those is collected, the Holder's finalizer *lets the folder go*: it puts the
   descriptor, the thread it was let go in and the time on `_let_go`, a `queue.SimpleQueue`, which
   the Python docs name as safe to call from finalizers (no lock is taken). Nothing is closed yet.
4. A folder let go is closed (its flock released with it) by the first of:
   - the thread that let it go, at its next `pin` or `in_use` (any load(), inspect, report, update,
     compact or convert it runs next): it has finished the statement that let the folder go by then;
   - `in_use` of that folder in another thread, which waits out the rest of `GRACE` for it;
   - the closing thread (`img2tfrecord-close`), `GRACE` seconds after the folder was let go.

Why not close at once: `next(iter(load(...)))` drops the dataset and its iterator in one statement,
the dataset first. TensorFlow then tears the iterator down in that same thread, waiting for its
worker threads, one of which may be opening the next shard through the folder just then. Closed
at that moment, that open fails and `ignore_errors` retries it forever: the teardown never ends
(a hang, seen in the docs' own example). The teardown is over before the thread that let go runs
its next line of Python; `GRACE` is for folders let go in a thread that never calls us again (far
longer than a teardown takes: it waits for a few in-flight reads, not for the rest of a shard).

The publisher removes an old version only when it can take the exclusive flock on its folder
(`in_use`: no reader left); otherwise the folder is kept beside OUTPUT and removed by a later
command that finds it free. Without flock (not POSIX) or /proc, readers fall back to plain paths,
and a shard replaced under one is refused (`loader`), never read as a mix.
"""

from __future__ import annotations

import contextlib
import os
import queue
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any, NamedTuple

from img2tfrecord import fs
from img2tfrecord.format.layout import Manifest, check_complete, read_manifest

_PROC_FD = "/proc/self/fd"
GRACE = 2.0  # seconds a folder let go stays open when no later call of the thread that let it go closes it
CLOSER = "img2tfrecord-close"  # the closing thread's name


@dataclass(frozen=True)
class Pin:
    """An open dataset folder a reader holds (shared flock) for as long as it may read it."""

    fd: int
    prefix: str  # the folder for the reader's paths: /proc/self/fd/N where /proc exists

    def path(self, name: str) -> str:
        return os.path.join(self.prefix, name)


class Holder:
    """Keeps a `Pin`'s folder open while anything that reads through it lives (let go when collected)."""

    def __init__(self, pin: Pin) -> None:
        self.pin = pin
        _start_closer()
        weakref.finalize(self, _let_go_of, pin.fd)


class _LetGo(NamedTuple):
    """A folder nothing holds any more, not closed yet: by whom and when it was let go."""

    fd: int
    # threading.get_ident() of the thread that let it go. A later thread may get the same number,
    # but only once that one has ended: its statement, teardown included, had finished long before.
    thread: int
    at: float  # time.monotonic() then


# Filled by finalizers, which run wherever the garbage collector does (inside any code, this
# module's included): SimpleQueue.put takes no lock, so it is safe there. None wakes the closer.
_let_go: queue.SimpleQueue[_LetGo | None] = queue.SimpleQueue()
_open: list[_LetGo] = []  # taken off the queue, not closed yet; under `_lock`
_lock = threading.Lock()  # never taken by a finalizer
_closer: list[threading.Thread] = []


def _after_fork_in_child() -> None:
    """A forked child has none of its parent's threads: a lock one of them held would never be let go."""
    global _lock
    _lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _close(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.close(fd)


def _let_go_of(fd: int) -> None:
    """A Holder's finalizer: only notes the folder as let go (see the module's step 3)."""
    _let_go.put(_LetGo(fd, threading.get_ident(), time.monotonic()))


def _close_due(got: _LetGo | None = None, wake: bool = True) -> float | None:
    """Close the folders let go by this thread, or `GRACE` seconds ago or more (`got`: one the
    caller took off the queue); the seconds until the next one is due (None: none left). `wake`:
    tell the closing thread of folders taken off the queue here and left open (it waits on the
    queue, and would not know of them)."""
    me, now = threading.get_ident(), time.monotonic()
    with _lock:
        taken = 0
        if got is not None:
            _open.append(got)
        with contextlib.suppress(queue.Empty):
            while True:
                if (g := _let_go.get_nowait()) is not None:
                    _open.append(g)
                    taken += 1
        left: list[_LetGo] = []
        for g in _open:
            if g.thread != me and now - g.at < GRACE:
                left.append(g)  # maybe still in its statement: TensorFlow's teardown may read through it
            else:
                _close(g.fd)
        _open[:] = left  # closed ones forgotten: their number may be a live reader's next
        due = min(g.at for g in left) + GRACE - now if left else None
    if wake and taken and left:
        _let_go.put(None)
    return due


def _closing() -> None:
    """The closing thread: waits for folders let go, closes each when due (`_close_due`)."""
    due: float | None = None
    while True:
        try:
            got = _let_go.get(timeout=due)
        except queue.Empty:
            got = None
        due = _close_due(got, wake=False)


def _start_closer() -> None:
    with _lock:
        if _closer and _closer[0].is_alive():
            return
        thread = threading.Thread(target=_closing, name=CLOSER, daemon=True)
        try:
            thread.start()
        except RuntimeError:  # no new threads at interpreter shutdown: the process closes all
            return
        _closer[:] = [thread]


def _wait_for_let_go(folder: str) -> None:
    """Wait until the let-go descriptors of `folder` (let go by other threads) are due, and close them."""
    try:
        st = os.stat(folder)
    except OSError:
        return
    with _lock:
        mine = [g for g in _open if _same(g.fd, st)]
    if mine:
        time.sleep(max(0.0, max(g.at for g in mine) + GRACE - time.monotonic()))
        _close_due()


def _same(fd: int, st: os.stat_result) -> bool:
    try:
        here = os.fstat(fd)
    except OSError:
        return False
    return (here.st_dev, here.st_ino) == (st.st_dev, st.st_ino)


def pin(folder: str) -> Pin | None:
    """Open `folder` and take a shared flock on it; None where that cannot be done (not POSIX, a
    remote path, an error: the reader then reads by name).

    A publish renames folders: the folder opened is checked, once locked, to still be the one the
    path names (else a new version came in meanwhile, and that one is opened instead)."""
    try:
        import fcntl
    except ImportError:  # not POSIX
        return None
    _close_due()
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

    Folders this process let go are closed first (waiting out `GRACE` for those of this folder let
    go by other threads). Free, it is left locked by nobody: the caller removes it right away (a
    reader that opens it after this finds it renamed or gone, and opens the folder the path names now)."""
    try:
        import fcntl
    except ImportError:
        return False
    _close_due()
    _wait_for_let_go(folder)
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
        return _same(pinned.fd, os.stat(folder))
    except OSError:
        return False


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
