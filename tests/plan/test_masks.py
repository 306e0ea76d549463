"""Instance masks (`convert --annotations COCO.json --masks`): COCO's polygons, uncompressed RLE
(crowds) and compressed RLE, read back by TensorFlow's parser and `tf.io.decode_png`, each equal
to pycocotools' own rasterization of the annotation (COCO.annToRLE's rule), pixel for pixel:
kept as stored, turned upright with an EXIF-rotated photo, and resized by nearest neighbour."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from helpers import examples
from img2tfrecord.conversion.plan import coco_polygons
from img2tfrecord.conversion.plan.coco_polygons import clip_far
from test_detection import _image

mask_api = pytest.importorskip("pycocotools.mask")  # the masks extra: `make install` has it


def blob(w: int, h: int, x0: int, y0: int, x1: int, y1: int, hole: bool = True) -> np.ndarray:
    """An h x w 0/1 mask: a rectangle with a notch, so a turn or a flip shows."""
    m = np.zeros((h, w), dtype=np.uint8)
    m[y0:y1, x0:x1] = 1
    if hole:
        m[y0 : y0 + (y1 - y0) // 2, x0 : x0 + (x1 - x0) // 3] = 0
    return m


def uncompressed(m: np.ndarray) -> dict[str, Any]:
    """COCO's uncompressed RLE (iscrowd's form): run lengths down the columns, zeros first."""
    flat = m.flatten(order="F")
    runs, value, n = [], 0, 0
    for v in flat:
        if v == value:
            n += 1
        else:
            runs.append(n)
            value, n = v, 1
    runs.append(n)
    return {"counts": [int(r) for r in runs], "size": [m.shape[0], m.shape[1]]}


def compressed(m: np.ndarray) -> dict[str, Any]:
    rle = mask_api.encode(np.asfortranarray(m))
    return {"counts": rle["counts"].decode("ascii"), "size": list(rle["size"])}


POLY = [[2.5, 3.1, 20.7, 2.0, 18.3, 15.9, 4.0, 12.2], [25, 20, 35.5, 21, 30, 28.7]]
ROUNDING = [[10.7, 20.1, 30.3, 20.7, 30.9, 28.5, 12.5, 27.3]]  # x.1, x.3, x.7, x.9: pycocotools' 5 * x + 0.5

# file name -> (stored size, EXIF orientation, objects: (bbox x y w h, category id, iscrowd, segmentation))
MASK_IMAGES: dict[str, Any] = {
    "poly.png": (
        (40, 30),
        1,
        [
            ([2, 2, 34, 27], 1, 0, POLY),
            ([-5, 10, 20, 10], 2, 0, [[-5, 10, 15, 10, 15, 20, -5, 20]]),  # clipped: keeps its whole mask
            ([50, 50, 5, 5], 1, 0, [[50, 50, 55, 50, 55, 55]]),  # wholly outside: dropped with its mask
            ([10, 20, 21, 9], 2, 0, ROUNDING),
        ],
    ),
    "crowd.png": ((32, 24), 1, [([3, 2, 20, 15], 1, 1, uncompressed(blob(32, 24, 3, 2, 23, 17)))]),
    "compressed.jpg": (
        (48, 36),
        1,
        [([5, 6, 30, 20], 2, 0, compressed(blob(48, 36, 5, 6, 35, 26))), ([1, 1, 9, 9], 1, 0, [[1, 1, 10, 1, 1, 10]])],
    ),
    "rotated.jpg": (
        (64, 48),
        6,
        [
            ([2, 4, 24, 12], 1, 0, [[2, 4, 26, 4, 26, 16, 2, 9.5]]),
            ([30, 20, 20, 20], 2, 1, compressed(blob(64, 48, 30, 20, 50, 40))),
        ],
    ),
}
DROPPED = {("poly.png", 2)}


def mask_corpus(root: Path, extra: dict[str, Any] | None = None) -> Path:
    """The images of MASK_IMAGES (and `extra`) below `root/images` and their COCO file; one more image without annotation."""
    images, annotations = [], []
    for i, (name, (size, orientation, objects)) in enumerate({**MASK_IMAGES, **(extra or {})}.items(), 1):
        _image(root / "images" / name, size, [o[0] for o in objects], orientation)
        images.append({"id": i, "file_name": name, "width": size[0], "height": size[1]})
        for bbox, cat, crowd, seg in objects:
            ann = {"id": len(annotations) + 1, "image_id": i, "bbox": bbox, "category_id": cat, "iscrowd": crowd}
            annotations.append(ann | ({"segmentation": seg} if seg is not None else {}))
    _image(root / "images" / "empty.png", (20, 20), [])
    categories = [{"id": 1, "name": "cat"}, {"id": 2, "name": "dog"}]
    path = root / "instances.json"
    path.write_text(json.dumps({"images": images, "annotations": annotations, "categories": categories}))
    return path


def truth(ann: Path) -> dict[str, list[np.ndarray]]:
    """Per image, each kept object's mask as pycocotools makes it from the file (json.load, COCO.annToRLE's rule)."""
    coco = json.loads(ann.read_text())
    images = {im["id"]: im for im in coco["images"]}
    out: dict[str, list[np.ndarray]] = {im["file_name"]: [] for im in coco["images"]}
    seen: dict[str, int] = {}
    for a in coco["annotations"]:
        im = images[a["image_id"]]
        name, h, w = im["file_name"], im["height"], im["width"]
        i = seen[name] = seen.get(name, -1) + 1
        if (name, i) in DROPPED:
            continue
        seg = a["segmentation"]
        if isinstance(seg, list):
            rle = mask_api.merge(mask_api.frPyObjects(seg, h, w))
        elif isinstance(seg["counts"], list):
            rle = mask_api.frPyObjects(seg, h, w)
        else:
            rle = seg
        out[name].append(mask_api.decode(rle))
    return out


def mask_records(out: Path) -> dict[str, dict[str, Any]]:
    """filename -> height, width, boxes and masks (tf.io.decode_png of each), as TensorFlow parses the records."""
    import tensorflow as tf

    spec = {
        "image/filename": tf.io.FixedLenFeature((), tf.string),
        "image/height": tf.io.FixedLenFeature((), tf.int64),
        "image/width": tf.io.FixedLenFeature((), tf.int64),
        "image/object/bbox/xmin": tf.io.VarLenFeature(tf.float32),
        "image/object/mask": tf.io.VarLenFeature(tf.string),
    }
    man = json.loads((out / "dataset.json").read_text())
    got = {}
    for shard in [sh["file"] for sp in man["splits"].values() for sh in sp["shards"]]:
        for raw in tf.data.TFRecordDataset(str(out / shard)):
            ex = tf.io.parse_single_example(raw, spec)
            pngs = tf.sparse.to_dense(ex["image/object/mask"]).numpy().tolist()
            got[ex["image/filename"].numpy().decode()] = {
                "size": (int(ex["image/height"]), int(ex["image/width"])),
                "boxes": len(tf.sparse.to_dense(ex["image/object/bbox/xmin"]).numpy()),
                "masks": [tf.io.decode_png(p, channels=0).numpy() for p in pngs],
            }
    return got


def _convert(cli: Any, root: Path, ann: Path, out: Path, *args: str) -> Any:
    res = cli("convert", root / "images", out, "--annotations", ann, "--masks", "--json", *args)
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("masks")
    return root, mask_corpus(root)


def test_masks_as_stored_equal_pycocotools(corpus, cli, tmp_path):
    """Polygons (several per object, coordinates on pycocotools' rounding edge), an uncompressed
    crowd RLE and compressed RLE: each record's masks are one-channel PNGs of 0 and 1, one per kept
    box in the boxes' order, each pycocotools' mask exactly; a clipped box keeps its whole mask,
    a dropped one loses it; an image without annotation has none."""
    root, ann = corpus
    summary = _convert(cli, root, ann, tmp_path / "out")
    assert summary["detection"]["dropped"] == 1 and summary["detection"]["clipped"] == 1
    got, want = mask_records(tmp_path / "out"), truth(ann)
    assert sorted(got) == sorted([*want, "empty.png"])
    assert got["empty.png"]["masks"] == [] and got["empty.png"]["boxes"] == 0
    for name, masks in want.items():
        rec = got[name]
        assert rec["boxes"] == len(masks) == len(rec["masks"]), name
        for m, w in zip(rec["masks"], masks):
            assert m.dtype == np.uint8 and m.shape == (*rec["size"], 1), name
            assert np.array_equal(m[..., 0], w), name
    assert want["poly.png"][1][10:20, 0:15].all()  # the clipped box's mask, as far as the image goes
    man = json.loads((tmp_path / "out" / "dataset.json").read_text())
    assert man["features"]["image/object/mask"] == "bytes"
    assert man["options"]["masks"] is True and man["metadata"]["detection"]["masks"] is True


def test_masks_turn_with_the_pixels(corpus, cli, tmp_path):
    """--encoding png turns the EXIF-rotated photo (orientation 6) upright: its masks turn with it,
    90 degrees clockwise, as the image is 48 wide and 64 high now."""
    root, ann = corpus
    _convert(cli, root, ann, tmp_path / "out", "--encoding", "png")
    got, want = mask_records(tmp_path / "out"), truth(ann)
    rec = got["rotated.jpg"]
    assert rec["size"] == (64, 48)
    for m, w in zip(rec["masks"], want["rotated.jpg"], strict=True):
        assert np.array_equal(m[..., 0], np.rot90(w, k=-1))
    assert np.array_equal(got["poly.png"]["masks"][0][..., 0], want["poly.png"][0])  # the others as they were


def test_masks_follow_resize_by_nearest_neighbour(corpus, cli, tmp_path):
    """--resize 20x15: every mask is the record's size, pycocotools' mask (turned as the pixels)
    resized by nearest neighbour, still 0 and 1."""
    root, ann = corpus
    _convert(cli, root, ann, tmp_path / "out", "--encoding", "png", "--resize", "20x15")
    got, want = mask_records(tmp_path / "out"), truth(ann)
    for name, masks in want.items():
        rec = got[name]
        assert rec["size"] == (15, 20)
        for m, w in zip(rec["masks"], masks, strict=True):
            w = np.rot90(w, k=-1) if name == "rotated.jpg" else w
            near = np.asarray(Image.fromarray(w).resize((20, 15), Image.Resampling.NEAREST))
            assert np.array_equal(m[..., 0], near), name
            assert set(np.unique(m)) <= {0, 1}


def test_masks_load_as_a_ragged_list(corpus, cli, tmp_path):
    """load(as_dict=True) gives each record's mask PNGs beside its boxes, as the other object keys."""
    import tensorflow as tf

    from img2tfrecord import load

    root, ann = corpus
    _convert(cli, root, ann, tmp_path / "out")
    counts = {}
    for rec in load(tmp_path / "out", as_dict=True):
        pngs = rec["image/object/mask"].numpy().tolist()
        assert len(pngs) == len(rec["image/object/bbox/xmin"])
        counts[rec["image/filename"].numpy().decode()] = len(pngs)
        for p in pngs:
            assert tf.io.decode_png(p).shape[:2] == (rec["image/height"], rec["image/width"])
    assert counts == {"poly.png": 3, "crowd.png": 1, "compressed.jpg": 2, "rotated.jpg": 2, "empty.png": 0}


def test_without_masks_nothing_changes(corpus, cli, tmp_path):
    """The same COCO file without --masks: no mask key, dataset.json as before, segmentations unread."""
    root, ann = corpus
    res = cli("convert", root / "images", tmp_path / "out", "--annotations", ann, "--quiet")
    assert res.exit_code == 0, res.output
    man = json.loads((tmp_path / "out" / "dataset.json").read_text())
    assert "image/object/mask" not in man["features"]
    assert "masks" not in man["options"] and "masks" not in man["metadata"]["detection"]
    from img2tfrecord.conversion.plan.annotations import read_annotations

    ann_read = read_annotations(str(ann))
    assert ann_read.segments is None and all(b.mask == -1 for b in ann_read.by_name["poly.png"].boxes)


def test_unusable_segmentations_are_named_and_bad_rle_sizes_skip_the_image(cli, tmp_path):
    """Under --masks, an annotation with no segmentation (or a polygon of two points) is left out
    and named, as one with no bbox; an RLE of another size than the image skips that image."""
    extra = {
        "noseg.png": ((20, 20), 1, [([1, 1, 5, 5], 1, 0, None), ([2, 2, 4, 4], 1, 0, [[1, 2, 3, 4]])]),
        "badsize.png": ((20, 20), 1, [([1, 1, 5, 5], 1, 0, compressed(blob(21, 20, 1, 1, 6, 6)))]),
    }
    ann = mask_corpus(tmp_path, extra)
    res = cli("convert", tmp_path / "images", tmp_path / "out", "--annotations", ann, "--masks", "--json")
    assert res.exit_code == 0, res.output
    skipped = {s["path"]: s["reason"] for s in json.loads((tmp_path / "out" / "dataset.json").read_text())["skipped"]}
    n = sum(len(objs) for _, _, objs in MASK_IMAGES.values())
    assert skipped[f"instances.json:annotations[{n}]"].startswith("no segmentation to make a mask of")
    assert skipped[f"instances.json:annotations[{n + 1}]"].startswith("no segmentation to make a mask of")
    assert skipped["badsize.png"] == "mask 0's RLE is of a 21x20 image, the file stores 20x20 pixels"
    assert mask_records(tmp_path / "out")["noseg.png"]["masks"] == []
    res = cli("convert", tmp_path / "images", tmp_path / "strict", "--annotations", ann, "--masks", "--strict")
    assert res.exit_code == 1


def test_masks_usage_errors(cli, tmp_path, monkeypatch):
    """--masks without --annotations, with Pascal VOC, or without pycocotools: usage errors (exit 2),
    one JSON object under --json; the last names the extra to install."""
    _image(tmp_path / "images" / "a.png", (8, 8), [])
    res = cli("convert", tmp_path / "images", tmp_path / "out", "--masks", "--json")
    assert res.exit_code == 2 and json.loads(res.stdout)["error"]["message"] == "--masks needs --annotations"
    voc = tmp_path / "voc"
    voc.mkdir()
    (voc / "a.xml").write_text(
        "<annotation><filename>a.png</filename><size><width>8</width><height>8</height></size>"
        "<object><name>cat</name><bndbox><xmin>1</xmin><ymin>1</ymin><xmax>4</xmax><ymax>4</ymax></bndbox></object>"
        "</annotation>"
    )
    res = cli("convert", tmp_path / "images", tmp_path / "out", "--annotations", voc, "--masks")
    assert res.exit_code == 2 and "reads COCO segmentations" in res.output and "is Pascal VOC" in res.output
    ann = mask_corpus(tmp_path / "coco")
    monkeypatch.setitem(sys.modules, "pycocotools", None)  # not installed: its import raises ImportError
    monkeypatch.setitem(sys.modules, "pycocotools.mask", None)
    res = cli("convert", tmp_path / "coco" / "images", tmp_path / "out", "--annotations", ann, "--masks", "--json")
    assert res.exit_code == 2
    assert "pip install 'img2tfrecord[masks]'" in json.loads(res.stdout)["error"]["message"]
    assert not (tmp_path / "out").exists()


def test_update_keeps_masks_as_a_recorded_option(corpus, cli, tmp_path):
    """update makes new records with masks as convert did; --no-masks is refused with convert --like's advice."""
    root, ann = corpus
    images = tmp_path / "images"
    shutil.copytree(root / "images", images)
    out = tmp_path / "out"
    res = cli("convert", images, out, "--annotations", ann, "--masks", "--quiet")
    assert res.exit_code == 0, res.output
    res = cli("update", images, out, "--no-masks")
    assert res.exit_code == 2 and "converted with --masks" in res.output and "--like" in res.output
    _image(images / "new.png", (10, 10), [])  # no annotation: a record with no boxes and no masks
    res = cli("update", images, out, "--masks", "--quiet")
    assert res.exit_code == 0, res.output
    got = mask_records(out)
    assert got["new.png"]["masks"] == [] and len(got["poly.png"]["masks"]) == 3
    assert json.loads((out / "dataset.json").read_text())["features"]["image/object/mask"] == "bytes"


def test_masks_give_the_same_bytes_on_every_run_and_worker_count(corpus, cli, tmp_path):
    """Two runs, one and two workers: every file byte-identical, the catalog (whose per-image boxes
    digest covers the segmentations) included; dataset.json differs only in when it was made."""
    root, ann = corpus
    outs = [tmp_path / "one", tmp_path / "two"]
    for out, workers in zip(outs, ("1", "2")):
        _convert(cli, root, ann, out, "--workers", workers)
    names = sorted(p.name for p in outs[0].iterdir())
    assert names == sorted(p.name for p in outs[1].iterdir()) and "dataset.catalog" in names
    for name in names:
        one, two = ((out / name).read_bytes() for out in outs)
        if name == "dataset.json":
            one, two = (
                {k: v for k, v in json.loads(x).items() if k not in ("created", "elapsed_seconds")} for x in (one, two)
            )
        assert one == two, name


HOSTILE = [
    [[1e300, 2, -1e300, 4, 5, 1e300]],  # asked pycocotools for 22 GB: the kernel killed the run
    [[1e8, 2, -1e8, 4, 5, 1e8]],  # overflowed its C ints: a segfault
    [[1e8, 1e8, 1e8 + 5, 1e8, 1e8, 1e8 + 5]],  # far outside, nothing of it near the image
    [[v for _ in range(2000) for v in (0, 0, 79, 79)] + [0, 79]],  # an outline 4,000 images long
    [[10, 10, 30, 10, 20, 30]],  # an ordinary one
]
BOUNDED = (
    "import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30)); "
    "from img2tfrecord.cli import main; main(sys.argv[1:])"
)


def test_polygons_of_huge_coordinates_are_clipped_or_dropped_in_bounded_memory(tmp_path):
    """Issue 38 item 10: polygons reaching far outside an 80x80 image are clipped to it (named
    "clipped"), one far outside and one of an absurd outline are dropped with their boxes (named),
    all in a process held to 3 GB of address space (TensorFlow's own is ~1.3 GB); the ordinary
    one is pycocotools' mask of it, the clipped 1e300 triangle covers the image below y=3."""
    _image(tmp_path / "images" / "a.png", (80, 80), [[0, 0, 80, 80]])
    coco = {
        "images": [{"id": 1, "file_name": "a.png", "width": 80, "height": 80}],
        "annotations": [{"image_id": 1, "category_id": 1, "bbox": [0, 0, 80, 80], "segmentation": s} for s in HOSTILE],
        "categories": [{"id": 1, "name": "cat"}],
    }
    (tmp_path / "instances.json").write_text(json.dumps(coco))
    args = ["convert", tmp_path / "images", tmp_path / "out", "--annotations", tmp_path / "instances.json"]
    res = subprocess.run(
        [sys.executable, "-c", BOUNDED, *map(str, args), "--masks", "--json"], capture_output=True, text=True
    )
    assert res.returncode == 0, res.stderr[-2000:]
    got = json.loads(res.stdout)["detection"]
    assert [p["reason"] for p in got["box_problems"]] == [
        "its segmentation reaches far outside the image: clipped",
        "its segmentation reaches far outside the image: clipped",
        "its segmentation lies far outside the image: dropped",
        "its segmentation's outline is longer than 100 times the image's width and height: dropped",
    ]
    masks = mask_records(tmp_path / "out")["a.png"]["masks"]
    assert len(masks) == 3
    assert (masks[0][4:, :, 0] == 1).all() and (masks[0][:2, :, 0] == 0).all()
    ordinary = mask_api.decode(mask_api.merge(mask_api.frPyObjects(HOSTILE[4], 80, 80)))
    assert (masks[2][:, :, 0] == ordinary).all()


_COORD = (
    st.floats(allow_nan=False, allow_infinity=False)
    | st.floats(-200, 200)
    | st.integers(-(10**8), 10**8)
    | st.sampled_from([1e300, -1e300, 1e8, -1e8, 1.7e308, -1.7e308, 3.0, 0.5])
)


@settings(max_examples=examples(300), deadline=None)
@given(
    polygons=st.lists(st.lists(st.tuples(_COORD, _COORD), min_size=3, max_size=8), min_size=1, max_size=3),
    width=st.integers(1, 100),
    height=st.integers(1, 100),
)
def test_any_polygon_is_clipped_into_the_frame_without_overflow(
    polygons: list[list[tuple[float, float]]], width: int, height: int
) -> None:
    """Any finite coordinates (up to a double's largest): the clipped polygons are finite, inside
    the frame `far` measures (so a second clip changes nothing), a segmentation within it is kept
    as given, and one beyond it is always named clipped or dropped."""
    flat = [tuple(float(v) for pt in p for v in pt) for p in polygons]
    got = clip_far(flat, width, height)
    assert all(math.isfinite(v) for p in got for v in p)
    assert all(len(p) >= 6 and len(p) % 2 == 0 for p in got)
    assert all(-width <= x <= 2 * width for p in got for x in p[0::2])
    assert all(-height <= y <= 2 * height for p in got for y in p[1::2])
    assert clip_far(got, width, height) == got
    if got != tuple(flat):  # clipped: the region an exact clip (fractions) gives, to a millionth of a pixel
        exact = [_exact_clip(p, (-width, -height, 2 * width, 2 * height)) for p in flat]
        want = [a for a in map(_area, exact) if a is not None]
        assert sum(float(_area(p) or 0) for p in got) == pytest.approx(float(sum(want)), abs=1e-6 * (width + height))
    why = coco_polygons.problem(flat, width, height)
    if coco_polygons.far(coco_polygons.reach_of(flat), width, height):
        assert why.endswith(("clipped", "dropped"))
    else:
        assert got == tuple(flat) and why in ("", coco_polygons.problem(got, width, height))


def _exact_clip(p: tuple[float, ...], box: tuple[int, int, int, int]) -> list[tuple[Fraction, Fraction]]:
    """Sutherland-Hodgman in fractions: the test's oracle for coco_polygons' float clip."""
    pts = [(Fraction(x), Fraction(y)) for x, y in zip(p[0::2], p[1::2])]
    for axis, bound, low in ((0, box[0], True), (0, box[2], False), (1, box[1], True), (1, box[3], False)):
        out: list[tuple[Fraction, Fraction]] = []
        for k, cur in enumerate(pts):
            prev = pts[k - 1]
            inside = [(q[axis] >= bound) if low else (q[axis] <= bound) for q in (prev, cur)]
            if inside[0] != inside[1]:
                t = (bound - prev[axis]) / (cur[axis] - prev[axis])
                cross = tuple(prev[i] + (cur[i] - prev[i]) * t for i in (0, 1))
                out.append((Fraction(bound), cross[1]) if axis == 0 else (cross[0], Fraction(bound)))
            if inside[1]:
                out.append(cur)
        pts = out
    return pts


def _area(p: Any) -> Any:
    """A polygon's signed area (shoelace), of float pairs or flat floats; None below 3 points."""
    pts = list(zip(p[0::2], p[1::2])) if p and not isinstance(p[0], tuple) else list(p)
    if len(pts) < 3:
        return None
    return sum(x0 * y1 - x1 * y0 for (x0, y0), (x1, y1) in zip(pts, pts[1:] + pts[:1])) / 2
