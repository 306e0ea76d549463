"""Faults around the publish of update and compact, injected at exact system calls (strace):
an I/O error while the old version is removed after the switch; a full disk at the lock file;
a summary that cannot be printed. After each, the next ordinary command leaves a dataset that
verifies and equals the old version or the new one.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import img2tfrecord
from helpers import make_dataset, natural_image, save
from img2tfrecord.conversion.write.workspace import workspace

STRACE = shutil.which("strace")
pytestmark = pytest.mark.skipif(STRACE is None, reason="strace is not installed (apt-get install strace)")
CALL = re.compile(r"^(\d+)\s+(\w+)\((.*)")


def env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("TF_CPP")}


def run(options: list[str], *args: str | Path, log: str = "/dev/null") -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "img2tfrecord", *map(str, args)]
    if options:
        cmd = [STRACE, "-f", "-qq", "-o", log, *options, *cmd]
    return subprocess.run(cmd, capture_output=True, text=True, env=env(), timeout=180)


def visible(out: Path) -> dict[str, bytes] | None:
    if not out.is_dir():
        return None
    return {p.name: p.read_bytes() for p in sorted(out.iterdir()) if not p.name.startswith(".")}


def calls(log: Path) -> list[tuple[str, int, str]]:
    """(syscall, its n-th call in its thread, arguments) of a traced run, in order."""
    seen: dict[tuple[str, str], int] = {}
    out = []
    for line in log.read_text().splitlines():
        if m := CALL.match(line):
            key = (m[1], m[2])
            seen[key] = seen.get(key, 0) + 1
            out.append((m[2], seen[key], m[3]))
    return out


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    """v1 (3 shards) of a tree, the tree with one image more, and what update and compact make of it."""
    root = tmp_path_factory.mktemp("pubfaults")
    make_dataset(root / "in", {"a": 6, "b": 6}, size=(16, 12))
    img2tfrecord.convert(str(root / "in"), str(root / "v1"), shards=3, workers=1)
    save(natural_image(18, 14, 7), root / "in" / "a" / "added.jpg", quality=90)
    shutil.copytree(root / "v1", root / "v2")
    img2tfrecord.update(str(root / "in"), str(root / "v2"))
    shutil.copytree(root / "v2", root / "v3")
    img2tfrecord.compact(str(root / "v3"))
    return root


def fresh(case: Path, tmp: Path, version: str) -> Path:
    out = tmp / "out"
    shutil.rmtree(out, ignore_errors=True)
    shutil.rmtree(workspace(str(out)).root, ignore_errors=True)
    shutil.copytree(case / version, out)
    return out


def settles(case: Path, out: Path, cli, want: dict[str, bytes] | None) -> None:
    """The next ordinary command (an update with nothing to do) leaves the dataset complete, verified,
    equal to `want`, and nothing beside it."""
    assert img2tfrecord.update(str(case / "in"), str(out))["up_to_date"]
    assert not os.path.lexists(workspace(str(out)).root), sorted(os.listdir(workspace(str(out)).root))
    r = cli("inspect", out, "--verify")
    assert r.exit_code == 0 and "no problems" in r.output, r.output
    assert visible(out) == want


@pytest.mark.parametrize("command", ["update", "compact"])
def test_an_io_error_removing_the_old_version_is_one_line_exit_0_and_the_next_command_cleans(
    case, tmp_path, cli, command
):
    before, after = ("v1", "v2") if command == "update" else ("v2", "v3")
    args = ["update", case / "in"] if command == "update" else ["compact"]
    out = fresh(case, tmp_path, before)
    log = tmp_path / "clean.log"
    res = run(["-e", "trace=renameat2,rename,unlinkat,unlink,rmdir"], *args, tmp_path / "out", log=str(log))
    assert res.returncode == 0, res.stderr
    traced = calls(log)
    switch = next(i for i, c in enumerate(traced) if "RENAME_EXCHANGE" in c[2])
    root = workspace(str(out)).root
    # after the switch, up to the lock file's removal (a lock file left is harmless: the next run takes it)
    after_switch = [c for c in traced[switch + 1 :] if f'"{root}/lock"' not in c[2] and f'"{root}"' not in c[2]]
    points = list(dict.fromkeys((name, n) for name, n, _ in after_switch))
    assert len(points) >= 5, after_switch  # the old version's move and files, its folder, the marker
    for name, n in points:
        out = fresh(case, tmp_path, before)
        res = run(["-e", f"trace={name}", "-e", f"inject={name}:error=EIO:when={n}"], *args, out)
        spec = f"{name}:{n}"
        assert res.returncode == 0, (spec, res.stderr)
        said = [line for line in res.stderr.splitlines() if line.startswith("warning:")]
        assert "Traceback" not in res.stderr, (spec, res.stderr)
        assert len(said) == 1, (spec, res.stderr)
        assert "removing the old version of" in said[0] and "Input/output error" in said[0], said
        assert "the next update, compact or convert of it" in said[0], said
        assert "journal" not in said[0], said
        assert visible(out) == visible(case / after), spec  # the new version is published
        settles(case, out, cli, visible(case / after))


@pytest.fixture
def full_disk(tmp_path):
    """A small tmpfs (we run as root), filled to its last byte by `fill()`; unmounted after."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {res.stderr.strip()}")

    def fill() -> Path:
        filler = mnt / "filler"
        with open(filler, "wb", buffering=0) as f:
            for size in (65536, 1):
                with contextlib.suppress(OSError):
                    while True:
                        f.write(b"\0" * size)
        return filler

    try:
        yield mnt, fill
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


