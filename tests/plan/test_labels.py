"""--labels and --file-list as inputs: linear in the number of classes, bounded reads, one-line
usage errors, and class names that labels.txt can always hold (so it passes its own --verify and
reads back, through --labels, as the same classes)."""

from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path

import pytest
from PIL import Image

from helpers import make_dataset
from img2tfrecord.conversion.plan import labels as labels_mod
from img2tfrecord.conversion.plan.job import plan_job
from img2tfrecord.errors import wording

N = 50_000  # more than ImageNet-21k's 21,841 classes


class CountingStr(str):
    """A class name that counts the equality tests made on it: a scan of a list per name (the
    quadratic shape) makes N^2 of them, hashing makes a few per name."""

    eq_calls = 0

    def __eq__(self, other: object) -> bool:
        CountingStr.eq_calls += 1
        return str.__eq__(self, other)

    __hash__ = str.__hash__


LINEAR_SCANS = {"list.count", "list.index", "list.remove"}


def scans_while(fn, *args, **kwargs) -> tuple[object, int]:
    """`fn`'s result and how many linear list scans (count/index/remove) it called: made once per
    name they make the work quadratic, whatever the clock says."""
    calls = 0

    def hook(frame, event, arg):
        nonlocal calls
        if event == "c_call" and getattr(arg, "__qualname__", "") in LINEAR_SCANS:
            calls += 1

    sys.setprofile(hook)
    try:
        out = fn(*args, **kwargs)
    finally:
        sys.setprofile(None)
    return out, calls


def test_fifty_thousand_labels_plan_with_linear_work(tmp_path):
    make_dataset(tmp_path / "in", {"c00007": 2, "c40000": 2}, size=(8, 8))
    names = [f"c{i:05d}" for i in range(N)]
    (tmp_path / "labels.txt").write_text("\n".join(names) + "\n")
    plan, scans = scans_while(
        plan_job, str(tmp_path / "in"), str(tmp_path / "out"), labels=str(tmp_path / "labels.txt")
    )
    assert scans < 10, f"{scans} list scans for {N:,} labels"
    assert plan.classes == names and plan.images == 4
    assert {t.label for s in plan.shards for t in s.tasks} == {7, 40000}
    warnings = [wording(w, cli=True) for w in plan.warnings]  # as the CLI says them (errors.option)
    (missing,) = [w for w in warnings if "of --labels have no images" in w]  # one line, not 49,998
    assert missing.startswith(f"{N - 2:,} classes of --labels have no images ('c00000', 'c00001',")
    CountingStr.eq_calls = 0
    plan = plan_job(str(tmp_path / "in"), str(tmp_path / "out"), labels=[CountingStr(n) for n in names])
    assert plan.classes == names and CountingStr.eq_calls < 5 * N, CountingStr.eq_calls
    (tmp_path / "twice.txt").write_text("\n".join([*names, "c00009", "c00003"]) + "\n")
    with pytest.raises(
        labels_mod.UsageError, match=r'lines 10, 50,001 share the class name "c00009" \(and 1 more name given twice\)'
    ):
        labels_mod.read_labels_file(str(tmp_path / "twice.txt"))


@pytest.mark.parametrize("option", ["--labels", "--file-list"])
def test_an_endless_or_binary_input_stops_after_a_bounded_read(cli, tmp_path, monkeypatch, option):
    make_dataset(tmp_path / "in", {"a": 1}, size=(8, 8))
    res = cli("convert", tmp_path / "in", tmp_path / "out", option, "/dev/zero", "--dry-run")
    assert res.exit_code == 2 and res.stderr.strip().splitlines() == [
        f"error: {'--labels file' if option == '--labels' else '--file-list'} /dev/zero is not a text file (byte 0 is NUL)"
    ]
    # a pipe that never ends, of text: read up to the limit (made small here), then refused
    limit = 1_000_000
    monkeypatch.setattr("img2tfrecord.format.class_names.MAX_LABELS_BYTES", limit)
    monkeypatch.setattr("img2tfrecord.conversion.plan.filelist.MAX_FILE_LIST_BYTES", limit)
    fifo = tmp_path / "endless"
    os.mkfifo(fifo)
    written = 0

    def feed() -> None:
        nonlocal written
        try:
            with open(fifo, "wb") as f:
                while written < 64 * limit:
                    f.write(b"a/x.jpg,a\n" * 1000)
                    written += 10_000
        except BrokenPipeError:
            pass

    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    res = cli("convert", tmp_path / "in", tmp_path / "out", option, fifo, "--dry-run")
    writer.join(10)
    assert res.exit_code == 2, res.output
    assert res.stderr.strip().endswith(f"{fifo} is larger than 1.0 MB: not a list this tool can hold")
    assert written < 4 * limit  # the reader stopped; the writer was told so by a broken pipe


def test_a_labels_file_that_is_not_utf8_is_a_one_line_usage_error(cli, tmp_path):
    make_dataset(tmp_path / "in", {"a": 1}, size=(8, 8))
    (tmp_path / "labels.txt").write_bytes(b"a\ncaf\xe9\n")
    res = cli("convert", tmp_path / "in", tmp_path / "out", "--labels", tmp_path / "labels.txt")
    assert res.exit_code == 2
    assert res.stderr.strip().splitlines() == [
        f"error: --labels file {tmp_path / 'labels.txt'} is not UTF-8 text (byte 5)"
    ]


