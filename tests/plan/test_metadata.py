"""Per-image metadata (Hugging Face imagefolder's metadata.jsonl / metadata.csv) and multi-label records.

Real image trees, the real CLI; the values written are read back with img2tfrecord.load() and with
TensorFlow's own parser given the spec dataset.json declares."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from helpers import make_dataset, natural_image, save


def _manifest(out: Path) -> dict[str, Any]:
    return json.loads((out / "dataset.json").read_text())


def _jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _tree(root: Path) -> list[str]:
    """cat/img_000.png .. and dog/...: 3 + 3 images; their rel paths."""
    files = make_dataset(root, {"cat": 3, "dog": 3})
    return [p.relative_to(root).as_posix() for ps in files.values() for p in ps]


ROWS_VALUES = {
    "caption": lambda i: f"picture {i}",
    "score": lambda i: i + 0.5 if i == 3 else i,  # ints that meet a float: a float column
    "count": lambda i: i * 10,
    "tags": lambda i: ["a", "b"][: i % 3],  # a list, empty in some rows
    "boxes": lambda i: [i, i + 1],
    "weights": lambda i: [0.25 * i],
}


def _rows(rels: list[str]) -> list[dict[str, Any]]:
    return [{"file_name": r, **{k: f(i) for k, f in ROWS_VALUES.items()}} for i, r in enumerate(rels)]


def _parsed(out: Path) -> dict[str, dict[str, Any]]:
    """Every record parsed by tf.io.parse_single_example with the spec load() builds from dataset.json."""
    import tensorflow as tf

    from img2tfrecord.loader import features_spec

    man = _manifest(out)
    spec = features_spec(man.get("metadata"))
    got = {}
    for sp in man["splits"].values():
        for sh in sp["shards"]:
            for raw in tf.data.TFRecordDataset(str(out / sh["file"])):
                ex = {k: v.numpy() for k, v in tf.io.parse_single_example(raw, spec).items()}
                got[ex["image/filename"].decode()] = ex
    return got


def test_jsonl_every_type_round_trips(tmp_path: Path, cli: Any) -> None:
    src = tmp_path / "in"
    rels = _tree(src)
    _jsonl(src / "metadata.jsonl", _rows(rels))
    res = cli("convert", src, tmp_path / "out", "--json")
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout)
    assert summary["skipped"] == [] and summary["warnings"] == []
    man = _manifest(tmp_path / "out")
    assert man["ignored_files"] == 0  # the metadata file is no ignored file
    assert man["metadata"]["columns"] == {
        "boxes": {"type": "int64", "list": True},
        "caption": {"type": "bytes", "list": False},
        "count": {"type": "int64", "list": False},
        "score": {"type": "float", "list": False},
        "tags": {"type": "bytes", "list": True},
        "weights": {"type": "float", "list": True},
    }
    assert man["metadata"]["file"] == "metadata.jsonl" and not man["metadata"]["multi_label"]
    assert man["features"]["image/score"] == "float" and man["features"]["image/tags"] == "bytes"
    features = json.loads((tmp_path / "out" / "features.json").read_text())["content"]["features"]
    assert features["image/boxes"]["tensor"]["shape"] == {"dimensions": ["-1"]}
    got = _parsed(tmp_path / "out")
    assert sorted(got) == sorted(rels)
    for i, rel in enumerate(rels):
        ex = got[rel]
        assert ex["image/caption"] == f"picture {i}".encode()
        assert ex["image/score"] == pytest.approx(ROWS_VALUES["score"](i))
        assert ex["image/count"] == i * 10
        assert [t.decode() for t in ex["image/tags"]] == ["a", "b"][: i % 3]
        assert list(ex["image/boxes"]) == [i, i + 1]
        assert list(ex["image/weights"]) == pytest.approx([0.25 * i])
        assert ex["image/class/text"].decode() == rel.split("/")[0]

    import img2tfrecord

    seen = {}
    for ex in img2tfrecord.load(tmp_path / "out", as_dict=True):
        seen[ex["image/filename"].numpy().decode()] = (ex["image/count"].numpy(), list(ex["image/boxes"].numpy()))
    assert seen == {r: (i * 10, [i, i + 1]) for i, r in enumerate(rels)}
    res = cli("inspect", tmp_path / "out", "--verify")
    assert res.exit_code == 0, res.output
    assert "image/caption" in res.output and "image/boxes" in res.output and "no problems" in res.output


def test_records_are_tensorflows_serialization(tmp_path: Path, cli: Any) -> None:
    """with_extra writes what tf.train.Example.SerializeToString(deterministic=True) writes."""
    import tensorflow as tf

    src = tmp_path / "in"
    rels = _tree(src)
    _jsonl(src / "metadata.jsonl", _rows(rels))
    assert cli("convert", src, tmp_path / "out").exit_code == 0
    shard = next((tmp_path / "out").glob("train-*"))
    raws = [r.numpy() for r in tf.data.TFRecordDataset(str(shard))]
    assert len(raws) == len(rels)
    for raw in raws:
        assert tf.train.Example.FromString(raw).SerializeToString(deterministic=True) == raw


def test_csv_types_and_lists(tmp_path: Path, cli: Any) -> None:
    src = tmp_path / "in"
    rels = _tree(src)
    with (src / "metadata.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["file_name", "caption", "score", "count", "tags"])
        for i, r in enumerate(rels):
            w.writerow([r, f"picture {i}", "1.5" if i == 0 else str(i), str(i), json.dumps(["x"] * i)])
    res = cli("convert", src, tmp_path / "out")
    assert res.exit_code == 0, res.output
    cols = _manifest(tmp_path / "out")["metadata"]["columns"]
    assert cols["score"] == {"type": "float", "list": False} and cols["count"] == {"type": "int64", "list": False}
    assert cols["tags"] == {"type": "bytes", "list": True} and cols["caption"]["type"] == "bytes"
    got = _parsed(tmp_path / "out")
    assert got[rels[2]]["image/count"] == 2 and got[rels[0]]["image/score"] == pytest.approx(1.5)
    assert list(got[rels[2]]["image/tags"]) == [b"x", b"x"]


def _multi_label_tree(root: Path) -> list[dict[str, Any]]:
    """Images anywhere below root, no class folders; rows with a labels column."""
    names = [["cat", "dog"], ["dog"], ["bird", "cat"]]
    rows = []
    for i in range(6):
        rel = f"deep/er/img_{i}.png" if i % 2 else f"img_{i}.png"
        save(natural_image(20, 16, i), root / rel)
        rows.append({"file_name": rel, "labels": names[i % 3], "n": i})
    return rows


def test_multi_label(tmp_path: Path, cli: Any) -> None:
    src = tmp_path / "in"
    rows = _multi_label_tree(src)
    _jsonl(src / "metadata.jsonl", rows)
    res = cli("convert", src, tmp_path / "out", "--split", "train=0.5,test=0.5", "--json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["warnings"] == []  # no loose images: images may sit anywhere
    out = tmp_path / "out"
    assert (out / "labels.txt").read_text() == "bird\ncat\ndog\n"
    man = _manifest(out)
    assert man["classes"] == ["bird", "cat", "dog"] and man["metadata"]["multi_label"] is True
    assert man["metadata"]["columns"] == {"n": {"type": "int64", "list": False}}
    got = _parsed(out)
    assert len(got) == 6
    index = {"bird": 0, "cat": 1, "dog": 2}
    for r in rows:
        ex = got[r["file_name"]]
        assert [t.decode() for t in ex["image/class/text"]] == r["labels"]
        assert list(ex["image/class/label"]) == [index[c] for c in r["labels"]]
        assert ex["image/n"] == r["n"]

    import img2tfrecord

    labels = {
        ex["image/filename"].numpy().decode(): list(ex["label"].numpy())
        for split in ("train", "test")
        for ex in img2tfrecord.load(out, split, as_dict=True)
    }
    assert labels == {r["file_name"]: [index[c] for c in r["labels"]] for r in rows}
    res = cli("inspect", out, "--verify")
    assert res.exit_code == 0 and "no problems" in res.output, res.output


def test_skips_and_strict(tmp_path: Path, cli: Any) -> None:
    src = tmp_path / "in"
    rels = _tree(src)
    rows = [{"file_name": r, "n": i} for i, r in enumerate(rels[1:])]  # rels[0] has no row
    rows.append({"file_name": "cat/missing.png", "n": 1})  # names no image
    rows.append({"file_name": rels[2], "n": 5})  # a second row
    rows.append({"n": 3})  # no file_name
    lines = "".join(json.dumps(r) + "\n" for r in rows)
    lines += "{not json\n" + json.dumps({"file_name": "dog/x.png", "n": True}) + "\n"
    (src / "metadata.jsonl").write_text(lines)
    res = cli("convert", src, tmp_path / "out", "--json")
    assert res.exit_code == 0, res.output
    skipped = {s["path"]: s["reason"] for s in json.loads(res.stdout)["skipped"]}
    assert skipped[rels[0]] == "no row in metadata.jsonl"
    assert skipped["cat/missing.png"].startswith("named in metadata.jsonl but not found")
    assert skipped["metadata.jsonl:7"] == f'file_name "{rels[2]}" has a row already (line 2)'
    assert skipped["metadata.jsonl:8"] == "no file_name"
    assert skipped["metadata.jsonl:9"].startswith("not a JSON object")
    assert skipped["dog/x.png"].startswith("metadata.jsonl:10: column n: a value of no usable type (bool")
    assert {s["path"] for s in _manifest(tmp_path / "out")["skipped"]} == set(skipped)
    assert f"skipped: {rels[0]}: no row in metadata.jsonl" in res.stderr
    assert len(_parsed(tmp_path / "out")) == len(rels) - 1
    res = cli("convert", src, tmp_path / "strict", "--strict")
    assert res.exit_code == 1 and "--strict" in res.stderr and not (tmp_path / "strict").exists()


def test_a_refused_row_is_one_skip_and_float32_range(tmp_path: Path, cli: Any) -> None:
    """An image whose row is refused is skipped once, with the row's reason (not also as "no row");
    a number a float32 cannot hold (TensorFlow would store an infinity) or an int64 cannot is such
    a reason, while float32's largest, infinity and NaN are stored as TensorFlow stores them."""
    src = tmp_path / "in"
    rels = _tree(src)
    values = [1e40, [0.5, -1e39], 2**63, 3.4028234663852886e38, float("inf"), float("nan")]
    (src / "metadata.jsonl").write_text(
        "".join(json.dumps({"file_name": r, "x": v}) + "\n" for r, v in zip(rels, values))
    )
    res = cli("convert", src, tmp_path / "out", "--json")
    assert res.exit_code == 0, res.output
    skipped = json.loads(res.stdout)["skipped"]
    assert sorted(s["path"] for s in skipped) == sorted(rels[:3])
    reasons = {s["path"]: s["reason"] for s in skipped}
    assert (
        reasons[rels[0]]
        == "metadata.jsonl:1: column x: 1e+40 is beyond a float32's range (at most 3.4e+38 either side)"
    )
    assert (
        reasons[rels[1]]
        == "metadata.jsonl:2: column x: -1e+39 is beyond a float32's range (at most 3.4e+38 either side)"
    )
    assert reasons[rels[2]] == f"metadata.jsonl:3: column x: {2**63} is beyond an int64's range (-2**63 to 2**63-1)"
    assert [res.stderr.count(f"skipped: {r}:") for r in rels[:3]] == [1, 1, 1]
    got = {r: ex["image/x"] for r, ex in _parsed(tmp_path / "out").items()}
    assert got[rels[3]] == pytest.approx(3.4028234663852886e38) and got[rels[4]] == float("inf")
    assert got[rels[5]] != got[rels[5]]  # NaN


