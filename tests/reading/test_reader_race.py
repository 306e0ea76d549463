"""A reader while a new version is published: it finishes the version it opened, or stops at once
with our one line; it never hangs, never reads a mix.

The race is made deterministic: the reader is paused after k records (at every shard boundary),
the update (or compact, or convert --overwrite) runs to its end, then the reader goes on. The
reader runs in a thread so that a hang fails the test instead of stalling the suite.
"""

from __future__ import annotations

import gc
import json
import os
import shutil
import threading
from pathlib import Path
from typing import Any

import pytest

import img2tfrecord
from helpers import make_dataset, natural_image, save
from img2tfrecord.conversion.write.workspace import workspace

SHARDS = 4
WAIT = 60  # seconds: far more than a run here takes; only a hang reaches it


def _names(ds: Any) -> list[bytes]:
    return [ex["image/filename"].numpy() for ex in ds]


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    root = tmp_path_factory.mktemp("race")
    make_dataset(root / "in", {"a": 24, "b": 24}, size=(16, 12))
    img2tfrecord.convert(str(root / "in"), str(root / "v1"), shards=SHARDS, workers=1, split="train=1.0")
    man = json.loads((root / "v1" / "dataset.json").read_text())
    sizes = [sh["records"] for sh in man["splits"]["train"]["shards"]]
    return root, sizes


def _fresh(root: Path, tmp: Path) -> tuple[Path, Path]:
    src, out = tmp / "in", tmp / "out"
    for p in (src, out):
        shutil.rmtree(p, ignore_errors=True)
    shutil.rmtree(workspace(str(out)).root, ignore_errors=True)
    shutil.copytree(root / "in", src)
    shutil.copytree(root / "v1", out)
    return src, out


def _change(src: Path, out: Path, how: str) -> None:
    """A new version whose shard names all differ from the old ones (renumbered -of- counts)."""
    if how == "update":
        os.remove(next((src / "a").glob("*.png")))
        save(natural_image(18, 14, 7), src / "a" / "added.jpg", quality=90)
        img2tfrecord.update(str(src), str(out))
    elif how == "compact":  # the same shard names as before, other records in them
        for p in sorted((src / "b").glob("*.jpg"))[:6]:
            os.remove(p)
        img2tfrecord.update(str(src), str(out))
        img2tfrecord.compact(str(out))
    else:
        img2tfrecord.convert(str(src), str(out), shards=SHARDS + 1, workers=1, split="train=1.0", overwrite=True)


def _read_rest(it: Any, got: list[bytes]) -> BaseException | None:
    """Read the iterator to its end in a thread; the error it raised, if any. A hang fails."""
    error: list[BaseException] = []

    def run() -> None:
        try:
            got.extend(ex["image/filename"].numpy() for ex in it)
        except BaseException as e:  # noqa: BLE001 - handed to the test
            error.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(WAIT)
    assert not t.is_alive(), f"the reader hung: {len(got)} records, then nothing for {WAIT} s"
    return error[0] if error else None


@pytest.mark.parametrize("verify", ["framing", "none"])
@pytest.mark.parametrize("cycle", [1, 2])
def test_an_update_at_every_shard_boundary_leaves_the_reader_its_whole_version(base, tmp_path, cli, cycle, verify):
    root, sizes = base
    bounds = [sum(sizes[:i]) for i in range(len(sizes) + 1)]
    for k in bounds:
        src, out = _fresh(root, tmp_path)
        ds = img2tfrecord.load(str(out), "train", cycle_length=cycle, verify=verify, as_dict=True)
        want = _names(ds)
        it = iter(ds)
        got = [next(it)["image/filename"].numpy() for _ in range(k)]
        _change(src, out, "update")
        assert json.loads((out / "dataset.json").read_text())["version"] == 2
        assert _read_rest(it, got) is None, k
        assert got == want, k  # the old version, whole, in its order: never a mix
        del ds, it
        gc.collect()
        # the old version stayed while it was read; the next command removes it, and all verifies
        assert img2tfrecord.update(str(src), str(out))["up_to_date"]
        assert not os.path.lexists(workspace(str(out)).root)
        r = cli("inspect", out, "--verify")
        assert r.exit_code == 0 and "no problems" in r.output, r.output


