"""update(): bring a dataset up to date with its input at the cost of what changed.

As table formats do (Lance, Delta Lake): added and changed images are encoded into new shards
appended to their split; a shard that holds a removed or changed image is rewritten by copying
its other records (no decode, no re-encode: `write.copy_records`); every other shard is
hard-linked into the new version under its new name (`SPLIT-XXXXX-of-YYYYY`, renumbered when the
count changes), so its bytes are neither read nor written. The new version is built beside the
old one and published by the same switch as `convert`'s; dataset.json's lineage gets version+1
and the old dataset.json's sha256 as `parent`. Every record-shaping option is the dataset's own
(dataset.json): giving one with another value is refused, naming the `convert --like OUT
--overwrite` to run (versions.options). The dataset read (versions.recorded), the layout of the new
version (versions.layout) and the limit on what it removes (versions.guard) are their own modules.
"""

from __future__ import annotations

import inspect
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from img2tfrecord import cstderr, fs
from img2tfrecord.conversion.events import EventSink, Timing, worded
from img2tfrecord.conversion.plan.enrich import Enricher
from img2tfrecord.conversion.plan.enrichers import for_update
from img2tfrecord.conversion.plan.job import Plan, PlannedShard, check_paths, refuse_walk_skips
from img2tfrecord.conversion.plan.options import ShardSettings
from img2tfrecord.conversion.plan.table import TaskView
from img2tfrecord.conversion.versions.assemble import (
    REWRITE,
    Encoded,
    NewShards,
    NewVersion,
    keep_unread,
    place,
    report_of,
    slots_of,
    write_catalog,
)
from img2tfrecord.conversion.versions.changes import Changes, diff, walk
from img2tfrecord.conversion.versions.faults import recorded_walk_skips
from img2tfrecord.conversion.versions.guard import Limit, parse_limit, refusal
from img2tfrecord.conversion.versions.layout import Layout, layout_of, margin, needed
from img2tfrecord.conversion.versions.options import recorded_settings, refuse_other_options
from img2tfrecord.conversion.versions.recorded import Recorded, read_recorded
from img2tfrecord.conversion.versions.resume import ResumeState, check_unfinished, clear_build, keep_finished
from img2tfrecord.conversion.write import shards as writer
from img2tfrecord.conversion.write.catalog import add_split
from img2tfrecord.conversion.write.shards import ShardInfo
from img2tfrecord.conversion.write.workspace import Workspace
from img2tfrecord.errors import DataError, Interrupted, UsageError, option, wording
from img2tfrecord.format.catalog import Catalog
from img2tfrecord.format.manifest import created_stamp, manifest_digest
from img2tfrecord.format.naming import shard_name
from img2tfrecord.format.options import path_names

# The extension modules update imports: loaded before the record writer starts loading in a thread
# (`write.preloading`): the JPEG decoder, the lock's fcntl, the local engine's process pool
# (multiprocessing). numpy is in already: the catalog's decode imports it.
_EXTENSIONS = ("simplejpeg", "fcntl", "img2tfrecord.conversion.write.engines.local")
NEW_DIR = ".update-new"  # inside the build folder: new and rewritten shards under provisional names


