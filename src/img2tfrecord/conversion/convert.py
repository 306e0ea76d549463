"""convert(): walk -> plan -> encode and write (an engine) -> rebalance -> publish.

The plan (which images, in which order, in which shard) is made once, from the walk and the
options only; an engine executes it, shard by shard: the local engine with worker processes
that each encode and write whole shards (`local_engine`), the Beam engine with Beam workers
that do the same (`beam_engine`). A shard's bytes depend only on the plan, so the output is
byte-identical for any engine and any number of workers; `finalize` then rebalances after
skipped images, writes the manifest and publishes atomically.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from img2tfrecord import cstderr, fs
from img2tfrecord.conversion.engines import Engine
from img2tfrecord.conversion.events import EventSink, Timing
from img2tfrecord.conversion.finalize import _plan_summary, finalize
from img2tfrecord.conversion.options import ENGINES
from img2tfrecord.conversion.output import (
    OutputLock,
    _check_space,
    _cleanup,
    _describe_io,
    _space_note,
    check_output,
    prepare_output,
)
from img2tfrecord.conversion.plan import Plan, check_paths, plan_job
from img2tfrecord.conversion.resume import (
    Journal,
    finished_count,
    header,
    load_done,
    prune,
)
from img2tfrecord.errors import DataError, Interrupted, UsageError, WorkerDied, plural
from img2tfrecord.format.naming import STAGING_DIR


@cstderr.quieted
def convert(
    input_dir: str,
    output_dir: str,
    *,
    workers: int | None = None,
    overwrite: bool = False,
    dry_run: bool = False,
    engine: str = "local",
    beam_options: str | list[str] | None = None,
    resume: bool = False,
    on_event: EventSink | None = None,
    progress: Callable[[int, int, int], None] | None = None,
    **options: Any,
) -> dict[str, Any]:
    """Convert an image folder into a sharded TFRecord dataset and return the run's summary.

    `options` are those of `plan_job` (shards, split, seed, labels, encoding, resize, ...).
    `on_event(kind, message)` receives "warning" and "skipped" messages as they happen;
    `progress(images, bytes_read, total)` is called after each image (local engine). Raises
    UsageError (bad options, no images, output exists) or DataError (--strict with bad images,
    I/O failure).
    """
    timing = Timing()
    emit = on_event or (lambda kind, msg: None)
    if workers is not None and workers < 1:
        raise UsageError(f"bad --workers {workers}: must be >= 1")
    if engine not in ENGINES:
        raise UsageError(f"bad --engine {engine!r}: choose local or beam")
    if beam_options and engine != "beam":
        raise UsageError("--beam-options configures the Beam engine: add --engine beam")
    for path, what in ((input_dir, "input"), (output_dir, "output"), (options.get("file_list") or "", "--file-list")):
        fs.check_remote(path, what)  # a missing file system or an unreachable bucket: one line, before any work
    if engine == "beam":  # before a long listing: Beam installed, options parse, paths fit the runner
        from img2tfrecord.conversion.engines.beam import preflight

        preflight(beam_options, input_dir, output_dir)
    if engine != "local" and options.get("dedupe") == "drop":
        raise UsageError(
            "--dedupe drop needs the local engine (it decides in plan order); use --dedupe report with Beam"
        )
    if resume and engine != "local":
        raise UsageError("--resume works with the local engine; Beam runners retry failed work themselves")
    check_paths(input_dir, output_dir)
    if dry_run:
        plan = plan_job(input_dir, output_dir, **options)
        refused = None
        try:  # what the real run would refuse, said now
            check_output(output_dir, overwrite)
            _unfinished_run(output_dir, resume, overwrite)
        except UsageError as e:
            refused = str(e)  # shown with the plan
        for w in plan.warnings:
            emit("warning", w)
        _walk_events(plan, emit)
        return _plan_summary(plan, timing, refused)

    check_output(output_dir, overwrite)
    existed = fs.is_remote(output_dir) or os.path.exists(output_dir)
    lock = OutputLock(output_dir)
    lock.acquire()  # first: a second run is refused before it says or touches anything
    started = False
    try:
        if discarding := _unfinished_run(output_dir, resume, overwrite):
            emit("warning", discarding)
        plan = plan_job(input_dir, output_dir, **options)
        for w in plan.warnings:
            emit("warning", w)
        _walk_events(plan, emit)
        _check_space(plan, emit)
        started = True
        return _run(plan, engine, workers, overwrite, resume, beam_options, emit, progress, timing, lock)
    finally:
        lock.release()
        if not started and not existed:
            _cleanup(fs.join(output_dir, STAGING_DIR), output_dir)  # the folder the lock created


def _walk_events(plan: Plan, emit: EventSink) -> None:
    """What the walk ignored (said once) and could not read (skips, also in dataset.json)."""
    for note in plan.notes:
        emit("note", note)
    for s in plan.skipped:
        emit("skipped", f"{s['path']}: {s['reason']}")


def _engine(
    name: str,
    workers: int | None,
    beam_options: str | list[str] | None,
    progress: Callable[[int, int, int], None] | None,
    timing: Timing,
    journal: Journal,
) -> Engine:
    """The engine `name`, built with what it needs (Beam's module only when asked for)."""
    if name == "beam":
        from img2tfrecord.conversion.engines.beam import BeamEngine

        return BeamEngine(beam_options, workers or os.cpu_count() or 1)
    from img2tfrecord.conversion.engines.local import LocalEngine

    return LocalEngine(journal, timing, workers, progress)


def _unfinished_run(output_dir: str, resume: bool, overwrite: bool) -> str | None:
    """The warning to give when a run discards an unfinished one in `output_dir`, or None.

    Finished shards of an interrupted run are not thrown away unasked: without --resume (which
    reuses them) it takes --overwrite. Raises UsageError otherwise.
    """
    if resume:
        return None
    done = finished_count(fs.join(output_dir, STAGING_DIR))
    if done is None:
        return None
    if done and not overwrite:
        raise UsageError(
            f"{output_dir} holds an unfinished run with {plural(done, 'finished shard')}: add --resume to reuse "
            f"{'it' if done == 1 else 'them'} (same command), or --overwrite to discard {'it' if done == 1 else 'them'} and start over"
        )
    return f"discarding the unfinished run in {output_dir}" + (
        f" and its {plural(done, 'finished shard')}" if done else ""
    )


def _run(
    plan: Plan,
    engine: str,
    workers: int | None,
    overwrite: bool,
    resume: bool,
    beam_options: str | list[str] | None,
    emit: EventSink,
    progress: Callable[[int, int, int], None] | None,
    timing: Timing,
    lock: OutputLock,
) -> dict[str, Any]:
    """Prepare the output, run an engine, publish; on failure, keep or remove what it wrote."""
    output_dir = plan.output_dir
    staging = prepare_output(output_dir, overwrite, keep_staging=resume)
    done, redone = load_done(plan, staging) if resume else ({}, [])
    for name, why in redone:
        emit("warning", f"resuming: {name} is converted again: {why}")
    if done:
        emit(
            "note",
            f"resuming: {len(done)} of {plural(len(plan.shards), 'shard')} {'was' if len(done) == 1 else 'were'} already finished and {'is' if len(done) == 1 else 'are'} reused",
        )
    timing.reused = frozenset(done)  # the summary's rates count only what this run converts
    journal = Journal(staging, header(plan), done)
    runner = _engine(engine, workers, beam_options, progress, timing, journal)
    try:
        outcomes = runner.run(plan, staging, plan.settings, emit)
        return finalize(plan, staging, outcomes, timing, emit, engine=runner.name)
    except KeyboardInterrupt:
        if not runner.resumable:  # Beam runners retry work themselves; there is nothing to resume
            lock.release()
            _cleanup(staging, output_dir)
            raise
        prune(staging, set(journal.done))  # keep finished shards for --resume, drop partial ones
        raise Interrupted(len(journal.done), len(plan.shards)) from None
    except WorkerDied:
        prune(staging, set(journal.done))
        raise
    except BaseException as e:
        lock.release()  # before _cleanup, which removes the output directory if it is empty
        _cleanup(staging, output_dir)
        if isinstance(e, OSError) or type(e).__module__.startswith("tensorflow"):  # the disk, not the data
            raise DataError(
                f"writing the dataset in {output_dir} failed: {_describe_io(e)}; {_space_note(plan)}"
            ) from None
        raise
