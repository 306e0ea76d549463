"""The walk of a detection input (`convert --annotations`): images anywhere below INPUT, each with
the boxes its annotation gives (conversion.plan.annotations), clipped to the image here, once.

Boxes are in the pixels as stored in the file (the rule: annotation tools differ in whether they
applied EXIF orientation, so we take the file's own pixels; the encoder skips an image whose
annotation records another size). A box partly outside the image is clipped; one wholly outside,
or of no area once clipped, is dropped; each is named (image and reason) in `Boxed.problems`,
which the summary and dataset.json (`metadata.detection`) list and `--strict` refuses. Class ids
start at 1, as the Object Detection API's label maps require (`label_map.pbtxt`). For the split
shares and per-class counts an image counts as the class of its smallest id, one without boxes as
the first class. Images with no annotation are kept with no boxes, unless `--skip-empty`.
"""

from __future__ import annotations

import dataclasses
import os
from array import array
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from img2tfrecord import fs
from img2tfrecord.conversion.plan import coco_polygons
from img2tfrecord.conversion.plan.annotations import Annotations, ImageBoxes, read_annotations, require_pycocotools
from img2tfrecord.conversion.plan.enrich import Batch, Enriched, Labelled
from img2tfrecord.conversion.plan.labels import check_class_list, class_list
from img2tfrecord.conversion.plan.like import convert_like_advice
from img2tfrecord.conversion.plan.raw_boxes import SegmentRows
from img2tfrecord.conversion.plan.splits import Discovery, Missing
from img2tfrecord.conversion.plan.table import BoxCounts, ImageTable, Objects, Task, boxes_digest, decode_name
from img2tfrecord.conversion.plan.voc import stored_size
from img2tfrecord.conversion.plan.yolo import image_split
from img2tfrecord.errors import UsageError, option, plural
from img2tfrecord.format.options import recorded_value
from img2tfrecord.format.schema import MetaValue, utf8_text


class Clipped(NamedTuple):
    """One image's boxes after clipping: the objects kept and what happened to the others."""

    objects: Objects
    problems: list[dict[str, str]]  # path, box (its index in the annotation), reason


def clip(rel: str, ann: ImageBoxes, ids: dict[str, int], segments: Any = None) -> Clipped:
    """Clip and normalise one image's boxes; the dropped and clipped ones named; with `segments` (the
    COCO reader's store, --masks) each kept box's segmentation too, as rows of it."""
    w, h = (ann.width, ann.height) if ann.width > 0 and ann.height > 0 else (1, 1)
    kept: list[tuple[Any, ...]] = []  # per kept box: Objects' columns from xmin to truncated
    masks = array("q")  # a dropped box's mask goes with it; a clipped one keeps its whole mask (the image clips it)
    problems = []
    for i, box in enumerate(ann.boxes):
        name, bx0, by0, bx1, by1, area, mask = box.name, box.xmin, box.ymin, box.xmax, box.ymax, box.area, box.mask
        why, dropped = "", True
        if not bx1 > bx0 or not by1 > by0:
            why = "zero area: dropped"
        else:
            x0, y0, x1, y1 = max(bx0, 0.0), max(by0, 0.0), min(bx1, w), min(by1, h)
            if not (x1 > x0 and y1 > y0):
                why = "wholly outside the image: dropped"
            else:
                dropped = False
                if x0 != bx0 or y0 != by0 or x1 != bx1 or y1 != by1:
                    why = "partly outside the image: clipped"
                if not area >= 0:  # no area of its own (VOC, YOLO): the box's, clipped; COCO's is kept as given
                    area = (x1 - x0) * (y1 - y0)
        if not dropped and mask >= 0 and (shape := _shape(segments, mask, w, h)):
            dropped = shape.endswith("dropped")  # its segmentation could not be rasterized: the box goes too
            why = shape if dropped or not why else f"{why.removesuffix(': clipped')}, and {shape}"
        if why:
            problems.append({"path": rel, "box": str(i), "class": name, "reason": why})
        if dropped:
            continue
        kept.append((x0 / w, y0 / h, x1 / w, y1 / h, ids[name], name, box.is_crowd, area, box.difficult, box.truncated))
        masks.append(mask)
    cols = tuple(zip(*kept)) if kept else ((),) * 10  # one pass to columns (10: xmin .. truncated)
    xmins, ymins, xmaxs, ymaxs, labels, texts, crowds, areas, difficults, truncateds = cols
    source = Objects(
        width=ann.width,
        height=ann.height,
        source_id=ann.source_id,
        xmin=xmins,
        ymin=ymins,
        xmax=xmaxs,
        ymax=ymaxs,
        label=labels,
        text=texts,
        is_crowd=crowds,
        area=areas,
        difficult=difficults,
        truncated=truncateds,
        masks=None if segments is None else SegmentRows(segments, masks),
    )
    return Clipped(source, problems)


