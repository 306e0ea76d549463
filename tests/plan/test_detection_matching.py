"""Annotations meet the images (conversion.plan.detection): an annotation of no image found is
skipped as a metadata row of no image is (`--strict` fails), and one that two images could be of
is refused."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from test_detection import _image, _voc, boxes_of, coco_corpus, od_records


def _with_ghost(ann: Path) -> None:
    """Add to a COCO file an image no folder holds, with a box."""
    data = json.loads(ann.read_text())
    data["images"].append({"id": 99, "file_name": "gone/ghost.jpg", "width": 10, "height": 10})
    data["annotations"].append({"id": 99, "image_id": 99, "bbox": [1, 1, 2, 2], "category_id": 3})
    ann.write_text(json.dumps(data))


def test_coco_images_not_found_are_skips_and_strict_fails(tmp_path: Path, cli: Any) -> None:
    ann = coco_corpus(tmp_path)
    _with_ghost(ann)
    res = cli("convert", tmp_path / "images", tmp_path / "out", "--annotations", ann, "--json")
    assert res.exit_code == 0, res.output
    reason = "named in instances.json but not found below the input folder (or not an image)"
    skipped = {s["path"]: s["reason"] for s in json.loads(res.stdout)["skipped"]}
    assert skipped["gone/ghost.jpg"] == reason
    manifest = json.loads((tmp_path / "out" / "dataset.json").read_text())
    assert {"path": "gone/ghost.jpg", "split": "", "reason": reason} in manifest["skipped"]
    shutil.rmtree(tmp_path / "out")
    ann.write_text(ann.read_text().replace('"iscrowd": 1', '"iscrowd": 0'))
    (tmp_path / "images" / "outside.png").unlink()  # no clipped box left to fail --strict first
    data = json.loads(ann.read_text())
    data["images"] = [im for im in data["images"] if im["file_name"] != "outside.png"]
    ann.write_text(json.dumps(data))
    res = cli("convert", tmp_path / "images", tmp_path / "out", "--annotations", ann, "--strict", "--json")
    assert res.exit_code == 1
    assert "gone/ghost.jpg: named in instances.json but not found" in json.loads(res.stdout)["error"]["message"]
    assert not (tmp_path / "out").exists()


def test_voc_and_yolo_annotations_of_no_image_are_skips(tmp_path: Path, cli: Any) -> None:
    _image(tmp_path / "images" / "a.jpg", (20, 20), [])
    _voc(tmp_path / "voc", "a.jpg", (20, 20), [("cat", [1, 1, 5, 5], 0, 0)])
    _voc(tmp_path / "voc", "b.jpg", (20, 20), [("cat", [1, 1, 5, 5], 0, 0)])
    res = cli("convert", tmp_path / "images", tmp_path / "out", "--annotations", tmp_path / "voc", "--json")
    assert res.exit_code == 0, res.output
    assert [s["path"] for s in json.loads(res.stdout)["skipped"]] == ["b.xml"]
    (tmp_path / "yolo").mkdir()
    (tmp_path / "yolo" / "classes.txt").write_text("cat\n")
    for stem in ("a", "sub/c"):
        (tmp_path / "yolo" / stem).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "yolo" / f"{stem}.txt").write_text("0 0.5 0.5 0.2 0.2\n")
    res = cli("convert", tmp_path / "images", tmp_path / "o2", "--annotations", tmp_path / "yolo", "--json")
    assert res.exit_code == 0, res.output
    (skip,) = json.loads(res.stdout)["skipped"]
    assert skip["path"] == "sub/c.txt" and "its image is not found below the input folder" in skip["reason"]


def test_two_images_one_annotation_is_refused(tmp_path: Path, cli: Any) -> None:
    ann = coco_corpus(tmp_path)
    (tmp_path / "images" / "copy").mkdir()
    shutil.copy(tmp_path / "images" / "plain.jpg", tmp_path / "images" / "copy" / "plain.jpg")
    res = cli("convert", tmp_path / "images", tmp_path / "out", "--annotations", ann, "--json")
    assert res.exit_code == 2
    message = json.loads(res.stdout)["error"]["message"]
    assert "file_name plain.jpg in instances.json matches two images below the input folder" in message
    assert "copy/plain.jpg" in message and "ambiguous" in message
    assert not (tmp_path / "out").exists()
    # by its path the annotation names one of them: no guess
    data = json.loads(ann.read_text())
    data["images"][0]["file_name"] = "copy/plain.jpg"
    ann.write_text(json.dumps(data))
    res = cli("convert", tmp_path / "images", tmp_path / "out", "--annotations", ann, "--json")
    assert res.exit_code == 0, res.output


def test_one_yolo_stem_two_images_is_refused(tmp_path: Path, cli: Any) -> None:
    _image(tmp_path / "images" / "a.jpg", (20, 20), [])
    _image(tmp_path / "images" / "a.png", (20, 20), [])
    (tmp_path / "yolo").mkdir()
    (tmp_path / "yolo" / "classes.txt").write_text("cat\n")
    (tmp_path / "yolo" / "a.txt").write_text("0 0.5 0.5 0.2 0.2\n")
    res = cli("convert", tmp_path / "images", tmp_path / "out", "--annotations", tmp_path / "yolo")
    assert res.exit_code == 2
    assert "the annotation a.txt matches two images below the input folder, a.jpg and a.png" in res.stderr


def _recorded(out: Path) -> tuple[str, str, str]:
    man = json.loads((out / "dataset.json").read_text())
    return man["options"]["annotations"], man["metadata"]["file"], man["metadata"]["detection"]["annotations"]


@pytest.mark.parametrize("inside", [True, False], ids=["inside-input", "outside-input"])
def test_a_relative_annotations_path_works_from_another_folder(
    tmp_path: Path, cli: Any, monkeypatch: pytest.MonkeyPatch, inside: bool
) -> None:
    ann = coco_corpus(tmp_path)
    if inside:
        ann = ann.rename(tmp_path / "images" / "instances.json")
    monkeypatch.chdir(tmp_path)
    res = cli("convert", "images", "out", "--annotations", ann.relative_to(tmp_path))
    assert res.exit_code == 0, res.output
    want = "instances.json" if inside else str(tmp_path / "instances.json")
    assert _recorded(tmp_path / "out") == (want, want, want)
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    _image(tmp_path / "images" / "new.png", (16, 16), [])
    res = cli("update", tmp_path / "images", tmp_path / "out", "--json")
    assert res.exit_code == 0, res.output
    res = cli("convert", tmp_path / "images", tmp_path / "again", "--like", tmp_path / "out", "--json")
    assert res.exit_code == 0, res.output
    assert _recorded(tmp_path / "again")[0] == want
    recs, again = od_records(tmp_path / "out"), od_records(tmp_path / "again")
    assert sorted(recs) == sorted(again) and "new.png" in recs
    for name, rec in recs.items():
        assert boxes_of(again[name]) == boxes_of(rec)


def test_a_relative_metadata_path_works_from_another_folder(
    tmp_path: Path, cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("a.png", "b.png"):
        _image(tmp_path / "images" / "x" / name, (8, 8), [])
    rows = [{"file_name": f"x/{n}", "caption": n} for n in ("a.png", "b.png")]
    (tmp_path / "meta.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    monkeypatch.chdir(tmp_path)
    assert cli("convert", "images", "out", "--metadata", "meta.jsonl").exit_code == 0
    man = json.loads((tmp_path / "out" / "dataset.json").read_text())
    assert man["options"]["metadata"] == man["metadata"]["file"] == str(tmp_path / "meta.jsonl")
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    _image(tmp_path / "images" / "x" / "c.png", (8, 8), [])
    (tmp_path / "meta.jsonl").write_text((tmp_path / "meta.jsonl").read_text())  # same bytes
    res = cli("update", tmp_path / "images", tmp_path / "out", "--json")
    assert res.exit_code == 0, res.output  # c.png has no row: a skip, not a failure
    res = cli("convert", tmp_path / "images", tmp_path / "again", "--like", tmp_path / "out")
    assert res.exit_code == 0, res.output


def test_after_an_update_the_box_counts_are_those_of_the_dataset_published(tmp_path: Path, cli: Any) -> None:
    ann = coco_corpus(tmp_path)
    data = json.loads(ann.read_text())
    data["images"].append({"id": 50, "file_name": "later.png", "width": 30, "height": 30})
    for k, bbox in enumerate([[2, 2, 10, 10], [25, 25, 10, 10]]):  # the second crosses the edge: clipped
        data["annotations"].append({"id": 50 + k, "image_id": 50, "bbox": bbox, "category_id": 7})
    ann.write_text(json.dumps(data))
    src, out = tmp_path / "images", tmp_path / "out"
    assert cli("convert", src, out, "--annotations", ann).exit_code == 0
    first = json.loads((out / "dataset.json").read_text())["metadata"]["detection"]
    _image(src / "later.png", (30, 30), [[2, 2, 10, 10]])  # now there: its two boxes published
    (src / "plain.jpg").unlink()  # and its two boxes gone
    res = cli("update", src, out)
    assert res.exit_code == 0, res.output
    now = json.loads((out / "dataset.json").read_text())["metadata"]["detection"]
    assert now["clipped"] == first["clipped"] + 1 and now["boxes"] == first["boxes"]
    assert any(p["path"] == "later.png" for p in now["box_problems"])
    assert cli("convert", src, tmp_path / "fresh", "--annotations", ann).exit_code == 0
    assert now == json.loads((tmp_path / "fresh" / "dataset.json").read_text())["metadata"]["detection"]


def test_a_voc_xml_of_an_unknown_encoding_is_a_skip(tmp_path: Path, cli: Any) -> None:
    """An XML declaration naming an encoding Python has no codec for (the fuzz target's finding: a
    LookupError traceback) is a skip with its reason beside a good XML, and a usage error alone."""
    _image(tmp_path / "images" / "a.jpg", (20, 20), [])
    _image(tmp_path / "images" / "b.jpg", (20, 20), [])
    _voc(tmp_path / "voc", "a.jpg", (20, 20), [("cat", [1, 1, 5, 5], 0, 0)])
    _voc(tmp_path / "voc", "b.jpg", (20, 20), [("cat", [2, 2, 6, 6], 0, 0)])
    bad = tmp_path / "voc" / "b.xml"
    bad.write_text("<?xml version='1.0' encoding='no-such-codec'?>" + bad.read_text())
    res = cli("convert", tmp_path / "images", tmp_path / "out", "--annotations", tmp_path / "voc", "--json")
    assert res.exit_code == 0, res.output
    (skip,) = json.loads(res.stdout)["skipped"]
    assert skip["path"] == "b.jpg" and "b.xml declares an encoding Python cannot read" in skip["reason"], skip
    res = cli("convert", tmp_path / "images", tmp_path / "o2", "--annotations", bad, "--json")
    assert res.exit_code == 2 and "Traceback" not in res.output
    assert json.loads(res.stdout)["error"]["kind"] == "usage"
