"""The output directory: one run at a time (a lock), a staging folder, space checks, and the atomic publish (renames; dataset.json last)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable

from img2tfrecord import fs
from img2tfrecord.conversion.events import EventSink
from img2tfrecord.conversion.plan import Plan
from img2tfrecord.errors import DataError, UsageError, plural
from img2tfrecord.format.naming import LOCK_NAME, SHARD_RE, STAGING_DIR


def check_output(output_dir: str, overwrite: bool) -> None:
    """Refuse a non-empty output directory unless --overwrite (exit 2, before any work)."""
    if fs.exists(output_dir) and not fs.isdir(output_dir):
        raise UsageError(f"output {output_dir} exists and is not a directory")
    if fs.isdir(output_dir):
        existing = [n for n in fs.listdir(output_dir) if n not in (STAGING_DIR, LOCK_NAME)]
        if existing and not overwrite:
            raise UsageError(
                f"output {output_dir} is not empty ({plural(len(existing), 'entry', 'entries')}): choose another folder or add --overwrite"
            )


class OutputLock:
    """One run at a time per output directory: a second run would empty the first one's staging
    folder (or, with --resume, write the same shard files). An advisory flock on a hidden file,
    released by the kernel if the run dies; nothing on object stores (no locks there)."""

    def __init__(self, output_dir: str) -> None:
        self.path = fs.join(output_dir, LOCK_NAME)
        self.output_dir = output_dir
        self._fd: int | None = None

    def acquire(self) -> None:
        if fs.is_remote(self.output_dir):
            return
        try:
            import fcntl
        except ImportError:  # not POSIX
            return
        try:
            os.makedirs(self.output_dir, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise UsageError(f"cannot create output {self.output_dir}: {e.strerror or e}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.read(fd, 32).decode("ascii", "replace").strip() or "?"
            os.close(fd)
            raise UsageError(
                f"another img2tfrecord run (pid {holder}) is writing to {self.output_dir}: wait for it, or stop it and add --resume"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            try:
                os.remove(self.path)
            except OSError:
                pass
            os.close(self._fd)
            self._fd = None


def prepare_output(output_dir: str, overwrite: bool, keep_staging: bool = False) -> str:
    """Check the output directory and create the staging folder inside it; return its path.

    The staging folder of an interrupted run is emptied, unless `keep_staging` (--resume).
    """
    check_output(output_dir, overwrite)
    staging = fs.join(output_dir, STAGING_DIR)
    try:
        fs.makedirs(output_dir)
        if not keep_staging:
            fs.rmtree(staging)
        fs.makedirs(staging)
    except OSError as e:
        raise UsageError(f"cannot create output {output_dir}: {e.strerror or e}") from None
    return staging


def publish(
    staging: str,
    output_dir: str,
    files: list[str],
    metadata: dict[str, str],
    durable: bool = True,
    stale: Iterable[str] = (),
) -> None:
    """Move finished shards into place, then write metadata files in their order (dataset.json last).

    Stale artifacts of an earlier run (shards, indexes, the metadata files, and the `stale` names
    this run may not write) are removed first, so a dataset never mixes `-of-00004` and
    `-of-00005` shards.
    """
    keep = set(files)
    stale = set(stale) | set(metadata)
    for name in fs.listdir(output_dir):
        if name in stale or (SHARD_RE.match(name.removesuffix(".idx")) and name not in keep):
            fs.remove(fs.join(output_dir, name))
    for name in files:
        fs.rename(fs.join(staging, name), fs.join(output_dir, name))
    for name, text in metadata.items():
        fs.write_text(fs.join(output_dir, name), text)
    fs.rmtree(staging)
    if durable and not fs.is_remote(output_dir):
        try:
            fs.fsync(output_dir)
        except OSError:
            pass


def _cleanup(staging: str, output_dir: str) -> None:
    fs.rmtree(staging)
    if not fs.is_remote(output_dir):
        try:
            os.rmdir(output_dir)  # only if we created it and it is still empty
        except OSError:
            pass


def _free_bytes(output_dir: str) -> int | None:
    if fs.is_remote(output_dir):
        return None
    path = os.path.abspath(output_dir)
    while not os.path.exists(path):
        path = os.path.dirname(path)
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return None


def human_bytes(n: float) -> str:
    for unit in ("bytes", "KB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1000
    raise AssertionError("unreachable")


def _space_note(plan: Plan) -> str:
    free = _free_bytes(plan.output_dir)
    note = f"the dataset needs about {human_bytes(plan.estimated_bytes)}"
    return note + (f" and {human_bytes(free)} are free there" if free is not None else "")


def _describe_io(e: BaseException) -> str:
    msg = getattr(e, "message", None) or getattr(e, "strerror", None) or str(e)
    return msg.strip().splitlines()[0] if msg.strip() else type(e).__name__


def _check_space(plan: Plan, emit: EventSink) -> None:
    """Fail before any work when the output disk clearly cannot hold the dataset."""
    free = _free_bytes(plan.output_dir)
    if free is None or plan.estimated_bytes <= free:
        return
    if plan.settings.encode.reencodes:  # a rough estimate: say so, but let the user try
        emit("warning", f"the output may not fit: {_space_note(plan)}")
        return
    raise DataError(
        f"not enough space in {plan.output_dir}: {_space_note(plan)}; free some space or choose another disk"
    )
