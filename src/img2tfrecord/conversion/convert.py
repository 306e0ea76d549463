"""convert(): walk -> plan -> encode and write (an engine) -> rebalance -> publish.

The plan (which images, in which order, in which shard) is made once, from the walk and the
options only; an engine executes it, shard by shard: the local engine with worker processes
that each encode and write whole shards (`local_engine`), the Beam engine with Beam workers
that do the same (`beam_engine`). A shard's bytes depend only on the plan, so the output is
byte-identical for any engine and any number of workers; `finalize` then rebalances after
skipped images, writes the manifest and publishes atomically.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import time
from collections.abc import Callable, Collection
from typing import Any

from img2tfrecord import cstderr, fs
from img2tfrecord.conversion.events import EventSink, Timing, worded
from img2tfrecord.conversion.plan.job import Plan, check_options, check_paths, plan_job
from img2tfrecord.conversion.plan.options import ENGINES
from img2tfrecord.conversion.write.engines import Engine
from img2tfrecord.conversion.write.engines.pool import EXTENSIONS, discard_early, start_early
from img2tfrecord.conversion.write.finalize import _plan_summary, finalize
from img2tfrecord.conversion.write.output import Source, _check_space, _describe_io, _space_note, check_output
from img2tfrecord.conversion.write.publish import OutputLock, Published, discard, has_unfinished, prepare, recover
from img2tfrecord.conversion.write.resume import (
    Journal,
    Reusable,
    finished_count,
    header,
    journal_command,
    journal_header,
    load_done,
    prune,
    same_job,
)
from img2tfrecord.conversion.write.shards import preloading
from img2tfrecord.conversion.write.workspace import Workspace, workspace
from img2tfrecord.errors import (
    DataError,
    Interrupted,
    UsageError,
    WorkerDied,
    check_keywords,
    option,
    plural,
    said,
)
from img2tfrecord.format.manifest import MANIFEST_NAME, created_stamp
from img2tfrecord.format.options import path_names, specs


@cstderr.quieted
def convert(
    input_dir: str | os.PathLike[str],
    output_dir: str | os.PathLike[str],
    *,
    workers: int | None = None,
    overwrite: bool = False,
    dry_run: bool = False,
    engine: str = "local",
    beam_options: str | list[str] | None = None,
    resume: bool = False,
    like: str | os.PathLike[str] | None = None,
    on_event: EventSink | None = None,
    progress: Callable[[int, int, int], None] | None = None,
    **options: Any,
) -> dict[str, Any]:
    """Convert an image folder into a sharded TFRecord dataset and return the run's summary.

    `options`: the `convert` command's options as keywords (shards, split, seed, labels, encoding,
    resize, ...; the API reference lists each with its type, default and meaning).
    `like`: an existing dataset whose recorded options, shard request and labels (with their
    numbers) this run takes; `options` given beside it override only what they name.
    `on_event(kind, message)` receives "warning" and "skipped" messages as they happen;
    `progress(images, bytes_read, total)` is called after each image (local engine). Raises
    UsageError (bad options, no images, output exists) or DataError (--strict with bad images,
    I/O failure).
    """
    check_keywords("convert", options, parameters())
    input_dir, output_dir = os.fspath(input_dir), os.fspath(output_dir)  # a pathlib.Path from Python
    # the workers start while the plan is made (the CLI started them before its imports)
    start_early(
        input_dir, output_dir, workers=workers, engine=engine, dry_run=dry_run, file_list=options.get("file_list")
    )
    loads = engine == "local" and not dry_run  # the record writer loads meanwhile (a no-op if the CLI started it)
    try:
        with preloading(output_dir, EXTENSIONS) if loads else contextlib.nullcontext():
            return _convert(
                input_dir,
                output_dir,
                workers=workers,
                overwrite=overwrite,
                dry_run=dry_run,
                engine=engine,
                beam_options=beam_options,
                resume=resume,
                like=like,
                on_event=on_event,
                progress=progress,
                options=options,
            )
    finally:
        discard_early()  # refused before its engine took them


def _convert(
    input_dir: str,
    output_dir: str,
    *,
    workers: int | None,
    overwrite: bool,
    dry_run: bool,
    engine: str,
    beam_options: str | list[str] | None,
    resume: bool,
    like: str | os.PathLike[str] | None,
    on_event: EventSink | None,
    progress: Callable[[int, int, int], None] | None,
    options: dict[str, Any],
) -> dict[str, Any]:
    """convert() once its workers are starting."""
    options |= {k: os.fspath(options[k]) for k in path_names() if isinstance(options.get(k), os.PathLike)}
    timing = Timing()
    emit = worded(on_event)
    options = _checked_request(input_dir, output_dir, workers, engine, beam_options, resume, like, options)
    check_paths(input_dir, output_dir)
    check_options(**options)  # a wrong command is told so before "output is not empty"
    ws = workspace(output_dir)
    source = Source(input_dir, options.get("file_list"))
    if dry_run:
        return _dry_run(plan_job(input_dir, output_dir, **options), ws, overwrite, resume, source, timing, emit)
    check_output(ws, overwrite, resume, source)
    existed = fs.is_remote(output_dir) or os.path.exists(output_dir)
    lock = OutputLock(ws)
    lock.acquire()  # first: a second run is refused before it says or touches anything
    started = False
    try:
        then = journal_header(ws.journal_dir) if resume else None  # before `recover` removes it
        if recover(ws):  # a killed run had switched its dataset in: OUTPUT is that dataset now
            if resume:
                plan = plan_job(input_dir, output_dir, **options)
                if same_job(then, plan):  # it was this command's: done (a retry script's --resume exits 0)
                    return _already_published(plan, timing, emit)
                raise UsageError(
                    f"{option('resume', True)}: the interrupted run had already published its dataset in {ws.shown} (removing the "
                    "old version was all that was left, done now): there is nothing to resume"
                )
        check_output(
            ws, overwrite, resume, source
        )  # as OUTPUT is now (a dataset renamed back by `recover` among others)
        if discarding := _unfinished_run(ws, resume, overwrite):
            emit("warning", discarding)
        plan = plan_job(input_dir, output_dir, **options)
        timing.planned = time.perf_counter()
        for w in plan.warnings:
            emit("warning", w)
        _walk_events(plan, emit)
        _check_space(plan, emit)
        started = True
        return _run(
            plan,
            ws,
            engine=engine,
            workers=workers,
            overwrite=overwrite,
            resume=resume,
            beam_options=beam_options,
            emit=emit,
            progress=progress,
            timing=timing,
        )
    finally:
        if not started and not existed and not fs.is_remote(output_dir):
            with contextlib.suppress(OSError):
                os.rmdir(ws.output)  # a folder made for an in-place lock, still empty
        lock.release(remove=not has_unfinished(ws))  # last: all cleanup happens under the lock


def _checked_request(
    input_dir: str,
    output_dir: str,
    workers: int | None,
    engine: str,
    beam_options: str | list[str] | None,
    resume: bool,
    like: str | os.PathLike[str] | None,
    options: dict[str, Any],
) -> dict[str, Any]:
    """convert()'s arguments checked before any work, each mistake in one line; returns `options`
    with --like's recorded ones under them (read now: OUTPUT may be the dataset it is like)."""
    created_stamp()  # a malformed SOURCE_DATE_EPOCH is refused before any work, not at publish time
    if workers is not None and workers < 1:
        raise UsageError(f"bad {option('workers', workers)}: must be >= 1")
    if engine not in ENGINES:
        raise UsageError(f"bad {option('engine', engine)}: choose local or beam")
    if beam_options and engine != "beam":
        raise UsageError(f"{option('beam_options')} configures the Beam engine: add {option('engine', 'beam')}")
    for path, what in (
        (input_dir, "input"),
        (output_dir, "output"),
        (options.get("file_list") or "", option("file_list")),
        (os.fspath(like) if like is not None else "", option("like")),
    ):
        fs.check_remote(path, what)  # a missing file system or an unreachable bucket: one line, before any work
    if like is not None:  # read before any work: OUTPUT itself may be the dataset it is like (--overwrite)
        from img2tfrecord.conversion.plan.like import with_like

        options = with_like(os.fspath(like), options, input_dir)
    if engine == "beam":  # before a long listing: Beam installed, options parse, paths fit the runner
        from img2tfrecord.conversion.write.engines.beam import preflight

        preflight(beam_options, input_dir, output_dir)
    if engine != "local" and options.get("dedupe") == "drop":
        raise UsageError(
            f"{option('dedupe', 'drop')} needs the local engine (it decides in plan order); use {option('dedupe', 'report')} with Beam"
        )
    if resume and engine != "local":
        raise UsageError(
            f"{option('resume', True)} works with the local engine; Beam runners retry failed work themselves"
        )
    return options


