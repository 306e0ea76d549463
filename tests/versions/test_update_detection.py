"""`update` of a detection dataset: an image whose boxes changed in the annotations is a changed
image, its record rewritten in its split; the rest are kept as they are (their shards linked), new
classes take the next ids, and dataset.json records the annotations read. Read back by TensorFlow's
parser with the Object Detection API's spec (`od_records`)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from img2tfrecord.conversion.plan.annotations import read_annotations
from img2tfrecord.format import catalog
from test_detection import _image, _voc, boxes_of, od_records, same_boxes

# 12 images, one box each (x, y, w, h in pixels, COCO category id); categories cat=3, dog=7
NAMES = [f"img_{i:02d}.jpg" for i in range(12)]
SIZE = (40, 30)


def _box(i: int) -> list[float]:
    return [2 + i, 3, 10, 8, 3 if i % 2 else 7]


def _coco(root: Path, boxes: dict[str, list[list[float]]], categories: list[tuple[int, str]]) -> Path:
    """The COCO file of NAMES with `boxes` (name -> [x, y, w, h, category id]) at `root/instances.json`."""
    images = [{"id": i + 1, "file_name": n, "width": SIZE[0], "height": SIZE[1]} for i, n in enumerate(NAMES)]
    pairs = [(NAMES.index(n) + 1, b) for n in NAMES for b in boxes.get(n, [])]
    anns = [
        {"id": k, "image_id": i, "bbox": b[:4], "category_id": b[4], "iscrowd": 0} for k, (i, b) in enumerate(pairs, 1)
    ]
    cats = [{"id": k, "name": name} for k, name in categories]
    path = root / "instances.json"
    path.write_text(json.dumps({"images": images, "annotations": anns, "categories": cats}))
    return path


def _inodes(out: Path) -> dict[str, int]:
    return {p.name: p.stat().st_ino for p in out.iterdir() if "-of-" in p.name}


def _catalog(out: Path) -> catalog.Catalog:
    return catalog.decode((out / catalog.CATALOG_NAME).read_bytes())


def _placed(out: Path) -> dict[str, tuple[str, str]]:
    """image path -> (split, shard) as the catalog has it."""
    cat = _catalog(out)
    return {cat.rels[r].decode(): (cat.splits[r], cat.shards[r]) for r in range(len(cat))}


def test_changed_boxes_rewrite_only_their_images_records(tmp_path: Path, cli: Any) -> None:
    src, out = tmp_path / "images", tmp_path / "out"
    for i, n in enumerate(NAMES):
        _image(src / n, SIZE, [_box(i)[:4]])
    boxes = {n: [_box(i)] for i, n in enumerate(NAMES)}
    ann = _coco(tmp_path, boxes, [(3, "cat"), (7, "dog")])
    res = cli("convert", src, out, "--annotations", ann, "--split", "train=0.5,test=0.5", "--shards", "train=3,test=3")
    assert res.exit_code == 0, res.output
    v1, before, records = _placed(out), _inodes(out), od_records(out)
    assert _catalog(out).boxes.blob.count(0) < 8 * len(NAMES)  # the digests are kept

    # one box moved, one box added to another image, one annotation of a new category
    edited, added, zebra = NAMES[1], NAMES[6], NAMES[10]
    boxes[edited] = [[20, 10, 12, 9, 3]]
    boxes[added] = [*boxes[added], [25, 15, 10, 10, 3]]
    boxes[zebra] = [*boxes[zebra], [1, 1, 5, 5, 11]]
    ann = _coco(tmp_path, boxes, [(3, "cat"), (7, "dog"), (11, "zebra")])

    res = cli("update", src, out, "--dry-run", "--json")
    assert res.exit_code == 0, res.output
    dry = json.loads(res.stdout)
    assert not dry["up_to_date"] and dry["new_classes"] == ["zebra"] and dry["annotations_changed"]
    assert sum(sp["changed"] for sp in dry["splits"].values()) == 3
    assert sum(sp["unchanged"] for sp in dry["splits"].values()) == len(NAMES) - 3
    assert _inodes(out) == before  # the dry run wrote nothing

    res = cli("update", src, out, "--json")
    assert res.exit_code == 0, res.output
    s = json.loads(res.stdout)
    holders = {v1[n][1] for n in (edited, added, zebra)}
    assert s["shards_rewritten"] + s["shards_removed"] == len(holders) and s["converted_images"] == 3
    after, v2 = _inodes(out), _placed(out)
    kept = [n for n in before if n not in holders]
    assert kept and {before[n] for n in kept} <= set(after.values())  # linked: their bytes not written
    assert not {before[n] for n in holders} & set(after.values())
    assert {n: v2[n][0] for n in NAMES} == {n: v1[n][0] for n in NAMES}  # no image moved split

    recs = od_records(out)
    same_boxes(boxes_of(recs[edited]), [(20 / 40, 10 / 30, 32 / 40, 19 / 30, 1, 0)])
    b = _box(6)
    same_boxes(
        boxes_of(recs[added]),
        [((b[0]) / 40, 3 / 30, (b[0] + 10) / 40, 11 / 30, 2, 0), (25 / 40, 15 / 30, 35 / 40, 25 / 30, 1, 0)],
    )
    assert recs[zebra]["image/object/class/label"] == [2, 3]  # the new class takes the next id
    assert recs[zebra]["image/object/class/text"] == [b"dog", b"zebra"]
    for n in NAMES:
        if n not in (edited, added, zebra):  # the other records as they were, byte for byte
            assert {k: v for k, v in recs[n].items() if k != "pixels"} == {
                k: v for k, v in records[n].items() if k != "pixels"
            }
    man = json.loads((out / "dataset.json").read_text())
    assert man["classes"] == ["cat", "dog", "zebra"] and man["version"] == 2
    label_map = (out / "label_map.pbtxt").read_text()
    assert "id: 1" in label_map and "name: 'zebra'" in label_map and label_map.count("item {") == 3
    digest = read_annotations(str(ann)).digest
    assert man["metadata"]["xxh3_128"] == man["metadata"]["detection"]["xxh3_128"] == digest
    assert man["metadata"]["detection"]["boxes"] == len(NAMES) + 2
    texts = [t.decode() for rec in recs.values() for t in rec["image/object/class/text"]]
    assert man["metadata"]["detection"]["boxes_per_class"] == {c: texts.count(c) for c in ("cat", "dog", "zebra")}
    assert cli("inspect", out, "--verify").exit_code == 0

    # nothing changed since: up to date, nothing written
    v2_json, inodes = (out / "dataset.json").read_bytes(), _inodes(out)
    res = cli("update", src, out)
    assert res.exit_code == 0 and "is up to date" in res.output
    assert (out / "dataset.json").read_bytes() == v2_json and _inodes(out) == inodes

    # a category no box uses any more keeps its id (and its place in the label map)
    boxes[zebra] = boxes[zebra][:1]
    _coco(tmp_path, boxes, [(3, "cat"), (7, "dog")])
    s = json.loads(cli("update", src, out, "--json").stdout)
    assert s["vanished_classes"] == ["zebra"] and s["converted_images"] == 1
    man = json.loads((out / "dataset.json").read_text())
    assert man["classes"] == ["cat", "dog", "zebra"] and (out / "label_map.pbtxt").read_text().count("item {") == 3
    assert od_records(out)[zebra]["image/object/class/label"] == [2]


def test_an_annotation_changed_in_a_way_no_box_shows_is_recorded_without_rewriting(tmp_path: Path, cli: Any) -> None:
    src, out = tmp_path / "images", tmp_path / "out"
    for i, n in enumerate(NAMES):
        _image(src / n, SIZE, [_box(i)[:4]])
    boxes = {n: [_box(i)] for i, n in enumerate(NAMES)}
    ann = _coco(tmp_path, boxes, [(3, "cat"), (7, "dog")])
    assert cli("convert", src, out, "--annotations", ann, "--shards", "2").exit_code == 0
    before = _inodes(out)
    ann.write_text(json.dumps(json.loads(ann.read_text()), indent=1))  # other bytes, the same boxes
    s = json.loads(cli("update", src, out, "--json").stdout)
    assert not s["up_to_date"] and s["shards_rewritten"] == 0 and s["converted_images"] == 0
    assert s["annotations_changed"] and sum(sp["changed"] for sp in s["splits"].values()) == 0
    assert _inodes(out) == before
    man = json.loads((out / "dataset.json").read_text())
    assert man["metadata"]["detection"]["xxh3_128"] == read_annotations(str(ann)).digest
    assert "is up to date" in cli("update", src, out).output


def test_an_edited_yolo_txt_rewrites_its_image(tmp_path: Path, cli: Any) -> None:
    root, out = tmp_path / "data", tmp_path / "out"
    for i in range(6):
        _image(root / f"img_{i}.jpg", (20, 20), [[2, 2, 8, 8]])
        (root / f"img_{i}.txt").write_text("0 0.3 0.3 0.4 0.4\n")
    (root / "classes.txt").write_text("boat\n")
    assert cli("convert", root, out, "--annotations", root, "--shards", "3", "--label-offset", "1").exit_code == 0
    holder = _placed(out)["img_4.jpg"][1]
    before = _inodes(out)
    (root / "img_4.txt").write_text("0 0.5 0.5 0.2 0.2\n")
    s = json.loads(cli("update", root, out, "--json").stdout)
    assert sum(sp["changed"] for sp in s["splits"].values()) == 1 and s["converted_images"] == 1
    after = _inodes(out)
    assert s["shards_rewritten"] == 1 and sorted(after.values()).count(before[holder]) == 0
    assert len(set(before.values()) & set(after.values())) == len(before) - 1
    same_boxes(boxes_of(od_records(out)["img_4.jpg"]), [(0.4, 0.4, 0.6, 0.6, 1, 0)])
    same_boxes(boxes_of(od_records(out)["img_3.jpg"]), [(0.1, 0.1, 0.5, 0.5, 1, 0)])
    assert _class_labels(out) == {f"img_{i}.jpg": [1] for i in range(6)}  # --label-offset 1, rewritten too


def _class_labels(out: Path) -> dict[str, list[int]]:
    """image/filename -> image/class/label (our multi-label key, which --label-offset shifts)."""
    import tensorflow as tf

    spec = {"image/filename": tf.io.FixedLenFeature((), tf.string), "image/class/label": tf.io.VarLenFeature(tf.int64)}
    got = {}
    for shard in sorted(out.glob("*-of-*")):
        for raw in tf.data.TFRecordDataset(str(shard)):
            ex = tf.io.parse_single_example(raw, spec)
            got[ex["image/filename"].numpy().decode()] = tf.sparse.to_dense(ex["image/class/label"]).numpy().tolist()
    return got


def _run_advice(stderr: str, **replace: str) -> Any:
    """The advised command, exactly as printed (a placeholder it names replaced), run in-process."""
    from img2tfrecord.cli import main

    advice = stderr.split("run: ", 1)[1].strip()
    argv = [replace.get(a, a) for a in shlex.split(advice)]
    assert argv[0] == "img2tfrecord"
    return CliRunner().invoke(main, argv[1:], catch_exceptions=False)


def test_annotations_of_another_format_or_gone_are_refused_with_advice_that_runs(tmp_path: Path, cli: Any) -> None:
    src, ann, out = tmp_path / "images", tmp_path / "ann", tmp_path / "out"
    for i in range(3):
        _image(src / f"{i}.jpg", (20, 20), [[2, 2, 8, 8]])
        _voc(ann, f"{i}.jpg", (20, 20), [("boat", [2, 2, 10, 10], 0, 0)])
    assert cli("convert", src, out, "--annotations", ann).exit_code == 0
    for xml in ann.glob("*.xml"):  # VOC replaced by YOLO in the same folder
        xml.unlink()
        (ann / (xml.stem + ".txt")).write_text("0 0.5 0.5 0.5 0.5\n")
    (ann / "classes.txt").write_text("boat\n")
    res = cli("update", src, out)
    assert res.exit_code == 2 and "Traceback" not in res.output
    assert f"the annotations {ann} are yolo, no longer voc, since {out} was made" in res.stderr
    assert res.stderr.split("run: ", 1)[1].strip() == f"img2tfrecord convert {src} {out} --like {out} --overwrite"
    res = _run_advice(res.stderr)
    assert res.exit_code == 0, res.output
    same_boxes(boxes_of(od_records(out)["0.jpg"]), [(0.25, 0.25, 0.75, 0.75, 1, 0)])

    moved = tmp_path / "labels"
    ann.rename(moved)
    res = cli("update", src, out)
    assert res.exit_code == 2 and f"the annotations {ann} are gone since {out} was made" in res.stderr
    res = _run_advice(res.stderr, FILE=str(moved))
    assert res.exit_code == 0, res.output
    assert json.loads((out / "dataset.json").read_text())["options"]["annotations"] == str(moved)
    assert "is up to date" in cli("update", src, out).output


def test_the_boxes_column_round_trips_and_is_absent_without_boxes() -> None:
    rows = {"rels": [b"b.jpg", b"a.jpg"], "sizes": [1, 2], "mtimes": [3, 4], "digests": [bytes(16)] * 2}
    rows |= {"states": [0, 0], "reasons": [""] * 2, "splits": ["train"] * 2, "shards": ["s"] * 2, "records": [1, 0]}
    rows |= {"lengths": [5, 6], "classes": ["c"] * 2, "kinds": [""] * 2}
    rows |= {"heights": [1, 1], "widths": [1, 1], "channels": [3, 3]}
    plain = catalog.Catalog(**rows)
    assert b"boxes" not in catalog.encode(plain)  # a classification catalog's bytes as before
    assert catalog.decode(catalog.encode(plain)).boxes.blob == bytes(16)
    boxed = catalog.Catalog(**rows, boxes=[b"12345678", b"abcdefgh"])
    back = catalog.decode(catalog.encode(boxed))
    assert list(back.rels) == [b"a.jpg", b"b.jpg"] and list(back.boxes) == [b"abcdefgh", b"12345678"]  # by path
    assert back.take([1, 0]) == boxed and back.take([0]).boxes[0] == b"abcdefgh"
    with pytest.raises(catalog.CatalogError):
        catalog.decode(catalog.encode(boxed)[:-1])


def test_a_journal_knows_the_boxes_a_shard_was_written_with(tmp_path: Path) -> None:
    """--resume (convert's and update's) converts again a finished shard whose images' boxes changed since."""
    from img2tfrecord.conversion.plan.job import plan_job
    from img2tfrecord.conversion.write.resume import header

    src = tmp_path / "images"
    for i, n in enumerate(NAMES):
        _image(src / n, SIZE, [_box(i)[:4]])
    boxes = {n: [_box(i)] for i, n in enumerate(NAMES)}
    ann = _coco(tmp_path, boxes, [(3, "cat"), (7, "dog")])
    before = header(plan_job(str(src), str(tmp_path / "out"), annotations=str(ann), shards=3))
    boxes[NAMES[0]] = [[1, 1, 4, 4, 3]]
    _coco(tmp_path, boxes, [(3, "cat"), (7, "dog")])
    after = header(plan_job(str(src), str(tmp_path / "out"), annotations=str(ann), shards=3))
    assert after["fingerprint"] == before["fingerprint"]  # the same job: its other shards are reused
    changed = [name for name in before["sources"] if before["sources"][name] != after["sources"][name]]
    assert len(changed) == 1
