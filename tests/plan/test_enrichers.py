"""An enricher is one place (conversion.plan.enrich, conversion.plan.enrichers): a dummy one added to
`KINDS` in this test alone shows its column in convert's records (read by TensorFlow), its skip
reason in convert's skips, its part of dataset.json, and its stamp in update's change detection;
and each enricher the options ask for declares its columns and the reasons of its skips."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from helpers import make_dataset
from img2tfrecord import convert, update
from img2tfrecord.conversion.plan import enrichers
from img2tfrecord.conversion.plan.enrich import Batch, Enriched, Enricher, Skip
from img2tfrecord.conversion.plan.table import ImageTable
from img2tfrecord.format.schema import MetaValue

SKIP = "dummy: its weight is negative"


class Weights:
    """A dummy enricher: each image's weight from a JSON file outside INPUT (the feature
    `image/weight`), images of a negative weight skipped, the weight as the change stamp."""

    name = "weights.json"
    columns: tuple[str, ...] = ("meta",)
    skip_reasons: tuple[str, ...] = (SKIP,)
    labels_images = False

    def __init__(self, path: Path) -> None:
        self.inputs: tuple[str, ...] = (str(path),)
        self.weights: dict[str, int] = json.loads(path.read_text())

    def enrich(self, batch: Batch) -> Enriched:
        keep, meta, skips = [], [], []
        for k, name in enumerate(batch.names):
            rel = batch.prefix + name
            w = self.weights.get(rel.decode(), 0)
            if w < 0:
                skips.append(Skip(rel, SKIP))
                continue
            keep.append(k)
            meta.append((MetaValue("image/weight", "int64", (w,)),))
        return Enriched(keep, {"meta": meta}, skips)

    def leftovers(self, seen: set[bytes]) -> list[dict[str, str]]:
        return []

    def none_kept(self, input_dir: str, found: int, example: str) -> str:
        return f"every image of {input_dir} weighs less than nothing"

    def record(self) -> dict[str, Any] | None:
        return {"columns": {"weight": {"type": "int64", "list": False}}}

    def stamp(self, table: ImageTable, i: int) -> bytes | None:
        return self.weights.get(table.rel(i), 0).to_bytes(8, "little", signed=True)

    def input_changed(self, recorded: Mapping[str, Any]) -> bool:
        return False

    def written(self, metadata: dict[str, Any], skipped: list[dict[str, str]], tasks: Any) -> dict[str, Any]:
        return metadata

    def published(self, metadata: dict[str, Any], rels: Any) -> dict[str, Any]:
        return metadata


@pytest.fixture
def weights(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The one place: a `Kind` added to the list, for convert (options) and update (dataset.json)."""
    path = tmp_path / "weights.json"
    kind = enrichers.Kind(
        "weights",
        lambda input_dir, options: Weights(path),
        lambda manifest, input_dir, output_dir: Weights(path),
    )
    monkeypatch.setattr(enrichers, "KINDS", [*enrichers.KINDS, kind])
    return path


def _weights(out: Path) -> dict[str, int]:
    """image/filename -> image/weight of every record, as TensorFlow parses them."""
    import tensorflow as tf

    spec = {
        "image/filename": tf.io.FixedLenFeature([], tf.string),
        "image/weight": tf.io.FixedLenFeature([], tf.int64),
    }
    got = {}
    for f in sorted(out.glob("*-of-*")):
        for raw in tf.data.TFRecordDataset(str(f)):
            ex = tf.io.parse_single_example(raw, spec)
            got[ex["image/filename"].numpy().decode()] = int(ex["image/weight"].numpy())
    return got


def test_a_dummy_enricher_shows_in_convert_and_in_update(tmp_path: Path, weights: Path) -> None:
    data, out = tmp_path / "data", tmp_path / "out"
    make_dataset(data, {"cat": 4, "dog": 3})
    weights.write_text(json.dumps({"cat/img_000.png": 7, "cat/img_001.jpg": 2, "dog/img_002.jpg": -1}))
    convert(data, out, workers=1)
    records = _weights(out)
    assert records == {
        "cat/img_000.png": 7,
        "cat/img_001.jpg": 2,
        "cat/img_002.jpg": 0,
        "cat/img_003.png": 0,
        "dog/img_000.png": 0,
        "dog/img_001.jpg": 0,
    }
    man = json.loads((out / "dataset.json").read_text())
    assert man["skipped"] == [{"path": "dog/img_002.jpg", "split": "train", "reason": SKIP}]
    assert man["metadata"]["columns"] == {"weight": {"type": "int64", "list": False}}
    assert man["features"]["image/weight"] == "int64"

    weights.write_text(json.dumps({"cat/img_000.png": 8, "cat/img_001.jpg": 2, "dog/img_002.jpg": -1}))
    summary = update(data, out, workers=1)
    assert summary["splits"]["train"]["changed"] == 1  # its stamp changed, its file did not
    assert summary["splits"]["train"]["unchanged"] == 5
    assert _weights(out) == records | {"cat/img_000.png": 8}
    assert update(data, out, workers=1).get("up_to_date")


