"""Pascal VOC folders as their tools write them and as a hostile user does (conversion.plan.voc):
one broken or foreign XML is a skip of its own, never the folder's end; a field that is no usable
number is a skip with its reason, never a traceback; an XML without `<size>` takes the image's
stored size; two XMLs of one image skip it saying so; labelme2voc's empty elements are defaults."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from test_detection import _image, _voc, od_records

BOX = (8, 6, 28, 18)  # xmin, ymin, xmax, ymax on a 40x30 image: (0.2, 0.2) - (0.7, 0.6)


def _xml(folder: Path, stem: str, body: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{stem}.xml").write_text(body)


def _object(name: str = "cat", box: tuple[Any, ...] = BOX, extra: str = "") -> str:
    corners = "".join(f"<{k}>{v}</{k}>" for k, v in zip(("xmin", "ymin", "xmax", "ymax"), box))
    return f"<object><name>{name}</name>{extra}<bndbox>{corners}</bndbox></object>"


def _annotation(filename: str, size: str, *objects: str) -> str:
    return f"<annotation><folder/><filename>{filename}</filename>{size}{''.join(objects)}</annotation>"


def _size(w: Any, h: Any) -> str:
    return f"<size><width>{w}</width><height>{h}</height><depth>3</depth></size>"


def _convert(cli: Any, tmp_path: Path, *extra: str, out: str = "out") -> Any:
    return cli("convert", tmp_path / "images", tmp_path / out, "--annotations", tmp_path / "xml", "--json", *extra)


@pytest.mark.parametrize("size", ["", _size(0, 0), "<size><depth>3</depth></size>", _size("", "")])
def test_voc_without_a_size_takes_the_images_stored_size(tmp_path: Path, cli: Any, size: str) -> None:
    """Pixel boxes normalised by the image's own size, not read as YOLO's normalised ones (which
    dropped this box as wholly outside and made a 1-pixel box the whole image)."""
    _image(tmp_path / "images" / "a.jpg", (40, 30), [])
    _image(tmp_path / "images" / "b.png", (40, 30), [])
    _xml(tmp_path / "xml", "a", _annotation("a.jpg", size, _object()))
    _xml(tmp_path / "xml", "b", _annotation("b.png", size, _object(box=(0, 0, 1, 1))))
    res = _convert(cli, tmp_path)
    assert res.exit_code == 0, res.output
    d = json.loads(res.stdout)["detection"]
    assert (d["boxes"], d["dropped"], d["clipped"]) == (2, 0, 0)
    recs = od_records(tmp_path / "out")
    for name, want in (("a.jpg", [0.2, 0.2, 0.7, 0.6]), ("b.png", [0, 0, 1 / 40, 1 / 30])):
        got = [recs[name][f"image/object/bbox/{k}"][0] for k in ("xmin", "ymin", "xmax", "ymax")]
        assert got == pytest.approx(want, abs=1e-6)
    assert recs["a.jpg"]["image/object/area"] == pytest.approx([240.0])


def test_a_broken_or_foreign_xml_is_a_skip_of_its_own(tmp_path: Path, cli: Any) -> None:
    """Sorting first, a broken XML and a non-VOC one made the whole folder "no COCO JSON, Pascal VOC
    XML or YOLO txt found"; now the files that parse tell the format, and each bad one is named."""
    for name in ("a.jpg", "b.jpg", "c.jpg"):
        _image(tmp_path / "images" / name, (40, 30), [])
    _xml(tmp_path / "xml", "000", "<annotation><filename>zz.jpg</filename")
    _xml(tmp_path / "xml", "001", "<config><size>3</size></config>")
    _xml(tmp_path / "xml", "a", _annotation("a.jpg", _size(40, 30), _object()))
    _xml(tmp_path / "xml", "b", _annotation("b.jpg", _size(40, 30), _object("dog")))
    _xml(tmp_path / "xml", "c", "<annotation><filename>c.jpg</filename><size><width>40")  # cut short
    res = _convert(cli, tmp_path)
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout)
    assert summary["detection"]["format"] == "voc" and summary["detection"]["boxes"] == 2
    skipped = {s["path"]: s["reason"] for s in summary["skipped"]}
    assert skipped == {
        "000.xml": "is not well-formed XML (line 1, column 29)",
        "001.xml": "not a Pascal VOC annotation (its root element is not <annotation>)",
        "c.jpg": "its annotation c.xml is not well-formed XML (line 1, column 54)",
    }
    assert sorted(od_records(tmp_path / "out")) == ["a.jpg", "b.jpg"]  # c.jpg not written as an image of nothing
    res = _convert(cli, tmp_path, "--strict", out="o2")
    assert res.exit_code == 1 and "000.xml" in json.loads(res.stdout)["error"]["message"], res.output


