"""`inspect --verify`'s image decoding on all cores: TensorFlow's own decoder, in batches, on threads.

`--verify` means "TensorFlow's decoder gives the declared shape". A JPEG (the bytes
`tf.io.decode_image` takes for one: `\\xff\\xd8\\xff`) is decoded at 1/8 scale,
`tf.io.decode_jpeg(..., ratio=8)`: libjpeg's DCT scaling still entropy-decodes every coefficient
of every block (the Huffman or arithmetic decoding is what fails on damaged data, at any scale)
and only makes 1/64 of the pixels, so it fails exactly where the full-size decode fails. Its
height and width are libjpeg's header's (`tf.image.extract_jpeg_shape`), which the full decode
would allocate; channels are the scaled decode's. tests/inspection/test_verify_scale.py holds this against
the full-size `tf.io.decode_image` over every JPEG case of the suite, damage in the last MCU rows
too. Where the header and the scaled shape disagree (libjpeg scales a side to ceil(side / 8)), or
TensorFlow would refuse the full-size decode for its size (2^29 bytes), the image is decoded at
full size instead; any JPEG that fails is decoded again at full size for TensorFlow's message.
The 1/8 scale saves the inverse DCT, upsampling and colour conversion (~30% of a JPEG's decode
here: 1.14 -> 0.80 ms of CPU for the bench's ~85 KB JPEGs; what remains is entropy decoding) and
~98% of its memory. Other formats (PNG, GIF, BMP, WebP) are decoded at full size: their
decoders have no cheaper mode that still reads all the data. How images are fed was measured
(2 cores, the bench's ~100 KB JPEGs, bench/verify.py and in-process loops, contenders
alternated in one run):

* one traced call per image (the previous design, on a thread per shard) spends as much again in
  dispatch as in decoding: 355-446 images/s on one core against 503-580 for the same images
  decoded 32 per call; eager calls also hold the GIL (2 threads: 565 -> 600 images/s);
* so images go to TensorFlow in batches (up to 32 images or 4 MB, JPEGs and the rest apart): one
  traced `tf.map_fn` call decodes a batch, one image after the other, and releases the GIL while
  it runs. `workers` threads each decode a batch at a time while the calling thread reads,
  CRC-checks and parses the next records (pure Python, ~0.1 ms a record), so `workers` images
  decode at once. With one worker the reading thread decodes too (no pool): one core;
* threads and not processes: one process pays TensorFlow's import once; each worker process
  would pay it again (here ~3 s of CPU and ~350 MB resident each), and a shard per process
  balances badly when shards are few. The limit of one process is its one reading thread;
  past that, shards would be split between processes;
* TensorFlow is imported by the first batch's thread, so reading goes on meanwhile (until the
  batches in flight are full), and a `--verify` whose records hold no image never imports it.
  With a progress bar (a terminal) `start()` imports it first instead, shown as a step of its own
  (the overlap it gives up is the reading of the few batches allowed in flight). The import is
  ~3 s of CPU on one core, most of it holding the GIL: the part of a whole `--verify` run that
  more cores do not shorten.

A batch with an image TensorFlow cannot decode fails as a whole: it is decoded again one image at
a time, so each problem carries TensorFlow's own message for its image, exactly as one call per
image would. Memory: at most `workers + 2` batches are in flight (the reader waits for the oldest),
and a batch decodes one image at a time, so at most `workers` decoded images exist at once.
"""

from __future__ import annotations

import threading
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, NamedTuple

from img2tfrecord.format.images import tf_error_message

BATCH_IMAGES = 32
BATCH_BYTES = 4 * 2**20
JPEG_MAGIC = b"\xff\xd8\xff"  # what `tf.io.decode_image` decodes as a JPEG (its `is_jpeg`)
JPEG_RATIO = 8  # libjpeg's DCT scaling: every coefficient is still entropy-decoded, 1/64 of the pixels made
TF_JPEG_MAX_BYTES = 1 << 29  # TensorFlow refuses a JPEG whose height x width x components reaches this

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
    __slots__ = ("images", "nbytes", "future", "jpeg")

    def __init__(self, jpeg: bool) -> None:
        self.images: list[bytes] = []
        self.nbytes = 0
        self.future: Future[list[Decoded]] | None = None
        self.jpeg = jpeg  # JPEGs only (decoded at 1/8 scale), or any other format (at full size)


class _Traced(NamedTuple):
    """TensorFlow and the traced decode functions: one image, and a batch of them."""

    tf: Any
    full_one: Any  # bytes -> shape, `tf.io.decode_image` at full size (any format; TensorFlow's messages)
    full_many: Any
    jpeg_one: Any  # JPEG bytes -> header (height, width, components) + the 1/8-scale decode's shape
    jpeg_many: Any


