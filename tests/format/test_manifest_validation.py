"""Hand-edited or damaged metadata: dataset.json is validated once (`format.manifest.parse_manifest`),
so every reader of it (`inspect`, `inspect --verify`, `load()`, `update`, `compact` and their
`--dry-run`) refuses a wrong field in one line naming it, exit 1, never with a traceback; a damaged
journal line is converted again.

The property test (derandomized: the same examples every run) takes a real dataset.json, sets one
field (any depth) to a wrong type or value or removes it, and runs every reader on it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import img2tfrecord
from helpers import examples, make_dataset
from img2tfrecord.cli import main
from img2tfrecord.errors import Img2TFRecordError


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("manifest")
    make_dataset(root / "in", {"a": 4, "b": 4}, size=(16, 12))
    out = root / "out"
    img2tfrecord.convert(str(root / "in"), str(out), split={"train": 0.5, "validation": 0.5}, index=True, workers=1)
    return out


def edited(dataset: Path, tmp: Path, edit: Any) -> Path:
    """A copy of the dataset whose dataset.json `edit(data)` changed (or whose text `edit` is)."""
    out = tmp / "edited"
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(dataset, out)
    if isinstance(edit, str):
        (out / "dataset.json").write_text(edit)
    else:
        data = json.loads((dataset / "dataset.json").read_text())
        edit(data)
        (out / "dataset.json").write_text(json.dumps(data))
    return out


def readers(path: Path, src: Path) -> dict[str, tuple[int, str]]:
    """(exit code, stderr or error message) of every reader of a dataset; a traceback fails the test.
    `src`: the dataset's input (for update)."""
    out = {}
    commands = {
        "inspect": ["inspect", path],
        "inspect --verify": ["inspect", path, "--verify"],
        "update --dry-run": ["update", src, path, "--dry-run"],
        "compact --dry-run": ["compact", path, "--dry-run"],
        "update": ["update", src, path],
        "compact": ["compact", path],
    }
    for name, args in commands.items():
        r = CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)
        out[name] = (r.exit_code, r.stderr)
    try:
        for split in ("train", "validation"):
            for _ in img2tfrecord.load(path, split=split):
                pass
        out["load"] = (0, "")
    except Img2TFRecordError as e:  # anything else is a traceback
        out["load"] = (e.exit_code, str(e))
    return out


def _rename_split(data: Any) -> None:
    data["splits"]["training"] = data["splits"].pop("train")
    data["options"]["split"]["training"] = data["options"]["split"].pop("train")


def _set(path: list[Any], value: Any) -> Any:
    def edit(data: Any) -> None:
        for key in path[:-1]:
            data = data[key]
        data[path[-1]] = value

    return edit


