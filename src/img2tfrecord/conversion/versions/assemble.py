"""update's new version assembled in the build folder, step by step after the new shards are encoded
(`update._build`): the unreadable images' old records kept back, the rewritten shards copied, every
shard put under its final name (links for the kept ones), the catalog and dataset.json, and the
figures of the summary. Its own module so that update.py stays a readable length.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from img2tfrecord import fs
from img2tfrecord.conversion.events import EventSink, Timing
from img2tfrecord.conversion.plan.job import PlannedShard, one_record_warning
from img2tfrecord.conversion.plan.options import ShardSettings
from img2tfrecord.conversion.versions.changes import Changes
from img2tfrecord.conversion.versions.faults import keep_records, kept_back_warning, unread_paths
from img2tfrecord.conversion.versions.layout import Layout, layout_of
from img2tfrecord.conversion.versions.manifest import history, manifest_of, new_catalog, text_of
from img2tfrecord.conversion.versions.recorded import Recorded
from img2tfrecord.conversion.versions.resume import ResumeState, link_or_move
from img2tfrecord.conversion.write import shards as writer
from img2tfrecord.conversion.write.finalize import absent_classes, absent_warnings
from img2tfrecord.conversion.write.publish import reuse
from img2tfrecord.conversion.write.shards import ShardInfo
from img2tfrecord.conversion.write.workspace import Workspace
from img2tfrecord.errors import UnusableImages, plural
from img2tfrecord.format import catalog as catalog_file
from img2tfrecord.format import tfds as tfds_metadata
from img2tfrecord.format.catalog import CATALOG_NAME, Catalog
from img2tfrecord.format.manifest import MANIFEST_NAME, label_files, manifest_text
from img2tfrecord.format.naming import shard_name

REWRITE = "rewrite-"  # the provisional name of a rewritten shard: REWRITE + its old name


@dataclass
class NewVersion:
    """One update's new version as it is built: what every step reads, and the warnings they add
    (the same list goes to dataset.json and the summary)."""

    ws: Workspace
    output_dir: str
    rec: Recorded
    changes: Changes
    layout: Layout
    settings: ShardSettings
    emit: EventSink
    run: ResumeState
    work: str  # the folder of the new and rewritten shards under provisional names (update.NEW_DIR)
    version: int  # the new version's number
    warnings: list[str] = field(default_factory=list)

    def warn(self, text: str) -> None:
        """A warning for dataset.json and the summary, shown as it is found."""
        self.warnings.append(text)
        self.emit("warning", text)


class Encoded(NamedTuple):
    """The new shards as planned and as the local engine wrote them, in the same order."""

    planned: list[PlannedShard]
    outcomes: list[writer.ShardOutcome]

    @property
    def skipped(self) -> list[dict[str, str]]:
        """The new images the encoder could not use, each with the split it was planned in."""
        return [skip | {"split": sh.split} for sh, o in zip(self.planned, self.outcomes) for skip in o.skipped]


class NewShards(NamedTuple):
    """The new shards after their re-cut: their catalog rows and, per split, their entries."""

    rows: Catalog
    infos: dict[str, list[ShardInfo]]


@dataclass
class Slot:
    """One shard of the new version, before it gets its final name."""

    source: str  # the old shard (linked), or the file in NEW_DIR (new or rewritten)
    info: dict[str, Any]  # its dataset.json entry (file and index names set at the end)
    linked: bool
    old: str = ""  # the old shard it keeps records of (kept or rewritten)
    provisional: str = ""  # its name in NEW_DIR (a new shard)
    renumber: dict[tuple[str, int], int] = field(default_factory=dict)  # (old shard, record) -> record


class Slots(NamedTuple):
    """Each split's shards in the new version's order, and the bytes the rewritten ones took."""

    by_split: dict[str, list[Slot]]
    rewritten_bytes: int


class Placed(NamedTuple):
    """The shards under their final names: the files to publish, the names the new catalog maps,
    dataset.json's splits, and what linking the kept shards did."""

    files: list[str]
    final_of: dict[str, str]  # old shard name -> final name
    final_new: dict[str, str]  # provisional name of a new shard -> final name
    split_info: dict[str, dict[str, Any]]
    linked: int
    linked_bytes: int
    copied: int  # files copied because the file system has no hard links


