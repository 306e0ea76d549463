"""After the engine: re-cut shards after skips, build the manifest, publish, and the run's summary."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from img2tfrecord import fs
from img2tfrecord.conversion.events import EventSink, Timing
from img2tfrecord.conversion.plan.job import Plan, one_record_warning
from img2tfrecord.conversion.plan.table import class_counts
from img2tfrecord.conversion.write import dedupe
from img2tfrecord.conversion.write import shards as writer
from img2tfrecord.conversion.write.catalog import add_split, record_lengths
from img2tfrecord.conversion.write.dedupe import DIGEST_HEX
from img2tfrecord.conversion.write.publish import Published, publish
from img2tfrecord.conversion.write.shards import ShardOutcome
from img2tfrecord.conversion.write.workspace import Workspace
from img2tfrecord.errors import UnusableImages, option, plural, wording
from img2tfrecord.format import catalog as catalog_file
from img2tfrecord.format import tfds as tfds_metadata
from img2tfrecord.format.catalog import CATALOG_NAME, Catalog
from img2tfrecord.format.manifest import (
    MANIFEST_NAME,
    build_manifest,
    label_files,
    manifest_text,
)
from img2tfrecord.format.schema import utf8_text


def _duplicates(plan: Plan, outcomes: list[ShardOutcome]) -> dict[str, Any]:
    """The duplicate report: digests seen twice found from the shards' digest columns (16 bytes a
    record, sorted), then paths and classes looked up only for the records that have one."""
    dropped = [d for o in outcomes for d in o.dropped]
    twice = dedupe.duplicated([o.digests for o in outcomes], [d["digest"] for d in dropped])
    return dedupe.report(plan.settings.dedupe, written(plan, outcomes, twice), dropped)


def written(plan: Plan, outcomes: list[ShardOutcome], only: set[str]) -> Iterator[tuple[str, str, str, str]]:
    """(digest, path, split, class) of each record whose digest is in `only`, in plan order.

    A shard's records are its planned tasks minus the skipped and dropped ones, in order; shards
    with none of `only` are passed over without making their tasks."""
    if not only:  # nearly every run: no duplicates, nothing to look up
        return
    for shard, o in zip(plan.shards, outcomes):
        column = o.digests
        if not column or not any(column[i : i + DIGEST_HEX] in only for i in range(0, len(column), DIGEST_HEX)):
            continue
        left_out = {s["path"] for s in o.skipped} | {d["path"] for d in o.dropped}
        records = (t for t in shard.tasks if utf8_text(t.rel) not in left_out)
        for i, task in zip(range(0, len(column), DIGEST_HEX), records):
            digest = column[i : i + DIGEST_HEX]
            if digest in only:
                yield digest, utf8_text(task.rel), o.split, utf8_text(task.text)


_COUNTED = ("formats", "transcoded", "depths", "reduced")  # the shards' counts, summed over the run


@dataclass
class _Merged:
    """The run's shard outcomes merged: what the catalog, dataset.json and the summary are made of,
    gathered split by split before anything is published."""

    classes: list[str]
    skipped: list[dict[str, str]]  # the walk's, then the images'
    warnings: list[str]
    catalog: Catalog
    split_info: dict[str, dict[str, Any]] = field(default_factory=dict)  # dataset.json's splits
    counts: dict[str, dict[str, int]] = field(default_factory=lambda: {k: {} for k in _COUNTED})
    duplicates: dict[str, Any] = field(default_factory=lambda: {"mode": "off"})  # the report, once the splits are in
    masks: dict[str, dict[str, dict[str, int]]] = field(default_factory=dict)  # --masks-dir: per split, class counts

    def warn(self, text: str, emit: EventSink) -> None:
        """A warning for the summary, shown as it is found."""
        self.warnings.append(text)
        emit("warning", text)


def finalize(
    plan: Plan,
    ws: Workspace,
    outcomes: list[ShardOutcome],
    timing: Timing,
    emit: EventSink,
    engine: str = "local",
    state: Published | None = None,
) -> dict[str, Any]:
    """Merge shard outcomes, rebalance after skips, publish (`publish.publish`: raises OSError), and build the summary."""
    skipped = plan.skipped + [s for o in outcomes for s in o.skipped]  # the walk's, then the images'
    if plan.settings.strict and skipped:  # every image was tried: all the unusable ones are named
        raise UnusableImages(skipped)
    run = _Merged(
        classes=[utf8_text(c) for c in plan.classes],
        skipped=skipped,
        warnings=list(plan.warnings),
        catalog=Catalog(has_digests=plan.settings.digests),
    )
    for s in plan.split_names:
        _merge_split(plan, ws.build, outcomes, s, run, emit)
    _warn_absent(run, emit)
    if plan.settings.dedupe != "off":
        run.duplicates = _duplicates(plan, outcomes)
    _warn_merged(run, sum(o.orientation_ignored for o in outcomes), emit)
    t_end = time.perf_counter()
    manifest = _publish_merged(plan, ws, run, engine, state)
    if state is not None and state.leftover:
        run.warn(state.leftover, emit)
    return _run_summary(plan, outcomes, timing, run, manifest, engine, t_end)


def _merge_split(plan: Plan, staging: str, outcomes: list[ShardOutcome], s: str, run: _Merged, emit: EventSink) -> None:
    """One split's shards re-cut after its skips, their catalog rows, and its counts and warnings."""
    mine = [o for o in outcomes if o.split == s]
    if not mine:
        return
    infos = writer.rebalance(staging, [o.info for o in mine], plan.settings)
    planned = [(sh.tasks, o) for sh, o in zip(plan.shards, outcomes) if o.split == s]
    lengths = None
    if any(len(o.lengths) != o.info.records for o in mine):  # a journal of a version before the catalog
        lengths = record_lengths(staging, [i.file for i in infos], plan.settings.compression)
    add_split(run.catalog, s, planned, infos, lengths)
    if len(infos) < len(mine):
        run.warn(
            f"{s}: {plural(len(infos), 'shard')} instead of {len(mine)}: after the skipped images, more would "
            f"leave a shard of one record, which {option('index', True)} readers cannot handle",
            emit,
        )
    if (
        plan.settings.index
        and sum(i.records for i in infos) == 1
        and sum(len(sh.tasks) for sh in plan.shards if sh.split == s) > 1
    ):
        run.warn(one_record_warning(s), emit)  # planned for more, left with one after the skips
    class_counts = dict.fromkeys(run.classes, 0)
    for o in mine:
        for c, n in o.class_counts.items():
            class_counts[c] += n
        for key in _COUNTED:
            for k, n in getattr(o, key).items():
                run.counts[key][k] = run.counts[key].get(k, 0) + n
    if any(o.mask_pixels for o in mine):
        run.masks[s] = {key: _class_sums(getattr(o, f"mask_{key}") for o in mine) for key in ("pixels", "images")}
    run.split_info[s] = {
        "records": sum(i.records for i in infos),
        "class_counts": class_counts,
        "shards": [i.as_json() for i in infos],
    }


