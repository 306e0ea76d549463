"""The local engine: processes that each encode and write whole shards.

The unit of work is a shard, as in Inception's `build_image_data.py` (each thread writes its own
shards) and in our Beam engine: a process reads, validates and encodes one shard's images in plan
order and writes them with its own `tf.io.TFRecordWriter`. So no process is one that every byte
must pass through, an image is read once (the bytes that were validated are the bytes stored),
nothing but small outcomes crosses a pipe, and a shard's bytes do not depend on which process
wrote it or on how many there are.

With N workers, the calling process is one of them (a thread of it writes shards) and N-1 are
spawned, before the plan when the run started them (`pool.start_early`). None imports TensorFlow for a local output: each loads only its C++ record writer
(`tf_import.record_io`: ~0.4 s and ~60 MB resident, against ~2 s and ~540 MB for the whole
import), all at the same time. Shards go out in plan order to whichever is free; the calling
thread shows progress, fsyncs finished shards and journals them for ``--resume``.
"""

from __future__ import annotations

import collections
import queue
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from img2tfrecord import fs
from img2tfrecord.conversion.encode import example as encoder
from img2tfrecord.conversion.plan.job import Drop, PlannedShard
from img2tfrecord.conversion.plan.options import ShardSettings
from img2tfrecord.conversion.write import shards as writer
from img2tfrecord.conversion.write.engines import pool as worker
from img2tfrecord.conversion.write.engines.drops import drop_map, stale_drops
from img2tfrecord.conversion.write.engines.pool import Pool, take_early, worker_count
from img2tfrecord.conversion.write.resume import Journal
from img2tfrecord.conversion.write.shards import ShardOutcome
from img2tfrecord.conversion.write.signals import signals_deferred
from img2tfrecord.tf_import import RecordIOError

if TYPE_CHECKING:
    from img2tfrecord.conversion.events import EventSink, Timing
    from img2tfrecord.conversion.plan.job import Plan

PREFETCH_BYTES = 64 * 1024 * 1024  # one process: images encoded ahead while TensorFlow imports
PROGRESS_EVERY = 0.2  # seconds between a worker's progress messages

Progress = Callable[[int, int], None]  # (images, bytes) just done


@dataclass(frozen=True)
class WorkerConfig:
    """What a worker needs for a shard besides its tasks; sent with each (the workers start before the plan)."""

    settings: ShardSettings
    staging: str


@dataclass
class LocalEngine:
    """Worker processes on this machine, each encoding and writing whole shards.

    `workers`: processes to use (None: all CPUs, fewer for small jobs; see `worker_count`);
    `progress(images, bytes, total)` a few times a second (images done, skipped ones included;
    source bytes of those written); shards already in `journal` (a
    resumed run) are reused, not redone, and every finished shard is journaled.
    """

    journal: Journal
    timing: Timing
    workers: int | None = None
    progress: Callable[[int, int, int], None] | None = None
    name: str = "local"
    resumable: bool = True

    def run(self, plan: Plan, staging: str, settings: ShardSettings, emit: EventSink) -> list[ShardOutcome]:
        return run_local(plan, staging, settings, self.workers, emit, self.progress, self.timing, self.journal)


