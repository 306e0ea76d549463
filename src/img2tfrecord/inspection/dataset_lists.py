"""What `inspect OUT` reads from a dataset's catalog rather than its records: the groups of
`--split-group PATTERN` that cross splits (leakage between train and validation), and the
dataset's own split assignment as a file list (`--export-list FILE`).

The exported list is `path,label,split` for every image the dataset planned (records, skipped
images and dropped copies), split by split in dataset.json's order: `convert --file-list FILE
--labels OUT/labels.txt` (with the dataset's other options) then writes the shards and catalog
`compact` writes for OUT, byte for byte.
"""

from __future__ import annotations

import csv
import io
import os
from collections import Counter
from typing import Any

from img2tfrecord import fs
from img2tfrecord.errors import UsageError, option
from img2tfrecord.format import catalog as catalog_file
from img2tfrecord.format.catalog import CONVERTED, DROPPED, SKIPPED, Catalog
from img2tfrecord.format.layout import Manifest
from img2tfrecord.format.split_groups import group_key, group_pattern
from img2tfrecord.inspection import outputs

CROSSING_SHOWN = 1000  # groups listed in the report at most (the count is always whole)


def dataset_catalog(man: Manifest | None, what: str) -> Catalog:
    """The catalog of the one dataset folder inspected; UsageError when there is none."""
    source = None if man is None else man.at(catalog_file.CATALOG_NAME)  # where the reader holds it
    if man is None or source is None or not source.is_file():
        raise UsageError(f"{what} reads a dataset's catalog: give one output folder made by convert as PATH")
    path = man.dir / catalog_file.CATALOG_NAME  # as messages name it
    try:
        return catalog_file.decode(source.read_bytes())
    except catalog_file.CatalogError as e:
        raise UsageError(f"{path}: {e}") from None


def _rel(cat: Catalog, r: int) -> str:
    return cat.rels[r].decode("utf-8", "surrogateescape")


def crossing_groups(cat: Catalog, pattern: str) -> dict[str, Any]:
    """The groups (`--split-group`'s rule on each planned image's path) whose images lie in more
    than one split: {pattern, groups, images_grouped, crossing: {group: {split: images}}}."""
    compiled = group_pattern(pattern)
    assert compiled is not None
    per: dict[str, Counter[str]] = {}
    grouped = 0
    for r, state in enumerate(cat.states):
        if state not in (CONVERTED, SKIPPED, DROPPED):
            continue
        g = group_key(compiled, _rel(cat, r))
        if g is None:
            continue
        grouped += 1
        per.setdefault(g, Counter())[cat.splits[r]] += 1
    crossing = {g: dict(sorted(c.items())) for g, c in sorted(per.items()) if len(c) > 1}
    return {
        "pattern": pattern,
        "groups": len(per),
        "images_grouped": grouped,
        "crossing_count": len(crossing),
        "crossing": dict(list(crossing.items())[:CROSSING_SHOWN]),
    }


def export_list(cat: Catalog, man: Manifest, file: str | os.PathLike[str], real: str | None = None) -> dict[str, Any]:
    """Write the dataset's assignment as `path,label,split` rows to `file` (locally: to `real`, the
    file outputs.check_file allowed, whole or not at all); {file, images}."""
    order = {s: i for i, s in enumerate(man.splits)}
    rows = [r for r, state in enumerate(cat.states) if state in (CONVERTED, SKIPPED, DROPPED)]
    rows.sort(key=lambda r: (order.get(cat.splits[r], len(order)), cat.splits[r], cat.rels[r]))
    buf = io.StringIO()
    out = csv.writer(buf, lineterminator="\n")
    out.writerow(["path", "label", "split"])
    for r in rows:
        out.writerow([_rel(cat, r), cat.classes[r], cat.splits[r]])
    target = os.fspath(file)
    data = buf.getvalue().encode("utf-8", "surrogateescape")
    if not fs.is_remote(target):
        outputs.write_file(real or target, option("export_list", target), data)
        return {"file": target, "images": len(rows)}
    try:
        fs.write_bytes(target, data)
    except OSError as e:
        raise UsageError(f"cannot write {option('export_list', target)}: {e.strerror or e}") from None
    return {"file": target, "images": len(rows)}
