"""`img2tfrecord.load` and `img2tfrecord.FEATURES`: the reading half, with real TensorFlow and Keras."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import img2tfrecord
from img2tfrecord.errors import UsageError
from img2tfrecord.format.schema import FEATURE_TYPES
from img2tfrecord.tf_import import tensorflow
from inspect_helpers import VARIANTS, encode, make_items, pixels, write_dataset

CLASSES = ["cat", "dog", "fox"]
READING = Path(__file__).resolve().parents[2] / "docs" / "reading.md"


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    """Every encoding and channel count, in a plain and a gzip dataset, train (2 shards) + validation."""
    root = tmp_path_factory.mktemp("reader")
    train = make_items(CLASSES, {"cat": 4, "dog": 3, "fox": 3}, split="train", label_offset=1)
    val = make_items(CLASSES, {"cat": 1, "dog": 1, "fox": 1}, split="validation", seed=2, label_offset=1)
    write_dataset(root / "plain", train + val, CLASSES, {"train": 2, "validation": 1}, label_offset=1)
    # what the docs' plain-TensorFlow snippet expects: every image decodes to 3 channels
    rgb = make_items(
        CLASSES, {"cat": 3, "dog": 3}, variants=[("JPEG", "RGB"), ("PNG", "RGBA"), ("PNG", "L"), ("RAW", "RGB")]
    )
    write_dataset(root / "rgb", rgb, CLASSES, {"train": 2}, index=True)
    gz = make_items(CLASSES, {"cat": 2, "dog": 2}, split="train")
    write_dataset(root / "gz", gz, CLASSES, {"train": 2}, compression="gzip")
    return SimpleNamespace(root=root, train=train, val=val, gz=gz, rgb=rgb)


def by_name(ds) -> dict[str, dict[str, np.ndarray]]:
    return {r["image/filename"].decode(): r for r in ds.as_numpy_iterator()}


def test_features_is_the_parse_spec_of_our_schema(data: SimpleNamespace) -> None:
    tf = tensorflow()
    spec = img2tfrecord.FEATURES
    assert set(spec) == set(FEATURE_TYPES)
    for key, kind in FEATURE_TYPES.items():
        assert spec[key].dtype == {"bytes": tf.string, "int64": tf.int64}[kind] and spec[key].shape == []
    it = data.train[0]
    ex = tf.io.parse_single_example(it.serialize(), spec)
    assert ex["image/filename"].numpy().decode() == it.filename and int(ex["image/height"]) == it.h


def test_load_gives_count_shapes_labels_and_pixels_for_every_encoding(data: SimpleNamespace) -> None:
    tf = tensorflow()
    assert {(it.fmt, it.channels) for it in data.train} == {
        (f, {"L": 1, "LA": 2, "RGB": 3, "RGBA": 4}[m]) for f, m in VARIANTS
    }
    ds = img2tfrecord.load(data.root / "plain")
    assert len(ds) == len(data.train)  # cardinality from dataset.json
    assert ds.class_names == CLASSES
    assert ds.element_spec[0].shape.as_list() == [None, None, 3] and ds.element_spec[0].dtype == tf.uint8
    labels = Counter(int(label) for _, label in ds)
    assert labels == Counter(it.label for it in data.train)

    recs = by_name(img2tfrecord.load(data.root / "plain", as_dict=True, channels=None))
    assert set(recs) == {it.filename for it in data.train}
    assert {"image", "label", *FEATURE_TYPES} <= set(next(iter(recs.values())))
    for it in data.train:
        r = recs[it.filename]
        assert r["image"].shape == (it.h, it.w, it.channels) and r["image"].dtype == np.uint8
        assert r["label"] == it.label and r["image/class/text"].decode() == it.cls
        if it.fmt != "JPEG":  # lossless: exactly the pixels that were stored
            np.testing.assert_array_equal(r["image"], pixels(it.image))


@pytest.mark.parametrize("channels", [1, 2, 3, 4])
def test_load_converts_channels(data: SimpleNamespace, channels: int) -> None:
    recs = by_name(img2tfrecord.load(data.root / "plain", split="validation", channels=channels, as_dict=True))
    assert len(recs) == len(data.val)
    for it in data.val:
        img = recs[it.filename]["image"]
        assert img.shape == (it.h, it.w, channels)
        if it.fmt == "JPEG":
            continue
        src = pixels(it.image)
        color = src[..., :3] if it.channels >= 3 else np.repeat(src[..., :1], 3, -1)
        if channels == 3:
            np.testing.assert_array_equal(img, color)
        if channels in (2, 4):  # alpha kept, or opaque when there was none
            alpha = src[..., -1] if it.channels in (2, 4) else np.full(src.shape[:2], 255)
            np.testing.assert_array_equal(img[..., -1], alpha)


def test_load_resizes_to_float_and_reads_gzip_and_globs(data: SimpleNamespace) -> None:
    tf = tensorflow()
    ds = img2tfrecord.load(str(data.root / "gz"), image_size=(8, 12), shuffle_files=True, seed=1)
    assert ds.element_spec[0].shape.as_list() == [8, 12, 3] and ds.element_spec[0].dtype == tf.float32
    images = [img for img, _ in ds]
    assert len(images) == len(data.gz) and all(float(tf.reduce_max(i)) <= 255.0 for i in images)
    # a glob, no dataset.json: compression is sniffed from the files, split is not needed
    ds = img2tfrecord.load(str(data.root / "gz" / "train-*"), image_size=5)
    assert sum(1 for _ in ds) == len(data.gz)
    files = sorted(str(p) for p in (data.root / "plain").glob("validation-*"))
    assert sum(1 for _ in img2tfrecord.load(files)) == len(data.val)


def test_load_usage_errors(data: SimpleNamespace, tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"no split 'test'.*train, validation"):
        img2tfrecord.load(data.root / "plain", split="test")
    with pytest.raises(UsageError, match="channels"):
        img2tfrecord.load(data.root / "plain", channels=5)
    with pytest.raises(UsageError, match="matches shard files"):
        img2tfrecord.load(str(tmp_path / "nothing-*"))


def test_load_trains_a_keras_model(data: SimpleNamespace) -> None:
    keras = tensorflow().keras
    ds = img2tfrecord.load(data.root / "plain", image_size=(16, 16), shuffle_files=True)
    model = keras.Sequential(
        [
            keras.Input((16, 16, 3)),
            keras.layers.Rescaling(1 / 255),
            keras.layers.Conv2D(4, 3, activation="relu"),
            keras.layers.GlobalAveragePooling2D(),
            keras.layers.Dense(len(CLASSES) + 1),  # labels 1..3 with label_offset 1
        ]
    )
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    hist = model.fit(ds.batch(4), epochs=1, steps_per_epoch=1, verbose=0, shuffle=False)
    assert np.isfinite(hist.history["loss"][0])


def test_docs_plain_tensorflow_reader_runs(data: SimpleNamespace) -> None:
    """The plain-TensorFlow snippet of docs/reading.md is real code: run it against a real dataset."""
    text = READING.read_text(encoding="utf-8")
    if "## Plain TensorFlow" not in text:
        pytest.fail("docs/reading.md has no 'Plain TensorFlow' section")
    section = text.split("## Plain TensorFlow", 1)[1]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    plain = next(b for b in blocks if "TFRecordDataset" in b)
    code = plain.replace('"out/', f'"{data.root / "rgb"}/')
    scope: dict = {}
    exec(compile(code, "docs/reading.md", "exec"), scope)
    images, labels = next(iter(scope["ds"].batch(100)))
    assert images.shape[0] == len(data.rgb) and images.shape[-1] == 3
    assert sorted(labels.numpy().tolist()) == sorted(it.label for it in data.rgb)


@pytest.mark.parametrize("formats", [{}, {"JPEG": 6}], ids=["any-format", "manifest-says-jpeg"])
@pytest.mark.parametrize("shuffle", [False, True])
def test_load_names_the_image_that_does_not_decode(tmp_path: Path, formats: dict, shuffle: bool) -> None:
    """TensorFlow alone says `Invalid JPEG data or crop window`; load() names shard, record and image/filename."""
    tf = tensorflow()
    items = make_items(CLASSES, {"cat": 3, "dog": 3}, variants=[("JPEG", "RGB")])
    for it in (items[1], items[2]):  # two in a row, the second its shard's last record
        it.encoded = it.encoded[: len(it.encoded) // 2]  # cut short: the CRC is fine, the JPEG is not
    man = write_dataset(tmp_path / "out", items, CLASSES, {"train": 2})
    man["formats"] = formats
    (tmp_path / "out" / "dataset.json").write_text(json.dumps(man))
    shard = tmp_path / "out" / "train-00000-of-00002"
    size = len(items[1].encoded)
    want = f"{shard}: record 1: image/filename {items[1].filename} (JPEG, {size} bytes) does not decode"
    with pytest.raises(tf.errors.InvalidArgumentError, match=re.escape(want)):
        for _ in img2tfrecord.load(tmp_path / "out", shuffle_files=shuffle, seed=3):
            pass
    items[1].encoded = encode(items[1].image, "JPEG")  # now only the last record of the shard is broken
    write_dataset(tmp_path / "out", items, CLASSES, {"train": 2})
    want = (
        f"{shard}: record 2: image/filename {items[2].filename} (JPEG, {len(items[2].encoded)} bytes) does not decode"
    )
    with pytest.raises(tf.errors.InvalidArgumentError, match=re.escape(want)):
        for _ in img2tfrecord.load(tmp_path / "out", image_size=8):
            pass


def test_manifest_specialised_decoding_gives_the_same_pixels(tmp_path: Path, cli) -> None:
    """load() drops the decoding branches dataset.json rules out; the pixels are those of the
    general per-record decoder (what load() does for files without a manifest)."""
    from helpers import make_dataset, natural_image, save

    make_dataset(tmp_path / "in", {"a": 3, "b": 3})
    save(natural_image(30, 20, 5, "RGBA"), tmp_path / "in" / "a" / "rgba.png")
    save(natural_image(30, 20, 6, "LA"), tmp_path / "in" / "a" / "la.png")
    save(natural_image(24, 28, 7, "L"), tmp_path / "in" / "b" / "grey.jpg", quality=90)
    runs = {
        "keep": [],
        "jpeg": ["--encoding", "jpeg"],
        "png3": ["--encoding", "png", "--channels", "3"],
        "raw": ["--encoding", "raw"],
        "raw1": ["--encoding", "raw", "--channels", "1"],
    }
    for name, opts in runs.items():
        out = tmp_path / name
        assert cli("convert", tmp_path / "in", out, "--quiet", *opts).exit_code == 0
        files = sorted(str(p) for p in out.glob("train-*-of-*"))
        for channels in (None, 1, 3, 4) if name in ("keep", "raw") else (3,):
            fast = by_name(img2tfrecord.load(out, channels=channels, as_dict=True))
            general = by_name(img2tfrecord.load(files, channels=channels, as_dict=True))  # no manifest
            assert sorted(fast) == sorted(general) and len(fast) == 9
            for f, r in fast.items():
                np.testing.assert_array_equal(
                    r["image"], general[f]["image"], err_msg=f"{name} channels={channels} {f}"
                )


def test_load_keeps_sixteen_bit_images_sixteen_bit(cli, tmp_path):
    """dataset.json's dtype is load()'s default: a 16-bit TIFF comes back with its values; 8-bit
    images beside it are scaled to 16 bits (x257); dtype="uint8" gives TensorFlow's v >> 8."""
    import numpy as np
    from PIL import Image

    import img2tfrecord

    src = tmp_path / "in" / "a"
    src.mkdir(parents=True)
    deep = (np.arange(24 * 16, dtype=np.uint16).reshape(16, 24) * 150 + 291).astype(np.uint16)
    Image.fromarray(deep).save(src / "deep.tif")
    Image.fromarray(np.full((16, 24, 3), 7, np.uint8)).save(src / "flat.jpg", quality=100)
    out = tmp_path / "out"
    assert cli("convert", tmp_path / "in", out).exit_code == 0
    got = {
        d["image/filename"].numpy().decode(): d["image"].numpy()
        for d in img2tfrecord.load(out, channels=None, as_dict=True)
    }
    assert got["a/deep.tif"].dtype == np.uint16 and np.array_equal(got["a/deep.tif"][..., 0], deep)
    assert got["a/flat.jpg"].dtype == np.uint16 and abs(int(got["a/flat.jpg"].mean()) - 7 * 257) <= 257
    eight = {
        d["image/filename"].numpy().decode(): d["image"].numpy()
        for d in img2tfrecord.load(out, channels=3, as_dict=True, dtype="uint8")
    }
    assert eight["a/deep.tif"].dtype == np.uint8 and np.array_equal(
        eight["a/deep.tif"][..., 0], (deep >> 8).astype(np.uint8)
    )
