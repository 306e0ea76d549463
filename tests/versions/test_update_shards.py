"""`update`'s new shards follow the dataset's shard-size rule, the function `convert` plans with."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import make_dataset, natural_image, save
from img2tfrecord.conversion.convert import convert
from img2tfrecord.conversion.plan import job as plan
from img2tfrecord.conversion.versions.update import update


def _add(root: Path, counts: dict[str, int], seed: int) -> None:
    """root/CLASS/new_NNN.jpg: images that no make_dataset name collides with."""
    for ci, (cls, n) in enumerate(counts.items()):
        for i in range(n):
            save(natural_image(16 + i, 12, seed * 1000 + ci * 100 + i), root / cls / f"new_{i:03d}.jpg", quality=90)


def _shards(out: Path) -> list[str]:
    man = json.loads((out / "dataset.json").read_text())
    return [sh["file"] for sp in man["splits"].values() for sh in sp["shards"]]


def test_new_shards_without_shards_option_follow_convert_s_byte_rule(tmp_path: Path) -> None:
    """A 1-shard dataset (default rule) that gets more new images than it holds: one new shard
    (100-200 MiB a shard), not one per the old shard's record count."""
    src, out = tmp_path / "in", tmp_path / "out"
    make_dataset(src, {"a": 3, "b": 3}, size=(16, 12))
    convert(str(src), str(out), workers=1)
    assert _shards(out) == ["train-00000-of-00001"]
    _add(src, {"a": 7, "b": 7}, seed=5)
    s = update(str(src), str(out), workers=1, dry_run=True)
    assert s["shards_to_write"] == 1, s["shards"]
    s = update(str(src), str(out), workers=1)
    assert s["shards_new"] == 1 and len(_shards(out)) == 2


@pytest.mark.parametrize("index", [False, True])
def test_new_shards_are_as_many_as_convert_plans_for_the_new_images(tmp_path: Path, monkeypatch, index) -> None:
    """With a small target shard size, the new images get the shard count a conversion of them alone gets."""
    monkeypatch.setattr(plan, "TARGET_SHARD_BYTES", 2000)
    src, out, alone = tmp_path / "in", tmp_path / "out", tmp_path / "alone"
    make_dataset(src, {"a": 4, "b": 4}, size=(16, 12))
    convert(str(src), str(out), workers=1, index=index)
    before = len(_shards(out))
    _add(alone, {"a": 5, "b": 4}, seed=7)
    _add(src, {"a": 5, "b": 4}, seed=7)  # the same 9 images into the input
    expected = len(_shards(Path(convert(str(alone), str(tmp_path / "c"), workers=1, index=index)["output"])))
    assert expected > 1
    s = update(str(src), str(out), workers=1)
    assert s["shards_new"] == expected and len(_shards(out)) == before + expected