@cstderr.quieted
def update(
    input_dir: str | os.PathLike[str],
    output_dir: str | os.PathLike[str],
    *,
    check_content: bool = False,
    dry_run: bool = False,
    resume: bool = False,
    workers: int | None = None,
    strict: bool = False,
    fsync: bool = True,
    file_list: str | os.PathLike[str] | None = None,
    max_delete: str | int | None = None,
    on_event: EventSink | None = None,
    progress: Callable[[int, int, int], None] | None = None,
    **options: Any,
) -> dict[str, Any]:
    """Apply the input's changes to the dataset in `output_dir`; return the summary.

    `max_delete`: how many records the update may remove, N or "P%" of them (default "50%"):
    more is refused (DataError, nothing written; a dry run's summary says so in `refused`), as
    an input folder that is not the dataset's would remove it all (conversion.versions.guard).

    `options` are convert's record-shaping options: each must equal dataset.json's (UsageError
    otherwise). Nothing changed: nothing is written and the summary says `up_to_date`. Interrupted
    (SIGINT/SIGTERM: `Interrupted`), the finished new shards are kept: `resume=True` reuses them
    (conversion.versions.resume)."""
    input_dir, output_dir = os.fspath(input_dir), os.fspath(output_dir)  # a pathlib.Path from Python
    file_list = os.fspath(file_list) if file_list is not None else None
    options |= {k: os.fspath(options[k]) for k in path_names() if isinstance(options.get(k), os.PathLike)}
    timing = Timing()
    emit = worded(on_event)
    created_stamp()
    if workers is not None and workers < 1:
        raise UsageError(f"bad {option('workers', workers)}: must be >= 1")
    limit = parse_limit(max_delete)
    for path, what in ((input_dir, "input"), (output_dir, "output"), (file_list or "", option("file_list"))):
        fs.check_remote(path, what)
    check_paths(input_dir, output_dir)
    from img2tfrecord.conversion.write.publish import finish_cut_short

    finish_cut_short(output_dir, dry_run)  # a publish in place (object stores) cut short: finished first
    rec = read_recorded(output_dir, input_dir=input_dir)
    refuse_other_options(
        rec.options | {"shard_request": rec.manifest.get("shard_request")},
        options,
        input_dir,
        output_dir,
        file_list,
        own=_own_parameters(),
    )
    settings = recorded_settings(rec.made, fsync=fsync, strict=strict)
    enrichers = for_update(rec.manifest, input_dir, output_dir)
    if dry_run:
        changes = _changes(input_dir, rec, file_list, check_content, emit, enrichers)
        summary = _summary(input_dir, output_dir, rec, changes, layout_of(changes, rec, settings), timing, dry_run=True)
        why = refusal(changes.removed_records, _records(rec), limit, input_dir, output_dir)
        summary["refused"] = None if why is None else wording(why)  # rendered for who asked, as an error is
        return summary
    # The record writer loads in a thread while the input is walked and diffed (under the lock).
    # Started only once the changes are known, it would overlap nothing: starting a thread waits for
    # the load (glibc's loader lock), so the engine's threads would wait too (+1% update measured
    # 0.93 -> 1.36 s). The price: an update with nothing to do waits for it (0.6 -> 0.9 s, 384 MB peak).
    with writer.preloading(output_dir, first=_EXTENSIONS):
        request = _Request(input_dir, output_dir, file_list, check_content, resume, workers, limit)
        return _apply(request, rec, settings, emit=emit, progress=progress, timing=timing)


@dataclass(frozen=True)
class _Request:
    """What `update` was asked, checked: the folders, how the input is read and compared, whether
    an unfinished update is resumed, the workers, and how much it may remove."""

    input_dir: str
    output_dir: str
    file_list: str | None
    check_content: bool
    resume: bool
    workers: int | None
    limit: Limit


def _own_parameters() -> list[str]:
    """update()'s own keyword parameters, as its signature has them (the message of an unknown
    keyword lists them beside the options it compares)."""
    return [p.name for p in inspect.signature(update).parameters.values() if p.kind is p.KEYWORD_ONLY]


