"""Lineage in dataset.json: version, parent, created (SOURCE_DATE_EPOCH honoured), per-shard version; inspect prints it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import make_dataset
from img2tfrecord.conversion.convert import convert


def _manifest(out: Path) -> dict:
    return json.loads((out / "dataset.json").read_text())


def test_convert_is_version_one_and_created_follows_source_date_epoch(tmp_path: Path, monkeypatch, cli) -> None:
    make_dataset(tmp_path / "in", {"a": 3, "b": 3})
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1234567890")
    convert(str(tmp_path / "in"), str(tmp_path / "out"), shards=2)
    m = _manifest(tmp_path / "out")
    assert (m["version"], m["parent"], m["created"]) == (1, None, "2009-02-13T23:31:30Z")
    shards = [sh for sp in m["splits"].values() for sh in sp["shards"]]
    assert len(shards) == 2 and all(sh["version"] == 1 for sh in shards)
    result = cli("inspect", tmp_path / "out")
    assert result.exit_code == 0
    assert f"dataset {tmp_path / 'out'}: version 1 (no parent), created 2009-02-13T23:31:30Z" in result.output


def test_without_source_date_epoch_only_created_differs(tmp_path: Path, monkeypatch) -> None:
    make_dataset(tmp_path / "in", {"a": 3, "b": 2})
    monkeypatch.delenv("SOURCE_DATE_EPOCH")
    clock = iter([1_000_000_000] * 2 + [1_000_000_007] * 2)  # each run asks twice: a check first, then the stamp
    monkeypatch.setattr("img2tfrecord.format.manifest._now", lambda: next(clock))
    for out in ("o1", "o2"):
        convert(str(tmp_path / "in"), str(tmp_path / out))
    m1, m2 = _manifest(tmp_path / "o1"), _manifest(tmp_path / "o2")
    assert (m1["created"], m2["created"]) == ("2001-09-09T01:46:40Z", "2001-09-09T01:46:47Z")
    assert {k: v for k, v in m1.items() if k != "created"} == {k: v for k, v in m2.items() if k != "created"}
    for p in (tmp_path / "o1").iterdir():
        if p.name != "dataset.json":
            assert p.read_bytes() == (tmp_path / "o2" / p.name).read_bytes(), p.name


def test_malformed_source_date_epoch_is_a_usage_error(tmp_path: Path, monkeypatch, cli) -> None:
    make_dataset(tmp_path / "in", {"a": 2})
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "yesterday")
    result = cli("convert", tmp_path / "in", tmp_path / "out")
    assert result.exit_code == 2
    assert "SOURCE_DATE_EPOCH='yesterday' is not a whole number" in result.output
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("raw", ["-5", "1.5"])
def test_created_stamp_refuses_non_integers(raw: str) -> None:
    from img2tfrecord.errors import UsageError
    from img2tfrecord.format.manifest import created_stamp

    with pytest.raises(UsageError):
        created_stamp({"SOURCE_DATE_EPOCH": raw})
