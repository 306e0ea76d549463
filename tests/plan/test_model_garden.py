"""Detection records read by the reader detectors are trained with: the Model Garden's
`TfExampleDecoder` (official.vision.dataloaders.tf_example_decoder, package tf-models-official).

`make test` installs it beside .venv (constraints/model-garden.txt, `make model-garden`) and names
the folder in MODEL_GARDEN_PATH; the decoder runs in a subprocess that puts that folder on its
path, so its packages (scipy, OpenCV, tf-keras) never reach the rest of the suite. Run by hand
without MODEL_GARDEN_PATH, the test is skipped; with it set, a missing decoder fails it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from test_detection import coco_corpus, expected_coco
from test_masks import mask_corpus, truth

ROOT = Path(__file__).resolve().parents[2]
MODEL_GARDEN = os.environ.get("MODEL_GARDEN_PATH", "")

pytestmark = pytest.mark.skipif(not MODEL_GARDEN, reason="MODEL_GARDEN_PATH unset (make test sets it)")

# Runs with the Model Garden on its path: every record of the shards given, decoded by
# TfExampleDecoder, keyed by image/filename (which the decoder does not return; read beside it).
DECODE = """
import json, sys
import tensorflow as tf
from official.vision.dataloaders.tf_example_decoder import TfExampleDecoder

include_mask = sys.argv[1] == "masks"
decoder = TfExampleDecoder(include_mask=include_mask, regenerate_source_id=False)
got = {}
for path in sys.argv[2:]:
    for raw in tf.data.TFRecordDataset(path):
        name = tf.train.Example.FromString(raw.numpy()).features.feature["image/filename"].bytes_list.value[0]
        d = decoder.decode(raw)
        got[name.decode()] = {
            "shape": [int(v) for v in d["image"].shape],
            "height": int(d["height"]), "width": int(d["width"]),
            "boxes": d["groundtruth_boxes"].numpy().tolist(),
            "classes": d["groundtruth_classes"].numpy().tolist(),
            "is_crowd": [bool(v) for v in d["groundtruth_is_crowd"].numpy()],
            "area": d["groundtruth_area"].numpy().tolist(),
        }
        if include_mask:
            got[name.decode()]["masks"] = d["groundtruth_instance_masks"].numpy().astype("uint8").tolist()
print(json.dumps(got))
"""


def model_garden_decode(shards: list[Path], masks: bool = False) -> dict[str, dict[str, Any]]:
    """Every record of `shards` as the Model Garden's decoder gives it (a subprocess), with
    `include_mask=True` for `masks`."""
    env = os.environ | {"PYTHONPATH": MODEL_GARDEN, "TF_CPP_MIN_LOG_LEVEL": "3"}
    res = subprocess.run(
        [sys.executable, "-c", DECODE, "masks" if masks else "boxes", *map(str, shards)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout)


def shards_of(out: Path) -> list[Path]:
    man = json.loads((out / "dataset.json").read_text())
    return [out / sh["file"] for sp in man["splits"].values() for sh in sp["shards"]]


def coco_truth(coco: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per image file name: its boxes as [ymin, xmin, ymax, xmax] normalised, and class ids, from a COCO
    set whose boxes all lie inside their images and whose category ids are 1, 2, 3... (sample_data's)."""
    images = {im["id"]: im for im in coco["images"]}
    truth: dict[str, dict[str, Any]] = {im["file_name"]: {"boxes": [], "classes": []} for im in coco["images"]}
    for a in coco["annotations"]:
        im = images[a["image_id"]]
        x, y, w, h = a["bbox"]
        W, H = im["width"], im["height"]
        truth[im["file_name"]]["boxes"].append([y / H, x / W, (y + h) / H, (x + w) / W])
        truth[im["file_name"]]["classes"].append(a["category_id"])
    return truth


def same_image(rec: dict[str, Any]) -> None:
    """The decoder's image has the height and width the record declares, in 3 channels."""
    assert rec["shape"] == [rec["height"], rec["width"], 3]


