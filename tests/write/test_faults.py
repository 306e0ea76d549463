"""Faults at exact system calls (strace): a kill or an I/O error at every rename, a SIGTERM at every
thread start, ENOSPC in the middle of a shard; and two real processes racing for the lock.

After each fault, OUTPUT must be the old dataset, the new one complete, or nothing (which every
reader refuses); the same command with --resume must then give the bytes of an uninterrupted
run. The runs are tiny (12 images, 3 shards, one process) so that trying every rename stays
cheap; invariants and resumes are checked in this process, with the library.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

import img2tfrecord
from helpers import build_dir, journal_file, make_dataset
from img2tfrecord.conversion.write.workspace import workspace
from img2tfrecord.errors import DataError, UsageError

STRACE = shutil.which("strace")
pytestmark = pytest.mark.skipif(STRACE is None, reason="strace is not installed (apt-get install strace)")

SHARDS = 3
ARGS = ["--shards", str(SHARDS), "--workers", "1"]
RENAMES = ("rename", "renameat", "renameat2")
CALL = re.compile(r"^(\d+)\s+(\w+)\(")


def env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("TF_CPP")}


def traced(log: str, options: list[str], *args: str | Path) -> subprocess.CompletedProcess:
    cmd = [STRACE, "-f", "-qq", "-o", log, *options, sys.executable, "-m", "img2tfrecord", *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, env=env(), timeout=120)


def visible(out: Path) -> dict[str, bytes] | None:
    """What a reader sees in OUTPUT (None: no folder)."""
    if not out.is_dir():
        return None
    return {p.name: p.read_bytes() for p in sorted(out.iterdir()) if not p.name.startswith(".")}


def occurrences(log: Path) -> list[tuple[str, int]]:
    """(syscall, n) for each traced call of a clean run, in order: strace's `when=n` counts the
    calls of each name per tracee (thread), so a call is the n-th of its name in its thread."""
    seen: dict[tuple[str, str], int] = {}
    out = []
    for line in log.read_text().splitlines():
        if m := CALL.match(line):
            key = (m[1], m[2])
            seen[key] = seen.get(key, 0) + 1
            out.append((m[2], seen[key]))
    return list(dict.fromkeys(out))


def _lines(log: Path) -> list[str]:
    """The traced calls' lines, one for each of `occurrences(log)` (the same first-seen order)."""
    seen: dict[tuple[str, str], int] = {}
    out: dict[tuple[str, int], str] = {}
    for line in log.read_text().splitlines():
        if m := CALL.match(line):
            key = (m[1], m[2])
            seen[key] = seen.get(key, 0) + 1
            out.setdefault((m[2], seen[key]), line)
    return list(out.values())


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    root = tmp_path_factory.mktemp("faults")
    src = root / "in"
    make_dataset(src, {"a": 6, "b": 6}, size=(16, 12))
    new, old = root / "new", root / "old"
    img2tfrecord.convert(str(src), str(new), shards=SHARDS, workers=1)
    img2tfrecord.convert(str(src), str(old), shards=2, workers=1, encoding="png")
    return src, visible(new), old


def resume(src: Path, out: Path, overwrite: bool, before: dict[str, bytes] | None, new: dict[str, bytes]) -> None:
    """The same command with --resume finishes it, byte-identical; the workspace is gone after."""
    try:
        img2tfrecord.convert(str(src), str(out), shards=SHARDS, workers=1, resume=True, overwrite=overwrite)
    except UsageError as e:  # killed after its switch: the dataset was already complete
        assert before == new and "nothing to resume" in str(e), (str(e), sorted(before or {}))
    assert visible(out) == new
    assert not os.path.lexists(workspace(str(out)).root)


def check_invariant(out: Path, old: dict[str, bytes] | None, new: dict[str, bytes]) -> dict[str, bytes] | None:
    seen = visible(out)
    if seen:
        assert seen == new or seen == old, f"a mix of versions is visible: {sorted(seen)}"
    else:  # nothing at OUTPUT: load() says so; with the run's journal beside it, how to finish it
        with pytest.raises((UsageError, DataError)) as e:
            img2tfrecord.load(str(out))
        assert isinstance(e.value, UsageError) or "resume=True" in str(e.value), str(e.value)
    return seen


