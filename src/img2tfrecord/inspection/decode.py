"""`inspect --verify`'s image decoding on all cores: TensorFlow's own decoder, in batches, on threads.

`--verify` means "TensorFlow's decoder gives the declared shape", so the decode stays
`tf.io.decode_image`. How it is fed was measured (2 cores, the bench's ~100 KB JPEGs,
bench/verify.py and in-process loops, contenders alternated in one run):

* one traced call per image (the previous design, on a thread per shard) spends as much again in
  dispatch as in decoding: 355-446 images/s on one core against 503-580 for the same images
  decoded 32 per call; eager calls also hold the GIL (2 threads: 565 -> 600 images/s);
* so images go to TensorFlow in batches (up to 32 images or 4 MB): one traced `tf.map_fn` call
  decodes a batch, one image after the other, and releases the GIL while it runs. `workers`
  threads each decode a batch at a time while the calling thread reads, CRC-checks and parses
  the next records (pure Python, ~0.25 ms a record against ~2 ms of decoding), so `workers`
  images decode at once. With one worker the reading thread decodes too (no pool): one core;
* threads and not processes: one process pays TensorFlow's import once; each worker process
  would pay it again (here ~5 s of CPU and ~680 MB resident each), and a shard per process
  balances badly when shards are few. The limit of one process is its one reading thread: ~4,000
  records/s, ~8 cores' worth of decoding; past that, shards would be split between processes;
* TensorFlow is imported by the first batch's thread, so reading goes on meanwhile (until the
  batches in flight are full), and a `--verify` whose records hold no image never imports it.
  With a progress bar (a terminal) `start()` imports it first instead, shown as a step of its own (the overlap it gives up is the reading of the few batches allowed in flight).
  The import is single-threaded and ~5 s here: on 8,000 images a fifth of a one-worker run,
  which is why 2 cores give ~1.8x after start-up (1.6-2.0x over the runs) but ~1.6x for the
  whole process (README "Inspecting and verifying").

A batch with an image TensorFlow cannot decode fails as a whole: it is decoded again one image at
a time, so each problem carries TensorFlow's own message for its image, exactly as one call per
image would. Memory: at most `workers + 2` batches are in flight (the reader waits for the oldest),
and a batch decodes one image at a time, so at most `workers` decoded images exist at once.
"""

from __future__ import annotations

import threading
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from img2tfrecord.format.images import tf_error_message

BATCH_IMAGES = 32
BATCH_BYTES = 4 * 2**20

Decoded = tuple[int, ...] | str  # the decoded shape (height, width, channels), or TensorFlow's error message


class Slot:
    """One image's place in a batch: `ready()` once decoded, then `result()`."""

    __slots__ = ("batch", "i")

    def __init__(self, batch: _Batch, i: int) -> None:
        self.batch, self.i = batch, i

    def ready(self) -> bool:
        return self.batch.future is not None and self.batch.future.done()

    def result(self) -> Decoded:
        assert self.batch.future is not None
        return self.batch.future.result()[self.i]


class _Batch:
    __slots__ = ("images", "nbytes", "future")

    def __init__(self) -> None:
        self.images: list[bytes] = []
        self.nbytes = 0
        self.future: Future[list[Decoded]] | None = None


class _Functions:
    """The traced decode functions, made once (importing TensorFlow) by whichever thread needs them first."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._made: tuple[Any, Any, Any] | None = None

    def get(self) -> tuple[Any, Any, Any]:
        with self._lock:
            if self._made is None:
                from img2tfrecord.tf_import import tensorflow

                tf = tensorflow()

                # Lambdas, not named functions: TensorFlow prefixes a named function's op errors with
                # "Graph execution error: Detected at node ... defined at" and a Python traceback.
                shape = lambda data: tf.shape(tf.io.decode_image(data, channels=0, expand_animations=False))  # noqa: E731
                one = tf.function(shape, input_signature=[tf.TensorSpec([], tf.string)], autograph=False)
                many = tf.function(
                    lambda batch: tf.map_fn(
                        shape, batch, fn_output_signature=tf.TensorSpec([3], tf.int32), parallel_iterations=1
                    ),
                    input_signature=[tf.TensorSpec([None], tf.string)],
                    autograph=False,
                )
                self._made = (tf, one, many)
            return self._made


class Decoder:
    """Decodes images with TensorFlow on `workers` threads; `submit` returns a `Slot` for each."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="verify-decode") if workers > 1 else None
        self._functions = _Functions()
        self._batch = _Batch()
        self._inflight: deque[_Batch] = deque()

    def start(self) -> None:
        """Import TensorFlow now (~5 s; else the first batch does): a progress bar then shows it as
        a step of its own instead of freezing meanwhile."""
        self._functions.get()

    def submit(self, image: bytes) -> Slot:
        batch = self._batch
        slot = Slot(batch, len(batch.images))
        batch.images.append(image)
        batch.nbytes += len(image)
        if len(batch.images) >= BATCH_IMAGES or batch.nbytes >= BATCH_BYTES:
            self.flush()
        return slot

    def flush(self) -> None:
        """Send the batch being filled (if any) to a thread; wait while too many are in flight."""
        batch = self._batch
        if not batch.images:
            return
        self._batch = _Batch()
        if self._pool is None:  # one worker: the reading thread decodes, so one core does it all
            batch.future = Future()
            try:
                batch.future.set_result(self._decode(batch))
            except Exception as e:
                batch.future.set_exception(e)
            return
        batch.future = self._pool.submit(self._decode, batch)
        self._inflight.append(batch)
        while self._inflight and self._inflight[0].future is not None and self._inflight[0].future.done():
            self._inflight.popleft()
        if len(self._inflight) > self.workers + 2:
            oldest = self._inflight.popleft().future
            assert oldest is not None
            oldest.exception()  # waits; an error is raised where the result is used

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)

    def _decode(self, batch: _Batch) -> list[Decoded]:
        tf, one, many = self._functions.get()
        images, batch.images = batch.images, []  # the bytes are not needed once decoded
        try:
            shapes = many(tf.constant(images)).numpy()
            return [tuple(int(d) for d in s) for s in shapes]
        except (tf.errors.OpError, ValueError):
            pass  # one image or more does not decode: each on its own, for TensorFlow's own message
        out: list[Decoded] = []
        for image in images:
            try:
                out.append(tuple(int(d) for d in one(tf.constant(image)).numpy()))
            except (tf.errors.OpError, ValueError) as e:
                out.append(tf_error_message(e))
        return out
