"""`img2tfrecord report`: one self-contained HTML page that shows a dataset.

Read: dataset.json, the catalog and the sampled records only (`facts`, `sample`), never every
shard. Drawn: matplotlib charts as inline SVG (`charts`), thumbnails as data URIs, the page from
a Jinja2 template with autoescape on (`templates/report.html.j2`). Nothing in the page asks for
anything outside the file, and every number is in a table, so it reads without JavaScript.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass
from typing import Any

from img2tfrecord import fs
from img2tfrecord.errors import UsageError, option
from img2tfrecord.inspection import outputs
from img2tfrecord.inspection.report import facts as facts_mod
from img2tfrecord.inspection.report.facts import Facts
from img2tfrecord.inspection.report.sample import DupGroup, Sample

MAX_DUPLICATE_GROUPS = 12  # groups shown with their thumbnails (all are counted)
MAX_GROUP_MEMBERS = 6


@dataclass(frozen=True)
class Written:
    """What `report` wrote, for the command's one line."""

    path: str
    bytes: int
    records: int
    classes: int
    thumbnails: int
    flagged: int


def default_path(out: str | os.PathLike[str]) -> str:
    """OUT-report.html beside the dataset folder (a file inside it would be left behind by the next
    update, and is refused); OUT named `.` or `..` by its full path (`report .` in the dataset)."""
    text = os.fspath(out).rstrip("/\\")
    if os.path.basename(text) in ("", ".", ".."):
        text = os.path.abspath(text or os.sep).rstrip("/\\")
    return text + "-report.html"


def report(
    out: str | os.PathLike[str],
    html: str | os.PathLike[str] | None = None,
    *,
    per_class: int = 8,
    seed: int = 0,
    force: bool = False,
) -> Written:
    """Write the HTML report of the dataset in `out` to `html` (default: `default_path(out)`).

    `html` is a new file or an earlier report, outside any dataset folder (`outputs.check_file`:
    a UsageError before anything is read); `force` lets it replace any other HTML page. The page
    is written whole or not at all (`outputs.write_file`)."""
    if per_class < 0:
        raise UsageError(f"bad {option('per_class', per_class)}: must be >= 0")
    path = os.fspath(html) if html is not None else default_path(out)
    target = outputs.check_file(path, outputs.REPORT, force, [out])
    fs.check_remote(os.fspath(out), "dataset")  # a bucket that does not answer: one line, exit 1
    man, cat = facts_mod.load(os.fspath(out))
    f = facts_mod.gather(man, cat)
    sample = _sample(f, per_class, seed)
    dups = _duplicate_groups(f)
    data = _page(f, sample, dups, per_class, seed).encode("utf-8")
    outputs.write_file(target, path, data)
    shown = sum(len(ts) for ts in sample.by_class.values()) if sample else 0
    return Written(path, len(data), f.records, len(f.classes), shown, f.flagged)


def _sample(f: Facts, per_class: int, seed: int) -> Sample | None:
    from img2tfrecord.inspection.report.sample import sample

    if f.catalog is None or per_class == 0:
        return None
    return sample(f.manifest, f.catalog, f.classes, per_class, seed)


def _duplicate_groups(f: Facts) -> list[DupGroup]:
    """The first groups of dataset.json's duplicate report, cross-label and cross-split ones first,
    each with the thumbnails of its first members."""
    from img2tfrecord.inspection.report.sample import read_thumbs

    groups = list(f.duplicates.get("groups") or [])
    groups.sort(key=lambda g: (not g.get("conflicting_labels"), not g.get("across_splits")))
    groups = groups[:MAX_DUPLICATE_GROUPS]
    wanted = {p for g in groups for p in g.get("files", [])[:MAX_GROUP_MEMBERS]}
    rows = facts_mod.rows_by_path(f.catalog, wanted) if f.catalog is not None and wanted else {}
    thumbs = read_thumbs(f.manifest, f.catalog, rows.values()).by_row if rows and f.catalog is not None else {}
    out = []
    for g in groups:
        files = [str(p) for p in g.get("files", [])]
        shown = [thumbs[rows[p]] for p in files[:MAX_GROUP_MEMBERS] if p in rows]
        out.append(
            DupGroup(
                files,
                list(g.get("classes") or []),
                list(g.get("splits") or []),
                bool(g.get("conflicting_labels")),
                bool(g.get("across_splits")),
                shown,
            )
        )
    return out


def _origins(f: Facts) -> list[dict[str, Any]]:
    """Records per version that wrote their shard, per class (from the catalog and the shards' versions)."""
    if f.catalog is None:
        return []
    cat = f.catalog
    version_of = {
        s["file"]: int(s.get("version") or 1) for sp in f.manifest.splits.values() for s in sp.get("shards") or []
    }
    import numpy as np

    conv = np.frombuffer(cat.converted(), np.uint8).astype(bool)
    shard = np.frombuffer(cat.shards.codes, np.uint32)[conv]
    cls = np.frombuffer(cat.classes.codes, np.uint32)[conv]
    pairs, n = np.unique(shard.astype(np.int64) << 32 | cls, axis=0, return_counts=True)
    counts: Counter[tuple[int, str]] = Counter()
    for key, k in zip(pairs.tolist(), n.tolist()):
        counts[version_of.get(cat.shards.values[key >> 32], 0), cat.classes.values[key & 0xFFFFFFFF]] += k
    versions = sorted({v for v, _ in counts})
    return [{"version": v, "classes": {c: counts.get((v, c), 0) for c in f.classes}} for v in versions]


def _page(f: Facts, sample: Sample | None, dups: list[DupGroup], per_class: int, seed: int) -> str:
    from img2tfrecord.inspection.report.render import page

    return page(f, sample, dups, _origins(f), per_class, seed)


__all__ = ["Written", "default_path", "report"]