@pytest.mark.parametrize("overwrite", [False, True], ids=["fresh", "overwrite"])
def test_a_kill_or_an_io_error_at_every_rename_leaves_old_or_new_and_resume_finishes(case, tmp_path, overwrite):
    src, new, old_dir = case
    old = visible(old_dir) if overwrite else None
    extra = ["--overwrite"] if overwrite else []

    def fresh_output() -> Path:
        out = tmp_path / "out"
        shutil.rmtree(out, ignore_errors=True)
        shutil.rmtree(workspace(str(out)).root, ignore_errors=True)
        if overwrite:
            shutil.copytree(old_dir, out)
        return out

    out = fresh_output()
    log = tmp_path / "clean.log"
    res = traced(str(log), ["-e", "trace=" + ",".join(RENAMES)], "convert", src, out, *ARGS, *extra)
    assert res.returncode == 0, res.stderr
    assert visible(out) == new
    points = occurrences(log)
    assert len(points) >= 6, points  # metadata, marker and the switch at least
    if overwrite:
        assert ("renameat2", 1) in points  # the exchange
    retire = [p for p, line in zip(points, _lines(log)) if ".img2tfrecord/old-" in line]  # the old version moved
    assert len(retire) == (1 if overwrite else 0), retire
    for i, (name, n) in enumerate(points):
        # EIO at every rename with --overwrite (the same calls as a fresh run, and the exchange);
        # a fresh run's own last one, the plain rename of the new folder into place, too. EIO
        # moving the old version away once the new one is in: a warning, exit 0
        eio = overwrite or i == len(points) - 1
        failed = 0 if (name, n) in retire else 1
        for fault, code in [("signal=SIGKILL", -9)] + ([("error=EIO", failed)] if eio else []):
            out = fresh_output()
            spec = f"inject={name}:{fault}:when={n}"
            res = traced("/dev/null", ["-e", f"trace={name}", "-e", spec], "convert", src, out, *ARGS, *extra)
            assert res.returncode == code, (spec, res.stderr)
            if code == 1:  # the message is one line and says what is true, and what to run
                lines = res.stderr.strip().splitlines()
                assert lines[-1].startswith("error: ") and "Traceback" not in res.stderr, (spec, res.stderr)
                assert "--resume" in lines[-1] and "Input/output error" in lines[-1], (spec, lines[-1])
            if (name, n) in retire and code == 0:
                assert "warning: removing the old version of" in res.stderr, (spec, res.stderr)
            seen = check_invariant(out, old, new)
            if code == 1 and seen == old:
                assert "is unchanged" in lines[-1] or "nothing was published" in lines[-1], lines[-1]
            resume(src, out, overwrite, seen, new)


def test_a_sigterm_at_every_thread_start_exits_143_and_resume_finishes(case, tmp_path):
    """A signal while a thread starts unwinds cleanly (no "cannot join thread before it is started")."""
    src, new, _ = case
    out = tmp_path / "out"
    log = tmp_path / "clean.log"
    res = traced(str(log), ["-e", "trace=clone,clone3"], "convert", src, out, *ARGS)
    assert res.returncode == 0, res.stderr
    points = occurrences(log)
    assert points, "no thread started"
    for name, n in points:
        shutil.rmtree(out, ignore_errors=True)
        shutil.rmtree(workspace(str(out)).root, ignore_errors=True)
        spec = f"inject={name}:signal=SIGTERM:when={n}"
        res = traced("/dev/null", ["-e", f"trace={name}", "-e", spec], "convert", src, out, *ARGS)
        assert res.returncode == 143, (spec, res.returncode, res.stderr)
        assert "Traceback" not in res.stderr and "RuntimeError" not in res.stderr, (spec, res.stderr)
        assert res.stderr.strip().splitlines()[-1].startswith("interrupted"), (spec, res.stderr)
        seen = check_invariant(out, None, new)
        resume(src, out, False, seen, new)


def test_enospc_in_a_shard_keeps_the_finished_ones_and_resume_finishes(case, tmp_path):
    """The disk fills while the second shard is written: the first is kept (journaled), the message
    says so and names --resume, and --resume converts only the rest."""
    src, new, _ = case
    out = tmp_path / "out"
    second = "train-00001-of-00003"
    paths = [build_dir(out) / second, out / ".img2tfrecord-staging" / second]  # (the second: before the switch)
    options = [a for p in paths for a in ("-P", str(p))] + ["-e", "trace=write", "-e", "inject=write:error=ENOSPC"]
    res = traced("/dev/null", options, "convert", src, out, *ARGS)
    assert res.returncode == 1, res.stderr
    line = res.stderr.strip().splitlines()[-1]
    assert "No space left on device" in line and "1 of 3 shards finished and are kept" in line, line
    assert "--resume" in line and "Traceback" not in res.stderr
    assert visible(out) is None
    assert (build_dir(out) / "train-00000-of-00003").is_file() and journal_file(out).is_file()
    summary = img2tfrecord.convert(str(src), str(out), shards=SHARDS, workers=1, resume=True)
    assert summary["reused_shards"] == 1
    assert visible(out) == new


LOCK_LOOP = """
import os, sys, time
from img2tfrecord.conversion.write.publish import OutputLock
from img2tfrecord.conversion.write.workspace import workspace
from img2tfrecord.errors import UsageError
ws, marker, held = workspace(sys.argv[1]), sys.argv[2], 0
end = time.monotonic() + 4
while held < 300 and time.monotonic() < end:
    lock = OutputLock(ws)
    try:
        lock.acquire()
    except UsageError:
        continue
    os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))  # FileExistsError: two holders
    os.remove(marker)
    held += 1
    lock.release(remove=True)  # the lock file goes while held, as at the end of a run
print(held)
"""


