"""The walk never drops silently: what it cannot read is a skip with its path and the OS's reason
(stderr and dataset.json; a failure under --strict), a class folder it cannot list is an error,
and folders and files that are never data are ignored and said so once.

Both local walks are checked (the bytes walk of POSIX and the str walk of other platforms, by
switching `walk._BYTES_WALK`): they must find, skip and say the same. Permission cases run the
CLI in a subprocess without the capabilities that let root read everything.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from helpers import make_dataset, natural_image, read_records, save
from img2tfrecord.conversion.plan import walk
from img2tfrecord.conversion.plan.job import plan_job
from img2tfrecord.errors import DataError

NO_DAC = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search", "--inh-caps", "-all", "--"]


@pytest.fixture(params=["bytes walk", "str walk"])
def either_walk(request, monkeypatch):
    if request.param == "str walk":
        monkeypatch.setattr(walk, "_BYTES_WALK", False)
    return request.param


def manifest(out: Path) -> dict:
    return json.loads((out / "dataset.json").read_text())


def test_folders_and_files_that_are_never_data_are_ignored_and_said_once(cli, tmp_path, either_walk):
    """An unzipped Mac archive's __MACOSX beside the classes is no class (labels do not shift),
    a NAS's @eaDir thumbnails inside a class are no images, and OS junk is no non-image file."""
    src = tmp_path / "in"
    make_dataset(src, {"cat": 2, "dog": 2})
    for junk in (
        "__MACOSX/cat/._img_000.jpg",
        "cat/@eaDir/img_000.jpg/SYNOPHOTO_THUMB_M.jpg",
        ".ipynb_checkpoints/x.jpg",
    ):
        save(natural_image(8, 8, 1), src / junk)
    for name in ("cat/Thumbs.db", "dog/desktop.ini", "dog/.DS_Store", "cat/._img_001.jpg"):
        (src / name).write_bytes(b"junk")
    (src / "dog" / "notes.txt").write_text("a real non-image file")
    res = cli("convert", src, tmp_path / "out", "--json")
    assert res.exit_code == 0, res.output
    m = manifest(tmp_path / "out")
    assert m["classes"] == ["cat", "dog"]
    assert m["splits"]["train"]["records"] == 4 and m["skipped"] == [] and m["ignored_files"] == 1
    notes = [line for line in res.stderr.splitlines() if line.startswith("note: ignored")]
    assert notes == ["note: ignored folders that are never classes or images: .ipynb_checkpoints, @eaDir, __MACOSX"]


@pytest.mark.skipif(os.geteuid() == 0 and not shutil.which("setpriv"), reason="root without setpriv reads everything")
def test_unreadable_folders_are_skipped_or_fail_never_dropped():
    """chmod 000 on a subfolder of a class: a skip with its path and reason (rc 0; rc 1 under
    --strict, nothing written). On a class folder: an error, not an empty class."""
    prefix = NO_DAC if os.geteuid() == 0 else []
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o777)
        base = Path(tmp)
        make_dataset(base / "in", {"a": 2, "c": 2})
        make_dataset(base / "in" / "a" / "sub", {"deep": 3})
        for p in base.rglob("*"):
            os.chmod(p, 0o755 if p.is_dir() else 0o644)
        os.chmod(base / "in" / "a" / "sub", 0)
        cmd = [*prefix, sys.executable, "-m", "img2tfrecord", "convert", str(base / "in")]
        res = subprocess.run([*cmd, str(base / "out"), "--workers", "1"], capture_output=True, text=True)
        assert res.returncode == 0, res.stderr
        assert "skipped: a/sub/: cannot list folder: permission denied" in res.stderr.splitlines()
        m = manifest(base / "out")
        assert m["skipped"] == [{"path": "a/sub/", "split": "", "reason": "cannot list folder: permission denied"}]
        assert m["splits"]["train"]["records"] == 4
        res = subprocess.run([*cmd, str(base / "strict"), "--strict"], capture_output=True, text=True)
        assert res.returncode == 1 and not (base / "strict").exists()
        assert res.stderr.strip().splitlines()[-1] == (
            "error: --strict: 1 file or folder cannot be read, e.g. a/sub/: cannot list folder: permission denied; "
            "nothing was written"
        )
        os.chmod(base / "in" / "a" / "sub", 0o755)
        os.chmod(base / "in" / "c", 0)
        res = subprocess.run([*cmd, str(base / "out2")], capture_output=True, text=True)
        assert res.returncode == 1 and not (base / "out2").exists(), res.stderr
        assert res.stderr.strip().splitlines() == [
            f"error: cannot list class folder {base / 'in' / 'c'}: permission denied; its images would be missing: "
            "fix its permissions, or leave the class out with --labels"
        ]
        assert "has no images" not in res.stderr and "Traceback" not in res.stderr
        (base / "labels.txt").write_text("a\n")  # a class left out by --labels is not listed
        res = subprocess.run([*cmd, str(base / "out3"), "--labels", str(base / "labels.txt")], capture_output=True)
        assert res.returncode == 0, res.stderr


