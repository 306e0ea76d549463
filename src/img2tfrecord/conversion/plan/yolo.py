"""YOLO annotations (`convert --annotations DIR|data.yaml`): a `.txt` of `class cx cy w h` lines
(normalised) per image, and the class names in `classes.txt`, `obj.names` or a `data.yaml`.

Both layouts are read: Darknet's flat one (each txt beside its image, or in one labels folder) and
Ultralytics' (`images/train/x.jpg` with `labels/train/x.txt`, as Ultralytics finds a label: the
last `images` folder of the image's path named `labels`). A txt below a `labels` folder is also
known by its path with that folder named `images`, and by its path below it, so the images match
wherever INPUT starts. `data.yaml` is read by PyYAML (comments, quoting, flow and block style, as
Ultralytics reads it), every scalar as the text written, so a class named `no` or `1` stays that
name; its `names:` is a list or a mapping of class numbers to names. A gap in the numbers
(`{0: a, 2: c}`) is kept as given: the classes are numbered in class-number order from 1 in
label_map.pbtxt, as COCO's category ids are; a line of a number no name is given to (or of no
box) is skipped with its file, line and reason, its neighbours kept. Its `train:`, `val:` and
`test:` entries that name `.txt` lists of images are not labels; those that name folders (`train: images/train`, relative to `path:`) are the splits an
image below them goes to when `--split` is not given (`image_split`; `val` is `validation`), as a
folder walk's `train/` and `validation/` are. Without such entries, an image's folder after its
last `images` one (`images/val/x.jpg`) names its split when it is a split name.
"""

from __future__ import annotations

import math
import os
import re
from typing import Any, NamedTuple

from img2tfrecord.conversion.plan.labels import MAX_LABELS_BYTES, check_class_list, read_text_input
from img2tfrecord.conversion.plan.raw_boxes import ImageBoxes, RawBox
from img2tfrecord.conversion.plan.splits import SPLIT_DIR_NAMES
from img2tfrecord.conversion.plan.voc import Unusable
from img2tfrecord.errors import UsageError, option

YOLO_CLASS_FILES = ("classes.txt", "obj.names", "data.yaml", "data.yml")
SPLIT_KEYS = ("train", "val", "test")
_NUMBER = re.compile(r"[0-9]+")


class YoloRead(NamedTuple):
    """A YOLO folder read: classes in class-number order, boxes by the txt's stem, and aliases."""

    classes: list[str]
    by_stem: dict[str, ImageBoxes]
    alias: dict[str, str]  # another key an image may be known by (Ultralytics' images/ for labels/) -> stem
    origin: dict[str, str]  # a stem -> its txt
    problems: list[dict[str, str]]  # lines that are no box of a class named
    read: list[str]  # the classes file and the txts, relative to the folder
    split_folders: dict[str, str]  # a data.yaml's split folders (real paths) -> their split
    bad_stem: dict[str, Unusable]  # a txt that cannot be read as text, by its stem: its image is skipped


class ClassNames(NamedTuple):
    """A classes file read: class number -> name, and what a data.yaml says of the files."""

    numbers: dict[int, str]
    lists: set[str]  # the image-list files its train:/val:/test: name (`train.txt`), normalised paths
    folders: dict[str, str]  # the folders they name (real paths) -> their split (train, validation, test)


def read_yolo(top: str, files: list[str], names_file: str, max_bytes: int) -> YoloRead:
    """Read the classes file `names_file` and every label txt among `files` (relative to `top`)."""
    numbers, lists, folders = class_names(os.path.join(top, names_file), names_file)
    classes = [numbers[k] for k in sorted(numbers)]
    txts = [
        f
        for f in files
        if f.lower().endswith(".txt")
        and f != names_file
        and os.path.basename(f) != "README.txt"
        and os.path.abspath(os.path.join(top, f)) not in lists
    ]
    by_stem: dict[str, ImageBoxes] = {}
    problems: list[dict[str, str]] = []
    bad: dict[str, Unusable] = {}
    for rel in txts:
        try:
            text = read_text_input(os.path.join(top, rel), rel, max_bytes)
        except UsageError as e:  # binary, not UTF-8, unreadable: its image is skipped, not written as empty
            why = str(e).removeprefix(f"{rel} ").removeprefix("cannot read ")
            bad[os.path.splitext(rel)[0]] = Unusable(rel, why, f"its annotation {rel} {why}")
            continue
        objects = []
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            box = _box(line, numbers)
            if isinstance(box, str):
                problems.append({"path": f"{rel}:{n}", "reason": box.replace("CLASSES", os.path.basename(names_file))})
            else:
                objects.append(box)
        by_stem[os.path.splitext(rel)[0]] = ImageBoxes(width=0, height=0, source_id=rel, boxes=tuple(objects))
    origin = {os.path.splitext(rel)[0]: rel for rel in txts}
    aliases = _aliases([*by_stem, *bad])
    return YoloRead(classes, by_stem, aliases, origin, problems, [names_file, *txts], folders, bad)


def _box(line: str, numbers: dict[int, str]) -> RawBox | str:
    """One `class cx cy w h` line as a box in normalised corners, or why it is none."""
    parts = line.split()
    if len(parts) != 5 or not _NUMBER.fullmatch(parts[0]):
        return "not `class cx cy w h` (a class number and four numbers)"
    try:
        x, y, bw, bh = (float(v) for v in parts[1:])
    except ValueError:
        return "not `class cx cy w h`: a coordinate is not a number"
    if not all(math.isfinite(v) for v in (x, y, bw, bh)):
        return "a coordinate is not a finite number"
    name = numbers.get(int(parts[0])) if len(parts[0]) < 10 else None  # int() of 5,000 digits raises
    if name is None:
        return "its class number is not one CLASSES names"
    return RawBox(name=name, xmin=x - bw / 2, ymin=y - bh / 2, xmax=x + bw / 2, ymax=y + bh / 2)