CASES = {  # issue 20 item 7's cases: field path -> what the one line says
    "classes=5": (_set(["classes"], 5), "classes is 5: expected a list"),
    "label_offset=x": (_set(["label_offset"], "x"), 'label_offset is "x": expected a whole number'),
    "options=[1]": (_set(["options"], [1]), "options is a list: expected an object"),
    "split=null": (_set(["splits", "train"], None), "splits.train is null: expected an object"),
    "shards=5": (_set(["splits", "train", "shards"], 5), "splits.train.shards is 5: expected a list"),
    "compression=bzip2": (_set(["options", "compression"], "bzip2"), 'options.compression is "bzip2": expected'),
    "split_rule=random": (_set(["options", "split_rule"], "random"), 'options.split_rule is "random": expected'),
    "bytes=x": (_set(["splits", "train", "shards", 0, "bytes"], "x"), 'splits.train.shards[0].bytes is "x"'),
    "file=../x": (_set(["splits", "train", "shards", 0, "file"], "../x"), "splits.train.shards[0].file is"),
    "offsets disagree": (_set(["label_offset"], 1), "label_offset is 1 but options.label_offset is 0: they must agree"),
    "format_version=99": (_set(["format_version"], 99), "format_version is 99: written by a newer img2tfrecord"),
    "version=x": (_set(["version"], "x"), 'version is "x": expected a whole number >= 1'),
    "seed=x": (_set(["options", "seed"], "x"), 'options.seed is "x": expected a whole number'),
    "quality=x": (_set(["options", "quality"], "x"), 'options.quality is "x": expected a whole number from 1 to 100'),
    "quality=0": (_set(["options", "quality"], 0), "options.quality is 0: expected a whole number from 1 to 100"),
    "resize=x": (_set(["options", "resize"], "x"), 'options.resize is "x": expected null, a whole number >= 1 or'),
    "resize=1.5": (_set(["options", "resize"], 1.5), "options.resize is 1.5: expected null, a whole number >= 1 or"),
    "resize=[]": (_set(["options", "resize"], []), "options.resize is a list: expected null, a whole number >= 1 or"),
    "resize={}": (_set(["options", "resize"], {}), "options.resize is an object: expected null"),
    "resize=[0,5]": (_set(["options", "resize"], [0, 5]), "options.resize[0] is 0: expected a whole number >= 1"),
    "split fraction=x": (_set(["options", "split", "train"], "x"), 'options.split.train is "x": expected a fraction'),
    "split fraction=2": (_set(["options", "split", "train"], 2), "options.split.train is 2: expected a fraction"),
    "split sum": (_set(["options", "split", "train"], 0.1), "options.split adds up to 0.6: expected fractions that"),
    "split=5": (_set(["options", "split"], 5), "options.split is 5: expected an object"),
    "checksum=xxh3W128": (_set(["options", "checksum"], "xxh3W128"), 'options.checksum is "xxh3W128": expected'),
    "encoding=gif": (_set(["options", "encoding"], "gif"), 'options.encoding is "gif": expected'),
    "dedupe=x": (_set(["options", "dedupe"], "x"), 'options.dedupe is "x": expected'),
    "shards=0": (_set(["options", "shards", "train"], 0), "options.shards.train is 0: expected a whole number >= 1"),
    "shard_request=x": (_set(["shard_request"], "x"), 'shard_request is "x": expected a whole number >= 1'),
    "parent=5": (_set(["parent"], 5), "parent is 5: expected a string"),
    "split renamed": (_rename_split, 'splits.training.shards[0].file is "train-00000-of-00001": expected a shard of'),
    "catalog.bytes=x": (_set(["catalog", "bytes"], "x"), 'catalog.bytes is "x": expected a whole number >= 0'),
    "deep nesting": ('{"format_version": 1, "splits": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested too deeply"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_every_reader_names_the_wrong_field_in_one_line(dataset: Path, tmp_path: Path, case: str) -> None:
    edit, message = CASES[case]
    got = readers(edited(dataset, tmp_path, edit), dataset.parent / "in")
    for reader, (code, text) in got.items():
        assert code == 1, (reader, got)
        assert message in text and text.strip().count("\n") == 0, (reader, text)
        assert "dataset.json" in text, (reader, text)
    if case != "format_version=99":
        assert "edited or damaged" in got["load"][1]


def test_verify_finds_labels_txt_missing(dataset: Path, tmp_path: Path) -> None:
    out = edited(dataset, tmp_path, lambda d: None)
    (out / "labels.txt").unlink()
    r = CliRunner().invoke(main, ["inspect", str(out), "--verify"], catch_exceptions=False)
    assert r.exit_code == 1 and f"{out / 'labels.txt'}: missing (dataset.json lists 2 classes)" in r.stdout


def _paths(value: Any, prefix: tuple = ()) -> list[tuple]:
    """Every field path of a JSON value, containers included."""
    out = [prefix] if prefix else []
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _paths(v, (*prefix, i))
    return out


WRONG = [None, 5, -1, 2**70, 1.5, True, "x", "", "../x", [], [1], {}, {"a": 1}, "DELETE"]


@pytest.fixture(scope="module")
def field_paths(dataset: Path) -> list[tuple]:
    return _paths(json.loads((dataset / "dataset.json").read_text()))


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_property_any_wrong_field_is_one_line_never_a_traceback(
    dataset: Path, tmp_path: Path, field_paths: list[tuple], data: Any
) -> None:
    path = data.draw(st.sampled_from(field_paths))
    value = data.draw(st.sampled_from(WRONG))

    def edit(d: Any) -> None:
        for key in path[:-1]:
            d = d[key]
        if value == "DELETE":
            del d[path[-1]]
        else:
            d[path[-1]] = value

    for reader, (code, text) in readers(edited(dataset, tmp_path, edit), dataset.parent / "in").items():
        assert code in (0, 1, 2), (path, value, reader, code, text)
        if code:  # a refusal: one line (a run that succeeds prints its summary)
            assert text.strip().count("\n") == 0, (path, value, reader, text)


def test_a_damaged_journal_line_is_converted_again_not_a_traceback(tmp_path: Path) -> None:
    from img2tfrecord.errors import Interrupted

    src = tmp_path / "in"
    make_dataset(src, {"a": 12, "b": 12}, size=(16, 12))
    reference = tmp_path / "reference"
    img2tfrecord.convert(str(src), str(reference), shards=6, workers=1)
    want = {p.name: p.read_bytes() for p in reference.iterdir()}
    damage = [
        lambda d: d["info"].__setitem__("bytes", "x"),
        lambda d: d["info"].__setitem__("checksums", 5),
        lambda d: d["info"].__setitem__("index", "../../etc/passwd"),
        lambda d: d.__setitem__("class_counts", {"a": "many"}),
        lambda d: d.__setitem__("info", 5),
        lambda d: d.__setitem__("digests", [[1]]),
    ]
    for i, spoil in enumerate(damage):
        out = tmp_path / f"out{i}"

        def stop(images: int, nbytes: int, total: int) -> None:
            if images >= total // 2:
                raise KeyboardInterrupt

        with pytest.raises(Interrupted):
            img2tfrecord.convert(str(src), str(out), workers=1, shards=6, progress=stop)
        [journal] = [p for p in tmp_path.rglob("journal.jsonl") if out.name in p.as_posix()]
        lines = journal.read_text().splitlines()
        first = json.loads(lines[1])
        name = first["info"]["file"]
        spoil(first)
        journal.write_text("\n".join([lines[0], json.dumps(first), *lines[2:]]) + "\n")
        r = CliRunner().invoke(
            main, ["convert", str(src), str(out), "--shards", "6", "--resume"], catch_exceptions=False
        )
        assert r.exit_code == 0, (i, r.output)
        if i != 4:  # with no "info" the line names no shard: it is simply not reused
            assert f"{name} is converted again: its journal line is damaged" in r.stderr, (i, r.stderr)
        assert {p.name: p.read_bytes() for p in out.iterdir() if not p.name.startswith(".")} == want