class Written(NamedTuple):
    """The new version's dataset.json and the metadata files published with it (dataset.json last)."""

    manifest: dict[str, Any]
    metadata: dict[str, str]


def keep_unread(ver: NewVersion, encoded: Encoded) -> set[bytes]:
    """After encoding: --strict refuses the new images that were not usable; otherwise an image that
    could not be read now keeps its old record (`versions.faults`), so the old shards are laid out
    again. Returns the paths whose records are kept back."""
    if ver.settings.strict and (unusable := encoded.skipped):
        raise UnusableImages(unusable)  # every new image was tried: all the unusable ones are named
    if kept_back := keep_records(ver.changes, unread_paths(encoded.planned, encoded.outcomes)):
        again = layout_of(ver.changes, ver.rec, ver.settings)  # the same new shards; fewer old ones rewritten
        layout = ver.layout
        layout.kept, layout.rewritten, layout.emptied, layout.empty = (
            again.kept,
            again.rewritten,
            again.emptied,
            again.empty,
        )
        ver.warn(kept_back_warning(len(kept_back), ver.version - 1))
    return kept_back


def slots_of(ver: NewVersion, new_infos: dict[str, list[ShardInfo]]) -> Slots:
    """Each split's shards in the new version's order: the kept and rewritten old ones in their old
    order (a rewritten one copied now, or found in the journal on --resume), then the new ones."""
    layout, run, version = ver.layout, ver.run, ver.version
    rewritten_bytes = 0
    slots: dict[str, list[Slot]] = {}
    for s in dict.fromkeys([*layout.kept, *layout.new_counts]):
        old_order = [e["file"] for e in (ver.rec.manifest["splits"].get(s) or {}).get("shards", [])]
        by_name: dict[str, Slot] = {}
        for entry in layout.kept.get(s, []):
            kept = {"version": 1} | entry  # a shard of a dataset made before lineage: version 1 wrote it
            by_name[entry["file"]] = Slot(fs.join(ver.output_dir, entry["file"]), kept, True, old=entry["file"])
        for entry, keep in layout.rewritten.get(s, []):
            name = REWRITE + entry["file"]
            reused = run.journal.done.get(name) if run.journal is not None else None
            if reused is not None:  # --resume: rewritten before the interruption, checked
                info = reused.info
            else:
                info = writer.copy_records(fs.join(ver.output_dir, entry["file"]), keep, ver.work, name, ver.settings)
                if run.journal is not None:
                    run.journal.record(writer.ShardOutcome(s, info))
            rewritten_bytes += info.bytes
            slot = Slot(fs.join(ver.work, name), info.as_json() | {"version": version}, False, old=entry["file"])
            slot.renumber = {(entry["file"], n): j for j, n in enumerate(keep)}
            by_name[entry["file"]] = slot
        slots[s] = [by_name[n] for n in old_order if n in by_name]
        for info in new_infos.get(s, []):
            entry = info.as_json() | {"version": version}
            slots[s].append(Slot(fs.join(ver.work, info.file), entry, False, provisional=info.file))
    return Slots(slots, rewritten_bytes)


def place(ver: NewVersion, slots: dict[str, list[Slot]]) -> Placed:
    """Give every shard its final name in the build folder: a link for a kept one (its bytes neither
    read nor written), a link or a rename for a new or rewritten one."""
    ws, settings = ver.ws, ver.settings
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
            dst = fs.join(ws.build, final)
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
        ver.emit("note", f"{ver.output_dir}'s file system has no hard links: {plural(copied, 'file')} copied instead")
    if fs.is_remote(ver.work):
        fs.rmtree(ver.work)  # locally, `publish` removes it with what else is not part of the dataset
    return Placed(files, final_of, final_new, split_info, linked, linked_bytes, copied)