def run_local(
    plan: Plan,
    staging: str,
    settings: ShardSettings,
    workers: int | None,
    emit: EventSink,
    progress: Callable[[int, int, int], None] | None,
    timing: Timing,
    journal: Journal,
) -> list[ShardOutcome]:
    """Execute the plan; see `LocalEngine`."""
    todo = [shard for shard in plan.shards if shard.name not in journal.done]
    total = sum(len(s.tasks) for s in todo)
    seen = [0, 0]

    def counted(kind: str, msg: str) -> None:  # skipped images are left out of the rates
        if kind == "skipped":
            timing.skipped += 1
        emit(kind, msg)

    def on_progress(images: int, nbytes: int) -> None:
        seen[0] += images
        seen[1] += nbytes
        timing.image_done(seen[0], seen[1], total)
        if progress:
            progress(seen[0], seen[1], total)

    cfg = WorkerConfig(settings, staging)
    n = worker_count(workers, len(todo), total)
    timing.workers = n
    closer = ThreadPoolExecutor(1, thread_name_prefix="close-shard")  # fsync + journal, as shards finish
    closing: list[Future] = []

    def finished(outcome: ShardOutcome) -> None:
        with signals_deferred():  # the first submit starts the closing thread
            closing.append(closer.submit(_finish, outcome, journal, settings.fsync))

    pool: Pool | None = None
    tf_thread = threading.Thread(target=writer.preload_writer, args=(staging,), name="import-tensorflow", daemon=True)
    try:
        with signals_deferred():  # a signal while a thread or process starts unwinds after it, not inside it
            pool = _pool(n - 1, fs.is_remote(staging))  # started first: the workers' imports overlap ours
            tf_thread.start()
        if pool is None:
            drop = drop_map(plan, settings, lambda paths: list(map(encoder.digest_file, paths)))
        else:
            drop = drop_map(plan, settings, lambda paths: pool.digests(_digest_files, paths))
        stale = stale_drops(plan, journal.done, drop)
        if stale:  # a reused shard must leave out exactly the copies this run's decisions drop
            for name in stale:
                del journal.done[name]
                emit(
                    "warning", f"resuming: shard {name} is converted again: the copies it drops (--dedupe drop) changed"
                )
            todo = [shard for shard in plan.shards if shard.name not in journal.done]
            total = sum(len(s.tasks) for s in todo)
        _Scheduler(todo, cfg, drop, pool, counted, on_progress, finished, tf_thread).run()
    finally:
        if pool is not None:
            pool.stop()
        _drain(closer, tf_thread)  # finished shards durable (and journaled) before any cleanup; and
        # the import over, since until then fd 2 is silenced and an error message would be lost
    for f in closing:
        f.result()  # re-raises a failed fsync (disk full, I/O error)
    return [journal.done[shard.name] for shard in plan.shards]


def _pool(size: int, remote: bool) -> Pool | None:
    """`size` worker processes: those `pool.start_early` started before the plan, grown or
    stopped to the plan's count, else new ones (none for `size` 0)."""
    pool = take_early()
    if pool is not None and size < 1:
        pool.stop()  # the plan needs none: the early ones would only take a core from this process
        return None
    if pool is None:
        return Pool(remote=remote, cap=size, start=size) if size > 0 else None
    pool.grow(size)
    return pool


def _finish(outcome: ShardOutcome, journal: Journal, durable: bool) -> None:
    """A shard is done when it is on disk for good: fsync it, then journal it. (Its index is
    already durable: `fs.write_text` fsyncs.)"""
    if durable:
        fs.fsync(fs.join(journal.staging, outcome.info.file))
    journal.record(outcome)


def _write(
    shard: PlannedShard,
    cfg: WorkerConfig,
    drop: Mapping[str, Drop],
    on_progress: Progress,
    on_skip: Callable[[str, str], None],
    warming: Callable[[], bool] | None = None,
) -> ShardOutcome:
    """Encode and write one shard in this process (a spawned worker, or a thread of the calling process).

    With `warming` (one process: TensorFlow imports in a thread), images are encoded ahead while it
    imports, on the core the import leaves free. Pool workers do not: every core is busy importing
    then, and the held images only cost memory (measured: 2 workers, 64 MB held: +60 MB per worker
    and 9% slower).
    """
    batch = _Batcher(on_progress)
    stream = encoder.encode_shard(
        shard.tasks, cfg.settings.encode, warming, PREFETCH_BYTES if warming else 0, drop=drop
    )
    writer.load_writer(cfg.staging)  # joins the import
    outcome = writer.write_shard(
        shard,
        stream,
        cfg.staging,
        cfg.settings,
        on_skip=on_skip,
        on_image=batch.add,
        drop=drop,
        durable=False,
        writeback=cfg.settings.fsync,
    )
    batch.flush()
    return outcome


