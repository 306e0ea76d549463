"""What the HTML report says, gathered from dataset.json and the catalog alone (no shard is read here).

Counts come from dataset.json as `inspect` and `load()` read it (`layout.read_manifest`); sizes,
channels and formats of every record from the catalog's columns, summed by `stats.shape_fields`,
the function `inspect --json` sums the records it reads with, so the two cannot disagree.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from img2tfrecord import fs
from img2tfrecord.errors import UsageError
from img2tfrecord.format import catalog as catalog_format
from img2tfrecord.format import pinning
from img2tfrecord.format.catalog import CONVERTED, Catalog, kind_of
from img2tfrecord.format.layout import Manifest, refuse_unfinished
from img2tfrecord.format.schema import utf8_text
from img2tfrecord.inspection.stats import format_name, shape_fields

MAX_PATHS_PER_REASON = 20  # skipped files listed under each reason (the count is whole)


@dataclass(frozen=True)
class Cell:
    """One split x class count and whether it is short of the split's share (or absent)."""

    count: int
    share: float  # of the class's records
    target: float  # the split's share: --split's fraction, else the split's share of all records
    low: bool
    absent: bool


@dataclass(frozen=True)
class SkipGroup:
    reason: str
    count: int
    paths: list[str]


@dataclass(frozen=True)
class Shapes:
    """Sizes of the records whose shape the catalog holds (`known` of `records`)."""

    records: int
    known: int
    fields: dict[str, Any]  # stats.shape_fields: formats, height, width, channels (min/median/max)
    heights: Any  # numpy arrays, per known record in catalog order: the histograms' data
    widths: Any


@dataclass
class Facts:
    """Everything the page shows but the pictures."""

    dir: str
    manifest: Manifest
    catalog: Catalog | None
    classes: list[str]
    splits: list[str]
    records: int
    bytes: int
    shards: int
    counts: dict[str, dict[str, Cell]]  # split -> class -> cell
    class_totals: dict[str, int]
    shapes: Shapes | None
    formats: dict[str, int]  # dataset.json's
    skipped: list[SkipGroup]
    skipped_total: int
    duplicates: dict[str, Any]
    lineage: dict[str, Any]
    history: list[dict[str, Any]] = field(default_factory=list)
    detection: dict[str, Any] = field(default_factory=dict)  # dataset.json's metadata.detection; {}: no boxes

    @property
    def flagged(self) -> int:
        return sum(c.low or c.absent for row in self.counts.values() for c in row.values())

    @property
    def flagged_classes(self) -> set[str]:
        return {c for row in self.counts.values() for c, cell in row.items() if cell.low or cell.absent}


def load(out: str) -> tuple[Manifest, Catalog | None]:
    """OUT's dataset.json (a UsageError when OUT is no dataset folder) and its catalog (None if it has none)."""
    if not fs.exists(out):  # a run into it killed, or its switch cut short: what to run, said as inspect says it
        refuse_unfinished(out)
    man = pinning.open_folder(out)  # held open: the version whose dataset.json is read is the one read
    if man is None:
        raise UsageError(f"{out}: no dataset.json here; give the output folder of img2tfrecord convert")
    path, source = man.dir / catalog_format.CATALOG_NAME, man.at(catalog_format.CATALOG_NAME)
    if not source.is_file():
        return man, None
    try:
        return man, catalog_format.decode(source.read_bytes())
    except catalog_format.CatalogError as e:
        from img2tfrecord.errors import DataError

        raise DataError(f"{path}: {e}") from None


def gather(man: Manifest, cat: Catalog | None) -> Facts:
    data = man.data
    splits = man.splits
    classes = man.classes
    class_totals = Counter[str]()
    for sp in splits.values():
        class_totals.update(sp.get("class_counts") or {})
    records = sum(int(sp.get("records") or 0) for sp in splits.values())
    shard_entries = [s for sp in splits.values() for s in sp.get("shards") or []]
    skipped = data.get("skipped") or []
    return Facts(
        dir=str(man.dir),
        manifest=man,
        catalog=cat,
        classes=classes,
        splits=list(splits),
        records=records,
        bytes=sum(int(s.get("bytes") or 0) for s in shard_entries),
        shards=len(shard_entries),
        counts=_cells(man, classes, class_totals, records),
        class_totals={c: class_totals.get(c, 0) for c in classes},
        shapes=shapes_of(cat) if cat is not None else None,
        formats=dict(data.get("formats") or {}),
        skipped=_skip_groups(skipped),
        skipped_total=len(skipped),
        duplicates=dict(data.get("duplicates") or {}),
        lineage={k: data.get(k) for k in ("version", "parent", "created")},
        history=list(data.get("history") or []),
        detection=_detection(data),
    )


MAX_BOX_PROBLEMS = 200  # listed on the page; dataset.json keeps every one