def _shape(segments: Any, row: int, width: float, height: float) -> str:
    """Why box `row`'s segmentation is clipped or dropped before rasterizing (plan.coco_polygons), or ""."""
    reach = segments.reach(row)
    w, h = int(width), int(height)
    if reach is None or not (coco_polygons.far(reach, w, h) or reach.outline > coco_polygons.OUTLINE * (w + h)):
        return ""
    return coco_polygons.problem(segments.segment(row).polygons, w, h, reach)


class Boxes:
    """The annotations' boxes (`--annotations`, conversion.plan.annotations), an enricher that gives
    each image its classes (conversion.plan.enrich's `Labeller`): `objects` (boxes clipped and
    normalised once) and `meta` (the image's classes as multi-label lists); an image whose
    annotation cannot give its boxes or whose entry is not used is skipped, one with no box is kept
    (unless `skip_empty`); its stamp is `boxes_digest`, which the catalog keeps per image, so an
    update re-encodes an image whose boxes changed."""

    name: str = "annotations"
    columns: tuple[str, ...] = ("objects", "meta")
    labels_images: bool = True
    skip_reasons: tuple[str, ...] = ("its annotation", "box ")  # details follow the annotation format's reader

    def __init__(self, ann: Annotations, *, input_dir: str, skip_empty: bool, recorded: str, split: bool) -> None:
        self.ann, self.input_dir, self.skip_empty, self.recorded = ann, input_dir, skip_empty, recorded
        self.inputs: tuple[str, ...] = tuple(ann.files)
        self.by_folder = ann.split_folders is not None and not split  # YOLO: its split folders may give the splits
        self.classes: list[str] = []
        self.offset = 0
        self.matched: dict[str, str] = {}  # annotation entry -> the image it is of
        self.per_image: dict[str, tuple[str, ...]] = {}
        self.problems: list[dict[str, str]] = []
        self.unusable: list[dict[str, str]] = []  # images whose annotation cannot give their boxes, or is not used
        self.boxes = self.empty = self.skipped_empty = 0
        self.counts: BoxCounts | None = None

    def prepare(self, labels: list[str] | None, known_classes: list[str] | None, label_offset: int) -> list[str]:
        self.classes, self.offset = _classes(self.ann, labels, known_classes), label_offset
        return self.classes

    def label(self, batch: Batch) -> Labelled:
        """Every image below INPUT with its boxes: the class of its smallest id, one without boxes the first class."""
        ann, ids, input_dir = self.ann, {c: i + 1 for i, c in enumerate(self.classes)}, self.input_dir
        base = _annotation_base(input_dir, ann, self.by_folder)
        keep: list[int] = []
        cls: list[int] = []
        objects_of: list[Objects] = []
        folder_of: list[str] = []  # by_folder: each kept image's split, "" when no folder gives one
        refused: list[dict[str, str]] = []
        for i, name in enumerate(batch.names):
            rel = decode_name(name)
            shown = utf8_text(rel)
            got = _match(ann, rel, self.matched, ids)
            if got is not None and not isinstance(got, str) and got.width <= 0 and ann.format == "voc":
                got = _sized(got, fs.join(input_dir, rel))
            if isinstance(got, str):
                self.unusable.append({"path": shown, "split": "", "reason": got})
                continue
            if got is not None and got.refused:  # its annotation entry is not used: a guess would be a lie
                refused.append({"path": shown, "split": "", "reason": got.refused})
                continue
            cut = clip(shown, got or ImageBoxes(width=0, height=0, source_id=rel, boxes=()), ids, ann.segments)
            objects = cut.objects
            if not objects.label and self.skip_empty:
                self.skipped_empty += 1
                continue
            self.problems += cut.problems
            self.per_image[shown] = objects.text
            self.boxes += len(objects.label)
            self.empty += not objects.label
            keep.append(i)
            cls.append(min(objects.label, default=1) - 1)
            objects_of.append(objects if objects.source_id else dataclasses.replace(objects, source_id=rel))
            if self.by_folder:
                folder_of.append(image_split(f"{base}/{rel}", ann.split_folders or {}))
        self.unusable += refused
        warnings: list[str] = []
        keys = _folder_splits(folder_of, [decode_name(batch.names[i]) for i in keep], warnings)
        meta = [_class_lists(o, self.offset) for o in objects_of]
        return Labelled(keep, {"objects": objects_of, "meta": meta}, (), cls, folder_of, keys, warnings=warnings)

    def enrich(self, batch: Batch) -> Enriched:
        """Not used: the annotations give the classes, so the walk calls `label` (one labeller a run)."""
        raise TypeError(f"{option('annotations')} goes with no other input that gives the classes")

    def leftovers(self, seen: set[bytes]) -> list[dict[str, str]]:
        """Annotations that are no box (or of no image found), images whose annotation cannot be used."""
        ann = self.ann
        problems = ann.problems + ann.not_found(self.matched)
        return [{"path": p["path"], "split": "", "reason": p["reason"]} for p in problems] + self.unusable

    def none_kept(self, input_dir: str, found: int, example: str) -> str:
        return f"no images found in {input_dir}"

    def missing(self) -> Missing | None:
        return None

    def done(self, found: Discovery) -> None:
        self.counts = found.boxes = BoxCounts(
            self.per_image, self.problems, self.skipped_empty, self.ann.digest, tuple(self.classes)
        )

    def record(self) -> dict[str, Any] | None:
        return entry(self.ann, self, self.recorded)

    def stamp(self, table: ImageTable, i: int) -> bytes | None:
        return boxes_digest(table.objects.get(i))

    def input_changed(self, recorded: Mapping[str, Any]) -> bool:
        return self.ann.digest != recorded.get("xxh3_128")

    def written(self, metadata: dict[str, Any], skipped: list[dict[str, str]], tasks: Iterable[Task]) -> dict[str, Any]:
        """The box counts without the images the encoder skipped."""
        if "detection" not in metadata or not skipped:
            return metadata
        gone = {s["path"] for s in skipped}
        lost = [t.objects for t in tasks if t.objects is not None and utf8_text(t.rel) in gone]
        return written(metadata, skipped, lost)

    def published(self, metadata: dict[str, Any], rels: Iterable[str]) -> dict[str, Any]:
        """The box counts of the records a new version holds, as a fresh conversion counts them."""
        if self.counts is None or not metadata.get("detection"):
            return metadata
        return published(metadata, self.counts, rels)


