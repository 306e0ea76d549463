"""Object detection annotations (`convert --annotations FILE|DIR`): COCO, Pascal VOC and YOLO.

The format is told by content, not by an option, so a wrong guess cannot silently misread boxes:
a JSON object with `images` and `annotations` is COCO (instances); XML files whose root is
`<annotation>` are Pascal VOC; `.txt` files of `class cx cy w h` lines beside a classes file
(`classes.txt`, `obj.names` or a `data.yaml` with `names`) are YOLO. This module only reads: each
image's boxes in the annotation's own terms (pixels for COCO and VOC, with the image size the
tool recorded; normalised for YOLO, which records none). `plan.detection` matches them to the
images found and clips them.
"""

from __future__ import annotations

import os
import re
import xml.etree.ElementTree as ET
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import xxhash

from img2tfrecord import fs
from img2tfrecord.conversion.plan.coco import read_coco
from img2tfrecord.conversion.plan.labels import read_text_input
from img2tfrecord.conversion.plan.raw_boxes import ImageBoxes, RawBox
from img2tfrecord.errors import UsageError, option

MAX_ANNOTATION_BYTES = 4_000_000_000
YOLO_CLASS_FILES = ("classes.txt", "obj.names", "data.yaml", "data.yml")
_YOLO_LINE = re.compile(r"^\s*\d+(\s+[-+0-9.eE]+){4}\s*$")


@dataclass
class Annotations:
    """An annotation file or folder read: its format, classes in label order, boxes by image name."""

    path: str
    format: str  # coco | voc | yolo
    digest: str  # xxh3_128 over its bytes (a folder: every file's name and bytes, sorted)
    classes: list[str]
    by_name: Mapping[str, ImageBoxes]  # an image's path as the annotation names it (COCO file_name, VOC filename)
    by_stem: dict[str, ImageBoxes] = field(default_factory=dict)  # path without extension (YOLO txt, VOC xml)
    problems: list[dict[str, str]] = field(default_factory=list)  # entries it could not read: skipped
    stem_of: dict[str, str] = field(default_factory=dict)  # VOC: a by_name key -> its XML's by_stem key
    origin: dict[str, str] = field(default_factory=dict)  # VOC, YOLO: a by_stem key -> its file, as named
    files: list[str] = field(default_factory=list)  # the files read: not counted as ignored files when below INPUT
    masks: bool = False  # COCO read with its segmentations (--masks)
    segments: Any = None  # --masks: their store (plan.coco_masks.Segments), which RawBox.mask indexes

    def entry(self) -> dict[str, Any]:
        """The part of dataset.json's `metadata.detection` that names the annotations."""
        return {"annotations": self.path, "format": self.format, "xxh3_128": self.digest} | (
            {"masks": True} if self.masks else {}
        )

    def lookup(self, rel: str) -> Match | None:
        """The annotation of the image at `rel` (below INPUT): by its path, its base name, or their stems."""
        base = rel.rsplit("/", 1)[-1]
        for key in (rel, base):
            if key in self.by_name:
                return Match(self.stem_of.get(key, key), self.by_name[key])
        for key in (rel, base):
            stem = os.path.splitext(key)[0]
            if (got := self.by_stem.get(stem)) is not None:
                return Match(stem, got)
        return None

    def named(self, entry: str) -> str:
        """An annotation entry (`Match.entry`) as a message names it."""
        if self.format == "coco":
            return f"file_name {entry} in {os.path.basename(self.path)}"
        return f"the annotation {self.origin.get(entry, entry)}"

    def not_found(self, matched: Collection[str]) -> list[dict[str, str]]:
        """The skips of the annotation entries no image found below INPUT matched (`Match.entry`s not in
        `matched`), as a metadata file's rows that name no image are skipped."""
        if self.format == "coco":
            where = os.path.basename(self.path)
            return [
                {"path": k, "reason": f"named in {where} but not found below the input folder (or not an image)"}
                for k in self.by_name
                if k not in matched
            ]
        return [
            {"path": self.origin.get(k, k), "reason": "its image is not found below the input folder (or not an image)"}
            for k in self.by_stem
            if k not in matched
        ]


