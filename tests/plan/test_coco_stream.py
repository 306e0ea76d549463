"""A COCO file is streamed (conversion.plan.coco): the boxes `json.load` would give, in at most
twice the file's size of memory, whatever order its lists come in."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers import examples
from img2tfrecord.conversion.plan.annotations import RawBox, _digest, read_annotations
from img2tfrecord.errors import UsageError


def coco_like(n_images: int, n_annotations: int, seed: int, *, order: tuple[str, ...]) -> dict[str, Any]:
    """A COCO instances file of train2017's shape: polygons most of the bytes, 80 categories."""
    rnd = random.Random(seed)
    polygons = [[[round(rnd.uniform(0, 640), 2) for _ in range(2 * rnd.randint(4, 14))]] for _ in range(500)]
    images = [
        {
            "license": 3,
            "file_name": f"{i:012d}.jpg",
            "coco_url": f"http://images.cocodataset.org/train2017/{i:012d}.jpg",
            "height": rnd.randint(200, 640),
            "width": rnd.randint(200, 640),
            "date_captured": "2013-11-14 16:28:13",
            "id": i,
        }
        for i in range(1, n_images + 1)
    ]
    annotations = []
    for k in range(n_annotations):
        w, h = round(rnd.uniform(1, 300), 2), round(rnd.uniform(1, 300), 2)
        annotations.append(
            {
                "segmentation": polygons[k % len(polygons)],
                "area": round(w * h * 0.6, 4),
                "iscrowd": int(k % 97 == 0),
                "image_id": rnd.randint(1, n_images),
                "bbox": [round(rnd.uniform(-5, 600), 2), round(rnd.uniform(-5, 600), 2), w, h],
                "category_id": 1 + k % 90 if k % 90 < 80 else 1 + k % 80,
                "id": k + 1,
            }
        )
    categories = [{"supercategory": "thing", "id": c, "name": f"class{c:02d}"} for c in range(1, 81)]
    parts = {"images": images, "annotations": annotations, "categories": categories}
    info = {"description": "generated", "version": "1.0", "year": 2026}
    return {"info": info, **{k: parts[k] for k in order}, "licenses": [{"id": 3, "name": "x"}]}


def reference(path: Path) -> dict[str, Any]:
    """The first implementation's reading, by json.load: file name -> (width, height, source id, boxes)."""
    data = json.loads(path.read_text("utf-8-sig"))
    cats = {c["id"]: str(c["name"]) for c in data.get("categories") or [] if isinstance(c, dict) and "id" in c}
    boxes: dict[Any, list[RawBox]] = {}
    for a in data["annotations"]:
        try:
            x, y, w, h = (float(v) for v in a["bbox"])
            name = cats[a["category_id"]]
        except (KeyError, TypeError, ValueError):
            continue
        area = float(a["area"]) if isinstance(a.get("area"), (int, float)) else -1.0
        boxes.setdefault(a.get("image_id"), []).append(
            RawBox(name=name, xmin=x, ymin=y, xmax=x + w, ymax=y + h, is_crowd=int(bool(a.get("iscrowd"))), area=area)
        )
    return {
        im["file_name"]: (im["width"], im["height"], str(im["id"]), tuple(boxes.get(im["id"], ())))
        for im in data["images"]
    }