def test_two_processes_never_hold_the_lock_at_once(tmp_path):
    """Lock files are removed while held (end of a run): a process that opened the old file just
    before must not hold a lock beside one that created the file anew."""
    out = tmp_path / "out"
    cmd = [sys.executable, "-c", LOCK_LOOP, str(out), str(tmp_path / "holder")]
    slow = [STRACE, "-f", "-qq", "-o", "/dev/null", "-e", "trace=flock", "-e", "inject=flock:delay_enter=20000"]
    procs = [  # one of them waits 20 ms between opening the lock file and locking it: the window
        subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for c in (cmd, slow + cmd)
    ]
    results = [p.communicate(timeout=60) + (p.returncode,) for p in procs]
    for _, stderr, code in results:
        assert code == 0, stderr
    assert all(int(stdout) > 0 for stdout, _, _ in results), results  # both took it, in turn
    assert not os.path.lexists(workspace(str(out)).root)


def _parent_of(pid: int) -> int | None:
    """The parent pid of a live process (Linux /proc), None when it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    return int(re.search(r"^PPid:\s+(\d+)", status, re.M)[1])  # type: ignore[index]


def test_a_failing_run_cleans_up_before_it_lets_another_run_in(case, tmp_path):
    """A --strict run that fails removes its work while it still holds the lock: a second run that
    tries meanwhile is refused, so nothing of the second run is deleted under it."""
    from img2tfrecord.conversion.write.publish import OutputLock

    src = tmp_path / "in"
    shutil.copytree(case[0], src)
    (src / "b" / "zz_broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 not a jpeg")
    out = tmp_path / "out"
    slow = ["-e", "trace=unlink,unlinkat,rmdir", "-e", "inject=unlink,unlinkat,rmdir:delay_enter=150000"]
    cmd = [STRACE, "-f", "-qq", "-o", "/dev/null", *slow, sys.executable, "-m", "img2tfrecord"]
    proc = subprocess.Popen(
        [*cmd, "convert", str(src), str(out), *ARGS, "--strict"], stderr=subprocess.PIPE, text=True, env=env()
    )
    ws = workspace(str(out))
    refused, holders, seen_alive = 0, set(), 0
    while proc.poll() is None:
        if os.path.isdir(ws.build):
            lock = OutputLock(ws)
            try:
                lock.acquire()
            except UsageError as e:
                said = re.match(r"another img2tfrecord run \(pid (\d+)\) is writing to ", str(e))
                assert said, str(e)
                holders.add(int(said[1]))
                seen_alive += _parent_of(int(said[1])) == proc.pid  # the run strace started (unless it just ended)
                refused += 1
            else:
                lock.release()
                pytest.fail("another run took the lock while the failing run was still cleaning up")
        time.sleep(0.005)
    _, err = proc.communicate()
    assert proc.returncode == 1 and "--strict" in err, err
    assert refused > 0, "the failing run was never seen at work"
    assert len(holders) == 1 and os.getpid() not in holders and seen_alive > 0, (holders, seen_alive)
    assert not os.path.lexists(ws.root) and not out.exists()


def test_a_ctrl_c_while_the_command_is_imported_is_ours(case, tmp_path):
    """Ctrl-C in the first fraction of a second (here: exactly when Python looks up
    conversion/convert.py, imported by the command): one line of ours and exit 130, not click's
    "Aborted!" and exit 1."""
    import img2tfrecord.conversion.convert as module

    src, _, _ = case
    out = tmp_path / "out"
    at = ["-P", module.__file__, "-e", "trace=%file", "-e", "inject=%file:signal=SIGINT:when=1"]
    res = traced("/dev/null", at, "convert", src, out, *ARGS)
    assert res.returncode == 130, res.stderr
    assert res.stderr.strip() == "interrupted: nothing was written"
    assert not out.exists() and not os.path.lexists(workspace(str(out)).root)


def test_an_output_whose_parent_is_not_writable_is_published_in_place(case, tmp_path):
    """No workspace can be made beside OUTPUT: the lock and the build folder go inside it, and the
    in-place procedure publishes the same bytes. Run without root's DAC capabilities (setpriv)."""
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("setpriv is not installed")
    src, new, _ = case
    parent = tmp_path / "ro"
    out = parent / "out"
    out.mkdir(parents=True)
    parent.chmod(0o555)
    try:
        drop = [setpriv, "--bounding-set", "-dac_override,-dac_read_search", "--inh-caps", "-all", "--"]
        cmd = [*drop, sys.executable, "-m", "img2tfrecord", "convert", str(src), str(out), *ARGS]
        res = subprocess.run(cmd, capture_output=True, text=True, env=env(), timeout=120)
        assert res.returncode == 0, res.stderr
        assert visible(out) == new
        assert sorted(p.name for p in out.iterdir() if p.name.startswith(".")) == []
    finally:
        parent.chmod(0o755)
