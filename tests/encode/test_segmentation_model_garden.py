"""Segmentation records read by the reader segmentation models are trained with: the Model Garden's
`official.vision.dataloaders.segmentation_input` (its `Decoder`, then its `Parser`'s own decode of
the image and the label, which reshapes the label to the record's height and width).

As tests/plan/test_model_garden.py: the Model Garden runs in a subprocess with MODEL_GARDEN_PATH on
its path (`make test` sets it); without it the test is skipped.
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

from test_segmentation import corpus

MODEL_GARDEN = os.environ.get("MODEL_GARDEN_PATH", "")

pytestmark = pytest.mark.skipif(not MODEL_GARDEN, reason="MODEL_GARDEN_PATH unset (make test sets it)")

# Every record of the shards given: the label as the Parser decodes it, and its image's shape.
DECODE = """
import json, sys
import tensorflow as tf
from official.vision.dataloaders.segmentation_input import Decoder, Parser

decoder = Decoder()
got = {}
for path in sys.argv[1:]:
    for raw in tf.data.TFRecordDataset(path):
        name = tf.train.Example.FromString(raw.numpy()).features.feature["image/filename"].bytes_list.value[0]
        d = decoder.decode(raw)
        h, w = int(d["image/height"]), int(d["image/width"])
        image, label = Parser(output_size=[h, w])._prepare_image_and_label(d)
        got[name.decode()] = {"image": [int(v) for v in image.shape], "label": label.numpy()[0].astype("int64").tolist()}
print(json.dumps(got))
"""


def model_garden_labels(out: Path) -> dict[str, dict[str, Any]]:
    man = json.loads((out / "dataset.json").read_text())
    shards = [str(out / sh["file"]) for sp in man["splits"].values() for sh in sp["shards"]]
    env = os.environ | {"PYTHONPATH": MODEL_GARDEN, "TF_CPP_MIN_LOG_LEVEL": "3"}
    res = subprocess.run([sys.executable, "-c", DECODE, *shards], env=env, capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout)


def test_model_garden_segmentation_parser_reads_every_mask(tmp_path, cli):
    """Palette, grey, 1-bit and VOC-coloured RGB masks with a 255 border, and the EXIF-rotated photo
    stored upright (--encoding png): the Parser's label is the source's ids, pixel for pixel, and its
    image the label's size. (The 16-bit mask is left out: the Parser decodes labels to 8 bits.)"""
    want = corpus(tmp_path)
    del want["deep.webp"]
    (tmp_path / "images" / "deep.webp").unlink()
    out = tmp_path / "out"
    args = ("--masks-dir", tmp_path / "masks", "--mask-colors", "voc", "--encoding", "png", "-q")
    res = cli("convert", tmp_path / "images", out, *args)
    assert res.exit_code == 0, res.output
    got = model_garden_labels(out)
    assert sorted(got) == sorted(want)
    for name, ids in want.items():
        assert got[name]["image"] == [*ids.shape, 3], name
        np.testing.assert_array_equal(np.array(got[name]["label"]), ids, err_msg=name)
