"""The CI contract: with --json, convert, update, compact, inspect and report print exactly one JSON object
on stdout on every exit (0, 1, 2, 130), `ok` and `exit_code` first, and on failure `error: {kind,
message}` with what the run learnt. Also --strict naming every unusable image, and compact of a
compact dataset doing nothing.

In-process (the real CLI through click's CliRunner); Ctrl-C is a KeyboardInterrupt raised at a
real point of the run (the engine starting, a shard being read); test_cli_process.py sends a real
SIGINT to a real process.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from helpers import make_dataset, natural_image, save


def answer(res: Any, code: int) -> dict[str, Any]:
    """The one JSON object on stdout (json.loads refuses a second one, or none), for exit `code`."""
    assert res.exit_code == code, (res.exit_code, res.stdout, res.stderr)
    data = json.loads(res.stdout)
    assert isinstance(data, dict) and list(data)[:2] == ["ok", "exit_code"], res.stdout[:300]
    assert data["ok"] is (code == 0) and data["exit_code"] == code
    if code:
        assert set(data["error"]) == {"kind", "message"} and data["error"]["message"], data["error"]
        assert data["error"]["message"] in res.stderr  # the line stderr says, word for word
        assert isinstance(data["warnings"], list)
    else:
        assert "error" not in data
    return data


def broken(path: Path, n: int, like: Path) -> list[str]:
    """`n` truncated JPEGs in `path` (named broken_i.jpg), made from the JPEG `like`."""
    data = like.read_bytes()[:300]
    for i in range(n):
        (path / f"broken_{i}.jpg").write_bytes(data)
    return [f"{path.name}/broken_{i}.jpg" for i in range(n)]


@pytest.fixture
def dataset(cli, tmp_path) -> tuple[Path, Path]:
    src, out = tmp_path / "in", tmp_path / "out"
    make_dataset(src, {"cat": 6, "dog": 6})
    assert cli("convert", src, out, "--shards", "2").exit_code == 0
    return src, out


def interrupt(monkeypatch: pytest.MonkeyPatch, target: str) -> None:
    """Ctrl-C at `target` (module.attribute): the KeyboardInterrupt Python raises there."""

    def ctrl_c(*args: Any, **kw: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(target, ctrl_c)


# ---- convert ----


def test_convert_answers_on_every_exit(cli, tmp_path, monkeypatch, dataset):
    src, out = dataset
    ok = answer(cli("convert", src, tmp_path / "ok", "--shards", "2", "--json"), 0)
    assert ok["records"] == 12 and ok["splits"]["train"]["shards"] == 2
    # 2: the library's usage errors and click's own
    for args, said in [
        (["convert", tmp_path / "nope", tmp_path / "o", "--json"], "does not exist"),
        (["convert", src, "--json"], "Missing argument 'OUTPUT_DIR'"),
        (["convert", src, tmp_path / "o", "--shards", "0", "--json"], "bad --shards 0"),
        (["convert", src, tmp_path / "o", "--workers", "0", "--json"], "'--workers': 0 is not in the range"),
        (["convert", src, tmp_path / "o", "--json", "--encoding", "webp"], "'--encoding'"),
        (["convert", src, out, "--json"], "holds a dataset"),
    ]:
        error = answer(cli(*args), 2)["error"]
        assert error["kind"] == "usage" and said in error["message"], error
    # 130: Ctrl-C as the engine starts; what is known comes along
    interrupt(monkeypatch, "img2tfrecord.conversion.write.engines.local.LocalEngine.run")
    data = answer(cli("convert", src, tmp_path / "int", "--shards", "2", "--json"), 130)
    assert data["error"]["kind"] == "interrupted" and "--resume" in data["error"]["message"]
    assert (data["shards_finished"], data["shards_total"], data["published"]) == (0, 2, False)


def test_strict_names_every_unusable_image_and_publishes_nothing(cli, tmp_path):
    src = tmp_path / "in"
    files = make_dataset(src, {"cat": 6, "dog": 6})
    bad = broken(src / "dog", 3, next(p for p in files["dog"] if p.suffix == ".jpg"))
    out = tmp_path / "out"
    res = cli("convert", src, out, "--strict", "--shards", "2", "--workers", "2", "--json")
    data = answer(res, 1)
    assert data["error"]["kind"] == "unusable_images"
    assert [s["path"] for s in data["skipped"]] == bad and all(s["reason"] for s in data["skipped"])
    lines = res.stderr.splitlines()
    assert sorted(line.split(": ")[1] for line in lines if line.startswith("skipped: ")) == bad  # each, as found
    assert lines[-1] == (
        f"error: --strict: 3 unusable images (each is listed above as skipped): {', '.join(bad)}; nothing was published"
    )
    assert not out.exists()  # nothing published, nothing left
    # Python: the same, with every skip on the exception
    import img2tfrecord
    from img2tfrecord.errors import UnusableImages

    with pytest.raises(UnusableImages) as e:
        img2tfrecord.convert(src, out, strict=True, shards=2)
    assert [s["path"] for s in e.value.skipped] == bad and "e.skipped" not in str(e.value)
    assert "strict=True: 3 unusable images (each is in the exception's .skipped)" in str(e.value)


# ---- update ----


def test_update_answers_on_every_exit(cli, tmp_path, monkeypatch, dataset):
    src, out = dataset
    assert answer(cli("update", src, out, "--json"), 0)["up_to_date"] is True
    for args, said in [
        (["update", src, tmp_path / "none", "--json"], "holds no dataset"),
        (["update", src, "--json"], "Missing argument 'OUTPUT_DIR'"),
        (["update", src, out, "--seed", "7", "--json"], "--seed"),
    ]:
        error = answer(cli(*args), 2)["error"]
        assert error["kind"] == "usage" and said in error["message"], error
    # 1: --strict with new unusable images: every one named, the dataset untouched
    before = (out / "dataset.json").read_bytes()
    bad = broken(src / "cat", 3, next((src / "cat").glob("*.jpg")))
    data = answer(cli("update", src, out, "--strict", "--json"), 1)
    assert data["error"]["kind"] == "unusable_images" and [s["path"] for s in data["skipped"]] == bad
    assert (out / "dataset.json").read_bytes() == before
    for name in bad:
        (src / name).unlink()
    # 130: Ctrl-C as the new images' engine starts
    save(natural_image(40, 30, 99), src / "cat" / "new.png")
    interrupt(monkeypatch, "img2tfrecord.conversion.write.engines.local.LocalEngine.run")
    data = answer(cli("update", src, out, "--json"), 130)
    assert data["error"]["kind"] == "interrupted" and (out / "dataset.json").read_bytes() == before


# ---- compact ----


@pytest.fixture
def updated(cli, tmp_path) -> Path:
    """A dataset an update appended a shard to: not in a fresh conversion's layout."""
    src, out = tmp_path / "in", tmp_path / "out"
    make_dataset(src, {"cat": 8, "dog": 8})
    assert cli("convert", src, out, "--shards", "4").exit_code == 0
    make_dataset(tmp_path / "more", {"eel": 4}, seed=5)
    shutil.copytree(tmp_path / "more" / "eel", src / "eel")
    res = cli("update", src, out, "--json")
    assert json.loads(res.stdout)["shards_new"] >= 1, res.output
    return out


