"""`inspect --verify` of a dataset's catalog (format.catalog): readable, and true to dataset.json.

`update` trusts the catalog to say which record of which shard is which image; a catalog that
disagrees with the manifest (a shard it does not know, another record count) would make it copy
the wrong records, so verify says so first.
"""

from __future__ import annotations

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
    for problem in catalog.count_problems(cat, man.splits):
        sink.append(Problem(str(path), None, None, problem))
