"""Object detection input (`convert --annotations`): COCO, Pascal VOC and YOLO, read back by
TensorFlow's own parser with the Object Detection API's feature spec.

The corpus is generated with Pillow: each box is a filled rectangle of its own colour in the
pixels as stored, so a test can tell that a box still covers its object after the encoder turned
an EXIF-rotated photo upright."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

COLOURS = [(220, 30, 30), (30, 200, 30), (30, 30, 220), (220, 220, 30)]
CLASSES = ["cat", "dog", "person"]  # COCO category ids 3, 7, 9: label map ids 1, 2, 3


def _image(path: Path, size: tuple[int, int], boxes: list[list[float]], orientation: int = 1) -> None:
    """A grey image with each box (x, y, w, h in stored pixels) filled in its colour."""
    im = Image.new("RGB", size, (128, 128, 128))
    for i, (x, y, w, h) in enumerate(boxes):
        x0, y0, x1, y1 = max(0, round(x)), max(0, round(y)), min(size[0], round(x + w)), min(size[1], round(y + h))
        if x1 > x0 and y1 > y0:
            im.paste(COLOURS[i % len(COLOURS)], (x0, y0, x1, y1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fmt = {".jpg": "JPEG", ".png": "PNG", ".webp": "WEBP", ".gif": "GIF"}[path.suffix]
    extra: dict[str, Any] = {"quality": 95} if fmt == "JPEG" else {"lossless": True} if fmt == "WEBP" else {}
    if orientation != 1:
        exif = Image.Exif()
        exif[0x0112] = orientation
        extra["exif"] = exif.tobytes()
    im.save(path, fmt, **extra)


# file name -> (stored size, annotated size, boxes [x, y, w, h, category id, iscrowd], EXIF orientation)
COCO_IMAGES: dict[str, Any] = {
    "plain.jpg": ((64, 48), (64, 48), [[4, 6, 20, 10, 3, 0], [30, 20, 30, 24, 7, 1]], 1),
    "rotated.jpg": ((64, 48), (64, 48), [[2, 4, 24, 12, 9, 0]], 6),
    "turned_by_tool.jpg": ((64, 48), (48, 64), [[2, 4, 10, 10, 3, 0]], 6),  # annotated upright: skipped
    "outside.png": ((40, 40), (40, 40), [[-8, 10, 20, 10, 3, 0], [50, 50, 5, 5, 7, 0], [5, 5, 0, 8, 9, 0]], 1),
    "sub/anim.gif": ((32, 32), (32, 32), [[8, 8, 16, 8, 7, 0]], 1),
    "photo.webp": ((30, 50), (30, 50), [[1, 2, 10, 40, 9, 0]], 1),
}


def coco_corpus(root: Path) -> Path:
    """Images below `root/images`, their COCO JSON at `root/instances.json`; one image unannotated."""
    images, annotations = [], []
    for i, (name, (stored, annotated, boxes, orientation)) in enumerate(COCO_IMAGES.items(), 1):
        _image(root / "images" / name, stored, [b[:4] for b in boxes], orientation)
        images.append({"id": i, "file_name": name, "width": annotated[0], "height": annotated[1]})
        for b in boxes:
            annotations.append(
                {"id": len(annotations) + 1, "image_id": i, "bbox": b[:4], "category_id": b[4], "iscrowd": b[5]}
                | ({"area": 123.5} if b[5] else {})
            )
    _image(root / "images" / "empty.png", (20, 20), [])
    categories = [{"id": k, "name": n} for k, n in ((9, "person"), (3, "cat"), (7, "dog"))]
    path = root / "instances.json"
    path.write_text(json.dumps({"images": images, "annotations": annotations, "categories": categories}))
    return path


OD_SPEC_KEYS = {
    "image/height": "int",
    "image/width": "int",
    "image/filename": "str",
    "image/source_id": "str",
    "image/key/sha256": "str",
    "image/encoded": "str",
    "image/format": "str",
    "image/object/bbox/xmin": "float[]",
    "image/object/bbox/xmax": "float[]",
    "image/object/bbox/ymin": "float[]",
    "image/object/bbox/ymax": "float[]",
    "image/object/class/label": "int[]",
    "image/object/class/text": "str[]",
    "image/object/is_crowd": "int[]",
    "image/object/area": "float[]",
    "image/object/difficult": "int[]",
    "image/object/truncated": "int[]",
}


def od_records(out: Path) -> dict[str, dict[str, Any]]:
    """filename -> the record as TensorFlow's parser reads it with the Object Detection API's spec
    (FixedLenFeature for the image keys, VarLenFeature for the object keys), the image decoded."""
    import tensorflow as tf

    kinds = {"int": tf.int64, "float": tf.float32, "str": tf.string}
    spec = {
        k: tf.io.VarLenFeature(kinds[t[:-2]]) if t.endswith("[]") else tf.io.FixedLenFeature((), kinds[t])
        for k, t in OD_SPEC_KEYS.items()
    }
    got = {}
    shards = [
        sh["file"] for sp in json.loads((out / "dataset.json").read_text())["splits"].values() for sh in sp["shards"]
    ]
    for shard in shards:
        for raw in tf.data.TFRecordDataset(str(out / shard)):
            ex = tf.io.parse_single_example(raw, spec)
            rec = {k: (tf.sparse.to_dense(v) if isinstance(v, tf.SparseTensor) else v).numpy() for k, v in ex.items()}
            rec = {k: (v.tolist() if hasattr(v, "tolist") else v) for k, v in rec.items()}
            rec["pixels"] = tf.io.decode_image(ex["image/encoded"], expand_animations=False).numpy()
            got[rec["image/filename"].decode()] = rec
    return got


def expected_coco(name: str) -> list[tuple[float, float, float, float, int, int]]:
    """Each kept box of `name`, clipped and normalised by hand: (xmin, ymin, xmax, ymax, label id, crowd)."""
    (w, h), _, boxes, _ = COCO_IMAGES[name]
    ids = {3: 1, 7: 2, 9: 3}
    out = []
    for x, y, bw, bh, cat, crowd in boxes:
        x0, y0, x1, y1 = max(x, 0), max(y, 0), min(x + bw, w), min(y + bh, h)
        if bw > 0 and bh > 0 and x1 > x0 and y1 > y0:
            out.append((x0 / w, y0 / h, x1 / w, y1 / h, ids[cat], crowd))
    return out


def boxes_of(rec: dict[str, Any]) -> list[tuple[float, ...]]:
    cols = [rec[f"image/object/bbox/{k}"] for k in ("xmin", "ymin", "xmax", "ymax")]
    return [
        (*b, lab, crowd) for *b, lab, crowd in zip(*cols, rec["image/object/class/label"], rec["image/object/is_crowd"])
    ]


def same_boxes(got: list[tuple[float, ...]], want: list[tuple[float, ...]]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g[4:] == w[4:]
        assert g[:4] == pytest.approx(w[:4], abs=1e-6)


@pytest.fixture(scope="module")
def coco_out(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Any]:
    from click.testing import CliRunner

    from img2tfrecord.cli import main

    root = tmp_path_factory.mktemp("coco")
    ann = coco_corpus(root)
    out = root / "out"
    res = CliRunner().invoke(main, ["convert", str(root / "images"), str(out), "--annotations", str(ann), "--json"])
    assert res.exit_code == 0, res.output
    return root, out, json.loads(res.stdout)


def test_coco_boxes_read_back_by_tensorflow_with_the_object_detection_spec(coco_out: Any) -> None:
    root, out, summary = coco_out
    recs = od_records(out)
    assert sorted(recs) == ["empty.png", "outside.png", "photo.webp", "plain.jpg", "rotated.jpg", "sub/anim.gif"]
    for name, rec in recs.items():
        stored = Image.open(root / "images" / name).size
        assert (rec["image/width"], rec["image/height"]) == stored
        assert rec["pixels"].shape[:2] == (stored[1], stored[0])  # tf.io.decode_image agrees
        assert rec["image/key/sha256"].decode() == hashlib.sha256(rec["image/encoded"]).hexdigest()
        if name == "empty.png":
            assert boxes_of(rec) == [] and rec["image/source_id"] == b"empty.png"
            continue
        same_boxes(boxes_of(rec), expected_coco(name))
        assert rec["image/source_id"].decode() == str(list(COCO_IMAGES).index(name) + 1)
    plain = recs["plain.jpg"]
    assert plain["image/object/class/text"] == [b"cat", b"dog"]
    assert plain["image/object/area"] == pytest.approx([200.0, 123.5])  # the box's, then COCO's own
    assert recs["rotated.jpg"]["image/format"] == b"JPEG"  # kept as stored: boxes as annotated
    assert (out / "label_map.pbtxt").read_text() == (
        "item {\n  id: 1\n  name: 'cat'\n}\nitem {\n  id: 2\n  name: 'dog'\n}\nitem {\n  id: 3\n  name: 'person'\n}\n"
    )
    assert (out / "labels.txt").read_text() == "cat\ndog\nperson\n"


def test_clipped_dropped_and_mismatched_are_counted_and_named(coco_out: Any) -> None:
    _, out, summary = coco_out
    d = summary["detection"]
    assert (d["format"], d["boxes"], d["clipped"], d["dropped"], d["empty_images"]) == ("coco", 6, 1, 2, 1)
    problems = {(p["path"], p["box"]): p["reason"] for p in d["box_problems"]}
    assert problems == {
        ("outside.png", "0"): "partly outside the image: clipped",
        ("outside.png", "1"): "wholly outside the image: dropped",
        ("outside.png", "2"): "zero area: dropped",
    }
    manifest = json.loads((out / "dataset.json").read_text())
    assert manifest["metadata"]["detection"]["box_problems"] == d["box_problems"]
    assert manifest["features"]["image/object/bbox/xmin"] == "float"
    (skip,) = manifest["skipped"]
    assert skip["path"] == "turned_by_tool.jpg"
    assert "annotation is of a 48x64 image, the file stores 64x48 pixels" in skip["reason"]


def _centre_colour(rec: dict[str, Any], i: int) -> tuple[int, ...]:
    h, w = rec["pixels"].shape[:2]
    x = (rec["image/object/bbox/xmin"][i] + rec["image/object/bbox/xmax"][i]) / 2
    y = (rec["image/object/bbox/ymin"][i] + rec["image/object/bbox/ymax"][i]) / 2
    return tuple(int(v) for v in rec["pixels"][int(y * h), int(x * w)][:3])


@pytest.mark.parametrize("args", [["--encoding", "png"], ["--resize", "32"]])
def test_boxes_turn_with_pixels_the_encoder_turns_upright(tmp_path: Path, cli: Any, args: list[str]) -> None:
    ann = coco_corpus(tmp_path)
    res = cli("convert", tmp_path / "images", tmp_path / "out", "--annotations", ann, *args)
    assert res.exit_code == 0, res.output
    recs = od_records(tmp_path / "out")
    rotated = recs["rotated.jpg"]
    assert rotated["pixels"].shape[:2] == (64 if "--encoding" in args else 43, 48 if "--encoding" in args else 32)
    colour = _centre_colour(rotated, 0)
    assert max(abs(a - b) for a, b in zip(colour, COLOURS[0])) < 40, colour  # the box still covers its object
    for name in ("plain.jpg", "photo.webp", "sub/anim.gif"):  # not turned: as annotated, --resize or not
        same_boxes(boxes_of(recs[name]), expected_coco(name))
        for i in range(len(expected_coco(name))):
            assert max(abs(a - b) for a, b in zip(_centre_colour(recs[name], i), COLOURS[i])) < 40


def test_strict_fails_on_a_clipped_box_and_skip_empty_drops_images_without_boxes(tmp_path: Path, cli: Any) -> None:
    ann = coco_corpus(tmp_path)
    res = cli("convert", tmp_path / "images", tmp_path / "out", "--annotations", ann, "--strict")
    assert res.exit_code == 1
    assert "box 0 of outside.png: partly outside the image: clipped (and 2 other boxes)" in res.stderr
    assert not (tmp_path / "out").exists()
    res = cli("convert", tmp_path / "images", tmp_path / "out", "--annotations", ann, "--skip-empty", "--json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["detection"]["skipped_empty"] == 1
    assert "empty.png" not in od_records(tmp_path / "out")
    res = cli("convert", tmp_path / "images", tmp_path / "o2", "--skip-empty", "--json")
    assert res.exit_code == 2 and json.loads(res.stdout)["error"]["kind"] == "usage"


def test_update_keeps_boxes_and_takes_changed_annotations(tmp_path: Path, cli: Any) -> None:
    ann = coco_corpus(tmp_path)
    src, out = tmp_path / "images", tmp_path / "out"
    assert cli("convert", src, out, "--annotations", ann).exit_code == 0
    _image(src / "new.png", (16, 16), [])  # an image the annotations do not name: kept with no box
    res = cli("update", src, out)
    assert res.exit_code == 0, res.output
    recs = od_records(out)
    assert boxes_of(recs["new.png"]) == [] and len(recs) == 7
    same_boxes(boxes_of(recs["plain.jpg"]), expected_coco("plain.jpg"))
    data = json.loads(ann.read_text())
    data["annotations"][0]["bbox"] = [5, 6, 20, 10]  # one box moved: its image is a changed image
    data["images"][2] |= {"width": 64, "height": 48}  # turned_by_tool.jpg's size fixed: tried again
    ann.write_text(json.dumps(data))
    res = cli("update", src, out, "--json")
    assert res.exit_code == 0, res.output
    splits = json.loads(res.stdout)["splits"].values()
    assert (sum(sp["changed"] for sp in splits), sum(sp["retried"] for sp in splits)) == (1, 1)
    moved = od_records(out)["plain.jpg"]
    assert moved["image/object/bbox/xmin"][0] == pytest.approx(5 / 64, abs=1e-6)
    assert len(od_records(out)) == 8 and len(boxes_of(od_records(out)["turned_by_tool.jpg"])) == 1
    same_boxes(boxes_of(od_records(out)["rotated.jpg"]), boxes_of(recs["rotated.jpg"]))


def _voc(folder: Path, name: str, size: tuple[int, int], objects: list[tuple[str, list[int], int, int]]) -> None:
    """One Pascal VOC XML: objects as (class, [xmin, ymin, xmax, ymax], difficult, truncated)."""
    folder.mkdir(parents=True, exist_ok=True)
    objs = "".join(
        f"<object><name>{c}</name><difficult>{d}</difficult><truncated>{t}</truncated><bndbox>"
        f"<xmin>{b[0]}</xmin><ymin>{b[1]}</ymin><xmax>{b[2]}</xmax><ymax>{b[3]}</ymax></bndbox></object>"
        for c, b, d, t in objects
    )
    xml = (
        f"<annotation><folder>JPEGImages</folder><filename>{name}</filename><size><width>{size[0]}</width>"
        f"<height>{size[1]}</height><depth>3</depth></size>{objs}</annotation>"
    )
    (folder / (Path(name).stem + ".xml")).write_text(xml)


def test_pascal_voc_folder(tmp_path: Path, cli: Any) -> None:
    objects = [("horse", [10, 5, 30, 25], 1, 0), ("bird", [0, 0, 50, 12], 0, 1), ("horse", [35, 30, 60, 45], 0, 0)]
    _image(tmp_path / "JPEGImages" / "000001.jpg", (50, 40), [[10, 5, 20, 20], [0, 0, 50, 12]])
    _voc(tmp_path / "Annotations", "000001.jpg", (50, 40), objects)
    _image(tmp_path / "JPEGImages" / "000002.png", (20, 20), [])
    _voc(tmp_path / "Annotations", "000002.png", (20, 20), [])
    res = cli("convert", tmp_path / "JPEGImages", tmp_path / "out", "--annotations", tmp_path / "Annotations", "--json")
    assert res.exit_code == 0, res.output
    d = json.loads(res.stdout)["detection"]
    assert (d["format"], d["boxes"], d["clipped"], d["empty_images"]) == ("voc", 3, 1, 1)
    rec = od_records(tmp_path / "out")["000001.jpg"]
    want = [(10 / 50, 5 / 40, 30 / 50, 25 / 40, 2, 0), (0, 0, 1, 12 / 40, 1, 0), (35 / 50, 30 / 40, 1, 1, 2, 0)]
    same_boxes(boxes_of(rec), want)  # classes sorted: bird 1, horse 2
    assert rec["image/object/difficult"] == [1, 0, 0] and rec["image/object/truncated"] == [0, 1, 0]
    assert rec["image/object/class/text"] == [b"horse", b"bird", b"horse"]
    assert rec["image/object/area"] == pytest.approx([400.0, 600.0, 150.0])


@pytest.mark.parametrize("names", ["classes.txt", "obj.names", "data.yaml"])
def test_yolo_folder_with_its_classes_file(tmp_path: Path, cli: Any, names: str) -> None:
    labels = tmp_path / "labels"
    labels.mkdir()
    text = "names:\n  0: boat\n  1: car\n" if names == "data.yaml" else "boat\ncar\n"
    (labels / names).write_text(text)
    _image(tmp_path / "images" / "a.jpg", (80, 40), [[20, 10, 40, 20]])
    (labels / "a.txt").write_text("1 0.5 0.5 0.5 0.5\n0 0.95 0.5 0.2 0.2\n")  # the second crosses the right edge
    _image(tmp_path / "images" / "b.webp", (10, 10), [])
    res = cli("convert", tmp_path / "images", tmp_path / "out", "--annotations", labels, "--json")
    assert res.exit_code == 0, res.output
    d = json.loads(res.stdout)["detection"]
    assert (d["format"], d["boxes"], d["clipped"], d["empty_images"]) == ("yolo", 2, 1, 1)
    recs = od_records(tmp_path / "out")
    same_boxes(boxes_of(recs["a.jpg"]), [(0.25, 0.25, 0.75, 0.75, 2, 0), (0.85, 0.4, 1.0, 0.6, 1, 0)])
    assert recs["a.jpg"]["image/object/area"] == pytest.approx([800.0, 0.15 * 0.2 * 3200], rel=1e-6)
    assert (tmp_path / "out" / "label_map.pbtxt").read_text().count("item {") == 2


def test_yolo_labels_beside_their_images_are_no_ignored_files(tmp_path: Path, cli: Any) -> None:
    """The common YOLO layout with each .txt beside its image: the annotation files are read, not
    "ignored non-image files" (a notes file still is); the COCO file inside INPUT likewise."""
    root = tmp_path / "data"
    for i in range(3):
        _image(root / f"img_{i}.jpg", (20, 20), [[2, 2, 8, 8]])
        (root / f"img_{i}.txt").write_text("0 0.25 0.25 0.3 0.3\n")
    (root / "classes.txt").write_text("boat\n")
    (root / "notes.md").write_text("not data")
    res = cli("convert", root, tmp_path / "out", "--annotations", root, "--json")
    assert res.exit_code == 0, res.output
    assert (json.loads(res.stdout)["ignored_files"], json.loads(res.stdout)["detection"]["boxes"]) == (1, 3)
    ann = coco_corpus(tmp_path / "coco")
    inside = tmp_path / "coco" / "images" / "instances.json"
    ann.rename(inside)
    res = cli("convert", tmp_path / "coco" / "images", tmp_path / "out2", "--annotations", inside, "--json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["ignored_files"] == 0


def test_no_annotations_in_a_folder_is_a_usage_error(tmp_path: Path, cli: Any) -> None:
    _image(tmp_path / "images" / "a.jpg", (8, 8), [])
    (tmp_path / "ann").mkdir()
    (tmp_path / "ann" / "notes.md").write_text("nothing")
    res = cli("convert", tmp_path / "images", tmp_path / "out", "--annotations", tmp_path / "ann", "--json")
    assert res.exit_code == 2
    assert "no COCO JSON, Pascal VOC XML or YOLO txt" in json.loads(res.stdout)["error"]["message"]


def test_inspect_counts_boxes_per_class_and_verifies(coco_out: Any, cli: Any) -> None:
    _, out, _ = coco_out
    res = cli("inspect", out, "--verify", "--json")
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout)
    assert report["total"]["boxes"] == {"records": 6, "total": 6, "per_class": {"cat": 2, "dog": 2, "person": 2}}
    detection = json.loads((out / "dataset.json").read_text())["metadata"]["detection"]
    assert detection["boxes_per_class"] == report["total"]["boxes"]["per_class"]  # the encoder's skip's boxes left out
    assert sorted(r["boxes"] for r in report["total"]["first_records"]) == [0, 1, 1, 1, 2]
    text = cli("inspect", out).stdout
    assert "boxes: 6 in 6 records" in text


def test_load_as_dict_gives_ragged_box_lists(coco_out: Any) -> None:
    import img2tfrecord

    _, out, _ = coco_out
    got = {}
    for ex in img2tfrecord.load(str(out), as_dict=True):
        name = ex["image/filename"].numpy().decode()
        got[name] = [
            tuple(float(v) for v in ex[f"image/object/bbox/{k}"].numpy()) for k in ("xmin", "ymin", "xmax", "ymax")
        ]
        assert ex["image/object/class/label"].shape == ex["image/object/bbox/xmin"].shape
    assert got["empty.png"] == [(), (), (), ()]
    for name in ("plain.jpg", "outside.png"):
        want = expected_coco(name)
        for box, w in zip(zip(*got[name]), want, strict=True):
            assert box == pytest.approx(w[:4], abs=1e-6)


def test_a_damaged_detection_entry_is_refused_in_one_line(coco_out: Any, cli: Any, tmp_path: Path) -> None:
    import shutil

    _, out, _ = coco_out
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    man = json.loads((copy / "dataset.json").read_text())
    man["metadata"]["detection"]["box_problems"] = [{"path": 3}]
    (copy / "dataset.json").write_text(json.dumps(man))
    res = cli("inspect", copy)
    assert res.exit_code == 1 and "Traceback" not in res.output
    assert "metadata.detection.box_problems[0].path" in res.stderr


def test_any_worker_count_writes_the_same_bytes(tmp_path: Path, cli: Any) -> None:
    ann = coco_corpus(tmp_path)
    outs = []
    for workers in ("1", "2"):
        outs.append(tmp_path / f"w{workers}")
        args = ["--annotations", ann, "--workers", workers, "--shards", "3", "--split", "train=0.5,test=0.5"]
        assert cli("convert", tmp_path / "images", outs[-1], *args).exit_code == 0
    names = sorted(p.name for p in outs[0].iterdir())
    assert names == sorted(p.name for p in outs[1].iterdir())
    for n in names:
        if n != "dataset.json":
            assert (outs[0] / n).read_bytes() == (outs[1] / n).read_bytes(), n


def test_tensorflow_datasets_reads_the_boxes(coco_out: Any) -> None:
    tfds = pytest.importorskip("tensorflow_datasets")
    _, out, _ = coco_out
    got = {
        ex["image/filename"].numpy().decode(): ex["image/object/class/label"].numpy().tolist()
        for ex in tfds.builder_from_directory(str(out)).as_dataset(split="train")
    }
    assert got["plain.jpg"] == [1, 2] and got["empty.png"] == []


@pytest.mark.parametrize("name, orientation", [("turned.png", 6), ("turned.webp", 8), ("mirrored.png", 3)])
def test_boxes_turn_with_png_and_webp_pixels_turned_upright(
    tmp_path: Path, cli: Any, name: str, orientation: int
) -> None:
    """The encoder turns PNG and WebP upright by their EXIF orientation too (not only JPEG's, read
    without Pillow): the box still covers its object in the pixels TensorFlow decodes."""
    size, box = (60, 40), [4, 6, 20, 10]
    _image(tmp_path / "images" / name, size, [box], orientation)
    coco = {
        "images": [{"id": 1, "file_name": name, "width": size[0], "height": size[1]}],
        "annotations": [{"id": 1, "image_id": 1, "bbox": box, "category_id": 1}],
        "categories": [{"id": 1, "name": "cat"}],
    }
    (tmp_path / "ann.json").write_text(json.dumps(coco))
    res = cli(
        "convert", tmp_path / "images", tmp_path / "out", "--annotations", tmp_path / "ann.json", "--encoding", "png"
    )
    assert res.exit_code == 0, res.output
    rec = od_records(tmp_path / "out")[name]
    turned = orientation in (5, 6, 7, 8)
    assert rec["pixels"].shape[:2] == ((size[0], size[1]) if turned else (size[1], size[0]))
    colour = _centre_colour(rec, 0)
    assert max(abs(a - b) for a, b in zip(colour, COLOURS[0])) < 40, colour
