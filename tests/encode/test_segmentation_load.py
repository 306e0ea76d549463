"""`load(as_dict=True)` on a segmentation dataset (issue 43): convert the generated mask matrix, load
it back, and every record's `segmentation_mask` equals its source's class ids, HxWx1 like its image,
in the dtype the dataset stores (uint16 once an id passes 255, its 8-bit masks widened, not scaled)."""

from __future__ import annotations

import numpy as np
import pytest

from img2tfrecord.loader import load
from test_segmentation import corpus


@pytest.mark.parametrize("deep", [True, False])
def test_load_returns_every_mask_as_its_source_ids(tmp_path, cli, deep):
    want = corpus(tmp_path)
    if not deep:  # no id past 255: the whole dataset loads as uint8
        (tmp_path / "images" / "deep.webp").unlink()
        (tmp_path / "masks" / "deep.png").unlink()
        del want["deep.webp"]
    out = tmp_path / "out"
    res = cli(
        "convert",
        tmp_path / "images",
        out,
        "--masks-dir",
        tmp_path / "masks",
        "--mask-colors",
        "voc",
        "--encoding",
        "png",
        "-q",
    )
    assert res.exit_code == 0, res.output
    got = {}
    for el in load(out, split="train", as_dict=True):
        mask = el["segmentation_mask"].numpy()
        assert mask.dtype == (np.uint16 if deep else np.uint8)
        assert mask.shape == (*el["image"].shape[:2], 1)
        got[el["image/filename"].numpy().decode()] = mask[..., 0]
    assert sorted(got) == sorted(want)
    for name, ids in want.items():
        np.testing.assert_array_equal(got[name], ids, err_msg=name)
    small = next(iter(load(out, split="train", as_dict=True, image_size=(8, 6))))
    assert small["segmentation_mask"].shape == (8, 6, 1)
    assert set(np.unique(small["segmentation_mask"])) <= set(
        np.unique(np.concatenate([i.ravel() for i in want.values()]))
    )


def test_a_dataset_without_masks_has_no_mask_entry(tmp_path, cli):
    corpus(tmp_path)
    out = tmp_path / "out"
    assert cli("convert", tmp_path / "images", out, "-q").exit_code == 0
    el = next(iter(load(out, split="train", as_dict=True)))
    assert "segmentation_mask" not in el and "image/segmentation/class/encoded" not in el