class _Functions:
    """The traced decode functions, made once (importing TensorFlow) by whichever thread needs them first."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._made: _Traced | None = None

    def get(self) -> _Traced:
        with self._lock:
            if self._made is None:
                from img2tfrecord.tf_import import tensorflow

                self._made = _trace(tensorflow())
            return self._made


def _trace(tf: Any) -> _Traced:
    # Lambdas, not named functions: TensorFlow prefixes a named function's op errors with
    # "Graph execution error: Detected at node ... defined at" and a Python traceback.
    full = lambda data: tf.shape(tf.io.decode_image(data, channels=0, expand_animations=False))  # noqa: E731
    # libjpeg's header (what the full decode would allocate) beside the 1/8-scale decode's shape
    jpeg = lambda data: tf.concat(  # noqa: E731
        [tf.image.extract_jpeg_shape(data), tf.shape(tf.io.decode_jpeg(data, channels=0, ratio=JPEG_RATIO))], 0
    )

    def batched(fn: Any, width: int) -> Any:
        return tf.function(
            lambda batch: tf.map_fn(
                fn, batch, fn_output_signature=tf.TensorSpec([width], tf.int32), parallel_iterations=1
            ),
            input_signature=[tf.TensorSpec([None], tf.string)],
            autograph=False,
        )

    def single(fn: Any) -> Any:
        return tf.function(fn, input_signature=[tf.TensorSpec([], tf.string)], autograph=False)

    return _Traced(tf, single(full), batched(full, 3), single(jpeg), batched(jpeg, 6))


class Decoder:
    """Decodes images with TensorFlow on `workers` threads; `submit` returns a `Slot` for each."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="verify-decode") if workers > 1 else None
        self._functions = _Functions()
        self._filling = {True: _Batch(jpeg=True), False: _Batch(jpeg=False)}
        self._inflight: deque[_Batch] = deque()

    def start(self) -> None:
        """Import TensorFlow now (~5 s; else the first batch does): a progress bar then shows it as
        a step of its own instead of freezing meanwhile."""
        self._functions.get()

    def submit(self, image: bytes) -> Slot:
        jpeg = image.startswith(JPEG_MAGIC)  # `tf.io.decode_image` decodes these bytes as a JPEG
        batch = self._filling[jpeg]
        slot = Slot(batch, len(batch.images))
        batch.images.append(image)
        batch.nbytes += len(image)
        if len(batch.images) >= BATCH_IMAGES or batch.nbytes >= BATCH_BYTES:
            self._send(jpeg)
        return slot

    def flush(self) -> None:
        """Send the batches being filled (if any) to the threads."""
        self._send(True)
        self._send(False)

    def _send(self, jpeg: bool) -> None:
        """Send one batch being filled to a thread; wait while too many are in flight."""
        batch = self._filling[jpeg]
        if not batch.images:
            return
        self._filling[jpeg] = _Batch(jpeg)
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
        fns = self._functions.get()
        tf = fns.tf
        images, batch.images = batch.images, []  # the bytes are not needed once decoded
        try:
            if batch.jpeg:
                rows = fns.jpeg_many(tf.constant(images)).numpy()
                return [self._jpeg_shape(fns, image, row) for image, row in zip(images, rows)]
            return [_shape(s) for s in fns.full_many(tf.constant(images)).numpy()]
        except (tf.errors.OpError, ValueError):
            pass  # one image or more does not decode: each on its own, for TensorFlow's own message
        return [self._decode_one(fns, image, batch.jpeg) for image in images]

    def _decode_one(self, fns: _Traced, image: bytes, jpeg: bool) -> Decoded:
        """One image: a JPEG at 1/8 scale first; anything that fails so, at full size, whose
        error message (or shape) is what `tf.io.decode_image` says of this image."""
        tf = fns.tf
        if jpeg:
            try:
                return self._jpeg_shape(fns, image, fns.jpeg_one(tf.constant(image)).numpy())
            except (tf.errors.OpError, ValueError):
                pass
        try:
            return _shape(fns.full_one(tf.constant(image)).numpy())
        except (tf.errors.OpError, ValueError) as e:
            return tf_error_message(e)

    def _jpeg_shape(self, fns: _Traced, image: bytes, row: Any) -> Decoded:
        """The full-size shape of a JPEG decoded at 1/8 scale: height and width from libjpeg's
        header, channels from the decode. Should the two disagree (libjpeg scales a side to
        ceil(side / 8)), or the full-size decode be one TensorFlow refuses for its size, the
        image is decoded at full size instead."""
        height, width, components, small_h, small_w, channels = (int(v) for v in row)
        if (
            small_h == -(-height // JPEG_RATIO)
            and small_w == -(-width // JPEG_RATIO)
            and height * width * components < TF_JPEG_MAX_BYTES
        ):
            return (height, width, channels)
        try:
            return _shape(fns.full_one(fns.tf.constant(image)).numpy())
        except (fns.tf.errors.OpError, ValueError) as e:
            return tf_error_message(e)


def _shape(s: Any) -> Decoded:
    return tuple(int(d) for d in s)
