"""compact(): fold a dataset's appended and rewritten shards into the layout a fresh conversion makes.

After updates, a split holds its first shards, some rewritten, and shards appended per update.
`compact` keeps every image's split (under the exact split rule, that is the dataset's history:
update never moves an image, so it need not be how a fresh convert would split today's tree) and
puts every record where `convert --file-list LIST INPUT OUT2 --labels OUTPUT/labels.txt` (same
options; LIST the dataset's own path,label,split assignment, `inspect OUTPUT --export-list LIST`)
would: each split's images in hash order (conversion.plan.splits), cut as that run's plan cuts them
(the shard count from dataset.json's `shard_request`, images skipped or dropped as copies by their
converter taken out, re-cut when that unbalances the counts, as `write.rebalance` does). It reads no image and
encodes nothing: the catalog says where each record is, and the records are copied (byte ranges
with `copy_file_range` for uncompressed local shards, through `tf.io.gfile` reads for remote
ones; through TensorFlow's record writer, from a decompressed copy, for gzip/zlib ones). So the shards, indexes, labels.txt, TFDS metadata and
catalog equal that conversion's byte for byte, and dataset.json does apart from its lineage and
options. `--rebalance` re-splits first (conversion.versions.rebalance): the one step that moves images.
"""

from __future__ import annotations

import gzip
import itertools
import os
import shutil
import struct
import zlib
from array import array
from dataclasses import dataclass
from typing import Any

from img2tfrecord import cstderr, fs
from img2tfrecord.conversion.plan.job import auto_shard_counts, estimate_bytes, min_shard_records, shard_bounds
from img2tfrecord.conversion.plan.options import ShardSettings
from img2tfrecord.conversion.plan.splits import order_key
from img2tfrecord.conversion.versions.manifest import history, manifest_of
from img2tfrecord.conversion.versions.options import recorded_settings
from img2tfrecord.conversion.versions.recorded import Recorded, catalog_mismatch, read_recorded
from img2tfrecord.conversion.write import shards as writer
from img2tfrecord.conversion.write.shards import ShardInfo
from img2tfrecord.conversion.write.spans import Span, copy_spans
from img2tfrecord.errors import DataError, Interrupted, UsageError, option
from img2tfrecord.format import catalog as catalog_file
from img2tfrecord.format import tfds as tfds_metadata
from img2tfrecord.format.catalog import CATALOG_NAME, CONVERTED, DROPPED, SKIPPED, Catalog
from img2tfrecord.format.framing import HEADER_BYTES, RECORD_OVERHEAD, is_record_header
from img2tfrecord.format.manifest import (
    MANIFEST_NAME,
    created_stamp,
    label_files,
    manifest_text,
)
from img2tfrecord.format.naming import shard_name
from img2tfrecord.format.schema import utf8_text

PLAIN_DIR = ".compact-plain"  # decompressed copies of gzip/zlib shards, inside the build folder


@dataclass
class _Target:
    """One shard of the compacted layout: the catalog rows of its records, in order."""

    name: str
    rows: list[int]


def layout(rec: Recorded, settings: ShardSettings) -> tuple[dict[str, list[_Target]], dict[str, int]]:
    """Per split, the shards a fresh conversion would write (rows in record order), and the planned counts."""
    cat, seed = rec.catalog, rec.made.seed
    names = split_order(rec)
    candidates: dict[str, list[int]] = {s: [] for s in names}
    for r, state in enumerate(cat.states):
        if state in (CONVERTED, SKIPPED, DROPPED) and cat.splits[r] in candidates:  # convert's planned tasks
            candidates[cat.splits[r]].append(r)
    for rows in candidates.values():
        rows.sort(key=lambda r: (order_key(cat.rels[r], seed), cat.rels[r]))
    split_bytes = {s: estimate_bytes([cat.sizes[r] for r in rows], settings.encode) for s, rows in candidates.items()}
    counts = auto_shard_counts(
        split_bytes,
        {s: len(rows) for s, rows in candidates.items()},
        rec.manifest.get("shard_request"),
        min_shard_records(settings.index),
    ).counts
    out: dict[str, list[_Target]] = {}
    for s, rows in candidates.items():
        if not rows:
            continue
        k = counts[s]
        planned = [[r for r in rows[a:b] if cat.states[r] == CONVERTED] for a, b in shard_bounds(len(rows), k)]
        total = sum(map(len, planned))
        k_new = writer.recut_count(k, total, settings.index)
        sizes = [len(p) for p in planned]
        if k_new == k and max(sizes) - min(sizes) <= 1:  # as planned, less the skipped images
            out[s] = [_Target(shard_name(s, i, k), p) for i, p in enumerate(planned)]
        else:  # write.rebalance's re-cut
            kept = [r for p in planned for r in p]
            out[s] = [
                _Target(shard_name(s, i, k_new), kept[a:b]) for i, (a, b) in enumerate(shard_bounds(total, k_new))
            ]
    return out, dict(counts)


