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

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from img2tfrecord import cstderr, fs
from img2tfrecord.conversion.events import EventSink, Timing, worded
from img2tfrecord.conversion.plan.job import Plan, PlannedShard, check_paths, one_record_warning, refuse_walk_skips
from img2tfrecord.conversion.plan.metadata import Metadata
from img2tfrecord.conversion.plan.options import ShardSettings
from img2tfrecord.conversion.plan.table import TaskView
from img2tfrecord.conversion.versions.changes import Changes, diff, walk
from img2tfrecord.conversion.versions.faults import keep_records, kept_back_warning, recorded_walk_skips, unread_paths
from img2tfrecord.conversion.versions.guard import Limit, parse_limit, refusal
from img2tfrecord.conversion.versions.layout import Layout, layout_of, margin, needed
from img2tfrecord.conversion.versions.manifest import history, manifest_of, new_catalog
from img2tfrecord.conversion.versions.options import recorded_metadata, recorded_settings, refuse_other_options
from img2tfrecord.conversion.versions.recorded import Recorded, read_recorded
from img2tfrecord.conversion.versions.resume import (
    ResumeState,
    check_unfinished,
    clear_build,
    keep_finished,
    link_or_move,
)
from img2tfrecord.conversion.write import shards as writer
from img2tfrecord.conversion.write.catalog import add_split
from img2tfrecord.conversion.write.publish import reuse
from img2tfrecord.conversion.write.shards import ShardInfo
from img2tfrecord.conversion.write.workspace import Workspace
from img2tfrecord.errors import DataError, Interrupted, UnusableImages, UsageError, option, plural, wording
from img2tfrecord.format import catalog as catalog_file
from img2tfrecord.format import tfds as tfds_metadata
from img2tfrecord.format.catalog import CATALOG_NAME, Catalog
from img2tfrecord.format.manifest import (
    LABELS_NAME,
    MANIFEST_NAME,
    created_stamp,
    labels_text,
    manifest_digest,
    manifest_text,
)
from img2tfrecord.format.naming import shard_name

# The extension modules update imports: loaded before the record writer starts loading in a thread
# (`write.preloading`): the JPEG decoder, the lock's fcntl, the local engine's process pool
# (multiprocessing). numpy is in already: the catalog's decode imports it.
_EXTENSIONS = ("simplejpeg", "fcntl", "img2tfrecord.conversion.write.engines.local")
NEW_DIR = ".update-new"  # inside the build folder: new and rewritten shards under provisional names
REWRITE = "rewrite-"  # the provisional name of a rewritten shard: REWRITE + its old name


@dataclass
class _Slot:
    """One shard of the new version, before it gets its final name."""

    source: str  # the old shard (linked), or the file in NEW_DIR (new or rewritten)
    info: dict[str, Any]  # its dataset.json entry (file and index names set at the end)
    linked: bool
    old: str = ""  # the old shard it keeps records of (kept or rewritten)
    provisional: str = ""  # its name in NEW_DIR (a new shard)
    renumber: dict[tuple[str, int], int] = field(default_factory=dict)  # (old shard, record) -> record


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
    options |= {k: os.fspath(options[k]) for k in ("labels",) if isinstance(options.get(k), os.PathLike)}
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
        rec.options | {"shard_request": rec.manifest.get("shard_request")}, options, input_dir, output_dir, file_list
    )
    settings = recorded_settings(rec.options, fsync=fsync, strict=strict)
    meta = recorded_metadata(rec.manifest, input_dir, output_dir)
    if dry_run:
        changes = _changes(input_dir, rec, file_list, check_content, emit, meta)
        summary = _summary(input_dir, output_dir, rec, changes, layout_of(changes, rec, settings), timing, dry_run=True)
        why = refusal(changes.removed_records, _records(rec), limit, input_dir, output_dir)
        summary["refused"] = None if why is None else wording(why)  # rendered for who asked, as an error is
        return summary
    # The record writer loads in a thread while the input is walked and diffed (under the lock).
    # Started only once the changes are known, it would overlap nothing: starting a thread waits for
    # the load (glibc's loader lock), so the engine's threads would wait too (+1% update measured
    # 0.93 -> 1.36 s). The price: an update with nothing to do waits for it (0.6 -> 0.9 s, 384 MB peak).
    with writer.preloading(output_dir, first=_EXTENSIONS):
        return _apply(
            input_dir,
            output_dir,
            rec,
            settings,
            check_content,
            resume,
            workers,
            file_list,
            limit,
            emit,
            progress,
            timing,
        )


