"""What convert and inspect print (issue 21, items 5, 6, 13, 14): one line per message, names
escaped the same way everywhere, words that fit the numbers. In-process (CliRunner) unless the
terminal itself is what is tested (test_cli_process.py)."""

from __future__ import annotations

import json

from helpers import make_dataset

ODD = "odd\n\x1b[2J\u202ename"  # a newline, a terminal escape (clear screen), a bidi override


def test_skip_messages_escape_control_characters_as_inspect_does(cli, tmp_path):
    files = make_dataset(tmp_path / "in", {"a": 3})
    good = files["a"][1].read_bytes()  # a JPEG
    files["a"][1].rename(tmp_path / "in" / "a" / f"{ODD}.jpg")
    (tmp_path / "in" / "a" / f"{ODD}_broken.jpg").write_bytes(good[:200])
    out = tmp_path / "out"
    res = cli("convert", tmp_path / "in", out)
    assert res.exit_code == 0, res.output
    shown = "odd\\n\\x1b[2J\\u202ename"
    lines = res.stderr.splitlines()
    assert lines[0].startswith(f"skipped: a/{shown}_broken.jpg: JPEG: corrupt or truncated"), lines
    assert len(lines) == 2 and lines[1].startswith("Wrote 3 images")
    assert not any(c in res.stderr for c in "\x1b\u202e")
    manifest = json.loads((out / "dataset.json").read_text())
    assert [s["path"] for s in manifest["skipped"]] == [f"a/{ODD}_broken.jpg"]  # the real name
    res = cli("inspect", out, "-n", "10")
    assert f"a/{shown}.jpg" in res.stdout and "\x1b" not in res.stdout  # the same form
    # error lines too: a --strict failure names the file
    res = cli("convert", tmp_path / "in", tmp_path / "strict", "--strict")
    assert res.exit_code == 1 and res.stderr.count("\n") == 2, res.stderr
    assert res.stderr.splitlines()[1].startswith(f"error: --strict: a/{shown}_broken.jpg: JPEG: ")
