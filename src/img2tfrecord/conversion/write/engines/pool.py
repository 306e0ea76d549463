"""The local engine's worker processes, started before the plan is made.

A spawned worker needs ~0.6-0.8 s (Python, our imports, TensorFlow's record writer) before its
first image. Started once the plan is known, that start-up trails the plan and the calling
process's own imports; started at the command's beginning (`start_early`), it overlaps them. The
workers need nothing from the plan to start: the shard and its settings travel with each task, so
they receive the plan when it is ready. How many to start is decided before the walk from a
bounded count of the input's files (the plan's own count decides later, `Pool.grow`: a pool
started too large has its extra processes left idle, or stopped when the plan needs none).

This module imports no more than `multiprocessing`: the calling process starts the workers
before it imports the rest of the library, and each worker imports the engine itself.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import queue
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from img2tfrecord import fs
from img2tfrecord.conversion.write.signals import signals_deferred
from img2tfrecord.errors import WorkerDied, option, said

# The extension modules a local conversion imports once it has started (measured from the `convert`
# command's start), imported before the record writer's load starts in a thread
# (tf_import.record_io_loading): a dlopen waits for the other thread's.
EXTENSIONS = (
    *("_contextvars", "_csv", "_ctypes", "_decimal", "binascii"),
    *("PIL._imaging", "PIL._webp", "google_crc32c", "numpy", "simplejpeg"),
)
MIN_IMAGES_PER_WORKER = 500  # by default, smaller jobs use fewer processes (see worker_count)
DIGEST_CHUNK = 256  # files per task of the --dedupe drop pre-pass
WORKER_DIED = (
    "a worker process died (killed by the system, out of memory?); finished shards were kept: "
    f"{said('run the same command', 'call convert() again')} with {option('resume', True)} to continue, "
    f"with fewer {option('workers')} if memory is short"
)


def worker_count(requested: int | None, shards: int, images: int) -> int:
    """Processes to use: never more than shards. By default (`requested` None) all CPUs, but at
    most one per MIN_IMAGES_PER_WORKER images: a spawned worker costs ~0.6 s of start-up (Python,
    our imports, the record writer) before its first image."""
    if requested is None:
        requested = min(os.cpu_count() or 1, -(-images // MIN_IMAGES_PER_WORKER))
    return max(1, min(requested, shards))


class Pool:
    """Up to `cap` worker processes (spawned: never forked from a process that may run TensorFlow
    threads), `start` of them started now, each loading TensorFlow's record writer once and then
    writing whole shards.

    A ProcessPoolExecutor, not a multiprocessing.Pool: when a worker dies (killed by the kernel's
    out-of-memory killer, a crash in a native library), its futures fail with BrokenProcessPool
    and the run stops with a message, where a Pool would wait for the lost shard forever.
    """

    def __init__(self, *, remote: bool, cap: int, start: int) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.size = 0  # processes the scheduler keeps busy
        self.started = 0
        self.events = ctx.Queue()  # workers' progress and skipped files
        self.pool = ProcessPoolExecutor(
            cap, mp_context=ctx, initializer=_init_worker, initargs=(remote, self.events, os.getpid())
        )
        self._forwarder: threading.Thread | None = None
        self.grow(start)

    def grow(self, size: int) -> None:
        """Keep `size` processes busy, starting those not started yet now (the executor would
        spawn them only on submit): each one's start-up then overlaps the calling process's work."""
        self.size = size
        with _main_not_reimported():
            while self.started < size:
                self.pool.submit(os.getpid)
                self.started += 1

    def digests(self, chunked: Callable[[list[str]], list[str | None]], paths: list[str]) -> list[str | None]:
        """`chunked` (a worker-side function of a list of paths) over `paths`, in order, on the workers."""
        chunks = [paths[i : i + DIGEST_CHUNK] for i in range(0, len(paths), DIGEST_CHUNK)]
        try:
            return [d for chunk in self.pool.map(chunked, chunks) for d in chunk]
        except BrokenProcessPool:
            raise WorkerDied(WORKER_DIED) from None

    def submit(self, fn: Callable[..., dict[str, Any]], args: tuple, inbox: queue.SimpleQueue) -> None:
        """Run `fn(*args)` in a worker; its result (or error) arrives in `inbox`."""

        def done(f: Future) -> None:
            e = f.exception()
            if e is None:
                inbox.put(("done_pool", f.result()))
            elif not f.cancelled():
                inbox.put(("error", WorkerDied(WORKER_DIED) if isinstance(e, BrokenProcessPool) else e))

        self.pool.submit(fn, *args).add_done_callback(done)

    def forward(self, inbox: queue.SimpleQueue) -> None:
        """Pass the workers' messages into `inbox` (from a thread, so the scheduler waits on one queue)."""

        def run() -> None:
            while (msg := self.events.get()) is not None:
                inbox.put(msg)

        thread = threading.Thread(target=run, name="worker-events", daemon=True)
        with signals_deferred():
            thread.start()
            self._forwarder = thread

    def stop(self) -> None:
        """Every result is in, or the run is abandoned: stop the workers now (an orderly exit of
        a process holding TensorFlow's libraries takes ~0.6 s, and nothing they hold is needed)."""
        self.events.put(None)
        if self._forwarder is not None:
            self._forwarder.join(timeout=1)
        processes = list((getattr(self.pool, "_processes", None) or {}).values())  # no public terminate before 3.14
        for p in processes:
            p.terminate()
        self.pool.shutdown(wait=True, cancel_futures=True)
        self.events.close()
        self.events.cancel_join_thread()


