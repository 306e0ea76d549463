"""Metadata files as hostile as images (issue 38, item 16): a CSV cell over the csv module's
131,072 characters, a 5,000-digit number, JSON nested 100,000 deep, a lone surrogate in
`file_name` or in a value. Each is a one-line error or a skip that says why, never a traceback;
the other rows' images are written, read back by TensorFlow."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import make_dataset, read_records


def _tree(root: Path) -> list[str]:
    files = make_dataset(root, {"cat": 3})
    return [p.relative_to(root).as_posix() for ps in files.values() for p in ps]


def _jsonl_line(rel: str, column: str, raw_json_value: str) -> str:
    return f'{{"file_name": {json.dumps(rel)}, "{column}": {raw_json_value}}}\n'


HOSTILE_JSONL = {
    "a 5,000-digit number": (
        "n",
        "7" * 5000,
        "{rel}: metadata.jsonl:1: column n: a whole number of 5,000 digits is beyond an int64's range",
    ),
    "a list nested 100,000 deep": (
        "n",
        "[" * 100_000 + "]" * 100_000,
        "metadata.jsonl:1: not a JSON object: nested too deep",
    ),
    "a list nested 900 deep": (
        "n",
        "[" * 900 + "]" * 900,
        "{rel}: metadata.jsonl:1: column n: a value of no usable type (list;",
    ),
    "a lone surrogate in a value": (
        "s",
        '"a\\ud800b"',
        '{rel}: metadata.jsonl:1: column s: "\\ud800" is a lone surrogate, not text (UTF-8 cannot hold it)',
    ),
    "a lone surrogate in a list": (
        "s",
        '["\\udcff"]',
        '{rel}: metadata.jsonl:1: column s: "\\udcff" is a lone surrogate',
    ),
    "a lone surrogate in a class name": (
        "labels",
        '["x\\ud800"]',
        '{rel}: metadata.jsonl:1: column labels: "\\ud800" is',
    ),
}


@pytest.mark.parametrize("case", list(HOSTILE_JSONL))
def test_a_hostile_jsonl_value_is_a_skip_with_its_reason(cli, tmp_path: Path, case: str) -> None:
    column, raw, said = HOSTILE_JSONL[case]
    rels = _tree(tmp_path / "in")
    good = {"n": "1", "s": '"fine"', "labels": '["cat"]'}[column]
    if raw.startswith('["'):
        good = '["fine"]' if column == "s" else good  # a list column: lists in every row
    lines = [_jsonl_line(rels[0], column, raw)] + [_jsonl_line(r, column, good) for r in rels[1:]]
    (tmp_path / "in" / "metadata.jsonl").write_text("".join(lines))
    r = cli("convert", tmp_path / "in", tmp_path / "out", "--json")
    assert r.exit_code == 0, r.output[-2000:]
    assert "Traceback" not in r.output
    reasons = [f"{s['path']}: {s['reason']}" for s in json.loads(r.stdout)["skipped"]]
    assert any(x.startswith(said.format(rel=rels[0])) for x in reasons), reasons
    assert sorted(rec["filename"].decode() for rec in read_records(tmp_path / "out")) == sorted(rels[1:])


def test_a_lone_surrogate_in_file_name_is_a_skip(cli, tmp_path: Path) -> None:
    rels = _tree(tmp_path / "in")
    lines = ['{"file_name": "cat/img_000\\ud800.png", "n": 0}\n'] + [_jsonl_line(r, "n", "1") for r in rels]
    (tmp_path / "in" / "metadata.jsonl").write_text("".join(lines))
    r = cli("convert", tmp_path / "in", tmp_path / "out", "--json")
    assert r.exit_code == 0, r.output[-2000:]
    skipped = json.loads(r.stdout)["skipped"]
    assert {
        "path": "metadata.jsonl:1",
        "split": "",
        "reason": 'file_name "cat/img_000\\ud800.png" is not text (a lone surrogate: no file can have that name)',
    } in skipped
    assert len(read_records(tmp_path / "out")) == 3
    json.loads((tmp_path / "out" / "dataset.json").read_text())  # the reason is written as text


def test_csv_a_huge_number_and_a_deep_list_are_skips(cli, tmp_path: Path) -> None:
    rels = _tree(tmp_path / "in")
    deep = "[" * 50_000 + "]" * 50_000  # under the csv module's cell limit; too deep for json
    text = f"file_name,n,m\n{rels[0]},{'7' * 5000},[1]\n{rels[1]},1,{deep}\n{rels[2]},-2,[3]\n"
    (tmp_path / "in" / "metadata.csv").write_text(text)
    r = cli("convert", tmp_path / "in", tmp_path / "out", "--json")
    assert r.exit_code == 0, r.output[-2000:]
    reasons = {s["path"]: s["reason"] for s in json.loads(r.stdout)["skipped"]}
    assert reasons[rels[0]].startswith("metadata.csv:2: column n: a whole number of 5,000 digits is beyond an int64")
    assert reasons[rels[1]] == "metadata.csv:3: column m: a JSON list nested too deep"
    assert [rec["filename"].decode() for rec in read_records(tmp_path / "out")] == [rels[2]]


def test_csv_a_cell_over_the_csv_limit_is_one_line(cli, tmp_path: Path) -> None:
    rels = _tree(tmp_path / "in")
    text = f"file_name,note\n{rels[0]},short\n{rels[1]},{'x' * 140_000}\n{rels[2]},short\n"
    (tmp_path / "in" / "metadata.csv").write_text(text)
    r = cli("convert", tmp_path / "in", tmp_path / "out")
    assert r.exit_code == 2, r.output[-2000:]
    assert r.stderr == (
        "error: metadata.csv: line 3: a cell is longer than 131,072 characters, the most a CSV cell may hold here\n"
    )
    assert not (tmp_path / "out").exists()
    r = cli("convert", tmp_path / "in", tmp_path / "out", "--json")
    assert r.exit_code == 2 and "131,072" in json.loads(r.stdout)["error"]["message"]