def _apply(
    request: _Request,
    rec: Recorded,
    settings: ShardSettings,
    *,
    emit: EventSink,
    progress: Callable[[int, int, int], None] | None,
    timing: Timing,
) -> dict[str, Any]:
    """`update` under OUTPUT's lock: the changes, the new version built and published."""
    from img2tfrecord.conversion.write import publish
    from img2tfrecord.conversion.write.workspace import workspace

    input_dir, output_dir, resume = request.input_dir, request.output_dir, request.resume
    ws = workspace(output_dir)
    lock = publish.OutputLock(ws)
    lock.acquire()
    try:
        publish.recover(ws)
        check_unfinished(ws, resume)
        rec = read_recorded(output_dir, rec, input_dir)  # as it is now that we hold the lock
        enrichers = for_update(rec.manifest, input_dir, output_dir)
        changes = _changes(input_dir, rec, request.file_list, request.check_content, emit, enrichers)
        refuse_walk_skips(changes.found.skipped, settings.strict, annotations=changes.found.boxes is not None)
        if why := refusal(changes.removed_records, _records(rec), request.limit, input_dir, output_dir):
            raise DataError(why)  # before anything is written: OUTPUT and an unfinished update's shards stay
        layout = layout_of(changes, rec, settings)
        if changes.nothing:
            if publish.has_unfinished(ws):  # an unfinished update of what is now up to date
                publish.discard(ws)
            return _summary(input_dir, output_dir, rec, changes, layout, timing, dry_run=False)
        from img2tfrecord.conversion.write.output import check_space

        space = needed(changes, layout, settings) + margin(changes)
        check_space(output_dir, space, settings.encode.reencodes, emit, writes="the update writes", what="the update")
        publish.prepare(ws, keep=resume)
        if resume:
            clear_build(ws, NEW_DIR)
        state = publish.Published()
        run = ResumeState(resume)
        try:
            ver = _new_version(ws, output_dir, rec, changes, layout, settings, emit, run)
            built = _build(ver, input_dir, request.workers, progress=progress, timing=timing)
            publish.publish(ws, built.files, built.metadata, settings.fsync, state)
        except BaseException as e:
            if state.switched:  # the new version is in place; only removing the old one failed
                if isinstance(e, KeyboardInterrupt):
                    raise Interrupted(0, 0, published=True) from None
                raise DataError(f"{output_dir} was updated, but removing the old version failed: {e}") from None
            if isinstance(e, KeyboardInterrupt) and run.journal is not None:  # finished shards kept for --resume
                keep_finished(fs.join(ws.build, NEW_DIR), run)
                raise Interrupted(run.done, run.total) from None
            publish.discard(ws)  # the old version is untouched
            if isinstance(e, OSError):
                raise DataError(
                    f"updating the dataset in {output_dir} failed: {e.strerror or e}; it is unchanged"
                ) from None
            raise
        summary = _summary(input_dir, output_dir, rec, changes, layout, timing, dry_run=False)
        summary.update(built.report)
        if state.leftover:
            built.warnings.append(state.leftover)
            emit("warning", state.leftover)
        summary["warnings"] = summary["warnings"] + built.warnings
        return summary
    finally:
        lock.release(remove=not publish.has_unfinished(ws))


def _records(rec: Recorded) -> int:
    """The dataset's records, as dataset.json counts them (the catalog agrees: `read_recorded`)."""
    return sum(int(sp.get("records") or 0) for sp in (rec.manifest.get("splits") or {}).values())


def _changes(
    input_dir: str,
    rec: Recorded,
    file_list: str | None,
    check_content: bool,
    emit: EventSink,
    enrichers: Sequence[Enricher] = (),
) -> Changes:
    if check_content and not rec.catalog.has_digests:
        raise UsageError(
            f"{option('check_content', True)} compares content digests, which a dataset converted with "
            f"{option('dedupe', 'off')} lacks"
        )
    found = walk(input_dir, rec.options, rec.classes, file_list, rec.catalog, enrichers)
    for w in found.warnings:
        emit("warning", w)
    for skip in found.skipped:
        emit("skipped", f"{skip['path']}: {skip['reason']}")
    recorded = rec.manifest.get("metadata") or {}
    same_annotations = not any(e.input_changed(recorded) for e in enrichers)  # a stamp-less row then counts as changed
    changes = diff(found, rec.catalog, rec.classes, check_content, same_annotations)
    changes.annotations_changed = not same_annotations
    changes.walk_skips_changed = recorded_walk_skips(rec.manifest, rec.catalog) != found.skipped
    if rec.made.dedupe == "drop":  # the copy a fresh convert keeps, across versions
        from img2tfrecord.conversion.versions.dedupe import resolve

        before = (rec.manifest.get("duplicates") or {}).get("dropped") or []
        resolve(changes, rec.made.seed, {d["path"]: d["duplicate_of"] for d in before})
    return changes