class _Batcher:
    """Per-image progress, passed on a few times a second (a message per image would cost more)."""

    def __init__(self, sink: Progress) -> None:
        self.sink = sink
        self.images = self.bytes = 0
        self.last = time.monotonic()
        self.first = True

    def add(self, size: int) -> None:
        self.images += 1
        self.bytes += size
        if time.monotonic() - self.last >= PROGRESS_EVERY or self.first:
            self.first = False  # the first image at once: the run's start-up ends there (Timing.first_record)
            self.flush()

    def flush(self) -> None:
        if self.images:
            self.sink(self.images, self.bytes)
        self.images = self.bytes = 0
        self.last = time.monotonic()


# ---- scheduling shards over this process and the pool ----


class _Stopped(Exception):
    """Raised inside this process's shard writer when the run is being abandoned."""


class _Scheduler:
    """Hands shards out in plan order to whoever is free: a thread of this process and the pool's
    workers, each writing one shard at a time. Everything they report arrives in one inbox, read
    by the calling thread only.

    Live messages (progress, skipped files) are best-effort: a worker's may arrive after its
    result, or not at all if it is stopped. So a finished shard's outcome settles its account:
    skipped files not yet shown are shown, progress is topped up to the shard's true count, and
    later live messages about that shard are ignored. While TensorFlow imports, fd 2 is silenced
    (see tf_import), so output is held until it is done.
    """

    def __init__(
        self,
        todo: list[PlannedShard],
        cfg: WorkerConfig,
        drop: dict[str, Drop],
        pool: Pool | None,
        emit: EventSink,
        on_progress: Progress,
        finished: Callable[[ShardOutcome], None],
        tf_thread: threading.Thread,
    ) -> None:
        self.queue = collections.deque(todo)
        self.cfg, self.drop, self.pool = cfg, drop, pool
        self.emit, self.on_progress, self.finished = emit, on_progress, finished
        self.warming = tf_thread.is_alive if pool is None else None  # see _write
        self.importing = tf_thread.is_alive
        self.held: list[tuple] = []  # output waiting for the import to end
        self.inbox: queue.SimpleQueue = queue.SimpleQueue()
        self.stop = threading.Event()
        self.local: threading.Thread | None = None
        self.pool_busy = 0
        self.counted: dict[str, list[int]] = {}  # shard -> [images, bytes] shown live so far
        self.settled: set[str] = set()
        self.shown: set[str] = set()  # skipped files already reported

    def run(self) -> None:
        if self.pool is not None:
            self.pool.forward(self.inbox)
        try:
            while self.queue or self.pool_busy or self.local is not None:
                self._hand_out()
                try:
                    self._handle(self.inbox.get(timeout=0.1))
                except queue.Empty:
                    pass
                if self.held and not self.importing():
                    self._release()
            while self.held and self.importing():  # our import outlasted the work (tiny runs)
                time.sleep(0.05)
            self._release()
        finally:
            self.stop.set()
            if self.local is not None:  # interrupted: let our writer notice (<= 0.2 s) before cleanup
                self.local.join(timeout=10)

    def _hand_out(self) -> None:
        while self.queue and self.pool is not None and self.pool_busy < self.pool.size:
            shard = self.queue.popleft()
            with signals_deferred():  # a submit may start the executor's threads and processes
                self.pool.submit(_work, (shard, self._drop_for(shard), self.cfg), self.inbox)
                self.pool_busy += 1
        if self.queue and self.local is None:
            shard = self.queue.popleft()
            thread = threading.Thread(target=self._write_here, args=(shard,), name="write-shard", daemon=True)
            with signals_deferred():  # never a thread that is known but not started (it cannot be joined)
                thread.start()
                self.local = thread

    def _handle(self, msg: tuple) -> None:
        kind = msg[0]
        if kind == "progress":  # (kind, shard, images, bytes)
            if msg[1] not in self.settled:
                counted = self.counted.setdefault(msg[1], [0, 0])
                counted[0] += msg[2]
                counted[1] += msg[3]
                self._show(("progress", msg[2], msg[3]))
        elif kind == "skipped":  # (kind, rel, reason)
            self._skipped(msg[1], msg[2])
        elif kind == "done_here":
            assert self.local is not None
            self.local.join()
            self.local = None
            self._settle(msg[1])
        elif kind == "done_pool":
            self.pool_busy -= 1
            self._settle(ShardOutcome.from_dict(msg[1]))
        elif kind == "error":
            raise msg[1]

    def _settle(self, outcome: ShardOutcome) -> None:
        for s in outcome.skipped:
            self._skipped(s["path"], s["reason"])
        images, nbytes = self.counted.pop(outcome.info.file, [0, 0])
        self.settled.add(outcome.info.file)
        self._show(("progress", outcome.images - images, outcome.converted_bytes - nbytes))
        self.finished(outcome)

    def _skipped(self, rel: str, reason: str) -> None:
        if rel not in self.shown:
            self.shown.add(rel)
            self._show(("skipped", f"{rel}: {reason}"))

    def _show(self, item: tuple) -> None:
        if self.importing():
            self.held.append(item)
            return
        self._release()
        if item[0] == "progress":
            if item[1] or item[2]:
                self.on_progress(item[1], item[2])
        else:
            self.emit(*item)

    def _release(self) -> None:
        held, self.held = self.held, []
        for item in held:
            self._show(item)

    def _drop_for(self, shard: PlannedShard) -> dict[str, Drop]:
        return {t.rel: self.drop[t.rel] for t in shard.tasks if t.rel in self.drop}

    def _write_here(self, shard: PlannedShard) -> None:
        def progress(images: int, nbytes: int) -> None:
            if self.stop.is_set():
                raise _Stopped
            self.inbox.put(("progress", shard.name, images, nbytes))

        try:
            skip = lambda rel, why: self.inbox.put(("skipped", rel, why))
            outcome = _write(shard, self.cfg, self._drop_for(shard), progress, skip, self.warming)
            self.inbox.put(("done_here", outcome))
        except _Stopped:
            pass
        except BaseException as e:
            self.inbox.put(("error", e))


