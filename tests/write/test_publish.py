"""The publish switch (conversion/write/publish.py) and what readers make of a dataset caught half-way.

In-process and small. The exact-syscall faults (kill, EIO, ENOSPC, signals) are test_faults.py's.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import img2tfrecord
from helpers import make_dataset
from img2tfrecord import fs
from img2tfrecord.conversion.write.workspace import foreign_entries, workspace
from img2tfrecord.errors import DataError, UsageError
from img2tfrecord.format.layout import check_complete, incomplete_reason


@pytest.fixture(scope="module")
def src(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("publish") / "in"
    make_dataset(root, {"a": 5, "b": 5}, size=(16, 12))
    return root


def visible(out: Path) -> dict[str, bytes]:
    return {p.name: b"" if p.is_dir() else p.read_bytes() for p in sorted(out.iterdir()) if not p.name.startswith(".")}


def convert(src: Path, out: str | Path, **kw) -> dict:
    return img2tfrecord.convert(str(src), str(out), workers=1, **kw)


# --------------------------------------------------------------------------- readers refuse a half-published folder


@pytest.mark.parametrize("state", ["no dataset.json", "shards missing", "mixed counts"])
def test_readers_refuse_a_half_published_folder(cli, src, tmp_path, state):
    """What an interrupted publish of the earlier releases left (and what object stores can show):
    inspect, inspect --verify and load() say it is incomplete and what to run; nothing verifies."""
    out = tmp_path / "out"
    convert(src, out, shards=4)
    (out / "dataset.json").unlink()
    if state != "no dataset.json":  # and the other metadata not written yet either
        for name in ("labels.txt", "dataset_info.json", "features.json", "image.class.label.labels.txt"):
            (out / name).unlink()
        (out / "train-00002-of-00004").unlink()
    if state == "mixed counts":
        (out / "train-00000-of-00004").rename(out / "train-00000-of-00003")
    for args in (["inspect", out], ["inspect", out, "--verify"]):
        res = cli(*args)
        assert res.exit_code == 1, res.output
        assert "is an incomplete dataset" in res.stderr and "--resume" in res.stderr, res.stderr
        assert "no problems" not in res.output
    with pytest.raises(DataError, match="is an incomplete dataset"):
        img2tfrecord.load(out)


def test_a_complete_folder_of_foreign_shards_still_reads(src, tmp_path):
    """Shards without dataset.json made by another tool (all -of- present, none of our traces) are read as before."""
    out = tmp_path / "out"
    convert(src, out, shards=2)
    for name in ("dataset.json", "labels.txt", "dataset_info.json", "features.json", "image.class.label.labels.txt"):
        (out / name).unlink()
    assert incomplete_reason(str(out)) is None
    assert sum(1 for _ in img2tfrecord.load(out)) == 10


def test_remote_readers_refuse_a_missing_dataset_json_or_a_wrong_count(src):
    """ram:// (as gs://): the layout check reads the folder through gfile."""
    from img2tfrecord.tf_import import tensorflow

    gfile = tensorflow().io.gfile
    out = "ram://publish1/out"
    convert(src, out, shards=3)
    check_complete(out)  # complete: nothing to say
    gfile.remove(f"{out}/dataset.json")
    with pytest.raises(DataError, match=r"incomplete dataset \(3 shard files but no dataset.json"):
        check_complete(out)
    with pytest.raises(DataError, match="incomplete dataset"):
        img2tfrecord.load(out)
    for name in ("labels.txt", "dataset_info.json", "features.json", "image.class.label.labels.txt"):
        gfile.remove(f"{out}/{name}")
    gfile.remove(f"{out}/train-00001-of-00003")
    assert incomplete_reason(out) == "split train has 2 of its 3 shard files"


def test_an_interrupted_publish_on_an_object_store_is_refused_then_resumed(src, monkeypatch):
    """No atomic rename on object stores: the old dataset.json goes first, the new one comes last,
    so a publish cut off half-way (here: the second shard's upload fails) is refused by readers;
    --resume then finishes it with the bytes of an uninterrupted run."""
    from img2tfrecord.tf_import import tensorflow

    gfile = tensorflow().io.gfile
    reference = "ram://publish2/reference"
    convert(src, reference, shards=3)
    out = "ram://publish2/out"
    convert(src, out, shards=2, encoding="png")  # the old version
    real_rename, moved = fs.rename, []

    def failing_rename(a: str, b: str) -> None:
        if a.startswith(out) and "-of-" in a and len(moved) == 1:
            raise OSError(5, "Input/output error")
        moved.append(a)
        real_rename(a, b)

    monkeypatch.setattr(fs, "rename", failing_rename)
    with pytest.raises(DataError, match=r"publishing the dataset in .* failed: Input/output error.*resume=True"):
        convert(src, out, shards=3, overwrite=True)
    monkeypatch.setattr(fs, "rename", real_rename)
    assert not gfile.exists(f"{out}/dataset.json")
    with pytest.raises(DataError, match="incomplete dataset"):
        check_complete(out)
    convert(src, out, shards=3, overwrite=True, resume=True)
    names = sorted(n.rstrip("/") for n in gfile.listdir(out))
    assert names == sorted(n.rstrip("/") for n in gfile.listdir(reference))
    for n in names:
        assert gfile.GFile(f"{out}/{n}", "rb").read() == gfile.GFile(f"{reference}/{n}", "rb").read(), n