@pytest.fixture(params=["streamed", "whole"])
def how(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both ways a COCO file is read: streamed (a large file), or parsed whole (below WHOLE_BELOW)."""
    from img2tfrecord.conversion.plan import coco

    monkeypatch.setattr(coco, "WHOLE_BELOW", 0 if request.param == "streamed" else 1 << 40)
    return str(request.param)


@pytest.mark.parametrize(
    "order",
    [("images", "annotations", "categories"), ("annotations", "categories", "images")],
    ids=["usual", "reordered"],
)
def test_streamed_boxes_equal_json_load(tmp_path: Path, order: tuple[str, ...], how: str) -> None:
    data = coco_like(300, 3000, seed=7, order=order)
    data["annotations"] += [
        {"image_id": 1, "category_id": 1},  # no bbox
        {"image_id": 1, "bbox": [1, 2, 3], "category_id": 1},  # three numbers
        {"image_id": 2, "bbox": [1, 2, 3, 4], "category_id": 999},  # no such category
        {"image_id": 2, "bbox": ["1.5", 2, 3, 4], "category_id": 2, "area": "x", "iscrowd": True},
        [1, 2],  # not an object
        {"image_id": 3, "bbox": [1, [2], 3, 4], "category_id": 2},  # a list in the bbox
        {"image_id": [3], "bbox": {"x": 1}, "category_id": {"id": 2}},  # objects and lists for numbers
    ]
    path = tmp_path / "instances.json"
    path.write_text("\ufeff" + json.dumps(data), encoding="utf-8")
    ann = read_annotations(str(path))
    want = reference(path)
    assert {k: (v.width, v.height, v.source_id, v.boxes) for k, v in ann.by_name.items()} == want
    assert ann.classes == [f"class{c:02d}" for c in range(1, 81)]
    assert [p["path"] for p in ann.problems] == [f"instances.json:annotations[{3000 + i}]" for i in (0, 1, 2, 4, 5, 6)]
    assert ann.digest == _digest(str(tmp_path), ["instances.json"])  # datasets made before keep their digest


@pytest.mark.parametrize(
    "order",
    [("images", "annotations", "categories"), ("annotations", "categories", "images")],
    ids=["usual", "reordered"],
)
def test_streamed_segmentations_equal_json_load(tmp_path: Path, order: tuple[str, ...]) -> None:
    """--masks: each kept box's segmentation as json.load gives it (polygons, RLE counts, RLE text);
    an annotation with none pycocotools can rasterize is left out and named, as one with no bbox."""
    data = coco_like(100, 1000, seed=3, order=order)
    rle = {"counts": [2, 3, 7], "size": [3, 4]}
    data["annotations"][5]["segmentation"] = rle
    data["annotations"][6]["segmentation"] = {"size": [30, 40], "counts": "W36>0U6"}
    bad = [
        {"segmentation": [[1, 2, 3, 4]]},  # two points
        {"segmentation": [[1, 2, 3, 4, 5]]},  # an odd count
        {"segmentation": []},  # no polygon
        {"segmentation": {"counts": [1, 2]}},  # no size
        {"segmentation": {"counts": [1, -2], "size": [1, 1]}},
        {"segmentation": [[1, 2, 3, 4, 5, "6"]]},
        {},  # none
    ]
    for extra in bad:
        data["annotations"].append({"image_id": 1, "bbox": [1, 2, 3, 4], "category_id": 1} | extra)
    path = tmp_path / "instances.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    ann = read_annotations(str(path), masks=True)
    assert [p["path"] for p in ann.problems] == [f"instances.json:annotations[{1000 + i}]" for i in range(len(bad))]
    by_image: dict[Any, list[Any]] = {}
    for a in data["annotations"][:1000]:
        by_image.setdefault(a["image_id"], []).append(a["segmentation"])
    images = {im["file_name"]: im["id"] for im in data["images"]}
    for name, boxes in ann.by_name.items():
        got = []
        for b in boxes.boxes:
            s = ann.segments.segment(b.mask)
            if s.polygons:
                got.append([list(p) for p in s.polygons])
            else:
                got.append({"counts": list(s.counts) or s.text, "size": [s.height, s.width]})
        want = [
            ({"counts": w["counts"], "size": w["size"]} if isinstance(w, dict) else w)
            for w in by_image.get(images[name], [])
        ]
        assert got == want, name
    assert ann.entry()["masks"] is True and "masks" not in read_annotations(str(path)).entry()


def test_both_ways_read_odd_elements_alike(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Elements with objects or lists where numbers or names belong, duplicate keys, lists that are
    not lists: the stream and the whole parse keep the same of them."""
    from img2tfrecord.conversion.plan import coco

    text = (
        '{"categories": [{"id": 1, "name": "a"}, {"id": [2], "name": "b"}, {"id": 3, "name": {"n": 1}}, 7],'
        ' "images": [{"id": 1, "file_name": "x.jpg", "width": "w", "height": 5.5}, {"id": {"k": 1}, "file_name": "y.jpg"},'
        ' {"id": 3, "file_name": ["z"]}, {"id": 4, "file_name": "./w.jpg", "id": 5}, null],'
        ' "annotations": [{"image_id": 1, "category_id": 1, "bbox": [1, 2, 3, 4], "iscrowd": [1], "area": {"a": 1}},'
        ' {"image_id": {"k": 1}, "category_id": 1, "bbox": [0, 0, 1, 1]}, {"image_id": 5, "category_id": 1, "bbox": [0, 0, 2, 2]},'
        ' {"image_id": 1, "category_id": [1], "bbox": [0, 0, 1, 1]}, {"image_id": 1, "category_id": 1, "bbox": [5, 5, 1, "1"],'
        ' "area": true, "iscrowd": "x"}, "x"], "info": {"images": []}}'
    )
    path = tmp_path / "odd.json"
    path.write_text(text)
    got = []
    for below in (0, 1 << 40):
        monkeypatch.setattr(coco, "WHOLE_BELOW", below)
        ann = read_annotations(str(path))
        got.append((ann.digest, ann.classes, dict(ann.by_name), ann.problems))
    assert got[0] == got[1]
    assert sorted(got[0][2]) == ["w.jpg", "x.jpg", "y.jpg"]  # each skipped: no usable width
    assert got[0][2]["x.jpg"].refused.endswith("(images[0]) is not used: width is text, not a whole number of pixels")
    problems = {p["path"]: p["reason"] for p in got[0][3]}
    assert problems["odd.json:images[2]"] == "file_name is a list or an object"
    assert problems["odd.json:images[4]"] == "not an object"
    assert problems["odd.json:annotations[1]"] == "its image_id is a list or an object"


@pytest.mark.parametrize(
    "text",
    [
        "[1, 2]",
        '{"images": {}, "annotations": []}',
        '{"images": [], "annot',
        '{"images": [], "annotations": [{"bbox": [NaN, 1, 2, 3]}]}',
    ],
    ids=["list", "images-object", "cut", "nan"],
)
def test_not_coco_is_a_usage_error(tmp_path: Path, text: str, how: str) -> None:
    path = tmp_path / "a.json"
    path.write_text(text)
    with pytest.raises(UsageError, match="not COCO instances|not JSON"):
        read_annotations(str(path))


def test_deep_nesting_is_one_bad_annotation(tmp_path: Path, how: str) -> None:
    """An annotation nested 100,000 lists deep: one annotation that is not an object, both ways
    (json's recursion limit sends the whole parse to the stream, which nests without limit)."""
    path = tmp_path / "a.json"
    path.write_text('{"images": [], "annotations": ' + "[" * 100_000 + "]" * 100_000 + "}")
    assert read_annotations(str(path)).problems == [{"path": "a.json:annotations[0]", "reason": "no bbox or category"}]


MEASURE = textwrap.dedent(
    """
    import json, sys
    from img2tfrecord.conversion.plan.annotations import read_annotations

    def status(key):
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith(key + ":"))

    try:  # the peak so far reset to now: what imports took is not counted
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        base = status("VmRSS")
    except OSError:
        base = status("VmHWM")
    ann = read_annotations(sys.argv[1], sys.argv[2] == "masks")
    boxes = sum(len(ann.by_name[k].boxes) for k in ann.by_name)
    print(json.dumps({"growth": status("VmHWM") - base, "boxes": boxes}))
    """
)


@pytest.mark.parametrize("masks", ["boxes", "masks"])
def test_a_large_file_is_read_in_at_most_twice_its_size(tmp_path: Path, masks: str) -> None:
    """With --masks too, every polygon kept (flat float64 arrays, not Python lists)."""
    path = tmp_path / "instances_train.json"
    path.write_text(json.dumps(coco_like(20_000, 200_000, seed=1, order=("annotations", "images", "categories"))))
    size = path.stat().st_size
    assert size > 30_000_000
    out = subprocess.run([sys.executable, "-c", MEASURE, str(path), masks], capture_output=True, text=True, check=True)
    got = json.loads(out.stdout)
    assert got["boxes"] == 200_000
    assert got["growth"] <= 2 * size, f"{got['growth']:,} bytes for a file of {size:,}"
    os.unlink(path)


_SCALAR = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.floats(-1e3, 1e3, allow_nan=False),
    st.sampled_from(["1.5", "x", "nan", "2", "", "1_0"]),
)
_VALUE = _SCALAR | st.lists(_SCALAR, max_size=5) | st.dictionaries(st.sampled_from(["a", "id"]), _SCALAR, max_size=2)
_USUAL = st.fixed_dictionaries(
    {
        "image_id": st.integers(1, 4),
        "category_id": st.integers(1, 3),
        "bbox": st.lists(st.integers(-5, 50) | st.floats(-5, 50), min_size=4, max_size=4),
        "area": st.floats(0, 100) | st.integers(0, 100),
        "iscrowd": st.integers(0, 1),
    }
)
_KEYS = ["image_id", "category_id", "bbox", "area", "iscrowd", "segmentation"]
_ODD = st.tuples(
    _USUAL,
    st.dictionaries(st.sampled_from(_KEYS), _VALUE | st.lists(_SCALAR, min_size=4, max_size=4), max_size=2),
    st.sets(st.sampled_from(_KEYS), max_size=2),
).map(lambda t: {k: v for k, v in (t[0] | t[1]).items() if k not in t[2]})  # a usual one, a field or two odd or gone
_ANNOTATION = _USUAL | _ODD | _VALUE


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(annotations=st.lists(_ANNOTATION, max_size=12))
def test_both_ways_read_any_annotation_alike(tmp_path: Path, annotations: list[Any]) -> None:
    """Any annotation element (usual, or with text, lists, objects, bools or nothing where numbers
    and ids belong): the whole parse's fast path keeps what the stream keeps, and names the same problems."""
    from img2tfrecord.conversion.plan import coco

    data = {
        "images": [{"id": i, "file_name": f"{i}.jpg", "width": 60, "height": 40} for i in range(1, 5)],
        "annotations": annotations,
        "categories": [{"id": c, "name": f"c{c}"} for c in range(1, 4)],
    }
    path = tmp_path / "instances.json"
    path.write_text(json.dumps(data))
    got = []
    for below in (0, 1 << 40):
        with pytest.MonkeyPatch.context() as m:
            m.setattr(coco, "WHOLE_BELOW", below)
            ann = read_annotations(str(path))
        got.append((dict(ann.by_name), ann.problems))
    assert got[0] == got[1]