COMMANDS = {
    "update": lambda case, out: ["update", case / "in", out],
    "compact": lambda case, out: ["compact", out],
    "convert --overwrite": lambda case, out: ["convert", case / "in", out, "--shards", "3", "--overwrite"],
}
RESULT = {"update": "v2", "compact": "v3", "convert --overwrite": None}


def _one_line_exit_1(res: subprocess.CompletedProcess, what: str) -> str:
    assert res.returncode == 1, (what, res.returncode, res.stderr)
    assert "Traceback" not in res.stderr, (what, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), (what, res.stderr)
    return lines[0]


@pytest.mark.parametrize("command", list(COMMANDS))
def test_no_space_at_the_lock_file_is_one_line_exit_1_and_nothing_is_published(case, tmp_path, cli, command):
    """ENOSPC where the lock file gets the run's pid (its ftruncate, its write)."""
    before = "v2" if command == "compact" else "v1"
    for call in ("ftruncate", "write"):
        out = fresh(case, tmp_path, before)
        lock = os.path.join(workspace(str(out)).root, "lock")
        options = ["-P", lock, "-e", f"trace={call}", "-e", f"inject={call}:error=ENOSPC"]
        res = run(options, *COMMANDS[command](case, out))
        line = _one_line_exit_1(res, call)
        assert "No space left on device" in line and "nothing was changed" in line, line
        assert visible(out) == visible(case / before)
        assert not os.path.lexists(workspace(str(out)).root)
    res = run([], *COMMANDS[command](case, out))  # the same command, as if nothing had happened
    assert res.returncode == 0, res.stderr
    if RESULT[command]:
        assert visible(out) == visible(case / RESULT[command])
    settles(case, out, cli, visible(out))


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_full_disk_is_one_line_exit_1_before_anything_is_published(case, tmp_path, cli, full_disk, command):
    mnt, fill = full_disk
    before = "v2" if command == "compact" else "v1"
    out = mnt / "out"
    shutil.copytree(case / before, out)
    filler = fill()
    res = run([], *COMMANDS[command](case, out))
    _one_line_exit_1(res, command)
    assert visible(out) == visible(case / before)
    filler.unlink()  # space again: the same command now publishes
    res = run([], *COMMANDS[command](case, out))
    assert res.returncode == 0, res.stderr
    if RESULT[command]:
        assert visible(out) == visible(case / RESULT[command])
    assert not os.path.lexists(workspace(str(out)).root)
    r = cli("inspect", out, "--verify")
    assert r.exit_code == 0 and "no problems" in r.output, r.output


@pytest.mark.parametrize("stream", ["full disk", "closed pipe"])
def test_a_published_update_exits_0_when_its_summary_cannot_be_printed(case, tmp_path, full_disk, stream):
    mnt, fill = full_disk
    out = fresh(case, tmp_path, "v1")
    cmd = [sys.executable, "-m", "img2tfrecord", "update", str(case / "in"), str(out)]
    if stream == "full disk":
        log = mnt / "LOG"
        log.touch()
        fill()
        with open(log, "ab") as err:
            res = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=err, env=env(), timeout=180)
        code = res.returncode
    else:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env())
        assert proc.stderr is not None
        proc.stderr.close()  # nobody reads: the summary meets EPIPE
        code = proc.wait(timeout=180)
    assert code == 0
    assert visible(out) == visible(case / "v2")