def absent_classes(split_info: dict[str, dict[str, Any]]) -> dict[str, list[str]]:
    """Per split that holds records, the classes it holds no image of while other splits do (the
    report flags these cells as absent)."""
    totals: dict[str, int] = {}
    for si in split_info.values():
        for c, n in si["class_counts"].items():
            totals[c] = totals.get(c, 0) + n
    out = {}
    for s, si in split_info.items():
        if si["records"] and (none := [c for c, n in si["class_counts"].items() if n == 0 and totals.get(c)]):
            out[s] = none
    return out


def _warn_absent(run: _Merged, emit: EventSink) -> None:
    """A warning per split missing a class (unless the plan's hash-split warning named it already)."""
    for w in absent_warnings(run.split_info, run.warnings):
        run.warn(w, emit)


def absent_warnings(split_info: dict[str, dict[str, Any]], said: list[str]) -> list[str]:
    """A warning per split missing a class (`absent_classes`), leaving out the classes a warning in
    `said` names already: convert's and update's words for it, the same."""
    out = []
    for s, names in absent_classes(split_info).items():
        before = [w for w in said if w.startswith(f"split {s} has no image of ")]
        names = [c for c in names if not any(repr(c) in w for w in before)]
        if names:
            shown = ", ".join(repr(c) for c in names[:5]) + (", ..." if len(names) > 5 else "")
            one = len(names) == 1
            out.append(
                f"split {s} has no image of {plural(len(names), 'class', 'classes')} ({shown}), which "
                f"{'another split holds' if len(split_info) == 2 else 'other splits hold'}: "
                f"results on {s} say nothing about {'it' if one else 'them'}"
            )
    return out