@pytest.mark.parametrize(
    "rows, said",
    [
        ([{"x": "a"}, {"x": 2}], "column x mixes strings and numbers (first at line 2)"),
        ([{"x": [1]}, {"x": 2}], "column x mixes lists and single values (line 1 holds a list, line 2 does not)"),
        ([{"height": 1}, {"height": 2}], "column height would be image/height"),
        ([{"labels": "cat"}, {"labels": "dog"}], "column labels must hold lists of class names"),
    ],
)
def test_column_type_errors(tmp_path: Path, cli: Any, rows: list[dict[str, Any]], said: str) -> None:
    src = tmp_path / "in"
    rels = _tree(src)
    _jsonl(src / "metadata.jsonl", [{"file_name": r, **row} for r, row in zip(rels, rows)])
    res = cli("convert", src, tmp_path / "out")
    assert res.exit_code == 2 and said in res.stderr, res.stderr


def test_no_metadata_is_byte_identical(tmp_path: Path, cli: Any) -> None:
    """A tree converts alike with or without an unrelated option path: the metadata file alone changes it."""
    src = tmp_path / "in"
    rels = _tree(src)
    assert cli("convert", src, tmp_path / "a").exit_code == 0
    man = _manifest(tmp_path / "a")
    assert "metadata" not in man and "metadata" not in man["options"]
    other = tmp_path / "elsewhere.jsonl"
    _jsonl(other, [{"file_name": r, "n": i} for i, r in enumerate(rels)])
    assert cli("convert", src, tmp_path / "b", "--metadata", other).exit_code == 0
    assert _manifest(tmp_path / "b")["options"]["metadata"] == str(other)
    assert _parsed(tmp_path / "b")[rels[1]]["image/n"] == 1
    shutil.rmtree(tmp_path / "b")
    assert cli("convert", src, tmp_path / "c").exit_code == 0
    shards = sorted(p.name for p in (tmp_path / "a").glob("train-*"))
    assert shards and shards == sorted(p.name for p in (tmp_path / "c").glob("train-*"))
    for name in shards:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "c" / name).read_bytes()