def _annotation_base(input_dir: str, ann: Annotations, by_folder: bool) -> str:
    """What an image's path below INPUT is joined to, to match it against the annotations' split folders."""
    if ann.split_folders:  # data.yaml's folders, as real paths: the image's real path is matched against them
        if by_folder and not fs.is_remote(input_dir):
            return os.path.realpath(input_dir).replace(os.sep, "/")
        return input_dir.rstrip("/")
    return os.path.basename(
        os.path.normpath(input_dir.rstrip("/"))
    )  # images/<split>/ below INPUT (INPUT may be `images`)


def for_convert(input_dir: str, o: Mapping[str, Any]) -> Boxes | None:
    """The boxes of `--annotations` (with `--skip-empty`, `--masks`), or None without it."""
    if o.get("annotations") is None:
        return None
    ann = read_annotations(o["annotations"], bool(o.get("masks")))
    recorded = fs.recorded_path(o["annotations"], input_dir)
    split = o.get("split")
    return Boxes(ann, input_dir=input_dir, skip_empty=bool(o.get("skip_empty")), recorded=recorded, split=bool(split))


def for_update(manifest: Mapping[str, Any], input_dir: str, output_dir: str) -> Boxes | None:
    """A detection dataset's annotations (dataset.json's `metadata.detection`), read again."""
    entry = manifest.get("metadata")
    if not entry or not entry.get("detection"):
        return None
    ann = recorded_annotations(entry, input_dir, output_dir)
    options = manifest.get("options") or {}
    return Boxes(
        ann,
        input_dir=input_dir,
        skip_empty=bool(recorded_value(options, "skip_empty")),
        recorded=str(entry["detection"].get("annotations")),
        split=bool(options.get("split")),
    )


