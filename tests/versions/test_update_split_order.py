"""Split order after `update` and `compact`: dataset.json and TFDS's dataset_info.json list the splits
as a fresh `convert` of the same input does (split folders sorted by name as the walk lists them;
`--split` fractions in the order given), also when an update adds a split that sorts before the
others, or a split loses all its images. Real CLI in-process, real Pillow images."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from helpers import make_dataset, natural_image, save
from test_compact import _files, _manifest


def _splits(out: Path) -> list[str]:
    return list(json.loads((out / "dataset.json").read_text())["splits"])


def _ordered(m: object) -> object:
    """A manifest with every dict as a list of items, so `==` compares key order too (as the bytes do)."""
    if isinstance(m, dict):
        return [(k, _ordered(v)) for k, v in m.items()]
    if isinstance(m, list):
        return [_ordered(v) for v in m]
    return m


def _fresh(cli, src: Path, out: Path, fresh: Path, *opts: str) -> None:
    shutil.rmtree(fresh, ignore_errors=True)
    assert cli("convert", src, fresh, "--labels", out / "labels.txt", *opts).exit_code == 0


def _update_then_compact(cli, src: Path, out: Path, fresh: Path, *opts: str) -> None:
    """`update` lists the splits as a fresh convert does; `compact` then equals it file for file,
    dataset.json in key order apart from the lineage."""
    r = cli("update", src, out)
    assert r.exit_code == 0, r.output
    _fresh(cli, src, out, fresh, *opts)
    assert _splits(out) == _splits(fresh)
    m_up, m_fresh = json.loads((out / "dataset.json").read_text()), json.loads((fresh / "dataset.json").read_text())
    assert list(m_up["options"]["shards"]) == list(m_fresh["options"]["shards"])
    assert m_up["skipped"] == m_fresh["skipped"]  # the images convert skips, in its order
    info_up, info_fresh = (json.loads((d / "dataset_info.json").read_text()) for d in (out, fresh))
    assert [s["name"] for s in info_up["splits"]] == [s["name"] for s in info_fresh["splits"]]  # TFDS's too
    r = cli("compact", out)
    assert r.exit_code == 0, r.output
    a, b = _files(out), _files(fresh)
    assert sorted(a) == sorted(b)
    for name in a:
        assert a[name] == b[name], name
    assert _ordered(_manifest(out)) == _ordered(_manifest(fresh))


def test_a_new_split_folder_that_sorts_first(tmp_path: Path, cli) -> None:
    src, out, fresh = tmp_path / "in", tmp_path / "out", tmp_path / "fresh"
    make_dataset(src / "train", {"a": 4, "b": 3}, size=(16, 12))
    make_dataset(src / "validation", {"a": 2, "b": 2}, seed=1, size=(16, 12))
    (src / "validation" / "b" / "broken.jpg").write_bytes(b"\xff\xd8\xff broken")
    assert cli("convert", src, out).exit_code == 0
    assert _splits(out) == ["train", "validation"]
    make_dataset(src / "test", {"a": 2, "b": 2}, seed=2, size=(16, 12))
    (src / "test" / "a" / "broken.jpg").write_bytes(b"\xff\xd8\xff broken")
    _update_then_compact(cli, src, out, fresh)
    assert _splits(out) == ["test", "train", "validation"]
    # a 'val' folder is the split 'validation', placed where the walk lists 'val' (after 'train')
    shutil.move(src / "validation", src / "val")
    _update_then_compact(cli, src, out, fresh)
    assert _splits(out) == ["test", "train", "validation"]


def test_a_split_folder_that_vanishes(tmp_path: Path, cli) -> None:
    src, out, fresh = tmp_path / "in", tmp_path / "out", tmp_path / "fresh"
    for i, s in enumerate(("test", "train", "validation")):
        make_dataset(src / s, {"a": 2, "b": 2}, seed=i, size=(16, 12))
    assert cli("convert", src, out).exit_code == 0
    assert _splits(out) == ["test", "train", "validation"]
    shutil.rmtree(src / "train")
    _update_then_compact(cli, src, out, fresh)
    assert _splits(out) == ["test", "validation"]
    make_dataset(src / "train", {"a": 2}, seed=5, size=(16, 12))  # back again, between the others
    _update_then_compact(cli, src, out, fresh)
    assert _splits(out) == ["test", "train", "validation"]


def _named(split: str, fractions: dict[str, float], prefix: str, n: int) -> list[str]:
    """`n` file names of class folder a/ that `--split` puts in `split` (chosen by the tool's own
    hash, so the test says which case it builds instead of hoping the hash makes it)."""
    from img2tfrecord.conversion.plan.splits import split_of

    names = (f"{prefix}_{i:03d}.jpg" for i in range(10_000))
    return [n for n in names if split_of(f"a/{n}", 0, fractions) == split][:n]


def test_fractions_keep_their_order_when_a_split_is_empty_then_filled(tmp_path: Path, cli) -> None:
    """`--split test=0.2,train=0.8`: test first, as given, when version 1 had no test image and an
    update brings the first; and a split that loses every image leaves dataset.json as convert does."""
    src, out, fresh = tmp_path / "in", tmp_path / "out", tmp_path / "fresh"
    fractions = {"test": 0.2, "train": 0.8}
    opts = ("--split", "test=0.2,train=0.8", "--split-rule", "hash")  # _named picks files by the hash rule
    for i, name in enumerate(_named("train", fractions, "old", 4)):
        save(natural_image(16, 12, 100 + i), src / "a" / name, quality=90)
    assert cli("convert", src, out, *opts).exit_code == 0
    assert _splits(out) == ["train"]
    tested = [src / "a" / name for name in _named("test", fractions, "new", 2)]
    for i, path in enumerate(tested):
        save(natural_image(16, 12, 200 + i), path, quality=90)
    _update_then_compact(cli, src, out, fresh, *opts)
    assert _splits(out) == ["test", "train"]
    for path in tested:  # every test image removed: the split goes as it goes in a fresh conversion
        path.unlink()
    _update_then_compact(cli, src, out, fresh, *opts)
    assert _splits(out) == ["train"]


def test_compact_orders_splits_from_the_catalog_not_from_dataset_json(tmp_path: Path, cli) -> None:
    """A dataset.json listing its splits in the order updates added them (as `update` wrote it
    before it followed the walk's order) is compacted into the fresh conversion's order."""
    from img2tfrecord.format.manifest import manifest_text

    src, out, fresh = tmp_path / "in", tmp_path / "out", tmp_path / "fresh"
    for i, s in enumerate(("test", "train", "val")):
        make_dataset(src / s, {"a": 2, "b": 2}, seed=i, size=(16, 12))
    assert cli("convert", src, out).exit_code == 0
    assert _splits(out) == ["test", "train", "validation"]
    m = json.loads((out / "dataset.json").read_text())
    m["splits"] = {s: m["splits"][s] for s in ("validation", "train", "test")}
    m["options"]["shards"] = {s: m["options"]["shards"][s] for s in ("validation", "train", "test")}
    (out / "dataset.json").write_text(manifest_text(m))
    assert cli("inspect", out).exit_code == 0
    assert cli("compact", out).exit_code == 0
    _fresh(cli, src, out, fresh)
    a, b = _files(out), _files(fresh)
    assert sorted(a) == sorted(b)
    for name in a:
        assert a[name] == b[name], name
    assert _ordered(_manifest(out)) == _ordered(_manifest(fresh))
