"""Segmentation masks (`convert --masks-dir`, issue 43): every record's mask, decoded by TensorFlow's
own `tf.io.decode_png` (and by the Model Garden's segmentation decoder in tests/plan), equals the
class ids of its source, on a generated matrix of masks (palette, grey, 16-bit, 1-bit, RGB with a
colour map, a 255 border), images (JPEG, PNG, WebP, an EXIF-rotated JPEG) and pairs that cannot
be used (no mask, no image, another size, an unlisted colour)."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from helpers import natural_image, save
from img2tfrecord.conversion.plan.mask_colors import CITYSCAPES, voc_palette

PALETTE = [c for rgb in voc_palette() for c in rgb]
SEG = "image/segmentation/class/encoded"


def class_ids(w: int, h: int, seed: int, top: int = 21) -> np.ndarray:
    """Blocks of class ids below `top` (a mask's regions), with a 255 "ignore" border, as VOC's."""
    rng = np.random.default_rng(seed)
    blocks = rng.integers(0, top, (4, 4))
    ids = blocks[(np.arange(h) * 4 // h)[:, None], (np.arange(w) * 4 // w)[None, :]]
    ids[0, :] = ids[-1, :] = ids[:, 0] = 255
    return ids.astype(np.uint16 if top > 256 else np.uint8)


def palette_png(ids: np.ndarray, path: Path) -> Path:
    im = Image.fromarray(ids.astype(np.uint8), "P")
    im.putpalette(PALETTE)
    return save(im, path)


def rgb_png(ids: np.ndarray, path: Path, colours: list[tuple[int, int, int]]) -> Path:
    return save(Image.fromarray(np.array(colours, dtype=np.uint8)[ids]), path)


def exif_rotated(path: Path, w: int, h: int, seed: int) -> Path:
    """A JPEG storing `w` x `h` pixels whose EXIF orientation 6 shows them turned 90 degrees clockwise."""
    exif = Image.Exif()
    exif[0x0112] = 6
    return save(natural_image(w, h, seed), path, quality=90, exif=exif.tobytes())


def corpus(root: Path) -> dict[str, np.ndarray]:
    """images/ and masks/ of every case; returns each usable image's expected ids (as the photo is
    shown upright). Unusable: nomask.jpg, mismatch.png, unlisted.jpg, and masks/orphan.png."""
    img, msk = root / "images", root / "masks"
    voc = voc_palette()
    want: dict[str, np.ndarray] = {}
    ids = class_ids(40, 30, 1)
    save(natural_image(40, 30, 1), img / "palette.jpg", quality=90)
    palette_png(ids, msk / "palette.png")
    want["palette.jpg"] = ids
    save(natural_image(40, 30, 1), img / "rgb.jpg", quality=90)  # the palette mask's twin, in VOC's colours
    rgb_png(ids, msk / "rgb.png", voc)
    want["rgb.jpg"] = ids
    ids = class_ids(33, 21, 2)
    save(natural_image(33, 21, 2), img / "gray.png")
    save(Image.fromarray(ids, "L"), msk / "gray.png")
    want["gray.png"] = ids
    ids = class_ids(35, 27, 3, top=1000)  # ids past 255: a 16-bit mask
    save(natural_image(35, 27, 3), img / "deep.webp", lossless=True)
    save(Image.fromarray(ids.astype("<u2")), msk / "deep.png")
    want["deep.webp"] = ids
    ids = (class_ids(24, 18, 4) % 2).astype(np.uint8)
    save(natural_image(24, 18, 4), img / "sub" / "binary.png")
    save(Image.fromarray(ids.astype(bool)), msk / "sub" / "binary.png")  # 1-bit
    want["sub/binary.png"] = ids
    ids = class_ids(48, 64, 5)  # drawn on the upright photo: 48 wide, 64 high
    exif_rotated(img / "rotated.jpg", 64, 48, 5)
    palette_png(ids, msk / "rotated.png")
    want["rotated.jpg"] = ids
    save(natural_image(20, 20, 6), img / "nomask.jpg", quality=90)
    save(natural_image(30, 20, 7), img / "mismatch.png")
    palette_png(class_ids(20, 30, 7), msk / "mismatch.png")
    palette_png(class_ids(20, 20, 8), msk / "orphan.png")
    save(natural_image(20, 20, 9), img / "unlisted.jpg", quality=90)
    odd = [*voc[:21]]
    odd[3] = (1, 2, 3)  # class 3's pixels in a colour VOC's table does not list
    rgb_png(class_ids(20, 20, 9) % 21, msk / "unlisted.png", odd)
    return want


def masks_of(out: Path) -> dict[str, dict[str, Any]]:
    """Every record's filename -> its mask by tf.io.decode_png (16-bit kept), format and image shape."""
    import tensorflow as tf

    man = json.loads((out / "dataset.json").read_text())
    got: dict[str, dict[str, Any]] = {}
    for sp in man["splits"].values():
        for sh in sp["shards"]:
            for raw in tf.data.TFRecordDataset(str(out / sh["file"])):
                f = tf.train.Example.FromString(raw.numpy()).features.feature
                png = f[SEG].bytes_list.value[0]
                deep = tf.io.decode_png(png, dtype=tf.uint16 if png[24] == 16 else tf.uint8)  # IHDR's bit depth
                image = tf.io.decode_image(f["image/encoded"].bytes_list.value[0], expand_animations=False)
                got[f["image/filename"].bytes_list.value[0].decode()] = {
                    "ids": deep.numpy()[..., 0],
                    "channels": int(deep.shape[-1]),
                    "bits": 16 if png[24] == 16 else 8,  # the PNG header's bit depth
                    "format": f["image/segmentation/class/format"].bytes_list.value,
                    "image": tuple(image.shape[:2]),
                }
    return got


