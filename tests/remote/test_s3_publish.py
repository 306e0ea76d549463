"""A new version published into an S3 bucket, which has no rename: the in-place commit protocol
(conversion.write.publish) on a real S3 server. After every change the publish makes to the
bucket, a reader (`load()`) sees the old version whole, the new one whole, or refuses the folder
as incomplete: never a mix. A publish cut short at any of those changes is finished by the next run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import img2tfrecord
from helpers import make_dataset
from img2tfrecord import fs
from img2tfrecord.errors import DataError

CHANGES = ("remove", "rename", "write_text", "upload", "rmtree")  # fs's calls that change a bucket


def names_read(out: str) -> frozenset[bytes] | str:
    """Every image/filename `load()` reads from both splits, or "refused" (its one DataError)."""
    try:
        got = []
        for split in ("train", "test"):
            got += [ex["image/filename"].numpy() for ex in img2tfrecord.load(out, split, as_dict=True)]
    except DataError as e:
        assert "is an incomplete dataset" in str(e), e
        return "refused"
    return frozenset(got)


def sources(root: Path, seed: int, classes: dict[str, int]) -> tuple[Path, frozenset[bytes]]:
    files = make_dataset(root, classes, seed=seed)
    return root, frozenset(p.relative_to(root).as_posix().encode() for ps in files.values() for p in ps)


def watch(monkeypatch: pytest.MonkeyPatch, out: str, after: Any) -> list[str]:
    """Call `after(name)` after each call of fs that changes the bucket under OUTPUT (not the
    staging folder's own uploads: only what a reader of OUTPUT can see)."""
    calls: list[str] = []
    for name in CHANGES:
        real = getattr(fs, name)

        def hooked(*args: Any, _real: Any = real, _name: str = name, **kw: Any) -> Any:
            result = _real(*args, **kw)
            if any(str(a).startswith(out) for a in args):
                calls.append(_name)
                after(_name)
            return result

        monkeypatch.setattr(fs, name, hooked)
    return calls


def test_a_reader_sees_the_old_or_the_new_version_at_every_step_of_a_bucket_publish(
    tmp_path: Path, cli: Any, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    old_src, old = sources(tmp_path / "v1", 1, {"a": 3, "b": 3})
    new_src, new = sources(tmp_path / "v2", 2, {"a": 4, "c": 5})
    out = f"{bucket}/out"
    opts = ("--shards", "2", "--index", "--split", "train=0.5,test=0.5")
    assert cli("convert", old_src, out, *opts).exit_code == 0
    assert names_read(out) == old
    seen: list[frozenset[bytes] | str] = []
    calls = watch(monkeypatch, out, lambda _: seen.append(names_read(out)))
    res = cli("convert", new_src, out, *opts, "--overwrite")
    assert res.exit_code == 0, res.output
    assert len(calls) >= 10, calls  # the shards, indexes, labels and metadata each moved or written
    assert set(seen) <= {old, new, "refused"}
    # old until the commit's first change, refused while files move, new from dataset.json on
    first_new = seen.index(new)
    assert "refused" in seen and all(s != old for s in seen[seen.index("refused") :])
    assert all(s == new for s in seen[first_new:])
    assert names_read(out) == new


class Cut(Exception):
    """A run stopped at one change (as a kill or a lost connection would stop it)."""


def test_a_bucket_publish_cut_short_at_any_change_is_finished_by_the_next_run(
    tmp_path: Path, cli: Any, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    old_src, old = sources(tmp_path / "v1", 1, {"a": 2, "b": 2})
    new_src, new = sources(tmp_path / "v2", 2, {"a": 3, "c": 2})
    opts = ("--shards", "2", "--split", "train=0.5,test=0.5")
    step = 0
    while True:
        out = f"{bucket}/out{step}"
        assert cli("convert", old_src, out, *opts).exit_code == 0
        count = [0]

        def cut(_: str, at: int = step, count: list[int] = count) -> None:
            count[0] += 1
            if count[0] == at + 1:
                raise Cut(f"cut at change {at}")

        with monkeypatch.context() as m:
            watch(m, out, cut)
            try:
                res = cli("convert", new_src, out, *opts, "--overwrite")
            except Cut:
                res = None
        if count[0] <= step:  # no change left to cut at: every step was tried
            assert res is not None and res.exit_code == 0, res and res.output
            break
        assert names_read(out) in (old, new, "refused")
        again = cli("convert", new_src, out, *opts, "--overwrite")
        assert again.exit_code == 0, again.output
        assert names_read(out) == new, f"cut at change {step}"
        step += 1
    assert step >= 5