def test_compact_answers_on_every_exit(cli, tmp_path, monkeypatch, updated):
    out = updated
    for args, said in [
        (["compact", tmp_path / "none", "--json"], "holds no dataset"),
        (["compact", "--json"], "Missing argument 'OUTPUT_DIR'"),
        (["compact", out, "--bogus", "--json"], "No such option '--bogus'"),
    ]:
        error = answer(cli(*args), 2)["error"]
        assert error["kind"] == "usage" and said in error["message"], error
    # 130: Ctrl-C while the compacted shards are being written: OUTPUT unchanged
    before = (out / "dataset.json").read_bytes()
    with monkeypatch.context() as m:
        interrupt(m, "img2tfrecord.conversion.versions.compact._build")
        data = answer(cli("compact", out, "--json"), 130)
    assert data["error"] == {"kind": "interrupted", "message": f"interrupted: {out} is unchanged"}
    assert (out / "dataset.json").read_bytes() == before
    data = answer(cli("compact", out, "--json"), 0)
    assert data["compact"] is False and data["version"] == 3
    # 1: a catalog that is not one
    (out / "dataset.catalog").write_bytes(b"not a catalog")
    data = answer(cli("compact", out, "--json"), 1)
    assert data["error"]["kind"] == "data" and "dataset.catalog" in data["error"]["message"]


