"""`convert --like OUT` and the advice that uses it: every command `update` advises when it refuses
an option, run exactly as printed, makes the same dataset in every respect but the option asked
for: the split and its rule, the label numbers (a class an update appended keeps its number), the
seed, the shard request as typed, compression, index, checksum, dedupe, resize, quality, channels,
max-pixels.

The dataset: `--split train=0.8,validation=0.2 --shards 8`, then updated once with a new class
(wolf gets label 7, where sorted order would give it 6 and zebra 7)."""

from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import img2tfrecord
from helpers import make_dataset, read_records
from img2tfrecord.cli import main

CLASSES = ["cat", "dog", "elk", "fox", "gnu", "owl", "zebra"]


def _run(*args: Any) -> Any:
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("like")
    data, out = root / "data", root / "base"
    make_dataset(data, dict.fromkeys(CLASSES, 4), size=(16, 12))
    r = _run("convert", data, out, "--split", "train=0.8,validation=0.2", "--shards", "8", "-q")
    assert r.exit_code == 0, r.output
    make_dataset(data, {"wolf": 4}, seed=7, size=(16, 12))
    r = _run("update", data, out, "-q")
    assert r.exit_code == 0, r.output
    classes = _manifest(out)["classes"]
    assert classes.index("wolf") == 7 and classes.index("zebra") == 6 and sorted(classes) != classes
    return data, out


def _manifest(out: Path) -> dict[str, Any]:
    return json.loads((out / "dataset.json").read_text())


def _images(out: Path) -> dict[bytes, tuple[str, int]]:
    """image/filename -> (split, label) of every record, as TensorFlow parses them."""
    return {r["filename"]: (r["shard"].rsplit("-", 3)[0], int(r["label"])) for r in read_records(out)}


# the option update is asked to change -> (its flags, its value in dataset.json)
CHANGES: dict[str, tuple[list[str], Any]] = {
    "encoding": (["--encoding", "jpeg"], "jpeg"),
    "quality": (["--quality", "80"], 80),
    "resize": (["--resize", "24"], 24),
    "channels": (["--channels", "3"], "3"),
    "max_pixels": (["--max-pixels", "100000"], 100000),
    "validate": (["--no-validate"], False),
    "seed": (["--seed", "5"], 5),
    "label_offset": (["--label-offset", "1"], 1),
    "compression": (["--compression", "gzip"], "gzip"),
    "index": (["--index"], True),
    "split": (["--split", "train=0.5,validation=0.5"], {"train": 0.5, "validation": 0.5}),
    "shards": (["--shards", "4"], 4),
    "labels": (["--labels", "LABELS"], None),
    "dedupe": (["--dedupe", "drop"], "drop"),
    "checksum": (["--checksum", "sha256"], "sha256"),
}


def _same_but(base: Path, out: Path, key: str) -> None:
    """`out` is `base` in every respect but option `key`."""
    a, b = _manifest(base), _manifest(out)
    for k in {*a["options"], *b["options"]} - {key, "shards"}:  # shards: the counts a request gives
        assert a["options"].get(k) == b["options"].get(k), (key, k)
    if key != "shards":
        assert a["shard_request"] == b["shard_request"] == 8
    if key != "labels":
        assert a["classes"] == b["classes"]
    if key != "label_offset":
        assert a["label_offset"] == b["label_offset"]
    before, after = _images(base), _images(out)
    assert before.keys() == after.keys()
    offset = 1 if key == "label_offset" else 0
    for name, (split, label) in before.items():
        split2, label2 = after[name]
        if key not in ("split", "seed"):  # the split rule (fractions and seed) decides an image's split
            assert split2 == split, (key, name)
        if key != "labels":
            assert label2 - offset == label, (key, name)


def _advised(stderr: str) -> list[str]:
    line = next(x for x in stderr.splitlines() if "run: " in x)
    return shlex.split(line.split("run: ", 1)[1])


