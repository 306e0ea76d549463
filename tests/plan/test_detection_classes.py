"""One class list per detection input, checked once (conversion.plan.labels.check_class_list): every
annotation format writes one record per image, and two ids of one class name are refused, naming
the ids, wherever the list comes from (COCO categories, a YOLO classes file or data.yaml, --labels)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from test_detection import _image, _voc, od_records

NAMES = ["a.jpg", "b.jpg", "c.png", "d.jpg"]
SIZE = (40, 30)
BOX = [8, 6, 20, 12]  # x, y, w, h in pixels: (0.2, 0.2) - (0.7, 0.6) normalised


def _images(folder: Path) -> None:
    for name in NAMES:
        _image(folder / name, SIZE, [BOX])


def coco_input(root: Path, categories: list[dict[str, Any]] | None = None) -> tuple[Path, Path]:
    _images(root / "images")
    cats = categories or [{"id": 1, "name": "circle"}, {"id": 2, "name": "square"}]
    data = {
        "images": [{"id": i, "file_name": n, "width": SIZE[0], "height": SIZE[1]} for i, n in enumerate(NAMES)],
        "annotations": [
            {"id": i, "image_id": i, "bbox": BOX, "category_id": cats[i % len(cats)]["id"]} for i in range(len(NAMES))
        ],
        "categories": cats,
    }
    (root / "instances.json").write_text(json.dumps(data))
    return root / "images", root / "instances.json"


def voc_input(root: Path) -> tuple[Path, Path]:
    _images(root / "images")
    x, y, w, h = BOX
    for i, name in enumerate(NAMES):
        _voc(root / "xml", name, SIZE, [(("circle", "square")[i % 2], [x, y, x + w, y + h], 0, 0)])
    return root / "images", root / "xml"


def _yolo_line(i: int) -> str:
    x, y, w, h = BOX
    return f"{i % 2} {(x + w / 2) / SIZE[0]} {(y + h / 2) / SIZE[1]} {w / SIZE[0]} {h / SIZE[1]}\n"


def yolo_flat_input(root: Path, classes: str = "circle\nsquare\n") -> tuple[Path, Path]:
    _images(root / "images")
    (root / "labels").mkdir()
    (root / "labels" / "classes.txt").write_text(classes)
    for i, name in enumerate(NAMES):
        (root / "labels" / (Path(name).stem + ".txt")).write_text(_yolo_line(i))
    return root / "images", root / "labels"


def ultralytics_input(root: Path, names: str = "names:\n  0: circle\n  1: square\n") -> tuple[Path, Path]:
    """Ultralytics' layout: images/{train,val}/x.jpg, labels/{train,val}/x.txt, data.yaml at the top."""
    root = root / "set"
    for i, name in enumerate(NAMES):
        split = "train" if i < 3 else "val"
        _image(root / "images" / split / name, SIZE, [BOX])
        (root / "labels" / split).mkdir(parents=True, exist_ok=True)
        (root / "labels" / split / (Path(name).stem + ".txt")).write_text(_yolo_line(i))
    (root / "data.yaml").write_text(f"path: .\ntrain: images/train\nval: images/val\n{names}")
    return root, root


FORMATS = {"coco": coco_input, "voc": voc_input, "yolo": yolo_flat_input, "ultralytics": ultralytics_input}


@pytest.mark.parametrize("rule", [[], ["--split", "train=0.5,validation=0.5", "--split-rule", "hash"]])
@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_every_annotation_format_writes_one_record_per_image(
    tmp_path: Path, cli: Any, fmt: str, rule: list[str]
) -> None:
    images, ann = FORMATS[fmt](tmp_path)
    res = cli("convert", images, tmp_path / "out", "--annotations", ann, *rule, "--json")
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout)
    man = json.loads((tmp_path / "out" / "dataset.json").read_text())
    records = sum(s["records"] for s in man["splits"].values())
    recs = od_records(tmp_path / "out")
    assert records == len(NAMES) == len(recs) and summary["detection"]["boxes"] == len(NAMES)
    assert sorted(Path(r).name for r in recs) == sorted(NAMES)
    assert man["classes"] == ["circle", "square"]
    assert (tmp_path / "out" / "label_map.pbtxt").read_text().count("item {") == 2
    for i, name in enumerate(NAMES):
        (rec,) = [r for k, r in recs.items() if Path(k).name == name]
        assert rec["image/object/class/text"] == [(b"circle", b"square")[i % 2]]
        got = [rec[f"image/object/bbox/{k}"][0] for k in ("xmin", "ymin", "xmax", "ymax")]
        assert got == pytest.approx([0.2, 0.2, 0.7, 0.6], abs=1e-6)


def _refused(res: Any) -> str:
    assert res.exit_code == 2, res.output
    message = json.loads(res.stdout)["error"]["message"]
    assert "\n" not in message and "Traceback" not in res.output
    return str(message)


def test_two_coco_categories_of_one_name_are_refused_naming_their_ids(tmp_path: Path, cli: Any) -> None:
    cats = [{"id": 1, "name": "circle"}, {"id": 7, "name": "circle"}, {"id": 3, "name": "square"}]
    images, ann = coco_input(tmp_path, cats)
    for extra in ([], ["--labels", tmp_path / "labels.txt"]):  # --labels does not merge them either
        (tmp_path / "labels.txt").write_text("circle\nsquare\n")
        message = _refused(cli("convert", images, tmp_path / "out", "--annotations", ann, *extra, "--json"))
        assert 'category ids 1, 7 share the class name "circle"' in message
        assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "names_file, text, ids",
    [
        ("classes.txt", "circle\ncircle\n", "class numbers 0, 1"),
        ("data.yaml", "names: [circle, square, circle]\n", "class numbers 0, 2"),
        ("data.yaml", "names:\n  0: circle  # round\n  4: circle\n", "class numbers 0, 4"),
    ],
)
def test_two_yolo_numbers_of_one_name_are_refused(
    tmp_path: Path, cli: Any, names_file: str, text: str, ids: str
) -> None:
    images, ann = yolo_flat_input(tmp_path)
    (ann / "classes.txt").unlink()
    (ann / names_file).write_text(text)
    message = _refused(cli("convert", images, tmp_path / "out", "--annotations", ann, "--json"))
    assert f'{ids} share the class name "circle"' in message and names_file in message


def test_a_labels_list_of_one_name_twice_is_refused_naming_its_lines(tmp_path: Path, cli: Any) -> None:
    images, ann = voc_input(tmp_path)
    (tmp_path / "labels.txt").write_text("circle\nsquare\n\ncircle\n")
    res = cli("convert", images, tmp_path / "out", "--annotations", ann, "--labels", tmp_path / "labels.txt", "--json")
    assert 'lines 1, 4 share the class name "circle"' in _refused(res)