def _dry_run(
    plan: Plan, ws: Workspace, overwrite: bool, resume: bool, source: Source, timing: Timing, emit: EventSink
) -> dict[str, Any]:
    """The plan's summary with what the real run would refuse, said now: nothing is written and
    no lock is taken."""
    refused = None
    try:  # what the real run would refuse, said now
        check_output(ws, overwrite, resume, source)
        _unfinished_run(ws, resume, overwrite)
    except UsageError as e:
        refused = str(e)  # shown with the plan
    for w in plan.warnings:
        emit("warning", w)
    _walk_events(plan, emit)
    return _plan_summary(plan, timing, refused)


def _already_published(plan: Plan, timing: Timing, emit: EventSink) -> dict[str, Any]:
    """The summary of a --resume whose interrupted run (this same job) had already published its
    dataset: nothing is written; the counts are the published dataset.json's."""
    import json

    manifest = json.loads(fs.read_bytes(fs.join(plan.output_dir, MANIFEST_NAME)))
    splits = manifest.get("splits") or {}
    emit(
        "note",
        f"resuming: the interrupted run had already published its dataset in {plan.output_dir} "
        "(only removing the old version was left, done now)",
    )
    return {
        "input": plan.input_dir,
        "output": plan.output_dir,
        "dry_run": False,
        "already_published": True,
        "classes": list(manifest.get("classes") or []),
        "records": sum(int(sp.get("records") or 0) for sp in splits.values()),
        "splits": {
            s: {
                "records": int(sp.get("records") or 0),
                "shards": len(sp.get("shards") or []),
                "bytes": sum(int(sh.get("bytes") or 0) for sh in sp.get("shards") or []),
            }
            for s, sp in splits.items()
        },
        "warnings": [],
        "elapsed_seconds": round(time.perf_counter() - timing.start, 3),
    }


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
        from img2tfrecord.conversion.write.engines.beam import BeamEngine

        return BeamEngine(beam_options, workers or os.cpu_count() or 1)
    from img2tfrecord.conversion.write.engines.local import LocalEngine

    return LocalEngine(journal, timing, workers, progress)


