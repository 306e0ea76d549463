"""Object detection annotations (`convert --annotations FILE|DIR`): COCO, Pascal VOC and YOLO.

The format is told by content, not by an option, so a wrong guess cannot silently misread boxes:
a JSON object with `images` and `annotations` is COCO (instances); XML files whose root is
`<annotation>` are Pascal VOC (plan.voc; the files that parse tell it, one broken XML is a skip);
`.txt` files of `class cx cy w h` lines beside a classes file (`classes.txt`, `obj.names` or a
`data.yaml` with `names`, which may be given itself) are YOLO, flat or in Ultralytics' layout
(plan.yolo). This module only reads: each image's boxes in the annotation's own terms (pixels for
COCO and VOC, with the image size the tool recorded; normalised for YOLO, which records none).
`plan.detection` matches them to the images found and clips them. Every file read is a regular
file, checked before it is opened: a FIFO would block, a device (/dev/zero) never end.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import xxhash

from img2tfrecord import fs
from img2tfrecord.conversion.plan.coco import read_coco
from img2tfrecord.conversion.plan.labels import check_regular_file, not_regular
from img2tfrecord.conversion.plan.raw_boxes import ImageBoxes, RawBox
from img2tfrecord.conversion.plan.voc import Unusable, read_voc
from img2tfrecord.conversion.plan.yolo import YOLO_CLASS_FILES, dataset_root, read_yolo
from img2tfrecord.errors import UsageError, option

__all__ = ["Annotations", "ImageBoxes", "Match", "RawBox", "read_annotations", "require_pycocotools"]

MAX_ANNOTATION_BYTES = 4_000_000_000


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
    class_ids: tuple[Any, ...] = ()  # COCO: each class's category id (else its place in `classes`)
    alias: dict[str, str] = field(default_factory=dict)  # YOLO: another key an image is known by -> by_stem key
    bad_name: dict[str, Unusable] = field(default_factory=dict)  # VOC: a <filename> whose boxes are unusable
    bad_stem: dict[str, Unusable] = field(default_factory=dict)  # VOC, YOLO: an XML's or txt's stem, likewise
    split_folders: dict[str, str] | None = None  # YOLO: a data.yaml's split folders -> split (plan.yolo.image_split)

    def entry(self) -> dict[str, Any]:
        """The part of dataset.json's `metadata.detection` that names the annotations."""
        return {"annotations": self.path, "format": self.format, "xxh3_128": self.digest} | (
            {"masks": True} if self.masks else {}
        )

    def lookup(self, rel: str) -> Match | None:
        """The annotation of the image at `rel` (below INPUT): by its path or its base name, else by
        the stem of its path or of a tail of it (longest first: `images/train/x` for YOLO's
        `labels/train/x.txt`, then `train/x`, then `x`). A Match with no boxes is an unusable one."""
        base = rel.rsplit("/", 1)[-1]
        for key in (rel, base):
            if key in self.by_name:
                return Match(self.stem_of.get(key, key), self.by_name[key])
            if (bad := self.bad_name.get(key)) is not None:
                return Match(key, None, bad.image)
        parts = os.path.splitext(rel)[0].split("/")
        for i in range(len(parts)):
            stem = "/".join(parts[i:])
            stem = self.alias.get(stem, stem)
            if (got := self.by_stem.get(stem)) is not None:
                return Match(stem, got)
            if (bad := self.bad_stem.get(stem)) is not None:
                return Match(stem, None, bad.image)
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
        used = {bad.path for k, bad in [*self.bad_name.items(), *self.bad_stem.items()] if k in matched}
        unusable = {bad.path: bad.reason for bad in [*self.bad_name.values(), *self.bad_stem.values()]}
        return [
            {"path": self.origin.get(k, k), "reason": "its image is not found below the input folder (or not an image)"}
            for k in self.by_stem
            if k not in matched
        ] + [{"path": path, "reason": why} for path, why in unusable.items() if path not in used]


