"""Remote datasets (gs:// and the like), tested on TensorFlow's in-memory file system ram://.

ram:// lives in one process, so everything here runs in-process: the CLI through click's
CliRunner, the library by direct calls. A remote dataset must read, verify, update and compact
like the same dataset on disk.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import img2tfrecord
from helpers import make_dataset, natural_image, save, upload
from img2tfrecord.conversion.convert import convert
from img2tfrecord.conversion.versions.update import update


def gfile() -> Any:
    from img2tfrecord.tf_import import tensorflow

    return tensorflow().io.gfile


def remote_files(path: str) -> dict[str, bytes]:
    g = gfile()
    return {n: g.GFile(f"{path}/{n}", "rb").read() for n in sorted(g.listdir(path)) if not g.isdir(f"{path}/{n}")}


def local_files(path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(path.iterdir()) if p.is_file()}


def loaded(path: str | Path, split: str = "train", **kw: Any) -> list[tuple[bytes, int, bytes]]:
    """(image/filename, label, decoded pixels) of every record load() yields, in its order."""
    ds = img2tfrecord.load(path, split, as_dict=True, **kw)
    return [(ex["image/filename"], int(ex["label"]), ex["image"].tobytes()) for ex in ds.as_numpy_iterator()]


def inspect_json(cli: Any, *args: Any) -> tuple[int, dict]:
    res = cli("inspect", *args, "--json")
    return res.exit_code, json.loads(res.stdout)


def rewrite(path: str, data: bytes) -> None:
    """Replace a ram:// file (its GFile "wb" appends to an existing file: remove it first)."""
    if gfile().exists(path):
        gfile().remove(path)
    with gfile().GFile(path, "wb") as f:
        f.write(data)


@pytest.mark.parametrize("opts", [{"shards": 2, "index": True}, {"shards": 2, "compression": "gzip"}])
def test_inspect_and_load_read_a_complete_remote_dataset(tmp_path: Path, cli: Any, opts: dict) -> None:
    """A dataset converted into ram:// reads as the same dataset converted on disk: inspect (the
    folder, one shard, a prefix, a glob), --verify (checksums, .idx, catalog, labels), load()."""
    src, local = tmp_path / "in", tmp_path / "out"
    make_dataset(src, {"a": 4, "b": 3}, size=(20, 16))
    convert(str(src), str(local), **opts)
    out = "ram://s7read/" + "-".join(opts)
    convert(str(src), out, **opts)
    assert remote_files(out) == local_files(local)

    code, got = inspect_json(cli, out, "--verify")
    _, want = inspect_json(cli, local, "--verify")
    assert code == 0 and got["ok"] and got["verified"], got["problems"]
    assert json.dumps(got).replace(out, "OUT") == json.dumps(want).replace(str(local), "OUT")
    assert cli("inspect", out).exit_code == 0
    shard = f"{out}/train-00001-of-00002"
    for arg in (shard, f"{out}/train-00001", f"{out}/train-*-of-00002"):
        code, one = inspect_json(cli, arg, "--verify")
        assert code == 0 and [f["path"] for f in one["files"]] == (
            [shard] if "*" not in arg else [f"{out}/train-0000{i}-of-00002" for i in range(2)]
        ), arg
    code, man_path = inspect_json(cli, f"{out}/dataset.json")
    assert code == 0 and man_path["total"]["records"] == 7

    assert loaded(out) == loaded(local)
    assert loaded(out, verify="full") == loaded(local)
    ds = img2tfrecord.load(out)
    assert len(ds) == 7 and ds.class_names == ["a", "b"]
    assert sorted(loaded(shard)) == sorted(loaded(local / "train-00001-of-00002"))


