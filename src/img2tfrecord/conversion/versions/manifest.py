"""The new version's catalog and dataset.json, as `update` and `compact` build them from catalog rows.

Apart from `conversion.versions.update` so that module keeps room for the run itself: these are pure
functions of the old version (its dataset.json and catalog) and of where the records now are, and
`compact` uses `manifest_of` too. Counts in dataset.json (class counts, formats, depths, skips,
duplicates) are recomputed from the new catalog, never carried over, so they cannot drift from it.
"""

from __future__ import annotations

import itertools
from collections import Counter
from typing import Any, Protocol

from img2tfrecord.conversion.events import EventSink
from img2tfrecord.conversion.plan.options import ShardSettings
from img2tfrecord.conversion.versions.changes import Changes
from img2tfrecord.conversion.write import dedupe
from img2tfrecord.format.catalog import DROPPED, SKIPPED, Catalog, kind_of
from img2tfrecord.format.manifest import build_manifest, manifest_digest
from img2tfrecord.format.schema import utf8_text

_IS_DROPPED = bytes(int(i == DROPPED) for i in range(256))  # a bytes.translate table


class Parent(Protocol):
    """The version being replaced, as these builders need it (`versions.recorded.Recorded` is one)."""

    text: str  # its dataset.json as read: the new version's `parent` is its sha256
    manifest: dict[str, Any]


def new_catalog(
    old: Catalog,
    changes: Changes,
    new_rows: Catalog,
    renumber: dict[tuple[str, int], int],
    final_of: dict[str, str],
    final_new: dict[str, str],
    settings: ShardSettings,
    kept_back: set[bytes] | frozenset[bytes] = frozenset(),
) -> Catalog:
    """The old rows that stay (shards and record numbers as they are now) and the new rows.

    `renumber`: (old shard, record) -> its record number in the rewritten shard; `final_of` /
    `final_new`: an old shard's / a new shard's provisional name -> its name in the new version;
    `kept_back`: paths whose old row stays though this run tried them (`versions.faults`): their new
    (skipped) rows are left out."""
    kept = changes.kept_rows
    cat = old.take(kept)  # then each record's new shard name and number
    cat.has_digests = settings.digests
    if changes.demoted:
        _drop_rows(cat, kept, changes.demoted)
    names, codes, records = old.shards.values, cat.shards.codes, cat.records
    final_code = {c: cat.shards.code(final_of[v]) for c, v in enumerate(names) if v in final_of}
    for j in itertools.compress(range(len(kept)), cat.converted()):
        c = codes[j]
        if renumber:
            records[j] = renumber.get((names[c], records[j]), records[j])
        codes[j] = final_code[c]
    for j, r in enumerate(kept):
        if r in changes.refreshed:
            cat.sizes[j], cat.mtimes[j] = changes.refreshed[r]
    for r in range(len(new_rows)):
        if kept_back and new_rows.rels[r] in kept_back:
            continue
        shard = new_rows.shards[r]
        cat.add_row(new_rows, r, final_new.get(shard, shard), new_rows.records[r])
    return cat


def _drop_rows(cat: Catalog, kept: list[int], demoted: dict[int, bytes]) -> None:
    """The kept rows versions.dedupe found to be later copies now, made dropped rows as convert writes
    them (no shard, record, kind or shape; the digest: a skipped file's is known only now)."""
    w = cat.digests.width
    for j, r in enumerate(kept):
        digest = demoted.get(r)
        if digest is not None:
            cat.states[j] = DROPPED
            cat.reasons[j], cat.shards[j], cat.kinds[j] = "", "", ""
            cat.records[j], cat.lengths[j] = -1, 0
            cat.heights[j], cat.widths[j], cat.channels[j] = 0, 0, 0
            cat.digests.blob[j * w : j * w + w] = digest


