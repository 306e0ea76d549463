"""The local engine: worker processes that each encode and write whole shards.

The unit of work is a shard, as in Inception's `build_image_data.py` (each thread writes its own
shards) and in our Beam engine: a worker reads, validates and encodes one shard's images in plan
order and writes them with its own `tf.io.TFRecordWriter`. So no process is one that every byte
must pass through, an image is read once (the bytes that were validated are the bytes stored),
nothing but small outcomes crosses a pipe, and a shard's bytes do not depend on which worker
wrote it or on how many there are.

Each worker imports TensorFlow once (~2 s; ~540 MB resident, two thirds of it shared-library
pages), in the background while it encodes its first images. The main process never imports it:
it hands out shards in plan order, shows progress, fsyncs finished shards and journals them for
``--resume``. With one worker (or one shard) everything runs in the calling process.
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from img2tfrecord import encoder, fs, writer
from img2tfrecord.dedupe import Deduper
from img2tfrecord.encoder import EncodeOptions, Task
from img2tfrecord.resume import Journal
from img2tfrecord.tf_import import tensorflow
from img2tfrecord.writer import ShardOutcome, ShardTask

if TYPE_CHECKING:
    from img2tfrecord.pipeline import EventSink, Job, Timing

PROGRESS_EVERY = 0.2  # seconds between a worker's progress messages
MIN_IMAGES_PER_WORKER = 500  # by default, smaller jobs use fewer processes (see worker_count)
DIGEST_CHUNK = 256  # files per task of the --dedupe drop pre-pass

Progress = Callable[[int, int], None]  # (images, bytes) just done


@dataclass(frozen=True)
class WorkerConfig:
    """What every worker needs for every shard; sent once, at pool start."""

    opts: EncodeOptions
    staging: str
    compression: str | None
    index: bool
    strict: bool
    no_digests: bool
    checksum: str


def run_local(
    job: Job, staging: str, workers: int | None, emit: EventSink, progress: Callable[[int, int, int], None] | None,
    timing: Timing, journal: Journal,
) -> list[ShardOutcome]:  # fmt: skip
    """Execute the plan; shards already in `journal` (a resumed run) are reused, not redone.

    `workers`: processes to use (None: all CPUs, fewer for small jobs; see `worker_count`).
    """
    todo = [shard for shard in job.plan if shard.name not in journal.done]
    total = sum(len(s.tasks) for s in todo)
    seen = [0, 0]

    def on_progress(images: int, nbytes: int) -> None:
        seen[0] += images
        seen[1] += nbytes
        timing.image_done(seen[0], seen[1], total)
        if progress:
            progress(seen[0], seen[1], total)

    cfg = WorkerConfig(job.opts, staging, job.compression, job.index, job.strict, job.dedupe == "off", job.checksum)
    n = worker_count(workers, len(todo), total)
    timing.workers = n
    closer = ThreadPoolExecutor(1, thread_name_prefix="close-shard")  # fsync + journal, as shards finish
    closing: list[Future] = []

    def finished(outcome: ShardOutcome) -> None:
        closing.append(closer.submit(_finish, outcome, journal, job.fsync))

    try:
        if n == 1:
            tf_thread = threading.Thread(target=_import_tf, name="import-tensorflow", daemon=True)
            tf_thread.start()
            drop = _drop_map(job, lambda paths: list(map(encoder.digest_file, paths)))
            for shard in todo:
                on_skip = lambda rel, why: emit("skipped", f"{rel}: {why}")  # noqa: E731
                finished(_write(shard, cfg, drop, on_progress, on_skip, warming=tf_thread.is_alive))
        else:
            _run_pool(job, todo, cfg, n, emit, on_progress, finished)
    finally:
        _drain(closer)  # finished shards must be durable (and journaled) before any cleanup
    for f in closing:
        f.result()  # re-raises a failed fsync (disk full, I/O error)
    return [journal.done[shard.name] for shard in job.plan]


def worker_count(requested: int | None, shards: int, images: int) -> int:
    """Processes to use: never more than shards. By default (`requested` None) all CPUs, but at
    most one per MIN_IMAGES_PER_WORKER images: a worker costs a TensorFlow import (~2 s, ~540 MB)."""
    if requested is None:
        requested = min(os.cpu_count() or 1, -(-images // MIN_IMAGES_PER_WORKER))
    return max(1, min(requested, shards))


def _finish(outcome: ShardOutcome, journal: Journal, durable: bool) -> None:
    """A shard is done when it is on disk for good: fsync it (and its index), then journal it."""
    if durable:
        fs.fsync(fs.join(journal.staging, outcome.info.file))
    if durable and outcome.info.index:
        fs.fsync(fs.join(journal.staging, outcome.info.index))
    journal.record(outcome)


def _write(shard: ShardTask, cfg: WorkerConfig, drop: Mapping[str, tuple[str, str]], on_progress: Progress,
           on_skip: Callable[[str, str], None], warming: Callable[[], bool] | None) -> ShardOutcome:  # fmt: skip
    """Encode and write one shard in this process (a worker, or the main process with one worker)."""
    batch = _Batcher(on_progress)
    results = encoder.encode_shard(shard.tasks, cfg.opts, warming, drop=drop)
    first = next(results, None)  # encoding starts (and runs ahead) while TensorFlow may still import
    tensorflow()
    stream = results if first is None else _prepend(first, results)
    outcome = writer.write_shard(
        shard, stream, cfg.staging, compression=cfg.compression, index=cfg.index, strict=cfg.strict,
        on_skip=on_skip, on_image=batch.add, drop=drop, no_digests=cfg.no_digests, durable=False,
        checksum=cfg.checksum,
    )  # fmt: skip
    batch.flush()
    return outcome


def _prepend(first: encoder.Result, rest: Any) -> Any:
    yield first
    yield from rest


class _Batcher:
    """Per-image progress, passed on a few times a second (a message per image would cost more)."""

    def __init__(self, sink: Progress) -> None:
        self.sink = sink
        self.images = self.bytes = 0
        self.last = time.monotonic()

    def add(self, size: int) -> None:
        self.images += 1
        self.bytes += size
        if time.monotonic() - self.last >= PROGRESS_EVERY:
            self.flush()

    def flush(self) -> None:
        if self.images:
            self.sink(self.images, self.bytes)
        self.images = self.bytes = 0
        self.last = time.monotonic()


# ---- the process pool ----

def _run_pool(job: Job, todo: list[ShardTask], cfg: WorkerConfig, n: int, emit: EventSink, on_progress: Progress,
              finished: Callable[[ShardOutcome], None]) -> None:  # fmt: skip
    ctx = multiprocessing.get_context("spawn")  # never fork a process that may run TensorFlow threads
    events = ctx.Queue()
    pool = ctx.Pool(n, initializer=_init_worker, initargs=(cfg, events))
    try:
        drop = _drop_map(job, lambda paths: pool.map(_digest_files, _chunks(paths, DIGEST_CHUNK)), flat=True)
        pending = {shard.name: pool.apply_async(_work, (shard, {t[1]: drop[t[1]] for t in shard.tasks if t[1] in drop})) for shard in todo}
        while pending:
            _relay(events, emit, on_progress, timeout=0.05)
            for name in [name for name, r in pending.items() if r.ready()]:
                finished(ShardOutcome.from_dict(pending.pop(name).get()))  # get() re-raises a worker's error
        _relay(events, emit, on_progress, timeout=0)
        pool.terminate()  # every result is in; an orderly exit of processes holding TensorFlow takes ~0.6 s
        pool.join()
    except BaseException:
        pool.terminate()
        pool.join()
        raise
    finally:
        events.close()
        events.cancel_join_thread()


def _relay(events: Any, emit: EventSink, on_progress: Progress, timeout: float) -> None:
    """Pass the workers' messages on: progress counts and skipped files (shown as they happen)."""
    try:
        msg = events.get(timeout=timeout) if timeout else events.get_nowait()
        while True:
            if msg[0] == "progress":
                on_progress(msg[1], msg[2])
            else:
                emit("skipped", f"{msg[1]}: {msg[2]}")
            msg = events.get_nowait()
    except queue.Empty:
        pass


