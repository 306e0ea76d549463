"""Real `img2tfrecord` processes: what a terminal or a CI script sees (exit codes, stderr, signals).

These pay TensorFlow's start-up (~3 s) per process, so they are few; everything else runs
in-process with CliRunner.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

from helpers import build_dir, journal_file, make_dataset, read_records

ROOT = Path(__file__).resolve().parents[2]
NOISE = (
    "I0000",
    "W0000",
    "E0000",
    "cuda",
    "oneDNN",
    "cpu_feature_guard",
    "absl",
    "WARNING: All log",
    "Traceback",
    "rebuild TensorFlow",
)


def run(*args: str, **kw) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TF_CPP")}  # the tool must quieten TF itself
    return subprocess.run(
        [sys.executable, "-m", "img2tfrecord", *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        **kw,
    )


def start(*args: str) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TF_CPP")}
    return subprocess.Popen(
        [sys.executable, "-m", "img2tfrecord", *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def shard_names(out: Path) -> list[str]:
    return sorted(p.name for p in out.iterdir() if "-of-" in p.name) if out.exists() else []


def digest(out: Path) -> dict[str, str]:
    metadata = ["dataset.json", "labels.txt", "dataset_info.json", "features.json", "image.class.label.labels.txt"]
    return {n: hashlib.sha256((out / n).read_bytes()).hexdigest() for n in shard_names(out) + metadata}


def test_sample_data_conversion_is_quiet_and_scriptable(tmp_path):
    out = tmp_path / "out"
    res = run("convert", ROOT / "sample_data", out, "--shards", "2", "--json")
    assert res.returncode == 0, res.stderr
    summary = json.loads(res.stdout)  # stdout is exactly one JSON object
    assert summary["records"] == 30 and summary["skipped_count"] == 1
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert lines == ["skipped: triangle/triangle_broken.jpg: JPEG: corrupt or truncated: Premature end of JPEG file"]
    assert not any(n in res.stderr for n in NOISE)
    res = run("convert", ROOT / "sample_data", tmp_path / "out2", "--shards", "2")
    assert res.returncode == 0 and res.stdout == ""
    assert res.stderr.splitlines()[-2].startswith("Wrote 30 images") and not any(n in res.stderr for n in NOISE)
    assert res.stderr.splitlines()[-1] == f"See it in a browser: img2tfrecord report {tmp_path / 'out2'}"
    assert digest(out) == digest(tmp_path / "out2")
    # a worker process writes half the shards: still quiet, the skipped file reported once, same bytes
    res = run("convert", ROOT / "sample_data", tmp_path / "out3", "--shards", "2", "--workers", "2", "--json")
    assert res.returncode == 0 and json.loads(res.stdout)["workers"] == 2, res.stderr
    assert [line for line in res.stderr.splitlines() if line.strip()] == lines
    assert digest(out) == digest(tmp_path / "out3")


def test_usage_error_is_one_line_exit_2(tmp_path):
    res = run("convert", tmp_path / "nope", tmp_path / "out")
    assert res.returncode == 2
    assert (
        res.stderr.strip().count("\n") == 0 and res.stderr.startswith("error: input") and "does not exist" in res.stderr
    )
    res = run("convert", ROOT / "sample_data", tmp_path / "out", "--shards", "many")
    assert res.returncode == 2 and "--shards" in res.stderr and "Traceback" not in res.stderr


def test_help_does_not_import_tensorflow():
    code = (
        "import sys, time\nt = time.time()\nfrom img2tfrecord.cli import main\n"
        "for args in (['--help'], ['convert', '--help'], ['inspect', '--help']):\n"
        "    try:\n        main(args)\n    except SystemExit:\n        pass\n"
        "print('tensorflow' in sys.modules, time.time() - t, file=sys.stderr)"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    imported, seconds = res.stderr.split()[-2:]
    assert imported == "False" and float(seconds) < 3.0  # generous: CI machines are noisy; bench measures it
    assert "convert" in res.stdout and "--shards" in res.stdout


@pytest.fixture(scope="module")
def slow_input(tmp_path_factory) -> Path:
    """Enough work (PNG re-encoding, 8 shards) that a run lasts a few seconds after start-up."""
    root = tmp_path_factory.mktemp("slow")
    make_dataset(root, {"a": 120, "b": 120}, size=(220, 160))
    return root


def _wait_for(predicate, proc: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.time() + timeout
    while not predicate():
        assert proc.poll() is None, f"finished before the signal: {proc.communicate()}"
        assert time.time() < deadline, "timed out waiting for the conversion to start"
        time.sleep(0.05)


def _finished_shards(out: Path) -> int:
    try:
        return len(_journaled(journal_file(out)))
    except (OSError, ValueError):
        return 0


def _journaled(journal: Path) -> set[str]:
    """Shards the resume journal lists as finished (its first line is the job's fingerprint)."""
    lines = journal.read_text().splitlines()
    return {json.loads(line)["info"]["file"] for line in lines[1:]}


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_interrupt_publishes_nothing_and_says_how_to_resume(slow_input, tmp_path, sig, code):
    out = tmp_path / "out"
    proc = start("convert", slow_input, out, "--encoding", "png", "--shards", "8", "--workers", "2")
    _wait_for(lambda: _finished_shards(out) >= 1, proc)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err
    assert "interrupted" in err and "--resume" in err and "Traceback" not in err
    assert shard_names(out) == [] and not (out / "dataset.json").exists()
    leftovers = {p.name for p in build_dir(out).iterdir()}
    assert leftovers == _journaled(journal_file(out))  # finished shards only: partial files are gone


def test_resume_after_sigkill_is_byte_identical(slow_input, tmp_path, cli):
    args = ["--encoding", "png", "--shards", "8", "--index"]
    reference = tmp_path / "reference"
    assert cli("convert", slow_input, reference, *args).exit_code == 0
    out = tmp_path / "out"
    proc = start("convert", slow_input, out, *args, "--workers", "2")
    _wait_for(lambda: _finished_shards(out) >= 2, proc)
    proc.kill()
    proc.wait()
    assert shard_names(out) == []  # nothing under a final name after SIGKILL
    done_before = _finished_shards(out)
    res = cli("convert", slow_input, out, *args, "--resume")
    assert res.exit_code == 0, res.output
    assert f"resuming: {done_before} of 8" in res.stderr or f"resuming: {done_before + 1} of 8" in res.stderr
    assert digest(out) == digest(reference)
    assert not build_dir(out).exists() and not journal_file(out).parent.exists()  # the workspace is gone
    assert len(read_records(out)) == 240


def test_resume_refuses_changed_input(slow_input, tmp_path, cli):
    out = tmp_path / "out"
    proc = start("convert", slow_input, out, "--encoding", "png", "--shards", "8", "--workers", "2")
    _wait_for(lambda: _finished_shards(out) >= 1, proc)
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=60)
    res = cli("convert", slow_input, out, "--encoding", "png", "--shards", "8", "--quality", "50", "--resume")
    assert res.exit_code == 2 and "--quality 95 then, 50 now" in res.stderr
    res = cli("convert", slow_input, out, "--encoding", "png", "--shards", "8")
    assert res.exit_code == 2 and "finished shard" in res.stderr  # not thrown away unasked
    res = cli("convert", slow_input, out, "--encoding", "png", "--shards", "8", "--overwrite")
    assert res.exit_code == 0 and "discarding the unfinished run" in res.stderr


