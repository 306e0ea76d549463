"""The plan: which file goes in which shard, in which order, and the resume fingerprint over it.

Golden values for a fixed tree and options pin the plan so that restructuring the code cannot
move an image without a test saying so (byte-identical output across versions of the tool depends
on it). The tree's files are not images: planning never reads them, only their names and sizes.
Unit tests below cover the pieces: shard bounds, shard counts, the stratified split.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from img2tfrecord.conversion.plan import auto_shard_counts, plan_job, shard_bounds
from img2tfrecord.conversion.resume import header
from img2tfrecord.conversion.walk import discover
from img2tfrecord.errors import UsageError


def fixed_tree(root: Path) -> Path:
    """3 classes of 7, 5 and 4 files (one nested), sizes 1000 + 37*i bytes."""
    src = root / "in"
    i = 0
    for cls, n in (("cat", 7), ("dog", 5), ("owl", 4)):
        for k in range(n):
            p = src / cls / ("deep/" if k == 3 else "") / f"{cls}{k}.{'png' if k % 2 else 'jpg'}"
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(b"x" * (1000 + 37 * i))
            i += 1
    (src / "notes.txt").write_text("not an image")
    return src


def plan_of(plan) -> list[tuple[str, list[tuple[str, int]]]]:
    return [(s.name, [(t[1], t[3]) for t in s.tasks]) for s in plan.shards]


GOLDEN_SPLIT_PLAN = [
    (
        "train-00000-of-00002",
        [
            ("cat/cat2.jpg", 0),
            ("dog/deep/dog3.png", 1),
            ("dog/dog0.jpg", 1),
            ("cat/cat1.png", 0),
            ("dog/dog4.jpg", 1),
            ("dog/dog1.png", 1),
        ],
    ),
    (
        "train-00001-of-00002",
        [
            ("owl/deep/owl3.png", 2),
            ("cat/cat4.jpg", 0),
            ("owl/owl0.jpg", 2),
            ("cat/cat0.jpg", 0),
            ("cat/cat5.png", 0),
            ("owl/owl2.jpg", 2),
        ],
    ),
    (
        "validation-00000-of-00001",
        [("cat/cat6.jpg", 0), ("owl/owl1.png", 2), ("cat/deep/cat3.png", 0), ("dog/dog2.jpg", 1)],
    ),
]


def test_golden_plan_and_fingerprint(tmp_path):
    src = fixed_tree(tmp_path)
    plan = plan_job(
        str(src), str(tmp_path / "out"), split="train=0.7,validation=0.3", shards="train=2,validation=1", seed=3
    )
    got = plan_of(plan)
    print(json.dumps(got))  # shown on failure: paste here only if the change is meant to move images
    assert got == GOLDEN_SPLIT_PLAN
    assert plan.classes == ["cat", "dog", "owl"] and plan.ignored_files == 1
    assert header(plan)["fingerprint"] == GOLDEN_FINGERPRINT


GOLDEN_FINGERPRINT = "821beb2160ff8cb41e8e0f0c9ff8132fa4b511e19024b27ed6ddb2c165c1fbfb"


def test_the_plan_does_not_depend_on_the_walk_order(tmp_path):
    """Same tree made in another order (and other mtimes): same plan."""
    a = plan_of(plan_job(str(fixed_tree(tmp_path / "a")), str(tmp_path / "oa"), shards=3))
    src = tmp_path / "b" / "in"
    for p in sorted((tmp_path / "a" / "in").rglob("*"), reverse=True):
        dst = src / p.relative_to(tmp_path / "a" / "in")
        if p.is_file():
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.write_bytes(p.read_bytes())
    assert plan_of(plan_job(str(src), str(tmp_path / "ob"), shards=3)) == a


@pytest.mark.parametrize(("n", "k"), [(10, 3), (7, 7), (1, 1), (1000, 16), (5, 2)])
def test_shard_bounds_cover_everything_once_and_differ_by_at_most_one(n, k):
    bounds = shard_bounds(n, k)
    assert len(bounds) == k and bounds[0][0] == 0 and bounds[-1][1] == n
    assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))
    sizes = [b - a for a, b in bounds]
    assert max(sizes) - min(sizes) <= 1


def test_shard_counts_by_total_per_split_and_by_size():
    sizes, items = {"train": 900, "validation": 100}, {"train": 90, "validation": 10}
    assert auto_shard_counts(sizes, items, 10)[0] == {"train": 9, "validation": 1}
    assert auto_shard_counts(sizes, items, {"train": 3})[0] == {"train": 3, "validation": 1}
    assert auto_shard_counts(sizes, items, None)[0] == {"train": 1, "validation": 1}  # far below 100 MiB a shard
    counts, warnings = auto_shard_counts({"train": 10}, {"train": 4}, 8)
    assert counts == {"train": 4} and warnings  # never more shards than images, and said
    with pytest.raises(UsageError):
        auto_shard_counts(sizes, items, {"test": 2})


def test_stratified_split_keeps_every_class_in_proportion(tmp_path):
    src = tmp_path / "in"
    for cls, n in (("a", 50), ("b", 20), ("c", 5)):
        (src / cls).mkdir(parents=True)
        for i in range(n):
            (src / cls / f"{i}.jpg").write_bytes(b"x")
    found = discover(str(src), split={"train": 0.8, "validation": 0.2}, seed=0)
    per = {s: {c: sum(1 for it in items if it.text == c) for c in "abc"} for s, items in found.splits.items()}
    assert per["train"] == {"a": 40, "b": 16, "c": 4} and per["validation"] == {"a": 10, "b": 4, "c": 1}
    again = discover(str(src), split={"train": 0.8, "validation": 0.2}, seed=0)
    assert [it.rel for it in again.splits["train"]] == [it.rel for it in found.splits["train"]]


def test_worker_count_never_exceeds_shards_and_scales_with_images():
    from img2tfrecord.conversion.engines.local import MIN_IMAGES_PER_WORKER, worker_count

    assert worker_count(8, 3, 10_000) == 3  # never more processes than shards
    assert worker_count(None, 16, MIN_IMAGES_PER_WORKER) == 1  # a small job: one TensorFlow import, not N
    assert worker_count(None, 16, 10 * MIN_IMAGES_PER_WORKER) == min(os.cpu_count() or 1, 10)
    assert worker_count(1, 0, 0) == 1


def test_the_local_scheduler_writes_every_shard_once_and_returns_them_in_plan_order(tmp_path):
    """Shards go to whoever is free (this process and a worker), outcomes come back in plan order."""
    from helpers import make_dataset
    from img2tfrecord.conversion.engines.local import LocalEngine
    from img2tfrecord.conversion.events import Timing
    from img2tfrecord.conversion.resume import Journal, header
    from img2tfrecord.format.naming import STAGING_DIR

    make_dataset(tmp_path / "in", {"a": 9, "b": 8})
    plan = plan_job(str(tmp_path / "in"), str(tmp_path / "out"), shards=5)
    staging = tmp_path / "out" / STAGING_DIR
    staging.mkdir(parents=True)
    seen: list[str] = []
    outcomes = LocalEngine(Journal(str(staging), header(plan)), Timing(), workers=2).run(
        plan, str(staging), plan.settings, lambda kind, msg: seen.append(kind)
    )
    assert [o.info.file for o in outcomes] == [s.name for s in plan.shards]
    assert [o.images for o in outcomes] == [len(s.tasks) for s in plan.shards]
    assert sorted(p.name for p in staging.iterdir() if "-of-" in p.name) == sorted(s.name for s in plan.shards)