def _chunks(items: list[Any], size: int) -> list[list[Any]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


def _drop_map(job: Job, digest_all: Callable[[list[str]], list[Any]], flat: bool = False) -> dict[str, tuple[str, str]]:
    """--dedupe drop: rel path of each later copy -> (digest, first copy's rel path), in plan order.

    Decided before any shard is written, from a content hash of every planned file (~40 us per
    100 KB file), so every shard knows what to leave out whichever worker writes it, and a resumed
    run decides exactly as the first.
    """
    if job.dedupe != "drop":
        return {}
    tasks: list[Task] = [t for shard in job.plan for t in shard.tasks]
    digests = digest_all([t[0] for t in tasks])
    if flat:
        digests = [d for chunk in digests for d in chunk]
    first = Deduper("drop")
    out = {}
    for t, d in zip(tasks, digests):
        if d is not None and (kept := first.admit(d, t[1])) is not None:
            out[t[1]] = (d, kept)
    return out


# ---- inside a worker process ----

_cfg: WorkerConfig | None = None
_events: Any = None
_tf_thread: threading.Thread | None = None


def _init_worker(cfg: WorkerConfig, events: Any) -> None:
    """Remember the job, ignore Ctrl-C (the main process stops the workers and cleans up, so the
    user sees one message), and start importing TensorFlow in the background."""
    import signal

    global _cfg, _events, _tf_thread
    _cfg, _events = cfg, events
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _tf_thread = threading.Thread(target=_import_tf, name="import-tensorflow", daemon=True)
    _tf_thread.start()


def _import_tf() -> None:
    try:
        tensorflow()
    except BaseException:  # raised again, with its message, where a shard first needs it
        pass


def _work(shard: ShardTask, drop: dict[str, tuple[str, str]]) -> dict[str, Any]:
    """Worker entry point: write one shard, return its outcome as plain data."""
    assert _cfg is not None, "_init_worker was not called"
    warming = _tf_thread.is_alive if _tf_thread is not None else None
    try:
        outcome = _write(
            shard, _cfg, drop, lambda n, b: _events.put(("progress", n, b)),
            lambda rel, why: _events.put(("skipped", rel, why)), warming,
        )  # fmt: skip
    except Exception as e:
        if type(e).__module__.startswith("tensorflow"):  # TF's errors do not survive pickling; keep the message
            raise OSError(getattr(e, "message", None) or str(e)) from None
        raise
    return outcome.to_dict()


def _digest_files(paths: list[str]) -> list[str | None]:
    return [encoder.digest_file(p) for p in paths]


def _drain(executor: ThreadPoolExecutor) -> None:
    """Wait for the executor's queued work even if Ctrl-C/SIGTERM arrives meanwhile (then re-raise).

    It waits on a sentinel future (one thread, FIFO: when it is done, so is all earlier work),
    not on Thread.join: a join interrupted by KeyboardInterrupt can report a running thread as
    finished on Python < 3.13, which would let cleanup race the last shard's close.
    """
    interrupted = False
    sentinel = executor.submit(lambda: None)
    while True:
        try:
            sentinel.result()
            break
        except KeyboardInterrupt:
            interrupted = True
    executor.shutdown(wait=False)
    if interrupted:
        raise KeyboardInterrupt
