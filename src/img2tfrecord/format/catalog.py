"""The catalog: per-image facts of a dataset, beside its shards, so `update` can tell what changed.

One row per image the conversion saw: its path relative to the input (the file system's bytes),
size and st_mtime_ns from the walk, the xxh3-128 digest of its bytes, its state (converted,
skipped with a reason, or dropped as a duplicate), and for a converted image its split, shard and
record number and the record's framed length. A record's offset in its (uncompressed) shard is
the sum of the lengths of the shard's earlier records (`Catalog.offsets`), so it is not stored.

The file (`dataset.catalog`) is binary columns, each compressed on its own: rows sorted by path
(neighbouring paths share their folders, which zlib folds away), integers stored as byte planes
(the high bytes of sizes and mtimes are nearly constant), mtimes as differences from the previous
row, digests raw (they do not compress). Measured on the 8,000-image bench set: 25.0 bytes an
image on disk, 16 of them the digest (README "Keeping a dataset up to date"). The name matches no shard pattern (`SPLIT-NNNNN-of-NNNNN`), no
TFDS template and no index, and ends in a suffix `layout.is_shard_candidate` passes over, so no
reader and no `inspect out/*` takes it for a shard.

    magic b"I2TCATv1" | uint32 header length | header (JSON) | column blobs, in the header's order
"""

from __future__ import annotations

import json
import struct
import zlib
from dataclasses import dataclass, field
from typing import Any, NamedTuple

CATALOG_NAME = "dataset.catalog"
MAGIC = b"I2TCATv1"
CONVERTED, SKIPPED, DROPPED = 0, 1, 2
STATE_NAMES = ("converted", "skipped", "dropped")
NO_DIGEST = bytes(16)


class Kind(NamedTuple):
    """What a record stores, as dataset.json counts it: format, bits per sample, why transcoded, why fewer bits."""

    fmt: str
    depth: str
    transcoded: str
    reduced: str


def kind_key(fmt: str, depth: str, transcoded: str | None, reduced: str | None) -> str:
    """A record's `Kind` as one string (the catalog's `kinds` column holds these)."""
    return "\t".join((fmt, depth, transcoded or "", reduced or ""))


def kind_of(key: str) -> Kind:
    parts = (key.split("\t") + ["", "", "", ""])[:4]
    return Kind(*parts)


TABLED = ("reasons", "splits", "shards", "classes", "kinds")  # string columns: a table of values + an index per row


class CatalogError(ValueError):
    """A catalog that cannot be read; the message says why."""


@dataclass
class Catalog:
    """The rows, column by column (all columns have one entry per row, in row order)."""

    rels: list[bytes] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    mtimes: list[int] = field(default_factory=list)
    digests: list[bytes] = field(default_factory=list)  # 16 bytes, NO_DIGEST when not taken
    states: list[int] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)  # "" unless skipped
    splits: list[str] = field(default_factory=list)  # "" for an image of no split (skipped: its planned split)
    shards: list[str] = field(default_factory=list)  # "" unless converted
    records: list[int] = field(default_factory=list)  # record number in its shard, -1 unless converted
    lengths: list[int] = field(default_factory=list)  # framed record size (data + 16), 0 unless converted
    classes: list[str] = field(default_factory=list)  # the class name (image/class/text)
    kinds: list[str] = field(default_factory=list)  # kind_key of the record, "" unless converted
    has_digests: bool = True

    def __len__(self) -> int:
        return len(self.rels)

    def add(
        self,
        rel: bytes,
        size: int,
        mtime: int,
        digest: bytes,
        state: int,
        split: str,
        reason: str = "",
        shard: str = "",
        record: int = -1,
        length: int = 0,
        cls: str = "",
        kind: str = "",
    ) -> None:
        self.rels.append(rel)
        self.sizes.append(size)
        self.mtimes.append(mtime)
        self.digests.append(digest)
        self.states.append(state)
        self.reasons.append(reason)
        self.splits.append(split)
        self.shards.append(shard)
        self.records.append(record)
        self.lengths.append(length)
        self.classes.append(cls)
        self.kinds.append(kind)

    def offsets(self) -> list[int]:
        """Each converted row's byte offset in its shard (uncompressed), -1 for the others."""
        order = sorted(
            (i for i, s in enumerate(self.states) if s == CONVERTED), key=lambda i: (self.shards[i], self.records[i])
        )
        out, shard, pos = [-1] * len(self), None, 0
        for i in order:
            if self.shards[i] != shard:
                shard, pos = self.shards[i], 0
            out[i] = pos
            pos += self.lengths[i]
        return out


