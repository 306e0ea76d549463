"""TensorFlow Datasets opens every output directly: `tfds.builder_from_directory(out).as_dataset(...)`.

One conversion per encoding mode, of one tiny tree (24 images, 3 truncated JPEGs skipped, the
train split re-cut after them), module-scoped; every record read back with the real
tensorflow-datasets package and compared with what TensorFlow's own decoder makes of the stored
bytes (conftest.decode).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import tensorflow_datasets as tfds  # the test extra: a missing install fails, it does not skip

from helpers import (
    decode,
    make_dataset,
    natural_image,
    read_records,
    save,
    tree_with_broken,
)

OPTIONS = ["--split", "train=0.75,validation=0.25", "--shards", "train=3,validation=1", "--index"]
MODES = {  # name -> convert options, the image feature TFDS should see (shape, dtype)
    "keep": ([], "Image", (None, None, None)),
    "png": (["--encoding", "png", "--channels", "3"], "Image", (None, None, 3)),
    "jpeg": (["--encoding", "jpeg", "--resize", "24x20", "--channels", "1"], "Image", (20, 24, 1)),
    "raw": (["--encoding", "raw", "--resize", "24x20", "--channels", "3"], "Tensor", (20, 24, 3)),
    "raw-any-size": (["--encoding", "raw"], "Tensor", (None,)),
}


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    """mode -> output directory, each converted once from the same tree."""
    from click.testing import CliRunner

    from img2tfrecord.cli import main

    root = tree_with_broken(tmp_path_factory.mktemp("data"))
    # same names, so the same plan (and re-cut): an RGBA PNG and a grayscale JPEG for --channels keep
    save(natural_image(30, 20, 7, "RGBA"), root / "cat" / "img_000.png")
    save(natural_image(28, 36, 8, "L"), root / "cat" / "img_001.jpg", quality=90)
    base = tmp_path_factory.mktemp("out")
    out = {}
    for mode, (opts, _, _) in MODES.items():
        res = CliRunner().invoke(
            main, ["convert", str(root), str(base / mode), *OPTIONS, *opts, "--quiet"], catch_exceptions=False
        )
        assert res.exit_code == 0, res.output
        out[mode] = base / mode
    return out


def manifest_of(out: Path) -> dict:
    return json.loads((out / "dataset.json").read_text())


@pytest.mark.parametrize("mode", MODES)
def test_tfds_reads_every_record_of_every_mode(outputs, mode):
    out = outputs[mode]
    man = manifest_of(out)
    _, kind, shape = MODES[mode]
    assert len(man["skipped"]) == 3 and [sh["records"] for sh in man["splits"]["train"]["shards"]] == [
        6,
        6,
        6,
    ]  # re-cut
    builder = tfds.builder_from_directory(str(out))
    feature = builder.info.features["image/encoded"]
    assert type(feature).__name__ == kind and tuple(feature.shape) == shape and feature.dtype.name == "uint8"
    label = builder.info.features["image/class/label"]
    assert type(label).__name__ == "ClassLabel" and label.names == man["classes"] == ["cat", "dog", "fox"]
    assert builder.info.supervised_keys == ("image/encoded", "image/class/label")
    records = {}
    for rec in read_records(out):
        records[rec["filename"]] = rec
    for split, info in man["splits"].items():
        assert builder.info.splits[split].num_examples == info["records"]
        assert builder.info.splits[split].shard_lengths == [sh["records"] for sh in info["shards"]]
        seen = []
        for ex in tfds.as_numpy(builder.as_dataset(split=split)):
            rec = records[ex["image/filename"]]
            want = decode(rec)  # TensorFlow's decode of the stored bytes
            if mode == "raw-any-size":
                want = want.reshape(-1)
            if shape[-1] == 3 and want.shape[-1] != 3:
                want = np.repeat(want[..., :1], 3, -1) if want.shape[-1] < 3 else want[..., :3]
            np.testing.assert_array_equal(ex["image/encoded"], want)
            assert ex["image/class/label"] == rec["label"] and label.int2str(rec["label"]) == rec["text"].decode()
            for key in ("height", "width", "channels"):
                assert ex[f"image/{key}"] == rec[key]
            seen.append(ex["image/filename"])
        assert sorted(seen) == sorted(f for f, r in records.items() if r["shard"].startswith(split + "-"))
    pairs = list(tfds.as_numpy(builder.as_dataset(split="validation", as_supervised=True)))
    assert len(pairs) == man["splits"]["validation"]["records"] and all(np.ndim(y) == 0 for _, y in pairs)


def test_channels_keep_gives_each_image_its_own(outputs):
    builder = tfds.builder_from_directory(str(outputs["keep"]))
    got = {
        ex["image/filename"]: ex["image/encoded"].shape[-1] for ex in tfds.as_numpy(builder.as_dataset(split="train"))
    }
    got |= {
        ex["image/filename"]: ex["image/encoded"].shape[-1]
        for ex in tfds.as_numpy(builder.as_dataset(split="validation"))
    }
    assert got[b"cat/img_000.png"] == 4 and got[b"cat/img_001.jpg"] == 1 and got[b"dog/img_001.jpg"] == 3


def test_metadata_comes_from_the_manifest_alone(outputs, tmp_path):
    """Deterministic (no path, time or engine in it), written with dataset.json, and not a shard to anyone."""
    from img2tfrecord.format import tfds as tfds_metadata
    from img2tfrecord.inspection.scan import inspect
    from img2tfrecord.loader import load

    out = outputs["keep"]
    names = ["dataset_info.json", "features.json", "image.class.label.labels.txt"]
    assert sorted(tfds_metadata.files(manifest_of(out))) == sorted(names)
    for name, text in tfds_metadata.files(manifest_of(out)).items():
        assert (out / name).read_text(encoding="utf-8") == text
    moved = shutil.copytree(out, tmp_path / "elsewhere")  # a copy under another name opens the same
    assert len(list(tfds.builder_from_directory(str(moved)).as_dataset(split="validation"))) == 6
    report = inspect([str(out)], verify=True)
    assert report.ok and not [p for p in report.problems], [p.message for p in report.problems]
    assert len(list(load(out, "train"))) == 18


def test_compressed_shards_get_no_tfds_metadata(cli, tmp_path):
    """TFDS' TFRecord reader takes no compression type: no metadata rather than metadata that fails."""
    make_dataset(tmp_path / "in", {"a": 2, "b": 1})
    out = tmp_path / "out"
    assert cli("convert", tmp_path / "in", out, "--quiet").exit_code == 0
    assert (out / "features.json").exists()
    assert cli("convert", tmp_path / "in", out, "--compression", "gzip", "--overwrite", "--quiet").exit_code == 0
    assert sorted(p.name for p in out.iterdir()) == [
        "dataset.catalog",
        "dataset.json",
        "labels.txt",
        "train-00000-of-00001",
    ]  # stale ones gone