def _warn_merged(run: _Merged, orient: int, emit: EventSink) -> None:
    """The run's warnings about what it stored, after the splits' own: duplicates, fewer bits, EXIF rotations."""
    if line := dedupe.summary_line(run.duplicates):
        run.warn(line, emit)
    if run.counts["reduced"]:
        run.warn(
            "stored with fewer bits than their source: "
            + ", ".join(f"{plural(n, 'image')}: {why}" for why, n in sorted(run.counts["reduced"].items())),
            emit,
        )
    if orient:
        run.warn(
            f"{plural(orient, 'image')} {'carries' if orient == 1 else 'carry'} an EXIF rotation that {option('encoding', 'keep')} leaves to the reader "
            f"(TensorFlow's decoders ignore it); use {option('encoding', 'jpeg')} or {option('encoding', 'png')} to store them upright",
            emit,
        )


def _class_sums(counts: Iterable[dict[str, int]]) -> dict[str, int]:
    """Counts per class id (as text) summed, in the ids' order."""
    total: Counter[str] = Counter()
    for c in counts:
        total.update(c)
    return {k: total[k] for k in sorted(total, key=int)}


def _written_metadata(plan: Plan, run: _Merged) -> dict[str, Any] | None:
    """dataset.json's `metadata` over the images written: each enricher's part (a detection
    dataset's box counts) without the images the encoder skipped; a segmentation dataset's pixels
    and images of each class id per split (counted by the encoder)."""
    metadata = plan.metadata
    if not metadata:
        return metadata
    if "segmentation" in metadata:
        metadata = metadata | {"segmentation": metadata["segmentation"] | {"per_split": run.masks}}
    for e in plan.enrichers:
        metadata = e.written(metadata, run.skipped, (t for sh in plan.shards for t in sh.tasks))
    return metadata


def _publish_merged(plan: Plan, ws: Workspace, run: _Merged, engine: str, state: Published | None) -> dict[str, Any]:
    """Write the catalog, build dataset.json and publish the version (dataset.json last); return dataset.json."""
    catalog_bytes = catalog_file.encode(run.catalog)
    manifest = build_manifest(
        classes=run.classes,
        label_offset=plan.label_offset,
        options=plan.options,
        splits=run.split_info,
        skipped=run.skipped,
        transcoded=run.counts["transcoded"],
        formats=run.counts["formats"],
        depths=run.counts["depths"],
        reduced=run.counts["reduced"],
        ignored_files=plan.ignored_files,
        engine=engine,
        duplicates=run.duplicates,
        excluded_files=plan.excluded_files,
        shard_request=plan.shard_request,
        catalog=catalog_bytes,
        metadata=_written_metadata(plan, run),
    )
    files = [sh["file"] for si in run.split_info.values() for sh in si["shards"]]
    files += [sh["index"] for si in run.split_info.values() for sh in si["shards"] if "index" in sh]
    files.append(CATALOG_NAME)
    fs.write_bytes(fs.join(ws.build, CATALOG_NAME), catalog_bytes)
    metadata = tfds_metadata.files(manifest) | {
        **label_files(manifest),
        MANIFEST_NAME: manifest_text(manifest),  # last
    }
    publish(ws, files, metadata, plan.settings.fsync, state)
    return manifest