def _planes(values: list[int], dtype: str) -> bytes:
    """Little-endian integers as byte planes (all lowest bytes, then all next ones, ...)."""
    import numpy as np  # here: its import starts threads and costs ~0.1 s, which `inspect` need not pay

    arr = np.asarray(values, dtype=dtype)
    return arr.view(np.uint8).reshape(-1, arr.dtype.itemsize).T.tobytes() if len(arr) else b""


def _unplanes(data: bytes, dtype: str, n: int) -> list[int]:
    import numpy as np

    width = np.dtype(dtype).itemsize
    if len(data) != n * width:
        raise CatalogError(f"a column holds {len(data)} bytes, {n * width} expected")
    if not n:
        return []
    return np.frombuffer(data, np.uint8).reshape(width, n).T.copy().view(dtype).ravel().tolist()


def encode(cat: Catalog) -> bytes:
    """The catalog file's bytes (rows sorted by path: the same rows give the same bytes)."""
    order = sorted(range(len(cat)), key=cat.rels.__getitem__)

    def col(values: list[Any]) -> list[Any]:
        return [values[i] for i in order]

    mtimes = col(cat.mtimes)
    deltas = [b - a for a, b in zip([0] + mtimes[:-1], mtimes)]
    index: dict[str, dict[str, int]] = {k: {} for k in TABLED}
    coded = {k: [index[k].setdefault(v, len(index[k])) for v in col(getattr(cat, k))] for k in index}
    columns = {
        "rels": b"\0".join(col(cat.rels)),
        "sizes": _planes(col(cat.sizes), "<u8"),
        "mtimes": _planes(deltas, "<i8"),
        "states": bytes(col(cat.states)),
        **{k: _planes(coded[k], "<u4") for k in TABLED},
        "records": _planes(col(cat.records), "<i4"),
        "lengths": _planes(col(cat.lengths), "<u8"),
        "digests": b"".join(col(cat.digests)),
    }
    blobs, described = [], []
    for name, raw in columns.items():
        stored = raw if name == "digests" else zlib.compress(raw, 9)
        blobs.append(stored)
        described.append([name, "raw" if name == "digests" else "zlib", len(stored)])
    header = {
        "rows": len(cat),
        "has_digests": cat.has_digests,
        **{k: list(index[k]) for k in TABLED},
        "columns": described,
    }
    head = json.dumps(header, ensure_ascii=False, separators=(",", ":")).encode()
    return MAGIC + struct.pack("<I", len(head)) + head + b"".join(blobs)


def decode(data: bytes) -> Catalog:
    """A catalog from its file's bytes; CatalogError when they are not one."""
    if not data.startswith(MAGIC) or len(data) < len(MAGIC) + 4:
        raise CatalogError("not an img2tfrecord catalog (bad magic)")
    (hlen,) = struct.unpack_from("<I", data, len(MAGIC))
    pos = len(MAGIC) + 4
    try:
        header = json.loads(data[pos : pos + hlen])
        n = int(header["rows"])
        pos += hlen
        raw: dict[str, bytes] = {}
        for name, codec, stored in header["columns"]:
            blob = data[pos : pos + stored]
            pos += stored
            raw[name] = zlib.decompress(blob) if codec == "zlib" else blob
        rels = raw["rels"].split(b"\0") if n else []
        if len(rels) != n or len(raw["states"]) != n or len(raw["digests"]) != 16 * n:
            raise CatalogError("its columns do not hold one entry per row")
        deltas = _unplanes(raw["mtimes"], "<i8", n)
        mtimes, t = [], 0
        for d in deltas:
            t += d
            mtimes.append(t)
        lookups = {k: header[k] for k in TABLED}
        coded = {k: _unplanes(raw[k], "<u4", n) for k in TABLED}
        digests = raw["digests"]
        return Catalog(
            rels=rels,
            sizes=_unplanes(raw["sizes"], "<u8", n),
            mtimes=mtimes,
            digests=[digests[i * 16 : i * 16 + 16] for i in range(n)],
            states=list(raw["states"]),
            **{k: [lookups[k][i] for i in coded[k]] for k in TABLED},
            records=_unplanes(raw["records"], "<i4", n),
            lengths=_unplanes(raw["lengths"], "<u8", n),
            has_digests=bool(header.get("has_digests", True)),
        )
    except (KeyError, TypeError, ValueError, IndexError, zlib.error) as e:
        if isinstance(e, CatalogError):
            raise
        raise CatalogError(f"a damaged catalog: {e}") from None