def test_label_offset_and_odd_class_names(tmp_path):
    """The names file TFDS reads: placeholders below a positive --label-offset; none if TFDS would misread it."""
    from tensorflow_datasets.core.features import FeaturesDict

    from img2tfrecord.format import tfds as tfds_metadata

    def tfds_label(manifest: dict):
        d = tmp_path / str(len(list(tmp_path.iterdir())))
        d.mkdir()
        for name, text in tfds_metadata.files(manifest).items():
            (d / name).write_text(text, encoding="utf-8")
        feats = FeaturesDict.from_json(json.loads((d / "features.json").read_text()))
        feats.load_metadata(str(d))
        return feats["image/class/label"]

    base = {"classes": ["cat", "dog"], "options": {"encoding": "keep", "channels": "keep"}, "splits": {}}
    inception = tfds_label(base | {"label_offset": 1})
    assert inception.names == ["(unused 0)", "cat", "dog"] and inception.str2int("dog") == 2
    assert tfds_label(base | {"classes": [" cat", "dog"]}).names == ["0", "1"]  # TFDS strips lines: no names file
    assert type(tfds_label(base | {"label_offset": -1})).__name__ == "Scalar"


def test_sixteen_bit_pngs_read_back_as_uint16(cli, tmp_path):
    """A 16-bit source stays 16-bit, and TFDS decodes the dataset as uint16 (dataset.json's dtype)."""
    from PIL import Image

    src = tmp_path / "in" / "a"
    src.mkdir(parents=True)
    deep = (np.arange(24 * 16, dtype=np.uint16).reshape(16, 24) * 150 + 291).astype(np.uint16)
    Image.fromarray(deep).save(src / "deep.tif")
    Image.fromarray(np.full((16, 24), 7, np.uint8)).save(src / "flat.png")
    out = tmp_path / "out"
    assert cli("convert", tmp_path / "in", out).exit_code == 0
    assert json.loads((out / "dataset.json").read_text())["dtype"] == "uint16"
    builder = tfds.builder_from_directory(str(out))
    assert builder.info.features["image/encoded"].dtype.name == "uint16"
    rows = {ex["image/filename"].decode(): ex for ex in tfds.as_numpy(builder.as_dataset(split="train"))}
    got = rows["a/deep.tif"]["image/encoded"]
    assert got.dtype == np.uint16 and np.array_equal(got[..., 0], deep)
    assert rows["a/flat.png"]["image/encoded"].max() == 7 * 257  # 8-bit scaled to 16 bits, as tf.image does


def test_docs_tfds_recipe_runs(outputs):
    import re

    reading = (Path(__file__).resolve().parents[2] / "docs" / "reading.md").read_text(encoding="utf-8")
    block = re.search(r"```python\n(.*?)```", reading.split("## TensorFlow Datasets", 1)[1], re.S).group(1)
    scope: dict = {}
    exec(compile(block.replace('"out"', repr(str(outputs["png"]))), "docs/reading.md", "exec"), scope)
    assert scope["names"] == ["cat", "dog", "fox"] and scope["n"] == 18
    image, label = next(iter(scope["train"]))
    assert image.shape[-1] == 3 and label.dtype.name == "int64"
