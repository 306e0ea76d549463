"""The plan: which file goes in which shard, in which order, and the resume fingerprint over it.

Golden values for a fixed tree and options pin the plan so that restructuring the code cannot
move an image without a test saying so (byte-identical output across versions of the tool depends
on it). The tree's files are not images: planning never reads them, only their names and sizes.
Unit tests below cover the pieces: shard bounds, shard counts, the stable hash split.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from img2tfrecord.conversion.plan.job import auto_shard_counts, plan_job, shard_bounds
from img2tfrecord.conversion.plan.walk import discover
from img2tfrecord.conversion.write.resume import header
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
    return [(s.name, [(t.rel, t.label) for t in s.tasks]) for s in plan.shards]


# Since stable splits (issue 22): an image's split and place are its seeded XXH3-64 path hash
# (conversion.plan.splits); before, a per-class reshuffle cut by rounding and a shuffle per split.
GOLDEN_SPLIT_PLAN = [
    (
        "train-00000-of-00002",
        [
            ("dog/dog4.jpg", 1),
            ("dog/deep/dog3.png", 1),
            ("cat/cat6.jpg", 0),
            ("owl/owl1.png", 2),
            ("owl/owl2.jpg", 2),
            ("owl/deep/owl3.png", 2),
        ],
    ),
    (
        "train-00001-of-00002",
        [("cat/cat5.png", 0), ("cat/cat0.jpg", 0), ("cat/cat4.jpg", 0), ("dog/dog2.jpg", 1), ("dog/dog1.png", 1)],
    ),
    (
        "validation-00000-of-00001",
        [("cat/deep/cat3.png", 0), ("cat/cat1.png", 0), ("cat/cat2.jpg", 0), ("dog/dog0.jpg", 1), ("owl/owl0.jpg", 2)],
    ),
]


def test_golden_plan_and_fingerprint(tmp_path):
    src = fixed_tree(tmp_path)
    plan = plan_job(
        str(src),
        str(tmp_path / "out"),
        split="train=0.7,validation=0.3",
        shards="train=2,validation=1",
        seed=3,
        split_rule="hash",
    )
    got = plan_of(plan)
    print(json.dumps(got))  # shown on failure: paste here only if the change is meant to move images
    assert got == GOLDEN_SPLIT_PLAN
    assert plan.classes == ["cat", "dog", "owl"] and plan.ignored_files == 1
    assert header(plan)["fingerprint"] == GOLDEN_FINGERPRINT


# The exact rule (the default): per class, the first floor-or-ceil(f*n) images in hash order go to
# train (cat 7 -> 5 + 2, dog 5 -> 4 + 1: ties to the first split, owl 4 -> 3 + 1), each split in hash order.
GOLDEN_EXACT_PLAN = [
    (
        "train-00000-of-00002",
        [
            ("dog/dog4.jpg", 1),
            ("dog/deep/dog3.png", 1),
            ("cat/cat6.jpg", 0),
            ("owl/owl1.png", 2),
            ("owl/owl2.jpg", 2),
            ("owl/deep/owl3.png", 2),
        ],
    ),
    (
        "train-00001-of-00002",
        [
            ("cat/cat5.png", 0),
            ("cat/cat0.jpg", 0),
            ("cat/cat4.jpg", 0),
            ("dog/dog2.jpg", 1),
            ("dog/dog1.png", 1),
            ("cat/deep/cat3.png", 0),
        ],
    ),
    ("validation-00000-of-00001", [("cat/cat1.png", 0), ("cat/cat2.jpg", 0), ("dog/dog0.jpg", 1), ("owl/owl0.jpg", 2)]),
]


def test_golden_exact_plan(tmp_path):
    plan = plan_job(
        str(fixed_tree(tmp_path)),
        str(tmp_path / "out"),
        split="train=0.7,validation=0.3",
        shards="train=2,validation=1",
        seed=3,
    )
    got = plan_of(plan)
    print(json.dumps(got))  # shown on failure: paste here only if the change is meant to move images
    assert got == GOLDEN_EXACT_PLAN


GOLDEN_FINGERPRINT = "1ae144a928360169fca8232efc1e2773a3d1a62995a4a11adb4d5b1c036fe579"


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
    assert auto_shard_counts(sizes, items, 10).counts == {"train": 9, "validation": 1}
    assert auto_shard_counts(sizes, items, {"train": 3}).counts == {"train": 3, "validation": 1}
    assert auto_shard_counts(sizes, items, None).counts == {"train": 1, "validation": 1}  # far below 100 MiB a shard
    cut = auto_shard_counts({"train": 10}, {"train": 4}, 8)
    assert cut.counts == {"train": 4} and cut.warnings  # never more shards than images, and said
    with pytest.raises(UsageError):
        auto_shard_counts(sizes, items, {"test": 2})


def test_a_hash_split_follows_the_fractions_per_class_within_binomial_noise(tmp_path):
    """3,000 names in three classes: each class's count in each split is within 4 standard
    deviations of n * fraction (the split is a hash of the path, not a cut by rounding)."""
    sizes = {"a": 2000, "b": 700, "c": 300}
    fractions = {"train": 0.7, "validation": 0.2, "test": 0.1}
    src = tmp_path / "in"
    for cls, n in sizes.items():
        (src / cls).mkdir(parents=True)
        for i in range(n):
            (src / cls / f"{i}.jpg").write_bytes(b"")
    found = discover(str(src), split=fractions, seed=0)
    for s, frac in fractions.items():
        got = {c: sum(1 for t in found.splits[s] if t.text == c) for c in sizes}
        for c, n in sizes.items():
            assert abs(got[c] - n * frac) <= 4 * (n * frac * (1 - frac)) ** 0.5, (s, c, got[c])
    assert sum(len(v) for v in found.splits.values()) == sum(sizes.values())
    again = discover(str(src), split=fractions, seed=0)
    assert [t.rel for t in again.splits["train"]] == [t.rel for t in found.splits["train"]]
    other = discover(str(src), split=fractions, seed=1)
    assert {t.rel for t in other.splits["test"]} != {t.rel for t in found.splits["test"]}  # the seed matters


def test_adding_or_removing_images_never_moves_another_nor_reorders_survivors(tmp_path):
    """The hash rule's stable-split promise: for the images present in both trees, the split is the
    same and, within a split, their relative order is the same (the exact rule keeps it through
    update's prior: tests/plan/test_split_exact.py)."""
    from img2tfrecord.conversion.plan.splits import SplitRule

    hashed = SplitRule("hash")
    src = tmp_path / "in"
    for cls in ("a", "b"):
        (src / cls).mkdir(parents=True)
        for i in range(400):
            (src / cls / f"{i}.jpg").write_bytes(b"")
    fractions = {"train": 0.8, "validation": 0.2}
    before = discover(str(src), split=fractions, seed=7, rule=hashed)
    for i in range(0, 400, 9):
        (src / "a" / f"{i}.jpg").unlink()  # removed
    for i in range(400, 440):
        (src / "b" / f"{i}.jpg").write_bytes(b"")  # added
    (src / "c").mkdir()
    for i in range(30):
        (src / "c" / f"{i}.jpg").write_bytes(b"")  # a new class
    after = discover(str(src), split=fractions, seed=7, rule=hashed)
    split_before = {t.rel: s for s, v in before.splits.items() for t in v}
    split_after = {t.rel: s for s, v in after.splits.items() for t in v}
    both = split_before.keys() & split_after.keys()
    assert len(both) == 800 - 45 and all(split_before[r] == split_after[r] for r in both)
    for s in fractions:
        old = [t.rel for t in before.splits[s] if t.rel in both]
        new = [t.rel for t in after.splits[s] if t.rel in both]
        assert old == new and len(old) > 100


def test_split_of_and_order_key_are_what_the_plan_uses(tmp_path):
    """The functions exported for `update` give each planned image its split and its order."""
    from img2tfrecord.conversion.plan.splits import order_key, split_of

    src = fixed_tree(tmp_path)
    fractions = {"train": 0.5, "validation": 0.3, "test": 0.2}
    plan = plan_job(str(src), str(tmp_path / "out"), split=fractions, seed=11, shards=1, split_rule="hash")
    for shard in plan.shards:
        rels = [t.rel for t in shard.tasks]
        assert all(split_of(r, 11, fractions) == shard.split for r in rels)
        assert rels == sorted(rels, key=lambda r: order_key(r, 11))
    assert split_of("cat/cat0.jpg", 11, None) == "train"
    assert order_key("cat/cat0.jpg", 11) == order_key(b"cat/cat0.jpg", 11) != order_key("cat/cat0.jpg", 12)
    assert order_key("x", -1) == order_key("x", 2**64 - 1)  # any int seed: its low 64 bits
    # XXH3-64 is a specified hash: these values hold on every Python, platform and release
    assert order_key("cat/cat0.jpg", 0) == 18279557641206058534
    assert order_key("日本の猫/x.png", 3) == 11279348842103637686
    assert order_key("caf\udce9.jpg", 0) == order_key(b"caf\xe9.jpg", 0) == 16732789974497324232  # undecodable


def test_a_class_that_gets_no_image_in_a_split_is_named(tmp_path):
    """Under the hash rule only: the exact rule gives it its share (tests/plan/test_split_exact.py)."""
    from img2tfrecord.conversion.plan.splits import SplitRule

    hashed = SplitRule("hash")
    src = tmp_path / "in"
    for cls, n in (("big", 200), ("tiny", 3)):
        (src / cls).mkdir(parents=True)
        for i in range(n):
            (src / cls / f"{i}.jpg").write_bytes(b"")
    seed = next(
        s
        for s in range(200)
        if not any(
            t.text == "tiny"
            for t in discover(str(src), split={"train": 0.6, "validation": 0.4}, seed=s, rule=hashed).splits[
                "validation"
            ]
        )
    )
    found = discover(str(src), split={"train": 0.6, "validation": 0.4}, seed=seed, rule=hashed)
    assert any("split validation has no image of 1 class ('tiny')" in w for w in found.warnings), found.warnings
    assert not any("'big'" in w for w in found.warnings)
    exact = discover(str(src), split={"train": 0.6, "validation": 0.4}, seed=seed)
    assert not exact.warnings and sum(t.text == "tiny" for t in exact.splits["validation"]) == 1


def test_worker_count_never_exceeds_shards_and_scales_with_images():
    from img2tfrecord.conversion.write.engines.pool import MIN_IMAGES_PER_WORKER, worker_count

    assert worker_count(8, 3, 10_000) == 3  # never more processes than shards
    assert worker_count(None, 16, MIN_IMAGES_PER_WORKER) == 1  # a small job: one TensorFlow import, not N
    assert worker_count(None, 16, 10 * MIN_IMAGES_PER_WORKER) == min(os.cpu_count() or 1, 10)
    assert worker_count(1, 0, 0) == 1


def test_the_local_scheduler_writes_every_shard_once_and_returns_them_in_plan_order(tmp_path):
    """Shards go to whoever is free (this process and a worker), outcomes come back in plan order."""
    from helpers import make_dataset
    from img2tfrecord.conversion.events import Timing
    from img2tfrecord.conversion.write.engines.local import LocalEngine
    from img2tfrecord.conversion.write.resume import Journal, header
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


def test_check_options_has_the_option_tables_options_and_defaults(tmp_path, monkeypatch):
    """`convert` checks the options (check_options) before it looks at the output: with the one
    list and defaults of the options' table (format.options), not a copy of them that a new option
    or a changed default would miss."""
    import dataclasses

    from img2tfrecord import convert
    from img2tfrecord.conversion.plan import job as plan
    from img2tfrecord.format import options as table

    def default(name: str, value: object) -> None:  # as if the table's default changed
        rows = tuple(dataclasses.replace(s, default=value) if s.name == name else s for s in table.OPTIONS)
        monkeypatch.setattr(table, "OPTIONS", rows)

    plan.check_options(**{s.name: s.default for s in table.specs("plan")})
    with pytest.raises(TypeError, match="'qualty'"):
        plan.check_options(qualty=90)  # a typo in a caller is not dropped
    default("compression", "gzip")
    with pytest.raises(UsageError, match="describes uncompressed shards"):
        plan.check_options(index=True)
    default("compression", None)
    default("quality", 0)
    (tmp_path / "in").mkdir()
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "x").write_text("not empty")
    with pytest.raises(UsageError, match=r"^bad quality=0: choose 1\.\.100$"):  # not "output is not empty"
        convert(tmp_path / "in", tmp_path / "out", encoding="jpeg")  # quality not given: the table's default
