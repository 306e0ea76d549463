"""A catalog that does not match its shards is refused: dataset.json records the catalog's size and
checksum, `inspect --verify` checks each record's image/filename against its catalog row, and
`update` and `compact` refuse a catalog that fails, in one line naming the convert that rebuilds it
(run here exactly as printed)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from helpers import make_dataset
from img2tfrecord import convert
from img2tfrecord.format import catalog


def _swap_two_records(out: Path) -> tuple[bytes, bytes]:
    """Swap the record numbers of two converted rows of one shard (every count still agrees)."""
    path = out / catalog.CATALOG_NAME
    cat = catalog.decode(path.read_bytes())
    rows = [r for r in range(len(cat)) if cat.states[r] == catalog.CONVERTED]
    a = rows[0]
    b = next(r for r in rows[1:] if cat.shards[r] == cat.shards[a])
    cat.records[a], cat.records[b] = cat.records[b], cat.records[a]
    path.write_bytes(catalog.encode(cat))
    return cat.rels[a], cat.rels[b]


@pytest.fixture
def swapped(tmp_path: Path) -> tuple[Path, Path, tuple[bytes, bytes]]:
    src, out = tmp_path / "in", tmp_path / "out"
    make_dataset(src, {"a": 5, "b": 5}, size=(16, 12))
    convert(src, out, shards=2, index=True, workers=1)
    return src, out, _swap_two_records(out)


def test_dataset_json_records_the_catalog_checksum(tmp_path: Path) -> None:
    src, out = tmp_path / "in", tmp_path / "out"
    make_dataset(src, {"a": 2}, size=(16, 12))
    convert(src, out, workers=1)
    entry = json.loads((out / "dataset.json").read_text())["catalog"]
    data = (out / catalog.CATALOG_NAME).read_bytes()
    import xxhash

    assert entry == {"file": "dataset.catalog", "bytes": len(data), "xxh3_128": xxhash.xxh3_128_hexdigest(data)}


def test_verify_finds_two_swapped_catalog_rows(swapped, cli) -> None:
    src, out, (a, b) = swapped
    r = cli("inspect", out, "--verify")
    assert r.exit_code == 1
    found = [line for line in r.stdout.splitlines() if "the catalog says" in line]
    assert len(found) == 2, r.stdout
    assert f"image/filename {b.decode()!r}, the catalog says {a.decode()!r}" in r.stdout
    assert "dataset.catalog: its xxh3_128 is not the one dataset.json records" in r.stdout


def test_verify_finds_swapped_rows_even_with_the_checksum_made_to_agree(swapped, cli) -> None:
    src, out, _ = swapped
    manifest = json.loads((out / "dataset.json").read_text())
    from img2tfrecord.format.manifest import catalog_entry

    manifest["catalog"] = catalog_entry((out / catalog.CATALOG_NAME).read_bytes())
    (out / "dataset.json").write_text(json.dumps(manifest))
    r = cli("inspect", out, "--verify")
    assert r.exit_code == 1 and r.stdout.count("the catalog says") == 2, r.stdout
    assert "xxh3_128 is not" not in r.stdout


def test_update_and_compact_refuse_it_and_the_advised_convert_rebuilds_it(swapped, cli) -> None:
    src, out, (a, _) = swapped
    (src / a.decode()).unlink()  # the case: update removed the other image's record
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    for args in (
        ["update", src, out],
        ["update", src, out, "--dry-run"],
        ["compact", out],
        ["compact", out, "--dry-run"],
    ):
        r = cli(*args)
        assert r.exit_code == 1, (args, r.output)
        line = r.stderr.strip()
        assert line.count("\n") == 0 and "the catalog does not match the shards" in line, (args, line)
        assert "Traceback" not in r.output
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # nothing written
    advice = cli("update", src, out).stderr.strip()
    assert advice.endswith(f"run: img2tfrecord convert {src} {out} --like {out} --overwrite")
    command = shlex.split(advice.split("run: ", 1)[1])
    assert command[:2] == ["img2tfrecord", "convert"]
    r = cli(*command[1:])  # exactly as printed
    assert r.exit_code == 0, r.output
    assert cli("inspect", out, "--verify").exit_code == 0
    r = cli("update", src, out)
    assert r.exit_code == 0 and "up to date" in r.stdout


def test_compact_names_the_input_as_a_placeholder(swapped, cli) -> None:
    _, out, _ = swapped
    line = cli("compact", out).stderr.strip()
    assert (
        f"run: img2tfrecord convert INPUT {out} --like {out} --overwrite (INPUT: the folder the dataset was converted from)"
        in line
    )


def test_a_split_renamed_in_the_catalog_is_refused(tmp_path: Path, cli) -> None:
    src, out = tmp_path / "in", tmp_path / "out"
    make_dataset(src, {"a": 3, "b": 3}, size=(16, 12))
    convert(src, out, split={"train": 0.5, "validation": 0.5}, workers=1)
    path = out / catalog.CATALOG_NAME
    cat = catalog.decode(path.read_bytes())
    cat.splits.values[cat.splits.lookup["validation"]] = "test"
    path.write_bytes(catalog.encode(cat))
    assert (
        "puts records of validation-00000-of-00001 in the split test; dataset.json in validation"
        in cli("inspect", out, "--verify").stdout
    )
    r = cli("update", src, out)
    assert r.exit_code == 1 and "the catalog does not match the shards" in r.stderr
