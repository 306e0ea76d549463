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
