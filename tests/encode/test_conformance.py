"""The conformance matrix: every Pillow mode x every format we accept x the eight orientations,
converted in every encoding mode, each record checked with TensorFlow's real decoder.

One conversion per encoding over one folder of all cases (tests/conformance_cases.py); then, per
case and mode:
1. `tf.io.decode_image(encoded, expand_animations=False)` gives exactly the declared
   (height, width, channels), in the record's dtype (16-bit only for 16-bit PNGs, as the PNG
   header says); RAW holds h*w*c bytes; `image/colorspace` agrees with `image/channels`.
2. Lossless means lossless: in `png` and `raw` modes and for re-encoded files in `keep` mode, the
   decoded pixels equal Pillow's decode of the source, upright, bit depth included (16-bit to 8
   only where the target is 8-bit: JPEG, RAW); JPEG mode is compared with a tolerance.
3. Re-encoded images are upright whatever the container's way of saying it (EXIF in
   JPEG/WebP/PNG, TIFF's Orientation tag); kept bytes are the source's own.
4. Files that cannot be stored are skipped, with a reason naming what they are.
"""

from __future__ import annotations

import io
import json
import re

import numpy as np
import pytest
from PIL import Image, ImageOps

import img2tfrecord
from conformance_cases import (
    CLEAN_JPEG,
    Case,
    H,
    W,
    damaged,
    matrix,
    release_cases,
    upright_gray16,
    upright_rgb,
    write,
)
from img2tfrecord.format.images import png_header

ENCODINGS = ("keep", "png", "jpeg", "raw")
CASES = matrix() + damaged() + release_cases()
BY_NAME = {c.name: c for c in CASES}
_RESULTS: dict[str, tuple[dict[str, dict], dict[str, str]]] = {}


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("matrix")
    write(CASES, root / "in")
    return root


def converted(tree, encoding: str) -> tuple[dict[str, dict], dict[str, str]]:
    """(records by file name, skip reasons by file name) of one conversion of the whole matrix."""
    if encoding not in _RESULTS:
        import tensorflow as tf

        out = tree / f"out-{encoding}"
        img2tfrecord.convert(str(tree / "in"), str(out), encoding=encoding, workers=1, dedupe="off")
        manifest = json.loads((out / "dataset.json").read_text())
        files = [str(out / sh["file"]) for sp in manifest["splits"].values() for sh in sp["shards"]]
        records = {}
        for raw in tf.data.TFRecordDataset(files).as_numpy_iterator():
            ex = tf.train.Example.FromString(raw).features.feature

            def b(k: str, ex=ex) -> bytes:
                return ex[k].bytes_list.value[0]

            def i(k: str, ex=ex) -> int:
                return ex[k].int64_list.value[0]

            rec = {
                "encoded": b("image/encoded"),
                "format": b("image/format").decode(),
                "colorspace": b("image/colorspace").decode(),
                "height": i("image/height"),
                "width": i("image/width"),
                "channels": i("image/channels"),
            }
            records[b("image/filename").decode().split("/")[-1]] = rec
        skipped = {s["path"].split("/")[-1]: s["reason"] for s in manifest["skipped"]}
        _RESULTS[encoding] = records, skipped
    return _RESULTS[encoding]


def _tf_view(im: Image.Image) -> np.ndarray:
    """What TensorFlow decodes a kept PNG/BMP to, from Pillow's decode of it."""
    mode = im.mode
    if mode == "P":
        arr = np.asarray(im.convert("RGBA" if "transparency" in im.info else "RGB"))
    elif mode == "1":
        arr = np.asarray(im.convert("L"))
    else:  # a tRNS colour key on grey/RGB is ignored
        arr = np.asarray(im)
    return arr[..., None] if arr.ndim == 2 else arr


