"""`--storage-option KEY=VALUE` on every command that takes a bucket: the back-end's keyword
arguments reach the planning process and the workers, and are never written to dataset.json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from helpers import make_dataset
from test_s3 import put_tree

# A loopback port nothing listens on: a store that ignored --storage-option would fail here, fast
# and without leaving the machine.
DEAD = "http://127.0.0.1:9"


def test_an_endpoint_given_only_as_a_storage_option_serves_every_command(
    tmp_path: Path, cli: Any, bucket: str, s3_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import s3fs

    make_dataset(tmp_path / "src", {"a": 4, "b": 4}, seed=3)
    put_tree(tmp_path / "src", f"{bucket}/in")
    opt = ("--storage-option", f"endpoint_url={s3_server}")
    monkeypatch.setenv("IMG2TFRECORD_STORAGE_OPTIONS", "{}")  # restored after: the CLI adds to it
    monkeypatch.setenv("AWS_ENDPOINT_URL", DEAD)
    out = f"{bucket}/out"
    runs = {
        "convert": cli("convert", f"{bucket}/in", out, "--shards", "2", "--workers", "2", *opt),
        "update": cli("update", f"{bucket}/in", out, "--workers", "2", *opt),
        "compact": cli("compact", out, "--dry-run", *opt),
        "inspect": cli("inspect", out, "--verify", *opt),
        "report": cli("report", out, "-o", str(tmp_path / "r.html"), *opt),
    }
    assert {k: r.exit_code for k, r in runs.items()} == dict.fromkeys(runs, 0), {k: r.output for k, r in runs.items()}
    store = s3fs.S3FileSystem(use_listings_cache=False, skip_instance_cache=True, endpoint_url=s3_server)
    assert "endpoint_url" not in store.cat_file(f"{out}/dataset.json").decode()


@pytest.mark.parametrize("item", ["noequals", "=value", " =x"])
@pytest.mark.parametrize("command", ["convert", "update", "compact", "inspect", "report"])
def test_a_malformed_storage_option_is_one_line_exit_2(
    tmp_path: Path, cli: Any, command: str, item: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("IMG2TFRECORD_STORAGE_OPTIONS", "{}")
    paths = {"convert": 2, "update": 2}.get(command, 1)
    args = [str(tmp_path / f"p{i}") for i in range(paths)]
    res = cli(command, *args, "--storage-option", item)
    assert res.exit_code == 2
    assert len(res.stderr.strip().splitlines()) == 1 and "KEY=VALUE" in res.stderr, res.stderr
    assert "Traceback" not in res.output
    as_json = cli(command, *args, "--storage-option", item, "--json")
    assert as_json.exit_code == 2 and json.loads(as_json.stdout)["ok"] is False


def test_a_storage_option_value_is_json_when_it_reads_as_json() -> None:
    from img2tfrecord import stores

    assert stores.parse_option("anon=true") == ("anon", True)
    assert stores.parse_option("endpoint_url=http://h:1") == ("endpoint_url", "http://h:1")
    assert stores.parse_option('client_kwargs={"region_name": "x"}') == ("client_kwargs", {"region_name": "x"})
    assert stores.parse_option("profile=a=b") == ("profile", "a=b")


def test_a_bucket_input_is_walked_from_its_listing_with_no_head_per_image(
    tmp_path: Path, cli: Any, bucket: str, s3_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The listing carries each object's size and mtime: planning a bucket input asks no HEAD of
    an image (a million images were a million requests); the one HEAD left per image is s3fs's,
    when the worker opens it to read. The shards are those of the same images converted locally."""
    from collections import Counter

    from faulty_proxy import faulty_proxy
    from test_s3 import bucket_files, local_files, shard_bytes

    make_dataset(tmp_path / "src", {"a": 5, "b": 4, "c": 3}, seed=11)
    put_tree(tmp_path / "src", f"{bucket}/in")
    seen: list[tuple[str, str]] = []

    def count(method: str, path: str) -> None:
        seen.append((method, path))

    with faulty_proxy(s3_server, count) as proxy, monkeypatch.context() as m:
        m.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{proxy.server_port}")
        res = cli("convert", f"{bucket}/in", f"{bucket}/out", "--shards", "2")
    assert res.exit_code == 0, res.output
    heads = [p for meth, p in seen if meth == "HEAD" and "/in/" in p and p.endswith((".png", ".jpg"))]
    assert len(heads) == 12 and set(Counter(heads).values()) == {1}, sorted(heads)
    assert cli("convert", tmp_path / "src", tmp_path / "local", "--shards", "2").exit_code == 0
    assert shard_bytes(bucket_files(f"{bucket}/out")) == shard_bytes(local_files(tmp_path / "local"))