def test_compact_of_a_compact_dataset_does_nothing(cli, tmp_path, updated):
    out = updated

    def state() -> dict[str, tuple[int, int, int]]:
        return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns, p.stat().st_size) for p in out.parent.rglob("*")}

    res = cli("compact", out)
    assert res.exit_code == 0 and res.stderr.startswith(f"Compacted {out} to version 3: "), res.output
    before = state()
    for args in (["compact", out], ["compact", out, "--dry-run"]):
        res = cli(*args)
        assert res.exit_code == 0 and res.stdout == f"{out} is already compact (version 3, 4 shards): nothing to do\n"
    assert state() == before  # nothing written, nothing renamed, no workspace left
    assert json.loads((out / "dataset.json").read_text())["version"] == 3
    res = cli("compact", out, "--quiet")
    assert res.exit_code == 0 and res.output == ""
    data = answer(cli("compact", out, "--json"), 0)
    assert (data["compact"], data["version"], data["bytes_written"]) == (True, 3, 0)
    # a fresh conversion is compact too
    fresh = tmp_path / "fresh"
    assert cli("convert", tmp_path / "in", fresh, "--shards", "3", "-q").exit_code == 0
    res = cli("compact", fresh)
    assert res.exit_code == 0 and "is already compact (version 1, 3 shards)" in res.stdout


# ---- inspect ----


def test_inspect_answers_on_every_exit(cli, tmp_path, monkeypatch, dataset):
    _, out = dataset
    data = answer(cli("inspect", out, "--json"), 0)
    assert data["total"]["records"] == 12
    for args, said in [
        (["inspect", tmp_path / "none", "--json"], "no such file, directory or shard prefix"),
        (["inspect", "--json"], "Missing argument 'PATH...'"),
        (["inspect", out, "--json", "--all"], "--all only goes with --extract DIR"),
    ]:
        error = answer(cli(*args), 2)["error"]
        assert error["kind"] == "usage" and said in error["message"], error
    # 1: a damaged shard; the report (its problems) is the answer's body
    shard = sorted(out.glob("train-*"))[0]
    raw = bytearray(shard.read_bytes())
    raw[200] ^= 0xFF
    shard.write_bytes(bytes(raw))
    data = answer(cli("inspect", out, "--verify", "--json"), 1)
    assert data["error"] == {"kind": "problems", "message": f"{len(data['problems'])} problems found"}
    assert data["problems"][0]["file"] == str(shard) and data["problems"][0]["record"] == 0
    # 130: Ctrl-C while a shard is read
    interrupt(monkeypatch, "img2tfrecord.inspection.scan._scan_file")
    data = answer(cli("inspect", out, "--json"), 130)
    assert data["error"] == {"kind": "interrupted", "message": "interrupted: nothing was checked to the end"}


def test_help_stays_text_and_a_command_run_alone_answers_too(cli, tmp_path):
    """--help asks for text: it is not a JSON answer. A command run on its own (not through the
    group: embedders, tests) answers as well."""
    res = cli("convert", "--help", "--json")
    assert res.exit_code == 0 and res.stdout.startswith("Usage: ")
    from click.testing import CliRunner

    from img2tfrecord.cli.update import compact_command

    res = CliRunner().invoke(compact_command, [str(tmp_path / "none"), "--json"])
    assert answer(res, 2)["error"]["kind"] == "usage"


# ---- report ----