def test_class_names_that_labels_txt_cannot_hold_are_refused_everywhere(cli, tmp_path):
    """A folder, a --file-list label or a --labels line with a line break or a control character:
    one line naming it (escaped as dataset.json would), exit 2, nothing written."""
    src = tmp_path / "in"
    make_dataset(src, {"ok": 1, "multi\nline": 1}, size=(8, 8))
    res = cli("convert", src, tmp_path / "out")
    assert res.exit_code == 2 and not (tmp_path / "out").exists()
    assert res.stderr.strip().splitlines() == [
        f'error: the class folder "{src}/multi\\nline" holds a line break (U+000A), which labels.txt '
        "(one name per line) cannot hold: rename it"
    ]
    (tmp_path / "labels.txt").write_text("ok\n")  # left out by --labels: no matter
    assert cli("convert", src, tmp_path / "out", "--labels", tmp_path / "labels.txt").exit_code == 0
    (tmp_path / "list.csv").write_text('ok/img_000.png,"bell\x07"\n')
    res = cli("convert", src, tmp_path / "out2", "--file-list", tmp_path / "list.csv")
    assert res.exit_code == 2 and '"bell\\u0007" holds a control character (U+0007)' in res.stderr
    (tmp_path / "labels2.txt").write_text("ok\nform\x0cfeed\n")
    res = cli("convert", src, tmp_path / "out3", "--labels", tmp_path / "labels2.txt")
    assert res.exit_code == 2 and 'line 2: the class name "form\\ffeed" holds a line break (U+000C)' in res.stderr


def test_labels_txt_of_unusual_names_passes_verify_and_reads_back_as_the_same_classes(cli, tmp_path):
    src = tmp_path / "in"
    names = ["a b", "日本の猫", "x;y,z", "ünï cödé", "back\\slash"]
    make_dataset(src, dict.fromkeys(names, 1), size=(8, 8))
    assert cli("convert", src, tmp_path / "out").exit_code == 0
    classes = json.loads((tmp_path / "out" / "dataset.json").read_text())["classes"]
    assert classes == sorted(names)
    res = cli("inspect", tmp_path / "out", "--verify")
    assert res.exit_code == 0, res.output
    res = cli("convert", src, tmp_path / "again", "--labels", tmp_path / "out" / "labels.txt")
    assert res.exit_code == 0, res.output
    assert json.loads((tmp_path / "again" / "dataset.json").read_text())["classes"] == classes
    assert Path(tmp_path / "again" / "labels.txt").read_bytes() == Path(tmp_path / "out" / "labels.txt").read_bytes()


def test_class_folders_with_white_space_around_them_round_trip_through_labels_txt(cli, tmp_path):
    """Folders " cat " and "dog\\u00a0" (a no-break space): labels.txt holds them as they are, and `convert --labels
    OUT/labels.txt` and `update --labels` read them back as the same classes (lines were stripped,
    so " cat " became "cat", a class with no folder, and its images were left out). A --labels
    name that differs from a folder only in that white space is refused in one line, both ways."""
    src = tmp_path / "in"
    make_dataset(src, {" cat ": 2, "dog\u00a0": 2, "owl": 1}, size=(8, 8))
    assert cli("convert", src, tmp_path / "out").exit_code == 0
    labels_txt = tmp_path / "out" / "labels.txt"
    assert labels_txt.read_text(encoding="utf-8") == " cat \ndog\u00a0\nowl\n"
    res = cli("convert", src, tmp_path / "again", "--labels", labels_txt)
    assert res.exit_code == 0 and "warning" not in res.stderr, res.output
    manifest = json.loads((tmp_path / "again" / "dataset.json").read_text())
    assert manifest["classes"] == [" cat ", "dog\u00a0", "owl"]
    assert manifest["splits"]["train"]["class_counts"] == {" cat ": 2, "dog\u00a0": 2, "owl": 1}
    assert (tmp_path / "again" / "labels.txt").read_bytes() == labels_txt.read_bytes()

    Image.new("RGB", (9, 9), (1, 2, 3)).save(src / " cat " / "new.png")
    res = cli("update", src, tmp_path / "again", "--labels", tmp_path / "again" / "labels.txt")
    assert res.exit_code == 0, res.output
    manifest = json.loads((tmp_path / "again" / "dataset.json").read_text())
    assert manifest["classes"] == [" cat ", "dog\u00a0", "owl"]
    assert manifest["splits"]["train"]["class_counts"] == {" cat ": 3, "dog\u00a0": 2, "owl": 1}

    for listed, folder in (("cat \ndog\u00a0\nowl\n", '" cat "'), (" cat \ndog\nowl\n", '"dog\u00a0"')):
        (tmp_path / "typed.txt").write_text(listed, encoding="utf-8")
        res = cli("convert", src, tmp_path / "typed", "--labels", tmp_path / "typed.txt")
        assert res.exit_code == 2 and not (tmp_path / "typed").exists()
        [line] = res.stderr.strip().splitlines()
        assert line.startswith("error: --labels names the class ") and f", the input has {folder}: " in line, line


def test_an_updated_class_list_keeps_every_label_and_appends_new_classes(tmp_path):
    from img2tfrecord.conversion.plan.labels import updated_class_list

    before = ["dog", "cat", "owl"]  # a --labels order, not sorted: kept as it is
    up = updated_class_list(before, {"cat", "owl", "zebra", "ant"})
    assert up.classes == ["dog", "cat", "owl", "ant", "zebra"] and up.new == ["ant", "zebra"] and up.vanished == ["dog"]
    assert updated_class_list(before, before) == (before, [], [])
    make_dataset(tmp_path / "in", {"cat": 1, "owl": 1, "zebra": 1, "ant": 1}, size=(8, 8))
    plan = plan_job(str(tmp_path / "in"), str(tmp_path / "out"), labels=up.classes)
    assert {t.text: t.label for s in plan.shards for t in s.tasks} == {"cat": 1, "owl": 2, "ant": 3, "zebra": 4}
