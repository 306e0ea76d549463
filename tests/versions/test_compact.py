"""`compact`: after updates, every file equals a fresh `convert --labels OUTPUT/labels.txt` (dataset.json apart from lineage)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from helpers import make_dataset, natural_image, save
from img2tfrecord.conversion.convert import convert
from img2tfrecord.conversion.versions.compact import compact
from img2tfrecord.conversion.versions.update import update

LINEAGE = ("version", "parent", "created", "history")


def _files(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.iterdir()) if p.name != "dataset.json"}


def _manifest(out: Path) -> dict:
    m = json.loads((out / "dataset.json").read_text())
    for k in LINEAGE:
        m.pop(k, None)
    m["options"].pop("labels")  # the fresh run was given --labels; the dataset was not
    for sp in m["splits"].values():
        for sh in sp["shards"]:
            sh.pop("version")
    return m


def _same_as_fresh(src: Path, out: Path, fresh: Path, opts: dict) -> None:
    shutil.rmtree(fresh, ignore_errors=True)
    convert(str(src), str(fresh), labels=str(out / "labels.txt"), **opts)
    a, b = _files(out), _files(fresh)
    assert sorted(a) == sorted(b)
    for name in a:
        assert a[name] == b[name], name
    assert json.dumps(_manifest(out)) == json.dumps(_manifest(fresh))  # key order too, as the bytes


CASES = {
    "keep": {"shards": 3},
    # the hash rule: a fresh convert splits the updated tree as the updates did (the exact rule
    # keeps each image where it was: tests/plan/test_split_exact.py compares with the exported assignment)
    "jpeg-resize-split": {"encoding": "jpeg", "resize": 24, "split": "train=0.7,validation=0.3", "split_rule": "hash"},
    "png-gray": {"encoding": "png", "channels": "1", "shards": 2},
    "raw": {"encoding": "raw", "resize": "16x12"},
    "gzip": {"compression": "gzip", "shards": 2},
    "index": {"index": True, "shards": 3},
}


@pytest.mark.parametrize("case", list(CASES))
def test_compact_after_updates_equals_a_fresh_conversion(tmp_path: Path, case: str, cli) -> None:
    opts = CASES[case]
    src, out, fresh = tmp_path / "in", tmp_path / "out", tmp_path / "fresh"
    files = make_dataset(src, {"a": 7, "b": 6, "c": 5}, size=(20, 16))
    (src / "b" / "broken.jpg").write_bytes(b"\xff\xd8\xff broken")
    convert(str(src), str(out), **opts)
    # an update of each kind, then a mix
    save(natural_image(24, 20, 501), src / "a" / "added.jpg", quality=90)
    update(str(src), str(out))
    files["b"][2].unlink()
    update(str(src), str(out))
    save(natural_image(30, 22, 502), files["a"][3], quality=85)  # changed
    save(natural_image(22, 18, 503), src / "d" / "new_class.png")
    shutil.rmtree(src / "c")  # a vanished class
    files["a"][0].unlink()
    update(str(src), str(out))
    before = json.loads((out / "dataset.json").read_text())
    s = compact(str(out))
    assert s["version"] == before["version"] + 1
    man = json.loads((out / "dataset.json").read_text())
    assert man["classes"] == ["a", "b", "c", "d"] and man["version"] == before["version"] + 1
    assert cli("inspect", out, "--verify").exit_code == 0
    _same_as_fresh(src, out, fresh, opts)
    # compacting a compact dataset changes nothing but the lineage
    first = _files(out)
    compact(str(out))
    assert _files(out) == first
