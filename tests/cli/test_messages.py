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
    assert len(lines) == 3 and lines[1].startswith("Wrote 3 images")
    assert lines[2] == f"See it in a browser: img2tfrecord report {out}"
    assert not any(c in res.stderr for c in "\x1b\u202e")
    manifest = json.loads((out / "dataset.json").read_text())
    assert [s["path"] for s in manifest["skipped"]] == [f"a/{ODD}_broken.jpg"]  # the real name
    res = cli("inspect", out, "-n", "10")
    assert f"a/{shown}.jpg" in res.stdout and "\x1b" not in res.stdout  # the same form
    # error lines too: a --strict failure names the file
    res = cli("convert", tmp_path / "in", tmp_path / "strict", "--strict")
    assert res.exit_code == 1 and res.stderr.count("\n") == 2, res.stderr
    assert res.stderr.splitlines()[1].startswith(f"error: --strict: a/{shown}_broken.jpg: JPEG: ")


def test_loose_images_are_not_counted_again_as_non_image_files(cli, tmp_path):
    files = make_dataset(tmp_path / "in", {"a": 3, "b": 2})
    (tmp_path / "in" / "loose.jpg").write_bytes(files["a"][1].read_bytes())
    (tmp_path / "in" / "loose2.png").write_bytes(files["a"][0].read_bytes())
    (tmp_path / "in" / "notes.txt").write_text("not an image")
    out = tmp_path / "out"
    res = cli("convert", tmp_path / "in", out)
    assert res.exit_code == 0, res.output
    assert f"warning: 2 images lie at the top of {tmp_path / 'in'}, outside any class folder (e.g. loose" in res.stderr
    assert res.stderr.splitlines()[-2].endswith(" Ignored 1 non-image file.")
    assert json.loads((out / "dataset.json").read_text())["ignored_files"] == 1


def test_usage_errors_are_one_line_click_s_own_too(cli, tmp_path):
    make_dataset(tmp_path / "flat" / "x", {"": 2})
    for p in (tmp_path / "flat" / "x").rglob("*.*"):
        p.rename(tmp_path / "flat" / p.name)  # images but no class folders
    res = cli("convert", f"{tmp_path / 'flat'}/", tmp_path / "out")
    assert res.exit_code == 2 and f"expected {tmp_path / 'flat'}/CLASS_NAME/image.jpg (" in res.stderr, res.stderr
    (tmp_path / "a.txt").write_text("x")
    cases = {
        (
            "convert",
            tmp_path / "a.txt",
            tmp_path / "out",
        ): f"error: input {tmp_path / 'a.txt'} is a file, not a folder: ",
        ("convert", tmp_path / "flat", tmp_path / "out", "--quality", "500"): "error: Invalid value for '--quality': ",
        (
            "convert",
            tmp_path / "flat",
            tmp_path / "out",
            "--shard",
            "4",
        ): "error: No such option '--shard' (did you mean one of: '--seed', '--shards'?); see '",
        ("convert", tmp_path / "flat"): "error: Missing argument 'OUTPUT_DIR'; see '",
        ("inspect",): "error: Missing argument 'PATH...'; see '",
        ("frob",): "error: No such command 'frob'; see '",
    }
    for args, start in cases.items():
        res = cli(*args)
        assert res.exit_code == 2 and res.stdout == "", (args, res.output)
        assert res.stderr.count("\n") == 1 and res.stderr.startswith(start), (args, res.stderr)
    assert cli().exit_code == 2  # no command at all: the help, as before
    assert "Commands:" in cli().output


