"""A passing error never drops records: an OS or I/O error (permission denied, EIO, ENOSPC or
ETIMEDOUT at the image's open, a link whose target is missing, a folder that cannot be listed) is a
skip that keeps the image's record and is tried again next time; `--strict` fails on it. Once the
fault clears, `update` gives what a fresh convert of the tree gives.

Permissions are tested without root's capabilities (setpriv), I/O errors injected at the exact
`openat` of the image (strace -P)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import make_dataset, natural_image, read_records, save
from img2tfrecord import convert

SETPRIV = shutil.which("setpriv")
STRACE = shutil.which("strace")
NO_DAC = [SETPRIV or "setpriv", "--bounding-set", "-dac_override,-dac_read_search", "--inh-caps", "-all", "--"]


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("TF_CPP")}


def _run(prefix: list[str], *args: str | Path) -> subprocess.CompletedProcess:
    cmd = [*prefix, sys.executable, "-m", "img2tfrecord", *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, env=_env(), timeout=180)


def _without_root(*args: str | Path) -> subprocess.CompletedProcess:
    if SETPRIV is None:
        pytest.skip("setpriv is not installed")
    return _run(NO_DAC, *args)


def _injected(path: Path, error: str, *args: str | Path) -> subprocess.CompletedProcess:
    """The command with `error` injected at every openat of `path` (and nothing else)."""
    if STRACE is None:
        pytest.skip("strace is not installed (apt-get install strace)")
    return _run([STRACE, "-f", "-qq", "-o", "/dev/null", "-P", str(path), "-e", f"inject=openat:error={error}"], *args)


def _files(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in out.iterdir() if p.is_file() and not p.name.startswith(".")}


def _records(out: Path) -> dict[bytes, bytes]:
    return {r["filename"]: r["encoded"] for r in read_records(out)}


def _manifest(out: Path) -> dict:
    return json.loads((out / "dataset.json").read_text())


def _as_fresh(cli, src: Path, out: Path, fresh: Path) -> None:
    """`update` now gives what a fresh convert of the tree gives: the same shards, indexes, labels,
    TFDS files, splits and skips (and, compacted, the same catalog and dataset.json but lineage)."""
    r = cli("update", src, out)
    assert r.exit_code == 0, r.output
    shutil.rmtree(fresh, ignore_errors=True)
    assert cli("convert", src, fresh, "--labels", out / "labels.txt").exit_code == 0
    assert cli("compact", out).exit_code == 0
    a, b = _files(out), _files(fresh)
    m_up, m_fresh = json.loads(a.pop("dataset.json")), json.loads(b.pop("dataset.json"))
    assert a == b
    for sp in m_up["splits"].values():
        for shard in sp["shards"]:
            shard.pop("version")  # lineage: the version that wrote it
    for sp in m_fresh["splits"].values():
        for shard in sp["shards"]:
            shard.pop("version")
    for key in ("splits", "skipped", "classes", "catalog"):
        assert m_up[key] == m_fresh[key], key
    assert cli("inspect", out, "--verify").exit_code == 0


@pytest.fixture
def tree(tmp_path: Path) -> tuple[Path, Path, Path]:
    src, out = tmp_path / "in", tmp_path / "out"
    make_dataset(src, {"a": 5, "b": 5}, size=(16, 12))
    convert(src, out, workers=1)
    return src, out, tmp_path / "fresh"


def test_a_new_image_denied_is_tried_again_once_readable(tree, cli) -> None:
    src, out, fresh = tree
    new = save(natural_image(18, 14, 7), src / "a" / "new.jpg", quality=90)
    new.chmod(0)
    try:
        r = _without_root("update", src, out, "--strict")
        assert r.returncode == 1 and "a/new.jpg: permission denied" in r.stderr, r.stderr
        r = _without_root("update", src, out)
        assert r.returncode == 0 and "a/new.jpg: permission denied" in r.stderr, r.stderr
        assert len(_records(out)) == 10
    finally:
        new.chmod(0o644)
    r = cli("update", src, out, "--dry-run")
    assert "1 retried" in r.stdout + r.stderr, r.output  # not "up to date" (size and mtime are the same)
    _as_fresh(cli, src, out, fresh)
    assert len(_records(out)) == 11


@pytest.mark.parametrize("error", ["EIO", "ENOSPC", "ETIMEDOUT"])
def test_a_new_image_failing_at_its_open_is_tried_again(tree, cli, error: str) -> None:
    src, out, fresh = tree
    new = save(natural_image(18, 14, 7), src / "b" / "new.png")
    r = _injected(new, error, "update", src, out)
    assert r.returncode == 0 and "b/new.png: cannot read: " in r.stderr, r.stderr
    assert len(_records(out)) == 10
    assert _injected(new, error, "update", src, out, "--strict").returncode == 1
    _as_fresh(cli, src, out, fresh)
    assert len(_records(out)) == 11


def test_a_changed_image_that_cannot_be_read_keeps_its_record(tree, cli) -> None:
    src, out, fresh = tree
    before = _records(out)
    changed = src / "a" / "img_001.jpg"
    save(natural_image(20, 15, 99), changed, quality=80)
    r = _injected(changed, "EIO", "update", src, out)
    assert r.returncode == 0, r.stderr
    assert "1 changed image could not be read now; its record of version 1 stays" in r.stderr, r.stderr
    assert _records(out) == before  # the old record, not none
    assert cli("inspect", out, "--verify").exit_code == 0
    _as_fresh(cli, src, out, fresh)  # tried again: the new bytes
    assert _records(out)[b"a/img_001.jpg"] == changed.read_bytes()


def test_a_class_folder_whose_link_target_is_gone_keeps_its_records(tmp_path: Path, cli) -> None:
    src, out, disk = tmp_path / "in", tmp_path / "out", tmp_path / "disk"
    make_dataset(src, {"a": 5}, size=(16, 12))
    make_dataset(disk, {"b": 5}, size=(16, 12), seed=1)
    (src / "b").symlink_to(disk / "b", target_is_directory=True)
    convert(src, out, workers=1)
    before = _records(out)
    (disk / "b").rename(disk / "unmounted")
    r = cli("update", src, out, "--strict")
    assert r.exit_code == 1 and "b: cannot tell whether it is a folder: no such file or directory" in r.stderr
    r = cli("update", src, out)
    assert r.exit_code == 0, r.output
    assert "5 kept unread (in a folder that cannot be listed now)" in r.output
    assert "no image left" not in r.output
    assert _records(out) == before  # nothing removed
    assert [s["path"] for s in _manifest(out)["skipped"]] == ["b"]  # said in dataset.json
    assert _manifest(out)["splits"]["train"]["class_counts"] == {"a": 5, "b": 5}
    (disk / "unmounted").rename(disk / "b")
    _as_fresh(cli, src, out, tmp_path / "fresh")


def test_links_inside_a_class_whose_targets_are_gone_keep_their_records(tmp_path: Path, cli) -> None:
    src, out, disk = tmp_path / "in", tmp_path / "out", tmp_path / "disk"
    make_dataset(src, {"a": 4, "b": 4}, size=(16, 12))
    make_dataset(disk, {"sub": 3}, size=(16, 12), seed=2)
    (src / "a" / "sub").symlink_to(disk / "sub", target_is_directory=True)  # a folder
    one = save(natural_image(18, 14, 5), disk / "one.png")
    (src / "b" / "one.png").symlink_to(one)  # an image
    convert(src, out, workers=1)
    before = _records(out)
    assert len(before) == 12
    (disk / "sub").rename(disk / "gone")
    one.rename(disk / "gone.png")
    r = cli("update", src, out)
    assert r.exit_code == 0, r.output
    assert _records(out) == before
    assert cli("update", src, out, "--strict").exit_code == 1
    (disk / "gone").rename(disk / "sub")
    (disk / "gone.png").rename(one)
    _as_fresh(cli, src, out, tmp_path / "fresh")
    assert len(_records(out)) == 12


def test_a_nested_folder_denied_keeps_its_records(tmp_path: Path, cli) -> None:
    src, out = tmp_path / "in", tmp_path / "out"
    make_dataset(src, {"a": 3, "b": 3}, size=(16, 12))
    make_dataset(src / "a", {"nested": 3}, size=(16, 12), seed=3)
    convert(src, out, workers=1)
    before = _records(out)
    (src / "a" / "nested").chmod(0)
    try:
        r = _without_root("update", src, out)
        assert r.returncode == 0 and "a/nested/: cannot list folder: permission denied" in r.stderr, r.stderr
        assert _records(out) == before
        assert _without_root("update", src, out, "--strict").returncode == 1
    finally:
        (src / "a" / "nested").chmod(0o755)
    _as_fresh(cli, src, out, tmp_path / "fresh")
    assert _records(out) == before
