"""The catalog convert writes beside the shards: one row per planned image, true to the shards' bytes."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import xxhash

from helpers import make_dataset
from img2tfrecord.conversion.convert import convert
from img2tfrecord.format import catalog
from img2tfrecord.format.framing import record_spans


def _records_by_offset(shard: Path) -> dict[int, tuple[int, bytes]]:
    """offset -> (framed size, image/filename) of every record, parsed with TensorFlow's proto."""
    import tensorflow as tf

    out = {}
    data = shard.read_bytes()
    for offset, size in record_spans(str(shard)):
        ex = tf.train.Example.FromString(data[offset + 12 : offset + size - 4])
        out[offset] = (size, ex.features.feature["image/filename"].bytes_list.value[0])
    return out


@pytest.mark.parametrize("dedupe", ["report", "drop"])
def test_catalog_rows_match_the_shards(tmp_path: Path, dedupe: str, cli) -> None:
    files = make_dataset(tmp_path / "in", {"a": 9, "b": 8, "c": 5})
    (tmp_path / "in" / "a" / "broken.jpg").write_bytes(b"\xff\xd8\xff not a jpeg")
    (tmp_path / "in" / "b" / "copy.png").write_bytes(files["a"][0].read_bytes())
    out = tmp_path / "out"
    convert(str(tmp_path / "in"), str(out), shards=3, split="train=0.7,validation=0.3", dedupe=dedupe)
    cat = catalog.decode((out / catalog.CATALOG_NAME).read_bytes())
    on_disk = sorted(str(p.relative_to(tmp_path / "in")).encode() for p in (tmp_path / "in").rglob("*") if p.is_file())
    assert sorted(cat.rels) == on_disk
    manifest = json.loads((out / "dataset.json").read_text())
    offsets = cat.offsets()
    states = {}
    for i, rel in enumerate(cat.rels):
        path = tmp_path / "in" / rel.decode()
        st = path.stat()
        assert (cat.sizes[i], cat.mtimes[i]) == (st.st_size, st.st_mtime_ns)
        states[rel.decode()] = catalog.STATE_NAMES[cat.states[i]]
        if cat.states[i] == catalog.SKIPPED:
            assert cat.reasons[i] and cat.shards[i] == "" and cat.digests[i] == catalog.NO_DIGEST
            continue
        assert cat.digests[i] == xxhash.xxh3_128_digest(path.read_bytes())
        if cat.states[i] == catalog.CONVERTED:
            size, filename = _records_by_offset(out / cat.shards[i])[offsets[i]]
            assert size == cat.lengths[i] and filename == rel
            assert cat.shards[i] in {sh["file"] for sh in manifest["splits"][cat.splits[i]]["shards"]}
    assert states["a/broken.jpg"] == "skipped"
    assert (states["b/copy.png"] == "dropped") == (dedupe == "drop")
    converted = sum(s == catalog.CONVERTED for s in cat.states)
    assert converted == sum(sp["records"] for sp in manifest["splits"].values())
    # no reader takes it for a shard: verify passes, and a glob over the folder skips it
    assert cli("inspect", out, "--verify").exit_code == 0
    listed = cli("inspect", str(out / "*"))
    assert listed.exit_code == 0 and catalog.CATALOG_NAME not in listed.output


def test_catalog_bytes_are_deterministic_and_round_trip(tmp_path: Path) -> None:
    make_dataset(tmp_path / "in", {"a": 6, "b": 6})
    for out, workers in (("o1", 1), ("o2", 2)):
        convert(str(tmp_path / "in"), str(tmp_path / out), shards=2, workers=workers)
    data = (tmp_path / "o1" / catalog.CATALOG_NAME).read_bytes()
    assert data == (tmp_path / "o2" / catalog.CATALOG_NAME).read_bytes()
    assert catalog.encode(catalog.decode(data)) == data
    with pytest.raises(catalog.CatalogError):
        catalog.decode(data[:-20])
    with pytest.raises(catalog.CatalogError):
        catalog.decode(b"PK" + data[2:])
    assert os.path.getsize(tmp_path / "o1" / catalog.CATALOG_NAME) < 60 * 12 + 400


def test_verify_says_when_the_catalog_disagrees_with_dataset_json(tmp_path: Path, cli) -> None:
    make_dataset(tmp_path / "in", {"a": 4, "b": 4})
    out = tmp_path / "out"
    convert(str(tmp_path / "in"), str(out), shards=2)
    path = out / catalog.CATALOG_NAME
    cat = catalog.decode(path.read_bytes())
    first = next(i for i, s in enumerate(cat.states) if s == catalog.CONVERTED)
    cat.shards[first] = "train-00007-of-00009"
    path.write_bytes(catalog.encode(cat))
    res = cli("inspect", out, "--verify")
    assert res.exit_code == 1
    assert "lists 1 records in train-00007-of-00009, a shard dataset.json does not list" in res.output
    path.write_bytes(b"garbage")
    res = cli("inspect", out, "--verify")
    assert res.exit_code == 1 and "unreadable: not an img2tfrecord catalog" in res.output


def _rows(n: int) -> catalog.Catalog:
    cat = catalog.Catalog()
    for i in range(n):
        state = catalog.CONVERTED if i % 7 else catalog.SKIPPED
        converted = state == catalog.CONVERTED
        cat.add(
            b"train/c%02d/img_%06d.jpg" % (i % 10, (i * 7919) % n),
            1000 + i,
            1_700_000_000_000_000_000 - 1000 * i,
            i.to_bytes(16, "little") if converted else catalog.NO_DIGEST,
            state,
            "train",
            reason="" if converted else "not an image",
            shard=f"train-{i % 3:05d}-of-00003" if converted else "",
            record=i // 3 if converted else -1,
            length=1016 + i if converted else 0,
            cls=f"c{i % 10:02d}",
            kind=catalog.kind_key("jpeg", "8", None, None) if converted else "",
        )
    return cat