@pytest.mark.parametrize("key", list(CHANGES))
def test_each_command_update_advises_makes_the_same_dataset_but_that_option(
    base: tuple[Path, Path], tmp_path: Path, key: str
) -> None:
    data, dataset = base
    out = tmp_path / "out"
    shutil.copytree(dataset, out)
    flags, value = CHANGES[key]
    if key == "labels":
        labels = tmp_path / "labels.txt"
        labels.write_text("\n".join(reversed(_manifest(dataset)["classes"])) + "\n")
        flags = ["--labels", str(labels)]
    r = _run("update", data, out, *flags)
    assert r.exit_code == 2 and r.stderr.count("\n") == 1, r.stderr
    argv = _advised(r.stderr)
    assert argv == ["img2tfrecord", "convert", str(data), str(out), "--like", str(out), "--overwrite", *flags]
    r = _run(*argv[1:], "-q")
    assert r.exit_code == 0, r.output
    _same_but(dataset, out, key)
    got = _manifest(out)
    if key == "shards":
        assert got["shard_request"] == 4
    elif key == "labels":
        assert got["classes"] == list(reversed(_manifest(dataset)["classes"]))
    else:
        assert got["options"][key] == value


def test_update_quotes_the_shard_request_as_typed(base: tuple[Path, Path]) -> None:
    data, dataset = base
    r = _run("update", data, dataset, "--shards", "4")
    assert r.exit_code == 2
    assert f"{dataset} was converted with --shards 8;" in r.stderr, r.stderr


def test_the_python_advice_called_as_printed_keeps_the_dataset(base: tuple[Path, Path], tmp_path: Path) -> None:
    data, dataset = base
    out = tmp_path / "out"
    shutil.copytree(dataset, out)
    with pytest.raises(img2tfrecord.errors.UsageError) as e:
        img2tfrecord.update(data, out, encoding="jpeg")
    call = str(e.value).split("call ", 1)[1]
    assert call == f"convert({str(data)!r}, {str(out)!r}, like={str(out)!r}, overwrite=True, encoding='jpeg')"
    eval(call, {"convert": img2tfrecord.convert})  # as printed
    _same_but(dataset, out, "encoding")


def test_like_takes_everything_and_given_options_replace_only_theirs(base: tuple[Path, Path], tmp_path: Path) -> None:
    data, dataset = base
    same = tmp_path / "same"
    r = _run("convert", data, same, "--like", dataset, "-q")
    assert r.exit_code == 0, r.output
    _same_but(dataset, same, "none")
    seeded = tmp_path / "seeded"
    img2tfrecord.convert(data, seeded, like=dataset, seed=3)
    _same_but(dataset, seeded, "seed")
    assert _manifest(seeded)["options"]["seed"] == 3


def test_like_a_folder_with_no_dataset_is_one_usage_line(base: tuple[Path, Path], tmp_path: Path) -> None:
    data, _ = base
    r = _run("convert", data, tmp_path / "out", "--like", tmp_path)
    assert (
        r.exit_code == 2
        and r.stderr == f"error: --like {tmp_path}: {tmp_path} holds no dataset (dataset.json is missing)\n"
    )


def test_the_advice_after_an_update_from_a_file_list_names_the_list(base: tuple[Path, Path], tmp_path: Path) -> None:
    data, dataset = base
    out = tmp_path / "out"
    shutil.copytree(dataset, out)
    listing = tmp_path / "files.csv"
    listing.write_text("".join(f"{p.relative_to(data)}\n" for p in sorted(data.rglob("*")) if p.is_file()))
    r = _run("update", data, out, "--file-list", listing, "--encoding", "jpeg")
    assert r.exit_code == 2, r.output
    argv = _advised(r.stderr)
    assert argv[-4:] == ["--file-list", str(listing), "--encoding", "jpeg"] and argv[4:7] == [
        "--like",
        str(out),
        "--overwrite",
    ]
    assert _run(*argv[1:], "-q").exit_code == 0
    _same_but(dataset, out, "encoding")