@pytest.mark.parametrize(
    "xml, reason",
    [
        (_annotation("c.jpg", _size("nan", 30), _object()), "<size>'s <width> is not a whole number of pixels"),
        (_annotation("c.jpg", _size("inf", 30), _object()), "<size>'s <width> is not a whole number of pixels"),
        (_annotation("c.jpg", _size("1e30", 30), _object()), "<size>'s <width> is not a whole number of pixels"),
        (_annotation("c.jpg", _size("1e400", 30), _object()), "<size>'s <width> is not a whole number of pixels"),
        (_annotation("c.jpg", _size("-40", 30), _object()), "<size>'s <width> is not a whole number of pixels"),
        (_annotation("c.jpg", _size("forty", 30), _object()), "<size>'s <width> is not a number"),
        (_annotation("c.jpg", "", _object(extra="<difficult>inf</difficult>")), "object 0's <difficult> is not 0 or 1"),
        (
            _annotation("c.jpg", "", _object(extra="<truncated>1e19</truncated>")),
            "object 0's <truncated> is not 0 or 1",
        ),
        (
            _annotation("c.jpg", "", _object(), _object(box=(1, 2, "1e400", 4))),
            "object 1's <xmax> is not a finite number",
        ),
        (_annotation("c.jpg", "", _object(box=(1, 2, "nan", 4))), "object 0's <xmax> is not a finite number"),
        (_annotation("c.jpg", "", _object(box=(1, 2, "", 4))), "object 0's <xmax> is missing"),
        (_annotation("c.jpg", "", _object(name=" ")), "object 0 has no <name>"),
        (_annotation("c.jpg", "", "<object><name>cat</name></object>"), "object 0 has no <bndbox>"),
    ],
)
def test_a_voc_field_of_no_usable_number_skips_its_image_with_the_reason(
    tmp_path: Path, cli: Any, xml: str, reason: str
) -> None:
    """No traceback (OverflowError, int64 overflow), no "the annotations name no class": the image
    the XML is of is skipped, naming the XML and the field; the other images keep their boxes."""
    _image(tmp_path / "images" / "a.jpg", (40, 30), [])
    _image(tmp_path / "images" / "c.jpg", (40, 30), [])
    _xml(tmp_path / "xml", "a", _annotation("a.jpg", _size(40, 30), _object()))
    _xml(tmp_path / "xml", "c", xml)
    res = _convert(cli, tmp_path)
    assert res.exit_code == 0, res.output
    (skip,) = json.loads(res.stdout)["skipped"]
    assert skip["path"] == "c.jpg"
    assert skip["reason"].startswith(f"its annotation c.xml is not a usable Pascal VOC annotation: {reason}")
    assert sorted(od_records(tmp_path / "out")) == ["a.jpg"]


def test_two_xmls_of_one_image_skip_it_naming_both(tmp_path: Path, cli: Any) -> None:
    _image(tmp_path / "images" / "a.jpg", (40, 30), [])
    _image(tmp_path / "images" / "d.jpg", (40, 30), [])
    _xml(tmp_path / "xml", "a", _annotation("a.jpg", _size(40, 30), _object()))
    _xml(tmp_path / "xml", "d1", _annotation("d.jpg", _size(40, 30), _object()))
    _xml(tmp_path / "xml", "d2", _annotation("d.jpg", _size(40, 30), _object("dog")))
    res = _convert(cli, tmp_path)
    assert res.exit_code == 0, res.output
    (skip,) = json.loads(res.stdout)["skipped"]
    assert skip["path"] == "d.jpg"
    assert skip["reason"].startswith("two annotations name it, d1.xml and d2.xml: which one holds its boxes")


def test_labelme2voc_empty_elements_are_their_defaults(tmp_path: Path, cli: Any) -> None:
    """labelme2voc writes `<folder/>`, `<difficult/>`, `<truncated/>`: read as 0, the box kept."""
    _image(tmp_path / "images" / "a.jpg", (40, 30), [])
    body = _annotation("a.jpg", _size(40, 30), _object(extra="<difficult/><truncated/><pose/>"))
    _xml(tmp_path / "xml", "a", body)
    res = _convert(cli, tmp_path)
    assert res.exit_code == 0, res.output
    rec = od_records(tmp_path / "out")["a.jpg"]
    assert (rec["image/object/difficult"], rec["image/object/truncated"]) == ([0], [0])
    _voc(tmp_path / "xml", "a.jpg", (40, 30), [("cat", list(BOX), 1, 1)])  # and 0/1 as written
    res = cli("convert", tmp_path / "images", tmp_path / "o2", "--annotations", tmp_path / "xml", "--json")
    rec = od_records(tmp_path / "o2")["a.jpg"]
    assert (rec["image/object/difficult"], rec["image/object/truncated"]) == ([1], [1])


@pytest.mark.parametrize(
    "body, said",
    [
        ("<annotation><filename>a.jpg</filename", "a.xml is not well-formed XML (line 1, column 28)"),
        ("<config/>", "a.xml not a Pascal VOC annotation (its root element is not <annotation>)"),
    ],
)
def test_one_xml_given_that_is_no_voc_is_named_in_one_line(tmp_path: Path, cli: Any, body: str, said: str) -> None:
    """Was read as COCO JSON and refused as such; one VOC XML given works as a folder of one."""
    _image(tmp_path / "images" / "a.jpg", (40, 30), [])
    _xml(tmp_path / "xml", "a", body)
    res = cli("convert", tmp_path / "images", tmp_path / "out", "--annotations", tmp_path / "xml" / "a.xml", "--json")
    assert res.exit_code == 2, res.output
    message = json.loads(res.stdout)["error"]["message"]
    assert message.endswith(said) and "\n" not in message
    _xml(tmp_path / "xml", "a", _annotation("a.jpg", _size(40, 30), _object()))
    res = cli("convert", tmp_path / "images", tmp_path / "out", "--annotations", tmp_path / "xml" / "a.xml", "--json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["detection"]["boxes"] == 1