def _run_summary(
    plan: Plan,
    outcomes: list[ShardOutcome],
    timing: Timing,
    run: _Merged,
    manifest: dict[str, Any],
    engine: str,
    t_end: float,
) -> dict[str, Any]:
    """The run's summary: what it wrote, and its rates over what it converted itself."""
    split_info, skipped = run.split_info, run.skipped
    images = sum(o.images for o in outcomes)
    # what this run converted; shards reused from an interrupted run (--resume) took no time here
    converted = [o for o in outcomes if o.info.file not in timing.reused]
    # rates count the records written, not the images skipped or dropped, nor their bytes
    converted_images = sum(o.info.records for o in converted)
    converted_bytes = sum(o.converted_bytes for o in converted)
    steady_images = converted_images - (timing.images_before - timing.skipped_before)
    elapsed = max(t_end - timing.start, 1e-9)
    steady = max(t_end - (timing.steady_from or timing.start), 1e-9)
    return {
        "input": plan.input_dir,
        "output": plan.output_dir,
        "dry_run": False,
        "engine": engine,
        "classes": run.classes,
        "images": images,
        "records": sum(si["records"] for si in split_info.values()),
        "bytes": sum(sh["bytes"] for si in split_info.values() for sh in si["shards"]),
        "input_bytes": sum(o.bytes_read for o in outcomes),
        "converted_images": converted_images,
        "converted_bytes": converted_bytes,
        "reused_images": sum(o.info.records for o in outcomes) - converted_images,
        "reused_shards": len(outcomes) - len(converted),
        "skipped": skipped,  # as in dataset.json: [{"path", "split", "reason"}]
        "skipped_count": len(skipped),
        "duplicates": {
            k: v for k, v in run.duplicates.items() if k != "groups"
        },  # dataset.json's, without the list of groups
        "ignored_files": plan.ignored_files,
        "excluded_files": plan.excluded_files,
        "transcoded": manifest["transcoded"],
        "formats": manifest["formats"],
        "splits": {
            s: {"records": si["records"], "shards": len(si["shards"]), "bytes": sum(sh["bytes"] for sh in si["shards"])}
            for s, si in split_info.items()
        },
        "warnings": [wording(w) for w in run.warnings],  # for the caller's audience (errors.option)
        "absent_classes": absent_classes(split_info),  # split -> classes it has no image of, others have
        "workers": timing.workers,
        "elapsed_seconds": round(elapsed, 3),
        "images_per_second": round(converted_images / elapsed, 1),
        "mb_per_second": round(converted_bytes / 1e6 / elapsed, 2),
        "steady_seconds": round(steady, 3),
        "steady_images_per_second": round(steady_images / steady, 1),
        "steady_mb_per_second": round((converted_bytes - timing.bytes_before) / 1e6 / steady, 2),
        "planned_seconds": _since(timing, timing.planned),
        "first_record_seconds": _since(timing, timing.first_record),
        **detection_summary(manifest.get("metadata")),
    }


def _since(timing: Timing, stamp: float) -> float | None:
    """Seconds from the run's start to `stamp`; None when it never came (nothing converted)."""
    return round(stamp - timing.start, 3) if stamp else None


def detection_summary(metadata: dict[str, Any] | None) -> dict[str, Any]:
    """A detection run's box counts and every box clipped or dropped (`detection`), as dataset.json
    has them; nothing for other runs, whose summary stays as it was."""
    found = (metadata or {}).get("detection")
    if not found:
        return {}
    keys = ("format", "boxes", "clipped", "dropped", "empty_images", "skipped_empty", "box_problems")
    return {"detection": {k: found[k] for k in keys}}


def _plan_summary(plan: Plan, timing: Timing, refused: str | None = None) -> dict[str, Any]:
    splits: dict[str, Any] = {}
    for shard in plan.shards:
        sp = splits.setdefault(
            shard.split, {"images": 0, "class_counts": dict.fromkeys(map(utf8_text, plan.classes), 0), "shards": []}
        )
        sp["images"] += len(shard.tasks)
        sp["shards"].append({"file": shard.name, "images": len(shard.tasks)})
        for text, n in class_counts(shard.tasks).items():  # from the plan's columns: no Task made
            sp["class_counts"][utf8_text(text)] += n
    return {
        "input": plan.input_dir,
        "output": plan.output_dir,
        "dry_run": True,
        "classes": [utf8_text(c) for c in plan.classes],
        "images": plan.images,
        "splits": splits,
        "ignored_files": plan.ignored_files,
        "excluded_files": plan.excluded_files,
        "skipped": plan.skipped,  # what the walk could not read (the images' own skips come when they are read)
        "warnings": [wording(w) for w in plan.warnings],
        "refused": refused,  # why the real run would stop (output not empty, ...), or None
        "options": plan.options,
        "elapsed_seconds": round(time.perf_counter() - timing.start, 3),
        **detection_summary(plan.metadata),
    }
