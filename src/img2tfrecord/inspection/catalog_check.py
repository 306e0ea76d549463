"""`inspect --verify` of a dataset's catalog (format.catalog): readable, and true to dataset.json.

`update` trusts the catalog to say which record of which shard is which image; a catalog that
disagrees with the manifest (a shard it does not know, another record count) would make it copy
the wrong records, so verify says so first.
"""

from __future__ import annotations

from collections import Counter

from img2tfrecord.format import catalog
from img2tfrecord.format.layout import Manifest
from img2tfrecord.inspection.checks import Problem


def check_catalog(man: Manifest, sink: list[Problem]) -> None:
    """Problems of `man.dir`'s catalog, if it has one (datasets of older versions have none)."""
    path = man.dir / catalog.CATALOG_NAME
    if not path.is_file():
        return
    try:
        cat = catalog.decode(path.read_bytes())
    except (OSError, catalog.CatalogError) as e:
        sink.append(Problem(str(path), None, None, f"unreadable: {e}"))
        return
    listed = {s["file"]: int(s.get("records") or 0) for sp in man.splits.values() for s in sp.get("shards") or []}
    held = Counter(cat.shards[r] for r in range(len(cat)) if cat.states[r] == catalog.CONVERTED)
    for name in sorted(set(listed) | set(held)):
        if name not in listed:
            sink.append(
                Problem(
                    str(path), None, None, f"lists {held[name]} records in {name}, a shard dataset.json does not list"
                )
            )
        elif held.get(name, 0) != listed[name]:
            sink.append(
                Problem(
                    str(path),
                    None,
                    None,
                    f"lists {held.get(name, 0)} records in {name}; dataset.json says {listed[name]}",
                )
            )