@dataclass
class _Built:
    files: list[str]
    metadata: dict[str, str]
    report: dict[str, Any]
    warnings: list[str]


def _new_version(
    ws: Workspace,
    output_dir: str,
    rec: Recorded,
    changes: Changes,
    layout: Layout,
    settings: ShardSettings,
    emit: EventSink,
    run: ResumeState,
) -> NewVersion:
    """The version this update builds: the next number, its shards written under `NEW_DIR` first."""
    version = int(rec.manifest.get("version") or 1) + 1
    return NewVersion(ws, output_dir, rec, changes, layout, settings, emit, run, fs.join(ws.build, NEW_DIR), version)


def _build(
    ver: NewVersion,
    input_dir: str,
    workers: int | None,
    *,
    progress: Callable[[int, int, int], None] | None,
    timing: Timing,
) -> _Built:
    """Write the new version into `ws.build`: new shards, rewritten shards, links, catalog, metadata."""
    changes, layout = ver.changes, ver.layout
    fs.makedirs(ver.work)
    table = next(iter(changes.found.splits.values())).table
    # 1. the new shards, encoded by the local engine (the same workers and writer as convert)
    planned = [
        PlannedShard(split=s, index=j, count=k, tasks=part)
        for s, k in layout.new_counts.items()
        if k
        for j, part in enumerate(_cut(TaskView(table, changes.splits[s].encode), k))
    ]
    outcomes = _encode(planned, ver, input_dir, workers, progress=progress, timing=timing)
    encoded = Encoded(planned, outcomes)
    kept_back = keep_unread(ver, encoded)  # read errors keep the old records
    new = _new_shards(ver, encoded)
    # 2. the rewritten shards: their other records copied
    slots = slots_of(ver, new.infos)
    # 3. final names: links for the kept shards, renames for the others
    placed = place(ver, slots.by_split)
    # 4. the catalog of the new version, then its dataset.json
    written = write_catalog(ver, new.rows, slots.by_split, placed, kept_back)
    report = report_of(ver, encoded, new, slots, placed, written, timing)
    return _Built(placed.files, written.metadata, report, ver.warnings)


def _new_shards(ver: NewVersion, encoded: Encoded) -> NewShards:
    """The new shards of each split re-cut after the encoder's skips, with their catalog rows; a
    split left with no record gets the shards of no record a fresh convert writes."""
    settings, layout, work = ver.settings, ver.layout, ver.work
    new_rows = Catalog(has_digests=settings.digests)
    new_infos: dict[str, list[ShardInfo]] = {}
    for s in layout.new_counts:
        mine = [(sh, o) for sh, o in zip(encoded.planned, encoded.outcomes) if sh.split == s]
        if not mine:
            continue
        infos = writer.rebalance(work, [o.info for _, o in mine], settings)
        add_split(new_rows, s, [(sh.tasks, o) for sh, o in mine], infos)
        new_infos[s] = [i for i in infos if i.records]
        if settings.index and any(i.records == 1 for i in new_infos[s]) and sum(i.records for i in infos) > 0:
            ver.warn(
                f"{s}: a new shard holds one record (one new image), so its index is a single line, which the "
                "`tfrecord` package (PyTorch) cannot read (its issue #9); `img2tfrecord compact` folds it in"
            )
        for i in infos:
            if not i.records:
                fs.remove(fs.join(work, i.file))
                if i.index:
                    fs.remove(fs.join(work, i.index))
    for s, k in layout.empty.items():
        if not new_infos.get(s):  # every image of the split skipped or dropped: convert's shards of no record
            new_infos[s] = [_empty_shard(work, shard_name(s, j, k), settings) for j in range(k)]
    return NewShards(new_rows, new_infos)


