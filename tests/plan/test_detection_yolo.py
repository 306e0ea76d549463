"""YOLO as its own tools write it (conversion.plan.yolo): Ultralytics' layout (`images/train/x.jpg`
beside `labels/train/x.txt`, a `data.yaml` read by PyYAML, given itself or found in the folder),
every form of `names:` Ultralytics accepts, and box lines no number can be read from as box
problems, never a traceback. Annotation files are regular files: a device or a FIFO is refused
before it is opened (conversion.plan.labels.check_regular_file)."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from test_detection import _image, od_records
from test_detection_classes import BOX, NAMES, SIZE, _yolo_line, ultralytics_input, yolo_flat_input


def _convert(cli: Any, images: Path, ann: Path, out: Path, *extra: str) -> Any:
    return cli("convert", images, out, "--annotations", ann, "--json", *extra)


@pytest.mark.parametrize(
    "data, why",
    [
        (b"\x00\x01\x02", "is not a text file (byte 0 is NUL)"),
        (b"0 0.5 0.5 0.5 0.5\n\xff\xfe", "is not UTF-8 text (byte 18)"),
    ],
)
def test_a_label_file_that_is_no_text_skips_its_image(tmp_path: Path, cli: Any, data: bytes, why: str) -> None:
    """Was: the whole run refused (exit 2) for one such file; now its image is skipped with the
    reason (never written as an image of nothing), the others keep their boxes."""
    root, _ = ultralytics_input(tmp_path)
    (root / "labels" / "train" / "b.txt").write_bytes(data)
    res = _convert(cli, root, root, tmp_path / "out")
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout)
    assert summary["skipped"] == [
        {"path": "images/train/b.jpg", "split": "", "reason": f"its annotation labels/train/b.txt {why}"}
    ]
    assert summary["detection"]["boxes"] == len(NAMES) - 1
    assert "b.jpg" not in _boxes(tmp_path / "out")


def _filenames(out: Path, split: str) -> list[str]:
    """The image/filename base names of a split's records, as TensorFlow reads them."""
    import tensorflow as tf

    man = json.loads((out / "dataset.json").read_text())
    files = [str(out / sh["file"]) for sh in man["splits"][split]["shards"]]
    spec = {"image/filename": tf.io.FixedLenFeature((), tf.string)}
    return sorted(
        Path(tf.io.parse_single_example(r, spec)["image/filename"].numpy().decode()).name
        for r in tf.data.TFRecordDataset(files)
    )


def _boxes(out: Path) -> dict[str, list[bytes]]:
    return {Path(k).name: r["image/object/class/text"] for k, r in od_records(out).items()}


@pytest.mark.parametrize("given", ["folder", "data.yaml", "images", "yaml from elsewhere"])
def test_an_ultralytics_dataset_gets_every_box(tmp_path: Path, cli: Any, given: str) -> None:
    """Was: no boxes, exit 0, every label "its image is not found" (only the flat layout matched)."""
    root, _ = ultralytics_input(tmp_path)
    images, ann = {
        "folder": (root, root),
        "data.yaml": (root, root / "data.yaml"),
        "images": (root / "images", root / "data.yaml"),
        "yaml from elsewhere": (root / "images", tmp_path / "data.yaml"),
    }[given]
    if given == "yaml from elsewhere":  # `path:` names the dataset's folder, relative to the data.yaml
        text = (root / "data.yaml").read_text().replace("path: .", "path: set")
        (tmp_path / "data.yaml").write_text(text)
    res = _convert(cli, images, ann, tmp_path / "out")
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout)
    assert summary["detection"]["format"] == "yolo" and summary["detection"]["boxes"] == len(NAMES)
    assert summary["skipped"] == [] and summary["detection"]["box_problems"] == []
    got = _boxes(tmp_path / "out")
    assert got == {n: [(b"circle", b"square")[i % 2]] for i, n in enumerate(NAMES)}