def split_order(rec: Recorded) -> list[str]:
    """The splits in the order a fresh conversion lists them (not the order updates added them in):
    `--split`'s fractions as given; else the walk's, split folders sorted by name, each named by
    the folder its rows' paths start with ('val/cat/1.jpg': the split validation, after train)."""
    cat, fractions = rec.catalog, rec.made.split
    names = list(fractions) if isinstance(fractions, dict) else []
    folder: dict[str, str] = {}
    for c, s in enumerate(cat.splits.values):
        if s and s not in names and (r := _first(cat.splits.codes, c)) is not None:
            folder[s] = cat.rels[r].split(b"/", 1)[0].decode("utf-8", "surrogateescape")
    names += sorted(folder, key=lambda s: (folder[s], s))
    return names + [s for s in (rec.manifest.get("splits") or {}) if s not in names]


def _read(output_dir: str, rebalance: bool) -> tuple[Recorded, dict[str, Any] | None]:
    """The dataset as it is, or with its splits made exact again (`rebalance`), and what moved."""
    rec = read_recorded(output_dir)
    if not rebalance:
        return rec, None
    from img2tfrecord.conversion.versions.rebalance import rebalanced

    new = rebalanced(rec.options, rec.catalog, output_dir)
    return Recorded(rec.text, rec.manifest | {"options": new.options}, new.catalog), new.report


def is_compact(rec: Recorded, targets: dict[str, list[_Target]], counts: dict[str, int]) -> bool:
    """Whether OUTPUT is already what compact would write: the splits with shards in the fresh
    layout's order, each shard named and holding the catalog rows (in record order) it would, and
    dataset.json's shard counts those of the layout. A fresh conversion is; an update that added
    or rewrote shards is not."""
    splits = {s: [e["file"] for e in sp.get("shards") or []] for s, sp in (rec.manifest.get("splits") or {}).items()}
    if [s for s, files in splits.items() if files] != list(targets) or rec.made.shards != counts:
        return False
    cat = rec.catalog
    held: dict[str, list[int]] = {}
    for r in sorted(itertools.compress(range(len(cat)), cat.converted()), key=cat.records.__getitem__):
        held.setdefault(cat.shards[r], []).append(r)
    return all(splits[s] == [t.name for t in ts] for s, ts in targets.items()) and all(
        held.get(t.name, []) == t.rows for ts in targets.values() for t in ts
    )


def _first(codes: array, c: int) -> int | None:
    """The first row whose code is `c` (None: a value no row has any more)."""
    try:
        return codes.index(c)
    except ValueError:
        return None