# ---- inside a worker process ----


def _work(shard: PlannedShard, drop: dict[str, Drop], cfg: WorkerConfig) -> dict[str, Any]:
    """Worker entry point: write one shard, return its outcome as plain data."""
    try:

        def progress(images: int, nbytes: int) -> None:
            worker.check_parent()
            worker.events.put(("progress", shard.name, images, nbytes))

        outcome = _write(shard, cfg, drop, progress, lambda rel, why: worker.events.put(("skipped", rel, why)))
    except Exception as e:
        if type(e).__module__.startswith("tensorflow") or isinstance(e, RecordIOError):  # TF's errors do not
            # survive pickling; keep the message
            raise OSError(getattr(e, "message", None) or str(e)) from None
        raise
    return outcome.to_dict()


def _digest_files(paths: list[str]) -> list[str | None]:
    return [encoder.digest_file(p) for p in paths]


def _drain(executor: ThreadPoolExecutor, thread: threading.Thread) -> None:
    """Wait for the executor's queued work and for `thread`, even if Ctrl-C/SIGTERM arrives
    meanwhile (then re-raise).

    It waits on a sentinel future (one thread, FIFO: when it is done, so is all earlier work),
    not on Thread.join: a join interrupted by KeyboardInterrupt can report a running thread as
    finished on Python < 3.13, which would let cleanup race the last shard's close. (`thread`, the
    TensorFlow import, is joined: a misreport there could at worst lose a message.)
    """
    interrupted = False
    with signals_deferred():
        sentinel = executor.submit(lambda: None)
    while True:
        try:
            sentinel.result()
            break
        except KeyboardInterrupt:
            interrupted = True
    executor.shutdown(wait=False)
    while thread.is_alive():
        try:
            thread.join(0.1)
        except KeyboardInterrupt:
            interrupted = True
    if interrupted:
        raise KeyboardInterrupt