class Match(NamedTuple):
    """An image's annotation: the entry it is (COCO: the file_name; VOC, YOLO: the file's stem), and its boxes."""

    entry: str
    boxes: ImageBoxes


def read_annotations(path: str, masks: bool = False) -> Annotations:
    """Read `path` (a file or folder), its format found from its content; UsageError if none fits,
    or if `masks` (COCO's segmentations, kept) is asked of another format than COCO."""
    got = _read(path, masks)
    if masks and got.format != "coco":
        name = {"voc": "Pascal VOC", "yolo": "YOLO"}[got.format]
        raise UsageError(
            f"{option('masks', True)} reads COCO segmentations; {option('annotations', path)} is {name}, which has "
            f"none: drop {option('masks')}"
        )
    return got


def require_pycocotools() -> None:
    """UsageError when pycocotools, which rasterizes the masks, is not installed (`--masks`)."""
    try:
        import pycocotools.mask  # noqa: F401
    except ImportError:
        raise UsageError(
            f"{option('masks', True)} needs pycocotools to rasterize COCO's masks: pip install 'img2tfrecord[masks]'"
        ) from None


def _read(path: str, masks: bool) -> Annotations:
    if fs.is_remote(path):
        raise UsageError(f"{option('annotations', path)}: annotations are read from a local file or folder")
    if not os.path.exists(path):
        raise UsageError(f"{option('annotations', path)}: {path} does not exist")
    if os.path.isdir(path):
        files = sorted(_files(path))
        xmls = [f for f in files if f.lower().endswith(".xml")]
        jsons = [f for f in files if f.lower().endswith(".json")]
        if xmls and _is_voc(os.path.join(path, xmls[0])):
            return _voc(path, xmls, files)
        if any(os.path.basename(f) in YOLO_CLASS_FILES for f in files):
            return _yolo(path, files)
        if len(jsons) == 1:
            return _coco(os.path.join(path, jsons[0]), masks)
        raise UsageError(
            f"{option('annotations', path)}: no COCO JSON, Pascal VOC XML or YOLO txt with a classes file "
            f"({', '.join(YOLO_CLASS_FILES)}) found in it"
        )
    if path.lower().endswith(".xml") and _is_voc(path):
        return _voc(os.path.dirname(path) or ".", [os.path.basename(path)], [os.path.basename(path)])
    return _coco(path, masks)


def _files(top: str) -> list[str]:
    out = []
    for root, dirs, names in os.walk(top):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        out += [
            os.path.relpath(os.path.join(root, n), top).replace(os.sep, "/") for n in names if not n.startswith(".")
        ]
    return out


def _digest(top: str, files: list[str]) -> str:
    h = xxhash.xxh3_128()
    for f in sorted(files):
        h.update(f.encode("utf-8", "surrogateescape") + b"\0")
        h.update(fs.read_bytes(os.path.join(top, f)))
    return h.hexdigest()


def _text(path: str) -> str:
    return read_text_input(path, f"annotation file {path}", MAX_ANNOTATION_BYTES)


def _coco(path: str, masks: bool = False) -> Annotations:
    """COCO instances JSON: images (id, file_name, width, height), annotations (bbox x, y, w, h, and for
    `masks` segmentation), categories; streamed (conversion.plan.coco)."""
    got = read_coco(path, MAX_ANNOTATION_BYTES, masks)
    return Annotations(
        path,
        "coco",
        got.digest,
        got.classes,
        got.images,
        {},
        got.problems,
        files=[path],
        masks=masks,
        segments=got.images.segments,
    )


def _is_voc(path: str) -> bool:
    try:
        return ET.parse(path).getroot().tag == "annotation"
    except (ET.ParseError, OSError, LookupError):  # LookupError: an XML declaration's unknown encoding
        return False