def test_update_and_like(tmp_path: Path, cli: Any) -> None:
    src, out = tmp_path / "in", tmp_path / "out"
    rels = _tree(src)
    rows = [{"file_name": r, "n": i} for i, r in enumerate(rels)] + [{"file_name": "cat/later.png", "n": 99}]
    _jsonl(src / "metadata.jsonl", rows)
    assert cli("convert", src, out).exit_code == 0
    save(natural_image(20, 16, 7), src / "cat" / "later.png")  # its row was there already
    res = cli("update", src, out)
    assert res.exit_code == 0, res.output
    assert _parsed(out)["cat/later.png"]["image/n"] == 99
    _jsonl(src / "metadata.jsonl", [{**r, "n": r["n"] + 1} for r in rows])
    res = cli("update", src, out)
    assert res.exit_code == 2
    assert f"run: img2tfrecord convert {src} {out} --like {out} --overwrite" in res.stderr
    assert "metadata file" in res.stderr and "changed" in res.stderr
    res = cli("convert", src, out, "--like", out, "--overwrite")
    assert res.exit_code == 0, res.output
    assert _parsed(out)["cat/later.png"]["image/n"] == 100
    assert cli("update", src, out).exit_code == 0


def test_csv_whole_numbers_with_a_sign_are_int64_and_exact(tmp_path: Path, cli: Any) -> None:
    """metadata.csv's `-2`, `+5` are whole numbers as `7` is: the column is int64 and every value
    is exact in the record, read by TensorFlow's parser with an int64 spec (a float32 column fails
    that parse, and would hold -9007199254740993 as -9007199254740992)."""
    import tensorflow as tf

    src = tmp_path / "in"
    rels = _tree(src)
    cells = ["-2", "+5", "7", "-9007199254740993", "+9223372036854775807", "-9223372036854775808"]
    (src / "metadata.csv").write_text("file_name,n\n" + "".join(f"{r},{v}\n" for r, v in zip(rels, cells)))
    res = cli("convert", src, tmp_path / "out", "--json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["skipped"] == []
    assert _manifest(tmp_path / "out")["metadata"]["columns"] == {"n": {"type": "int64", "list": False}}
    spec = {"image/n": tf.io.FixedLenFeature([], tf.int64), "image/filename": tf.io.FixedLenFeature([], tf.string)}
    got = {}
    for shard in (tmp_path / "out").glob("train-*"):
        for raw in tf.data.TFRecordDataset(str(shard)):
            ex = tf.io.parse_single_example(raw, spec)
            got[ex["image/filename"].numpy().decode()] = int(ex["image/n"].numpy())
    assert got == {r: int(v) for r, v in zip(rels, cells)}


def _class_labels(out: Path) -> dict[str, list[int]]:
    """image/filename -> image/class/label of every record, by TensorFlow's parser."""
    import tensorflow as tf

    spec = {"image/class/label": tf.io.VarLenFeature(tf.int64), "image/filename": tf.io.FixedLenFeature([], tf.string)}
    got = {}
    for sp in _manifest(out)["splits"].values():
        for sh in sp["shards"]:
            for raw in tf.data.TFRecordDataset(str(out / sh["file"])):
                ex = tf.io.parse_single_example(raw, spec)
                got[ex["image/filename"].numpy().decode()] = ex["image/class/label"].values.numpy().tolist()
    return got


def test_multi_label_with_label_offset_shifts_every_label(tmp_path: Path, cli: Any) -> None:
    """--label-offset 1 on a multi-label dataset: every number in image/class/label is its class's
    index in labels.txt plus one, in the records convert writes and in those later updates add, a
    class added through the `convert --like OUT --overwrite` that update advises included (it takes
    the next number, after the old classes, not its sorted place); load() gives the same lists and
    `inspect --verify` passes."""
    import img2tfrecord

    src, out = tmp_path / "in", tmp_path / "out"
    rows = _multi_label_tree(src)
    rows.append({"file_name": "later.png", "labels": ["bird", "dog"], "n": 9})  # its image comes later
    _jsonl(src / "metadata.jsonl", rows)
    res = cli("convert", src, out, "--split", "train=0.5,test=0.5", "--label-offset", "1")
    assert res.exit_code == 0, res.output
    save(natural_image(20, 16, 99), src / "later.png")
    res = cli("update", src, out)
    assert res.exit_code == 0, res.output
    first = {"bird": 1, "cat": 2, "dog": 3}
    assert _class_labels(out) == {r["file_name"]: [first[c] for c in r["labels"]] for r in rows}
    rows.append({"file_name": "newest.png", "labels": ["ant", "cat"], "n": 10})  # a new class, its image later
    _jsonl(src / "metadata.jsonl", rows)
    assert cli("update", src, out).exit_code == 2  # the metadata changed: convert --like, as it advises
    res = cli("convert", src, out, "--like", out, "--overwrite")
    assert res.exit_code == 0, res.output
    save(natural_image(20, 16, 98), src / "newest.png")
    res = cli("update", src, out)
    assert res.exit_code == 0, res.output
    assert _manifest(out)["label_offset"] == 1 and (out / "labels.txt").read_text() == "bird\ncat\ndog\nant\n"
    number = {"bird": 1, "cat": 2, "dog": 3, "ant": 4}
    want = {r["file_name"]: [number[c] for c in r["labels"]] for r in rows}
    assert _class_labels(out) == want
    loaded = {
        ex["image/filename"].numpy().decode(): ex["label"].numpy().tolist()
        for split in ("train", "test")
        for ex in img2tfrecord.load(out, split, as_dict=True)
    }
    assert loaded == want
    res = cli("inspect", out, "--verify")
    assert res.exit_code == 0 and "no problems" in res.output, res.output
