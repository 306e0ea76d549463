"""`update` of a `--dedupe drop` dataset keeps the copy a fresh `convert --dedupe drop` keeps.

Every case runs the real CLI in-process on images made with Pillow, then checks the updated
dataset against a fresh conversion of the same input (the same records per split, the same
duplicate report) and, after `compact`, every file byte for byte (dataset.json apart from its
lineage), as tests/versions/test_compact.py does for the other options.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from helpers import make_dataset, natural_image, read_records, save
from img2tfrecord.conversion.convert import convert
from img2tfrecord.conversion.plan.splits import order_key, split_of
from img2tfrecord.conversion.versions.update import update
from img2tfrecord.errors import Interrupted
from img2tfrecord.format.option_values import parse_split_spec

SPLIT = "train=0.6,validation=0.4"
# the hash rule: an image's split is split_of(path), so the tests can name where each copy goes
DROP = ("--dedupe", "drop", "--split", SPLIT, "--split-rule", "hash", "--shards", "2")
LINEAGE = ("version", "parent", "created", "history")


def _plan_place(rel: str, seed: int = 0) -> tuple[int, int]:
    """Where convert's plan puts `rel`: (split in the plan's order, hash): the first copy is kept."""
    fractions = parse_split_spec(SPLIT)
    return list(fractions).index(split_of(rel, seed, fractions)), order_key(rel, seed)


def _name(folder: Path, stem: str, suffix: str, before: str | None = None, after: str | None = None) -> Path:
    """A file name in `folder` whose plan place is before `before` / after `after` (rel paths)."""
    for n in range(1000):
        rel = f"{folder.name}/{stem}{n}{suffix}"
        place = _plan_place(rel)
        if (before is None or place < _plan_place(before)) and (after is None or place > _plan_place(after)):
            return folder / f"{stem}{n}{suffix}"
    raise AssertionError("no such name")


def _rel(src: Path, p: Path) -> str:
    return p.relative_to(src).as_posix()


def _ok(res: Any) -> Any:
    assert res.exit_code == 0, res.output
    return res


def _update(cli: Any, src: Path, out: Path, *extra: str) -> dict[str, Any]:
    res = _ok(cli("update", src, out, "--json", *extra))
    return json.loads(res.stdout)


def _manifest(out: Path) -> dict[str, Any]:
    m = json.loads((out / "dataset.json").read_text())
    for k in LINEAGE:
        m.pop(k, None)
    m["options"].pop("labels")  # the fresh run was given --labels; the dataset was not
    for sp in m["splits"].values():
        for sh in sp["shards"]:
            sh.pop("version", None)
    return m


def _records(out: Path) -> dict[str, list[tuple[bytes, bytes, int]]]:
    """Per split, its records as (filename, encoded bytes, label), in no particular order."""
    per: dict[str, list[tuple[bytes, bytes, int]]] = {}
    for r in read_records(out):
        per.setdefault(r["shard"].split("-")[0], []).append((r["filename"], r["encoded"], int(r["label"])))
    return {s: sorted(v) for s, v in per.items()}


def _fresh(cli: Any, src: Path, out: Path, fresh: Path, opts: tuple[str, ...]) -> Path:
    shutil.rmtree(fresh, ignore_errors=True)
    _ok(cli("convert", src, fresh, "--labels", out / "labels.txt", *opts))
    return fresh


def _like_fresh(cli: Any, src: Path, out: Path, fresh: Path, opts: tuple[str, ...] = DROP) -> dict[str, Any]:
    """The updated dataset holds what a fresh conversion holds; after compact, byte for byte."""
    _fresh(cli, src, out, fresh, opts)
    assert _ok(cli("inspect", out, "--verify"))
    assert _records(out) == _records(fresh)
    ours, theirs = _manifest(out)["duplicates"], _manifest(fresh)["duplicates"]
    assert sorted(map(str, ours["dropped"])) == sorted(map(str, theirs["dropped"]))
    assert sorted(sorted(g["files"]) for g in ours["groups"]) == sorted(sorted(g["files"]) for g in theirs["groups"])
    _ok(cli("compact", out))
    a = {p.name: p.read_bytes() for p in sorted(out.iterdir()) if p.name != "dataset.json"}
    b = {p.name: p.read_bytes() for p in sorted(fresh.iterdir()) if p.name != "dataset.json"}
    assert sorted(a) == sorted(b)
    for name in a:
        assert a[name] == b[name], name
    assert _manifest(out) == _manifest(fresh)
    return theirs


def _dataset(tmp_path: Path) -> tuple[Path, Path, Path, dict[str, list[Path]]]:
    src, out, fresh = tmp_path / "in", tmp_path / "out", tmp_path / "fresh"
    files = make_dataset(src, {"a": 5, "b": 5}, size=(16, 12))
    return src, out, fresh, files


def test_a_new_copy_of_an_old_image_is_dropped_or_displaces_it_as_convert_decides(tmp_path: Path, cli) -> None:
    src, out, fresh, files = _dataset(tmp_path)
    _ok(cli("convert", src, out, *DROP))
    old = files["a"][1]
    # a copy that comes after the old image in plan order: dropped, no shard rewritten
    later = _name(src / "b", "later", old.suffix, after=_rel(src, old))
    shutil.copy(old, later)
    s = _update(cli, src, out)
    assert s["dedupe"] == {"dropped": 1, "displaced": 0, "restored": 0}
    assert s["shards_rewritten"] == 0
    assert s["duplicates"]["dropped"] == [
        {
            "path": _rel(src, later),
            "split": split_of(_rel(src, later), 0, parse_split_spec(SPLIT)),
            "duplicate_of": _rel(src, old),
        }
    ]
    _like_fresh(cli, src, out, fresh)
    # a copy that comes before it: kept, and the old record leaves its shard (dropped, as convert would)
    earlier = _name(src / "b", "earlier", old.suffix, before=_rel(src, old))
    shutil.copy(old, earlier)
    s = _update(cli, src, out)
    assert s["dedupe"] == {"dropped": 0, "displaced": 1, "restored": 0}  # `old`; `later` stays dropped
    assert s["shards_rewritten"] >= 1
    dropped = {d["path"]: d["duplicate_of"] for d in s["duplicates"]["dropped"]}
    assert dropped == {_rel(src, old): _rel(src, earlier), _rel(src, later): _rel(src, earlier)}
    theirs = _like_fresh(cli, src, out, fresh)
    assert {d["path"] for d in theirs["dropped"]} == {_rel(src, old), _rel(src, later)}


def test_two_new_copies_of_each_other(tmp_path: Path, cli) -> None:
    src, out, fresh, files = _dataset(tmp_path)
    _ok(cli("convert", src, out, *DROP, "--index"))
    one = save(natural_image(18, 14, 9001), src / "a" / "new_one.png")
    shutil.copy(one, src / "b" / "new_two.png")
    shutil.copy(one, src / "b" / "new_three.png")
    s = _update(cli, src, out)
    assert s["dedupe"] == {"dropped": 2, "displaced": 0, "restored": 0}
    assert s["converted_images"] == 3 and len(s["duplicates"]["dropped"]) == 2
    theirs = _like_fresh(cli, src, out, fresh, (*DROP, "--index"))
    assert len(theirs["dropped"]) == 2


def test_removing_the_kept_copy_encodes_the_first_dropped_one(tmp_path: Path, cli) -> None:
    src, out, fresh, files = _dataset(tmp_path)
    for name in ("copy_x.jpg", "copy_y.jpg"):
        shutil.copy(files["a"][2], src / "b" / name)
    _ok(cli("convert", src, out, *DROP))
    dup = json.loads((out / "dataset.json").read_text())["duplicates"]
    kept = dup["dropped"][0]["duplicate_of"]
    assert len(dup["dropped"]) == 2 and all(d["duplicate_of"] == kept for d in dup["dropped"])
    (src / kept).unlink()
    dry = _update(cli, src, out, "--dry-run")
    assert dry["dedupe"]["restored"] == 1 and dry["shards_to_write"] == 1
    text = _ok(cli("update", src, out, "--dry-run")).output
    assert "duplicates (--dedupe drop): 1 dropped copy encoded again (the kept copy left)" in text
    assert "1 still dropped (copies)" in text
    s = _update(cli, src, out)
    assert s["dedupe"] == {"dropped": 0, "displaced": 0, "restored": 1}
    first = dup["dropped"][0]["path"]  # the first dropped copy in plan order: a fresh convert keeps it
    assert [d["duplicate_of"] for d in s["duplicates"]["dropped"]] == [first]
    assert first.encode() in {r["filename"] for r in read_records(out)}
    _like_fresh(cli, src, out, fresh)
    # and the last copy gone too: nothing is dropped any more
    (src / first).unlink()
    s = _update(cli, src, out)
    assert s["dedupe"]["restored"] == 1 and s["duplicates"]["dropped"] == []
    _like_fresh(cli, src, out, fresh)


def test_a_changed_image_becoming_a_copy_and_a_kept_copy_changing(tmp_path: Path, cli) -> None:
    src, out, fresh, files = _dataset(tmp_path)
    shutil.copy(files["b"][0], src / "a" / "twin.png")  # files["b"][0] is a PNG
    _ok(cli("convert", src, out, *DROP))
    kept = json.loads((out / "dataset.json").read_text())["duplicates"]["dropped"][0]["duplicate_of"]
    # an image overwritten with the bytes of another: a copy now, kept or dropped by plan order
    target = files["a"][3]
    target.write_bytes(files["b"][4].read_bytes())
    # and the kept copy of the pair changed: its twin is the only one of that content left
    save(natural_image(17, 13, 4242), src / kept)
    s = _update(cli, src, out)
    assert s["splits"]["train"]["changed"] + s["splits"]["validation"]["changed"] == 2
    assert s["dedupe"]["restored"] == 1 and s["dedupe"]["dropped"] + s["dedupe"]["displaced"] == 1
    theirs = _like_fresh(cli, src, out, fresh)
    pair = sorted([_rel(src, target), _rel(src, files["b"][4])], key=_plan_place)
    assert [(d["path"], d["duplicate_of"]) for d in theirs["dropped"]] == [(pair[1], pair[0])]


def test_compact_of_a_dedupe_drop_dataset_keeps_its_layout_and_report(tmp_path: Path, cli) -> None:
    """Before update: compact counted no dropped copy among the planned images and lost the report."""
    src, out, fresh, files = _dataset(tmp_path)
    for i in range(3):
        shutil.copy(files["a"][i], src / "b" / f"copy{i}{files['a'][i].suffix}")
    _ok(cli("convert", src, out, *DROP))
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.name != "dataset.json"}
    report = json.loads((out / "dataset.json").read_text())["duplicates"]
    _ok(cli("compact", out))
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.name != "dataset.json"} == before
    assert json.loads((out / "dataset.json").read_text())["duplicates"] == report and len(report["dropped"]) == 3


@pytest.mark.parametrize("mode", ["report"])
def test_dedupe_report_finds_copies_across_old_and_new_images(tmp_path: Path, cli, mode: str) -> None:
    src, out, fresh, files = _dataset(tmp_path)
    opts = ("--dedupe", mode, "--split", SPLIT, "--split-rule", "hash", "--shards", "2")
    _ok(cli("convert", src, out, *opts))
    shutil.copy(files["a"][1], src / "b" / "old_copy.jpg")  # a copy of an old image
    new = save(natural_image(18, 14, 77), src / "a" / "new.png")
    shutil.copy(new, src / "b" / "new_copy.png")  # two new copies of each other
    s = _update(cli, src, out)
    assert s["duplicates"]["group_count"] == 2 and s["duplicates"]["dropped"] == []
    assert "dedupe" not in s
    groups = {tuple(sorted(g["files"])) for g in json.loads((out / "dataset.json").read_text())["duplicates"]["groups"]}
    assert groups == {
        tuple(sorted([_rel(src, files["a"][1]), "b/old_copy.jpg"])),
        tuple(sorted(["a/new.png", "b/new_copy.png"])),
    }
    _like_fresh(cli, src, out, fresh, opts)


def test_check_content_finds_a_dropped_copy_changed_in_place(tmp_path: Path, cli) -> None:
    """Same size and mtime, other bytes: with --check-content the copy is a new image, encoded."""
    import os

    src, out, fresh, files = _dataset(tmp_path)
    twin = src / "b" / "twin.jpg"
    shutil.copy(files["a"][1], twin)
    _ok(cli("convert", src, out, *DROP))
    dropped = json.loads((out / "dataset.json").read_text())["duplicates"]["dropped"][0]["path"]
    target = src / dropped
    st = target.stat()
    data = bytearray(target.read_bytes())
    data[-3] ^= 0xFF  # in the JPEG's entropy-coded data: still a valid image, no longer a copy
    target.write_bytes(bytes(data))
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert _update(cli, src, out, "--dry-run")["up_to_date"]
    s = _update(cli, src, out, "--check-content")
    assert sum(sp["changed"] for sp in s["splits"].values()) == 1 and s["duplicates"]["dropped"] == []
    _like_fresh(cli, src, out, fresh)


def test_split_folders_keep_the_copy_of_the_first_split(tmp_path: Path, cli) -> None:
    """INPUT/train/ and INPUT/validation/: the plan takes train first, so a new copy in train of a
    validation image displaces it, and a new copy in validation of a train image is dropped."""
    src, out, fresh = tmp_path / "in", tmp_path / "out", tmp_path / "fresh"
    train = make_dataset(src / "train", {"a": 3, "b": 3}, size=(16, 12))
    val = make_dataset(src / "validation", {"a": 2, "b": 2}, size=(16, 12), seed=5)
    opts = ("--dedupe", "drop")
    _ok(cli("convert", src, out, *opts))
    shutil.copy(train["a"][1], src / "validation" / "b" / "copy_of_train.jpg")
    shutil.copy(val["a"][0], src / "train" / "b" / "copy_of_validation.png")
    s = _update(cli, src, out)
    assert s["dedupe"] == {"dropped": 1, "displaced": 1, "restored": 0}
    assert {(d["path"], d["duplicate_of"]) for d in s["duplicates"]["dropped"]} == {
        ("validation/b/copy_of_train.jpg", "train/a/img_001.jpg"),
        ("validation/a/img_000.png", "train/b/copy_of_validation.png"),
    }
    _like_fresh(cli, src, out, fresh, opts)


def test_copies_of_a_skipped_file(tmp_path: Path, cli) -> None:
    """A file convert skips (invalid) still has a content: its later copies are dropped as its
    copies, and an earlier new copy (skipped too) makes the old one a dropped copy; removed, the
    first of its dropped copies is tried (and skipped) as a fresh convert tries it."""
    src, out, fresh, files = _dataset(tmp_path)
    broken = src / "a" / "broken.jpg"
    broken.write_bytes(b"\xff\xd8\xff not a jpeg at all")
    _ok(cli("convert", src, out, *DROP))
    assert [s["path"] for s in json.loads((out / "dataset.json").read_text())["skipped"]] == ["a/broken.jpg"]
    later = _name(src / "b", "later", ".jpg", after="a/broken.jpg")
    shutil.copy(broken, later)
    s = _update(cli, src, out)
    assert s["dedupe"] == {"dropped": 1, "displaced": 0, "restored": 0} and s["skipped"] == []
    assert s["duplicates"]["dropped"][0]["duplicate_of"] == "a/broken.jpg"
    _like_fresh(cli, src, out, fresh)
    earlier = _name(src / "b", "earlier", ".jpg", before="a/broken.jpg")
    shutil.copy(broken, earlier)
    s = _update(cli, src, out)
    assert [x["path"] for x in s["skipped"]] == [_rel(src, earlier)]  # tried, and invalid too
    assert {d["path"]: d["duplicate_of"] for d in s["duplicates"]["dropped"]} == {
        "a/broken.jpg": _rel(src, earlier),
        _rel(src, later): _rel(src, earlier),
    }
    _like_fresh(cli, src, out, fresh)
    earlier.unlink()  # the skipped first copy gone: convert would try the next one
    s = _update(cli, src, out)
    assert s["dedupe"]["restored"] == 1 and [x["path"] for x in s["skipped"]] == ["a/broken.jpg"]
    _like_fresh(cli, src, out, fresh)


def test_an_interrupted_update_resumes_to_the_same_bytes(tmp_path: Path) -> None:
    """Stopped once its new shards are written (journaled with what they dropped), before the
    shard that loses a displaced record is rewritten: --resume reuses them and gives the bytes of
    an uninterrupted update."""
    src, out, fresh, files = _dataset(tmp_path)
    convert(str(src), str(out), dedupe="drop", split=SPLIT, split_rule="hash", shards=2)
    old = files["a"][1]
    shutil.copy(old, _name(src / "b", "earlier", old.suffix, before=_rel(src, old)))
    shutil.copy(old, _name(src / "b", "later", old.suffix, after=_rel(src, old)))
    for i in range(4):
        save(natural_image(18, 14, 600 + i), src / "a" / f"new_{i}.png")
    ref = tmp_path / "ref"
    shutil.copytree(out, ref)
    s = update(str(src), str(ref), workers=1)
    assert s["dedupe"] == {"dropped": 1, "displaced": 1, "restored": 0} and s["shards_rewritten"] == 1

    def stop(images: int, nbytes: int, total: int) -> None:
        if images >= total:  # the last new shard is done
            raise KeyboardInterrupt

    before = {p.name: p.read_bytes() for p in out.iterdir()}
    with pytest.raises(Interrupted):
        update(str(src), str(out), workers=1, progress=stop)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # the old version
    notes: list[str] = []
    s = update(str(src), str(out), workers=1, resume=True, on_event=lambda kind, msg: notes.append(msg))
    assert s["dedupe"] == {"dropped": 1, "displaced": 1, "restored": 0}
    assert any(n.startswith("resuming: ") and " reused" in n for n in notes), notes
    assert {p.name: p.read_bytes() for p in out.iterdir()} == {p.name: p.read_bytes() for p in ref.iterdir()}