def test_every_enricher_declares_its_columns_and_skips(tmp_path: Path) -> None:
    """The enrichers the options ask for are `Enricher`s whose skips give one of their reasons."""
    data = tmp_path / "data"
    make_dataset(data, {"cat": 2})
    (data / "metadata.jsonl").write_text(json.dumps({"file_name": "cat/img_000.png", "w": 1}) + "\n")
    found = enrichers.for_convert(str(data), {"metadata": None, "file_list": None, "annotations": None})
    assert [type(e).__name__ for e in found] == ["MetadataRows"]
    (e,) = found
    assert isinstance(e, Enricher) and e.columns == ("meta",)
    names = [b"img_000.png", b"img_001.jpg"]
    got = e.enrich(Batch(b"cat/", "", names, *([0, 0],) * 2))  # type: ignore[arg-type]
    assert got.keep == [0] and [s.rel for s in got.skips] == [b"cat/img_001.jpg"]
    assert all(s.reason.startswith(e.skip_reasons) for s in got.skips)
    assert e.stamp(ImageTable("", False, [], []), 0) is None  # a changed metadata file is refused instead


def test_a_dummy_enricher_beside_one_that_gives_the_classes(tmp_path: Path, weights: Path) -> None:
    """INPUT walked whole (a multi-label metadata file gives the classes): the dummy's feature and
    skip beside the file's labels, each record's features sorted by key."""
    import tensorflow as tf

    data, out = tmp_path / "data", tmp_path / "out"
    make_dataset(data, {"a": 2, "b": 2})
    rows = [("a/img_000.png", ["x"]), ("a/img_001.jpg", ["x", "y"]), ("b/img_000.png", ["y"]), ("b/img_001.jpg", ["x"])]
    (data / "metadata.jsonl").write_text("".join(json.dumps({"file_name": f, "labels": ls}) + "\n" for f, ls in rows))
    weights.write_text(json.dumps({"a/img_001.jpg": 5, "b/img_001.jpg": -2}))
    convert(data, out, workers=1)
    man = json.loads((out / "dataset.json").read_text())
    assert man["skipped"] == [{"path": "b/img_001.jpg", "split": "train", "reason": SKIP}]
    assert man["metadata"]["multi_label"] and man["metadata"]["columns"] == {"weight": {"type": "int64", "list": False}}
    spec = {
        "image/filename": tf.io.FixedLenFeature([], tf.string),
        "image/weight": tf.io.FixedLenFeature([], tf.int64),
        "image/class/text": tf.io.VarLenFeature(tf.string),
    }
    got = {}
    for f in sorted(out.glob("*-of-*")):
        for raw in tf.data.TFRecordDataset(str(f)):
            ex = tf.io.parse_single_example(raw, spec)
            texts = [t.decode() for t in tf.sparse.to_dense(ex["image/class/text"]).numpy()]
            got[ex["image/filename"].numpy().decode()] = (int(ex["image/weight"].numpy()), texts)
    assert got == {"a/img_000.png": (0, ["x"]), "a/img_001.jpg": (5, ["x", "y"]), "b/img_000.png": (0, ["y"])}


def test_a_file_list_refuses_an_enricher_rather_than_dropping_it(tmp_path: Path, weights: Path) -> None:
    """--file-list's rows give each image its class and split: an enricher beside it is refused in
    one line naming what it reads, not silently left out of the records."""
    from img2tfrecord.errors import UsageError

    data, out = tmp_path / "data", tmp_path / "out"
    make_dataset(data, {"cat": 2})
    weights.write_text(json.dumps({"cat/img_000.png": 7}))
    listing = tmp_path / "list.csv"
    listing.write_text("cat/img_000.png,cat\ncat/img_001.jpg,cat\n")
    with pytest.raises(UsageError, match="weights.json") as e:
        convert(data, out, workers=1, file_list=str(listing))
    assert "\n" not in str(e.value) and not out.exists()
