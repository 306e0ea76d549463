"""The progress bar's read speed agrees with the summary's (issue 38, item 23): both count from the
run's start, start-up included. Counted from the bar's first frame (drawn after the first batch
of images), the bar said 5.0 GB/s where the summary said 2.2 MB/s of the same 221 KB folder.

A clock is given to the bar, so the check is exact and takes no time."""

from __future__ import annotations

from img2tfrecord.cli.convert import _Progress, _rate


def test_the_bars_read_speed_counts_from_the_runs_start() -> None:
    now = [100.0]
    progress = _Progress(enabled=True, clock=lambda: now[0])  # made as the run starts
    now[0] = 103.0  # planning, the worker pool, TensorFlow's import: no image yet
    progress.start(total=10)  # the first frame, after the first batch
    now[0] = 104.0
    progress.update(10, 4_000_000)
    try:
        assert progress.bar.postfix == f"{_rate(4_000_000, 4.0)} read" == "1.0 MB/s read"
    finally:
        progress.close()


def test_the_summary_says_the_same_rate_over_the_same_time() -> None:
    """The summary's `of source images` rate is `_rate(converted_bytes, elapsed_seconds)`: the same
    function over the same span, so at the end of a run the two say one speed."""
    from img2tfrecord.cli.convert import _summary_text

    summary = {
        "classes": ["a"], "already_published": False, "dry_run": False, "records": 10, "output": "out",
        "splits": {"train": {"records": 10, "shards": 1, "bytes": 5000}}, "bytes": 5000,
        "images_per_second": 2.5, "steady_seconds": 4.0, "elapsed_seconds": 4.0, "steady_images_per_second": 2.5,
        "converted_bytes": 4_000_000, "converted_images": 10, "skipped_count": 0, "transcoded": {},
        "ignored_files": 0, "excluded_files": 0,
    }  # fmt: skip
    assert "(2 images/s; 1.0 MB/s of source images)" in _summary_text(summary)