@cstderr.quieted
def compact(
    output_dir: str | os.PathLike[str], *, fsync: bool = True, dry_run: bool = False, rebalance: bool = False
) -> dict[str, Any]:
    """Rewrite the dataset in `output_dir` in a fresh conversion's layout, copying records; return the summary.

    Every image keeps its split, unless `rebalance`: then the splits are made exact per class again
    (conversion.versions.rebalance), which moves images between splits and says how many."""
    output_dir = os.fspath(output_dir)  # a pathlib.Path from Python
    created_stamp()
    from img2tfrecord.conversion.write.publish import finish_cut_short

    fs.check_remote(output_dir, "dataset")  # a bucket that does not answer: one line, exit 1, before any work
    finish_cut_short(output_dir, dry_run)  # a publish in place (object stores) cut short: finished first
    rec, moved = _read(output_dir, rebalance)
    settings = recorded_settings(rec.made, fsync=fsync, strict=False)
    targets, counts = layout(rec, settings)
    current = {s: [e["file"] for e in sp.get("shards") or []] for s, sp in (rec.manifest.get("splits") or {}).items()}
    planned = {s: [t.name for t in ts] for s, ts in targets.items()}
    summary: dict[str, Any] = {
        "output": output_dir,
        "dry_run": dry_run,
        "version": int(rec.manifest.get("version") or 1),
        "shards_before": sum(map(len, current.values())),
        "shards_after": sum(map(len, planned.values())),
        "compact": is_compact(rec, targets, counts),  # then nothing is written: same version
        "bytes_written": 0,
    }
    if moved is not None:
        summary["rebalanced"] = moved
    from img2tfrecord.conversion.write import publish
    from img2tfrecord.conversion.write.workspace import workspace

    ws = workspace(output_dir)
    if dry_run or summary["compact"]:
        if not dry_run:
            _refuse_unfinished(ws, output_dir)  # its --resume would lose a compact's new version
        return summary
    lock = publish.OutputLock(ws)
    lock.acquire()
    try:
        publish.recover(ws)
        _refuse_unfinished(ws, output_dir)
        rec, moved = _read(output_dir, rebalance)
        targets, counts = layout(rec, settings)
        if moved is not None:
            summary["rebalanced"] = moved
        if is_compact(rec, targets, counts):  # what another compact left, meanwhile
            return summary | {"compact": True, "version": int(rec.manifest.get("version") or 1)}
        publish.prepare(ws)
        state = publish.Published()
        try:
            files, metadata, written = _build(ws.build, output_dir, rec, targets, counts, settings)
            publish.publish(ws, files, metadata, settings.fsync, state)
        except BaseException as e:
            if state.switched:  # the new version is in place; only removing the old one was cut short
                if isinstance(e, KeyboardInterrupt):
                    raise Interrupted(0, 0, published=True) from None
                raise DataError(f"{output_dir} was compacted, but removing the old version failed: {e}") from None
            publish.discard(ws)
            if isinstance(e, OSError):
                raise DataError(f"compacting {output_dir} failed: {e.strerror or e}; it is unchanged") from None
            raise
    finally:
        lock.release(remove=True)
    summary.update(
        version=summary["version"] + 1, bytes_written=written, warnings=[state.leftover] if state.leftover else []
    )
    return summary


def _refuse_unfinished(ws: Any, output_dir: str) -> None:
    """UsageError when an interrupted convert or update left work to finish in `output_dir`."""
    from img2tfrecord.conversion.write import publish

    if publish.has_unfinished(ws):
        from img2tfrecord.conversion.write.resume import journal_command

        which = journal_command(ws.journal_dir) or "convert"
        raise UsageError(
            f"{output_dir} holds an unfinished {which}: finish it ({which} with {option('resume', True)}) first"
        )


def _build(
    build: str,
    output_dir: str,
    rec: Recorded,
    targets: dict[str, list[_Target]],
    counts: dict[str, int],
    settings: ShardSettings,
) -> tuple[list[str], dict[str, str], int]:
    """Write the compacted shards, catalog and metadata into `build`; (files, metadata, bytes written)."""
    cat = rec.catalog
    sources = {r: cat.shards[r] for r in range(len(cat)) if cat.states[r] == CONVERTED}
    offsets = cat.offsets()
    plain = output_dir
    if settings.compression:  # random access needs the decompressed stream: one copy of each shard
        plain = fs.join(build, PLAIN_DIR)
        fs.makedirs(plain)
        for name in sorted(set(sources.values())):
            _decompress(fs.join(output_dir, name), fs.join(plain, name), settings.compression)
    _check_headers(output_dir, plain, sources, offsets, cat)
    new = Catalog(has_digests=cat.has_digests)
    placed: dict[int, tuple[str, int]] = {}
    split_info: dict[str, dict[str, Any]] = {}
    files: list[str] = []
    written = 0
    for s, ts in targets.items():
        infos = []
        for t in ts:
            info = _write(build, t, plain, sources, offsets, cat, settings)
            written += info.bytes
            infos.append(info)
            placed.update({r: (t.name, j) for j, r in enumerate(t.rows)})
            files.append(t.name)
            if info.index:
                files.append(info.index)
        split_info[s] = {"shards": [i.as_json() for i in infos]}
    if settings.compression:
        fs.rmtree(plain)
    for r in range(len(cat)):
        new.add_row(cat, r, *placed.get(r, ("", -1)))
    data = catalog_file.encode(new)
    fs.write_bytes(fs.join(build, CATALOG_NAME), data)
    files.append(CATALOG_NAME)
    seed = rec.made.seed
    skipped_order = {
        r: (order_key(cat.rels[r], seed), cat.rels[r]) for r in range(len(cat)) if cat.states[r] == SKIPPED
    }
    images = {utf8_text(cat.rels[r].decode("utf-8", "surrogateescape")) for r in skipped_order}  # skipped images
    manifest = manifest_of(
        rec,
        new,
        rec.classes,
        split_info,
        settings,
        options=rec.options | {"shards": counts},
        skipped_rows=sorted(skipped_order, key=lambda r: (list(targets).index(cat.splits[r]), skipped_order[r])),
        ignored_files=int(rec.manifest.get("ignored_files") or 0),
        excluded_files=int(rec.manifest.get("excluded_files") or 0),
        walk_skipped=[s for s in rec.manifest.get("skipped") or [] if s.get("path") not in images],
        catalog_bytes=data,
    )
    if rec.manifest.get("history"):
        manifest["history"] = history(rec.manifest, manifest, None)
    metadata = tfds_metadata.files(manifest) | {
        **label_files(manifest),
        MANIFEST_NAME: manifest_text(manifest),
    }
    return files, metadata, written + len(data) + sum(len(t.encode()) for t in metadata.values())


