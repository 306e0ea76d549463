"""A COCO file as an adversarial user writes it (conversion.plan.coco): every annotation that does
not end in a record is named with its reason, bad image entries are named rather than misread,
and COCO's own `area` is kept as given."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from test_detection import _image, od_records


def convert(cli: Any, root: Path, coco: dict[str, Any], *args: str) -> Any:
    """Write `coco` beside root/images and convert it (--json); the result."""
    path = root / "instances.json"
    path.write_text(json.dumps(coco))
    return cli("convert", root / "images", root / "out", "--annotations", path, "--json", *args)


def test_coco_area_is_kept_as_given_even_when_the_box_is_clipped(tmp_path: Path, cli: Any) -> None:
    """COCO's `area` is the segmentation's (what COCO evaluation's size ranges read): a clipped box
    keeps it; a box without one gets the clipped box's area."""
    _image(tmp_path / "images" / "a.png", (40, 40), [[20, 20, 20, 20]])
    coco = {
        "images": [{"id": 1, "file_name": "a.png", "width": 40, "height": 40}],
        "annotations": [
            {"image_id": 1, "category_id": 1, "bbox": [20, 20, 30, 30], "area": 1234.5},  # clipped to 20x20
            {"image_id": 1, "category_id": 1, "bbox": [-10, 0, 20, 10]},  # clipped to 10x10, no area
            {"image_id": 1, "category_id": 1, "bbox": [1, 1, 4, 4], "area": 7.0},
        ],
        "categories": [{"id": 1, "name": "x"}],
    }
    res = convert(cli, tmp_path, coco)
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["detection"]["clipped"] == 2
    assert od_records(tmp_path / "out")["a.png"]["image/object/area"] == pytest.approx([1234.5, 100.0, 7.0])


def test_every_annotation_not_in_a_record_is_named_and_strict_fails(tmp_path: Path, cli: Any) -> None:
    """Issue 38 item 3: an annotation of no listed image, an entry with a null or missing file_name,
    one file_name listed twice and one image id given twice lose no box silently: each annotation
    and each unused entry is named with its reason, the ambiguous images are skipped (not given
    another image's boxes), and --strict fails; an entry repeated exactly is no ambiguity."""
    for name in "abcde":
        _image(tmp_path / "images" / f"{name}.png", (40, 40), [[5, 5, 10, 10]])
    coco = {
        "images": [
            {"id": 1, "file_name": "a.png", "width": 40, "height": 40},
            {"id": 2, "file_name": None, "width": 40, "height": 40},
            {"id": 3, "file_name": "c.png", "width": 40, "height": 40},
            {"id": 4, "file_name": "c.png", "width": "eighty", "height": 40},
            {"id": 5, "file_name": "d.png", "width": 40, "height": 40},
            {"id": 5, "file_name": "e.png", "width": 40, "height": 40},
            {"id": 6, "width": 40, "height": 40},
            {"id": 1, "file_name": "a.png", "width": 40, "height": 40},  # a.png's repeated exactly: counts once
        ],
        "annotations": [
            {"image_id": i, "category_id": 1, "bbox": [5, 5, 10, 10], "area": 100} for i in (1, 2, 3, 4, 5, 6, 99)
        ],
        "categories": [{"id": 1, "name": "x"}],
    }
    res = convert(cli, tmp_path, coco)
    assert res.exit_code == 0, res.output
    skipped = {s["path"]: s["reason"] for s in json.loads(res.stdout)["skipped"]}
    assert skipped["instances.json:annotations[1]"] == "its image's entry (instances.json:images[1]) is not used"
    assert skipped["instances.json:annotations[2]"] == "its image's entry (instances.json:images[2]) is not used"
    assert skipped["instances.json:annotations[3]"] == "its image's entry (instances.json:images[3]) is not used"
    assert skipped["instances.json:annotations[4]"].startswith("its image_id is the id of 2 images")
    assert skipped["instances.json:annotations[5]"] == "its image's entry (instances.json:images[6]) is not used"
    assert skipped["instances.json:annotations[6]"] == "its image_id names no image in instances.json"
    assert skipped["instances.json:images[1]"] == "no file_name"
    assert skipped["instances.json:images[6]"] == "no file_name"
    assert skipped["instances.json:images[2]"] == "its file_name is named by 2 entries (images[2], images[3])"
    assert skipped["instances.json:images[3]"] == (
        "its file_name is named by 2 entries (images[2], images[3]); width is text, not a whole number of pixels"
    )
    assert "COCO's image ids are unique" in skipped["instances.json:images[4]"]
    assert "ambiguous" in skipped["c.png"] and "is not used" in skipped["d.png"] and "is not used" in skipped["e.png"]
    records = od_records(tmp_path / "out")
    assert sorted(records) == ["a.png", "b.png"]  # b.png: no usable entry, so no annotation
    assert len(records["a.png"]["image/object/area"]) == 1 and len(records["b.png"]["image/object/area"]) == 0
    text = cli("convert", tmp_path / "images", tmp_path / "o2", "--annotations", tmp_path / "instances.json")
    assert "Skipped 15 unusable images or annotations (listed in dataset.json)." in text.stderr, text.stderr
    res = convert(cli, tmp_path, coco, "--strict", "--overwrite")
    assert res.exit_code == 1, res.output
    message = json.loads(res.stdout)["error"]["message"]  # 7 annotations, 5 entries, 3 images
    assert message.startswith("--strict: 15 files, folders or annotations cannot be used, e.g. "), message


@pytest.mark.parametrize(
    ("width", "name", "said"),
    [
        ("1e30", '"x"', "images[0]: width 1e+30 is not a whole number of pixels"),
        ("1e400", '"x"', "numeric (floating point) overflow at line 1, column"),
        ("40", '"\\ud800x"', "a lone UTF-16 surrogate escape (no Unicode character) at line 1, column"),
    ],
    ids=["1e30", "1e400", "surrogate"],
)
def test_hostile_numbers_and_names_are_one_line_not_a_traceback(
    tmp_path: Path, cli: Any, width: str, name: str, said: str
) -> None:
    """Issue 38 item 13: a width of 1e30 is a bad width (the image skipped, saying so); 1e400 and a
    category name with a lone surrogate are refused in one line naming the place (exit 2), as an
    image id with one is."""
    _image(tmp_path / "images" / "a.png", (40, 40), [[5, 5, 10, 10]])
    _image(tmp_path / "images" / "b.png", (40, 40), [[5, 5, 10, 10]])
    text = (
        f'{{"images": [{{"id": 1, "file_name": "a.png", "width": {width}, "height": 40}},'
        ' {"id": 2, "file_name": "b.png", "width": 40, "height": 40}],'
        f' "annotations": [{{"image_id": 1, "category_id": 1, "bbox": [5, 5, 10, 10]}}],'
        f' "categories": [{{"id": 1, "name": {name}}}]}}'
    )
    (tmp_path / "instances.json").write_text(text)
    res = cli("convert", tmp_path / "images", tmp_path / "out", "--annotations", tmp_path / "instances.json", "--json")
    assert "Traceback" not in res.output
    got = json.loads(res.stdout)
    if width == "1e30":
        assert res.exit_code == 0, res.output
        assert any(said in f"{s['path']}: {s['reason']}" for s in got["skipped"])
    else:
        assert res.exit_code == 2 and said in got["error"]["message"] and "\n" not in got["error"]["message"]