# --------------------------------------------------------------------------- the local switch


def test_overwrite_keeps_a_readers_open_shards_and_the_users_files(src, tmp_path):
    out = tmp_path / "out"
    convert(src, out, shards=2)
    old_shard = (out / "train-00000-of-00002").read_bytes()
    (out / "notes.txt").write_text("mine")
    with open(out / "train-00000-of-00002", "rb") as reader:
        head = reader.read(10)
        convert(src, out, shards=3, encoding="png", overwrite=True)
        assert head + reader.read() == old_shard  # the old version lives on for whoever reads it
    names = sorted(visible(out))
    assert "notes.txt" in names and (out / "notes.txt").read_text() == "mine"
    assert [n for n in names if "-of-" in n] == [f"train-0000{i}-of-00003" for i in range(3)]
    assert not os.path.lexists(workspace(str(out)).root)


def test_the_catalog_is_part_of_the_dataset_not_a_user_file(src, tmp_path):
    """--overwrite carries the user's files over to the new version, not the dataset's own: a
    catalog (or its half-written temp file) left by the old version is not a user file."""
    out = tmp_path / "out"
    convert(src, out, shards=2)
    assert (out / "dataset.catalog").is_file() and foreign_entries(str(out)) == []
    (out / "dataset.catalog.tmp").write_bytes(b"half a catalog")
    (out / "notes.txt").write_text("mine")
    assert foreign_entries(str(out)) == ["notes.txt"]
    convert(src, out, shards=3, overwrite=True)
    assert not (out / "dataset.catalog.tmp").exists() and (out / "notes.txt").read_text() == "mine"


def test_overwrite_refuses_a_folder_it_would_drop(cli, src, tmp_path):
    out = tmp_path / "out"
    convert(src, out, shards=2)
    (out / "my-notebooks").mkdir()
    before = visible(out)
    res = cli("convert", src, out, "--shards", "3", "--overwrite")
    assert res.exit_code == 2 and "my-notebooks/" in res.stderr and "not part of a dataset" in res.stderr
    assert visible(out) == before


def test_a_trailing_slash_or_dot_names_the_same_output(src, tmp_path, monkeypatch):
    reference = tmp_path / "reference"
    convert(src, reference, shards=2)
    out = tmp_path / "out"
    ws = workspace(str(out) + "/")
    assert ws.root == str(tmp_path / ".out.img2tfrecord") and ws.in_place is None
    convert(src, str(out) + "/", shards=2)
    assert visible(out) == visible(reference)
    monkeypatch.chdir(out)  # a shell inside OUTPUT: published in place, its folder stays the same
    assert workspace(".").in_place == "it is the current directory"
    inode = os.stat(".").st_ino
    convert(src, ".", shards=2, overwrite=True)
    assert os.stat(".").st_ino == inode and os.stat(out).st_ino == inode
    assert visible(out) == visible(reference)
    assert not (out / ".img2tfrecord-staging").exists()


def test_resume_on_a_finished_dataset_says_there_is_nothing_to_resume(cli, src, tmp_path):
    out = tmp_path / "out"
    assert cli("convert", src, out, "--shards", "2").exit_code == 0
    res = cli("convert", src, out, "--shards", "2", "--resume")
    assert res.exit_code == 2 and "nothing to resume" in res.stderr and "--overwrite" in res.stderr
    assert "is not empty" not in res.stderr


