"""A class missing from a split is said by convert itself (issue 38, item 23): a warning (stderr
and --json's `warnings`), `absent_classes` in --json, and a sentence of the summary, not only a
flagged cell in the report. Under the exact rule, with split folders, and once (not twice) where
the hash rule's plan warning names it already."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from helpers import make_dataset


def _said(r, split: str, cls: str) -> list[str]:
    return [
        w for w in json.loads(r.stdout)["warnings"] if w.startswith(f"split {split} has no image of") and repr(cls) in w
    ]


def test_exact_rule_a_class_too_small_for_validation(cli, tmp_path: Path) -> None:
    make_dataset(tmp_path / "in", {"big": 6, "tiny": 1})
    r = cli("convert", tmp_path / "in", tmp_path / "out", "--split", "train=0.7,validation=0.3", "--json")
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout)
    assert summary["absent_classes"] == {"validation": ["tiny"]}
    assert _said(r, "validation", "tiny") == [
        "split validation has no image of 1 class ('tiny'), which another split holds: "
        "results on validation say nothing about it"
    ]
    r = cli("convert", tmp_path / "in", tmp_path / "out2", "--split", "train=0.7,validation=0.3")
    assert "warning: split validation has no image of 1 class ('tiny')" in r.stderr
    assert "No image of tiny in validation (see the warning)." in r.stderr


def test_split_folders_a_class_missing_from_one(cli, tmp_path: Path) -> None:
    make_dataset(tmp_path / "in" / "train", {"a": 3, "b": 3})
    make_dataset(tmp_path / "in" / "validation", {"a": 2}, seed=1)
    r = cli("convert", tmp_path / "in", tmp_path / "out", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["absent_classes"] == {"validation": ["b"]}
    assert len(_said(r, "validation", "b")) == 1


def test_said_once_under_the_hash_rule(cli, tmp_path: Path) -> None:
    """The hash rule's plan already warns for a class whose share would be at least one image."""
    make_dataset(tmp_path / "in", {"a": 8, "b": 4})
    for seed in range(40):  # a seed that leaves b out of validation (its share: 1.2 images)
        out = tmp_path / f"out{seed}"
        args = ("--split", "train=0.7,validation=0.3", "--split-rule", "hash", "--seed", seed, "--json")
        r = cli("convert", tmp_path / "in", out, *args)
        assert r.exit_code == 0, r.output
        if json.loads(r.stdout)["absent_classes"].get("validation") == ["b"]:
            break
        shutil.rmtree(out)
    else:
        raise AssertionError("no seed in 0..39 leaves b out of validation")
    assert len(_said(r, "validation", "b")) == 1


def test_no_warning_when_every_split_has_every_class(cli, tmp_path: Path) -> None:
    make_dataset(tmp_path / "in", {"a": 10, "b": 10})
    r = cli("convert", tmp_path / "in", tmp_path / "out", "--split", "train=0.7,validation=0.3", "--json")
    assert json.loads(r.stdout)["absent_classes"] == {}
    assert not [w for w in json.loads(r.stdout)["warnings"] if "has no image of" in w]
