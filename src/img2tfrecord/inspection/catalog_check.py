"""`inspect --verify` of a dataset's catalog (format.catalog): readable, true to dataset.json, and
naming each record's image as the record does.

`update` trusts the catalog to say which record of which shard is which image; a catalog that
disagrees with the manifest (a shard it does not know, another record count, bytes other than the
checksum dataset.json records) would make it copy the wrong records, so verify says so first. And
as verify reads every record anyway, it compares each one's `image/filename` with its catalog row
(`Loaded.names`): two rows whose record numbers were swapped agree on every count.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from img2tfrecord.format import catalog
from img2tfrecord.format.layout import Manifest
from img2tfrecord.format.manifest import catalog_checksum_problem
from img2tfrecord.format.naming import SPLIT_DIR_NAMES
from img2tfrecord.format.schema import utf8_text
from img2tfrecord.inspection.checks import Problem

# A split folder's name -> its split (format.naming.SPLIT_DIR_NAMES, as the walk takes them): a row
# of a dataset converted from split folders holds the image's path below INPUT (`val/cat/1.jpg`),
# its record the path below the split folder (`cat/1.jpg`).


@dataclass
class Loaded:
    """A dataset's catalog as verify reads it: the problems found reading it, and per shard the
    paths of its records (catalog rows), by record number."""

    path: str
    problems: list[str] = field(default_factory=list)
    names: dict[str, list[bytes | None]] = field(default_factory=dict)
    splits: dict[str, str] = field(default_factory=dict)  # shard -> the split its catalog rows name

    def name_problem(self, shard: str, record: int, filename: str | None) -> str | None:
        """How a record's image/filename differs from its catalog row (None: the same, or no catalog)."""
        rows = self.names.get(shard)
        if rows is None:
            return None
        rel = rows[record] if record < len(rows) else None
        want = None if rel is None else utf8_text(rel.decode("utf-8", "surrogateescape"))
        if want == filename:
            return None
        folder, _, below = (want or "").partition("/")
        if below == filename and SPLIT_DIR_NAMES.get(folder.lower()) == self.splits.get(shard):
            return None
        said = "no record" if want is None else repr(want)
        return f"image/filename {filename!r}, the catalog says {said}: the catalog does not match the shards"


def load_catalog(man: Manifest) -> Loaded | None:
    """`man.dir`'s catalog, if it has one (datasets of older versions have none)."""
    path, source = man.dir / catalog.CATALOG_NAME, man.at(catalog.CATALOG_NAME)  # read where the reader holds it
    if not source.is_file():
        return None
    out = Loaded(str(path))
    try:
        data = source.read_bytes()
        cat = catalog.decode(data)
    except (OSError, catalog.CatalogError) as e:
        out.problems.append(f"unreadable: {e}")
        return out
    out.problems += catalog.count_problems(cat, man.splits)
    if wrong := catalog_checksum_problem(man.data, data):
        out.problems.append(wrong)
    codes, names, records = cat.shards.codes, cat.shards.values, cat.records
    for r, state in enumerate(cat.states):
        if state == catalog.CONVERTED:
            rows = out.names.setdefault(names[codes[r]], [])
            out.splits.setdefault(names[codes[r]], cat.splits[r])
            n = records[r]
            if 0 <= n < 1 << 31:
                rows.extend([None] * (n + 1 - len(rows)))
                rows[n] = cat.rels[r]
    return out


def check_catalog(loaded: Loaded | None, sink: list[Problem]) -> None:
    """The problems `load_catalog` found, into `sink`."""
    if loaded is not None:
        for problem in loaded.problems:
            sink.append(Problem(loaded.path, None, None, problem))
