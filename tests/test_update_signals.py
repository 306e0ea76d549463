"""update interrupted at each thread it starts (the record writer's preload among them): exit 143 with
one line of ours, OUTPUT still the old version, and the same command with --resume gives the bytes of
an uninterrupted update. The fault is injected by strace at the exact `clone` (tests/test_faults.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from helpers import make_dataset, natural_image, save
from img2tfrecord.conversion.convert import convert
from img2tfrecord.conversion.publish import workspace
from img2tfrecord.conversion.update import update


def test_a_sigterm_at_every_thread_start_of_an_update_exits_143_and_resume_finishes(tmp_path: Path) -> None:
    from test_faults import STRACE, occurrences, traced, visible

    if STRACE is None:
        pytest.skip("strace is not installed (apt-get install strace)")
    src, old_dir = tmp_path / "in", tmp_path / "old"
    files = make_dataset(src, {"a": 6, "b": 6}, size=(16, 12))
    convert(str(src), str(old_dir), shards=3, workers=1)
    old = visible(old_dir)
    files["a"][0].unlink()
    save(natural_image(20, 16, 5), src / "b" / "z.png")

    def fresh() -> Path:
        out = tmp_path / "out"
        shutil.rmtree(out, ignore_errors=True)
        shutil.rmtree(workspace(str(out)).root, ignore_errors=True)
        shutil.copytree(old_dir, out)
        return out

    out = fresh()
    log = tmp_path / "clean.log"
    res = traced(str(log), ["-e", "trace=clone,clone3"], "update", src, out, "--workers", "1")
    assert res.returncode == 0, res.stderr
    new = visible(out)
    assert new != old
    points = occurrences(log)
    assert len(points) >= 2, points  # the writer's preload and the engine's threads at least
    for name, n in points:
        out = fresh()
        spec = f"inject={name}:signal=SIGTERM:when={n}"
        res = traced("/dev/null", ["-e", f"trace={name}", "-e", spec], "update", src, out, "--workers", "1")
        assert res.returncode == 143, (spec, res.returncode, res.stderr)
        assert "Traceback" not in res.stderr and "RuntimeError" not in res.stderr, (spec, res.stderr)
        assert res.stderr.strip().splitlines()[-1].startswith("interrupted"), (spec, res.stderr)
        assert visible(out) == old, spec
        update(str(src), str(out), workers=1, resume=True)
        assert visible(out) == new, spec