def test_a_symlink_loop_is_a_skip_with_the_os_reason(tmp_path, either_walk):
    src = tmp_path / "in"
    make_dataset(src, {"a": 2})
    os.symlink("loop", src / "a" / "loop")  # points at itself: ELOOP
    os.symlink("self.jpg", src / "a" / "self.jpg")
    plan = plan_job(str(src), str(tmp_path / "out"), split="train=0.5,validation=0.5")
    assert [(s["path"], s["reason"]) for s in plan.skipped] == [
        ("a/loop", "cannot tell whether it is a folder: too many levels of symbolic links"),
        ("a/self.jpg", "cannot tell whether it is a folder: too many levels of symbolic links"),
    ]
    assert all(s["split"] in ("train", "validation") for s in plan.skipped)  # a file's split is its hash's
    assert plan.images == 2
    with pytest.raises(DataError, match="strict=True: 2 files or folders cannot be read, e.g. a/loop: "):
        plan_job(str(src), str(tmp_path / "out"), strict=True)


def test_a_folder_reached_twice_is_walked_once(cli, tmp_path, either_walk):
    """Issue 38, item 6: `a/link_to_b -> ../b` adds no second copy of b's images (with a's label):
    a class folder is walked as its own class only; a folder two classes link to is walked by the
    first of them. Every image one record, as docs/converting.md says."""
    src = tmp_path / "in"
    made = make_dataset(src, {"a": 2, "b": 3, "c": 1})
    os.symlink("../b", src / "a" / "link_to_b")
    make_dataset(tmp_path / "shared", {"s": 2}, seed=1)
    os.symlink("../../shared/s", src / "a" / "to_shared")
    os.symlink("../../shared/s", src / "c" / "to_shared")
    res = cli("convert", src, tmp_path / "out", "--json")
    assert res.exit_code == 0, res.output
    records = read_records(tmp_path / "out")
    got = sorted((r["text"].decode(), r["filename"].decode()) for r in records)
    mine = [(c, f"{c}/{p.name}") for c, paths in made.items() for p in paths]
    shared = [("a", "a/to_shared/img_000.png"), ("a", "a/to_shared/img_001.jpg")]  # by a, the first to reach it
    assert got == sorted(mine + shared)
    assert manifest(tmp_path / "out")["duplicates"]["duplicate_files"] == 0