@pytest.mark.parametrize(
    "names, classes",
    [
        ("names: {0: circle, 1: square}\n", ["circle", "square"]),
        ("names:\n  0: circle   # round things\n  1: 'square'  # four sides\n", ["circle", "square"]),
        ("names: [circle, square]  # two\n", ["circle", "square"]),
        ("names:\n  - circle\n  - square\n", ["circle", "square"]),
        ("names: ['circle, big', square]\n", ["circle, big", "square"]),
        ("names:\n  0: circle\n  5: square\n", ["circle", "square"]),  # a gap: kept, labels in number order
        ("names: {0: 'no', 1: '1'}\n", ["no", "1"]),
        ("names: {0: no, 1: 1}\n", ["no", "1"]),  # written as text: YAML 1.1's `no` is no boolean here
    ],
)
def test_data_yaml_names_read_as_ultralytics_reads_them(
    tmp_path: Path, cli: Any, names: str, classes: list[str]
) -> None:
    """Was parsed by hand: `{0: circle` and `1: square}` as names, a trailing comment part of a name,
    `'circle, big'` as two classes, a gap in the numbers refused."""
    root, _ = ultralytics_input(tmp_path, names)
    if "5: square" in names:  # the square boxes are class 5
        for txt in (root / "labels").rglob("*.txt"):
            if (text := txt.read_text()).startswith("1 "):
                txt.write_text("5" + text[1:])
    res = _convert(cli, root, root, tmp_path / "out")
    assert res.exit_code == 0, res.output
    man = json.loads((tmp_path / "out" / "dataset.json").read_text())
    assert man["classes"] == classes
    assert json.loads(res.stdout)["detection"]["boxes"] == len(NAMES)
    got = _boxes(tmp_path / "out")
    assert got == {n: [classes[i % 2].encode()] for i, n in enumerate(NAMES)}


@pytest.mark.parametrize(
    "text, said",
    [
        ("names: {a: circle, 1: square}\n", "`names:` entry 0 has a key that is not a class number"),
        ("names: {0.5: circle}\n", "`names:` entry 0 has a key that is not a class number"),
        ("names: {-1: circle}\n", "`names:` entry 0 has a key that is not a class number"),
        ("names:\n  ? " + "9" * 5000 + "\n  : circle\n", "`names:` entry 0 has a key that is not a class number"),
        ("names: circle\n", "`names:` is neither a list of names nor a mapping"),
        ("names: [[circle], square]\n", "class 0 is not a name"),
        ("names: [circle\n", "is not YAML (line 2, column 1)"),
        ("nc: 2\n", "has no `names:` of classes"),
        ("- names\n", "has no `names:` of classes"),
    ],
)
def test_a_data_yaml_it_cannot_use_is_one_line_exit_2(tmp_path: Path, cli: Any, text: str, said: str) -> None:
    root, _ = ultralytics_input(tmp_path)
    (root / "data.yaml").write_text(text)
    for ann in (root, root / "data.yaml"):
        res = _convert(cli, root, ann, tmp_path / "out")
        assert res.exit_code == 2, res.output
        message = json.loads(res.stdout)["error"]["message"]
        assert said in message and "data.yaml" in message and "\n" not in message
        assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "line, reason",
    [
        ("0 . . . .", "not `class cx cy w h`: a coordinate is not a number"),
        ("0 e e e e", "not `class cx cy w h`: a coordinate is not a number"),
        ("0 +- -+ 0.5 0.5", "not `class cx cy w h`: a coordinate is not a number"),
        ("0 nan 0.5 0.5 0.5", "a coordinate is not a finite number"),
        ("0 1e400 0.5 0.5 0.5", "a coordinate is not a finite number"),
        ("0 0.5 0.5 0.5", "not `class cx cy w h` (a class number and four numbers)"),
        ("x 0.5 0.5 0.5 0.5", "not `class cx cy w h` (a class number and four numbers)"),
        ("7 0.5 0.5 0.5 0.5", "its class number is not one classes.txt names"),
        ("99999999999999999999999 0.5 0.5 0.5 0.5", "its class number is not one classes.txt names"),
        ("9" * 5000 + " 0.5 0.5 0.5 0.5", "its class number is not one classes.txt names"),
    ],
)
def test_a_yolo_line_of_no_box_is_named_never_a_traceback(tmp_path: Path, cli: Any, line: str, reason: str) -> None:
    images, ann = yolo_flat_input(tmp_path)
    txt = ann / "a.txt"
    txt.write_text(txt.read_text() + line + "\n")
    res = _convert(cli, images, ann, tmp_path / "out")
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout)
    assert {"path": "a.txt:2", "split": "", "reason": reason} in summary["skipped"]
    assert summary["detection"]["boxes"] == len(NAMES)  # the line's neighbours keep their boxes
    assert _boxes(tmp_path / "out")["a.jpg"] == [b"circle"]


