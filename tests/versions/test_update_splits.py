"""`update` under the exact split rule: where its new images go, as a reader of the shards finds them.

Each image is a tiny PNG of its own pixels; each record's split is the split its shard names
(TensorFlow's reader, helpers.read_records), so what is asserted is what `load(out, split)` gives.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

from PIL import Image

from helpers import read_records

GROUP = r"/(p\d+)_"


def _image(path: Path, seed: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (4, 4), (seed % 256, (seed // 256) % 256, 9)).save(path)


def _record_splits(out: Path) -> dict[str, str]:
    """image/filename -> split, every record once."""
    records = read_records(out)
    got = {rec["filename"].decode(): rec["shard"].split("-", 1)[0] for rec in records}
    assert len(got) == len(records), "an image has two records"
    return got


def _tree_files(src: Path) -> set[str]:
    return {p.relative_to(src).as_posix() for p in src.rglob("*.png")}


def test_update_with_split_group_writes_new_images_of_held_groups_in_their_groups_split(tmp_path: Path, cli) -> None:
    """--split-group: an update's new images of patients the dataset holds (in either split) are
    all written, each in its patient's split, beside a new patient's; only new images of held
    patients is no "up to date" either."""
    src, out = tmp_path / "in", tmp_path / "out"
    for c in range(2):  # c0, c1: patients of 1 to 4 images
        for p in range(6):
            for k in range(1 + p % 4):
                _image(src / f"c{c}" / f"p{c}{p}_{k}.png", c * 1000 + p * 10 + k)
    r = cli("convert", src, out, "--split", "train=0.5,validation=0.5", "--split-group", GROUP)
    assert r.exit_code == 0, r.output
    before = _record_splits(out)
    patient_split = {rel.split("/")[1].split("_")[0]: s for rel, s in before.items()}
    assert set(patient_split.values()) == {"train", "validation"}
    # one new image of a held patient in each split: the update must write both
    held = {s: next(p for p, ps in sorted(patient_split.items()) if ps == s) for s in ("train", "validation")}
    new = {f"c{held[s][1]}/{held[s]}_9.png": s for s in held}
    for i, rel in enumerate(new):
        _image(src / rel, 50_000 + i)
    r = cli("update", src, out, "--json")
    assert r.exit_code == 0, r.output
    summary = json.loads(r.output)
    assert not summary["up_to_date"] and summary["converted_images"] == len(new)
    after = _record_splits(out)
    assert set(after) == _tree_files(src)
    assert {rel: after[rel] for rel in new} == new
    assert {rel: after[rel] for rel in before} == before
    # a new patient beside another new image of a held one: both written, the held one in its split
    more = {
        "c0/p07_0.png": None,
        "c0/p07_1.png": None,
        f"c{held['validation'][1]}/{held['validation']}_8.png": "validation",
    }
    for i, rel in enumerate(more):
        _image(src / rel, 60_000 + i)
    r = cli("update", src, out)
    assert r.exit_code == 0, r.output
    last = _record_splits(out)
    assert set(last) == _tree_files(src)
    assert last["c0/p07_0.png"] == last["c0/p07_1.png"]
    assert {rel: last[rel] for rel in after} == after
    assert last[f"c{held['validation'][1]}/{held['validation']}_8.png"] == "validation"


def _rounded(n: int, f: float) -> int:
    """f * n rounded to the nearest whole number (no class size here puts f * n at a half)."""
    return math.floor(f * n + 0.5)


def test_update_gives_a_new_image_the_split_furthest_below_its_share_with_it(tmp_path: Path, cli) -> None:
    """train=0.7,validation=0.3: a class of n images holds round(0.7 n) in train; one new image
    goes where the class is furthest below its share of n + 1 images (its own count included), so
    the class then holds round(0.7 (n + 1)). For n = 7: train 5 of 5.6 vs validation 2 of 2.4, so
    train, though measured against n (4.9 and 2.1) validation would be further below."""
    src, out = tmp_path / "in", tmp_path / "out"
    sizes = {f"c{n:02d}": n for n in range(6, 14)}  # n + 1 from 7 to 14: no share at a half
    for c, n in sizes.items():
        for k in range(n):
            _image(src / c / f"img_{k:03d}.png", n * 100 + k)
    r = cli("convert", src, out, "--split", "train=0.7,validation=0.3")
    assert r.exit_code == 0, r.output
    counts = Counter((rel.split("/")[0], s) for rel, s in _record_splits(out).items())
    assert {c: counts[c, "train"] for c in sizes} == {c: _rounded(n, 0.7) for c, n in sizes.items()}
    for c, n in sizes.items():
        _image(src / c / "img_new.png", 90_000 + n)
    r = cli("update", src, out)
    assert r.exit_code == 0, r.output
    placed = _record_splits(out)
    assert set(placed) == _tree_files(src)
    counts = Counter((rel.split("/")[0], s) for rel, s in placed.items())
    assert {c: counts[c, "train"] for c in sizes} == {c: _rounded(n + 1, 0.7) for c, n in sizes.items()}
    assert {c: counts[c, "validation"] for c in sizes} == {c: n + 1 - _rounded(n + 1, 0.7) for c, n in sizes.items()}
    assert placed["c07/img_new.png"] == "train"
