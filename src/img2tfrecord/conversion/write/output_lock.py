"""One run at a time per OUTPUT: an advisory flock on a file in its workspace (`conversion.write.publish`)."""

from __future__ import annotations

import contextlib
import os
from typing import Protocol

from img2tfrecord.errors import DataError, UsageError, option

WORKSPACE_LOCK = "lock"  # the lock file's name in the workspace (in place: naming.LOCK_NAME in OUTPUT)


class LockedOutput(Protocol):
    """What the lock needs of a `workspace.Workspace`."""

    @property
    def lock_path(self) -> str | None: ...

    @property
    def shown(self) -> str: ...


class OutputLock:
    """One run at a time per OUTPUT: a second one would empty the first one's build folder (or,
    with --resume, write the same shard files). An advisory flock, released by the kernel when the
    run dies; nothing on object stores.

    The lock file may be removed while held (`release(remove=True)`, when the workspace goes):
    `acquire` checks, after its flock, that the path still names the file it locked, and retries
    otherwise, so a run that opened the old file just before its removal never holds a lock that a
    third run, creating the file anew, could take too."""

    def __init__(self, ws: LockedOutput) -> None:
        self.ws = ws
        self.path = ws.lock_path
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        if self.path is None:
            return
        try:
            import fcntl
        except ImportError:  # not POSIX
            return
        for _ in range(100):
            try:
                os.makedirs(os.path.dirname(self.path), exist_ok=True)
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            except FileNotFoundError:  # its folder removed meanwhile by the run that held it
                continue
            except OSError as e:
                raise UsageError(f"cannot create output {self.ws.shown}: {e.strerror or e}") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                holder = os.read(fd, 32).decode("ascii", "replace").strip() or "?"
                os.close(fd)
                raise UsageError(
                    f"another img2tfrecord run (pid {holder}) is writing to {self.ws.shown}: wait for it, or stop it and add {option('resume', True)}"
                ) from None
            if _same_file(fd, self.path):
                try:  # the pid, for the message of a run refused
                    os.ftruncate(fd, 0)
                    os.write(fd, f"{os.getpid()}\n".encode())
                except OSError as e:  # a full disk: nothing can be published; said before any work
                    self._fd = fd
                    self.release(remove=True)
                    raise DataError(
                        f"cannot write beside output {self.ws.shown} ({self.path}): {e.strerror or e}; nothing was changed"
                    ) from None
                self._fd = fd
                return
            os.close(fd)  # we locked a file that was removed meanwhile: take the new one
        raise UsageError(f"cannot lock output {self.ws.shown}: its lock file keeps changing")

    def release(self, remove: bool = False) -> None:
        """Unlock; with `remove`, delete the lock file (and the empty workspace) first, still holding it."""
        if self._fd is None:
            return
        if remove and self.path is not None:
            with contextlib.suppress(OSError):
                os.remove(self.path)
            if os.path.basename(self.path) == WORKSPACE_LOCK:  # the workspace, if nothing else is left in it
                with contextlib.suppress(OSError):
                    os.rmdir(os.path.dirname(self.path))
        os.close(self._fd)
        self._fd = None


def _same_file(fd: int, path: str) -> bool:
    try:
        a, b = os.fstat(fd), os.stat(path)
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)