def expected_pixels(case: Case, encoding: str) -> np.ndarray:
    """Pillow's decode of the source (first frame), upright, as the documented rule stores it.

    Upright by Pillow's own reading (it applies TIFF orientation while loading); that reading is
    checked independently of Pillow below, against the arrays the cases were made from."""
    im = Image.open(io.BytesIO(case.data))
    im.load()
    im = ImageOps.exif_transpose(im)
    mode, trns = im.mode, "transparency" in im.info
    if mode.startswith("I") or mode == "F":
        arr = np.asarray(im).astype(np.int64).astype(np.uint16)  # 16-bit stays 16-bit; I/F only when they fit
    elif mode in ("P", "PA"):
        arr = np.asarray(im.convert("RGBA" if trns or mode == "PA" else "RGB"))
    elif mode == "1":
        arr = np.asarray(im.convert("L"))
    elif mode in ("L", "RGB") and trns:
        arr = np.asarray(im.convert("LA" if mode == "L" else "RGBA"))
    elif mode in ("L", "LA", "RGB", "RGBA"):
        arr = np.asarray(im)
    else:
        arr = np.asarray(im.convert("RGB"))
    arr = arr[..., None] if arr.ndim == 2 else arr
    if encoding in ("jpeg", "raw") and arr.dtype == np.uint16:
        arr = (arr >> 8).astype(np.uint8)  # what tf.image.convert_image_dtype does
    if encoding == "jpeg" and arr.shape[2] in (2, 4):
        arr = arr[..., :-1]
    return np.ascontiguousarray(arr)


def decoded(rec: dict) -> np.ndarray:
    import tensorflow as tf

    if rec["format"] == "RAW":
        return np.frombuffer(rec["encoded"], np.uint8).reshape(rec["height"], rec["width"], rec["channels"])
    hdr = png_header(rec["encoded"])
    dtype = tf.uint16 if hdr is not None and hdr.bit_depth == 16 else tf.uint8
    return tf.io.decode_image(rec["encoded"], channels=0, dtype=dtype, expand_animations=False).numpy()


COLORSPACE = {1: "GRAYSCALE", 2: "GRAYSCALE_ALPHA", 3: "RGB", 4: "RGBA"}
SOURCE_FORMAT = {"jpg": "JPEG", "png": "PNG", "bmp": "BMP"}


@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize("name", list(BY_NAME))
def test_record_decodes_as_declared_and_holds_the_source_pixels(tree, encoding, name):
    case = BY_NAME[name]
    records, skipped = converted(tree, encoding)
    if case.skip is not None:
        assert name in skipped, f"{name} was stored, but must be skipped ({case.skip})"
        assert re.search(case.skip, skipped[name]), skipped[name]
        return
    assert name in records, f"{name} was skipped: {skipped.get(name)}"
    rec = records[name]
    shape = (rec["height"], rec["width"], rec["channels"])

    # 1. TensorFlow's decoder gives the declared shape; colorspace agrees
    pixels = decoded(rec)
    assert pixels.shape == shape, f"declared {shape}, TensorFlow decodes {pixels.shape}"
    assert rec["colorspace"] == COLORSPACE[rec["channels"]]
    if rec["format"] == "RAW":
        assert len(rec["encoded"]) == rec["height"] * rec["width"] * rec["channels"]

    ext = name.rsplit(".", 1)[1]
    kept = encoding == "keep" and rec["encoded"] == case.data
    if encoding == "keep" and "must_keep" in case.tags:
        assert kept, f"{name}: TensorFlow decodes the file's own bytes, but they were re-encoded"
    if kept:  # the source's own bytes: TensorFlow reads them as Pillow does (colour keys aside)
        assert rec["format"] == SOURCE_FORMAT.get(ext), f"kept a {ext} as {rec['format']}"
        if "rgb16" in case.tags:
            assert pixels.dtype == np.uint16 and pixels.max() > 255
        elif rec["format"] != "JPEG":
            np.testing.assert_array_equal(pixels, _tf_view(Image.open(io.BytesIO(case.data))))
        elif name in CLEAN_JPEG:  # libjpeg's header-only warnings: TensorFlow gives the undamaged file's pixels
            np.testing.assert_array_equal(pixels, decoded({**rec, "encoded": CLEAN_JPEG[name]}))
        return

    # 2 + 3. re-encoded: upright, and lossless unless the target (or the source) is lossy
    want = expected_pixels(case, encoding)
    assert pixels.shape == want.shape, f"stored {pixels.shape}, the upright source is {want.shape}"
    lossy = encoding == "jpeg" or rec["format"] == "JPEG"
    if lossy:
        diff = np.abs(pixels.astype(np.int64) - want.astype(np.int64)).mean()
        assert diff < (20 if encoding == "jpeg" else 4), (
            f"mean difference {diff:.1f} from the upright source"
        )  # a flip: ~100
    else:
        assert pixels.dtype == want.dtype, f"stored {pixels.dtype}, the source is {want.dtype}"
        np.testing.assert_array_equal(pixels, want)
    # upright, known independently of Pillow: the arrays the case was made from
    if case.orientation != 1:
        assert pixels.shape[:2] == (H, W), f"orientation {case.orientation} not applied"
        mode = case.name.split("_")[1]
        exact = not lossy and not case.lossy_source
        if exact and mode == "RGB":
            np.testing.assert_array_equal(pixels[..., :3], upright_rgb())
        if exact and mode in ("I16", "I16B") and encoding in ("keep", "png"):
            np.testing.assert_array_equal(pixels[..., 0], upright_gray16())


