"""Datasets in an S3 bucket, against a real S3 server (moto's, tests/remote/conftest.py) through s3fs.

Each behaviour is held to the same dataset made locally from the same images: a bucket's shards
must be those bytes, whichever side the bucket is on, and read back the same through the real
CLI, `inspect --verify` and `load()` (which streams s3:// without tensorflow-io).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import img2tfrecord
from helpers import make_dataset
from img2tfrecord.format.naming import SHARD_RE

# Options the shards are cut and written with: each row a conversion both locally and in a bucket.
MATRIX = [
    ("--shards", "1"),
    ("--shards", "3", "--index"),
    ("--shards", "2", "--compression", "gzip", "--split", "train=0.7,test=0.3"),
    ("--shards", "2", "--workers", "2", "--checksum", "sha256"),
]


def s3() -> Any:
    import s3fs

    return s3fs.S3FileSystem(use_listings_cache=False)


def bucket_files(url: str) -> dict[str, bytes]:
    """Every object directly under `url`, by name (none when nothing is under it)."""
    store = s3()
    out: dict[str, bytes] = {}
    if not store.exists(url):
        return out
    for entry in store.ls(url, detail=True):
        if entry["type"] == "file":
            out[entry["name"].rsplit("/", 1)[1]] = store.cat_file(entry["name"])
    return out


def shard_bytes(files: dict[str, bytes]) -> dict[str, bytes]:
    return {n: b for n, b in files.items() if SHARD_RE.match(n.removesuffix(".idx"))}


def local_files(path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(path.iterdir()) if p.is_file()}


def put_tree(src: Path, url: str) -> None:
    store = s3()
    for p in sorted(src.rglob("*")):
        if p.is_file():
            store.pipe_file(f"{url}/{p.relative_to(src).as_posix()}", p.read_bytes())


@pytest.mark.parametrize("opts", MATRIX, ids=lambda o: " ".join(o))
def test_a_conversion_into_a_bucket_holds_the_bytes_of_a_local_one(
    tmp_path: Path, cli: Any, bucket: str, opts: tuple[str, ...]
) -> None:
    make_dataset(tmp_path / "src", {"cat": 5, "dog": 4, "owl": 3})
    out = f"{bucket}/data/out"
    res = cli("convert", tmp_path / "src", out, *opts)
    assert res.exit_code == 0, res.output
    assert cli("convert", tmp_path / "src", tmp_path / "local", *opts).exit_code == 0
    remote, here = bucket_files(out), local_files(tmp_path / "local")
    assert shard_bytes(here) and remote == here  # shards, indexes, catalog, dataset.json, TFDS files
    assert not [n for n in s3().ls(bucket, detail=False) if "img2tfrecord" in n], "a workspace was left beside OUTPUT"
    verify = cli("inspect", out, "--verify", "--json")
    assert verify.exit_code == 0, verify.output
    assert json.loads(verify.stdout)["problems"] == []


def test_a_bucket_input_converts_to_the_bytes_of_the_same_images_on_disk(tmp_path: Path, cli: Any, bucket: str) -> None:
    make_dataset(tmp_path / "src", {"a": 4, "b": 6, "c": 2}, seed=3)
    put_tree(tmp_path / "src", f"{bucket}/in")
    opts = ("--shards", "2", "--index", "--split", "train=0.5,val=0.5")
    res = cli("convert", f"{bucket}/in", tmp_path / "from-bucket", *opts)
    assert res.exit_code == 0, res.output
    assert cli("convert", tmp_path / "src", tmp_path / "from-disk", *opts).exit_code == 0
    assert shard_bytes(local_files(tmp_path / "from-bucket")) == shard_bytes(local_files(tmp_path / "from-disk"))


def test_a_bucket_to_bucket_conversion_and_its_update(tmp_path: Path, cli: Any, bucket: str) -> None:
    make_dataset(tmp_path / "src", {"a": 3, "b": 3}, seed=5)
    put_tree(tmp_path / "src", f"{bucket}/in")
    out = f"{bucket}/out"
    assert cli("convert", f"{bucket}/in", out, "--shards", "2").exit_code == 0
    make_dataset(tmp_path / "more", {"a": 2, "c": 2}, seed=9)
    s3().pipe_file(f"{bucket}/in/c/new.png", (tmp_path / "more/c/img_000.png").read_bytes())
    res = cli("update", f"{bucket}/in", out, "--json")
    assert res.exit_code == 0, res.output
    man = json.loads(s3().cat_file(f"{out}/dataset.json"))
    assert man["version"] == 2 and man["classes"] == ["a", "b", "c"]
    assert cli("inspect", out, "--verify").exit_code == 0


@pytest.mark.parametrize("compression", [(), ("--compression", "gzip")], ids=["none", "gzip"])
def test_load_streams_a_bucket_into_tf_data_as_it_reads_the_local_copy(
    tmp_path: Path, cli: Any, bucket: str, compression: tuple[str, ...]
) -> None:
    make_dataset(tmp_path / "src", {"cat": 4, "dog": 3}, seed=1)
    opts = ("--shards", "2", *compression)
    assert cli("convert", tmp_path / "src", f"{bucket}/out", *opts).exit_code == 0
    assert cli("convert", tmp_path / "src", tmp_path / "local", *opts).exit_code == 0

    def read(path: str) -> list[tuple[bytes, int, bytes]]:
        ds = img2tfrecord.load(path, "train", as_dict=True)
        return [(ex["image/filename"].numpy(), int(ex["label"]), np.asarray(ex["image"]).tobytes()) for ex in ds]

    remote, here = read(f"{bucket}/out"), read(str(tmp_path / "local"))
    assert remote == here and len(remote) == 7


def test_without_s3fs_or_credentials_s3_is_one_line_naming_what_to_set(
    tmp_path: Path, cli: Any, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib.util

    import s3fs

    make_dataset(tmp_path / "src", {"a": 1})
    s3fs.S3FileSystem.clear_instance_cache()  # the one made with the keys (a new process has none)
    try:
        with monkeypatch.context() as m:
            for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
                m.delenv(k)
            m.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
            m.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
            m.setenv("AWS_EC2_METADATA_DISABLED", "true")
            res = cli("convert", tmp_path / "src", f"{bucket}/out")
    finally:
        s3fs.S3FileSystem.clear_instance_cache()  # the one made without keys
    assert res.exit_code == 2, res.output
    assert res.stderr.startswith(f"error: output {bucket}/out: no credentials for s3://: set AWS_ACCESS_KEY_ID")
    assert res.stderr.count("\n") == 1

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "s3fs" else real(name, *a))
    res = cli("convert", f"{bucket}/in", tmp_path / "out")
    assert res.exit_code == 2
    assert res.stderr == (
        f"error: input {bucket}/in: s3:// needs s3fs, which is not installed: pip install 'img2tfrecord[s3]'\n"
    )


def test_storage_options_reach_the_store_in_every_worker(
    tmp_path: Path, cli: Any, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """IMG2TFRECORD_STORAGE_OPTIONS: keyword arguments for s3fs (here the keys, none in the
    environment), in the process that plans and in the workers that read the images."""
    import s3fs

    make_dataset(tmp_path / "src", {"a": 4, "b": 4}, seed=7)
    put_tree(tmp_path / "src", f"{bucket}/in")
    s3fs.S3FileSystem.clear_instance_cache()
    try:
        with monkeypatch.context() as m:
            for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
                m.delenv(k)
            m.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
            m.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
            m.setenv("AWS_EC2_METADATA_DISABLED", "true")
            m.setenv("IMG2TFRECORD_STORAGE_OPTIONS", json.dumps({"key": "testing", "secret": "testing"}))
            res = cli("convert", f"{bucket}/in", f"{bucket}/out", "--shards", "2", "--workers", "2")
            assert res.exit_code == 0, res.output
            m.setenv("IMG2TFRECORD_STORAGE_OPTIONS", "[1]")
            bad = cli("inspect", f"{bucket}/out")
    finally:
        s3fs.S3FileSystem.clear_instance_cache()
    assert bad.exit_code == 2 and bad.stderr == "error: IMG2TFRECORD_STORAGE_OPTIONS is not a JSON object: [1]\n"
    assert cli("inspect", f"{bucket}/out", "--verify").exit_code == 0


def test_a_file_list_of_objects_compact_and_report_on_a_bucket(tmp_path: Path, cli: Any, bucket: str) -> None:
    """--file-list in a bucket naming objects (relative and full URLs), compact of the bucket's
    dataset after an update, and report of it: the files a local run of the same steps writes."""
    make_dataset(tmp_path / "src", {"a": 4, "b": 3}, seed=11)
    rows = "path,label\na/img_000.png,x\na/img_001.jpg,x\nb/img_000.png,y\n"
    (tmp_path / "src" / "files.csv").write_text(rows + f"{bucket}/in/b/img_001.jpg,y\n")
    put_tree(tmp_path / "src", f"{bucket}/in")
    (tmp_path / "src" / "files.csv").write_text(rows + f"{tmp_path}/src/b/img_001.jpg,y\n")
    out = f"{bucket}/listed"
    res = cli("convert", f"{bucket}/in", out, "--file-list", f"{bucket}/in/files.csv", "--shards", "2")
    assert res.exit_code == 0, res.output
    here = tmp_path / "listed"
    assert (
        cli("convert", tmp_path / "src", here, "--file-list", tmp_path / "src/files.csv", "--shards", "2").exit_code
        == 0
    )
    assert shard_bytes(bucket_files(out)) == shard_bytes(local_files(here))

    out = f"{bucket}/out"
    assert cli("convert", f"{bucket}/in", out, "--shards", "3").exit_code == 0
    store = s3()
    store.rm_file(f"{bucket}/in/a/img_001.jpg")
    store.pipe_file(f"{bucket}/in/c/img_009.png", (tmp_path / "src/a/img_000.png").read_bytes())
    assert cli("update", f"{bucket}/in", out).exit_code == 0
    res = cli("compact", out, "--json")
    assert res.exit_code == 0, res.output
    assert cli("inspect", out, "--verify").exit_code == 0
    fresh = tmp_path / "fresh"
    make_dataset(fresh, {"a": 4, "b": 3}, seed=11)
    (fresh / "a/img_001.jpg").unlink()
    (fresh / "c").mkdir()
    (fresh / "c/img_009.png").write_bytes((tmp_path / "src/a/img_000.png").read_bytes())
    labels = tmp_path / "labels.txt"
    labels.write_bytes(store.cat_file(f"{out}/labels.txt"))
    assert cli("convert", fresh, tmp_path / "fresh-out", "--shards", "3", "--labels", labels).exit_code == 0
    assert shard_bytes(bucket_files(out)) == shard_bytes(local_files(tmp_path / "fresh-out"))

    page = tmp_path / "report.html"
    res = cli("report", out, "-o", page)
    assert res.exit_code == 0, res.output
    assert "c/img_009.png" in page.read_text() or "img_009" in page.read_text()


def test_a_missing_bucket_is_one_line_and_is_not_created(tmp_path: Path, cli: Any, s3_server: str) -> None:
    make_dataset(tmp_path / "src", {"a": 1})
    res = cli("convert", tmp_path / "src", "s3://no-such-bucket/out")
    assert res.exit_code == 2, res.output
    assert res.stderr == "error: cannot create output s3://no-such-bucket/out: no such bucket\n"
    assert not s3().exists("no-such-bucket")
    res = cli("inspect", "s3://no-such-bucket/out")
    assert res.exit_code != 0 and res.stderr.count("\n") == 1, res.stderr