def _worker_pids(parent: int) -> list[int]:
    """Spawned worker processes of a run (not multiprocessing's resource tracker)."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = open(f"/proc/{entry}/stat").read()
                cmd = open(f"/proc/{entry}/cmdline", "rb").read()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == parent and b"spawn_main" in cmd:
                pids.append(int(entry))
    return pids


def test_a_killed_worker_fails_the_run_and_resume_finishes_it(slow_input, tmp_path, cli):
    """The kernel's OOM killer takes a worker: exit 1 with a message (no hang), finished shards
    kept, --resume completes the same bytes; and no worker outlives a SIGKILLed run."""
    args = ["--encoding", "png", "--shards", "8"]
    reference = tmp_path / "reference"
    assert cli("convert", slow_input, reference, *args).exit_code == 0
    out = tmp_path / "out"
    proc = start("convert", slow_input, out, *args, "--workers", "2")
    _wait_for(lambda: _finished_shards(out) >= 1 and _worker_pids(proc.pid), proc)
    os.kill(_worker_pids(proc.pid)[0], signal.SIGKILL)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, err
    assert "worker process died" in err and "--resume" in err and "Traceback" not in err
    assert _finished_shards(out) >= 1 and shard_names(out) == []
    res = cli("convert", slow_input, out, *args, "--resume")
    assert res.exit_code == 0, res.output
    assert digest(out) == digest(reference)

    proc = start("convert", slow_input, tmp_path / "killed", *args, "--workers", "2")
    _wait_for(lambda: bool(_worker_pids(proc.pid)), proc)
    workers = _worker_pids(proc.pid)
    proc.kill()
    proc.wait()
    deadline = time.time() + 10
    while any(os.path.exists(f"/proc/{w}") and "Z" not in open(f"/proc/{w}/stat").read().split()[2] for w in workers):
        assert time.time() < deadline, "a worker outlived its run"
        time.sleep(0.1)


def test_library_convert_with_workers_needs_no_main_guard(tmp_path):
    """A plain script calling convert() with worker processes: spawned workers must not re-run it."""
    make_dataset(tmp_path / "in", {"a": 6, "b": 6})
    script = tmp_path / "convert_it.py"
    script.write_text(
        "import img2tfrecord\n"
        f"s = img2tfrecord.convert({str(tmp_path / 'in')!r}, {str(tmp_path / 'out')!r}, shards=2, workers=2)\n"
        "print(s['workers'], s['records'])\n"
    )
    res = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.split() == ["2", "12"]


def run_in_terminal(*args: str, interrupt_when: bytes | None = None, columns: int = 120) -> tuple[int, bytes]:
    """Run `img2tfrecord ARGS` with stdin/stdout/stderr on a pseudo-terminal of 40 rows and
    `columns` (a 0-column one makes tqdm draw nothing) and return its exit code and every byte the
    terminal received. `interrupt_when`: a regex; SIGINT once the output matches it."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    env = {k: v for k, v in os.environ.items() if not k.startswith("TF_CPP") and k not in ("COLUMNS", "LINES")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "img2tfrecord", *map(str, args)], stdin=slave, stdout=slave, stderr=slave, env=env
    )
    os.close(slave)
    out, sent, deadline = b"", False, time.time() + 300
    try:
        while time.time() < deadline:
            if interrupt_when is not None and not sent and re.search(interrupt_when, out):
                proc.send_signal(signal.SIGINT)
                sent = True
            if not select.select([master], [], [], 1)[0]:
                continue
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: every process holding the terminal has ended
                break
            if not chunk:
                break
            out += chunk
    finally:
        os.close(master)
    return proc.wait(timeout=60), out


