"""A class an update leaves with no image in a split is said by update itself, as convert says it
(issue 38, item 23; issue 39, item 4): a warning (stderr and --json's `warnings`), `absent_classes`
in --json, and a sentence of the summary."""

from __future__ import annotations

import json
from pathlib import Path

from helpers import make_dataset

SPLIT = ("--split", "train=0.8,validation=0.2")


def test_a_new_one_image_class_is_said_missing_from_validation(cli, tmp_path: Path) -> None:
    make_dataset(tmp_path / "in", {"a": 10, "b": 10})
    r = cli("convert", tmp_path / "in", tmp_path / "out", *SPLIT)
    assert r.exit_code == 0, r.output
    make_dataset(tmp_path / "in", {"tiny": 1}, seed=3)
    r = cli("update", tmp_path / "in", tmp_path / "out", "--dry-run", "--json")
    assert r.exit_code == 0, r.output
    r = cli("update", tmp_path / "in", tmp_path / "out", "--json")
    assert r.exit_code == 0, r.output
    s = json.loads(r.stdout)
    assert s["absent_classes"] == {"validation": ["tiny"]}
    said = [w for w in s["warnings"] if w.startswith("split validation has no image of") and "'tiny'" in w]
    assert len(said) == 1, s["warnings"]
    make_dataset(tmp_path / "in", {"tiny2": 1}, seed=4)
    r = cli("update", tmp_path / "in", tmp_path / "out")
    assert r.exit_code == 0, r.output
    assert "warning: split validation has no image of 2 classes ('tiny', 'tiny2')" in r.stderr, r.stderr
    assert " s. No image of tiny, tiny2 in validation (see the warning).\n" in r.stderr, r.stderr


def test_no_sentence_when_every_split_has_every_class(cli, tmp_path: Path) -> None:
    make_dataset(tmp_path / "in", {"a": 10, "b": 10})
    assert cli("convert", tmp_path / "in", tmp_path / "out", *SPLIT).exit_code == 0
    make_dataset(tmp_path / "in", {"c": 10}, seed=3)
    r = cli("update", tmp_path / "in", tmp_path / "out", "--json")
    assert r.exit_code == 0, r.output
    s = json.loads(r.stdout)
    assert s["absent_classes"] == {}
    assert not [w for w in s["warnings"] if "has no image of" in w]
