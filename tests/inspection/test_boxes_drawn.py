"""A detection dataset's boxes drawn by `inspect --contact-sheet` and `report` (issue 30 item 4):
on a converted COCO set, the sheet's pixels show each outline where the box falls on the
thumbnail, in its class's colour; the report holds one overlay per box in percentages of the
thumbnail; hostile boxes are clipped or left out; a classification sheet is as before, byte for byte."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from PIL import Image

from img2tfrecord.format.framing import TFRecordFile
from img2tfrecord.inspection.boxes import PALETTE, Box
from img2tfrecord.inspection.records import parse_record
from img2tfrecord.inspection.sheet import GAP, THUMB
from inspect_helpers import encode, example, write_frames

GREY = (128, 128, 128)
# file name -> (size, boxes [x, y, w, h, COCO category id]); categories 5: cat (id 1), 8: dog (id 2)
IMAGES: dict[str, Any] = {
    "wide.png": ((120, 60), [[30, 15, 60, 30, 5]]),
    "tall.png": ((60, 120), [[6, 12, 24, 60, 8], [30, 70, 24, 40, 5]]),
    "none.png": ((40, 40), []),
}


@pytest.fixture(scope="module")
def detection(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A COCO set of flat grey PNGs, converted with `--annotations`."""
    from img2tfrecord.cli import main

    root = tmp_path_factory.mktemp("boxes")
    (root / "in").mkdir()
    images, annotations = [], []
    for i, (name, (size, boxes)) in enumerate(IMAGES.items(), 1):
        Image.new("RGB", size, GREY).save(root / "in" / name)
        images.append({"id": i, "file_name": name, "width": size[0], "height": size[1]})
        annotations += [
            {"id": len(annotations) + 1, "image_id": i, "bbox": b[:4], "category_id": b[4], "iscrowd": 0} for b in boxes
        ]
    categories = [{"id": 5, "name": "cat"}, {"id": 8, "name": "dog"}]
    ann = root / "instances.json"
    ann.write_text(json.dumps({"images": images, "annotations": annotations, "categories": categories}))
    out = root / "out"
    res = CliRunner().invoke(main, ["convert", str(root / "in"), str(out), "--annotations", str(ann)])
    assert res.exit_code == 0, res.output
    return out