def test_model_garden_decoder_reads_the_sample_detection_set(tmp_path, cli):
    """sample_data/annotations.json (make demo's second step): every box and class to 1e-6."""
    out = tmp_path / "det"
    res = cli("convert", ROOT / "sample_data", out, "--annotations", ROOT / "sample_data/annotations.json", "--quiet")
    assert res.exit_code == 0, res.output
    got = model_garden_decode(shards_of(out))
    truth = coco_truth(json.loads((ROOT / "sample_data/annotations.json").read_text()))
    assert sorted(got) == sorted(truth)  # the broken JPEG has no annotation and no record
    for name, want in truth.items():
        rec = got[name]
        same_image(rec)
        assert rec["classes"] == want["classes"] and rec["is_crowd"] == [False] * len(want["classes"])
        assert np.allclose(rec["boxes"], want["boxes"], rtol=0, atol=1e-6), name


@pytest.mark.parametrize("encoding", ["keep", "png"])
def test_model_garden_decoder_reads_the_hard_cases(tmp_path, cli, encoding):
    """The generated COCO corpus of tests/plan/test_detection.py: clipped and dropped boxes, crowds,
    an EXIF-rotated JPEG, PNG, WebP and GIF inputs, an image without boxes. Kept as stored, every
    box is the annotation's to 1e-6; turned upright (--encoding png), the rotated photo's image
    and boxes turn together (the decoder's shape is the record's height and width)."""
    ann = coco_corpus(tmp_path)
    out = tmp_path / "out"
    res = cli("convert", tmp_path / "images", out, "--annotations", ann, "--encoding", encoding, "--quiet")
    assert res.exit_code == 0, res.output
    got = model_garden_decode(shards_of(out))
    assert sorted(got) == ["empty.png", "outside.png", "photo.webp", "plain.jpg", "rotated.jpg", "sub/anim.gif"]
    for name, rec in got.items():
        same_image(rec)
        want = [] if name == "empty.png" else expected_coco(name)
        assert rec["classes"] == [w[4] for w in want] and rec["is_crowd"] == [bool(w[5]) for w in want], name
        if name == "rotated.jpg" and encoding == "png":
            # EXIF orientation 6 turns the stored 64x48 pixels 90 degrees clockwise to 48x64: the box
            # x 2..26, y 4..16 of the stored pixels lands at x 48-16..48-4, y 2..26
            assert (rec["height"], rec["width"]) == (64, 48)
            assert np.allclose(rec["boxes"], [[2 / 64, 32 / 48, 26 / 64, 44 / 48]], rtol=0, atol=1e-6)
            continue
        boxes = [[w[1], w[0], w[3], w[2]] for w in want]  # the decoder's order: ymin, xmin, ymax, xmax
        assert np.allclose(np.reshape(rec["boxes"], (-1, 4)), np.reshape(boxes, (-1, 4)), rtol=0, atol=1e-6), name
    assert got["plain.jpg"]["area"] == pytest.approx([200.0, 123.5])  # the box's, then COCO's own


@pytest.mark.parametrize("encoding", ["keep", "png"])
def test_model_garden_decoder_reads_the_masks(tmp_path, cli, encoding):
    """--masks: with include_mask=True the decoder's groundtruth_instance_masks are pycocotools'
    masks of the annotation (polygons, crowd RLE, compressed RLE), one per box, the image's size;
    turned upright with the EXIF-rotated photo's pixels (--encoding png)."""
    pytest.importorskip("pycocotools")
    ann = mask_corpus(tmp_path)
    out = tmp_path / "out"
    res = cli("convert", tmp_path / "images", out, "--annotations", ann, "--masks", "--encoding", encoding, "--quiet")
    assert res.exit_code == 0, res.output
    got, want = model_garden_decode(shards_of(out), masks=True), truth(ann)
    assert sorted(got) == sorted([*want, "empty.png"])
    assert got["empty.png"]["masks"] == []
    for name, masks in want.items():
        rec = got[name]
        same_image(rec)
        assert len(rec["masks"]) == len(rec["classes"]) == len(masks), name
        for m, w in zip(rec["masks"], masks):
            w = np.rot90(w, k=-1) if name == "rotated.jpg" and encoding == "png" else w
            assert np.array_equal(np.array(m, dtype=np.uint8), w), name
