"""The catalog of a run (format.catalog): each planned image's facts, from the plan and the shards' outcomes.

A split's records are its planned tasks minus the skipped and dropped ones, in plan order (the
re-cut after skips moves records between shards without reordering them), so the n-th record
of a split is the n-th kept task, its digest the n-th of the outcomes' digest columns and its
length the n-th of their length lists; the final shards' record counts say which shard holds it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from img2tfrecord import fs
from img2tfrecord.conversion.plan.table import Task, TaskView, boxes_digest, encode_name
from img2tfrecord.conversion.write.dedupe import DIGEST_HEX
from img2tfrecord.conversion.write.shards import ShardInfo, ShardOutcome
from img2tfrecord.format.catalog import CONVERTED, DROPPED, NO_DIGEST, SKIPPED, Catalog
from img2tfrecord.format.schema import utf8_text


@dataclass(frozen=True)
class Seen:
    """One planned image as the catalog needs it."""

    rel: bytes
    size: int
    mtime: int
    cls: str  # image/class/text, as the manifest writes it
    boxes: bytes  # its enrichers' stamp (a detection image's boxes digest; conversion.plan.enrich), else NO_BOXES


def seen(tasks: Sequence[Task]) -> Iterator[Seen]:
    """(rel bytes, size, mtime, class, boxes) of `tasks` in order, from the table's columns when it is a view."""
    if isinstance(tasks, TaskView):
        t = tasks.table
        texts = [utf8_text(c) for c in t.classes]
        groups = [texts[g.cls] for g in t.groups]
        for i in tasks.order:
            yield Seen(t.rel_bytes(i), t.sizes[i], t.mtimes[i], groups[t.group_of[i]], t.stamp(i))
    else:
        for task in tasks:
            boxes = boxes_digest(task.objects)
            yield Seen(encode_name(task.rel), task.size, task.mtime_ns, utf8_text(task.text), boxes)


NO_SHAPE = (0, 0, 0)  # an outcome of an older journal: the catalog records the shape as not known


def digest_bytes(hex_digest: str) -> bytes:
    return bytes.fromhex(hex_digest) if hex_digest else NO_DIGEST


def add_split(
    cat: Catalog,
    split: str,
    planned: Sequence[tuple[Sequence[Task], ShardOutcome]],
    final: Sequence[ShardInfo],
    lengths: Sequence[int] | None = None,
) -> None:
    """Add the rows of one split: `planned` its (tasks, outcome) in plan order, `final` the shards
    the records ended up in (after the re-cut). `lengths`: every record's framed size, when the
    outcomes do not carry them (a journal of an older version)."""
    slots = iter((info.file, r) for info in final for r in range(info.records))
    all_lengths = iter(lengths if lengths is not None else [n for _, o in planned for n in o.lengths])
    for tasks, o in planned:
        skipped, dropped = _left_out(o)
        column = o.digests
        k = 0
        for i, item in enumerate(seen(tasks)):
            if skipped or dropped:
                key: int | str = i if o.skipped_at or o.dropped_at else _text(item.rel)
                if key in skipped or key in dropped:
                    state, digest = (SKIPPED, NO_DIGEST) if key in skipped else (DROPPED, digest_bytes(dropped[key]))
                    why = skipped.get(key, "")
                    cat.add(
                        item.rel,
                        item.size,
                        item.mtime,
                        digest,
                        state,
                        split,
                        reason=why,
                        cls=item.cls,
                        boxes=item.boxes,
                    )
                    continue
            digest = digest_bytes(column[k * DIGEST_HEX : (k + 1) * DIGEST_HEX])
            kind = o.kinds[o.kind_of[k]] if k < len(o.kind_of) else ""
            height, width, channels = o.shapes[3 * k : 3 * k + 3] if 3 * k < len(o.shapes) else NO_SHAPE
            k += 1
            shard, record = next(slots)
            length = next(all_lengths)
            cat.add(
                item.rel,
                item.size,
                item.mtime,
                digest,
                CONVERTED,
                split,
                shard=shard,
                record=record,
                length=length,
                cls=item.cls,
                kind=kind,
                height=height,
                width=width,
                channels=channels,
                boxes=item.boxes,
            )


def _left_out(o: ShardOutcome) -> tuple[dict[int | str, str], dict[int | str, str]]:
    """The outcome's skipped images (-> reason) and dropped ones (-> digest), keyed by their position
    in the shard's tasks; by name for an outcome without positions (a journal of an older version),
    where two names that `utf8_text` shows alike (b"\\xff" undecodable, "\\xff" typed) would collide."""
    if o.skipped_at or o.dropped_at:
        return (
            {int(p): s["reason"] for p, s in zip(o.skipped_at, o.skipped)},
            {int(p): d["digest"] for p, d in zip(o.dropped_at, o.dropped)},
        )
    return {s["path"]: s["reason"] for s in o.skipped}, {d["path"]: d["digest"] for d in o.dropped}


def _text(rel: bytes) -> str:
    return utf8_text(rel.decode("utf-8", "surrogateescape"))


def record_lengths(directory: str, files: Sequence[str], compression: str | None) -> list[int]:
    """Every record's framed size in `files`, read from the shards (for outcomes without lengths)."""
    out: list[int] = []
    if not compression and not fs.is_remote(directory):
        from img2tfrecord.format.framing import record_spans

        for f in files:
            out += [size for _, size in record_spans(fs.join(directory, f))]
        return out
    from img2tfrecord.conversion.plan.options import TF_COMPRESSION
    from img2tfrecord.conversion.write.shards import _records
    from img2tfrecord.format.framing import RECORD_OVERHEAD

    return [len(r) + RECORD_OVERHEAD for r in _records(directory, list(files), TF_COMPRESSION[compression])]