class Match(NamedTuple):
    """An image's annotation: the entry it is (COCO: the file_name; VOC, YOLO: the file's stem), and
    its boxes; or, for an entry that names the image but cannot give its boxes, why (`unusable`)."""

    entry: str
    boxes: ImageBoxes | None
    unusable: str = ""


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
    where = option("annotations", path)
    if fs.is_remote(path):
        raise UsageError(f"{where}: annotations are read from a local file or folder")
    if not os.path.exists(path):
        raise UsageError(f"{where}: {path} does not exist")
    if os.path.isdir(path):
        listed = _files(path)
        files = sorted(listed.files)
        xmls = [f for f in files if f.lower().endswith(".xml")]
        jsons = [f for f in files if f.lower().endswith(".json")]
        if xmls and (voc := _voc(path, xmls, listed.problems)).format:
            return voc
        if any(os.path.basename(f) in YOLO_CLASS_FILES for f in files):
            return _yolo(path, files, listed.problems)
        if len(jsons) == 1:
            return _coco(os.path.join(path, jsons[0]), masks)
        why = f" ({len(xmls):,} XML files, none a Pascal VOC annotation)" if xmls else ""
        raise UsageError(
            f"{where}: no COCO JSON, Pascal VOC XML or YOLO txt with a classes file "
            f"({', '.join(YOLO_CLASS_FILES)}) found in it{why}"
        )
    check_regular_file(path, where)
    if path.lower().endswith(".xml"):
        if (voc := _voc(os.path.dirname(path) or ".", [os.path.basename(path)], [])).format:
            return voc
        reasons = [p["reason"] for p in voc.problems] + [bad.reason for bad in voc.bad_stem.values()]
        raise UsageError(f"{where}: {os.path.basename(path)} {reasons[0] if reasons else 'is no Pascal VOC XML'}")
    if os.path.basename(path) in YOLO_CLASS_FILES and path.lower().endswith((".yaml", ".yml")):
        top = dataset_root(path)
        listed = _files(top)
        return _yolo(top, sorted(listed.files), listed.problems, os.path.abspath(path))
    return _coco(path, masks)


class _Listed(NamedTuple):
    """An annotation folder's regular files (relative, sorted), and the skips of the others."""

    files: list[str]
    problems: list[dict[str, str]]


def _files(top: str) -> _Listed:
    """The regular files below `top` (hidden ones left out); a FIFO or a device among them is
    never opened (it would block, or never end): a skip, if it is named as an annotation would be."""
    out, problems = [], []
    for root, dirs, names in os.walk(top):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for n in names:
            if n.startswith("."):
                continue
            rel = os.path.relpath(os.path.join(root, n), top).replace(os.sep, "/")
            try:
                mode = os.stat(os.path.join(root, n)).st_mode
            except OSError:
                continue  # a dangling link, or gone: no annotation
            if stat.S_ISREG(mode):
                out.append(rel)
            elif n.lower().endswith((".xml", ".txt", ".json", ".yaml", ".yml", ".names")):
                problems.append({"path": rel, "reason": f"{not_regular(mode)}, not a regular file: not read"})
    return _Listed(out, problems)


def _digest(top: str, files: list[str]) -> str:
    h = xxhash.xxh3_128()
    for f in sorted(files):
        h.update(f.encode("utf-8", "surrogateescape") + b"\0")
        h.update(fs.read_bytes(os.path.join(top, f)))
    return h.hexdigest()


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
        class_ids=got.class_ids,
    )


def _voc(top: str, xmls: list[str], problems: list[dict[str, str]]) -> Annotations:
    """Pascal VOC (plan.voc); an Annotations of no format when no XML is a VOC annotation."""
    got = read_voc(top, xmls)
    return Annotations(
        top,
        "voc" if got.voc_files else "",
        _digest(top, xmls),
        got.classes,
        got.by_name,
        got.by_stem,
        problems + got.problems,
        got.stem_of,
        got.origin,
        [os.path.join(top, x) for x in xmls],
        bad_name=got.bad_name,
        bad_stem=got.bad_stem,
    )


def _yolo(top: str, files: list[str], problems: list[dict[str, str]], names_file: str = "") -> Annotations:
    """YOLO (plan.yolo): the classes file given, else the first of YOLO_CLASS_FILES found (the
    shallowest, in that order of names)."""
    if not names_file:
        found = [f for f in files if os.path.basename(f) in YOLO_CLASS_FILES]
        found.sort(key=lambda f: (f.count("/"), YOLO_CLASS_FILES.index(os.path.basename(f)), f))
        names_file = found[0]
    got = read_yolo(top, files, names_file, MAX_ANNOTATION_BYTES)
    return Annotations(
        top,
        "yolo",
        _digest(top, got.read),
        got.classes,
        {},
        got.by_stem,
        problems + got.problems,
        {},
        got.origin,
        [os.path.join(top, f) for f in got.read],
        alias=got.alias,
        bad_stem=got.bad_stem,
        split_folders=got.split_folders,
    )
