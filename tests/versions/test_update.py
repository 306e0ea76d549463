"""`update`: a dataset follows its input at the cost of what changed, read back by the real readers."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

import pytest

from helpers import make_dataset, natural_image, read_records, save
from img2tfrecord.conversion.convert import convert
from img2tfrecord.conversion.versions.update import update
from img2tfrecord.format import catalog


def _manifest(out: Path) -> dict:
    return json.loads((out / "dataset.json").read_text())


def _inodes(out: Path) -> dict[str, int]:
    return {p.name: p.stat().st_ino for p in out.iterdir() if "-of-" in p.name}


def _expected(src: Path, classes: list[str]) -> dict[bytes, int]:
    """image/filename -> label of every image now in `src` (labels by position in `classes`)."""
    return {
        str(p.relative_to(src)).encode(): classes.index(p.parent.name)
        for p in src.rglob("*")
        if p.is_file() and not p.name.startswith("broken")
    }


def _check(out: Path, src: Path, cli) -> list[dict]:
    """inspect --verify passes; tf.data (all shards) and TFDS read exactly the images in `src`, labels intact."""
    import tensorflow_datasets as tfds

    res = cli("inspect", out, "--verify")
    assert res.exit_code == 0, res.output
    man = _manifest(out)
    assert (out / "labels.txt").read_text().splitlines() == man["classes"]
    records = read_records(out)
    want = _expected(src, man["classes"])
    assert sorted(r["filename"] for r in records) == sorted(want)
    for r in records:
        assert r["label"] == want[r["filename"]] and r["text"].decode() == man["classes"][r["label"]]
    builder = tfds.builder_from_directory(str(out))
    seen = []
    for split, info in man["splits"].items():
        assert builder.info.splits[split].shard_lengths == [sh["records"] for sh in info["shards"]]
        for ex in tfds.as_numpy(builder.as_dataset(split=split)):
            assert ex["image/class/label"] == want[ex["image/filename"]]
            seen.append(ex["image/filename"])
    assert sorted(seen) == sorted(want)
    from img2tfrecord import load

    loaded = [int(label) for split in man["splits"] for _, label in load(out, split).as_numpy_iterator()]
    assert sorted(loaded) == sorted(want.values())
    return records


def test_update_follows_adds_removals_changes_and_classes(tmp_path: Path, cli) -> None:
    src, out = tmp_path / "in", tmp_path / "out"
    files = make_dataset(src, {"a": 10, "b": 9, "c": 8})
    convert(str(src), str(out), shards=4, split="train=0.75,validation=0.25")
    v1 = (out / "dataset.json").read_bytes()
    before = _inodes(out)

    # nothing changed: up to date, nothing written
    res = cli("update", src, out)
    assert res.exit_code == 0 and "is up to date" in res.output
    assert (out / "dataset.json").read_bytes() == v1 and _inodes(out) == before

    # added images and a new class: appended as a new shard; every old shard is the same file
    save(natural_image(50, 40, 901), src / "a" / "new_1.jpg", quality=90)
    save(natural_image(50, 40, 902), src / "d" / "first.png")
    s = update(str(src), str(out))
    man = _manifest(out)
    assert man["classes"] == ["a", "b", "c", "d"] and man["version"] == 2
    assert s["shards_rewritten"] == 0 and s["shards_linked"] == len(before) and s["shards_new"] >= 1
    after = _inodes(out)
    assert set(before.values()) <= set(after.values())  # same inodes, new names where counts grew
    shards = [sh for sp in man["splits"].values() for sh in sp["shards"]]
    assert {sh["version"] for sh in shards} == {1, 2}
    import hashlib

    assert man["parent"] == hashlib.sha256(v1).hexdigest()
    _check(out, src, cli)

    # one removal: only the shard that held it is rewritten, the others keep their inodes
    cat = catalog.decode((out / catalog.CATALOG_NAME).read_bytes())
    victim = files["b"][3]
    holder = cat.shards[cat.rels.index(str(victim.relative_to(src)).encode())]
    victim.unlink()
    before = _inodes(out)
    s = update(str(src), str(out))
    after = _inodes(out)
    assert s["shards_rewritten"] == 1 and s["shards_new"] == 0
    assert after[holder] != before[holder] and all(after[n] == before[n] for n in before if n != holder)
    assert s["bytes_rewritten_shards"] == (out / holder).stat().st_size
    assert s["bytes_written"] < sum((out / n).stat().st_size for n in after) / 2
    _check(out, src, cli)

    # a changed image (new bytes and size) and a vanished class: labels keep their numbers
    save(natural_image(70, 60, 903), files["a"][1], quality=80)
    shutil.rmtree(src / "c")
    s = cli("update", src, out, "--dry-run", "--json")
    report = json.loads(s.output)
    assert report["vanished_classes"] == ["c"] and report["new_classes"] == []
    assert sum(sp["changed"] for sp in report["splits"].values()) == 1
    assert sum(sp["removed"] for sp in report["splits"].values()) == 8
    assert _manifest(out)["version"] == 3  # the dry run wrote nothing
    update(str(src), str(out))
    man = _manifest(out)
    assert man["classes"] == ["a", "b", "c", "d"] and man["version"] == 4
    assert all(sp["class_counts"]["c"] == 0 for sp in man["splits"].values())
    records = _check(out, src, cli)
    changed = next(r for r in records if r["filename"] == str(files["a"][1].relative_to(src)).encode())
    assert (changed["width"], changed["height"]) == (70, 60)
    assert cli("update", src, out).exit_code == 0 and _manifest(out)["version"] == 4


def test_update_refuses_other_options_and_accepts_the_same(tmp_path: Path, cli) -> None:
    src, out = tmp_path / "in", tmp_path / "out"
    make_dataset(src, {"a": 3, "b": 3})
    convert(str(src), str(out), encoding="png", split="train=0.5,validation=0.5")
    res = cli("update", src, out, "--encoding", "jpeg")
    assert res.exit_code == 2
    assert "was converted with --encoding png" in res.output
    assert f"img2tfrecord convert {src} {out} --like {out} --overwrite --encoding jpeg" in res.output
    res = cli("update", src, out, "--split", "train=0.7,validation=0.3")
    assert res.exit_code == 2 and "--split train=0.5,validation=0.5" in res.output
    assert cli("update", src, out, "--encoding", "png", "--split", "validation=0.5,train=0.5").exit_code == 2
    res = cli("update", src, out, "--encoding", "png", "--split", "train=0.5,validation=0.5")
    assert res.exit_code == 0 and "up to date" in res.output
    res = cli("update", src, tmp_path / "nothing")
    assert res.exit_code == 2 and "holds no dataset" in res.output


def test_check_content_and_retried_skips(tmp_path: Path) -> None:
    src, out = tmp_path / "in", tmp_path / "out"
    files = make_dataset(src, {"a": 4, "b": 4})
    broken = src / "a" / "broken.jpg"
    broken.write_bytes(b"\xff\xd8\xff not yet a jpeg")
    convert(str(src), str(out))
    assert len(_manifest(out)["skipped"]) == 1
    # same size and mtime, other bytes: found only by --check-content
    target = files["b"][1]
    st = target.stat()
    data = bytearray(target.read_bytes())
    data[-3] ^= 0xFF
    target.write_bytes(bytes(data))
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert update(str(src), str(out), dry_run=True)["up_to_date"]
    report = update(str(src), str(out), dry_run=True, check_content=True)
    assert report["splits"]["train"]["changed"] == 1 and report["splits"]["train"]["still_skipped"] == 1
    # the broken file, repaired: tried again
    shutil.copy(files["a"][1], broken)
    s = update(str(src), str(out), check_content=True)
    assert s["splits"]["train"]["retried"] == 1 and s["splits"]["train"]["changed"] == 1
    man = _manifest(out)
    assert man["skipped"] == [] and man["splits"]["train"]["records"] == 9
    assert man["duplicates"]["groups"]  # the repaired file is a copy of a/img_001: found across versions


@pytest.mark.parametrize("opts", [{"compression": "gzip"}, {"index": True, "encoding": "jpeg", "resize": 24}])
def test_update_rewrites_compressed_and_indexed_shards(tmp_path: Path, cli, opts: dict) -> None:
    src, out = tmp_path / "in", tmp_path / "out"
    files = make_dataset(src, {"a": 6, "b": 6})
    convert(str(src), str(out), shards=3, **opts)
    files["a"][2].unlink()
    save(natural_image(30, 30, 77), src / "b" / "z_new.jpg", quality=90)
    save(natural_image(30, 30, 78), src / "b" / "z_new2.jpg", quality=90)
    s = update(str(src), str(out))
    assert s["shards_rewritten"] == 1 and s["shards_new"] == 1 and s["shards_linked"] == 2
    res = cli("inspect", out, "--verify")
    assert res.exit_code == 0, res.output
    got = sorted(r["filename"] for r in read_records(out))
    assert got == sorted(str(p.relative_to(src)).encode() for p in src.rglob("*.*"))
    if opts.get("index"):
        assert sorted(p.name for p in out.glob("*.idx")) == [f"train-0000{i}-of-00004.idx" for i in range(4)]


def _fault_case(tmp_path: Path) -> tuple[Path, Callable[[], Path]]:
    """The input with one image removed and one added since a 3-shard conversion, and `fresh()`:
    OUTPUT (tmp_path/out) put back to that converted version, for each injected fault."""
    from img2tfrecord.conversion.write.workspace import workspace

    src, old_dir = tmp_path / "in", tmp_path / "old"
    files = make_dataset(src, {"a": 6, "b": 6}, size=(16, 12))
    convert(str(src), str(old_dir), shards=3, workers=1)
    files["a"][0].unlink()
    save(natural_image(20, 16, 5), src / "b" / "z.png")

    def fresh() -> Path:
        out = tmp_path / "out"
        shutil.rmtree(out, ignore_errors=True)
        shutil.rmtree(workspace(str(out)).root, ignore_errors=True)
        shutil.copytree(old_dir, out)
        return out

    return src, fresh


class _Injected(NamedTuple):
    spec: str  # strace's -e inject=... for this run
    result: subprocess.CompletedProcess
    out: Path  # OUTPUT after the faulted run
    old: dict[str, bytes] | None  # OUTPUT's files before any update
    new: dict[str, bytes] | None  # OUTPUT's files after an uninterrupted update


def _each_injected(tmp_path: Path, calls: str, signal: str, at_least: int) -> Iterator[_Injected]:
    """An uninterrupted update traced for `calls` (strace's trace=...), then, for each such call it
    made, the same update on a fresh copy of the old version with `signal` injected at that call."""
    from test_faults import STRACE, occurrences, traced, visible

    if STRACE is None:
        pytest.skip("strace is not installed (apt-get install strace)")
    src, fresh = _fault_case(tmp_path)
    out = fresh()
    old = visible(out)
    log = tmp_path / "clean.log"
    res = traced(str(log), ["-e", f"trace={calls}"], "update", src, out, "--workers", "1")
    assert res.returncode == 0, res.stderr
    new = visible(out)
    assert new != old
    points = occurrences(log)
    assert len(points) >= at_least, points
    for name, n in points:
        out = fresh()
        spec = f"inject={name}:signal={signal}:when={n}"
        res = traced("/dev/null", ["-e", f"trace={name}", "-e", spec], "update", src, out, "--workers", "1")
        yield _Injected(spec, res, out, old, new)


def test_a_kill_at_every_rename_of_an_update_leaves_old_or_new(tmp_path: Path) -> None:
    """The same fault test as convert's (tests/write/test_faults.py): SIGKILL at each rename the update
    makes; OUTPUT is then the old version or the new one, and the same command with --resume finishes it."""
    from img2tfrecord.conversion.write.workspace import workspace
    from test_faults import visible

    for run in _each_injected(tmp_path, "rename,renameat,renameat2", "SIGKILL", at_least=4):
        assert run.result.returncode == -9, (run.spec, run.result.stderr)
        seen = visible(run.out)
        assert seen in (run.old, run.new), (run.spec, sorted(seen or {}))
        update(str(tmp_path / "in"), str(run.out), workers=1, resume=True)  # the same command, --resume
        assert visible(run.out) == run.new, run.spec
        assert not os.path.lexists(workspace(str(run.out)).root), run.spec


def test_a_sigterm_at_every_thread_start_of_an_update_exits_143_and_resume_finishes(tmp_path: Path) -> None:
    """SIGTERM at each thread the update starts (the record writer's preload among them): exit 143
    with one line of ours, OUTPUT still the old version, and --resume gives the uninterrupted bytes."""
    from test_faults import visible

    # at least the writer's preload and the engine's threads
    for run in _each_injected(tmp_path, "clone,clone3", "SIGTERM", at_least=2):
        res = run.result
        assert res.returncode == 143, (run.spec, res.returncode, res.stderr)
        assert "Traceback" not in res.stderr and "RuntimeError" not in res.stderr, (run.spec, res.stderr)
        assert res.stderr.strip().splitlines()[-1].startswith("interrupted"), (run.spec, res.stderr)
        assert visible(run.out) == run.old, run.spec
        update(str(tmp_path / "in"), str(run.out), workers=1, resume=True)
        assert visible(run.out) == run.new, run.spec


def test_update_of_a_remote_dataset_gives_the_local_bytes(tmp_path: Path) -> None:
    """An output on a tf.io.gfile file system (TensorFlow's ram://): unchanged shards copied there,
    the others rewritten through TensorFlow; every file equals the same update's on disk."""
    from img2tfrecord.tf_import import tensorflow

    gfile = tensorflow().io.gfile
    src = tmp_path / "in"
    files = make_dataset(src, {"a": 5, "b": 5})
    convert(str(src), str(tmp_path / "out"), shards=3)
    convert(str(src), "ram://h6/out", shards=3)
    files["a"][1].unlink()
    save(natural_image(20, 16, 6), src / "b" / "z.png")
    local = update(str(src), str(tmp_path / "out"))
    remote = update(str(src), "ram://h6/out")
    assert {k: remote[k] for k in remote if k.startswith("shards_")} == {
        k: local[k] for k in local if k.startswith("shards_")
    }
    names = sorted(gfile.listdir("ram://h6/out"))
    assert names == sorted(p.name for p in (tmp_path / "out").iterdir())
    for n in names:
        assert gfile.GFile(f"ram://h6/out/{n}", "rb").read() == (tmp_path / "out" / n).read_bytes(), n


def test_a_second_run_is_refused_and_a_file_list_is_followed(tmp_path: Path, cli) -> None:
    """update takes the same lock as convert; with --file-list, rows added, removed and relabelled are the changes."""
    import fcntl

    from img2tfrecord.conversion.write.workspace import workspace

    src, out = tmp_path / "in", tmp_path / "out"
    make_dataset(src, {"a": 4, "b": 4})
    rows = sorted(str(p.relative_to(src)) for p in src.rglob("*") if p.is_file())
    listing = tmp_path / "list.csv"
    listing.write_text("".join(f"{r},{r.split('/')[0]}\n" for r in rows))
    assert cli("convert", src, out, "--file-list", listing).exit_code == 0
    ws = workspace(str(out))
    assert ws.lock_path is not None
    os.makedirs(os.path.dirname(ws.lock_path), exist_ok=True)
    with open(ws.lock_path, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        held.write("4242\n")
        held.flush()
        res = cli("update", src, out, "--file-list", listing)
        assert res.exit_code == 2 and "another img2tfrecord run (pid 4242)" in res.output
    # one row gone, one relabelled into a new class; every other record stays where it was
    listing.write_text("".join(f"{r},{'c' if r == rows[1] else r.split('/')[0]}\n" for r in rows[2:] + [rows[1]]))
    res = cli("update", src, out, "--file-list", listing, "--json")
    assert res.exit_code == 0, res.output
    s = json.loads(res.output)
    assert s["new_classes"] == ["c"] and s["splits"]["train"]["removed"] == 1
    assert s["splits"]["train"]["changed"] == 1
    recs = {r["filename"]: (r["label"], r["text"]) for r in read_records(out)}
    assert len(recs) == len(rows) - 1 and recs[rows[1].encode()] == (2, b"c")
    assert (out / "labels.txt").read_text() == "a\nb\nc\n"


def test_a_skipped_file_removed_is_a_change_that_rewrites_no_shard(tmp_path: Path) -> None:
    src, out = tmp_path / "in", tmp_path / "out"
    make_dataset(src, {"a": 3, "b": 3})
    (src / "a" / "broken.jpg").write_bytes(b"\xff\xd8\xff no")
    convert(str(src), str(out))
    before = _inodes(out)
    (src / "a" / "broken.jpg").unlink()
    s = update(str(src), str(out))
    assert not s["up_to_date"] and s["splits"]["train"]["removed"] == 1
    assert (s["shards_new"], s["shards_rewritten"], s["bytes_new_shards"]) == (0, 0, 0)
    assert _inodes(out) == before and _manifest(out)["skipped"] == []
    assert len(catalog.decode((out / catalog.CATALOG_NAME).read_bytes())) == 6


def test_a_sigterm_at_every_thread_start_of_an_update_leaves_the_old_version(tmp_path: Path) -> None:
    """A signal while the update starts a thread exits 143 with one line; OUTPUT is the old version."""
    from test_faults import STRACE, occurrences, traced, visible

    if STRACE is None:
        pytest.skip("strace is not installed (apt-get install strace)")
    from img2tfrecord.conversion.write.workspace import workspace

    src, old_dir = tmp_path / "in", tmp_path / "old"
    make_dataset(src, {"a": 4, "b": 4}, size=(16, 12))
    convert(str(src), str(old_dir), shards=2, workers=1)
    old = visible(old_dir)
    save(natural_image(20, 16, 7), src / "b" / "z.png")
    out = tmp_path / "out"
    shutil.copytree(old_dir, out)
    log = tmp_path / "clean.log"
    res = traced(str(log), ["-e", "trace=clone,clone3"], "update", src, out, "--workers", "1")
    assert res.returncode == 0, res.stderr
    new = visible(out)
    points = occurrences(log)
    assert points, "no thread started"
    for name, n in points:
        shutil.rmtree(out)
        shutil.rmtree(workspace(str(out)).root, ignore_errors=True)
        shutil.copytree(old_dir, out)
        spec = f"inject={name}:signal=SIGTERM:when={n}"
        res = traced("/dev/null", ["-e", f"trace={name}", "-e", spec], "update", src, out, "--workers", "1")
        assert res.returncode == 143, (spec, res.returncode, res.stderr)
        assert "Traceback" not in res.stderr and res.stderr.strip().startswith("interrupted"), (spec, res.stderr)
        assert visible(out) == old, spec
    update(str(src), str(out), workers=1, resume=True)
    assert visible(out) == new


def test_update_of_a_remote_input(tmp_path: Path) -> None:
    """A ram:// INPUT (a listing gives no sizes or mtimes: the walk stats each image): update keeps
    the unchanged images and finds the added and removed ones."""
    from img2tfrecord.tf_import import tensorflow

    gfile = tensorflow().io.gfile
    local = tmp_path / "in"
    make_dataset(local, {"a": 3, "b": 3})
    for p in sorted(local.rglob("*.*")):
        gfile.makedirs(f"ram://h6in/in/{p.parent.name}")
        gfile.copy(str(p), f"ram://h6in/in/{p.relative_to(local)}", overwrite=True)
    out = tmp_path / "out"
    convert("ram://h6in/in", str(out), shards=2)
    before = _inodes(out)
    gfile.remove("ram://h6in/in/a/img_001.jpg")
    gfile.copy(str(local / "b" / "img_002.jpg"), "ram://h6in/in/b/zz_new.jpg")
    s = update("ram://h6in/in", str(out))
    sp = s["splits"]["train"]
    assert (sp["added"], sp["removed"], sp["changed"], sp["unchanged"]) == (1, 1, 0, 5)
    assert s["shards_rewritten"] == 1 and len(set(before.values()) & set(_inodes(out).values())) == 1
    assert sorted(r["filename"] for r in read_records(out)) == sorted(
        [b"a/img_000.png", b"a/img_002.jpg", b"b/img_000.png", b"b/img_001.jpg", b"b/img_002.jpg", b"b/zz_new.jpg"]
    )
    assert update("ram://h6in/in", str(out), dry_run=True)["up_to_date"]