NO_EXCHANGE = ["-e", "inject=renameat2:error=EINVAL"]  # FUSE, NFS, SMB, macOS: two plain renames instead
NEXT = ("update", "update --resume", "compact", "convert --overwrite")


def _next_command(case: Path, out: Path, command: str) -> None:
    """The next ordinary command after a kill, in this process; a refusal is fine if OUTPUT is complete."""
    from img2tfrecord.errors import UsageError

    try:
        if command.startswith("update"):
            img2tfrecord.update(str(case / "in"), str(out), resume=command.endswith("--resume"))
        elif command == "compact":
            img2tfrecord.compact(str(out))
        else:
            img2tfrecord.convert(str(case / "in"), str(out), shards=3, workers=1, overwrite=True)
    except UsageError as e:  # e.g. "holds an unfinished update: add --resume": the dataset is back, whole
        assert "holds no dataset" not in str(e) and "run convert first" not in str(e), str(e)


@pytest.mark.parametrize("command", ["update", "compact"])
def test_a_kill_at_every_rename_without_rename_exchange_is_settled_by_the_next_command(case, tmp_path, cli, command):
    before, after = ("v1", "v2") if command == "update" else ("v2", "v3")
    args = ["update", case / "in"] if command == "update" else ["compact"]
    out = fresh(case, tmp_path, before)
    log = tmp_path / "clean.log"
    res = run(["-e", "trace=renameat2,rename", *NO_EXCHANGE], *args, out, log=str(log))
    assert res.returncode == 0, res.stderr
    assert visible(out) == visible(case / after)
    traced = calls(log)
    switch = next(i for i, c in enumerate(traced) if "RENAME_EXCHANGE" in c[2])
    points = [(name, n) for name, n, _ in traced[switch + 1 :] if name == "rename"]
    assert len(points) == 3, traced[switch:]  # OUTPUT aside, the new one in, the old one to old-1
    versions = [visible(case / v) for v in ("v1", "v2", "v3")]
    for name, n in points:
        for following in NEXT:
            out = fresh(case, tmp_path, before)
            spec = f"inject={name}:signal=SIGKILL:when={n}"
            res = run(["-e", "trace=renameat2,rename", *NO_EXCHANGE, "-e", spec], *args, out)
            assert res.returncode == -9, (spec, res.stderr)
            _next_command(case, out, following)
            seen = visible(out)
            assert seen is not None, (spec, following)
            r = cli("inspect", out, "--verify")
            assert r.exit_code == 0 and "no problems" in r.output, (spec, following, r.output)
            if following.startswith("update"):  # (compact and convert: a new layout of what is there)
                assert seen in versions, (spec, following, sorted(seen))
            if following == "update --resume":
                assert seen == visible(case / "v2") or (command == "compact" and seen == visible(case / "v3"))


@pytest.mark.parametrize("errno_name", ["EPERM", "EOPNOTSUPP"])
def test_update_copies_where_hard_links_fail_and_says_so_once(case, tmp_path, errno_name):
    out = fresh(case, tmp_path, "v1")
    (out / "README.md").write_text("notes kept across versions\n")
    res = run(["-e", "trace=link,linkat", "-e", f"inject=link,linkat:error={errno_name}"], "update", case / "in", out)
    assert res.returncode == 0, res.stderr
    notes = [line for line in res.stderr.splitlines() if "no hard links" in line]
    assert len(notes) == 1 and notes[0].startswith("note: ") and "copied instead" in notes[0], res.stderr
    assert "(copies)" in res.stderr and "(hard links)" not in res.stderr, res.stderr
    want = visible(case / "v2") | {"README.md": b"notes kept across versions\n"}
    assert visible(out) == want
    assert not os.path.lexists(workspace(str(out)).root)