class _Writer(NamedTuple):
    thread: threading.Thread
    stop: threading.Event


def _fifo_writer(fifo: Path) -> _Writer:
    """A writer that ends every read of `fifo` (so a reader that opens it, once or more, fails this
    test rather than hanging it) until `_release` stops it."""
    stop = threading.Event()

    def write() -> None:
        while not stop.is_set():
            try:
                with open(fifo, "wb") as f:
                    f.write(b'{"images": [], "annotations": [], "categories": []}')
            except OSError:
                pass

    t = threading.Thread(target=write, daemon=True)
    t.start()
    return _Writer(t, stop)


def _release(fifo: Path, writer: _Writer) -> None:
    writer.stop.set()
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # lets a writer waiting for a reader go on, and see `stop`
    writer.thread.join(10)
    os.close(fd)


@pytest.mark.parametrize("kind", ["/dev/zero", "fifo", "fifo.xml", "fifo data.yaml"])
def test_an_annotation_file_that_is_no_regular_file_is_refused_before_it_is_read(
    tmp_path: Path, cli: Any, kind: str
) -> None:
    """Was: /dev/zero read until MemoryError; a FIFO blocked forever."""
    images, _ = yolo_flat_input(tmp_path)
    ann = Path("/dev/zero") if kind == "/dev/zero" else tmp_path / kind.split()[-1]
    writer = None
    if kind != "/dev/zero":
        os.mkfifo(ann)
        writer = _fifo_writer(ann)
    try:
        res = _convert(cli, images, ann, tmp_path / "out")
    finally:
        if writer is not None:
            _release(ann, writer)
    assert res.exit_code == 2, res.output
    message = json.loads(res.stdout)["error"]["message"]
    what = "a character device" if kind == "/dev/zero" else "a FIFO"
    assert f"is {what}, not a regular file" in message and "\n" not in message
    assert not (tmp_path / "out").exists()


def test_a_fifo_in_an_annotation_folder_is_a_skip_never_opened(tmp_path: Path, cli: Any) -> None:
    images, ann = yolo_flat_input(tmp_path)
    fifo = ann / "zz.txt"
    os.mkfifo(fifo)
    writer = _fifo_writer(fifo)
    try:
        res = _convert(cli, images, ann, tmp_path / "out")
    finally:
        _release(fifo, writer)
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout)
    assert {"path": "zz.txt", "split": "", "reason": "a FIFO, not a regular file: not read"} in summary["skipped"]
    assert summary["detection"]["boxes"] == len(NAMES)


@pytest.mark.parametrize("names_file", ["data.yaml", "classes.txt"])
def test_the_split_folders_of_an_ultralytics_dataset_are_its_splits(tmp_path: Path, cli: Any, names_file: str) -> None:
    """data.yaml's `train: images/train` and `val: images/val` (or, without them, the folders
    `images/train/` and `images/val/`) give the splits when --split is not given; --split draws them."""
    root, _ = ultralytics_input(tmp_path)
    if names_file == "classes.txt":
        (root / "data.yaml").unlink()
        (root / "classes.txt").write_text("circle\nsquare\n")
    res = _convert(cli, root, root, tmp_path / "out")
    assert res.exit_code == 0, res.output
    man = json.loads((tmp_path / "out" / "dataset.json").read_text())
    assert {s: v["records"] for s, v in man["splits"].items()} == {"train": 3, "validation": 1}
    assert _filenames(tmp_path / "out", "validation") == [NAMES[3]]
    res = _convert(cli, root, root, tmp_path / "o2", "--split", "train=0.5,validation=0.5")
    assert res.exit_code == 0, res.output
    man = json.loads((tmp_path / "o2" / "dataset.json").read_text())
    assert {s: v["records"] for s, v in man["splits"].items()} == {"train": 2, "validation": 2}