def test_progress_bar_ends_at_100_percent_on_its_own_line(slow_input, tmp_path):
    """The bar's last frame says 100% and ends its line: the summary starts a line of its own."""
    rc, out = run_in_terminal("convert", slow_input, tmp_path / "out", "--shards", "4")
    assert rc == 0, out[-2000:]
    assert not any(n.encode() in out for n in NOISE)
    bar, summary = out.split(b"Wrote 240 images", 1)
    assert bar.endswith(b"\r\n"), bar[-300:]  # the terminal's "\n"
    last_frame = bar[:-2].rsplit(b"\r", 1)[-1]
    assert last_frame.startswith(b"100%|") and b"| 240/240 [" in last_frame, last_frame
    assert summary.endswith(b"\r\n")  # the summary (wrapped to the terminal), then the report command
    assert summary.split(b"\r\n")[-2].startswith(b"See it in a browser: img2tfrecord report ")


def test_the_summary_wraps_at_word_boundaries_in_an_80_column_terminal(tmp_path):
    """The terminal broke the one-line summary mid-word ("(122 imag" / "es/s"): in a terminal it
    is wrapped by words to the width, continued lines indented; piped, it stays one line."""
    make_dataset(tmp_path / "in", {"a": 6, "b": 6})
    rc, out = run_in_terminal(
        "convert", tmp_path / "in", tmp_path / "out", "--split", "train=0.5,validation=0.5", columns=80
    )
    assert rc == 0, out[-2000:]
    text = out.decode().split("Wrote ", 1)[1]
    lines = ("Wrote " + text).rstrip("\r\n").split("\r\n")
    assert lines[-1].startswith("See it in a browser: img2tfrecord report /")  # a command: whole, to copy
    assert len(lines) >= 3 and all(len(line) < 80 for line in lines[:-1]), lines
    assert all(line.startswith("  ") for line in lines[1:-1]), lines  # continued lines of the first sentence
    words = " ".join(line.strip() for line in lines[:-1])
    assert re.fullmatch(
        r"Wrote 12 images \(train: 6 in 1 shard, validation: 6 in 1 shard\) of 2 classes to \S+: "
        r"[\d.]+ [KM]B of shards from [\d.]+ [KM]B of source images, in [\d.]+ m?s "
        r"\([\d,]+ images/s( including start-up, [\d,]+ images/s after it)?; [\d.]+ [KMG]?B/s of source images\)\.",
        words,
    ), words
    piped = subprocess.run(
        [sys.executable, "-m", "img2tfrecord", "convert", str(tmp_path / "in"), str(tmp_path / "out2")],
        capture_output=True, text=True, timeout=300, env={**os.environ, "COLUMNS": "80"},
    )  # fmt: skip
    assert piped.returncode == 0 and len(piped.stderr.splitlines()) == 2, piped.stderr