def test_counts_read_as_words_range_only_when_it_is_one(cli, tmp_path):
    make_dataset(tmp_path / "in", {"a": 3, "b": 2})
    res = cli("convert", tmp_path / "in", tmp_path / "out", "--dry-run")
    assert "  train: 5 images in 1 shard of 5 images; a=3, b=2" in res.stdout, res.stdout
    res = cli("convert", tmp_path / "in", tmp_path / "out", "--dry-run", "--shards", "2")
    assert "  train: 5 images in 2 shards of 2-3 images; " in res.stdout, res.stdout
    assert cli("convert", tmp_path / "in", tmp_path / "out").exit_code == 0
    res = cli("inspect", tmp_path / "out", "-n", "1")
    assert "  first record of " in res.stdout and "first 1 records" not in res.stdout
    assert "  first 2 records of " in cli("inspect", tmp_path / "out", "-n", "2").stdout


def test_dedupe_off_saving_is_the_same_figure_in_help_and_docs(cli):
    import re
    from pathlib import Path

    help_text = " ".join(cli("convert", "--help").stdout.split())
    saved = re.search(r"saves (\d+) bytes of memory per image during the run, ~(\d+) at its end", help_text)
    assert saved, help_text
    docs = " ".join((Path(__file__).parents[2] / "docs" / "converting.md").read_text().split())
    assert f"({saved[1]} bytes of memory per image held for the whole run, ~{saved[2]} at its end" in docs


# ---- item 13: the library speaks of parameters, the CLI of options ----


def test_an_unknown_keyword_names_the_parameter_and_the_valid_ones(tmp_path):
    import pytest

    import img2tfrecord
    from img2tfrecord.errors import UsageError

    make_dataset(tmp_path / "in", {"a": 2})
    with pytest.raises(TypeError) as e:
        img2tfrecord.convert(tmp_path / "in", tmp_path / "out", shard=4)
    message = str(e.value)
    assert message.startswith("convert() got an unexpected keyword argument 'shard' (did you mean 'shards'?); ")
    assert all(p in message for p in ("overwrite", "split", "shards", "dedupe")) and "plan_job" not in message
    assert isinstance(e.value, UsageError) and not (tmp_path / "out").exists()


