"""--resume with --dedupe drop: a finished shard is reused only if it drops the copies this run
drops. Between an interruption and --resume, the kept copy of a dropped image may be removed or
edited, making the dropped one the copy to write; the shard's own sources did not change, so only
its drop decisions tell (reviewer's reproduction: the image was lost, and --verify saw nothing)."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from helpers import make_dataset, natural_image, read_records, save
from img2tfrecord.conversion.convert import convert
from img2tfrecord.conversion.plan.splits import order_key
from img2tfrecord.conversion.versions.update import update
from img2tfrecord.errors import Interrupted
from test_update_dedupe import SPLIT, _plan_place, _rel


def _stop_at_the_end(images: int, nbytes: int, total: int) -> None:
    if images >= total:  # every shard written and journaled, nothing published
        raise KeyboardInterrupt


def _names(out: Path) -> list[str]:
    return sorted(r["filename"].decode() for r in read_records(out))


def test_update_resume_writes_a_copy_whose_kept_copy_left_meanwhile(tmp_path: Path) -> None:
    src, out = tmp_path / "in", tmp_path / "out"
    files = make_dataset(src, {"a": 5, "b": 5}, size=(16, 12))
    convert(str(src), str(out), dedupe="drop", split=SPLIT, split_rule="hash", shards=2)
    kept = next(p for p in files["a"] + files["b"] if _plan_place(_rel(src, p))[0] == 0)
    after = _plan_place(_rel(src, kept))
    copy = next(
        src / f"b/later{n}{kept.suffix}"
        for n in range(1000)
        if _plan_place(f"b/later{n}{kept.suffix}")[0] == 0 and _plan_place(f"b/later{n}{kept.suffix}") > after
    )
    shutil.copy(kept, copy)  # a later copy of an image that stays: dropped
    for i in range(4):
        rel = next(f"a/new{i}_{n}.png" for n in range(1000) if _plan_place(f"a/new{i}_{n}.png")[0] == 1)
        save(natural_image(18, 14, 600 + i), src / rel)
    with pytest.raises(Interrupted):
        update(str(src), str(out), workers=1, progress=_stop_at_the_end)
    kept.unlink()  # the kept copy goes before the resume: the copy is now the one to write
    events: list[str] = []
    update(str(src), str(out), workers=1, resume=True, on_event=lambda kind, msg: events.append(msg))
    assert any("converted again" in e and "drops" in e for e in events), events
    fresh = tmp_path / "fresh"
    convert(
        str(src), str(fresh), dedupe="drop", split=SPLIT, split_rule="hash", shards=2, labels=str(out / "labels.txt")
    )
    assert _rel(src, copy) in _names(out)
    assert _names(out) == _names(fresh)


def test_convert_resume_writes_a_copy_whose_kept_copy_was_edited_meanwhile(tmp_path: Path) -> None:
    src, out = tmp_path / "in", tmp_path / "out"
    files = make_dataset(src, {"a": 6, "b": 6}, size=(16, 12))
    for p in files["a"]:
        shutil.copy(p, src / "b" / ("copy0_" + p.name))
    with pytest.raises(Interrupted):
        convert(str(src), str(out), dedupe="drop", shards=3, workers=1, progress=_stop_at_the_end)
    # a kept copy (first in plan order) whose dropped copy is in a later finished shard, edited in place
    # (same size): its copy in b/ is no copy any more, and only the drop decisions say so
    order = sorted((order_key(_rel(src, p), 0), _rel(src, p)) for p in src.rglob("*.*"))
    shard_of = {rel: 3 * i // len(order) for i, (_, rel) in enumerate(order)}
    edited = next(
        p
        for p in files["a"]
        if shard_of[_rel(src, p)] == 0 and shard_of[f"b/copy0_{p.name}"] == 1  # the last shard is cut short
    )
    data = bytearray(edited.read_bytes())
    data[-3] ^= 0xFF
    edited.write_bytes(bytes(data))
    later = time.time() + 5
    os.utime(edited, (later, later))
    convert(str(src), str(out), dedupe="drop", shards=3, workers=1, resume=True)
    fresh = tmp_path / "fresh"
    convert(str(src), str(fresh), dedupe="drop", shards=3, workers=1)
    assert _names(out) == _names(fresh)
    assert f"b/copy0_{edited.name}" in _names(out)