@pytest.mark.parametrize("how", ["compact", "convert --overwrite"])
def test_compact_and_convert_overwrite_under_a_reader(base, tmp_path, how):
    root, sizes = base
    src, out = _fresh(root, tmp_path)
    ds = img2tfrecord.load(str(out), "train", cycle_length=2, as_dict=True)
    want = _names(ds)
    it = iter(ds)
    got = [next(it)["image/filename"].numpy() for _ in range(sizes[0])]
    _change(src, out, how.split()[0])
    assert _read_rest(it, got) is None
    assert got == want


def test_an_old_version_is_kept_while_read_and_removed_by_the_next_command_after(base, tmp_path):
    root, _ = base
    src, out = _fresh(root, tmp_path)
    ds = img2tfrecord.load(str(out), "train", cycle_length=1)
    it = iter(ds)
    next(it)
    _change(src, out, "update")
    ws = Path(workspace(str(out)).root)
    kept = [p for p in ws.iterdir() if p.name.startswith("old-")]
    assert len(kept) == 1 and (kept[0] / "dataset.json").is_file()
    assert img2tfrecord.update(str(src), str(out))["up_to_date"]
    assert kept[0].is_dir()  # still read: still there
    del ds, it
    gc.collect()
    assert img2tfrecord.update(str(src), str(out))["up_to_date"]
    assert not ws.exists()


def test_a_shard_removed_under_a_reader_of_plain_files_stops_it_with_one_line(base, tmp_path):
    """No folder to hold open (a list of files; likewise a publish in place): a shard gone before
    TensorFlow opened it stops the reader with our line, under either verify, never a hang."""
    root, _ = base
    for verify in ("framing", "none"):
        _, out = _fresh(root, tmp_path)
        files = sorted(str(p) for p in out.glob("train-*"))
        it = iter(img2tfrecord.load(files, cycle_length=1, verify=verify, as_dict=True))
        got = [next(it)["image/filename"].numpy()]
        os.remove(files[-1])  # the last shard: not opened yet
        e = _read_rest(it, got)
        assert e is not None, verify
        assert f"{files[-1]} was removed or replaced while load() read it: call load() again" in str(e), str(e)
        assert "NotFound" not in type(e).__name__, type(e)


def test_a_shard_replaced_in_the_folder_a_reader_holds_names_the_newer_version(base, tmp_path):
    """A version published in place (a mount point, the current folder) changes the folder itself."""
    root, _ = base
    src, out = _fresh(root, tmp_path)
    it = iter(img2tfrecord.load(str(out), "train", cycle_length=1, as_dict=True))
    got = [next(it)["image/filename"].numpy()]
    last = sorted(out.glob("train-*"))[-1]
    data = last.read_bytes()
    os.remove(last)
    last.write_bytes(data)  # the same bytes, another file: as a publish in place leaves it
    man = json.loads((out / "dataset.json").read_text())
    (out / "dataset.json").write_text(json.dumps(man | {"version": 2}))
    e = _read_rest(it, got)
    assert e is not None
    line = f"{out}: version 2 replaced version 1 while load() read it, and {last.name} of version 1 is gone: call load() again to read version 2"
    assert line in str(e), str(e)


# Takes one element and lets go of dataset and iterator in one statement, again and again, as the
# docs' `next(iter(load(...)))` does: TensorFlow's prefetch threads are then often opening the next
# shard through the folder load() holds open while the iterator is torn down.
LET_GO = """
import os, sys
import img2tfrecord
from img2tfrecord.format import pinning
out = sys.argv[1]
def fds():
    pinning.in_use(out)  # closes what this thread let go, as any command in this process would first
    return len(os.listdir("/proc/self/fd"))
next(iter(img2tfrecord.load(out, cycle_length=2)))
before = fds()
for cycle in (1, 2, 4) * 10:
    image, label = next(iter(img2tfrecord.load(out, cycle_length=cycle)))
    for batch in img2tfrecord.load(out, image_size=8).batch(2):
        break
print(fds() - before, pinning.in_use(out))
"""


def test_letting_go_of_a_dataset_mid_read_never_hangs_and_frees_its_folder(base):
    """The folder is closed after the statement that let it go (the iterator's teardown with it) has
    finished, never while TensorFlow may still open a shard through it (a closed one made the
    teardown retry that open forever): by the next call of the thread that let it go. And closed
    then: no descriptor is left open, the folder is free for a publisher to remove."""
    import subprocess
    import sys

    root, _ = base
    out = root / "v1"
    env = os.environ | {"TF_CPP_MIN_LOG_LEVEL": "3"}
    try:
        res = subprocess.run(
            [sys.executable, "-c", LET_GO, str(out)], capture_output=True, text=True, timeout=WAIT * 3, env=env
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"letting go of a dataset mid-read hung for {WAIT * 3} s")
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.split() == ["0", "False"] and res.stderr == ""