def _sheet(out: Path, path: Path, n: int = 4) -> dict[str, Any]:
    from img2tfrecord.cli.inspect import inspect_command

    r = CliRunner().invoke(inspect_command, [str(out), "--contact-sheet", str(path), "-n", str(n), "--json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)["contact_sheet"]


def _cells(out: Path) -> dict[str, tuple[int, int]]:
    """file name -> (row, column) on the sheet: rows by image label (an image without boxes has no
    class list: in the first class's row, cat's, as dataset.json counts it), cells in record order."""
    where: dict[str, tuple[int, int]] = {}
    per_row: dict[int, int] = {}
    for shard in sorted(out.glob("train-*")):
        for rec in TFRecordFile(shard):
            info = parse_record(rec)
            assert info.filename is not None
            row = 0 if info.label is None else info.label
            where[info.filename] = (row, per_row.get(row, 0))
            per_row[row] = per_row.get(row, 0) + 1
    return where


def test_sheet_outlines_each_box_on_its_thumbnail_in_its_class_colour(detection: Path, tmp_path: Path) -> None:
    sheet = _sheet(detection, tmp_path / "s.png")
    assert sheet["row_names"] == ["0  cat", "1  dog"]  # no "no label" row
    im = Image.open(tmp_path / "s.png").convert("RGB")
    cells = _cells(detection)
    for name, ((w, h), boxes) in IMAGES.items():
        row, col = cells[name]
        scale = THUMB / max(w, h)  # contained in the cell, centred
        tw, th = round(w * scale), round(h * scale)
        left = sheet["label_width"] + col * (THUMB + GAP) + (THUMB - tw) // 2
        top = GAP + row * (THUMB + GAP) + (THUMB - th) // 2
        assert im.getpixel((left + tw // 2, top + 1)) == GREY, name
        for x, y, bw, bh, cat in boxes:
            colour = PALETTE[0] if cat == 5 else PALETTE[1]
            x0, y0 = left + round(x / w * tw), top + round(y / h * th)
            x1, y1 = left + round((x + bw) / w * tw) - 1, top + round((y + bh) / h * th) - 1
            mid_y = (y0 + y1) // 2 + 4  # below the class name's tab
            assert im.getpixel((x0, mid_y)) == colour, name  # the left edge
            assert im.getpixel((x1, mid_y)) == colour, name  # the right edge
            assert im.getpixel(((x0 + x1) // 2, y1)) == colour, name  # the bottom edge
            assert im.getpixel(((x0 + x1) // 2, mid_y)) == GREY, name  # inside: the picture
            assert im.getpixel((x0 - 3, mid_y)) == GREY, name  # outside


def test_report_has_one_overlay_per_box_in_percentages_of_the_thumbnail(detection: Path, tmp_path: Path) -> None:
    from img2tfrecord.inspection.report import report

    html = tmp_path / "r.html"
    report(detection, html, per_class=10)
    text = html.read_text()
    figures = re.findall(r'<figure class="thumb".*?</figure>', text, re.S)
    seen = {}
    for fig in figures:
        name = re.search(r'alt="([^"]+)"', fig)
        assert name
        seen[name[1]] = re.findall(
            r'<div class="box" data-label="(\d+)" style="left:([\d.]+)%;top:([\d.]+)%;width:([\d.]+)%;'
            r'height:([\d.]+)%;border-color:(#[0-9a-f]{6})" title="(\w+)">',
            fig,
        )
    assert set(seen) == set(IMAGES)
    for name, ((w, h), boxes) in IMAGES.items():
        want = [
            (
                "1" if cat == 5 else "2",
                *(f"{100 * v:.2f}" for v in (x / w, y / h, bw / w, bh / h)),
                "#{:02x}{:02x}{:02x}".format(*(PALETTE[0] if cat == 5 else PALETTE[1])),
                "cat" if cat == 5 else "dog",
            )
            for x, y, bw, bh, cat in boxes
        ]
        assert seen[name] == want, name
    assert re.search(r'id="boxes-count" data-value="3"', text)
    assert re.search(r'data-class="cat" data-value="2"', text) and re.search(r'data-class="dog" data-value="1"', text)


def test_report_counts_every_records_boxes_per_class(detection: Path, tmp_path: Path) -> None:
    """The boxes per class are dataset.json's, over every record, not the sampled thumbnails'
    (one a class here, which hold fewer than the 3 boxes); for a dataset.json without them, the
    thumbnails' count, said to be one."""
    import shutil

    from img2tfrecord.inspection.report import report

    man = json.loads((detection / "dataset.json").read_text())
    assert man["metadata"]["detection"]["boxes_per_class"] == {"cat": 2, "dog": 1}
    html = tmp_path / "r.html"
    report(detection, html, per_class=1)
    text = html.read_text()
    assert len(re.findall(r'<div class="box"', text)) < 3  # the sample does not hold every box
    table = re.search(r'<table id="box-classes">.*?</table>', text, re.S)
    assert table and re.findall(r'data-class="(\w+)" data-value="(\d+)"', table[0]) == [("cat", "2"), ("dog", "1")]
    assert "on the sampled thumbnails" not in text

    older = tmp_path / "older"
    shutil.copytree(detection, older)
    del man["metadata"]["detection"]["boxes_per_class"]
    (older / "dataset.json").write_text(json.dumps(man, indent=2))
    report(older, html, per_class=10)
    text = html.read_text()
    table = re.search(r'<table id="box-classes">.*?</table>', text, re.S)
    assert table and "boxes on the sampled thumbnails" in table[0]
    assert re.findall(r'data-class="(\w+)" data-value="(\d+)"', table[0]) == [("cat", "2"), ("dog", "1")]


def _hostile(tmp_path: Path) -> Path:
    """A record whose boxes are every kind of wrong, beside one good box, and label lists of another length."""
    inf, nan = math.inf, math.nan
    data = example(
        {
            "image/encoded": ("bytes", [encode(Image.new("RGB", (50, 50), GREY), "PNG")]),
            "image/class/label": ("int64", [0]),
            "image/object/bbox/xmin": ("float", [0.2, nan, 0.9, -5.0, 0.1, inf, 0.5]),
            "image/object/bbox/xmax": ("float", [0.6, 0.5, 0.1, 9.0, 0.1, 0.5, 0.7]),
            "image/object/bbox/ymin": ("float", [0.2, 0.1, 0.1, -1.0, 0.1, 0.1]),
            "image/object/bbox/ymax": ("float", [0.6, 0.5, 0.5, 0.5, 0.9, 0.2]),
            "image/object/class/label": ("int64", [3, 1]),
            "image/object/class/text": ("bytes", [b"a\nb" * 40, b"x"]),
        }
    )
    path = tmp_path / "hostile.tfrecord"
    write_frames(path, [data])
    return path


def test_hostile_boxes_are_clipped_or_left_out(tmp_path: Path) -> None:
    path = _hostile(tmp_path)
    (rec,) = list(TFRecordFile(path))
    info = parse_record(rec)
    # kept: the good box; the one past every edge, clipped whole; NaN, inf, inside-out and zero-width
    # left out; the seventh has no ymin (shorter list) and is not a box
    assert info.objects == (
        Box(pytest.approx(0.2), pytest.approx(0.2), pytest.approx(0.6), pytest.approx(0.6), 3, "a\nb" * 40),
        Box(0.0, 0.0, 1.0, pytest.approx(0.5), None, None),
    )
    sheet = _sheet(path, tmp_path / "h.png", 1)
    assert sheet["unreadable"] == 0
    im = Image.open(tmp_path / "h.png").convert("RGB")
    left = sheet["label_width"]
    assert im.getpixel((left, GAP + THUMB // 4)) == PALETTE[0]  # the clipped box's left edge: the cell's
    assert im.getpixel((left + round(0.2 * THUMB), GAP + THUMB // 2)) == PALETTE[2]  # class 3's colour


def test_hostile_boxes_reach_the_report_page_clipped(tmp_path: Path) -> None:
    from img2tfrecord.inspection.report.sample import _thumb

    (rec,) = list(TFRecordFile(_hostile(tmp_path)))

    class Cat:  # the catalog columns `_thumb` reads for its caption
        rels, splits, classes = [b"x/h.png"], ["train"], ["x"]

    t = _thumb(Cat(), 0, rec, 10**8)  # type: ignore[arg-type]
    assert t.uri and [(b.x0, b.x1, b.label) for b in t.boxes][1] == (0.0, 1.0, None)
    assert t.cost == len(t.uri) + 2 * 200


def test_a_classification_sheet_is_the_one_before_boxes_were_drawn(tmp_path: Path) -> None:
    """Byte for byte the sheet of commit 12b77fa (the tool just before this feature), run from its
    own sources in a child process, for a dataset without boxes."""
    from helpers import make_dataset
    from img2tfrecord.conversion.convert import convert

    repo = Path(__file__).resolve().parents[2]
    base = "12b77fa"
    old = tmp_path / "old"
    old.mkdir()
    try:
        tar = subprocess.run(["git", "-C", str(repo), "archive", base, "src"], capture_output=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        pytest.skip(f"not a git checkout with commit {base}")
    subprocess.run(["tar", "-x", "-C", str(old)], input=tar.stdout, check=True)
    make_dataset(tmp_path / "in", {"cat": 5, "dog": 4}, size=(80, 60))
    convert(str(tmp_path / "in"), str(tmp_path / "out"))
    args = ["inspect", str(tmp_path / "out"), "--contact-sheet", str(tmp_path / "old.png"), "-n", "4"]
    code = (
        "import sys, img2tfrecord; assert img2tfrecord.__file__.startswith(sys.argv[1]), img2tfrecord.__file__\n"
        "from img2tfrecord.cli import main\nmain(sys.argv[2:], standalone_mode=False)"
    )
    env = {**os.environ, "PYTHONPATH": str(old / "src")}
    subprocess.run([sys.executable, "-c", code, str(old / "src"), *args], check=True, env=env, capture_output=True)
    _sheet(tmp_path / "out", tmp_path / "new.png")
    assert _without_marker((tmp_path / "new.png").read_bytes()) == (tmp_path / "old.png").read_bytes()


def _without_marker(png: bytes) -> bytes:
    """The PNG without the text chunk that marks it as our sheet (inspection.outputs.SHEET_MARKER),
    which the sheets of that commit did not carry: the pixels and their encoding are compared."""
    import struct

    from img2tfrecord.inspection.outputs import SHEET_MARKER

    out, at = [png[:8]], 8
    while at < len(png):
        (n,) = struct.unpack(">I", png[at : at + 4])
        chunk = png[at : at + 12 + n]
        if chunk[4:8] != b"tEXt" or SHEET_MARKER.encode() not in chunk:
            out.append(chunk)
        at += 12 + n
    assert out[-1][4:8] == b"IEND"  # walked chunk by chunk to the end
    return b"".join(out)
