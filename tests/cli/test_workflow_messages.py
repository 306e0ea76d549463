"""Everyday slips and what the tool says: a file given as INPUT, one class folder given as INPUT, a
dataset in OUTPUT, a mistyped inspect PATH; one unit system for sizes; --resize-mode shrink.

Every command the tool advises here is run as printed and does what it says.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

from helpers import make_dataset, natural_image, read_records, save


def test_a_file_as_input_is_said_to_be_a_file(cli, tmp_path):
    files = make_dataset(tmp_path / "data", {"cat": 2, "dog": 2})
    image = files["cat"][0]
    for given in (str(image), f"{image}/"):  # a shell's completion may add the slash
        res = cli("convert", given, tmp_path / "out")
        assert res.exit_code == 2 and res.stderr == (
            f"error: input {given} is a file, not a folder: give the folder that holds one subfolder per class\n"
        )


def test_one_class_folder_as_input_names_the_images_left_out_and_its_parent(cli, tmp_path):
    data = tmp_path / "data"
    make_dataset(data, {"cat": 5, "dog": 3})
    make_dataset(data / "cat", {"kittens": 2}, seed=3)  # a subfolder: taken as the only class
    res = cli("convert", data / "cat", tmp_path / "out")
    assert res.exit_code == 0, res.output
    warning = next(line for line in res.stderr.splitlines() if line.startswith("warning: "))
    assert warning == (
        f"warning: 5 images lie at the top of {data / 'cat'}, outside any class folder (e.g. img_000.png), "
        f"and are left out: if {data / 'cat'} is itself one class, give its parent folder {data} as INPUT; "
        f"else move them into a class folder {data / 'cat' / 'CLASS_NAME'}/"
    )
    # the advice, as printed: its parent converts every cat
    parent = re.search(r"give its parent folder (.+) as INPUT", warning)[1]
    res = cli("convert", parent, tmp_path / "whole", "--json")
    summary = json.loads(res.stdout)
    assert summary["classes"] == ["cat", "dog"] and summary["records"] == 5 + 2 + 3, res.stderr
    # --strict refuses it: nothing written
    res = cli("convert", data / "cat", tmp_path / "strict", "--strict")
    assert res.exit_code == 1 and not (tmp_path / "strict").exists()
    assert res.stderr.startswith("error: --strict: 5 images lie at the top of ") and "nothing was written" in res.stderr
    # only images, no class folder at all: the same likely fix, in the error
    res = cli("convert", data / "dog", tmp_path / "out2")
    assert res.exit_code == 2 and res.stderr.startswith(
        f"error: no class folders found in {data / 'dog'}, only 3 images: if it is one class, give its parent "
        f"folder {data} as INPUT; expected "
    )


def test_an_output_holding_a_dataset_names_update_and_the_command_runs(cli, tmp_path):
    src, out = tmp_path / "my data", tmp_path / "out"  # a space: the command is quoted for a shell
    make_dataset(src, {"cat": 3, "dog": 3})
    assert cli("convert", src, out).exit_code == 0
    save(natural_image(40, 30, 77), src / "dog" / "new.png")
    res = cli("convert", src, out)
    assert res.exit_code == 2
    line = res.stderr.strip()
    assert line.startswith(f"error: output {out} holds a dataset: to bring it up to date with {src}, run: ")
    assert line.endswith("; to replace it, add --overwrite")
    command = shlex.split(line.split("run: ", 1)[1].split("; to replace it")[0])
    assert command[:2] == ["img2tfrecord", "update"]
    res = cli(*command[1:])
    assert res.exit_code == 0 and res.stderr.startswith(f"Updated {out} to version 2: 7 records"), res.output
    # the other way it names
    assert cli("convert", src, out, "--overwrite").exit_code == 0


def test_sizes_read_the_same_in_convert_and_inspect(cli, tmp_path):
    src, out = tmp_path / "in", tmp_path / "out"
    make_dataset(src, {"cat": 20, "dog": 20}, size=(160, 120))
    res = cli("convert", src, out, "--shards", "1")
    size = re.search(r": ([\d.,]+ [KMG]?B) of shards", res.stderr)[1]
    shard = next(out.glob("train-*"))
    report = cli("inspect", out).stdout
    assert f"{shard}  40 records  {size}  none  ok" in report.splitlines(), report
    assert f"{shard}: 40 records, {size}, compression none" in report
    assert "iB" not in report + res.stderr  # no binary units anywhere
    from img2tfrecord.errors import size_text

    assert size == size_text(shard.stat().st_size) and size.endswith(" KB")


def test_a_mistyped_inspect_path_lists_the_folders_beside_it(cli, tmp_path):
    make_dataset(tmp_path / "data", {"cat": 2})
    assert cli("convert", tmp_path / "data", tmp_path / "out", "-q").exit_code == 0
    res = cli("inspect", tmp_path / "outt")
    assert res.exit_code == 2
    assert (
        res.stderr
        == f"error: {tmp_path / 'outt'}: no such file, directory or shard prefix ({tmp_path} has: out/, data/)\n"
    )
    res = cli("inspect", tmp_path / "out" / "train-0001")
    assert res.stderr.endswith(f"({tmp_path / 'out'} has: train-00000-of-00001)\n"), res.stderr


def _sizes(out: Path) -> dict[str, tuple[int, int]]:
    return {Path(r["filename"].decode()).name: (int(r["width"]), int(r["height"])) for r in read_records(out)}


def test_resize_mode_shrink_never_enlarges_and_update_keeps_it(cli, tmp_path):
    src = tmp_path / "in"
    save(natural_image(400, 300, 1), src / "a" / "big.jpg", quality=90)
    save(natural_image(60, 40, 2), src / "a" / "small.png")
    save(natural_image(90, 200, 3), src / "b" / "tall.png")
    help_text = " ".join(cli("convert", "--help").stdout.split())
    assert "shrink: only images whose shorter side is over N" in help_text
    assert re.search(r"--resize-mode \[always\|shrink\] always: .*? \[default: always\]", help_text), help_text

    res = cli("convert", src, tmp_path / "always", "--resize", "100")
    assert res.exit_code == 0, res.output
    assert _sizes(tmp_path / "always") == {"big.jpg": (133, 100), "small.png": (150, 100), "tall.png": (100, 222)}
    out = tmp_path / "shrink"
    assert cli("convert", src, out, "--resize", "100", "--resize-mode", "shrink").exit_code == 0
    assert _sizes(out) == {"big.jpg": (133, 100), "small.png": (60, 40), "tall.png": (90, 200)}
    manifest = json.loads((out / "dataset.json").read_text())
    assert (manifest["options"]["resize"], manifest["options"]["resize_mode"]) == (100, "shrink")
    # update keeps it: a new small image keeps its size, a new big one shrinks
    save(natural_image(50, 70, 4), src / "b" / "new_small.png")
    save(natural_image(300, 500, 5), src / "b" / "new_big.png")
    assert cli("update", src, out).exit_code == 0
    assert _sizes(out) == {
        "big.jpg": (133, 100),
        "small.png": (60, 40),
        "tall.png": (90, 200),
        "new_small.png": (50, 70),
        "new_big.png": (100, 167),
    }
    res = cli("update", src, out, "--resize-mode", "always")
    assert res.exit_code == 2 and "was converted with --resize-mode shrink" in res.stderr
    # refused where it means nothing
    for args, said in [
        (["--resize-mode", "shrink"], "--resize-mode shrink says how to --resize: add --resize N"),
        (["--resize", "64x64", "--resize-mode", "shrink"], "use --resize N (shorter side), not an exact WxH size"),
    ]:
        res = cli("convert", src, tmp_path / "x", *args)
        assert res.exit_code == 2 and said in res.stderr, res.stderr


def test_resize_mode_always_is_recorded_as_before_the_option(cli, tmp_path):
    """The default is not written into dataset.json: a conversion gives the bytes it gave before
    the option (and an interrupted one resumes). No `resize_mode` means always: update goes on
    resizing every new image, and takes --resize-mode always as the same option."""
    src, out = tmp_path / "in", tmp_path / "out"
    save(natural_image(200, 150, 1), src / "a" / "big.png")
    assert cli("convert", src, out, "--resize", "100").exit_code == 0
    assert "resize_mode" not in json.loads((out / "dataset.json").read_text())["options"]
    save(natural_image(40, 30, 2), src / "a" / "small.png")
    res = cli("update", src, out, "--resize-mode", "always")
    assert res.exit_code == 0, res.output
    assert _sizes(out) == {"big.png": (133, 100), "small.png": (133, 100)}