def test_catalog_columns_are_compact_and_keep_their_list_api() -> None:
    """The columns are arrays and blobs (100 M images must catalog on one machine), indexed and set
    like lists by update/compact, and the file they give does not depend on how they are held."""
    import tracemalloc

    tracemalloc.start()
    cat = _rows(20_000)
    held, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert held / len(cat) < 150  # 12 lists of Python objects held ~520 bytes a row
    assert cat.rels[-1] == b"train/c09/img_%06d.jpg" % ((19_999 * 7919) % 20_000)
    assert cat.splits[3] == "train" and cat.shards[0] == "" and cat.records[1] == 0 and cat.lengths[1] == 1017
    assert cat.rels.index(cat.rels[5]) == 5 and cat.digests[1] == (1).to_bytes(16, "little")
    cat.shards[-1], cat.records[-1] = "train-00009-of-00010", 42
    assert catalog.Catalog(**{k: list(getattr(cat, k)) for k in catalog.COLUMNS}) == cat  # columns given as lists
    assert (cat.shards[-1], cat.records[-1]) == ("train-00009-of-00010", 42)
    data = catalog.encode(cat)
    # the tables of the string columns number their values by first row in path order, whatever
    # order the rows were added in: the same rows in another order give the same bytes
    rows = sorted(range(len(cat)), key=lambda r: cat.rels[r])
    other = catalog.Catalog()
    for r in rows:
        other.add(*(getattr(cat, k)[r] for k in ("rels", "sizes", "mtimes", "digests", "states", "splits")))
        for k in ("reasons", "shards", "records", "lengths", "classes", "kinds"):
            getattr(other, k)[-1] = getattr(cat, k)[r]
    assert catalog.encode(other) == data
    back = catalog.decode(data)  # rows in path order
    assert back == other and catalog.encode(back) == data and back != cat


def test_outcome_lengths_and_kinds_are_packed_and_old_journals_load() -> None:
    from array import array

    from img2tfrecord.conversion.write.shards import ShardInfo, ShardOutcome

    lengths = array("q", [16 + 100_000 + i for i in range(500)] + [5 << 32])
    o = ShardOutcome("train", ShardInfo("train-00000-of-00001", 501), lengths=lengths, kinds=["a", "b"])
    o.kind_of = array("I", [i % 2 for i in range(501)])
    d = json.loads(json.dumps(o.to_dict()))
    assert isinstance(d["lengths"], str) and isinstance(d["kind_of"], str)
    assert len(json.dumps(d["lengths"])) < len(json.dumps(list(lengths))) * 1.6  # 8 bytes wide: one is over 4 GB
    back = ShardOutcome.from_dict(d)
    assert list(back.lengths) == list(lengths) and list(back.kind_of) == list(o.kind_of)
    small = ShardOutcome.from_dict(
        d | {"lengths": ShardOutcome("t", o.info, lengths=lengths[:-1]).to_dict()["lengths"]}
    )
    assert list(small.lengths) == list(lengths[:-1])
    old = d | {"lengths": list(lengths), "kind_of": list(o.kind_of)}  # a journal of the version before
    assert ShardOutcome.from_dict(old) == back
    with pytest.raises(ValueError):
        ShardOutcome.from_dict(d | {"lengths": "3:AAAA"})


def _with_column(data: bytes, column: str, blob: bytes, rows: int | None = None) -> bytes:
    """`data` (a catalog file) with one column's stored bytes replaced (and its declared rows)."""
    import struct

    (hlen,) = struct.unpack_from("<I", data, 8)
    header = json.loads(data[12 : 12 + hlen])
    pos, blobs = 12 + hlen, []
    for entry in header["columns"]:
        blobs.append(blob if entry[0] == column else data[pos : pos + entry[2]])
        pos += entry[2]
        entry[2] = len(blobs[-1])
    header["rows"] = header["rows"] if rows is None else rows
    head = json.dumps(header).encode()
    return catalog.MAGIC + struct.pack("<I", len(head)) + head + b"".join(blobs)


def test_a_catalog_that_inflates_past_its_rows_is_refused_before_it_is_inflated() -> None:
    """dataset.catalog is read from any dataset (inspect --verify): 100 KB must not become 100 MB."""
    import tracemalloc
    import zlib

    data = catalog.encode(_rows(2))
    bomb = zlib.compress(b"a" * (100 << 20), 9)
    assert len(bomb) < 200_000
    for column in ("rels", "sizes", "shards"):
        tracemalloc.start()
        with pytest.raises(catalog.CatalogError, match=f"its {column} column inflates past"):
            catalog.decode(_with_column(data, column, bomb))
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert peak < 5 << 20
    # rows it declares but has no digests for (16 raw bytes a row) are refused as such
    with pytest.raises(catalog.CatalogError, match="declares 10000000 rows"):
        catalog.decode(_with_column(data, "rels", bomb, rows=10_000_000))
    with pytest.raises(catalog.CatalogError, match="its sizes column is cut short"):
        catalog.decode(_with_column(data, "sizes", zlib.compress(bytes(16))[:-6]))
    assert catalog.decode(_with_column(data, "rels", zlib.compress(b"\0".join(catalog.decode(data).rels)))).rels
