"""`convert --resume` after a run killed just after its switch: exit 0 when the published dataset
is the one this command was making (a retry script's rerun), exit 2 when it was another command's."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from helpers import make_dataset
from img2tfrecord.conversion.write.workspace import workspace

ARGS = ["--shards", "2", "--workers", "1"]


def _killed_after_switch(src: Path, out: Path) -> None:
    """SIGKILL at the first system call after the switch: the journal's unlink (its second; the
    first is prepare()'s, of no file). A kill at the switch's own rename stops it before it runs
    (strace delivers the signal on the call's entry), which a plain --resume already finishes."""
    from test_faults import traced

    ws = workspace(str(out))
    journal = os.path.join(ws.root, "journal.jsonl")
    spec = ["-P", journal, "-e", "trace=unlink", "-e", "inject=unlink:signal=SIGKILL:when=2"]
    res = traced("/dev/null", spec, "convert", src, out, *ARGS)
    assert res.returncode == -9, res.stderr
    assert os.path.exists(os.path.join(ws.root, "published")) and os.path.exists(journal)


def test_resume_after_a_kill_just_after_the_switch(tmp_path: Path, cli) -> None:
    from test_faults import STRACE, visible

    if STRACE is None:
        pytest.skip("strace is not installed (apt-get install strace)")
    src, ref = tmp_path / "in", tmp_path / "ref"
    make_dataset(src, {"a": 4, "b": 4}, size=(16, 12))
    assert cli("convert", src, ref, *ARGS).exit_code == 0
    out = tmp_path / "out"

    _killed_after_switch(src, out)
    assert visible(out) == visible(ref)  # published
    res = cli("convert", src, out, *ARGS, "--resume")
    assert res.exit_code == 0, res.output
    assert "already holds the dataset this command was making" in res.output and "nothing left to do" in res.output
    assert visible(out) == visible(ref) and not os.path.lexists(workspace(str(out)).root)

    # another command (other shard counts) finds a finished dataset it did not make: exit 2, as before
    shutil.rmtree(out)
    _killed_after_switch(src, out)
    res = cli("convert", src, out, "--shards", "3", "--workers", "1", "--resume")
    assert res.exit_code == 2 and "nothing to resume" in res.output, res.output
    assert visible(out) == visible(ref)