def _check_headers(output_dir: str, plain: str, sources: dict[int, str], offsets: list[int], cat: Catalog) -> None:
    """Refuse (DataError, nothing written) unless each record the catalog places starts there with
    a header announcing its catalog length: 12 bytes a record, so a catalog that lost step with
    its shards cannot make compact write shards of cut records."""
    by_shard: dict[str, list[int]] = {}
    for r, name in sources.items():
        by_shard.setdefault(name, []).append(r)
    for name, rows in sorted(by_shard.items()):
        with fs.open_read(fs.join(plain, name)) as f:
            for r in sorted(rows, key=offsets.__getitem__):
                f.seek(offsets[r])
                head = f.read(HEADER_BYTES)
                if not is_record_header(head) or struct.unpack_from("<Q", head)[0] != cat.lengths[r] - RECORD_OVERHEAD:
                    what = f"record {cat.records[r]} of {name} is not where, or not as long as, it says"
                    raise DataError(catalog_mismatch(fs.join(output_dir, CATALOG_NAME), what, output_dir))


def _write(
    build: str,
    t: _Target,
    plain: str,
    sources: dict[int, str],
    offsets: list[int],
    cat: Catalog,
    settings: ShardSettings,
) -> ShardInfo:
    """One compacted shard: its records copied from where the catalog says they are."""
    if not settings.compression:
        path = fs.join(build, t.name)
        with fs.open_write(path) as dst:  # neighbouring records: one copy
            copy_spans((Span(fs.join(plain, sources[r]), offsets[r], cat.lengths[r]) for r in t.rows), dst)
        sizes = [cat.lengths[r] for r in t.rows]
        info = ShardInfo(t.name, records=len(t.rows))
        return writer.seal(path, info, sizes, settings.index, settings.fsync, settings.checksum)
    sw = writer.ShardWriter(build, t.name, settings.compression, settings.index, checksum=settings.checksum)
    handles: dict[str, Any] = {}
    try:
        for r in t.rows:
            f = handles.get(sources[r])
            if f is None:
                f = handles[sources[r]] = fs.open_read(fs.join(plain, sources[r]))
            f.seek(offsets[r] + HEADER_BYTES)
            data = f.read(cat.lengths[r] - RECORD_OVERHEAD)
            if len(data) != cat.lengths[r] - RECORD_OVERHEAD:
                raise DataError(f"{sources[r]} ended early: the catalog and the shard disagree")
            sw.write(data)
    finally:
        for f in handles.values():
            f.close()
    return sw.close(settings.fsync)


def _decompress(src: str, dst: str, compression: str) -> None:
    """The TFRecord stream inside a gzip (a gzip file) or zlib (a zlib stream) shard, written to `dst`."""
    with fs.open_write(dst) as out, fs.open_read(src) as raw:
        if compression == "gzip":
            with gzip.GzipFile(fileobj=raw, mode="rb") as f:
                shutil.copyfileobj(f, out, 1 << 20)
            return
        d = zlib.decompressobj()
        with raw as f:
            while chunk := f.read(1 << 20):
                out.write(d.decompress(chunk))
        out.write(d.flush())
