"""`load(as_dict=True)` on a segmentation dataset (issue 43): convert the generated mask matrix, load
it back, and every record's `segmentation_mask` equals its source's class ids, HxWx1 like its image,
in the dtype the dataset stores (uint16 once an id passes 255, its 8-bit masks widened, not scaled)."""

from __future__ import annotations

import json

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


def test_inspect_shows_the_mask_classes_and_their_pixel_shares(tmp_path, cli):
    """`inspect` of a segmentation dataset: each class id, name, share of all mask pixels and images
    holding it, as the source masks count them; in text and --json; none for a dataset without masks."""
    want = corpus(tmp_path)
    del want["rotated.jpg"]  # keep mode: its mask does not fit the stored pixels (a skip)
    out = tmp_path / "out"
    res = cli("convert", tmp_path / "images", out, "--masks-dir", tmp_path / "masks", "--mask-colors", "voc", "-q")
    assert res.exit_code == 0, res.output
    ids, counts = np.unique(np.concatenate([i.ravel() for i in want.values()]), return_counts=True)
    total = counts.sum()
    res = cli("inspect", out, "--json")
    assert res.exit_code == 0, res.output
    (seg,) = json.loads(res.output)["segmentation"]
    rows = {c["id"]: c for c in seg["classes"]}
    assert sorted(rows) == ids.tolist()
    for i, n in zip(ids.tolist(), counts.tolist()):
        assert rows[i]["pixels"] == n and rows[i]["share"] == round(n / total, 6)
        assert rows[i]["images"] == sum(1 for m in want.values() if (m == i).any())
    assert rows[0]["name"] == "background" and rows[255]["name"] == "ignore"
    text = cli("inspect", out).output
    assert f"mask classes of {out} (id, name, share of pixels, images):" in text
    top = int(ids[counts.argmax()])
    assert f"{100 * counts.max() / total:.2f}%" in text and rows[top]["name"] in text
    plain = tmp_path / "plain"
    assert cli("convert", tmp_path / "images", plain, "-q").exit_code == 0
    assert "segmentation" not in json.loads(cli("inspect", plain, "--json").output)
    assert "mask classes" not in cli("inspect", plain).output
