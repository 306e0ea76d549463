"""`update --resume`: an interrupted update keeps its finished new shards; the same command with
--resume reuses them and publishes the bytes of an uninterrupted update."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from helpers import make_dataset, natural_image, save
from img2tfrecord.conversion.convert import convert
from img2tfrecord.conversion.publish import workspace
from img2tfrecord.conversion.update import update


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    """A 16-image dataset of 4 shards, 8 images added since (2 new shards); and the update's bytes."""
    from test_faults import visible

    root = tmp_path_factory.mktemp("update_resume")
    src, old = root / "in", root / "old"
    make_dataset(src, {"a": 8, "b": 8}, size=(16, 12))
    convert(str(src), str(old), shards=4, workers=1)
    for i in range(8):
        save(natural_image(18, 14, 700 + i), src / "ab"[i % 2] / f"new_{i}.png")
    ref = root / "ref"
    shutil.copytree(old, ref)
    s = update(str(src), str(ref), workers=1)
    assert s["shards_new"] == 2, s
    return src, old, visible(old), visible(ref)


@pytest.mark.parametrize("sig, when, code", [("SIGINT", 1, 130), ("SIGKILL", 2, -9)])
def test_an_interrupted_update_resumes_to_the_same_bytes(case, tmp_path: Path, cli, sig, when, code) -> None:
    """A signal as the update journals a new shard (strace at the journal's n-th open): OUTPUT is
    the old version; a rerun without --resume is refused; with it, the finished shard is reused."""
    from test_faults import STRACE, traced, visible

    if STRACE is None:
        pytest.skip("strace is not installed (apt-get install strace)")
    src, old_dir, old, new = case
    out = tmp_path / "out"
    shutil.copytree(old_dir, out)
    ws = workspace(str(out))
    journal = os.path.join(ws.root, "journal.jsonl")
    spec = ["-P", journal, "-e", "trace=openat", "-e", f"inject=openat:signal={sig}:when={when}"]
    res = traced("/dev/null", spec, "update", src, out, "--workers", "1")
    assert res.returncode == code, res.stderr
    if sig == "SIGINT":
        line = res.stderr.strip().splitlines()[-1]
        assert line.startswith(f"interrupted: {out} is unchanged") and "with --resume to continue" in line, line
        assert "Traceback" not in res.stderr
    assert visible(out) == old  # the old version, untouched
    assert os.path.exists(journal)

    refused = cli("update", src, out)
    m = re.search(r"unfinished update with (\d) finished shards?", refused.output)
    assert refused.exit_code == 2 and m and "--resume" in refused.output, refused.output
    finished = int(m[1])  # SIGKILL at the 2nd journal line: 1; SIGINT at the 1st: 1 (2 if the other shard closed first)
    assert finished == 1 or (sig == "SIGINT" and finished == 2)
    assert visible(out) == old

    events: list[tuple[str, str]] = []
    s = update(str(src), str(out), workers=1, resume=True, on_event=lambda k, m: events.append((k, m)))
    assert ("note", f"resuming: {finished} of 2 new shards reused") in events, events
    assert s["version"] == 2 and s["shards_new"] == 2
    assert visible(out) == new  # byte-identical to the uninterrupted update
    assert not os.path.lexists(ws.root)


def test_an_unfinished_update_is_not_resumed_by_convert(case, tmp_path: Path, cli) -> None:
    """convert --resume cannot finish an update's journal: it says to run update --resume."""
    from test_faults import STRACE, traced

    if STRACE is None:
        pytest.skip("strace is not installed (apt-get install strace)")
    src, old_dir, _, new = case
    out = tmp_path / "out"
    shutil.copytree(old_dir, out)
    journal = os.path.join(workspace(str(out)).root, "journal.jsonl")
    spec = ["-P", journal, "-e", "trace=openat", "-e", "inject=openat:signal=SIGKILL:when=1"]
    assert traced("/dev/null", spec, "update", src, out, "--workers", "1").returncode == -9
    res = cli("convert", src, out, "--resume")
    assert res.exit_code == 2 and "holds an unfinished update" in res.output and "update with --resume" in res.output