def _holding(st: os.stat_result) -> int:
    """How many descriptors of this process hold the folder `st` is of."""
    n = 0
    for name in os.listdir("/proc/self/fd"):
        try:
            here = os.stat(os.path.join("/proc/self/fd", name))
        except OSError:
            continue
        n += (here.st_dev, here.st_ino) == (st.st_dev, st.st_ino)
    return n


def test_a_reader_mid_iteration_reads_its_version_while_folders_let_go_around_it_are_closed(base, tmp_path):
    """Readers of the same version let go (in this thread and in another) are closed around a live
    one: by this thread's next call, by the update's check that waits for the other thread's, by
    the closing thread. The live reader's descriptor (maybe the very number one let go had) is
    never among them: it reads version 1 to its end while version 2 is published."""
    root, sizes = base
    src, out = _fresh(root, tmp_path)
    want = _names(img2tfrecord.load(str(out), "train", cycle_length=1, as_dict=True))
    v1 = os.stat(out)
    next(iter(img2tfrecord.load(str(out), "train", cycle_length=2)))  # let go in this thread
    ds = img2tfrecord.load(str(out), "train", cycle_length=1, as_dict=True)  # closes it, may reuse its number
    it = iter(ds)
    got = [next(it)["image/filename"].numpy() for _ in range(sizes[0])]
    other = threading.Thread(target=lambda: next(iter(img2tfrecord.load(str(out), "train", cycle_length=2))))
    other.start()
    other.join()  # let go in a thread that never calls again
    _change(src, out, "update")
    assert _holding(v1) == 1  # the live reader's: the update closed the others, kept the folder
    assert _read_rest(it, got) is None
    assert got == want
    del ds, it
    assert img2tfrecord.update(str(src), str(out))["up_to_date"]  # this thread's next call closes it
    assert _holding(v1) == 0 and not os.path.lexists(workspace(str(out)).root)


# Readers in threads that let go: one never followed by another call (the closing thread closes its
# folder), one followed by in_use in the main thread (which waits for it, closes it, finds it free).
LET_GO_IN_THREADS = """
import os, sys, threading, time
import img2tfrecord
from img2tfrecord.format import pinning
out = sys.argv[1]
st = os.stat(out)
def holding():
    n = 0
    for name in os.listdir("/proc/self/fd"):
        try:
            here = os.stat(os.path.join("/proc/self/fd", name))
        except OSError:
            continue
        n += (here.st_dev, here.st_ino) == (st.st_dev, st.st_ino)
    return n
def read_some():
    it = iter(img2tfrecord.load(out, cycle_length=2))
    next(it), next(it)
def in_thread():
    t = threading.Thread(target=read_some)
    t.start()
    t.join()
in_thread()
for _ in range(600):  # 60 s: only a folder never closed reaches it
    if holding() == 0:
        break
    time.sleep(0.1)
print(holding())
in_thread()
print(pinning.in_use(out), holding())
"""


def test_a_folder_let_go_in_another_thread_is_closed_without_a_call_of_that_thread(base):
    """A thread that lets go of a dataset and ends: its folder is closed all the same (after the
    grace period, by the closing thread), or at once for a publisher's check in another thread,
    which waits for it rather than keep the old version forever. In a process of its own: the
    descriptors counted are this test's only."""
    import subprocess
    import sys

    root, _ = base
    env = os.environ | {"TF_CPP_MIN_LOG_LEVEL": "3"}
    res = subprocess.run(
        [sys.executable, "-c", LET_GO_IN_THREADS, str(root / "v1")],
        capture_output=True,
        text=True,
        timeout=WAIT * 3,
        env=env,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.split() == ["0", "False", "0"] and res.stderr == ""


FRAME_WATCHING = ("_current_frames", "f_lasti", "_getframe", "f_back", "settrace", "setprofile")


def test_no_reader_watches_the_interpreter_to_know_when_to_close():
    """The pin's lifecycle is the queue, the thread that let go and the grace period (issue 40
    item 4): no module reads the interpreter's frames or traces it to decide when a folder is done."""
    pkg = Path(img2tfrecord.__file__).parent
    found = [
        f"{p.relative_to(pkg)}: {word}"
        for p in sorted(pkg.rglob("*.py"))
        for word in FRAME_WATCHING
        if word in p.read_text(encoding="utf-8")
    ]
    assert found == []