def _empty_shard(work: str, name: str, settings: ShardSettings) -> ShardInfo:
    """A shard of no record, made by the writer convert's empty shards come from (gzip's is 20 bytes)."""
    return writer.ShardWriter(work, name, settings.compression, settings.index, checksum=settings.checksum).close(
        settings.fsync
    )


def _cut(view: TaskView, k: int) -> list[TaskView]:
    from img2tfrecord.conversion.plan.job import shard_bounds

    return [view[a:b] for a, b in shard_bounds(len(view), k)]


def _encode(
    planned: list[PlannedShard],
    ver: NewVersion,
    input_dir: str,
    workers: int | None,
    *,
    progress: Callable[[int, int, int], None] | None,
    timing: Timing,
) -> list[writer.ShardOutcome]:
    """Run the local engine over the new shards (in `ver.work`), journaled in the workspace for --resume
    with the rewritten shards to come (which `_build` journals as it copies them)."""
    from img2tfrecord.conversion.versions.resume import journal, rewrite_key

    ws, changes, rec, layout, settings = ver.ws, ver.changes, ver.rec, ver.layout, ver.settings
    work, emit, run = ver.work, ver.emit, ver.run

    rewrites = {REWRITE + e["file"]: rewrite_key(e, keep) for v in layout.rewritten.values() for e, keep in v}
    if not planned and not rewrites:
        return []
    table = planned[0].tasks.table if planned and isinstance(planned[0].tasks, TaskView) else None
    plan = Plan(
        input_dir=input_dir,
        output_dir=ver.output_dir,
        classes=list(table.classes) if table is not None else list(changes.classes),
        label_offset=rec.made.label_offset,
        split_names=list(dict.fromkeys(sh.split for sh in planned)),
        shards=planned,
        settings=settings,
        options=rec.options | {"update_of": manifest_digest(rec.text)},  # the journal's fingerprint
        drop=changes.drop if settings.dedupe == "drop" else None,
    )
    log = journal(ws, plan, work, run, emit, rewrites)
    timing.reused = frozenset(run.reused)
    if not planned:
        return []
    from img2tfrecord.conversion.write.engines.local import LocalEngine

    return LocalEngine(log, timing, workers, progress).run(plan, work, settings, emit)


def _settings_of(rec: Recorded) -> ShardSettings:
    return recorded_settings(rec.made, fsync=False, strict=False)


def _summary(
    input_dir: str,
    output_dir: str,
    rec: Recorded,
    changes: Changes,
    layout: Layout,
    timing: Timing,
    dry_run: bool,
) -> dict[str, Any]:
    """What changed and what the update writes (or wrote): the dry run's report and the run's summary."""
    version = int(rec.manifest.get("version") or 1)
    out: dict[str, Any] = {
        "input": input_dir,
        "output": output_dir,
        "dry_run": dry_run,
        "up_to_date": changes.nothing,
        "version": version if changes.nothing or dry_run else version + 1,
        "parent_version": version,
        **changes.summary(),
        "shards": {
            s: {
                "kept": len(layout.kept.get(s, [])),
                "rewritten": len(layout.rewritten.get(s, [])),
                "removed": len(layout.emptied.get(s, [])),
                "new": layout.new_counts.get(s, 0),
            }
            for s in dict.fromkeys([*layout.kept, *layout.new_counts])
        },
        "warnings": list(changes.found.warnings),
        "elapsed_seconds": round(time.perf_counter() - timing.start, 3),
    }
    out["bytes_needed"] = needed(changes, layout, _settings_of(rec))
    if rec.made.dedupe == "drop":  # versions.dedupe's decisions
        restored = sum(sc.counts.get("restored", 0) for sc in changes.splits.values())
        out["dedupe"] = {"dropped": len(changes.drop), "displaced": len(changes.demoted), "restored": restored}
    out["shards_to_write"] = sum(v["new"] for v in out["shards"].values())
    out["shards_to_rewrite"] = sum(v["rewritten"] for v in out["shards"].values())
    return out
