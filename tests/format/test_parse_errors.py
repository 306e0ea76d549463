"""A file that does not parse is named by the position of its fault, never quoted (issue 38, item
23): a dataset.json edited to name /etc/passwd as its annotations made `update` print
`root:x:0:0:root...` (yajl's error quotes ~30 bytes around the fault). Every reader's parse error
is checked: dataset.json, the catalog, a metadata file, COCO annotations by both parsers (the whole
parse below 16 MB, the stream with --masks), and an update re-reading recorded annotations."""

from __future__ import annotations

import json
import re
import shutil
import struct
from pathlib import Path

import pytest

from helpers import make_dataset
from img2tfrecord.format import catalog as catalog_file

SAMPLE = Path(__file__).resolve().parents[2] / "sample_data"
SECRET = "root:x:0:0:root:/root:/bin/bash"


def _no_quote(text: str) -> None:
    assert "root:x" not in text and "/bin/bash" not in text and "right here" not in text, text
    assert "0xff" not in text, text


def test_dataset_json_that_is_not_json_is_named_by_position(cli, tmp_path: Path) -> None:
    make_dataset(tmp_path / "in", {"a": 2, "b": 2})
    out = tmp_path / "out"
    assert cli("convert", tmp_path / "in", out, "--quiet").exit_code == 0
    (out / "dataset.json").write_text('{"format_version": 1,\n  ' + SECRET + "}")
    for args in (("inspect", out), ("update", tmp_path / "in", out), ("inspect", out, "--json")):
        r = cli(*args)
        assert r.exit_code != 0
        _no_quote(r.output)
        assert "not valid JSON: Expecting property name enclosed in double quotes at line 2, column 3" in r.output
    (out / "dataset.json").write_bytes(b'{"format_version": "\xff' + SECRET.encode() + b'"}')
    r = cli("inspect", out)
    _no_quote(r.output)
    assert "not valid JSON: not UTF-8 text (byte 20)" in r.output


def test_a_damaged_catalog_header_is_not_quoted() -> None:
    header = json.dumps({"rows": SECRET}).encode()
    data = catalog_file.MAGIC + struct.pack("<I", len(header)) + header
    with pytest.raises(catalog_file.CatalogError) as e:
        catalog_file.decode(data)
    _no_quote(str(e.value))
    assert str(e.value) == "a damaged catalog: a value of the wrong kind (ValueError)"


def test_a_metadata_row_that_is_not_json_is_named_by_position(cli, tmp_path: Path) -> None:
    files = make_dataset(tmp_path / "in", {"a": 2})
    rels = [p.relative_to(tmp_path / "in").as_posix() for p in files["a"]]
    rows = [json.dumps({"file_name": rels[0], "n": 1}), '{"file_name": ' + SECRET + "}"]
    (tmp_path / "in" / "metadata.jsonl").write_text("\n".join(rows) + "\n")
    r = cli("convert", tmp_path / "in", tmp_path / "out", "--json")
    assert r.exit_code == 0, r.output
    _no_quote(r.output)
    skipped = json.loads(r.stdout)["skipped"]
    assert {
        "path": "metadata.jsonl:2",
        "split": "",
        "reason": "not a JSON object: Expecting value at line 1, column 15",
    } in skipped


@pytest.mark.parametrize("masks", [False, True], ids=["whole parse", "stream (--masks)"])
def test_coco_that_is_not_json_is_named_by_position(cli, tmp_path: Path, masks: bool) -> None:
    pytest.importorskip("pycocotools")
    src = tmp_path / "in"
    shutil.copytree(SAMPLE / "circle", src / "circle")
    bad = tmp_path / "bad.json"
    bad.write_text('{"images": [' + SECRET + "]}")
    r = cli("convert", src, tmp_path / "out", "--annotations", bad, *(["--masks"] if masks else []))
    assert r.exit_code == 2
    _no_quote(r.output)
    assert len(r.output.strip().splitlines()) == 1
    assert r.output.strip().endswith(
        "not JSON, Pascal VOC XML or a YOLO folder: invalid char in json text at line 1, column 13 (byte 12)"
    )


def test_a_large_coco_file_is_named_by_the_block_read(cli, tmp_path: Path) -> None:
    """Over 16 MB the file is only streamed: the fault is still named by its line, column and byte."""
    src = tmp_path / "in"
    shutil.copytree(SAMPLE / "circle", src / "circle")
    head = '{"images": [' + '{"id": 1, "file_name": "x.png"},\n' * 600_000
    bad = tmp_path / "big.json"
    bad.write_text(head + SECRET + "]}")
    fault = len(head)
    assert bad.stat().st_size > 16 * 2**20
    r = cli("convert", src, tmp_path / "out", "--annotations", bad)
    assert r.exit_code == 2
    _no_quote(r.output)
    m = re.search(r"YOLO folder: invalid char in json text at line 600001, column 1 \(byte (\d+)\)$", r.output)
    assert m is not None and int(m[1]) == fault, r.output


def test_update_rereading_annotations_edited_to_another_file(cli, tmp_path: Path) -> None:
    """The issue's case: dataset.json's recorded annotations edited to name a file that is not them."""
    pytest.importorskip("pycocotools")
    src = tmp_path / "in"
    shutil.copytree(SAMPLE, src, ignore=shutil.ignore_patterns("*broken*"))
    out = tmp_path / "out"
    assert cli("convert", src, out, "--annotations", src / "annotations.json", "--masks", "--quiet").exit_code == 0
    passwd = tmp_path / "passwd"
    passwd.write_text(SECRET + "\n")
    text = (out / "dataset.json").read_text().replace('"annotations.json"', json.dumps(str(passwd)))
    (out / "dataset.json").write_text(text)
    r = cli("update", src, out)
    assert r.exit_code == 2, r.output
    _no_quote(r.output)
    assert r.output.strip().endswith("invalid char in json text at line 1, column 1 (byte 0)"), r.output
    assert len(r.output.strip().splitlines()) == 1