_early: Pool | None = None  # started by start_early, not yet taken by an engine


def start_early(
    input_dir: str, output_dir: str, *, workers: int | None, engine: str, dry_run: bool, file_list: str | None
) -> None:
    """Start a local conversion's worker processes now, before its imports and its plan (see the
    module doc): as many as its plan will likely use. Nothing for a dry run, another engine, a
    remote input or output, or a file list (what it names is known only once it is read)."""
    global _early
    if _early is not None or engine != "local" or dry_run or file_list:
        return
    if fs.is_remote(input_dir) or fs.is_remote(output_dir) or (workers is not None and workers < 1):
        return
    cores = os.cpu_count() or 1
    likely = workers or worker_count(None, cores, count_files(input_dir, cores * MIN_IMAGES_PER_WORKER))
    if likely > 1:
        with signals_deferred():  # a signal while a process starts unwinds after it, the pool known
            _early = Pool(remote=False, cap=(workers or cores) - 1, start=likely - 1)


def take_early() -> Pool | None:
    """The pool `start_early` started (once), for the engine to use."""
    global _early
    pool, _early = _early, None
    return pool


def discard_early() -> None:
    """Stop the workers `start_early` started when no engine took them (the run was refused)."""
    pool = take_early()
    if pool is not None:
        pool.stop()


def count_files(root: str, cap: int) -> int:
    """The files below `root`, counted up to `cap` (hidden ones left out): a few milliseconds,
    where the walk proper needs the library's imports first. Unreadable folders count nothing."""
    count, folders = 0, [root]
    while folders and count < cap:
        try:
            with os.scandir(folders.pop()) as it:
                for entry in it:
                    if entry.name.startswith("."):
                        continue
                    if entry.is_dir(follow_symlinks=True):
                        folders.append(entry.path)
                    else:
                        count += 1
        except OSError:
            continue
    return min(count, cap)


@contextlib.contextmanager
def _main_not_reimported() -> Iterator[None]:
    """While workers are spawned, hide where the `__main__` module came from.

    A spawned process imports its parent's `__main__` script (as `__mp_main__`), in case a task
    refers to a function defined there; ours never do (they live in img2tfrecord), and that import
    re-runs a caller's unguarded `convert(...)`: so a script calling the library would need an
    `if __name__ == "__main__":` guard. Without its `__spec__` and `__file__`, the child skips it.
    """
    main = sys.modules.get("__main__")
    saved = {k: main.__dict__[k] for k in ("__spec__", "__file__") if main is not None and k in main.__dict__}
    try:
        for k in saved:
            setattr(main, k, None)
        yield
    finally:
        for k, v in saved.items():
            setattr(main, k, v)


# ---- inside a worker process ----

events: Any = None  # where the worker's progress and skipped files go
_parent = 0


def _init_worker(remote: bool, sink: Any, parent: int) -> None:
    """Remember where to report, ignore Ctrl-C (the main process stops the workers and cleans up,
    so the user sees one message), and start loading the record writer (all of TensorFlow for a
    `remote` output) while the first shard is on its way. (The engine itself is imported here,
    in the worker, as the first task is unpickled.)"""
    global events, _parent
    from img2tfrecord import cstderr
    from img2tfrecord.conversion.write.shards import preload_writer

    events, _parent = sink, parent
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with_parent()
    cstderr.install()  # for good: this process decodes images (libtiff & co. write to fd 2)
    staging = "gs://" if remote else ""  # only whether it is remote matters to the load
    threading.Thread(target=preload_writer, args=(staging,), name="import-tensorflow", daemon=True).start()


def _die_with_parent() -> None:
    """A worker must not outlive the run that started it: after a SIGKILL of that run, it would
    still be writing a shard into the staging folder that a `--resume` run writes into. On Linux
    the kernel kills it with its parent (PR_SET_PDEATHSIG); elsewhere `check_parent` notices
    within ~0.2 s."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):
        pass
    check_parent()


def check_parent() -> None:
    """In a worker: exit at once when the run that started it is gone."""
    if os.getppid() != _parent:
        os._exit(1)