def _voc(top: str, xmls: list[str], files: list[str]) -> Annotations:
    """Pascal VOC: one XML per image (filename, size, objects with name, bndbox, difficult, truncated)."""
    by_name: dict[str, ImageBoxes] = {}
    by_stem: dict[str, ImageBoxes] = {}
    problems: list[dict[str, str]] = []
    names: set[str] = set()
    stem_of: dict[str, str] = {}
    origin: dict[str, str] = {}
    for rel in xmls:
        try:
            root = ET.parse(os.path.join(top, rel)).getroot()
            size = root.find("size")
            width = int(float(size.findtext("width", "0"))) if size is not None else 0
            height = int(float(size.findtext("height", "0"))) if size is not None else 0
            objects = tuple(_voc_object(o) for o in root.iter("object"))
        except (ET.ParseError, ValueError, TypeError, LookupError) as e:  # LookupError: `encoding="no-such"`
            problems.append({"path": rel, "reason": f"not a Pascal VOC annotation: {e}"})
            continue
        names.update(b.name for b in objects)
        filename = (root.findtext("filename") or "").strip()
        got = ImageBoxes(width, height, filename or rel, objects)
        stem = os.path.splitext(rel)[0]
        if filename:
            by_name[filename] = got
            stem_of[filename] = stem
        by_stem[stem] = got
        origin[stem] = rel
    read = [os.path.join(top, x) for x in xmls]
    return Annotations(top, "voc", _digest(top, xmls), sorted(names), by_name, by_stem, problems, stem_of, origin, read)


def _voc_object(o: ET.Element) -> RawBox:
    bb = o.find("bndbox")
    if bb is None:
        raise ValueError("an object without bndbox")
    x0, y0, x1, y1 = (float(bb.findtext(k) or "nan") for k in ("xmin", "ymin", "xmax", "ymax"))
    flag = {k: int(float(o.findtext(k) or 0)) for k in ("difficult", "truncated")}
    return RawBox((o.findtext("name") or "").strip(), x0, y0, x1, y1, 0, -1.0, flag["difficult"], flag["truncated"])


def _yolo(top: str, files: list[str]) -> Annotations:
    """YOLO: per image a txt of `class cx cy w h` (normalised), and the class names in a classes file."""
    names_file = next(f for n in YOLO_CLASS_FILES for f in files if os.path.basename(f) == n)
    classes = _yolo_names(os.path.join(top, names_file))
    txts = [f for f in files if f.lower().endswith(".txt") and f != names_file and os.path.basename(f) != "README.txt"]
    by_stem, problems = {}, []
    for rel in txts:
        objects = []
        for n, line in enumerate(_text(os.path.join(top, rel)).splitlines(), 1):
            if not line.strip():
                continue
            if not _YOLO_LINE.match(line) or int(line.split()[0]) >= len(classes):
                problems.append({"path": f"{rel}:{n}", "reason": "not `class cx cy w h` of a class in " + names_file})
                continue
            k, cx, cy, w, h = line.split()
            x, y, bw, bh = float(cx), float(cy), float(w), float(h)
            objects.append(RawBox(classes[int(k)], x - bw / 2, y - bh / 2, x + bw / 2, y + bh / 2))
        by_stem[os.path.splitext(rel)[0]] = ImageBoxes(0, 0, rel, tuple(objects))
    origin = {os.path.splitext(rel)[0]: rel for rel in txts}
    read = [os.path.join(top, f) for f in (names_file, *txts)]
    return Annotations(top, "yolo", _digest(top, [names_file, *txts]), classes, {}, by_stem, problems, {}, origin, read)


def _yolo_names(path: str) -> list[str]:
    """Class names, in class-number order: one a line, or a data.yaml's `names` (a list or a mapping)."""
    text = _text(path)
    if not path.endswith((".yaml", ".yml")):
        return [ln.strip() for ln in text.splitlines() if ln.strip()]
    lines = text.splitlines()
    for i, ln in enumerate(lines):
        m = re.match(r"^names\s*:\s*(.*)$", ln)
        if not m:
            continue
        if m.group(1).strip():  # names: [a, b] (flow style)
            return [_unquote(s) for s in m.group(1).strip().strip("[]").split(",") if s.strip()]
        out: dict[int, str] = {}
        for j, item in enumerate(lines[i + 1 :]):
            if not item.startswith((" ", "\t")) or not item.strip():
                break
            body = item.strip()
            if body.startswith("-"):
                out[j] = _unquote(body[1:])
            elif ":" in body:
                k, v = body.split(":", 1)
                out[int(k)] = _unquote(v)
        return [out[k] for k in sorted(out)]
    raise UsageError(f"{option('annotations')}: {path} has no `names:` list of classes")


def _unquote(s: str) -> str:
    return s.strip().strip("'\"")