def test_interruption_message_starts_on_its_own_line(slow_input, tmp_path):
    rc, out = run_in_terminal(
        "convert", slow_input, tmp_path / "out", "--encoding", "png", "--shards", "8", "--workers", "2",
        interrupt_when=rb"\| +[1-9]\d*/240 \[",
    )  # fmt: skip
    assert rc == 130, out[-2000:]
    bar, message = out.split(b"interrupted: ", 1)
    assert bar.endswith(b"\r\n") and b"/240 [" in bar.rsplit(b"\r\n", 2)[-2], bar[-300:]
    assert b"--resume" in message and message.count(b"\n") == 1 and b"Traceback" not in out


def test_verify_shows_tensorflow_start_up_as_its_own_step(slow_input, tmp_path, cli):
    """The bar used to sit frozen for ~5 s while the first batch imported TensorFlow: the start-up
    is now said before the bar starts, on the line the bar then draws over."""
    out = tmp_path / "out"
    assert cli("convert", slow_input, out, "--shards", "2").exit_code == 0
    rc, term = run_in_terminal("inspect", out, "--verify")
    assert rc == 0, term[-2000:]
    step = b"verify: starting TensorFlow (a few seconds, once)..."
    assert term.startswith(step), term[:300]
    frames = term[len(step) :].split(str(out).encode(), 1)[0]  # up to the report's first line
    assert frames.startswith(b"\rverify:   0%|") and frames.endswith(b"\r"), frames[-400:]  # then cleared
    assert not any(n.encode() in term for n in NOISE)


def run_in_terminal_with_ctrl_c(*args: str, when: bytes) -> tuple[int, bytes]:
    """`run_in_terminal`, the terminal being the process's controlling one (a session of its own):
    once the output matches `when`, Ctrl-C is typed (\\x03), so the terminal itself echoes ^C where
    the cursor is and sends SIGINT to the process group, workers included, as a user's key does."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    env = {k: v for k, v in os.environ.items() if not k.startswith("TF_CPP")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "img2tfrecord", *map(str, args)],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=env,
        start_new_session=True,
        preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0),
    )
    os.close(slave)
    out, typed, deadline = b"", False, time.time() + 300
    try:
        while time.time() < deadline:
            if not typed and re.search(when, out):
                os.write(master, b"\x03")
                typed = True
            if not select.select([master], [], [], 1)[0]:
                continue
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            out += chunk
    finally:
        os.close(master)
    return proc.wait(timeout=60), out


def test_ctrl_c_leaves_the_bar_as_it_was_and_says_what_is_left(slow_input, tmp_path):
    """After the terminal's ^C the bar is not drawn again (a redraw after the ^C made the line wrap
    drew a second bar below the first): the next thing on screen is the interruption's line."""
    rc, out = run_in_terminal_with_ctrl_c(
        "convert", slow_input, tmp_path / "out", "--encoding", "png", "--shards", "8", "--workers", "2",
        when=rb"\| +[1-9]\d*/240 \[",
    )  # fmt: skip
    assert rc == 130, out[-2000:]
    before, after = out.split(b"^C", 1)
    assert b"/240 [" in before and b"/240 [" not in after, after
    assert re.fullmatch(rb"\r\ninterrupted: nothing was published \(\d of 8 shards finished; run the same command "
                        rb"with --resume to continue\)\r\n", after), after  # fmt: skip


def test_sigint_with_json_answers_one_object(slow_input, tmp_path):
    out = tmp_path / "out"
    proc = start("convert", slow_input, out, "--encoding", "png", "--shards", "8", "--workers", "2", "--json")
    _wait_for(lambda: _finished_shards(out) >= 1, proc)
    proc.send_signal(signal.SIGINT)
    stdout, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    data = json.loads(stdout)  # exactly one object
    assert list(data)[:3] == ["ok", "exit_code", "error"] and (data["ok"], data["exit_code"]) == (False, 130)
    assert data["error"]["kind"] == "interrupted" and data["error"]["message"] in err
    assert 1 <= data["shards_finished"] < data["shards_total"] == 8 and data["published"] is False