def test_report_answers_on_every_exit(cli, tmp_path, monkeypatch, dataset):
    _, out = dataset
    page = tmp_path / "r.html"
    data = answer(cli("report", out, "-o", page, "-n", "1", "--json"), 0)
    assert data["path"] == str(page) and data["bytes"] == page.stat().st_size
    assert (data["records"], data["classes"], data["thumbnails"], data["flagged"]) == (12, 2, 2, 0)
    for args, said in [
        (["report", tmp_path / "none", "-o", page, "--json"], "no dataset.json"),
        (["report", "--json"], "Missing argument 'OUT'"),
        (["report", out, "-o", out / "r.html", "--json"], "is inside the dataset folder"),
        (["report", out, "-o", page, "-n", "-1", "--json"], "'-n' / '--per-class': -1 is not in the range"),
    ]:
        error = answer(cli(*args), 2)["error"]
        assert error["kind"] == "usage" and said in error["message"], error
    interrupt(monkeypatch, "img2tfrecord.inspection.report.facts.gather")
    data = answer(cli("report", out, "-o", page, "--json"), 130)
    assert data["error"]["kind"] == "interrupted"


@pytest.mark.parametrize("command", ["report", "inspect", "update"])
def test_json_before_the_command_name_is_the_commands(cli, tmp_path, dataset, command):
    """`img2tfrecord --json CMD ...` answers as `img2tfrecord CMD --json ...` does, on success and on failure."""
    src, out = dataset
    where = {"report": [out, "-o", tmp_path / "r.html"], "inspect": [out], "update": [src, out, "--dry-run"]}
    assert answer(cli("--json", command, *where[command]), 0)["ok"] is True
    error = answer(cli("--json", command, tmp_path / "none", *where[command][1:]), 2)["error"]
    assert error["kind"] == "usage", error


@pytest.mark.parametrize("command", ["report", "inspect"])
def test_a_bug_still_answers_before_its_traceback(tmp_path, monkeypatch, dataset, command):
    """An unexpected internal error (a bug: here a RuntimeError where the command does its work) is
    not caught as if it were expected: it reaches Python, which prints its traceback, and the one
    JSON answer is printed on the way out, exit 1, kind `internal`."""
    from click.testing import CliRunner

    from img2tfrecord.cli import main

    def bug(*args: Any, **kw: Any) -> None:
        raise RuntimeError("a bug")

    _, out = dataset
    target = {
        "report": "img2tfrecord.inspection.report.facts.gather",
        "inspect": "img2tfrecord.inspection.scan._read_all",
    }
    monkeypatch.setattr(target[command], bug)
    res = CliRunner().invoke(main, [command, str(out), "--json"])
    assert isinstance(res.exception, RuntimeError) and str(res.exception) == "a bug"
    data = json.loads(res.stdout)
    assert data == {
        "ok": False,
        "exit_code": 1,
        "error": {"kind": "internal", "message": "RuntimeError: a bug"},
        "warnings": [],
    }


def test_a_bugs_answer_comes_before_its_traceback_in_a_real_process(tmp_path, dataset):
    """The same in a process of its own, stdout and stderr into one pipe: the object is flushed
    first, Python's traceback follows it."""
    import subprocess
    import sys

    _, out = dataset
    code = (
        "import sys, img2tfrecord.inspection.report.facts as f\n"
        "def bug(*a, **k): raise RuntimeError('a bug')\n"
        "f.gather = bug\n"
        "from img2tfrecord.cli import main\n"
        "main(['report', sys.argv[1], '-o', sys.argv[2], '--json'], prog_name='img2tfrecord')\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", code, str(out), str(tmp_path / "r.html")],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=300,
    )
    assert res.returncode == 1, res.stdout
    first, rest = res.stdout.split("\n", 1)
    assert json.loads(first)["error"] == {"kind": "internal", "message": "RuntimeError: a bug"}
    assert rest.startswith("Traceback (most recent call last):") and rest.rstrip().endswith("RuntimeError: a bug")
    assert not (tmp_path / "r.html").exists()