def test_the_matrix_covers_what_it_claims():
    """A guard against a generator that quietly stops making cases."""
    names = set(BY_NAME)
    assert len(CASES) >= 360
    for prefix in ("png_", "tif_", "jpg_", "webp_", "bmp_", "gif_"):
        assert sum(n.startswith(prefix) for n in names) >= 3, prefix
    assert {c.orientation for c in CASES} == set(range(1, 9))


def test_sixteen_bit_sources_stay_sixteen_bit(tree):
    """The rows of the issue: big- and little-endian 16-bit TIFFs and 32-bit integer TIFFs keep their values."""
    for enc in ("keep", "png"):
        records, _ = converted(tree, enc)
        for name in ("tif_I16_raw_o1.tif", "tif_I16B_raw_o1.tif", "tif_I_raw_o1.tif", "png_I16_o1.png"):
            px = decoded(records[name])
            assert px.dtype == np.uint16 and px.shape == (16, 24, 1), (enc, name)
            assert px.min() >= 291 or name.startswith("tif_I_"), (enc, name, px.min())
    man = json.loads((tree / "out-keep" / "dataset.json").read_text())
    assert man["dtype"] == "uint16" and man["depths"]["16"] > 0


def test_fewer_bits_than_the_source_are_counted_never_silent(tree):
    """16-bit colour (Pillow decodes it to 8 bits) and 16-bit grey into 8-bit targets (JPEG, RAW)
    are stored by a documented rule and counted in dataset.json; 16-bit grey in PNG is not."""
    counts = {}
    for enc in ENCODINGS:
        converted(tree, enc)
        counts[enc] = json.loads((tree / f"out-{enc}" / "dataset.json").read_text())["reduced_depth"]
    colour = "16-bit colour -> 8-bit (Pillow decodes it to 8 bits)"
    grey = "16-bit -> 8-bit (the target holds 8 bits)"
    assert counts["keep"] == {colour: 1}  # the 48-bit TIFF; 16-bit colour PNGs are kept as they are
    assert counts["png"] == {colour: 3}  # and the two 16-bit colour PNGs, re-encoded
    n_grey = sum(1 for c in CASES if c.skip is None and c.name.split("_")[1] in ("I16", "I16B", "I", "I16_tRNS"))
    assert counts["raw"] == {colour: 3, grey: n_grey} == counts["jpeg"]