def manifest_of(
    rec: Parent,
    cat: Catalog,
    classes: list[str],
    split_info: dict[str, dict[str, Any]],
    settings: ShardSettings,
    *,
    options: dict[str, Any],
    ignored_files: int,
    excluded_files: int,
    walk_skipped: list[dict[str, str]],
    skipped_rows: list[int] | None = None,
    kept_copy: dict[str, str] | None = None,
    warnings: list[str] | None = None,
    emit: EventSink | None = None,
    catalog_bytes: bytes | None = None,
    metadata: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """dataset.json of the version after `rec` (update's and compact's), its counts taken from its
    catalog `cat`: class counts, formats and depths, the skipped images (`skipped_rows`, in that
    order; default: the catalog's), the duplicate report (`kept_copy`: the kept copy of the copies
    versions.dedupe placed). `split_info` holds each split's shards; `catalog_bytes` the file `cat` is;
    `metadata`: dataset.json's `metadata` when it changed (an update's box counts), else the old one."""
    counts: dict[str, dict[str, int]] = {s: dict.fromkeys(classes, 0) for s in split_info}
    merged: dict[str, Counter[str]] = {k: Counter() for k in ("formats", "depths", "transcoded", "reduced")}
    order = {s: i for i, s in enumerate(split_info)}
    for (split, cls, key), n in cat.tally().items():
        counts[split][cls] += n
        kind = kind_of(key)
        merged["formats"][kind.fmt] += n
        merged["depths"][kind.depth] += n
        if kind.transcoded:
            merged["transcoded"][kind.transcoded] += n
        if kind.reduced:
            merged["reduced"][kind.reduced] += n
    if skipped_rows is None:  # in plan order (split, hash, path), as convert lists the images it skipped
        skipped_rows = _in_plan_order(rec, cat, [r for r in range(len(cat)) if cat.states[r] == SKIPPED], order)
    skipped = list(walk_skipped) + [  # the walk's (folders it cannot list), then the images'
        {"path": text_of(cat.rels[r]), "split": cat.splits[r], "reason": cat.reasons[r]} for r in skipped_rows
    ]
    for s, sp in split_info.items():
        records = sum(int(e["records"]) for e in sp["shards"])
        split_info[s] = {"records": records, "class_counts": counts[s], "shards": sp["shards"]}
    duplicates: dict[str, Any] = {"mode": "off"}
    if settings.dedupe != "off":
        rows = cat.duplicate_rows(order)
        states = bytes(cat.states)
        dropped_rows = list(itertools.compress(range(len(states)), states.translate(_IS_DROPPED)))
        if dropped_rows:  # --dedupe drop: the kept copies of the dropped ones too
            rows = _with_kept_copies(cat, rows, dropped_rows, order)
        blob, w, rels, in_split, of_class = cat.digests.blob, cat.digests.width, cat.rels, cat.splits, cat.classes
        seen_twice = [(blob[r * w : r * w + w].hex(), text_of(rels[r]), in_split[r], of_class[r]) for r in rows]
        dropped = _dropped(rec, cat, dropped_rows, rows, order, kept_copy or {}) if dropped_rows else []
        duplicates = dedupe.report(settings.dedupe, seen_twice, dropped)
        if (line := dedupe.summary_line(duplicates)) and warnings is not None:
            warnings.append(line)
            if emit:
                emit("warning", line)
    old = rec.manifest
    return build_manifest(
        classes=classes,
        label_offset=int(old.get("label_offset") or 0),
        options=options,
        splits=split_info,
        skipped=skipped,
        transcoded=dict(merged["transcoded"]),
        formats=dict(merged["formats"]),
        depths=dict(merged["depths"]),
        reduced=dict(merged["reduced"]),
        ignored_files=ignored_files,
        engine="local",
        duplicates=duplicates,
        excluded_files=excluded_files,
        version=int(old.get("version") or 1) + 1,
        parent=manifest_digest(rec.text),
        shard_request=old.get("shard_request"),
        catalog=catalog_bytes,
        metadata=old.get("metadata") if metadata is None else metadata,
    )


CHANGE_KINDS = ("added", "removed", "changed")


def history(old: dict[str, Any], manifest: dict[str, Any], summary: dict[str, Any] | None) -> list[dict[str, Any]]:
    """dataset.json's `history`: the old version's entries, then (for an update: `summary` is its
    `Changes.summary()`) this version's images added, removed and changed per class, summed over
    the splits. Only the current dataset.json and catalog are kept, so a version's changes are
    known later only if they are written down when it is made. `compact` changes no image: its
    version carries the history as it is."""
    out = list(old.get("history") or [])
    if summary is None:
        return out
    per: dict[str, Counter[str]] = {}
    for sp in summary["splits"].values():
        for cls, n in sp["classes"].items():
            per.setdefault(cls, Counter()).update({k: int(n.get(k, 0)) for k in CHANGE_KINDS})
    classes = {c: {k: n[k] for k in CHANGE_KINDS} for c, n in sorted(per.items()) if any(n[k] for k in CHANGE_KINDS)}
    return out + [{"version": manifest["version"], "created": manifest["created"], "classes": classes}]


def _in_plan_order(rec: Parent, cat: Catalog, rows: list[int], order: dict[str, int]) -> list[int]:
    """`rows` sorted as a fresh convert meets them: splits in `order`, each in hash order."""
    from img2tfrecord.conversion.plan.splits import order_key

    seed = int((rec.manifest.get("options") or {}).get("seed") or 0)
    last = len(order)
    return sorted(rows, key=lambda r: (order.get(cat.splits[r], last), order_key(cat.rels[r], seed), cat.rels[r]))


def _with_kept_copies(cat: Catalog, rows: list[int], dropped_rows: list[int], order: dict[str, int]) -> list[int]:
    """`rows` (converted rows another converted row duplicates) and the converted rows a dropped row
    duplicates, in `Catalog.duplicate_rows`' order (split order, shard name, record)."""
    w, blob = cat.digests.width, bytes(cat.digests.blob)
    wanted = {blob[r * w : r * w + w] for r in dropped_rows}
    more = [r for r in itertools.compress(range(len(cat)), cat.converted()) if blob[r * w : r * w + w] in wanted]
    last = len(order)
    return sorted(set(rows) | set(more), key=lambda r: (order.get(cat.splits[r], last), cat.shards[r], cat.records[r]))


def _dropped(
    rec: Parent,
    cat: Catalog,
    dropped_rows: list[int],
    kept_rows: list[int],
    order: dict[str, int],
    kept_copy: dict[str, str],
) -> list[dict[str, str]]:
    """The dropped copies as convert lists them (`dedupe.report`): in plan order (split, hash, path),
    each with the copy kept: as this update placed it (`kept_copy`), else the converted row of its
    digest among `kept_rows`, else (a copy of a skipped file: the catalog has no digest for that
    one) what the previous dataset.json said."""
    from img2tfrecord.conversion.plan.splits import order_key

    seed = int((rec.manifest.get("options") or {}).get("seed") or 0)
    kept = {cat.digests[r]: text_of(cat.rels[r]) for r in kept_rows}
    before = {
        d.get("path"): d.get("duplicate_of", "") for d in (rec.manifest.get("duplicates") or {}).get("dropped") or []
    }
    last = len(order)
    rows = sorted(
        dropped_rows, key=lambda r: (order.get(cat.splits[r], last), order_key(cat.rels[r], seed), cat.rels[r])
    )
    out = []
    for r in rows:
        path = text_of(cat.rels[r])
        digest = cat.digests[r]
        copy_of = kept_copy.get(path) or kept.get(digest) or before.get(path, "")
        out.append(
            {
                "path": path,
                "split": cat.splits[r],
                "class": cat.classes[r],
                "digest": digest.hex(),
                "duplicate_of": copy_of,
            }
        )
    return out


def text_of(rel: bytes) -> str:
    """A catalog path as dataset.json writes it (the same text as in the records)."""
    return utf8_text(rel.decode("utf-8", "surrogateescape"))