def _aliases(stems: list[str]) -> dict[str, str]:
    """For a txt below a `labels` folder (its last one), the keys its image is known by in
    Ultralytics' layout: the path with that folder named `images`, and the path below it. A key two
    txts would share is left out (which image it is of is a guess), as is one that is a stem itself."""
    out: dict[str, str] = {}
    shared: set[str] = set()
    known = set(stems)
    for stem in stems:
        parts = stem.split("/")
        dirs = parts[:-1]
        if "labels" not in dirs:
            continue
        j = len(dirs) - 1 - dirs[::-1].index("labels")
        for key in ("/".join([*parts[:j], "images", *parts[j + 1 :]]), "/".join(parts[j + 1 :])):
            if key in known:
                continue
            if out.setdefault(key, stem) != stem:
                shared.add(key)
    for key in shared:
        del out[key]
    return out


def class_names(path: str, shown: str) -> ClassNames:
    """Class number -> name, from a classes file (one name a line, numbered from 0) or a data.yaml,
    with the image lists and split folders a data.yaml names. Checked by `labels.check_class_list`:
    two numbers of one name are refused."""
    where = f"{option('annotations')}: {shown}"
    text = read_text_input(path, f"the YOLO classes file {path}", MAX_LABELS_BYTES)
    lists: set[str] = set()
    folders: dict[str, str] = {}
    if path.endswith((".yaml", ".yml")):
        data = _yaml(text, where)
        numbers = _yaml_names(data, where)
        base = os.path.dirname(os.path.abspath(path))
        roots = {"", given.strip()} if isinstance(given := data.get("path"), str) else {""}
        for key in SPLIT_KEYS:
            for entry in v if isinstance(v := data.get(key), list) else [v]:
                if not isinstance(entry, str) or not entry.strip():
                    continue
                # `../train/images` (as Roboflow writes it) is also tried as `train/images`, as Ultralytics does
                tails = {entry.strip(), entry.strip()[3:] if entry.strip().startswith("../") else entry.strip()}
                places = [os.path.normpath(os.path.join(base, r, t)) for r in roots for t in tails]
                if entry.lower().endswith(".txt"):
                    lists.update(places)
                else:
                    folders.update(
                        (os.path.realpath(p).replace(os.sep, "/"), SPLIT_DIR_NAMES[key])
                        for p in places
                        if os.path.isdir(p)
                    )
    else:
        numbers = dict(enumerate(ln.strip() for ln in text.splitlines() if ln.strip()))
    check_class_list(list(numbers.values()), list(numbers), where, "class number")
    return ClassNames(numbers, lists, folders)


def image_split(path: str, folders: dict[str, str]) -> str:
    """The split the image at `path` (a real path, '/'-separated) goes to: that of the deepest
    data.yaml folder it is below; without such folders, its folder after its last `images` one
    when that is a split name (`images/val/x.jpg`: validation); "" when neither says."""
    if folders:
        below = [f for f in folders if path.startswith(f.rstrip("/") + "/")]
        return folders[max(below, key=len)] if below else ""
    parts = path.split("/")[:-1]
    if "images" not in parts:
        return ""
    j = len(parts) - 1 - parts[::-1].index("images")
    return SPLIT_DIR_NAMES.get(parts[j + 1].lower(), "") if j + 1 < len(parts) else ""


def dataset_root(path: str) -> str:
    """The folder a data.yaml given itself (`--annotations data.yaml`) describes: its `path:` when
    that is a folder (absolute, or relative to the data.yaml), else the data.yaml's own folder."""
    where = f"{option('annotations')}: {path}"
    data = _yaml(read_text_input(path, f"the YOLO classes file {path}", MAX_LABELS_BYTES), where)
    here = os.path.dirname(path) or "."
    root = data.get("path")
    if isinstance(root, str) and root.strip() and os.path.isdir(got := os.path.join(here, root.strip())):
        return os.path.normpath(got)
    return here


def _yaml(text: str, where: str) -> dict[str, Any]:
    """data.yaml's top-level mapping; every scalar as the text written (PyYAML's BaseLoader)."""
    import yaml

    loader = getattr(yaml, "CBaseLoader", yaml.BaseLoader)
    try:
        data = yaml.load(text, Loader=loader)  # noqa: S506 (BaseLoader builds only str, list and dict)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        raise UsageError(f"{where} is not YAML{at}") from None
    except RecursionError:
        raise UsageError(f"{where} is nested too deeply to be a data.yaml") from None
    if not isinstance(data, dict) or "names" not in data:
        raise UsageError(f"{where} has no `names:` of classes")
    return data


def _yaml_names(data: dict[str, Any], where: str) -> dict[int, str]:
    """`names:` as a list (numbered from 0) or a mapping of class numbers to names."""
    names = data["names"]
    if isinstance(names, list):
        numbers = dict(enumerate(names))
    elif isinstance(names, dict):
        numbers = {}
        for n, (k, v) in enumerate(names.items()):
            if not (isinstance(k, str) and _NUMBER.fullmatch(k) and len(k) < 10):
                raise UsageError(
                    f"{where}: `names:` entry {n} has a key that is not a class number (0, 1, 2, ...): "
                    "give the names as a list, or as class number: name"
                )
            numbers[int(k)] = v
    else:
        raise UsageError(f"{where}: `names:` is neither a list of names nor a mapping of class numbers to names")
    for k, v in numbers.items():
        if not isinstance(v, str):
            raise UsageError(
                f"{where}: `names:`' class {k} is not a name (a list or a mapping): give each class a name"
            )
    return numbers
