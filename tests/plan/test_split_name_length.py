"""A split name is part of its shards' file names: one too long for a file name is refused up
front, exit 2, nothing written (issue 38, item 19: it ran, then failed at the end advising
--resume, which failed the same way). Names up to the limit convert."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import make_dataset, read_records
from img2tfrecord.format.manifest import ManifestError, parse_manifest
from img2tfrecord.format.naming import MAX_SPLIT_NAME_BYTES


def test_a_split_name_too_long_for_a_file_name_is_refused_up_front(cli, tmp_path: Path) -> None:
    make_dataset(tmp_path / "in", {"a": 3, "b": 3})
    long = "x" * 301
    r = cli("convert", tmp_path / "in", tmp_path / "out", "--split", f"train=0.5,{long}=0.5")
    assert r.exit_code == 2, r.output
    assert r.stderr.startswith("error: bad --split ") and r.stderr.count("\n") == 1
    assert "the split name xxxxxxxxxxxxxxxxxxxx... is 301 bytes; at most 200" in r.stderr
    assert "--resume" not in r.stderr and long not in r.stderr
    assert not (tmp_path / "out").exists()
    r = cli("convert", tmp_path / "in", tmp_path / "out", "--split", f"train=0.5,{long}=0.5", "--json")
    assert r.exit_code == 2 and json.loads(r.stdout)["error"]["kind"] == "usage"
    two_bytes = "\u00e9" * (MAX_SPLIT_NAME_BYTES // 2 + 1)  # 101 characters, 202 bytes
    r = cli("convert", tmp_path / "in", tmp_path / "out", "--split", f"train=0.5,{two_bytes}=0.5")
    assert r.exit_code == 2 and "is 202 bytes" in r.stderr


def test_a_split_name_at_the_limit_converts_and_updates(cli, tmp_path: Path) -> None:
    make_dataset(tmp_path / "in", {"a": 3, "b": 3})
    name = "v" * MAX_SPLIT_NAME_BYTES
    out = tmp_path / "out"
    r = cli("convert", tmp_path / "in", out, "--split", f"train=0.5,{name}=0.5", "--quiet")
    assert r.exit_code == 0, r.output
    make_dataset(tmp_path / "in", {"c": 2}, seed=3)
    r = cli("update", tmp_path / "in", out, "--quiet")
    assert r.exit_code == 0, r.output
    assert len(read_records(out)) == 8
    assert cli("inspect", out, "--verify").exit_code == 0


def test_a_recorded_split_name_is_refused_only_where_no_shard_name_fits(cli, tmp_path: Path) -> None:
    """dataset.json read back: a split name of 201-240 bytes (a dataset made before the limit) still
    opens; past 240 no shard name can hold it, and the manifest is said to be damaged."""
    make_dataset(tmp_path / "in", {"a": 3})
    name = "v" * MAX_SPLIT_NAME_BYTES
    assert cli("convert", tmp_path / "in", tmp_path / "out", "--split", f"{name}=1", "--quiet").exit_code == 0
    text = (tmp_path / "out" / "dataset.json").read_text()
    parse_manifest(text.replace(name, "v" * 240))
    with pytest.raises(ManifestError, match=r"names a split that cannot be a file name: .* is 241 bytes; at most 240"):
        parse_manifest(text.replace(name, "v" * 241))
