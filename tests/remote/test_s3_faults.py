"""Faults at the HTTP layer of S3 (tests/remote/faulty_proxy.py between s3fs and moto's server):
a 500 or a 503 SlowDown is retried with backoff and the dataset is the one a run without them
writes; a store that keeps failing stops the run cleanly, never a dataset that verifies."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pytest

from faulty_proxy import faulty_proxy
from helpers import make_dataset
from img2tfrecord.format.naming import SHARD_RE
from test_s3 import bucket_files, local_files, shard_bytes


def is_shard(path: str) -> bool:
    return bool(SHARD_RE.match(path.rsplit("/", 1)[-1].removesuffix(".idx")))


@pytest.fixture
def through(s3_server: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    """`with through(rule) as proxy:` every S3 request of the block goes through a faulty proxy."""
    import contextlib

    import s3fs

    @contextlib.contextmanager
    def use(rule: Any) -> Any:
        with faulty_proxy(s3_server, rule) as proxy, monkeypatch.context() as m:
            m.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{proxy.server_port}")
            s3fs.S3FileSystem.clear_instance_cache()
            try:
                yield proxy
            finally:
                s3fs.S3FileSystem.clear_instance_cache()

    return use


@pytest.mark.parametrize("status", [500, 503])
def test_errors_of_the_store_are_retried_and_change_no_byte(
    tmp_path: Path, cli: Any, bucket: str, through: Any, status: int
) -> None:
    make_dataset(tmp_path / "src", {"a": 4, "b": 3}, seed=4)
    opts = ("--shards", "3", "--index")
    out = f"{bucket}/out"

    def rule(method: str, path: str) -> tuple[int, int] | None:  # each shard's upload, copy and read: twice
        return (status, 2) if method in ("PUT", "GET") and is_shard(path) else None

    with through(rule) as proxy:
        res = cli("convert", tmp_path / "src", out, *opts)
        assert res.exit_code == 0, res.output
        verify = cli("inspect", out, "--verify", "--json")
    assert proxy.injected >= 12, proxy.answered
    assert verify.exit_code == 0 and json.loads(verify.stdout)["problems"] == []
    assert cli("convert", tmp_path / "src", tmp_path / "local", *opts).exit_code == 0
    assert shard_bytes(bucket_files(out)) == shard_bytes(local_files(tmp_path / "local"))


def test_a_store_that_keeps_failing_stops_the_run_and_resume_finishes_it(
    tmp_path: Path, cli: Any, bucket: str, through: Any
) -> None:
    make_dataset(tmp_path / "src", {"a": 3, "b": 3}, seed=6)
    out = f"{bucket}/out"

    def rule(method: str, path: str) -> tuple[int, int] | None:
        return (503, 10**6) if method == "PUT" and path.endswith("-00001-of-00002") else None

    retries = {"config_kwargs": {"retries": {"max_attempts": 2}}}  # botocore's: few
    spools = tmp_path / "tmp"  # where shards are written before their upload (fs.spool)
    spools.mkdir()
    with through(rule), pytest.MonkeyPatch.context() as m:
        m.setenv("IMG2TFRECORD_STORAGE_OPTIONS", json.dumps(retries))
        m.setenv("TMPDIR", str(spools))
        m.setattr(tempfile, "tempdir", None)  # read TMPDIR again
        res = cli("convert", tmp_path / "src", out, "--shards", "2", "--workers", "2")
    assert res.exit_code == 1, res.output
    assert res.stderr.count("\n") == 1 and "Please reduce your request rate" in res.stderr, res.stderr
    assert "dataset.json" not in bucket_files(out)
    assert not [p.name for p in spools.iterdir() if p.name.startswith("img2tfrecord-")], "a spooled shard was left"
    assert cli("inspect", out).exit_code != 0
    again = cli("convert", tmp_path / "src", out, "--shards", "2", "--resume")  # the store answers again
    assert again.exit_code == 0, again.output
    assert cli("convert", tmp_path / "src", tmp_path / "local", "--shards", "2").exit_code == 0
    assert bucket_files(out) == local_files(tmp_path / "local")
