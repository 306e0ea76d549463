"""Splits that are exact per class, stable under update, and leak-free (--split-group, a split column).

Counts are read from the shards themselves (TensorFlow's reader: each record's image/filename in
the split its shard names), and from the catalog where a round's check only needs where each image is.
"""

from __future__ import annotations

import json
import math
import random
from collections import Counter
from pathlib import Path

import pytest
from PIL import Image

from helpers import read_records
from img2tfrecord.conversion.convert import convert
from img2tfrecord.conversion.plan.job import plan_job
from img2tfrecord.conversion.plan.splits import split_of
from img2tfrecord.conversion.versions.update import update
from img2tfrecord.format import catalog as catalog_file

SIZES = [3, 4, 5, 7, 10, 13, 20, 31, 50, 77, 120, 200]  # 12 classes
SPLIT = "train=0.7,validation=0.2,test=0.1"
FRACTIONS = {"train": 0.7, "validation": 0.2, "test": 0.1}


def _image(path: Path, seed: int) -> None:
    """A tiny PNG of its own pixels (no two alike, so no duplicate report)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (4, 4), (seed % 256, (seed // 256) % 256, 7)).save(path)


def _tree(root: Path, sizes: list[int], start: int = 0) -> None:
    for c, n in enumerate(sizes):
        for k in range(start, start + n):
            _image(root / f"c{c:02d}" / f"img_{k:04d}.png", c * 10_000 + k)


def _within_one(counts: Counter[tuple[str, str]], fractions: dict[str, float], strict: bool = True) -> None:
    """Every split of every class holds floor(f*n) or ceil(f*n) images (and one at least where f*n >= 1)."""
    classes = {c for c, _ in counts}
    for c in classes:
        n = sum(counts[c, s] for s in fractions)
        for s, f in fractions.items():
            got = counts[c, s]
            assert math.floor(f * n - 1e-9) <= got <= math.ceil(f * n + 1e-9), (c, s, got, f * n)
            if f * n >= 1:
                assert got >= 1


def _placed(out: Path) -> dict[str, str]:
    """image path -> split, from the catalog (planned images: records, skipped, dropped)."""
    cat = catalog_file.decode((out / "dataset.catalog").read_bytes())
    return {rel.decode(): s for rel, s in zip(cat.rels, cat.splits)}


def _counts(placed: dict[str, str]) -> Counter[tuple[str, str]]:
    return Counter((rel.split("/", 1)[0], s) for rel, s in placed.items())


def _record_splits(out: Path) -> dict[str, str]:
    """image/filename -> split, as a reader of the shards finds them."""
    return {rec["filename"].decode(): rec["shard"].split("-", 1)[0] for rec in read_records(out)}


def test_exact_shares_per_class_at_convert(tmp_path: Path) -> None:
    """12 classes of 3 to 200 images: each split of each class floor or ceil of its share; a
    small class still gets its validation image; the plan is the same for any split order run."""
    _tree(tmp_path / "in", SIZES)
    plan = plan_job(str(tmp_path / "in"), str(tmp_path / "out"), split=SPLIT)
    counts = Counter((t.text, sh.split) for sh in plan.shards for t in sh.tasks)
    _within_one(counts, FRACTIONS)
    assert counts["c00", "validation"] == 1  # 0.2 * 3 = 0.6 < 1, but the largest remainder
    assert counts["c02", "validation"] == 1  # 0.2 * 5 = 1: at least one
    assert plan.options["split_rule"] == "exact" and plan.options["split_group"] is None
    assert not [w for w in plan.warnings if "has no image of" in w]
    again = plan_job(str(tmp_path / "in"), str(tmp_path / "out"), split=SPLIT)
    assert [(sh.split, list(sh.tasks)) for sh in again.shards] == [(sh.split, list(sh.tasks)) for sh in plan.shards]


def test_shares_stay_within_one_across_updates_and_no_image_moves(tmp_path: Path, cli) -> None:
    """Five rounds of additions keep every class within one image of its share; across those and
    a round of removals and additions no image ever changes split; the shards agree."""
    src, out = tmp_path / "in", tmp_path / "out"
    _tree(src, SIZES)
    convert(src, out, split=SPLIT)
    placed = _placed(out)
    _within_one(_counts(placed), FRACTIONS)
    rnd = random.Random(3)
    start = 1000
    for round_ in range(5):
        _tree(src, [rnd.randint(0, 6) for _ in SIZES], start=start)
        start += 100
        before = placed
        dry = json.loads(cli("update", src, out, "--dry-run", "--json").output)
        update(src, out)
        placed = _placed(out)
        assert {p: placed[p] for p in before} == before, f"round {round_}: an image moved"
        _within_one(_counts(placed), FRACTIONS)
        after = _counts(placed)
        assert dry["split_counts"], "the dry run shows the classes whose counts change"
        for cls, per in dry["split_counts"].items():
            for s, (_, n) in per.items():
                assert after[cls, s] == n
    # removals (never balanced by moving) and additions
    for rel in [p for p in placed if p.endswith(("0001.png", "0003.png"))]:
        (src / rel).unlink()
    _tree(src, [2] * len(SIZES), start=start)
    before = {p: s for p, s in placed.items() if (src / p).exists()}
    update(src, out)
    placed = _placed(out)
    assert {p: placed[p] for p in before} == before
    assert _record_splits(out) == placed


def test_dry_run_text_shows_counts_before_and_after(tmp_path: Path, cli) -> None:
    src, out = tmp_path / "in", tmp_path / "out"
    _tree(src, [10, 5])
    seed = next(  # the catalog's first path in validation: splits are still listed in the dataset's order
        s
        for s in range(100)
        if any(
            t.rel == "c00/img_0000.png"
            for sh in plan_job(str(src), str(out), split="train=0.8,validation=0.2", seed=s).shards
            if sh.split == "validation"
            for t in sh.tasks
        )
    )
    convert(src, out, split="train=0.8,validation=0.2", seed=seed)
    _tree(src, [0, 5], start=100)
    text = cli("update", src, out, "--dry-run").output
    assert "images per split, before -> after:" in text
    assert "c01: train 4 -> 8, validation 1 -> 2" in text
    assert "c00:" not in text.split("before -> after:")[1]  # unchanged classes are not listed


def test_old_hash_rule_dataset_updates_under_its_rule(tmp_path: Path) -> None:
    """A dataset made by the hash rule (dataset.json without split_rule, as older versions wrote
    it) keeps it: no image moves on update, and each new one goes where its hash says."""
    src, out = tmp_path / "in", tmp_path / "out"
    _tree(src, SIZES[:6])
    convert(src, out, split=SPLIT, split_rule="hash")
    manifest = json.loads((out / "dataset.json").read_text())
    assert manifest["options"]["split_rule"] == "hash"
    del manifest["options"]["split_rule"], manifest["options"]["split_group"]  # as an older version wrote it
    (out / "dataset.json").write_text(json.dumps(manifest, indent=2))
    before = _placed(out)
    assert all(s == split_of(p, 0, FRACTIONS) for p, s in before.items())
    _tree(src, [4] * 6, start=500)
    update(src, out)
    placed = _placed(out)
    assert {p: placed[p] for p in before} == before
    assert all(s == split_of(p, 0, FRACTIONS) for p, s in placed.items())
    assert "split_rule" not in json.loads((out / "dataset.json").read_text())["options"]


@pytest.mark.parametrize(
    ("bad", "said"), [("(", "not a regular expression"), ("nomatch", "matches no image path (e.g. 'c00/img_0000.png')")]
)
def test_bad_split_group_is_one_line(tmp_path: Path, cli, bad: str, said: str) -> None:
    _tree(tmp_path / "in", [3])
    r = cli("convert", tmp_path / "in", tmp_path / "out", "--split", SPLIT, "--split-group", bad)
    assert r.exit_code == 2
    assert r.output.startswith("error: bad --split-group '('" if bad == "(" else f"error: --split-group {bad} ")
    assert said in r.output and len(r.output.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_convert_help_describes_the_rule(cli) -> None:
    text = " ".join(cli("convert", "--help").output.split())
    assert "floor or ceil" in text and "--split-group" in text and "--split-rule" in text


def test_a_split_column_is_honoured_and_kept_by_update(tmp_path: Path, cli) -> None:
    """--file-list path,label,split: each image in the split its row names (val read as validation),
    splits in the order the list first names them; update with a longer list keeps every image."""
    src, out = tmp_path / "in", tmp_path / "out"
    _tree(src, [6, 4])
    rows = [f"c00/img_{k:04d}.png,cat,{'val' if k % 3 == 0 else 'train'}" for k in range(6)]
    rows += [f"c01/img_{k:04d}.png,dog,{'test' if k == 1 else 'train'}" for k in range(4)]
    listing = tmp_path / "list.csv"
    listing.write_text("path,label,split\n" + "\n".join(rows) + "\n")
    r = cli("convert", src, out, "--file-list", listing)
    assert r.exit_code == 0, r.output
    want = {row.split(",")[0]: row.split(",")[2].replace("val", "validation") for row in rows}
    assert _record_splits(out) == want == _placed(out)
    assert list(json.loads((out / "dataset.json").read_text())["splits"]) == ["validation", "train", "test"]
    _tree(src, [2, 0], start=50)
    listing.write_text(listing.read_text() + "c00/img_0050.png,cat,test\nc00/img_0051.png,cat,train\n")
    r = cli("update", src, out, "--file-list", listing)
    assert r.exit_code == 0, r.output
    want |= {"c00/img_0050.png": "test", "c00/img_0051.png": "train"}
    assert _record_splits(out) == want
    bad = cli("convert", src, tmp_path / "o2", "--file-list", listing, "--split", "train=0.5,test=0.5")
    assert bad.exit_code == 2
    assert bad.output == f"error: --file-list {listing} gives each image's split (its third column): drop --split\n"
    listing.write_text("c00/img_0000.png,cat,no way\n")
    bad = cli("convert", src, tmp_path / "o3", "--file-list", listing)
    assert bad.exit_code == 2 and "line 1: bad split 'no way' for c00/img_0000.png" in bad.output


def _grouped_tree(root: Path) -> dict[str, str]:
    """c00..c02, images named p<patient>_<k>.png: patients of 1 to 6 images; path -> group."""
    groups = {}
    rnd = random.Random(5)
    seed = 0
    for c in range(3):
        for p in range(12):
            for k in range(rnd.randint(1, 6)):
                rel = f"c{c:02d}/p{c * 100 + p}_{k}.png"
                _image(root / rel, seed)
                seed += 1
                groups[rel] = f"p{c * 100 + p}"
    return groups


def _crossing(placed: dict[str, str], groups: dict[str, str]) -> set[str]:
    seen: dict[str, set[str]] = {}
    for rel, s in placed.items():
        seen.setdefault(groups[rel], set()).add(s)
    return {g for g, splits in seen.items() if len(splits) > 1}


def test_groups_never_cross_splits(tmp_path: Path, cli) -> None:
    """--split-group: every patient in one split, shares within the group sizes; an update's new
    image of a known patient joins its split; inspect names groups that cross in a dataset made without."""
    src, out = tmp_path / "in", tmp_path / "out"
    groups = _grouped_tree(src)
    r = cli("convert", src, out, "--split", "train=0.75,validation=0.25", "--split-group", r"/(p\d+)_")
    assert r.exit_code == 0, r.output
    placed = _record_splits(out)
    assert placed == _placed(out) and not _crossing(placed, groups)
    counts = _counts(placed)
    for c in ("c00", "c01", "c02"):
        n = counts[c, "train"] + counts[c, "validation"]
        assert abs(counts[c, "validation"] - 0.25 * n) <= 6  # within the biggest group
        assert counts[c, "validation"] >= 1
    options = json.loads((out / "dataset.json").read_text())["options"]
    assert options["split_group"] == r"/(p\d+)_" and options["split_rule"] == "exact"
    some = next(iter(groups))
    _image(src / some.replace("_0.png", "_9.png"), 99_999)
    groups[some.replace("_0.png", "_9.png")] = groups[some]
    for k in range(3):  # a new patient
        _image(src / f"c00/p999_{k}.png", 88_000 + k)
        groups[f"c00/p999_{k}.png"] = "p999"
    update(src, out)
    after = _placed(out)
    assert {p: after[p] for p in placed} == placed and not _crossing(after, groups)
    # a dataset made without groups: the patients that cross are named
    plain = tmp_path / "plain"
    convert(src, plain, split="train=0.75,validation=0.25")
    crossing = _crossing(_placed(plain), groups)
    assert crossing
    r = cli("inspect", plain, "--split-group", r"/(p\d+)_", "--json")
    assert r.exit_code == 0, r.output
    report = json.loads(r.output)["split_groups"]
    assert report["pattern"] == r"/(p\d+)_" and set(report["crossing"]) == crossing
    assert report["groups"] == len(set(groups.values()))
    text = cli("inspect", plain, "--split-group", r"/(p\d+)_").output
    assert f"{len(crossing)} of {len(set(groups.values()))} groups (--split-group " in text
    r = cli("inspect", out, "--split-group", r"/(p\d+)_", "--json")
    assert json.loads(r.output)["split_groups"]["crossing"] == {}


def _files(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.iterdir()) if p.name != "dataset.json"}


def _same_files(a: Path, b: Path) -> None:
    fa, fb = _files(a), _files(b)
    assert sorted(fa) == sorted(fb)
    for name in fa:
        assert fa[name] == fb[name], name


def test_compact_equals_convert_of_the_exported_assignment(tmp_path: Path, cli) -> None:
    """After updates, the splits are the dataset's history, not a fresh split of today's tree:
    compact keeps them, and equals `convert --file-list` of `inspect --export-list`, byte for byte."""
    src, out = tmp_path / "in", tmp_path / "out"
    _tree(src, [9, 6, 4])
    opts = ("--split", "train=0.6,validation=0.4", "--shards", "2")
    assert cli("convert", src, out, *opts).exit_code == 0
    _tree(src, [3, 5, 1], start=100)
    (src / "c00" / "img_0002.png").unlink()
    (src / "c01" / "broken.png").write_bytes(b"\x89PNG broken")  # a skipped image keeps its split too
    assert cli("update", src, out).exit_code == 0
    before = _placed(out)
    r = cli("compact", out)
    assert r.exit_code == 0, r.output
    assert _placed(out) == before and _record_splits(out) == {p: s for p, s in before.items() if "broken" not in p}
    listing = tmp_path / "assignment.csv"
    r = cli("inspect", out, "--export-list", listing)
    assert r.exit_code == 0 and f"wrote {len(before)} images as path,label,split to {listing}" in r.output
    rows = listing.read_text().splitlines()
    assert rows[0] == "path,label,split" and len(rows) == len(before) + 1
    again = tmp_path / "again"
    r = cli("convert", src, again, "--file-list", listing, "--labels", out / "labels.txt", "--shards", "2")
    assert r.exit_code == 0, r.output
    _same_files(out, again)
    fresh = tmp_path / "fresh"  # a fresh split of today's tree differs: the promise is the history's
    assert cli("convert", src, fresh, *opts, "--labels", out / "labels.txt").exit_code == 0
    assert _placed(fresh) != before


def test_compact_rebalance_restores_exact_shares_and_converts_the_hash_rule(tmp_path: Path, cli) -> None:
    """--rebalance: a hash-rule dataset gets the exact rule (the shards a fresh exact convert
    writes), saying what moved; after removals, exact shares again."""
    src, out = tmp_path / "in", tmp_path / "out"
    _tree(src, SIZES[:8])
    convert(src, out, split=SPLIT, split_rule="hash")
    old = _placed(out)
    r = cli("compact", out, "--rebalance", "--dry-run")
    assert r.exit_code == 0 and " would move" in r.output
    assert _placed(out) == old  # a dry run writes nothing
    r = cli("compact", out, "--rebalance", "--json")
    assert r.exit_code == 0, r.output
    moved = json.loads(r.output)["rebalanced"]
    placed = _placed(out)
    assert moved["rule_before"] == "hash"
    assert moved["moved"] == sum(old[p] != placed[p] for p in old) > 0
    assert moved["from"] == dict(
        sorted(Counter(f"{old[p]} -> {placed[p]}" for p in old if old[p] != placed[p]).items())
    )
    _within_one(_counts(placed), FRACTIONS)
    assert json.loads((out / "dataset.json").read_text())["options"]["split_rule"] == "exact"
    fresh = tmp_path / "fresh"
    convert(src, fresh, split=SPLIT, labels=str(out / "labels.txt"))
    _same_files(out, fresh)
    # removals unbalance a class; update does not move images back, --rebalance does
    for k in range(0, 120, 2):
        (src / "c07" / f"img_{k:04d}.png").unlink(missing_ok=True)
    for k in range(1, 31, 2):
        (src / "c06" / f"img_{k:04d}.png").unlink(missing_ok=True)
    update(src, out)
    r = cli("compact", out, "--rebalance")
    assert r.exit_code == 0, r.output
    _within_one(_counts(_placed(out)), FRACTIONS)
    assert "moved" in r.output
    plain = tmp_path / "plain"
    _tree(tmp_path / "folders" / "train", [3])
    convert(tmp_path / "folders", plain)
    r = cli("compact", plain, "--rebalance")
    assert r.exit_code == 2
    assert r.output.startswith(f"error: --rebalance re-splits by --split's fractions; {plain} was made without")


def test_exact_splits_are_the_same_bytes_for_any_worker_count(tmp_path: Path) -> None:
    src = tmp_path / "in"
    _tree(src, [7, 12, 3])
    outs = []
    for workers in (1, 2):
        out = tmp_path / f"out{workers}"
        convert(src, out, split=SPLIT, shards="train=2,validation=1,test=1", workers=workers)
        outs.append(out)
    _same_files(*outs)
    assert (outs[0] / "dataset.json").read_text() == (outs[1] / "dataset.json").read_text()
    _within_one(_counts(_placed(outs[0])), FRACTIONS)


def test_update_and_compact_help_describe_the_rule(cli) -> None:
    text = " ".join(cli("update", "--help").output.split())
    assert "No image changes split" in text and "furthest below its share" in text
    text = " ".join(cli("compact", "--help").output.split())
    assert "--rebalance" in text and "--export-list" in text and "keeps its split" in text


def test_uneven_groups_are_placed_biggest_first_so_shares_stay_exact(tmp_path: Path, cli) -> None:
    """--split-group with one big patient among small ones: the biggest go first (they are the
    hardest to fit), so each class of 10 gets exactly 6 train and 4 validation images; placed
    smallest or in hash order first, a big patient finds no split with room for it."""
    src, out = tmp_path / "in", tmp_path / "out"
    patients = {"c00": [6, 1, 1, 1, 1], "c01": [4, 1, 1, 1, 1, 1, 1], "c02": [3, 3, 2, 1, 1], "c03": [5, 2, 1, 1, 1]}
    seed = 0
    for c, sizes in patients.items():
        for p, n in enumerate(sizes):
            for k in range(n):
                _image(src / c / f"p{c[1:]}{p}_{k}.png", seed)
                seed += 1
    r = cli("convert", src, out, "--split", "train=0.6,validation=0.4", "--split-group", r"/(p\d+)_")
    assert r.exit_code == 0, r.output
    placed = _record_splits(out)
    assert len(placed) == 40
    groups = {rel: rel.split("/")[1].split("_")[0] for rel in placed}
    assert not _crossing(placed, groups)
    counts = _counts(placed)
    assert {c: (counts[c, "train"], counts[c, "validation"]) for c in patients} == {c: (6, 4) for c in patients}