def write_catalog(
    ver: NewVersion, new_rows: Catalog, slots: dict[str, list[Slot]], placed: Placed, kept_back: set[bytes]
) -> Written:
    """Write the new version's catalog into the build folder (added to `placed.files`) and make its
    dataset.json and metadata files from it, which the publish switch writes."""
    rec, changes, settings = ver.rec, ver.changes, ver.settings
    renumber = {key: n for mine in slots.values() for slot in mine for key, n in slot.renumber.items()}
    final_of, final_new = placed.final_of, placed.final_new
    cat = new_catalog(rec.catalog, changes, new_rows, renumber, final_of, final_new, settings, kept_back)
    catalog_bytes = catalog_file.encode(cat)
    fs.write_bytes(fs.join(ver.ws.build, CATALOG_NAME), catalog_bytes)
    placed.files.append(CATALOG_NAME)
    split_info = placed.split_info
    metadata = rec.manifest.get("metadata")
    enrichers = next(iter(changes.found.splits.values())).table.enrichers
    for e in enrichers if metadata else ():  # each one's part over the records published (a detection dataset's boxes)
        rels = (text_of(cat.rels[r]) for r in itertools.compress(range(len(cat)), cat.converted()))
        metadata = e.published(metadata, rels)
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
        warnings=ver.warnings,
        emit=ver.emit,
        catalog_bytes=catalog_bytes,
        metadata=metadata,
    )
    manifest["history"] = history(rec.manifest, manifest, changes.summary())
    for s, sp in manifest["splits"].items():
        if settings.index and sp["records"] == 1:
            ver.warn(one_record_warning(s))
    for w in absent_warnings(manifest["splits"], [*changes.found.warnings, *ver.warnings]):
        ver.warn(w)  # a class the new version leaves out of a split, as convert says it
    metadata = tfds_metadata.files(manifest) | {
        **label_files(manifest),
        MANIFEST_NAME: manifest_text(manifest),
    }
    return Written(manifest, metadata)


def report_of(
    ver: NewVersion, encoded: Encoded, new: NewShards, slots: Slots, placed: Placed, written: Written, timing: Timing
) -> dict[str, Any]:
    """What the update did, for its summary: shards and bytes written, linked and copied, images."""
    changes, layout, manifest = ver.changes, ver.layout, written.manifest
    new_bytes = sum(i.bytes for infos in new.infos.values() for i in infos)
    written_bytes = new_bytes + slots.rewritten_bytes + fs.getsize(fs.join(ver.ws.build, CATALOG_NAME))
    written_bytes += sum(len(t.encode("utf-8")) for t in written.metadata.values())
    return {
        "version": ver.version,
        "shards_new": sum(len(v) for v in new.infos.values()),
        "shards_rewritten": sum(len(v) for v in layout.rewritten.values()),
        "shards_linked": placed.linked,
        "files_copied": placed.copied,  # not linked: the file system has no hard links
        "shards_removed": sum(len(v) for v in layout.emptied.values()),
        "bytes_written": written_bytes,
        "bytes_new_shards": new_bytes,
        "bytes_rewritten_shards": slots.rewritten_bytes,
        "bytes_linked": placed.linked_bytes,
        "converted_images": sum(o.images for o in encoded.outcomes),
        # this run's: the images it tried and could not use (and folders the walk could not list); the
        # ones earlier versions skipped and that are unchanged are not tried again: `still_skipped`
        "skipped": list(changes.found.skipped) + encoded.skipped,
        "still_skipped": sum(sc.counts.get("still_skipped", 0) for sc in changes.splits.values()),
        "records": sum(sp["records"] for sp in manifest["splits"].values()),
        "absent_classes": absent_classes(manifest["splits"]),  # as convert's summary
        "duplicates": {k: v for k, v in manifest["duplicates"].items() if k != "groups"},  # as convert's summary
        "elapsed_seconds": round(time.perf_counter() - timing.start, 3),
    }