def _apply(
    input_dir: str,
    output_dir: str,
    rec: Recorded,
    settings: ShardSettings,
    check_content: bool,
    resume: bool,
    workers: int | None,
    file_list: str | None,
    limit: Limit,
    emit: EventSink,
    progress: Callable[[int, int, int], None] | None,
    timing: Timing,
) -> dict[str, Any]:
    """`update` under OUTPUT's lock: the changes, the new version built and published."""
    from img2tfrecord.conversion.write import publish
    from img2tfrecord.conversion.write.workspace import workspace

    ws = workspace(output_dir)
    lock = publish.OutputLock(ws)
    lock.acquire()
    try:
        publish.recover(ws)
        check_unfinished(ws, resume)
        rec = read_recorded(output_dir, rec, input_dir)  # as it is now that we hold the lock
        meta = recorded_metadata(rec.manifest, input_dir, output_dir)
        changes = _changes(input_dir, rec, file_list, check_content, emit, meta)
        refuse_walk_skips(changes.found.skipped, settings.strict)
        if why := refusal(changes.removed_records, _records(rec), limit, input_dir, output_dir):
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
            built = _build(
                ws, input_dir, output_dir, rec, changes, layout, settings, workers, emit, progress, timing, run
            )
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
    meta: Metadata | None = None,
) -> Changes:
    if check_content and not rec.catalog.has_digests:
        raise UsageError(
            f"{option('check_content', True)} compares content digests, which a dataset converted with "
            f"{option('dedupe', 'off')} lacks"
        )
    found = walk(input_dir, rec.options, rec.classes, file_list, rec.catalog, meta)
    for w in found.warnings:
        emit("warning", w)
    for skip in found.skipped:
        emit("skipped", f"{skip['path']}: {skip['reason']}")
    changes = diff(found, rec.catalog, rec.classes, check_content)
    changes.walk_skips_changed = recorded_walk_skips(rec.manifest, rec.catalog) != found.skipped
    if rec.options.get("dedupe") == "drop":  # the copy a fresh convert keeps, across versions
        from img2tfrecord.conversion.versions.dedupe import resolve

        before = (rec.manifest.get("duplicates") or {}).get("dropped") or []
        resolve(changes, int(rec.options.get("seed") or 0), {d["path"]: d["duplicate_of"] for d in before})
    return changes


@dataclass
class _Built:
    files: list[str]
    metadata: dict[str, str]
    report: dict[str, Any]
    warnings: list[str]