def test_dataset_json_is_the_last_file_in_place(src, tmp_path):
    """A published folder's dataset.json names exactly the shards present (the manifest is its truth)."""
    out = tmp_path / "out"
    convert(src, out, shards=3)
    listed = {s["file"] for s in json.loads((out / "dataset.json").read_text())["splits"]["train"]["shards"]}
    assert listed == {n for n in visible(out) if "-of-" in n}
    with pytest.raises(UsageError, match="holds a dataset: to bring it up to date"):
        convert(src, out, shards=3)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--split", "train=0.6,validation=0.5"], "--split"),
        (["--resize", "garbage"], "--resize"),
        (["--index", "--compression", "gzip"], "--index"),
        (["--shards", "train=2,train=3"], "train"),
    ],
)
def test_a_wrong_option_is_said_before_output_is_not_empty(cli, src, tmp_path, args, says):
    """A command that is wrong is told what is wrong, never to add --overwrite."""
    out = tmp_path / "out"
    convert(src, out, shards=2)
    res = cli("convert", src, out, *args)
    assert res.exit_code == 2 and says in res.stderr, res.stderr
    assert "holds a dataset" not in res.stderr and "--overwrite" not in res.stderr, res.stderr


@pytest.fixture
def mount_point(tmp_path):
    """A small tmpfs mounted at tmp_path/mnt (root only; skipped where mounting is not permitted)."""
    import subprocess

    mnt = tmp_path / "mnt"
    mnt.mkdir()
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mnt)], capture_output=True)
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {res.stderr.decode().strip()}")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def test_an_output_that_is_a_mount_point_is_published_in_place(src, tmp_path, mount_point):
    """A folder cannot be renamed off its mount: the in-place procedure, and the same bytes."""
    reference = tmp_path / "reference"
    convert(src, reference, shards=2)
    assert workspace(str(mount_point)).in_place == f"{mount_point} is a mount point"
    convert(src, mount_point, shards=3, encoding="png")
    convert(src, mount_point, shards=2, overwrite=True)
    assert os.path.ismount(mount_point)
    assert {k: v for k, v in visible(mount_point).items() if k != "lost+found"} == visible(reference)
    assert not (mount_point / ".img2tfrecord-staging").exists()
    assert not os.path.lexists(workspace(str(mount_point)).root)


def test_reuse_links_unchanged_shards_into_the_next_version(src, tmp_path):
    """The API update/compact build on: a new version made of OUTPUT's shards, linked (same
    inode), then switched in; a reader of the old version is not disturbed."""
    from img2tfrecord.conversion.write.publish import OutputLock, prepare, publish, recover, reuse

    out = tmp_path / "out"
    convert(src, out, shards=2)
    before = visible(out)
    inode = (out / "train-00000-of-00002").stat().st_ino
    ws = workspace(str(out))
    lock = OutputLock(ws)
    lock.acquire()
    try:
        recover(ws)
        prepare(ws)
        shards = ["train-00000-of-00002", "train-00001-of-00002", "dataset.catalog"]  # the catalog is binary
        reuse(ws, shards)
        metadata = {n: before[n].decode() for n in before if n not in shards}
        metadata["dataset.json"] = metadata.pop("dataset.json")  # last
        publish(ws, shards, metadata)
    finally:
        lock.release(remove=True)
    assert visible(out) == before and (out / "train-00000-of-00002").stat().st_ino == inode
    assert not os.path.lexists(ws.root)


def test_without_rename_exchange_the_two_renames_keep_old_or_new(src, tmp_path, monkeypatch):
    """Where renameat2(RENAME_EXCHANGE) is missing: OUTPUT renamed aside, the new one renamed in.
    If the second rename fails the old version goes back; if the run dies between the two,
    the next run (under the lock) renames it back before anything else."""
    from img2tfrecord.conversion.write import publish as pub

    reference, old = tmp_path / "reference", tmp_path / "old"
    convert(src, reference, shards=3)
    convert(src, old, shards=2, encoding="png")
    monkeypatch.setattr(pub, "_renameat2", False)  # as on a kernel or file system without it
    out = tmp_path / "out"
    convert(src, out, shards=2, encoding="png")
    assert visible(out) == visible(old)
    ws = workspace(str(out))
    real_rename = os.rename

    def second_fails(a, b, *args, **kw):
        if a == ws.build and b == ws.output:
            raise OSError(5, "Input/output error")
        return real_rename(a, b, *args, **kw)

    monkeypatch.setattr(os, "rename", second_fails)
    with pytest.raises(DataError, match="is unchanged"):
        convert(src, out, shards=3, overwrite=True)
    assert visible(out) == visible(old)  # put back
    monkeypatch.setattr(os, "rename", real_rename)
    os.rename(out, os.path.join(ws.root, pub.ASIDE))  # as if killed between the two renames
    assert not out.exists()
    convert(src, out, shards=3, overwrite=True, resume=True)
    assert visible(out) == visible(reference)
    assert not os.path.lexists(ws.root)
