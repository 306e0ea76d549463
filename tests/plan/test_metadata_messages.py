"""A metadata file beside images that gives none of them a usable row says so, and why (issue 38,
item 23), instead of "no images found ... expected INPUT/CLASS_NAME/image.jpg" beside 6 images."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import make_dataset

CASES = {
    "empty jsonl": ("metadata.jsonl", "", "(6 images found; the file has no rows)"),
    "header-only csv": ("metadata.csv", "file_name,n\n", "(6 images found; the file has no rows)"),
    "no usable row": (
        "metadata.jsonl",
        '{"n": 1}\nnot json\n',
        "(6 images found; none of its 2 rows is usable: e.g. metadata.jsonl:1: no file_name)",
    ),
    "rows naming other files": (
        "metadata.jsonl",
        '{"file_name": "zz.png", "n": 1}\n',
        '(6 images found; its 1 usable row names none of them, e.g. "zz.png")',
    ),
    "multi-label rows naming other files": (
        "metadata.jsonl",
        '{"file_name": "zz.png", "labels": ["x"]}\n',
        '(6 images found; its 1 usable row names none of them, e.g. "zz.png")',
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_no_usable_row_is_said_not_no_images(cli, tmp_path: Path, case: str) -> None:
    name, text, why = CASES[case]
    make_dataset(tmp_path / "in", {"cat": 3, "dog": 3})
    (tmp_path / "in" / name).write_text(text)
    r = cli("convert", tmp_path / "in", tmp_path / "out")
    assert r.exit_code == 2, r.output
    assert r.stderr == (
        f"error: no image in {tmp_path / 'in'} has a usable row in {name} {why}: give each image a row whose "
        'file_name is its path below the input, e.g. "cat/img_000.png"\n'
    )
    assert not (tmp_path / "out").exists()
    r = cli("convert", tmp_path / "in", tmp_path / "out", "--json")
    assert "has a usable row" in json.loads(r.stdout)["error"]["message"]


def test_no_images_at_all_is_still_said_so(cli, tmp_path: Path) -> None:
    (tmp_path / "in" / "cat").mkdir(parents=True)
    (tmp_path / "in" / "metadata.jsonl").write_text("")
    r = cli("convert", tmp_path / "in", tmp_path / "out")
    assert r.exit_code == 2 and r.stderr.startswith(f"error: no images found in {tmp_path / 'in'}: expected ")