def recorded_annotations(entry: Mapping[str, Any], input_dir: str, output_dir: str) -> Annotations:
    """A detection dataset's annotations (dataset.json's `metadata.detection`), read again. Changed
    boxes are changed images, which update rewrites (versions.changes); annotations gone, unreadable
    or of another format (VOC XML replaced by YOLO txt) are refused, advising `convert --like`."""
    path = fs.resolve_recorded(str(entry["detection"].get("annotations")), input_dir)
    if masks := bool(entry["detection"].get("masks")):  # made with --masks: the new records need them too
        require_pycocotools()
    ann = read_annotations(path, masks) if fs.exists(path) else None  # unreadable: its own UsageError says why
    was = entry["detection"].get("format")
    if ann is None or ann.format != was:
        if ann is None:  # restored, update goes on; moved, the dataset is made again from where they are
            why, change = "are gone", {"annotations": "FILE"}
            then = "put them back, or to make the dataset again from FILE, the annotations where they are now, "
        else:
            why, change = f"are {ann.format}, no longer {was},", {}
            then = "update takes boxes of the format the dataset was made with. To make it again from them, "
        raise UsageError(
            f"the annotations {path} {why} since {output_dir} was made; "
            + then
            + convert_like_advice(input_dir, output_dir, change)
        )
    return ann


def _classes(ann: Annotations, labels: list[str] | None, known_classes: list[str] | None) -> list[str]:
    """The class list: the annotations' own order (COCO's ids, YOLO's numbers), or --labels', or
    an update's classes with the new ones after them. The annotations' own list is checked first,
    with --labels too: two COCO categories (or YOLO numbers) of one name are refused, naming them."""
    named = set(ann.classes)
    ids = ann.class_ids or range(len(ann.classes))
    kind = "category id" if ann.format == "coco" else "class number"
    check_class_list(ann.classes, ids, option("annotations", ann.path), kind)
    if labels is not None or known_classes is not None:
        return class_list(named, labels, "the annotations name no class", known_classes)
    if not ann.classes:
        raise UsageError(f"{option('annotations', ann.path)}: the annotations name no class")
    return list(ann.classes)


def _folder_splits(folder_of: list[str], rels: list[str], warnings: list[str]) -> list[str]:
    """The splits the images' folders give (YOLO's data.yaml or `images/train/`), in train,
    validation, test order, when every image is in one; else none, and when some are, a warning
    naming an image that is in none (the images are split as without folders: by `--split`)."""
    named = set(folder_of) - {""}
    if not named:
        return []
    if "" in folder_of:
        outside = [r for r, s in zip(rels, folder_of) if not s]
        warnings.append(
            f"{plural(len(outside), 'image')} {'is' if len(outside) == 1 else 'are'} in no split folder of the "
            f"annotations (e.g. {utf8_text(outside[0])}), so the split folders ({', '.join(sorted(named))}) are "
            f"not used: every image goes to train; give {option('split')} to draw splits, or move them"
        )
        return []
    return [s for s in ("train", "validation", "test") if s in named]


def _sized(got: ImageBoxes, path: str) -> ImageBoxes | str:
    """A VOC annotation without <size> (or of 0x0) with the image's stored size, from its header,
    so its pixel boxes are normalised by it (not read as YOLO's normalised ones); or why not."""
    size = stored_size(path)
    if size is None:
        return "its annotation gives no <size> and the image's header gives none"
    return dataclasses.replace(got, width=size.width, height=size.height)


def _match(ann: Annotations, rel: str, matched: dict[str, str], ids: dict[str, int]) -> ImageBoxes | str | None:
    """The boxes of the image at `rel`, its annotation entry noted in `matched`, or why its
    annotation cannot give them (the image is skipped); UsageError when that entry is already
    another image's (two files of one name: which one it describes is a guess) or names a class
    outside the class list."""
    got = ann.lookup(rel)
    if got is None:
        return None
    if (other := matched.setdefault(got.entry, rel)) != rel:
        raise UsageError(
            f"{option('annotations')}: {ann.named(got.entry)} matches two images below the input folder, "
            f"{utf8_text(other)} and {utf8_text(rel)}: which one it describes is ambiguous; name the image by "
            "its path below the input folder in the annotations, or move one of them out"
        )
    if got.boxes is None:
        return got.unusable
    if any(b.name not in ids for b in got.boxes.boxes):
        unknown = sorted({b.name for b in got.boxes.boxes} - set(ids))
        raise UsageError(f"{option('annotations')}: {rel}: class {unknown[0]} is not in the class list")
    return got.boxes