def test_verify_finds_damage_in_a_remote_dataset(tmp_path: Path, cli: Any) -> None:
    """--verify reads the remote bytes themselves: a flipped byte, a wrong .idx line, a missing
    labels.txt and a shard dataset.json does not list are reported, as on disk; load() refuses a
    shard cut short."""
    src = tmp_path / "in"
    make_dataset(src, {"a": 3, "b": 3}, size=(20, 16))
    out = "ram://s7damage/out"
    convert(str(src), out, shards=2, index=True)
    g = gfile()
    shard = f"{out}/train-00000-of-00002"
    data = bytearray(g.GFile(shard, "rb").read())
    data[len(data) // 2] ^= 0xFF
    rewrite(shard, bytes(data))
    idx = g.GFile(f"{out}/train-00001-of-00002.idx", "rb").read().decode().splitlines()
    rewrite(f"{out}/train-00001-of-00002.idx", "\n".join(["0 1", *idx[1:]]).encode() + b"\n")
    g.remove(f"{out}/labels.txt")
    rewrite(f"{out}/validation-00000-of-00001", g.GFile(shard, "rb").read())
    code, rep = inspect_json(cli, out, "--verify")
    text = "\n".join(f"{p['file']}: {p['message']}" for p in rep["problems"])
    assert code == 1, text
    assert f"{shard}: " in text and "CRC" in text
    assert "train-00001-of-00002.idx line 1 says '0 1'" in text
    assert f"{out}/labels.txt: missing" in text
    assert f"{out}/validation-00000-of-00001: a shard file that dataset.json does not list" in text

    rewrite(shard, bytes(data[: len(data) // 3]))
    with pytest.raises(img2tfrecord.errors.DataError, match=r"train-00000-of-00002: record \d+ at byte"):
        img2tfrecord.load(out)


def test_remote_paths_that_are_not_there(cli: Any) -> None:
    """Missing remote paths are the same one-line usage errors as local ones."""
    convert_src = None  # noqa: F841 - nothing to convert: the bucket is empty
    gfile().makedirs("ram://s7none/out")
    res = cli("inspect", "ram://s7none/out")
    assert res.exit_code == 2 and "no dataset.json and no shard files" in res.output
    res = cli("inspect", "ram://s7none/out/train-00000")
    assert res.exit_code == 2 and "no such file, directory or shard prefix" in res.output
    res = cli("inspect", "ram://s7none/out/train-*")
    assert res.exit_code == 2 and "the pattern matches no shard file" in res.output
    with pytest.raises(img2tfrecord.errors.UsageError, match="no directory, file or glob"):
        img2tfrecord.load("ram://s7none/nothing")


def test_load_reads_an_updated_remote_dataset(tmp_path: Path, cli: Any) -> None:
    """Issue 22 item 9: after `update` of a ram:// dataset, inspect --verify and load() read the new
    version, the same records as the same update on disk. (TFDS opens paths through etils.epath,
    which knows gs:// but not ram://; its metadata files are byte-identical to the local
    dataset's, which tests/versions/test_update.py reads with TFDS.)"""
    src, local = tmp_path / "in", tmp_path / "out"
    files = make_dataset(src, {"a": 4, "b": 4}, size=(20, 16))
    out = "ram://s7upd/out"
    convert(str(src), str(local), shards=2, split="train=0.75,validation=0.25")
    convert(str(src), out, shards=2, split="train=0.75,validation=0.25")
    files["a"][1].unlink()
    save(natural_image(24, 20, 77), src / "c" / "new.png")
    update(str(src), str(local))
    update(str(src), out)
    assert remote_files(out) == local_files(local)
    code, rep = inspect_json(cli, out, "--verify")
    assert code == 0, rep["problems"]
    assert rep["lineage"][0]["version"] == 2
    for split in ("train", "validation"):
        assert loaded(out, split) == loaded(local, split)
    assert sorted(f for sp in ("train", "validation") for f, _, _ in loaded(out, sp)) == sorted(
        str(p.relative_to(src)).encode() for p in src.rglob("*.*")
    )


COMPACT_CASES = {
    "index": {"shards": 3, "index": True},
    "gzip-split": {"compression": "gzip", "shards": 2, "split": "train=0.7,validation=0.3"},
}


@pytest.mark.parametrize("case", list(COMPACT_CASES))
def test_compact_of_a_remote_dataset_equals_a_fresh_remote_conversion(tmp_path: Path, cli: Any, case: str) -> None:
    """`compact` of a ram:// dataset after updates (add, remove, change, new class): every file is
    the local compact's, the shards and metadata a fresh ram:// `convert --labels`'s; inspect
    --verify and load() read it; nothing of the build is left behind."""
    from img2tfrecord.conversion.versions.compact import compact
    from img2tfrecord.format.naming import STAGING_DIR

    opts = COMPACT_CASES[case]
    src, local = tmp_path / "in", tmp_path / "out"
    files = make_dataset(src, {"a": 6, "b": 5}, size=(20, 16))
    out, fresh = f"ram://s7compact/{case}/out", f"ram://s7compact/{case}/fresh"
    convert(str(src), str(local), **opts)
    convert(str(src), out, **opts)
    save(natural_image(24, 20, 601), src / "a" / "added.jpg", quality=90)
    update(str(src), str(local))
    update(str(src), out)
    files["b"][1].unlink()
    save(natural_image(30, 22, 602), files["a"][2], quality=85)  # changed: other bytes, other size
    save(natural_image(22, 18, 603), src / "c" / "new_class.png")
    update(str(src), str(local))
    update(str(src), out)
    before = json.loads(gfile().GFile(f"{out}/dataset.json").read())
    assert len(remote_files(out)) > 0 and remote_files(out) == local_files(local)

    s = compact(out)
    assert s["version"] == before["version"] + 1 and s["shards_after"] <= s["shards_before"]
    compact(str(local))
    assert remote_files(out) == local_files(local)
    assert STAGING_DIR not in gfile().listdir(out)
    convert(str(src), fresh, labels=str(local / "labels.txt"), **opts)
    got, want = remote_files(out), remote_files(fresh)
    assert sorted(got) == sorted(want)
    assert {n: got[n] for n in got if n != "dataset.json"} == {n: want[n] for n in want if n != "dataset.json"}

    code, rep = inspect_json(cli, out, "--verify")
    assert code == 0 and rep["lineage"][0]["version"] == before["version"] + 1, rep["problems"]
    splits = list(json.loads(got["dataset.json"])["splits"])
    for split in splits:
        assert loaded(out, split) == loaded(fresh, split)
    assert sorted(f for sp in splits for f, _, _ in loaded(out, sp)) == sorted(
        str(p.relative_to(src)).encode() for p in src.rglob("*.*")
    )


def test_a_remote_input_records_sizes_so_update_sees_a_changed_file(tmp_path: Path) -> None:
    """convert of a ram:// INPUT asks each object's size and mtime (gfile.stat, in threads): the
    catalog holds the same sizes as a local conversion's, the default shard count is the local
    one (the same shards, byte for byte), and the first update sees a file whose size changed
    without --check-content. (ram:// keeps no mtime, so there the size is what tells.)"""
    from img2tfrecord.format import catalog

    src, local = tmp_path / "in", tmp_path / "out"
    files = make_dataset(src, {"a": 4, "b": 4}, size=(20, 16))
    root, out = "ram://s7in/in", tmp_path / "remote-out"
    upload(src, root)
    convert(str(src), str(local))
    convert(root, str(out))
    cat = catalog.decode((out / catalog.CATALOG_NAME).read_bytes())
    want = {str(p.relative_to(src)).encode(): p.stat().st_size for p in src.rglob("*.*")}
    assert {bytes(cat.rels[r]): cat.sizes[r] for r in range(len(cat))} == want
    assert {n: b for n, b in local_files(out).items() if "-of-" in n} == {
        n: b for n, b in local_files(local).items() if "-of-" in n
    }

    changed = files["a"][1]
    save(natural_image(36, 30, 999), changed, quality=70)  # another image, another size
    rewrite(f"{root}/a/{changed.name}", changed.read_bytes())
    dry = update(root, str(out), dry_run=True)
    sp = dry["splits"]["train"]
    assert (sp["added"], sp["removed"], sp["changed"], sp["unchanged"]) == (0, 0, 1, 7), sp
    update(root, str(out))
    got = {f: px for f, _, px in loaded(out)}
    convert(str(src), str(local), overwrite=True)
    assert got == {f: px for f, _, px in loaded(local)}
    assert update(root, str(out), dry_run=True)["up_to_date"]


def test_a_catalog_without_sizes_from_an_older_remote_conversion_is_filled_in(tmp_path: Path) -> None:
    """A dataset converted from a remote listing before convert asked for sizes has 0/0 in its
    catalog: its first update takes those images as unchanged (no --check-content), adds and
    removes what changed in the listing, and records what its stat found, so the next update
    compares sizes."""
    from img2tfrecord.format import catalog

    src, out = tmp_path / "in", tmp_path / "out"
    files = make_dataset(src, {"a": 3, "b": 3}, size=(20, 16))
    root = "ram://s7old/in"
    upload(src, root)
    convert(root, str(out), shards=2)
    path = out / catalog.CATALOG_NAME
    cat = catalog.decode(path.read_bytes())
    for r in range(len(cat)):
        cat.sizes[r] = cat.mtimes[r] = 0
    path.write_bytes(catalog.encode(cat))
    manifest = json.loads((out / "dataset.json").read_text())
    del manifest["catalog"]  # that version recorded no catalog checksum
    (out / "dataset.json").write_text(json.dumps(manifest, indent=2))
    gfile().remove(f"{root}/a/{files['a'][0].name}")
    s = update(root, str(out))
    sp = s["splits"]["train"]
    assert (sp["added"], sp["removed"], sp["changed"], sp["unchanged"]) == (0, 1, 0, 5), sp
    cat = catalog.decode(path.read_bytes())
    live = {bytes(cat.rels[r]): cat.sizes[r] for r in range(len(cat))}
    assert live == {str(p.relative_to(src)).encode(): p.stat().st_size for p in src.rglob("*.*") if p != files["a"][0]}
    changed = files["b"][1]
    save(natural_image(36, 30, 998), changed, quality=70)
    rewrite(f"{root}/b/{changed.name}", changed.read_bytes())
    assert update(root, str(out), dry_run=True)["splits"]["train"]["changed"] == 1


def _failing_rename(monkeypatch: Any, out: str, after: int) -> None:
    """fs.rename fails (EIO) on the shard move into `out` that follows `after` successful ones: a
    publish in place cut short half-way, at an exact point."""
    from img2tfrecord import fs

    real, moved = fs.rename, []

    def rename(a: str, b: str) -> None:
        if b.startswith(out + "/") and "-of-" in b and ".img2tfrecord-staging" not in b:
            if len(moved) == after:
                raise OSError(5, "Input/output error")
            moved.append(a)
        real(a, b)

    monkeypatch.setattr(fs, "rename", rename)


def test_an_update_cut_short_mid_publish_on_an_object_store_is_finished_by_the_next_update(
    tmp_path: Path, cli: Any, monkeypatch: Any
) -> None:
    """Issue 22 item 7 on object stores: an update whose in-place publish fails after its commit
    (dataset.json gone, some shards moved) leaves a folder readers refuse, with what to run; the
    next `update` rolls the publish forward from the staging folder: every file is that of the
    same update on disk, and the input is then up to date."""
    src, local = tmp_path / "in", tmp_path / "out"
    files = make_dataset(src, {"a": 5, "b": 5}, size=(20, 16))
    out = "ram://s7cut/out"
    convert(str(src), str(local), shards=3)
    convert(str(src), out, shards=3)
    files["a"][1].unlink()
    save(natural_image(24, 20, 700), src / "b" / "new.png")
    update(str(src), str(local))

    _failing_rename(monkeypatch, out, after=1)
    with pytest.raises(img2tfrecord.errors.DataError, match=r"publishing the dataset in .* failed: Input/output error"):
        update(str(src), out)
    monkeypatch.undo()
    assert not gfile().exists(f"{out}/dataset.json")
    res = cli("inspect", out)
    assert res.exit_code == 1 and "the publish of its new version was cut short" in res.output, res.output
    with pytest.raises(img2tfrecord.errors.DataError, match="cut short"):
        img2tfrecord.load(out)
    with pytest.raises(img2tfrecord.errors.UsageError, match="without dry_run=True to finish it"):
        update(str(src), out, dry_run=True)

    s = update(str(src), out)
    assert s["up_to_date"], s
    assert remote_files(out) == local_files(local)
    assert cli("inspect", out, "--verify").exit_code == 0
    assert loaded(out) == loaded(local)


def test_a_compact_cut_short_mid_publish_is_finished_by_convert_resume_or_the_next_compact(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """The same for compact: the publish it committed is finished by whichever command comes next
    (here the next compact, which then compacts the finished version: the shards a local compact
    writes)."""
    from img2tfrecord.conversion.versions.compact import compact

    src, local = tmp_path / "in", tmp_path / "out"
    make_dataset(src, {"a": 4, "b": 4}, size=(20, 16))
    out = "ram://s7cutc/out"
    convert(str(src), str(local), shards=2)
    convert(str(src), out, shards=2)
    save(natural_image(24, 20, 701), src / "a" / "added.png")
    update(str(src), str(local))
    update(str(src), out)
    compact(str(local))

    _failing_rename(monkeypatch, out, after=0)
    with pytest.raises(img2tfrecord.errors.DataError, match="publishing the dataset in .* failed"):
        compact(out)
    monkeypatch.undo()
    assert not gfile().exists(f"{out}/dataset.json")
    compact(out)  # finishes the cut-short one (version 3), then compacts that (version 4)
    compact(str(local))
    assert remote_files(out) == local_files(local)


# --------------------------------------------------------------------------- a real kill, in place

STRACE = shutil.which("strace")
RENAME = re.compile(r'^\d+\s+rename\w*\((?:\d+, )?"([^"]+)", (?:\d+, )?"([^"]+)"')


def _visible(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.iterdir()) if p.is_file() and not p.name.startswith(".")}


@pytest.mark.skipif(STRACE is None, reason="strace is not installed (apt-get install strace)")
def test_a_kill_during_an_in_place_publish_leaves_what_the_next_update_finishes(tmp_path: Path) -> None:
    """SIGKILL (strace, at exact renames) during an update published in place (here: OUTPUT is the
    current directory, as on a mount point or an object store): before its commit the old version
    stays; after it the folder is refused by readers, saying what to run, and `update --resume`
    (the same command) finishes the version the killed run had built: the bytes of an
    uninterrupted update."""
    from img2tfrecord.format.layout import check_complete

    src, out, old_copy = tmp_path / "in", tmp_path / "out", tmp_path / "old"
    files = make_dataset(src, {"a": 4, "b": 4}, size=(16, 12))
    convert(str(src), str(out), shards=3, workers=1)
    shutil.copytree(out, old_copy)
    old = _visible(out)
    files["a"][1].unlink()
    save(natural_image(24, 20, 700), src / "b" / "new.png")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TF_CPP")} | {"TF_CPP_MIN_LOG_LEVEL": "3"}
    run = [sys.executable, "-m", "img2tfrecord", "update", str(src), str(out), "--workers", "1"]

    def traced(*options: str) -> subprocess.CompletedProcess:
        cmd = [STRACE, "-f", "-qq", *options, "-e", "trace=rename,renameat,renameat2", *run]
        return subprocess.run(cmd, cwd=out, capture_output=True, text=True, env=env, timeout=120)

    log = tmp_path / "renames.log"
    assert traced("-o", str(log)).returncode == 0
    new = _visible(out)
    renames = [(m[1], m[2]) for line in log.read_text().splitlines() if (m := RENAME.match(line))]
    commit = next(i for i, (_, b) in enumerate(renames) if b.endswith("/publishing.json")) + 1  # strace counts from 1
    last = next(i for i, (_, b) in enumerate(renames) if b == str(out / "dataset.json")) + 1
    assert commit < last
    for n in sorted({commit, commit + 1, (commit + last) // 2, last}):
        shutil.rmtree(out)
        shutil.copytree(old_copy, out)
        res = traced("-o", "/dev/null", "-e", f"inject=rename,renameat,renameat2:signal=SIGKILL:when={n}")
        assert res.returncode == -9, (n, res.stderr)
        if n <= commit:
            assert _visible(out) == old, n
        else:
            assert "dataset.json" not in _visible(out), n
            with pytest.raises(img2tfrecord.errors.DataError, match="the publish of its new version was cut short"):
                check_complete(str(out))
        update(str(src), str(out), workers=1, resume=True)
        assert _visible(out) == new, n
        assert not (out / ".img2tfrecord-staging").exists(), n


def test_a_cut_short_publish_that_lost_a_file_says_so_and_convert_overwrite_starts_over(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """If a file of the committed version is gone from the staging folder (and not moved), the
    publish cannot be finished: the next update says so and names `convert --overwrite`, which then
    rebuilds the dataset (the same files as a fresh conversion)."""
    from img2tfrecord.format.naming import STAGING_DIR

    src = tmp_path / "in"
    make_dataset(src, {"a": 4, "b": 4}, size=(20, 16))
    out, fresh = "ram://s7lost/out", "ram://s7lost/fresh"
    convert(str(src), out, shards=3)
    save(natural_image(24, 20, 702), src / "b" / "new.png")
    _failing_rename(monkeypatch, out, after=1)
    with pytest.raises(img2tfrecord.errors.DataError, match="publishing the dataset in"):
        update(str(src), out)
    monkeypatch.undo()
    staged = [n for n in gfile().listdir(f"{out}/{STAGING_DIR}") if "-of-" in n and not n.endswith(".idx")]
    gfile().remove(f"{out}/{STAGING_DIR}/{staged[0]}")
    with pytest.raises(img2tfrecord.errors.DataError, match=r"cannot be finished; convert with overwrite=True"):
        update(str(src), out)
    convert(str(src), out, shards=3, overwrite=True)
    convert(str(src), fresh, shards=3)
    assert remote_files(out) == remote_files(fresh)
