"""inspect and report while a new version is published (issue 38, item 21): each reads the version
whose dataset.json it read, whole (its shards, catalog and labels.txt), as load() does; never the
old dataset.json with the new folder's files.

The race is made exact, as load()'s own test makes it (tests/reading/test_reader_race.py): the
command runs in this process, and the moment it has parsed OUTPUT's dataset.json an update that
renumbers every shard runs to its end; then the command goes on reading.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

import img2tfrecord
from helpers import make_dataset, natural_image, save
from img2tfrecord.conversion.write.workspace import workspace
from img2tfrecord.format import layout

V1_RECORDS = 12


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    root = tmp_path_factory.mktemp("inspectrace")
    make_dataset(root / "in", {"a": 6, "b": 6}, size=(16, 12))
    img2tfrecord.convert(str(root / "in"), str(root / "v1"), shards=3, workers=1)
    (root / "in" / "c").mkdir()  # a new class: labels.txt differs between the versions too
    save(natural_image(18, 14, 7), root / "in" / "c" / "added.jpg", quality=90)
    return root


@pytest.fixture
def out(case, tmp_path) -> Path:
    out = tmp_path / "out"
    shutil.rmtree(workspace(str(out)).root, ignore_errors=True)
    shutil.copytree(case / "v1", out)
    return out


@pytest.fixture
def update_after_open(case, out, monkeypatch, cli) -> Iterator[list[int]]:
    """Publish version 2 of `out` (every shard renamed -of-00004) right after the command under test
    parsed its dataset.json of version 1, once; yields the versions published so."""
    real = layout.parse_manifest
    published: list[int] = []

    def parse_then_update(data: bytes):
        parsed = real(data)
        if not published and parsed.get("version") == 1:
            published.append(0)  # before the update: it parses dataset.json too
            summary = img2tfrecord.update(str(case / "in"), str(out))
            assert summary["version"] == 2 and summary["records"] == V1_RECORDS + 1
            assert not (out / "train-00000-of-00003").exists()  # every name the reader read is gone
            published[0] = 2
        return parsed

    monkeypatch.setattr(layout, "parse_manifest", parse_then_update)
    yield published
    monkeypatch.undo()
    r = cli("inspect", out, "--verify", "--json")  # and OUTPUT is version 2, whole
    assert r.exit_code == 0 and json.loads(r.output)["total"]["records"] == V1_RECORDS + 1, r.output[-3000:]


@pytest.mark.parametrize(
    "extra",
    [[], ["--verify"], ["--contact-sheet", "{tmp}/sheet.png"], ["--extract", "{tmp}/x", "--all"]],
    ids=["read", "verify", "contact-sheet", "extract"],
)
def test_inspect_reads_the_version_it_opened_while_an_update_publishes(out, tmp_path, cli, update_after_open, extra):
    args = [a.replace("{tmp}", str(tmp_path)) for a in extra]
    res = cli("inspect", out, "--json", *args)
    assert update_after_open == [2]
    assert res.exit_code == 0, res.output[-3000:]
    rep = json.loads(res.output)
    assert rep["problems"] == [] and rep["ok"], rep["problems"]
    assert rep["total"]["records"] == V1_RECORDS and rep["total"]["files"] == 3
    assert [f["path"] for f in rep["files"]] == [str(out / f"train-0000{i}-of-00003") for i in range(3)]
    assert rep["lineage"][0]["version"] == 1
    assert {c["name"]: c["count"] for c in rep["total"]["labels"]} == {"a": 6, "b": 6}
    if "--extract" in extra:
        assert rep["extracted"]["images"] == V1_RECORDS
        assert len([p for p in (tmp_path / "x").rglob("*") if p.is_file()]) == V1_RECORDS
    if "--contact-sheet" in extra:
        assert (tmp_path / "sheet.png").stat().st_size > 0


def test_inspect_export_list_reads_the_catalog_of_the_version_it_opened(out, tmp_path, cli, update_after_open):
    listed = tmp_path / "list.csv"
    res = cli("inspect", out, "--json", "--export-list", listed)
    assert update_after_open == [2]
    assert res.exit_code == 0, res.output[-3000:]
    rep = json.loads(res.output)
    assert rep["problems"] == [] and rep["total"]["records"] == V1_RECORDS
    rows = listed.read_text().splitlines()
    assert len(rows) == 1 + V1_RECORDS and not any("added.jpg" in r for r in rows), rows


def test_report_reads_the_version_it_opened_while_an_update_publishes(out, tmp_path, cli, update_after_open):
    page = tmp_path / "page.html"
    res = cli("report", out, "-o", page)
    assert update_after_open == [2]
    assert res.exit_code == 0, res.output
    assert f"{V1_RECORDS} records, 2 classes, {V1_RECORDS} thumbnails" in res.output, res.output
    text = page.read_text()
    assert "added.jpg" not in text
    assert "could not be shown" not in text, "a thumbnail of version 1 was read from version 2's shards"
    assert text.count("data:image/jpeg;base64,") == V1_RECORDS


@pytest.mark.parametrize(
    ("named", "shards"),
    [("train-*", [0, 1, 2]), ("train-0000[02]-of-00003", [0, 2]), ("train-00001-of-00003", [1]), ("train-00002", [2])],
    ids=["glob", "glob-set", "file", "prefix"],
)
def test_inspect_of_shard_files_reads_the_version_it_opened(out, cli, update_after_open, named, shards):
    """PATHs naming shard files of a dataset folder (a glob, a file, a prefix) are found in that
    folder as inspect holds it open: the files and the dataset.json that describes them are version
    1's, though version 2 (every shard renamed) is published once its dataset.json is read."""
    res = cli("inspect", str(out / named), "--verify", "--json")
    assert update_after_open == [2]
    assert res.exit_code == 0, res.output[-3000:]
    rep = json.loads(res.output)
    assert rep["problems"] == [] and rep["ok"], rep["problems"]
    assert [f["path"] for f in rep["files"]] == [str(out / f"train-0000{i}-of-00003") for i in shards]
    assert rep["total"]["records"] == V1_RECORDS * len(shards) // 3
    assert rep["lineage"][0]["version"] == 1