def test_a_dry_run_after_a_kill_between_the_two_renames_says_what_to_run(case, tmp_path, cli):
    out = fresh(case, tmp_path, "v1")
    log = tmp_path / "clean.log"
    res = run(["-e", "trace=renameat2,rename", *NO_EXCHANGE], "update", case / "in", out, log=str(log))
    traced = calls(log)
    switch = next(i for i, c in enumerate(traced) if "RENAME_EXCHANGE" in c[2])
    second = [(name, n) for name, n, _ in traced[switch + 1 :] if name == "rename"][1]
    out = fresh(case, tmp_path, "v1")
    spec = f"inject=rename:signal=SIGKILL:when={second[1]}"
    res = run(["-e", "trace=renameat2,rename", *NO_EXCHANGE, "-e", spec], "update", case / "in", out)
    assert res.returncode == -9 and not out.exists()
    r = cli("update", case / "in", out, "--dry-run")
    assert r.exit_code == 2 and "cut short" in r.output and "run: " in r.output, r.output
    assert not out.exists()  # a dry run writes nothing, the rename back included
    advised = shlex.split(r.output.rsplit("run: ", 1)[1].strip())
    assert advised == ["img2tfrecord", "update", str(case / "in"), str(out), "--resume"], advised
    r = cli(*advised[1:])  # exactly as printed: the old version renamed back, the update finished
    assert r.exit_code == 0, r.output
    assert visible(out) == visible(case / "v2")


def _killed_between_the_two_renames(case: Path, tmp: Path, before: str, *args: str | Path) -> Path:
    """OUTPUT (a copy of `before`) after `img2tfrecord ARGS OUTPUT ...` was killed between the two
    renames of a switch without RENAME_EXCHANGE: OUTPUT renamed aside, the new version not yet in."""
    out = fresh(case, tmp, before)
    log = tmp / "clean.log"
    res = run(["-e", "trace=renameat2,rename", *NO_EXCHANGE], *args, log=str(log))
    assert res.returncode == 0, res.stderr
    traced = calls(log)
    switch = next(i for i, c in enumerate(traced) if "RENAME_EXCHANGE" in c[2])
    second = [(name, n) for name, n, _ in traced[switch + 1 :] if name == "rename"][1]
    out = fresh(case, tmp, before)
    spec = f"inject=rename:signal=SIGKILL:when={second[1]}"
    res = run(["-e", "trace=renameat2,rename", *NO_EXCHANGE, "-e", spec], *args)
    assert res.returncode == -9 and not out.exists(), res.stderr
    return out


@pytest.mark.parametrize("command", ["update", "compact", "convert --overwrite"])
def test_inspect_and_report_after_a_kill_between_the_two_renames_say_what_to_run(case, tmp_path, cli, command):
    """Issue 38, item 22: OUTPUT is missing, its dataset in the workspace: inspect and report say
    where it is and the command that puts it back and finishes the run; that command, run exactly
    as printed, publishes the new version, which verifies."""
    out = tmp_path / "out"
    args: list[str | Path] = {
        "update": ["update", case / "in", out],
        "compact": ["compact", out],
        "convert --overwrite": ["convert", case / "in", out, "--overwrite", "--shards", "2"],
    }[command]
    out = _killed_between_the_two_renames(case, tmp_path, "v2" if command == "compact" else "v1", *args)
    aside = os.path.join(workspace(str(out)).shown_root, "previous")
    said = []
    for argv in (["inspect", out], ["inspect", out, "--json"], ["report", out, "-o", tmp_path / "page.html"]):
        r = cli(*argv)
        assert r.exit_code == 1 and "cut short between its two renames" in r.output, (argv, r.output)
        assert f"the dataset is in {aside}" in r.output, (argv, r.output)
        if "--json" in argv:
            error = json.loads(r.stdout)["error"]["message"]
            assert "Traceback" not in r.output and "run: " in error, r.output
        said.append(r.output.rsplit("run: ", 1)[1].split('"')[0].strip())
    assert len(set(said)) == 1, said
    from img2tfrecord.errors import DataError

    with pytest.raises(DataError, match=f"cut short between its two renames.*the dataset is in {re.escape(aside)}"):
        img2tfrecord.load(str(out))
    assert os.path.isdir(aside) and not (tmp_path / "page.html").exists()  # nothing touched by readers
    advised = shlex.split(said[0])
    assert advised[0] == "img2tfrecord" and advised[1] == command.split()[0], advised
    r = cli(*advised[1:])  # exactly as printed
    assert r.exit_code == 0, (advised, r.output)
    want = {"update": "v2", "compact": "v3"}.get(command)
    if want is not None:
        assert visible(out) == visible(case / want)
    else:  # the convert's new version: two shards of every image
        assert sorted(p.name for p in out.glob("train-*")) == ["train-00000-of-00002", "train-00001-of-00002"]
    r = cli("inspect", out, "--verify", "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["total"]["records"] == 13, r.output
    assert not os.path.lexists(workspace(str(out)).root)