def _detection(data: dict[str, Any]) -> dict[str, Any]:
    """dataset.json's `metadata.detection` (convert --annotations): the boxes written, clipped, dropped;
    {} for a dataset without boxes, or an entry not shaped as one."""
    meta = data.get("metadata")
    found = meta.get("detection") if isinstance(meta, dict) else None
    if not isinstance(found, dict):
        return {}

    def count(key: str) -> int:
        v = found.get(key)
        return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else 0

    per_class = found.get("boxes_per_class")
    problems = found.get("box_problems")
    return {
        # which boxes were clipped or dropped, and why: a count alone sends the reader to dataset.json
        "problems": [
            {
                "path": str(p.get("path", "")),
                "box": p.get("box", "?"),
                "cls": str(p.get("class", "")),
                "reason": str(p.get("reason", "")),
            }
            for p in problems[:MAX_BOX_PROBLEMS]
            if isinstance(p, dict)
        ]
        if isinstance(problems, list)
        else [],
        "annotations": str(found.get("annotations") or ""),
        "format": str(found.get("format") or ""),
        **{k: count(k) for k in ("boxes", "clipped", "dropped", "empty_images", "skipped_empty")},
        # every record's boxes per class, most first ({}: a dataset made before dataset.json kept them)
        "per_class": sorted(
            ((str(c), n) for c, n in per_class.items() if isinstance(n, int) and not isinstance(n, bool) and n >= 0),
            key=lambda cn: -cn[1],
        )
        if isinstance(per_class, dict)
        else [],
    }


def _cells(man: Manifest, classes: list[str], totals: Counter[str], records: int) -> dict[str, dict[str, Cell]]:
    """Each split x class count, flagged when absent or under the split's share by more than
    chance explains: two standard deviations of a binomial draw of the class's size."""
    fractions = (man.data.get("options") or {}).get("split") or {}
    out: dict[str, dict[str, Cell]] = {}
    for s, sp in man.splits.items():
        counts = sp.get("class_counts") or {}
        target = float(fractions.get(s, 0)) if fractions else (int(sp.get("records") or 0) / records if records else 0)
        row = {}
        for c in classes:
            n, total = int(counts.get(c, 0)), totals.get(c, 0)
            share = n / total if total else 0.0
            margin = 2 * math.sqrt(target * (1 - target) / total) if total else 0.0
            absent = n == 0 and total > 0 and target > 0
            row[c] = Cell(n, share, target, low=not absent and total > 0 and share < target - margin, absent=absent)
        out[s] = row
    return out


def shapes_of(cat: Catalog) -> Shapes:
    """The record sizes the catalog holds, summed as `inspect --json` sums them."""
    conv = cat.converted()
    formats = Counter[str]()
    kinds = Counter(k for k, on in zip(cat.kinds.codes, conv) if on)
    for code, n in kinds.items():
        kind = kind_of(cat.kinds.values[code])
        formats[format_name(kind.fmt, kind.depth == "16")] += n
    import numpy as np

    known = np.frombuffer(conv, np.uint8).astype(bool) & (np.frombuffer(cat.heights, np.uint32) > 0)
    heights = np.frombuffer(cat.heights, np.uint32)[known]
    widths = np.frombuffer(cat.widths, np.uint32)[known]
    channels = np.frombuffer(cat.channels, np.uint8)[known]
    fields = shape_fields(formats, _counts(heights), _counts(widths), _counts(channels))
    return Shapes(sum(kinds.values()), int(known.sum()), fields, heights, widths)


def _counts(values: Any) -> Counter[int]:
    """value -> records, as `Stats` counts them (plain ints, whatever array held them)."""
    import numpy as np

    keys, n = np.unique(values, return_counts=True)
    return Counter(dict(zip(keys.tolist(), n.tolist())))


def _skip_groups(skipped: list[dict[str, Any]]) -> list[SkipGroup]:
    """dataset.json's skipped files by reason, the most frequent first."""
    by: dict[str, list[str]] = {}
    for s in skipped:
        by.setdefault(str(s.get("reason") or "unknown"), []).append(str(s.get("path") or ""))
    ordered = sorted(by.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    return [SkipGroup(r, len(paths), paths[:MAX_PATHS_PER_REASON]) for r, paths in ordered]


def rows_by_path(cat: Catalog, paths: set[str]) -> dict[str, int]:
    """The converted catalog row of each of `paths` (as dataset.json writes them) that has one."""
    raw = {p.encode("utf-8", "surrogateescape"): p for p in paths}  # a name that is valid UTF-8: its own bytes
    out = {}
    for r, (rel, on) in enumerate(zip(cat.rels, cat.converted())):
        if on and rel in raw:
            out[raw[rel]] = r
    if len(out) < len(paths):  # names written with \xNN escapes (undecodable bytes): compare as text
        for r, on in enumerate(cat.converted()):
            if on:
                text = utf8_text(cat.rels[r].decode("utf-8", "surrogateescape"))
                if text in paths:
                    out[text] = r
    return out


def converted_rows(cat: Catalog) -> list[int]:
    return [r for r, s in enumerate(cat.states) if s == CONVERTED]
