"""What a run reports while it runs: messages (`EventSink`) and timing (`Timing`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from img2tfrecord.errors import wording

EventSink = Callable[[str, str], None]


def worded(on_event: EventSink | None) -> EventSink:
    """The caller's event sink, given messages worded for its audience (errors.option): every
    command's messages reach the CLI as `--dedupe drop` and Python as `dedupe='drop'`."""
    if on_event is None:
        return lambda kind, msg: None
    return lambda kind, msg: on_event(kind, wording(msg))


@dataclass
class Timing:
    """When the run started, and when steady state began with how much already done.

    Steady state is the second half of the images: by then the interpreter, the worker pool and
    TensorFlow's ~3 s import are behind, and so is the backlog encoded while TensorFlow imported.
    """

    start: float = field(default_factory=time.perf_counter)
    steady_from: float = 0.0
    images_before: int = 0  # images done (skipped ones included) when steady state began
    bytes_before: int = 0  # source bytes of the images written by then
    skipped: int = 0  # images skipped so far (shown live: a skip is reported before its progress)
    skipped_before: int = 0
    workers: int | None = None  # worker processes actually used (local engine)
    # shards of an interrupted run that `--resume` reuses: not converted by this run, so not in its rates
    reused: frozenset[str] = frozenset()
    planned: float = 0.0  # when the plan was made (the walk over): start-up is measured against it
    first_record: float = 0.0  # when the first image was written (as its progress arrived)

    def image_done(self, images: int, nbytes: int, total: int) -> None:
        if not self.first_record and images:
            self.first_record = time.perf_counter()
        if not self.steady_from and images >= total // 2 and images < total:
            self.steady_from, self.images_before, self.bytes_before = time.perf_counter(), images, nbytes
            self.skipped_before = self.skipped