_TOKEN = st.sampled_from(
    [
        "1", "80", "-80", "0", "2.5", "1e30", "1e400", "-1e400", "1E+400", "99999999999999999999", "-0", "80.0",
        '"eighty"', '"80"', "[80]", "{}", "null", "true", '"a.png"', '"./a.png"', '""', '"\\ud800x"',
        '"\\ud83d\\ude00"', '"\\\\ud800"', '"\\u00e9"', "NaN", "Infinity", "[1, 2, 3, 4]", "[1, 2, 3, 1e400]",
        '"\\u0000"', '"\x01"', "0x10", "01", "1.", ".5", "[1, 2, 3, [4]]", '"\xe9"',
    ]
)  # fmt: skip
_PREFIX = st.sampled_from([b"", b"\xef\xbb\xbf", b"\xef\xbb\xbf\xef\xbb\xbf", b"\xff\xfe", b" \x0c", b"\n"])


@settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    image=st.dictionaries(st.sampled_from(["id", "file_name", "width", "height"]), _TOKEN, max_size=4),
    annotation=st.dictionaries(st.sampled_from(["image_id", "category_id", "bbox", "area", "iscrowd"]), _TOKEN),
    category=st.dictionaries(st.sampled_from(["id", "name"]), _TOKEN, max_size=2),
    prefix=_PREFIX,
    utf16=st.booleans(),
)
def test_both_ways_read_any_element_text_alike(
    tmp_path: Path,
    image: dict[str, str],
    annotation: dict[str, str],
    category: dict[str, str],
    prefix: bytes,
    utf16: bool,
) -> None:
    """Issue 38 item 8: any element's text (numbers past a double or an int64, surrogates, byte-order
    marks, UTF-16, control bytes, JSON's non-numbers; odd widths, ids and names) is read alike by
    the whole parse and the stream, or refused by both in the same one line."""
    from img2tfrecord.conversion.plan import coco

    def obj(fields: dict[str, str]) -> str:
        return "{" + ", ".join(f'"{k}": {v}' for k, v in fields.items()) + "}"

    good = '{"id": 7, "file_name": "b.png", "width": 80, "height": 60}'
    text = (
        f'{{"images": [{obj(image)}, {good}], "annotations": [{obj(annotation)},'
        ' {"image_id": 7, "category_id": 1, "bbox": [1, 2, 3, 4]}],'
        f' "categories": [{obj(category)}, {{"id": 1, "name": "c"}}]}}'
    )
    path = tmp_path / "instances.json"
    path.write_bytes(text.encode("utf-16") if utf16 else prefix + text.encode("utf-8", "surrogatepass"))
    got = []
    for below in (0, 1 << 40):
        with pytest.MonkeyPatch.context() as m:
            m.setattr(coco, "WHOLE_BELOW", below)
            try:
                ann = read_annotations(str(path))
            except UsageError as e:
                assert "\n" not in str(e) and "right here" not in str(e)
                got.append(str(e))
            else:
                got.append((ann.classes, dict(ann.by_name), ann.problems))
    assert got[0] == got[1]