def _build(
    ws: Workspace,
    input_dir: str,
    output_dir: str,
    rec: Recorded,
    changes: Changes,
    layout: Layout,
    settings: ShardSettings,
    workers: int | None,
    emit: EventSink,
    progress: Callable[[int, int, int], None] | None,
    timing: Timing,
    run: ResumeState,
) -> _Built:
    """Write the new version into `ws.build`: new shards, rewritten shards, links, catalog, metadata."""
    build = ws.build
    version = int(rec.manifest.get("version") or 1) + 1
    work = fs.join(build, NEW_DIR)
    fs.makedirs(work)
    warnings: list[str] = []
    table = next(iter(changes.found.splits.values())).table
    # 1. the new shards, encoded by the local engine (the same workers and writer as convert)
    planned = [
        PlannedShard(s, j, k, part)
        for s, k in layout.new_counts.items()
        if k
        for j, part in enumerate(_cut(TaskView(table, changes.splits[s].encode), k))
    ]
    outcomes = _encode(
        planned, ws, input_dir, output_dir, changes, rec, layout, settings, work, workers, emit, progress, timing, run
    )
    if settings.strict and (
        unusable := [skip | {"split": sh.split} for sh, o in zip(planned, outcomes) for skip in o.skipped]
    ):
        raise UnusableImages(unusable)  # every new image was tried: all the unusable ones are named
    if kept_back := keep_records(changes, unread_paths(planned, outcomes)):  # read errors keep the old records
        again = layout_of(changes, rec, settings)  # the same new shards; fewer old ones rewritten
        layout.kept, layout.rewritten, layout.emptied, layout.empty = (
            again.kept,
            again.rewritten,
            again.emptied,
            again.empty,
        )
        warnings.append(kept_back_warning(len(kept_back), version - 1))
        emit("warning", warnings[-1])
    new_rows = Catalog(has_digests=settings.digests)
    new_infos: dict[str, list[ShardInfo]] = {}
    for s in layout.new_counts:
        mine = [(sh, o) for sh, o in zip(planned, outcomes) if sh.split == s]
        if not mine:
            continue
        infos = writer.rebalance(work, [o.info for _, o in mine], settings)
        add_split(new_rows, s, [(sh.tasks, o) for sh, o in mine], infos)
        new_infos[s] = [i for i in infos if i.records]
        if settings.index and any(i.records == 1 for i in new_infos[s]) and sum(i.records for i in infos) > 0:
            warnings.append(
                f"{s}: a new shard holds one record (one new image), so its index is a single line, which the "
                "`tfrecord` package (PyTorch) cannot read (its issue #9); `img2tfrecord compact` folds it in"
            )
            emit("warning", warnings[-1])
        for i in infos:
            if not i.records:
                fs.remove(fs.join(work, i.file))
                if i.index:
                    fs.remove(fs.join(work, i.index))
    for s, k in layout.empty.items():
        if not new_infos.get(s):  # every image of the split skipped or dropped: convert's shards of no record
            new_infos[s] = [_empty_shard(work, shard_name(s, j, k), settings) for j in range(k)]
    # 2. the rewritten shards: their other records copied
    rewritten_bytes = 0
    slots: dict[str, list[_Slot]] = {}
    for s in dict.fromkeys([*layout.kept, *layout.new_counts]):
        old_order = [e["file"] for e in (rec.manifest["splits"].get(s) or {}).get("shards", [])]
        by_name: dict[str, _Slot] = {}
        for entry in layout.kept.get(s, []):
            kept = {"version": 1} | entry  # a shard of a dataset made before lineage: version 1 wrote it
            by_name[entry["file"]] = _Slot(fs.join(output_dir, entry["file"]), kept, True, old=entry["file"])
        for entry, keep in layout.rewritten.get(s, []):
            name = REWRITE + entry["file"]
            reused = run.journal.done.get(name) if run.journal is not None else None
            if reused is not None:  # --resume: rewritten before the interruption, checked
                info = reused.info
            else:
                info = writer.copy_records(fs.join(output_dir, entry["file"]), keep, work, name, settings)
                if run.journal is not None:
                    run.journal.record(writer.ShardOutcome(s, info))
            rewritten_bytes += info.bytes
            slot = _Slot(fs.join(work, name), info.as_json() | {"version": version}, False, old=entry["file"])
            slot.renumber = {(entry["file"], n): j for j, n in enumerate(keep)}
            by_name[entry["file"]] = slot
        slots[s] = [by_name[n] for n in old_order if n in by_name]
        for info in new_infos.get(s, []):
            entry = info.as_json() | {"version": version}
            slots[s].append(_Slot(fs.join(work, info.file), entry, False, provisional=info.file))
    # 3. final names: links for the kept shards, renames for the others
    files: list[str] = []
    final_of: dict[str, str] = {}  # old shard name -> final name
    final_new: dict[str, str] = {}  # provisional name of a new shard -> final name
    split_info: dict[str, dict[str, Any]] = {}
    linked = linked_bytes = copied = 0
    for s, ordered in slots.items():
        if not ordered:
            continue
        for j, slot in enumerate(ordered):
            final = shard_name(s, j, len(ordered))
            index_src = slot.info.get("index")
            if slot.old:
                final_of[slot.old] = final
            else:
                final_new[slot.provisional] = final
            dst = fs.join(build, final)
            if slot.linked:  # publish.reuse: a hard link (a server-side copy on object stores)
                copied += reuse(ws, [slot.old] + ([index_src] if index_src else []), [final, final + ".idx"])
                linked += 1
                linked_bytes += int(slot.info.get("bytes") or 0)
            else:  # linked, not moved: a journaled new shard stays where --resume finds it
                copied += link_or_move(slot.source, dst)
                if settings.index:
                    copied += link_or_move(slot.source + ".idx", dst + ".idx")
            slot.info["file"] = final
            if settings.index or index_src:
                slot.info["index"] = final + ".idx"
            files.append(final)
            if "index" in slot.info:
                files.append(slot.info["index"])
        split_info[s] = {"shards": [slot.info for slot in ordered]}
    if copied:
        emit("note", f"{output_dir}'s file system has no hard links: {plural(copied, 'file')} copied instead")
    if fs.is_remote(work):
        fs.rmtree(work)  # locally, `publish` removes it with what else is not part of the dataset
    # 4. the catalog of the new version
    renumber = {key: n for mine in slots.values() for slot in mine for key, n in slot.renumber.items()}
    cat = new_catalog(rec.catalog, changes, new_rows, renumber, final_of, final_new, settings, kept_back)
    catalog_bytes = catalog_file.encode(cat)
    fs.write_bytes(fs.join(build, CATALOG_NAME), catalog_bytes)
    files.append(CATALOG_NAME)
    manifest = manifest_of(
        rec,
        cat,
        changes.classes,
        split_info,
        settings,
        options=rec.options | {"shards": {s: len(sp["shards"]) for s, sp in split_info.items()}},
        ignored_files=changes.found.ignored_files,
        excluded_files=changes.found.excluded_files,
        walk_skipped=list(changes.found.skipped),
        kept_copy=changes.kept_copy,
        warnings=warnings,
        emit=emit,
        catalog_bytes=catalog_bytes,
    )
    manifest["history"] = history(rec.manifest, manifest, changes.summary())
    for s, sp in manifest["splits"].items():
        if settings.index and sp["records"] == 1:
            warnings.append(one_record_warning(s))
            emit("warning", warnings[-1])
    metadata = tfds_metadata.files(manifest) | {
        LABELS_NAME: labels_text(manifest["classes"]),
        MANIFEST_NAME: manifest_text(manifest),
    }
    new_bytes = sum(i.bytes for infos in new_infos.values() for i in infos)
    written = new_bytes + rewritten_bytes + fs.getsize(fs.join(build, CATALOG_NAME))
    written += sum(len(t.encode("utf-8")) for t in metadata.values())
    report = {
        "version": version,
        "shards_new": sum(len(v) for v in new_infos.values()),
        "shards_rewritten": sum(len(v) for v in layout.rewritten.values()),
        "shards_linked": linked,
        "files_copied": copied,  # not linked: the file system has no hard links
        "shards_removed": sum(len(v) for v in layout.emptied.values()),
        "bytes_written": written,
        "bytes_new_shards": new_bytes,
        "bytes_rewritten_shards": rewritten_bytes,
        "bytes_linked": linked_bytes,
        "converted_images": sum(o.images for o in outcomes),
        # this run's: the images it tried and could not use (and folders the walk could not list); the
        # ones earlier versions skipped and that are unchanged are not tried again: `still_skipped`
        "skipped": list(changes.found.skipped)
        + [skip | {"split": sh.split} for sh, o in zip(planned, outcomes) for skip in o.skipped],
        "still_skipped": sum(sc.counts.get("still_skipped", 0) for sc in changes.splits.values()),
        "records": sum(sp["records"] for sp in manifest["splits"].values()),
        "duplicates": {k: v for k, v in manifest["duplicates"].items() if k != "groups"},  # as convert's summary
        "elapsed_seconds": round(time.perf_counter() - timing.start, 3),
    }
    return _Built(files, metadata, report, warnings)


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
    ws: Workspace,
    input_dir: str,
    output_dir: str,
    changes: Changes,
    rec: Recorded,
    layout: Layout,
    settings: ShardSettings,
    work: str,
    workers: int | None,
    emit: EventSink,
    progress: Callable[[int, int, int], None] | None,
    timing: Timing,
    run: ResumeState,
) -> list[writer.ShardOutcome]:
    """Run the local engine over the new shards (in `work`), journaled in the workspace for --resume
    with the rewritten shards to come (which `_build` journals as it copies them)."""
    from img2tfrecord.conversion.versions.resume import journal, rewrite_key

    rewrites = {REWRITE + e["file"]: rewrite_key(e, keep) for v in layout.rewritten.values() for e, keep in v}
    if not planned and not rewrites:
        return []
    table = planned[0].tasks.table if planned and isinstance(planned[0].tasks, TaskView) else None
    plan = Plan(
        input_dir=input_dir,
        output_dir=output_dir,
        classes=list(table.classes) if table is not None else list(changes.classes),
        label_offset=int(rec.options.get("label_offset") or 0),
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
    return recorded_settings(rec.options, fsync=False, strict=False)


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
    if rec.options.get("dedupe") == "drop":  # versions.dedupe's decisions
        restored = sum(sc.counts.get("restored", 0) for sc in changes.splits.values())
        out["dedupe"] = {"dropped": len(changes.drop), "displaced": len(changes.demoted), "restored": restored}
    out["shards_to_write"] = sum(v["new"] for v in out["shards"].values())
    out["shards_to_rewrite"] = sum(v["rewritten"] for v in out["shards"].values())
    return out