def test_python_callers_read_parameters_and_the_cli_reads_options(cli, tmp_path):
    import pytest

    import img2tfrecord
    from img2tfrecord.errors import DataError, UsageError

    files = make_dataset(tmp_path / "in", {"a": 4, "b": 4})
    (tmp_path / "in" / "b" / "copy.png").write_bytes(files["a"][0].read_bytes())  # a duplicate: a warning
    src, out = tmp_path / "in", tmp_path / "out"
    events: list[str] = []
    summary = img2tfrecord.convert(src, out, on_event=lambda kind, msg: events.append(msg))
    assert "(dedupe='drop' keeps one copy)" in events[-1] and "--" not in events[-1]
    assert summary["warnings"] == events

    cases = [  # (Python keywords, CLI arguments, what Python reads, what the CLI reads)
        ({}, [], "call update(", "run: img2tfrecord update "),
        ({}, [], "to replace it, add overwrite=True", "to replace it, add --overwrite"),
        ({"overwrite": True, "encoding": "webp"}, None, "bad encoding='webp': choose one of", None),
        (
            {"overwrite": True, "split": "train=0.5,validation=0.6"},
            ["--overwrite", "--split", "train=0.5,validation=0.6"],
            "bad split='train=0.5,validation=0.6': the fractions add up to 1.1, not 1",
            "bad --split train=0.5,validation=0.6: the fractions add up to 1.1, not 1",
        ),
        (
            {"overwrite": True, "index": True, "compression": "gzip"},
            ["--overwrite", "--index", "--compression", "gzip"],
            "index=True describes uncompressed shards (DALI cannot read compressed TFRecords): drop compression or index",
            "--index describes uncompressed shards (DALI cannot read compressed TFRecords): drop --compression or --index",
        ),
        (
            {"overwrite": True, "resize": "big"},
            ["--overwrite", "--resize", "big"],
            "bad resize='big': ",
            "bad --resize big: ",
        ),
    ]
    for keywords, args, python, shown in cases:
        with pytest.raises(UsageError) as e:
            img2tfrecord.convert(src, out, **keywords)
        assert python in str(e.value) and "--" not in str(e.value), str(e.value)
        if args is not None:
            res = cli("convert", src, out, *args)
            assert res.exit_code == 2 and shown in res.stderr, res.stderr
    plan = img2tfrecord.convert(src, out, dry_run=True)
    assert plan["refused"].endswith(f"call update({str(src)!r}, {str(out)!r}); to replace it, add overwrite=True")
    res = cli("convert", src, out, "--dry-run", "--json")
    assert json.loads(res.stdout)["refused"].endswith(
        f"run: img2tfrecord update {src} {out}; to replace it, add --overwrite"
    )

    # an error raised in a worker process is worded where it is shown
    (src / "a" / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 truncated")
    with pytest.raises(DataError, match=r"^strict=True: a/broken\.jpg: "):
        img2tfrecord.convert(src, tmp_path / "strict", strict=True, shards=2, workers=2)
    res = cli("convert", src, tmp_path / "strict", "--strict", "--shards", "2", "--workers", "2")
    assert res.exit_code == 1 and "error: --strict: a/broken.jpg: " in res.stderr


def test_update_and_compact_speak_of_options_and_show_sizes_that_read(cli, tmp_path):
    """update's messages reach the terminal worded (`--dedupe drop`, not the raw option marker),
    and its summaries give sizes in a unit that shows a number."""
    files = make_dataset(tmp_path / "in", {"a": 3, "b": 2})
    out = tmp_path / "out"
    assert cli("convert", tmp_path / "in", out).exit_code == 0
    (tmp_path / "in" / "b" / "copy.jpg").write_bytes(files["a"][1].read_bytes())  # a duplicate across classes
    res = cli("update", tmp_path / "in", out)
    assert res.exit_code == 0, res.output
    assert "(--dedupe drop keeps one copy)" in res.stderr and "\\x1d" not in res.stderr, res.stderr
    assert "0.0 MB" not in res.stderr and " KB written" in res.stderr, res.stderr
    assert "1 shard kept as it was (hard links)" in res.stderr, res.stderr  # the one shard of version 1
    res = cli("compact", out)
    assert res.exit_code == 0 and "0.0 MB" not in res.stderr, res.stderr


def test_past_twenty_skipped_files_one_line_says_where_the_rest_are(cli, tmp_path):
    """25 broken files: 20 named a line each, then one line for the rest; --json, dataset.json and
    the summary count all 25. The same for update."""
    files = make_dataset(tmp_path / "in", {"a": 3})
    good = files["a"][0].read_bytes()
    for i in range(25):
        (tmp_path / "in" / "a" / f"broken_{i:02d}.jpg").write_bytes(good[:200])
    out = tmp_path / "out"
    res = cli("convert", tmp_path / "in", out)
    assert res.exit_code == 0, res.output
    skips = [line for line in res.stderr.splitlines() if line.startswith("skipped: ")]
    assert len(skips) == 21 and all(": corrupt or truncated" in line for line in skips[:20])
    assert skips[20] == (
        "skipped: more than 20 files; the rest are not shown here: dataset.json lists every skipped file and why "
        "(so does --json)"
    )
    assert "Skipped 25 unusable images (listed in dataset.json)" in res.stderr
    assert len(json.loads((out / "dataset.json").read_text())["skipped"]) == 25
    res = cli("convert", tmp_path / "in", tmp_path / "out2", "--json")
    assert len(json.loads(res.stdout)["skipped"]) == 25
    for i in range(25):  # fixed: the update converts them; a new batch of broken ones is capped again
        (tmp_path / "in" / "a" / f"broken_{i:02d}.jpg").unlink()
        (tmp_path / "in" / "a" / f"new_{i:02d}.jpg").write_bytes(good[:300])
    res = cli("update", tmp_path / "in", out)
    assert res.exit_code == 0, res.output
    assert len([line for line in res.stderr.splitlines() if line.startswith("skipped: ")]) == 21