def _unfinished_run(ws: Workspace, resume: bool, overwrite: bool) -> str | None:
    """The warning to give when a run discards an unfinished one in `output_dir`, or None.

    Finished shards of an interrupted run are not thrown away unasked: without --resume (which
    reuses them) it takes --overwrite. Raises UsageError otherwise.
    """
    output_dir = ws.output
    if journal_command(ws.journal_dir) == "update" and not overwrite:  # not convert's: its --resume cannot finish it
        raise UsageError(
            f"{output_dir} holds an unfinished update: finish it (update with {option('resume', True)}), "
            f"or add {option('overwrite', True)} to discard it and convert anew"
        )
    if resume:
        return None
    done = finished_count(ws.journal_dir)
    if done is None:
        return None
    if done and not overwrite:
        raise UsageError(
            f"{output_dir} holds an unfinished run with {plural(done, 'finished shard')}: add {option('resume', True)} to reuse "
            f"{'it' if done == 1 else 'them'} ({said('same command', 'same arguments')}), or {option('overwrite', True)} to discard {'it' if done == 1 else 'them'} and start over"
        )
    return f"discarding the unfinished run in {output_dir}" + (
        f" and its {plural(done, 'finished shard')}" if done else ""
    )


def _run(
    plan: Plan,
    ws: Workspace,
    *,
    engine: str,
    workers: int | None,
    overwrite: bool,
    resume: bool,
    beam_options: str | list[str] | None,
    emit: EventSink,
    progress: Callable[[int, int, int], None] | None,
    timing: Timing,
) -> dict[str, Any]:
    """Prepare the workspace, run an engine, publish; on failure, keep finished shards for --resume
    (or, when there is nothing to resume, remove what it wrote), all under the caller's lock."""
    output_dir = plan.output_dir
    prepare(ws, keep=resume)
    reusable = load_done(plan, ws.build, ws.journal_dir) if resume else Reusable()
    done = reusable.done
    for redone in reusable.redone:
        emit("warning", f"resuming: {redone.name} is converted again: {redone.why}")
    if done:
        emit(
            "note",
            f"resuming: {len(done)} of {plural(len(plan.shards), 'shard')} {'was' if len(done) == 1 else 'were'} already finished and {'is' if len(done) == 1 else 'are'} reused",
        )
    timing.reused = frozenset(done)  # the summary's rates count only what this run converts
    state = Published()
    publishing = False
    kept: Collection[str] = set(done)
    resumable = engine == "local"
    try:
        journal = Journal(ws.build, header(plan), done, journal_dir=ws.journal_dir)
        kept = journal.done.keys()  # a live view: what the run has finished so far
        runner = _engine(engine, workers, beam_options, progress, timing, journal)
        outcomes = runner.run(plan, ws.build, plan.settings, emit)
        publishing = True
        return finalize(plan, ws, outcomes, timing, emit, engine=runner.name, state=state)
    except KeyboardInterrupt:
        if state.switched:  # the signal came once the dataset was in place
            raise Interrupted(len(plan.shards), len(plan.shards), published=True) from None
        if not resumable:  # Beam runners retry work themselves; there is nothing to resume
            discard(ws)
            raise
        prune(ws.build, set(kept))  # keep finished shards for --resume, drop partial ones
        raise Interrupted(
            len(kept), len(plan.shards), publishing=publishing, in_place=ws.in_place, kept_in=ws.shown_root
        ) from None
    except WorkerDied:
        prune(ws.build, set(kept))
        raise
    except BaseException as e:
        disk = isinstance(e, OSError) or type(e).__module__.startswith("tensorflow")  # the disk, not the data
        if state.switched:
            raise DataError(
                f"the dataset was published in {output_dir}, but removing the old version failed: {_describe_io(e)}"
            ) from None
        if not disk or not resumable:
            discard(ws)
            if disk:
                raise DataError(
                    f"writing the dataset in {output_dir} failed: {_describe_io(e)}; {_space_note(plan)}"
                ) from None
            raise
        prune(ws.build, set(kept))  # finished shards are never deleted by a failure
        raise DataError(_kept_message(plan, ws, e, len(kept), publishing)) from None


def _kept_message(plan: Plan, ws: Workspace, e: BaseException, done: int, publishing: bool) -> str:
    """What a failed run says: what failed, what is left where, and the command that finishes it."""
    out, total = plan.output_dir, len(plan.shards)
    if publishing and not ws.in_place:
        state = f"{out} is unchanged and all {plural(total, 'shard')} are kept"
    elif publishing:
        state = f"{out} is incomplete (readers refuse it); the shards not yet moved are kept"
    else:
        state = f"{done} of {plural(total, 'shard')} finished and are kept; nothing was published"
    what = "publishing" if publishing else "writing"
    return (
        f"{what} the dataset in {out} failed: {_describe_io(e)} ({_space_note(plan)}); {state}: "
        f"{said('run the same command', 'call convert() again')} with {option('resume', True)} to finish it"
    )


def parameters() -> list[str]:
    """What convert() accepts (named in the error for any other): its own keywords and the
    conversion options of format.options' table, in its order."""
    own = [p for p in inspect.signature(convert).parameters if p not in ("input_dir", "output_dir", "options")]
    return [*own, *(s.name for s in specs("plan"))]


_PARAMETERS = parameters()  # the API reference's table lists them in this order (mkdocs_hooks.py)