def test_a_folder_deeper_than_path_max_is_skipped_with_its_reason(cli, tmp_path, either_walk):
    """250 nested folders (~5,500 characters): the walk says where it stopped and why."""
    src = tmp_path / "in"
    make_dataset(src, {"a": 1})
    fd = os.open(src / "a", os.O_RDONLY)
    try:
        for i in range(250):
            name = f"nested_folder_{i:04d}"
            os.mkdir(name, dir_fd=fd)
            sub = os.open(name, os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = sub
        os.close(os.open("deep.jpg", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd))
    finally:
        os.close(fd)
    res = cli("convert", src, tmp_path / "out", "--json")
    assert res.exit_code == 0, res.output
    (skip,) = manifest(tmp_path / "out")["skipped"]
    assert skip["path"].startswith("a/nested_folder_0000/") and skip["path"].endswith("/")
    assert len(str(src / skip["path"])) > walk.PATH_MAX - 30
    assert skip["reason"].startswith("cannot list folder: file name too long (its path is ")
    assert f"skipped: {skip['path']}: {skip['reason']}" in res.stderr.splitlines()
    assert json.loads(res.stdout)["skipped_count"] == 1


def test_a_labels_class_without_a_folder_says_the_folder_is_missing(cli, tmp_path):
    src = tmp_path / "in"
    make_dataset(src, {"a": 1, "b": 1})
    (src / "c").mkdir()  # a folder with no images: a different message
    (tmp_path / "labels.txt").write_text("a\nzebra\nb\nc\n")
    res = cli("convert", src, tmp_path / "out", "--labels", tmp_path / "labels.txt", "--dry-run")
    assert res.exit_code == 0, res.output
    warnings = [line for line in res.stderr.splitlines() if line.startswith("warning: class")]
    assert warnings == [
        f"warning: class 'zebra' of --labels has no images: its folder {src / 'zebra'} is missing; its label is kept",
        "warning: class 'c' has no images; its label is kept",
    ]
    rows = "".join(f"{p.relative_to(src)}\n" for p in sorted(src.rglob("*.*")))
    (tmp_path / "list.csv").write_text(rows)
    res = cli(
        "convert", src, tmp_path / "out2", "--labels", tmp_path / "labels.txt", "--file-list", tmp_path / "list.csv"
    )
    assert res.exit_code == 0, res.output
    assert (
        f"class 'zebra' of --labels has no images: no row of --file-list {tmp_path / 'list.csv'} is of that class"
        in res.stderr
    )


def test_a_remote_walk_ignores_junk_and_can_stat_its_images(tmp_path):
    """ram:// (TensorFlow's in-memory file system): the remote walk ignores the same junk, says the
    same note, and fills in (`stat_remote`) the sizes and mtimes a listing does not give."""
    from img2tfrecord.tf_import import tensorflow

    gfile = tensorflow().io.gfile
    root = "ram://h3walk/in"
    files = {"cat/1.jpg": b"\xff\xd8one", "cat/deep/2.jpg": b"\xff\xd8two!", "dog/3.jpg": b"\xff\xd8x"}
    junk = ["__MACOSX/cat/._1.jpg", "cat/.DS_Store", "dog/Thumbs.db", "dog/@eaDir/3.jpg/thumb.jpg"]
    for name in [*files, *junk]:
        gfile.makedirs(f"{root}/{name.rsplit('/', 1)[0]}")
        with gfile.GFile(f"{root}/{name}", "wb") as f:
            f.write(files.get(name, b"junk"))
    found = walk.discover(root)
    assert found.classes == ["cat", "dog"] and found.skipped == []
    assert found.notes == ["ignored folders that are never classes or images: @eaDir, __MACOSX"]
    table = found.splits["train"].table
    assert walk.stat_remote(table) == 0  # nothing left unknown
    got = {t.rel: (t.size, t.mtime_ns) for t in found.splits["train"]}
    assert {r: s for r, (s, _) in got.items()} == {r: len(b) for r, b in files.items()}
    assert all(m == gfile.stat(f"{root}/{r}").mtime_nsec for r, (_, m) in got.items())


@pytest.mark.skipif(os.geteuid() == 0 and not shutil.which("setpriv"), reason="root without setpriv reads everything")
def test_a_listed_file_behind_a_closed_folder_is_skipped_with_the_reason_not_called_missing():
    prefix = NO_DAC if os.geteuid() == 0 else []
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o777)
        base = Path(tmp)
        make_dataset(base / "in", {"a": 2, "b": 1})
        for p in base.rglob("*"):
            os.chmod(p, 0o755 if p.is_dir() else 0o644)
        rows = sorted(str(p.relative_to(base / "in")) for p in (base / "in").rglob("*.*"))
        (base / "list.csv").write_text("\n".join(rows) + "\n")
        os.chmod(base / "in" / "b", 0o600)  # listed, but no search permission: stat fails with EACCES
        cmd = [*prefix, sys.executable, "-m", "img2tfrecord", "convert", str(base / "in"), str(base / "out")]
        res = subprocess.run(
            [*cmd, "--file-list", str(base / "list.csv"), "--workers", "1"], capture_output=True, text=True
        )
        assert res.returncode == 0, res.stderr
        assert manifest(base / "out")["skipped"] == [
            {"path": rows[-1], "split": "train", "reason": "permission denied"}
        ]


def test_junk_beside_split_folders_does_not_hide_the_splits(tmp_path):
    src = tmp_path / "in"
    make_dataset(src / "train", {"a": 2}, size=(8, 8))
    make_dataset(src / "val", {"a": 1}, size=(8, 8))
    save(natural_image(8, 8, 2), src / "__MACOSX" / "train" / "a" / "._img_000.jpg")
    (src / ".ipynb_checkpoints").mkdir()
    found = walk.discover(str(src))
    assert found.presplit and set(found.splits) == {"train", "validation"} and found.classes == ["a"]
