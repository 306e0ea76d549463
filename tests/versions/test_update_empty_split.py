"""A split whose every image is skipped (or, with `--dedupe drop`, dropped): `update` lists it as a
fresh `convert` of the same input does (0 records, class counts of 0, the same shards of no record,
indexes and TFDS metadata), `load()` and `inspect --verify` read both alike, and `compact` then
equals that conversion file for file. Real CLI in-process, real Pillow images, pre-split folders."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from helpers import natural_image, save
from test_compact import _files, _manifest

BROKEN = b"\xff\xd8\xff\xe0 not a JPEG"
CASES = {
    "plain": (),
    "index": ("--index",),
    "gzip-3-shards": ("--compression", "gzip", "--shards", "train=1,validation=3"),
    "drop": ("--dedupe", "drop"),
}


def _tree(src: Path, n_validation: int = 3) -> list[Path]:
    """train/ of 3 images, validation/ of `n_validation`: the validation paths."""
    for i in range(3):
        save(natural_image(16, 12, 10 + i), src / "train" / "a" / f"t{i}.jpg", quality=90)
    return [save(natural_image(16, 12, 20 + i), src / "validation" / "a" / f"v{i}.jpg") for i in range(n_validation)]


def _without_version(m: dict) -> dict:
    for sp in m["splits"].values():
        for sh in sp["shards"]:
            sh.pop("version")
    return m


def _count(out: Path, split: str) -> int:
    from img2tfrecord import load

    return sum(1 for _ in load(out, split, image_size=8))


def _as_fresh(cli, src: Path, out: Path, fresh: Path, *opts: str) -> dict:
    """`update`, then a fresh convert of the same input: the same splits (records, class counts, shard
    entries), skips, shards, indexes, labels and TFDS files; both read alike. The update's dataset.json."""
    r = cli("update", src, out)
    assert r.exit_code == 0, r.output
    shutil.rmtree(fresh, ignore_errors=True)
    assert cli("convert", src, fresh, "--labels", out / "labels.txt", *opts).exit_code == 0
    m_up, m_fresh = (_without_version(json.loads((d / "dataset.json").read_text())) for d in (out, fresh))
    assert json.dumps(m_up["splits"]) == json.dumps(m_fresh["splits"])  # key order too
    assert m_up["skipped"] == m_fresh["skipped"]
    assert m_up["duplicates"] == m_fresh["duplicates"]
    a, b = (_files(d) for d in (out, fresh))
    a.pop("dataset.catalog"), b.pop("dataset.catalog")  # rows in the update's order until compact
    assert sorted(a) == sorted(b)
    for name in a:
        assert a[name] == b[name], name
    for d in (out, fresh):
        r = cli("inspect", d, "--verify")
        assert r.exit_code == 0, r.output
    for s in m_fresh["splits"]:
        assert _count(out, s) == _count(fresh, s) == m_fresh["splits"][s]["records"]
    return m_up


def _compacts_to_fresh(cli, out: Path, fresh: Path) -> None:
    assert cli("compact", out).exit_code == 0
    a, b = _files(out), _files(fresh)
    assert sorted(a) == sorted(b)
    for name in a:
        assert a[name] == b[name], name
    assert json.dumps(_manifest(out)) == json.dumps(_manifest(fresh))


@pytest.mark.parametrize("case", list(CASES))
def test_a_split_whose_images_all_break_stays_listed_as_convert_lists_it(tmp_path: Path, cli, case: str) -> None:
    opts = CASES[case]
    src, out, fresh = tmp_path / "in", tmp_path / "out", tmp_path / "fresh"
    validation = _tree(src)
    assert cli("convert", src, out, *opts).exit_code == 0
    train = sorted((src / "train" / "a").iterdir())
    for i, path in enumerate(validation):  # with --dedupe drop: copies of a train image, dropped
        path.write_bytes(train[0].read_bytes() if case == "drop" else BROKEN + bytes(i))
    m = _as_fresh(cli, src, out, fresh, *opts)
    assert m["splits"]["validation"]["records"] == 0 and m["splits"]["validation"]["class_counts"] == {"a": 0}
    want = 3 if "gzip" in case else 1  # convert's: as many as planned, one with --index
    assert len(m["splits"]["validation"]["shards"]) == want
    # an update of train alone (an image removed: its shard rewritten as convert writes it) links
    # the split's empty shards as they are (same inode, same version)
    first = out / m["splits"]["validation"]["shards"][0]["file"]
    inode = first.stat().st_ino
    train[-1].unlink()
    m2 = _as_fresh(cli, src, out, fresh, *opts)
    assert first.stat().st_ino == inode
    assert m2["splits"]["validation"]["shards"] == m["splits"]["validation"]["shards"]
    _compacts_to_fresh(cli, out, fresh)


def test_a_new_split_folder_of_one_broken_image(tmp_path: Path, cli) -> None:
    src, out, fresh = tmp_path / "in", tmp_path / "out", tmp_path / "fresh"
    _tree(src, 2)
    assert cli("convert", src, out).exit_code == 0
    (src / "test" / "a").mkdir(parents=True)
    (src / "test" / "a" / "broken.jpg").write_bytes(BROKEN)
    m = _as_fresh(cli, src, out, fresh)
    assert list(m["splits"]) == ["test", "train", "validation"]
    assert m["splits"]["test"]["records"] == 0 and len(m["splits"]["test"]["shards"]) == 1
    info = json.loads((out / "dataset_info.json").read_text())
    assert [s["name"] for s in info["splits"]] == ["test", "train", "validation"]
    _compacts_to_fresh(cli, out, fresh)


@pytest.mark.parametrize("opts", [(), ("--index",)])
def test_an_empty_split_that_gets_a_good_image_again(tmp_path: Path, cli, opts: tuple[str, ...]) -> None:
    """convert's shard of no record goes when the split has records again: the shards a fresh
    convert writes (validation-00000-of-00001), not an empty one beside the new one."""
    src, out, fresh = tmp_path / "in", tmp_path / "out", tmp_path / "fresh"
    validation = _tree(src, 2)
    for i, path in enumerate(validation):
        path.write_bytes(BROKEN + bytes(i))
    assert cli("convert", src, out, *opts).exit_code == 0
    assert json.loads((out / "dataset.json").read_text())["splits"]["validation"]["records"] == 0
    save(natural_image(16, 12, 50), validation[0], quality=90)
    save(natural_image(16, 12, 51), src / "validation" / "a" / "v9.jpg", quality=90)
    m = _as_fresh(cli, src, out, fresh, *opts)
    assert m["splits"]["validation"]["records"] == 2
    assert [sh["file"] for sh in m["splits"]["validation"]["shards"]] == ["validation-00000-of-00001"]
    _compacts_to_fresh(cli, out, fresh)
