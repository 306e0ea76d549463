"""Issue 15, the contract end to end: convert's output passes its own verify, no hangs, every
error one clean line, messages that say what happened. Real images (Pillow), the real CLI."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from conftest import make_dataset, natural_image, read_records, save


def verify(cli, out: Path) -> None:
    res = cli("inspect", out, "--verify")
    assert res.exit_code == 0, res.output
    assert "no problems" in res.stdout


# ---- 1. one definition of image/filename, for convert and inspect --verify ----


def test_odd_file_names_pass_their_own_verify(cli, tmp_path):
    src = tmp_path / "in"
    save(natural_image(20, 16, 1), src / "k" / "we\\ird.jpg")
    save(natural_image(20, 16, 2), src / "k" / "plain.png")
    bad = os.path.join(os.fsencode(src / "k"), b"caf\xe9.jpg")  # Latin-1 bytes: not UTF-8
    with open(bad, "wb") as f:
        f.write((src / "k" / "we\\ird.jpg").read_bytes())
    out = tmp_path / "out"
    res = cli("convert", src, out)
    assert res.exit_code == 0, res.output
    assert "1 name is not valid UTF-8 (e.g. 'k/caf\\xe9.jpg')" in res.stderr
    assert sorted(r["filename"].decode() for r in read_records(out)) == ["k/caf\\xe9.jpg", "k/plain.png", "k/we\\ird.jpg"]
    verify(cli, out)


def test_file_list_rows_outside_input_pass_verify(cli, tmp_path):
    src, elsewhere = tmp_path / "in", tmp_path / "elsewhere"
    save(natural_image(20, 16, 1), src / "cat" / "a.jpg")
    save(natural_image(20, 16, 2), elsewhere / "b.png")
    save(natural_image(20, 16, 3), elsewhere / "c.jpg")
    listing = tmp_path / "files.csv"
    listing.write_text(f"path,label\ncat/a.jpg,cat\n{elsewhere / 'b.png'},dog\n./../elsewhere/c.jpg,dog\n")
    out = tmp_path / "out"
    res = cli("convert", src, out, "--file-list", listing)
    assert res.exit_code == 0, res.output
    names = sorted(r["filename"].decode() for r in read_records(out))
    assert names == sorted(["cat/a.jpg", str(elsewhere / "b.png"), "../elsewhere/c.jpg"])  # as written (normalized)
    verify(cli, out)


def test_remote_rows_outside_input_are_valid_names():
    from img2tfrecord.schema import filename_problem
    from img2tfrecord.walker import _resolve_listed

    for given, name in [
        ("gs://other-bucket/extra/img_001.jpg", "gs://other-bucket/extra/img_001.jpg"),
        ("gs://my-bucket/data/cat/a.jpg", "cat/a.jpg"),
        ("gs://my-bucket/data/cat//a.jpg", "gs://my-bucket/data/cat//a.jpg"),  # not a name a walk gives: as written
        ("gs://my-bucket/data/../x.jpg", "gs://my-bucket/data/../x.jpg"),
    ]:
        assert _resolve_listed("gs://my-bucket/data", given)[1] == name
        assert filename_problem(name) is None
    assert filename_problem("cat/./a.jpg") and filename_problem("") and filename_problem("a/../b.jpg")


# ---- 4. load(shuffle_files=True, seed=...) repeats its order ----


def test_seeded_shuffle_files_gives_the_same_order_on_every_call(cli, tmp_path):
    import img2tfrecord

    make_dataset(tmp_path / "in", {"a": 30, "b": 30}, size=(12, 10))
    out = tmp_path / "out"
    assert cli("convert", tmp_path / "in", out, "--shards", "12").exit_code == 0

    def order(**kw):
        ds = img2tfrecord.load(out, shuffle_files=True, as_dict=True, **kw)
        return [[ex["image/filename"].numpy() for ex in ds] for _epoch in range(2)]

    first = order(seed=1)
    assert all(order(seed=1) == first for _ in range(3))  # every call: the same epochs, record for record
    assert first[0] != first[1]  # still a new file order each epoch
    assert sorted(first[0]) == sorted(r["filename"] for r in read_records(out))