def _class_lists(objects: Objects, label_offset: int) -> tuple[MetaValue, ...]:
    """image/class/label and image/class/text: the image's classes (each once, by id), as a multi-label record's."""
    ids = sorted(set(zip(objects.label, objects.text)))
    return (
        MetaValue("image/class/label", "int64", tuple(i - 1 + label_offset for i, _ in ids)),
        MetaValue("image/class/text", "bytes", tuple(t for _, t in ids)),
    )


def entry(ann: Annotations, boxed: Boxes, recorded: str) -> dict[str, Any]:
    """dataset.json's `metadata` entry of a detection dataset: lists of classes per image, and `detection`;
    `recorded`: the annotations' path as dataset.json records it (fs.recorded_path)."""
    problems, counts = boxed.problems, boxed.counts
    assert counts is not None, "a detection walk counts its boxes"
    return {
        "file": recorded,
        "xxh3_128": ann.digest,
        "columns": {},
        "multi_label": True,
        "detection": ann.entry()
        | {
            "annotations": recorded,
            "boxes": boxed.boxes,
            "boxes_per_class": per_class(counts.classes, counts.per_image.values()),
            "clipped": sum(p["reason"].endswith("clipped") for p in problems),
            "dropped": sum(p["reason"].endswith("dropped") for p in problems),
            "empty_images": boxed.empty,
            "skipped_empty": boxed.skipped_empty,
            "box_problems": problems,
        },
    }


def per_class(classes: Iterable[str], per_image: Iterable[tuple[str, ...]]) -> dict[str, int]:
    """dataset.json's `boxes_per_class`: every class, in label order, with the boxes of it."""
    counts = Counter(name for names in per_image for name in names)
    return {c: counts[c] for c in classes}


def written(metadata: dict[str, Any], skipped: list[dict[str, str]], lost: list[Objects]) -> dict[str, Any]:
    """A detection dataset's `metadata` entry over the images written: the boxes of the images the
    encoder skipped (`lost`; their paths in `skipped`) are neither counted nor named."""
    gone = {s["path"] for s in skipped}
    d = dict(metadata["detection"])
    d["box_problems"] = [p for p in d["box_problems"] if p["path"] not in gone]
    d["boxes"] -= sum(len(o.label) for o in lost)
    if "boxes_per_class" in d:  # not in datasets made before it was
        gone_boxes = Counter(name for o in lost for name in o.text)
        d["boxes_per_class"] = {c: n - gone_boxes[c] for c, n in d["boxes_per_class"].items()}
    d["empty_images"] -= sum(not o.label for o in lost)
    d["clipped"] = sum(p["reason"].endswith("clipped") for p in d["box_problems"])
    d["dropped"] = sum(p["reason"].endswith("dropped") for p in d["box_problems"])
    return metadata | {"detection": d}


def published(metadata: dict[str, Any], counts: BoxCounts, rels: Iterable[str]) -> dict[str, Any]:
    """A detection dataset's `metadata` entry over the images a new version publishes (`rels`:
    an update's records), from the update's walk (`counts`): the boxes of the images kept, added
    and gone alike, as a fresh conversion would count them."""
    shown = set(rels)
    d = dict(metadata["detection"]) | {"xxh3_128": counts.digest or metadata["detection"].get("xxh3_128")}
    kept = [counts.per_image[r] for r in shown if r in counts.per_image]
    d["boxes"] = sum(map(len, kept))
    d["boxes_per_class"] = per_class(counts.classes, kept)
    d["empty_images"] = sum(not names for names in kept)
    d["skipped_empty"] = counts.skipped_empty
    d["box_problems"] = [p for p in counts.problems if p["path"] in shown]
    d["clipped"] = sum(p["reason"].endswith("clipped") for p in d["box_problems"])
    d["dropped"] = sum(p["reason"].endswith("dropped") for p in d["box_problems"])
    return metadata | {"xxh3_128": d["xxh3_128"], "detection": d}