def skips_of(out: Path) -> dict[str, str]:
    return {s["path"]: s["reason"] for s in json.loads((out / "dataset.json").read_text())["skipped"]}


@pytest.mark.parametrize("encoding", ["keep", "png"])
def test_every_mask_decodes_to_its_source_ids(tmp_path, cli, encoding):
    """The matrix: palette indices (never colours), grey values, 16-bit ids, 1-bit, VOC-coloured RGB
    through `--mask-colors voc` (the same ids as its palette twin, the void colour to 255); the image
    and its mask the same height and width in every record. EXIF rule: the mask is drawn on the
    pixels the record stores, upright with --encoding png, the file's own in keep mode, where a mask
    drawn on the upright photo is a skip that says its width and height are swapped."""
    want = corpus(tmp_path)
    out = tmp_path / "out"
    res = cli(
        "convert", tmp_path / "images", out, "--masks-dir", tmp_path / "masks", "--mask-colors", "voc",
        "--encoding", encoding, "-q",
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    got = masks_of(out)
    if encoding == "keep":
        del want["rotated.jpg"]
    assert sorted(got) == sorted(want)
    for name, ids in want.items():
        rec = got[name]
        assert rec["channels"] == 1 and rec["format"] == [b"png"], name
        assert rec["image"] == ids.shape, name
        assert rec["bits"] == (16 if ids.max() > 255 else 8), name
        np.testing.assert_array_equal(rec["ids"], ids, err_msg=name)
    np.testing.assert_array_equal(got["rgb.jpg"]["ids"], got["palette.jpg"]["ids"])
    skips = skips_of(out)
    masks = str(tmp_path / "masks")
    expected = {"nomask.jpg", "mismatch.png", "unlisted.jpg", f"{masks}/orphan.png"}
    assert set(skips) == expected | ({"rotated.jpg"} if encoding == "keep" else set())
    assert skips["nomask.jpg"] == f"no mask: {masks}/nomask.png is not there"
    assert skips[f"{masks}/orphan.png"].startswith("a mask without an image: no orphan.*")
    assert skips["mismatch.png"] == f"its mask {masks}/mismatch.png is 20x30, the image stores 30x20 pixels"
    assert "has colour (1, 2, 3), which the colour map (voc) does not list: " in skips["unlisted.jpg"]
    n = int((class_ids(20, 20, 9) % 21 == 3).sum())
    assert skips["unlisted.jpg"].endswith(f"does not list: {n} pixels")
    if encoding == "keep":
        assert "is 48x64, the image stores 64x48 pixels (width and height swapped" in skips["rotated.jpg"]
        assert "--encoding png" in skips["rotated.jpg"]
    seg = json.loads((out / "dataset.json").read_text())["metadata"]["segmentation"]
    assert seg["ignore"] == 255 and seg["colors"] == "voc" and seg["classes"][:2] == ["background", "aeroplane"]
    pixels: Counter[int] = Counter()
    images: Counter[int] = Counter()
    for ids in want.values():
        found, counts = np.unique(ids, return_counts=True)
        pixels.update(dict(zip(found.tolist(), counts.tolist())))
        images.update(found.tolist())
    assert seg["per_split"] == {
        "train": {
            "pixels": {str(k): pixels[k] for k in sorted(pixels)},
            "images": {str(k): images[k] for k in sorted(images)},
        }
    }


def test_resize_takes_the_mask_by_nearest_neighbour(tmp_path, cli):
    """--resize: the mask is resized with the image to the record's size, by nearest neighbour
    (ids stay ids: no value appears that the source does not hold)."""
    want = corpus(tmp_path)
    out = tmp_path / "out"
    args = ("--masks-dir", tmp_path / "masks", "--mask-colors", "voc", "--resize", "32x24", "-q")
    assert cli("convert", tmp_path / "images", out, *args).exit_code == 0
    got = masks_of(out)
    for name, ids in want.items():
        expect = np.asarray(Image.fromarray(ids.astype(np.int32)).resize((32, 24), Image.Resampling.NEAREST))
        assert got[name]["image"] == (24, 32), name
        np.testing.assert_array_equal(got[name]["ids"], expect, err_msg=name)


def test_a_colour_file_and_the_cityscapes_table(tmp_path, cli):
    """`--mask-colors FILE`: ids from 0 in line order, a line named ignore to --mask-ignore; the
    cityscapes table gives the train ids, its void black to the ignore value."""
    img, msk = tmp_path / "images", tmp_path / "masks"
    colours = [(0, 0, 0), (200, 10, 10), (10, 200, 10), (9, 9, 9)]
    ids = class_ids(30, 20, 11, top=3)
    ids[ids == 255] = 3  # the border in the colour named ignore
    save(natural_image(30, 20, 11), img / "a.png")
    rgb_png(ids, msk / "a.png", colours)
    table = tmp_path / "colours.txt"
    table.write_text("# r,g,b,name\n0,0,0,background\n200,10,10,cat\n\n10,200,10,dog\n9,9,9,ignore\n")
    out = tmp_path / "out"
    res = cli("convert", img, out, "--masks-dir", msk, "--mask-colors", table, "--mask-ignore", "100", "-q")
    assert res.exit_code == 0, res.output
    expect = np.where(ids == 3, 100, ids)
    np.testing.assert_array_equal(masks_of(out)["a.png"]["ids"], expect)
    man = json.loads((out / "dataset.json").read_text())
    assert man["metadata"]["segmentation"]["classes"] == ["background", "cat", "dog"]
    assert man["options"]["mask_ignore"] == 100 and man["options"]["mask_colors"] == str(table)
    assert man["metadata"]["segmentation"]["colors"] == str(table)

    city = [rgb for _, rgb in CITYSCAPES] + [(0, 0, 0)]
    ids = class_ids(30, 20, 12, top=19)
    ids[ids == 255] = 19
    rgb_png(ids, msk / "a.png", city)
    out2 = tmp_path / "out2"
    assert cli("convert", img, out2, "--masks-dir", msk, "--mask-colors", "cityscapes", "-q").exit_code == 0
    np.testing.assert_array_equal(masks_of(out2)["a.png"]["ids"], np.where(ids == 19, 255, ids))


def test_layouts_pair_by_their_rule(tmp_path, cli):
    """Pascal VOC (JPEGImages + SegmentationClass, ImageSets/Segmentation's lists as the splits; an
    image in no list left out), Cityscapes (leftImg8bit + gtFine: *_gtFine_labelIds.png, its colour
    PNG beside it no mask) and ADE20K (images/training + annotations/training: split folders)."""
    voc = tmp_path / "VOC2012"
    for i in range(5):
        save(natural_image(20, 16, i), voc / "JPEGImages" / f"2007_00000{i}.jpg", quality=90)
        palette_png(class_ids(20, 16, i), voc / "SegmentationClass" / f"2007_00000{i}.png")
    save(natural_image(20, 16, 9), voc / "JPEGImages" / "2008_000009.jpg", quality=90)  # detection only
    lists = voc / "ImageSets" / "Segmentation"
    lists.mkdir(parents=True)
    (lists / "train.txt").write_text("2007_000000\n2007_000001\n2007_000002\n")
    (lists / "val.txt").write_text("2007_000003\n2007_000004\n")
    (lists / "trainval.txt").write_text("".join(f"2007_00000{i}\n" for i in range(5)))
    out = tmp_path / "voc-out"
    res = cli("convert", voc / "JPEGImages", out, "--masks-dir", voc / "SegmentationClass", "-q")
    assert res.exit_code == 0, res.output
    man = json.loads((out / "dataset.json").read_text())
    assert {s: v["records"] for s, v in man["splits"].items()} == {"train": 3, "validation": 2}
    assert man["skipped"] == []
    out = tmp_path / "voc-drawn"  # --split draws the splits anew; the lists still say which images are the set's
    args = ("--masks-dir", voc / "SegmentationClass", "--split", "train=0.6,validation=0.4", "-q")
    assert cli("convert", voc / "JPEGImages", out, *args).exit_code == 0
    man = json.loads((out / "dataset.json").read_text())
    assert sum(v["records"] for v in man["splits"].values()) == 5 and man["skipped"] == []

    city = tmp_path / "cityscapes"
    for split, town in (("train", "aachen"), ("val", "lindau")):
        stem = f"{town}_000000_000019"
        save(natural_image(24, 12, 1), city / "leftImg8bit" / split / town / f"{stem}_leftImg8bit.png")
        ids = class_ids(24, 12, 2, top=34)
        save(Image.fromarray(ids, "L"), city / "gtFine" / split / town / f"{stem}_gtFine_labelIds.png")
        save(Image.new("RGB", (24, 12)), city / "gtFine" / split / town / f"{stem}_gtFine_color.png")
    out = tmp_path / "city-out"
    res = cli("convert", city / "leftImg8bit", out, "--masks-dir", city / "gtFine", "-q")
    assert res.exit_code == 0, res.output
    got = masks_of(out)
    assert sorted(got) == [
        "train/aachen/aachen_000000_000019_leftImg8bit.png",
        "val/lindau/lindau_000000_000019_leftImg8bit.png",
    ]
    for rec in got.values():
        np.testing.assert_array_equal(rec["ids"], class_ids(24, 12, 2, top=34))

    ade = tmp_path / "ADEChallengeData2016"
    for split, n in (("training", 3), ("validation", 1)):
        for i in range(n):
            save(natural_image(18, 14, i), ade / "images" / split / f"ADE_{split}_{i}.jpg", quality=90)
            save(
                Image.fromarray(class_ids(18, 14, i, top=150), "L"),
                ade / "annotations" / split / f"ADE_{split}_{i}.png",
            )
    out = tmp_path / "ade-out"
    res = cli("convert", ade / "images", out, "--masks-dir", ade / "annotations", "-q")
    assert res.exit_code == 0, res.output
    man = json.loads((out / "dataset.json").read_text())
    assert {s: v["records"] for s, v in man["splits"].items()} == {"train": 3, "validation": 1}


def test_strict_refuses_a_pair_it_cannot_use_and_usage_errors_are_one_line(tmp_path, cli):
    corpus(tmp_path)
    out = tmp_path / "out"
    res = cli(
        "convert", tmp_path / "images", out, "--masks-dir", tmp_path / "masks", "--mask-colors", "voc", "--strict"
    )
    assert res.exit_code != 0 and not (out / "dataset.json").exists()
    for args, says in (
        (("--mask-colors", "voc"), "--mask-colors voc needs --masks-dir"),
        (("--mask-ignore", "7"), "--mask-ignore 7 needs --masks-dir"),
        (("--masks-dir", tmp_path / "nowhere"), "is no folder"),
    ):
        res = cli("convert", tmp_path / "images", out, *args)
        assert res.exit_code == 2, res.output
        assert says in res.output and "Traceback" not in res.output and res.output.count("\n") <= 2, res.output
    bad = tmp_path / "bad.txt"
    bad.write_text("1,2,300,red\n")
    res = cli("convert", tmp_path / "images", out, "--masks-dir", tmp_path / "masks", "--mask-colors", bad)
    assert res.exit_code == 2 and "line 1" in res.output and "0..255" in res.output, res.output


def test_any_worker_count_writes_the_same_bytes_and_no_masks_dir_writes_no_mask_key(tmp_path, cli):
    corpus(tmp_path)
    outs = []
    for workers in ("1", "2"):
        out = tmp_path / f"out{workers}"
        args = ("--masks-dir", tmp_path / "masks", "--mask-colors", "voc", "--workers", workers, "-q")
        assert cli("convert", tmp_path / "images", out, *args).exit_code == 0
        outs.append(sorted((p.name, p.read_bytes()) for p in out.glob("*-of-*")))
    assert outs[0] == outs[1]
    plain = tmp_path / "plain"
    (tmp_path / "classes" / "a").mkdir(parents=True)
    save(natural_image(20, 20, 1), tmp_path / "classes" / "a" / "x.png")
    assert cli("convert", tmp_path / "classes", plain, "-q").exit_code == 0
    man = json.loads((plain / "dataset.json").read_text())
    assert SEG not in man["features"] and "metadata" not in man
    assert not {"masks_dir", "mask_colors", "mask_ignore"} & set(man["options"])


def test_update_treats_a_changed_mask_as_a_changed_image(tmp_path, cli):
    """The masks enricher's stamp is the mask's size and mtime: update re-encodes an image whose mask
    changed (its new ids in the new version), keeps the rest, and with nothing changed writes nothing."""
    want = corpus(tmp_path)
    out = tmp_path / "out"
    args = ("--masks-dir", tmp_path / "masks", "--mask-colors", "voc")
    assert cli("convert", tmp_path / "images", out, *args, "-q").exit_code == 0
    res = cli("update", tmp_path / "images", out)
    assert res.exit_code == 0 and "nothing written" in res.output, res.output
    # uncompressed PNGs: the second edit keeps the file's size, only its mtime says it changed
    for step, seed in enumerate((99, 98)):
        new = class_ids(33, 21, seed)
        save(Image.fromarray(new, "L"), tmp_path / "masks" / "gray.png", compress_level=0)
        os.utime(tmp_path / "masks" / "gray.png", ns=(1, 10**18 + step))
        res = cli("update", tmp_path / "images", out, "--json")
        assert res.exit_code == 0, res.output
        answer = json.loads(next(line for line in res.output.splitlines() if line.startswith("{")))
        assert sum(sp["changed"] for sp in answer["splits"].values()) == 1, res.output
    got = masks_of(out)
    np.testing.assert_array_equal(got["gray.png"]["ids"], new)
    for name in set(want) - {"gray.png", "rotated.jpg"}:
        np.testing.assert_array_equal(got[name]["ids"], want[name], err_msg=name)


def test_convert_like_makes_the_same_segmentation_dataset(tmp_path, cli):
    """dataset.json records the masks folder and the colour map file so that `convert --like` finds
    them from any working folder, and writes the same shards."""
    corpus(tmp_path)
    table = tmp_path / "voc.txt"
    table.write_text(
        "".join(f"{r},{g},{b},c{i}\n" for i, (r, g, b) in enumerate(voc_palette()[:21])) + "224,224,192,ignore\n"
    )
    out, again = tmp_path / "out", tmp_path / "again"
    args = ("--masks-dir", tmp_path / "masks", "--mask-colors", table, "--encoding", "png", "-q")
    assert cli("convert", tmp_path / "images", out, *args).exit_code == 0
    res = cli("convert", tmp_path / "images", again, "--like", out, "-q")
    assert res.exit_code == 0, res.output
    shards = sorted(p.name for p in out.glob("*-of-*"))
    assert shards and all((out / n).read_bytes() == (again / n).read_bytes() for n in shards)
    assert sorted(masks_of(again)) == sorted(masks_of(out))