def test_folders_named_by_data_yaml_give_the_splits_whatever_their_names(tmp_path: Path, cli: Any) -> None:
    root, _ = ultralytics_input(tmp_path)
    (root / "images" / "train").rename(root / "images" / "fit")
    (root / "labels" / "train").rename(root / "labels" / "fit")
    (root / "images" / "val").rename(root / "images" / "holdout")
    (root / "labels" / "val").rename(root / "labels" / "holdout")
    (root / "data.yaml").write_text("path: .\ntrain: [images/fit]\nval: images/holdout\nnames: [circle, square]\n")
    res = _convert(cli, root, root / "data.yaml", tmp_path / "out")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["detection"]["boxes"] == len(NAMES)
    man = json.loads((tmp_path / "out" / "dataset.json").read_text())
    assert {s: v["records"] for s, v in man["splits"].items()} == {"train": 3, "validation": 1}


def test_an_image_outside_every_split_folder_is_warned_of(tmp_path: Path, cli: Any) -> None:
    root, _ = ultralytics_input(tmp_path)
    (root / "images" / "val" / NAMES[3]).rename(root / "images" / NAMES[3])
    res = _convert(cli, root, root, tmp_path / "out")
    assert res.exit_code == 0, res.output
    warnings = json.loads(res.stdout)["warnings"]
    assert any(f"1 image is in no split folder of the annotations (e.g. images/{NAMES[3]})" in w for w in warnings)
    man = json.loads((tmp_path / "out" / "dataset.json").read_text())
    assert {s: v["records"] for s, v in man["splits"].items()} == {"train": 4}


def test_update_puts_new_images_in_their_folders_splits(tmp_path: Path, cli: Any) -> None:
    root, _ = ultralytics_input(tmp_path)
    assert _convert(cli, root, root, tmp_path / "out").exit_code == 0
    _image(root / "images" / "val" / "e.jpg", SIZE, [BOX])
    (root / "labels" / "val" / "e.txt").write_text(_yolo_line(1))
    res = cli("update", root, tmp_path / "out", "--json")
    assert res.exit_code == 0, res.output
    man = json.loads((tmp_path / "out" / "dataset.json").read_text())
    assert {s: v["records"] for s, v in man["splits"].items()} == {"train": 3, "validation": 2}
    assert _filenames(tmp_path / "out", "validation") == sorted([NAMES[3], "e.jpg"])


def test_a_roboflow_export_gets_every_box_in_its_splits(tmp_path: Path, cli: Any) -> None:
    """Roboflow's YOLO export: train/images/x.jpg + train/labels/x.txt, `train: ../train/images`
    (one folder too high, which Ultralytics reads as train/images)."""
    root = tmp_path / "set"
    for i, name in enumerate(NAMES):
        split = "train" if i < 3 else "valid"
        _image(root / split / "images" / name, SIZE, [BOX])
        (root / split / "labels").mkdir(parents=True, exist_ok=True)
        (root / split / "labels" / (Path(name).stem + ".txt")).write_text(_yolo_line(i))
    (root / "data.yaml").write_text(
        "train: ../train/images\nval: ../valid/images\ntest: ../test/images\n\nnc: 2\nnames: ['circle', 'square']\n"
    )
    res = _convert(cli, root, root / "data.yaml", tmp_path / "out")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["detection"]["boxes"] == len(NAMES)
    man = json.loads((tmp_path / "out" / "dataset.json").read_text())
    assert {s: v["records"] for s, v in man["splits"].items()} == {"train": 3, "validation": 1}
    assert _filenames(tmp_path / "out", "validation") == [NAMES[3]]


def test_a_split_name_above_the_input_folder_is_no_split(tmp_path: Path, cli: Any) -> None:
    """Only folders below INPUT (or data.yaml's) give splits: INPUT at images/test/set is not a test set."""
    images, ann = yolo_flat_input(tmp_path)
    (tmp_path / "photos" / "images" / "test").mkdir(parents=True)
    images = images.rename(tmp_path / "photos" / "images" / "test" / "set")
    res = _convert(cli, images, ann, tmp_path / "out")
    assert res.exit_code == 0, res.output
    man = json.loads((tmp_path / "out" / "dataset.json").read_text())
    assert {s: v["records"] for s, v in man["splits"].items()} == {"train": len(NAMES)}
