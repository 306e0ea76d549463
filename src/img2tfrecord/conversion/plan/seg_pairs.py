"""The masks of a segmentation input (`convert IMAGES OUT --masks-dir MASKS`): an enricher
(conversion.plan.enrich) that pairs every image below IMAGES with its mask below MASKS.

The pairing rule: an image and a mask pair when their paths below IMAGES and MASKS are the same
without the extension (the image any image format, the mask a PNG): `2007_000032.jpg` and
`2007_000032.png` (Pascal VOC's `JPEGImages/` and `SegmentationClass/`, ADE20K's `images/` and
`annotations/`). Cityscapes' names are taken too: an image's `_leftImg8bit` suffix and a mask's
`_gtFine_labelIds` one are left out of the comparison (`leftImg8bit/` and `gtFine/`); where MASKS
holds such `*_gtFine_labelIds.png`, its other `_gtFine_` PNGs (colour, instance, train ids) are not
masks. An image without a mask and a mask without an image are skips naming the file and what is
missing; a mask of another size is found by the worker, which reads it (conversion.encode.seg_masks).

Splits: Pascal VOC's split lists when IMAGES has a sibling `ImageSets/Segmentation/` (train.txt,
val.txt, test.txt, a name a line; the images in none are left out, as VOC's JPEGImages holds the
detection images too, even when `--split` draws the splits anew); else split folders (`train/`, `val/`, `validation/`, `test/`, ADE20K's
`training/`), when every image is in one; else `--split`, as for any folder. The images are one
class, `image` (the enricher is a `Labeller`: the walk takes IMAGES whole, VOC's JPEGImages has no
class folders): a segmentation dataset's classes are its masks' ids (dataset.json's `segmentation`).

Each image's stamp is its mask's size and mtime, so `update` re-encodes an image whose mask changed.
"""

from __future__ import annotations

import os
from array import array
from collections.abc import Iterable, Mapping
from typing import Any

from img2tfrecord import fs
from img2tfrecord.conversion.plan.enrich import Batch, Enriched, Labelled, Skip
from img2tfrecord.conversion.plan.mask_colors import MaskSettings, mask_settings
from img2tfrecord.conversion.plan.splits import SPLIT_DIR_NAMES, Discovery, Missing
from img2tfrecord.conversion.plan.table import ImageTable, Task, decode_name
from img2tfrecord.conversion.plan.walk import ClassWalk, walk_classes
from img2tfrecord.errors import DataError, UsageError, option, plural
from img2tfrecord.format.options import recorded_value
from img2tfrecord.format.schema import utf8_text

CLASS = "image"  # the one class of a segmentation dataset's images
IMAGE_SUFFIX = "_leftImg8bit"  # Cityscapes
MASK_SUFFIX = "_gtFine_labelIds"
SPLIT_FOLDERS = SPLIT_DIR_NAMES | {"training": "train"}  # ADE20K's images/training, images/validation
VOC_LISTS = ("ImageSets", "Segmentation")


def _key(rel: str, suffix: str) -> str:
    """What an image's or a mask's path is compared by: without its extension and its layout's suffix."""
    stem = os.path.splitext(rel)[0]
    return stem.removesuffix(suffix)


def _masks(masks_dir: str) -> tuple[dict[str, str], dict[str, bytes], int]:
    """MASKS's masks by their key, each mask's stamp (its size and mtime), and how many files are not masks."""
    (found,) = walk_classes([ClassWalk("", "", masks_dir)], False)
    if found.report.error is not None:
        raise DataError(f"cannot list {option('masks_dir', masks_dir)}: {found.report.error}")
    names = [decode_name(n) for n in found.names]
    stamps = {n: array("q", (sz, mt)).tobytes() for n, sz, mt in zip(names, found.sizes, found.mtimes)}
    pngs = [n for n in names if n.lower().endswith(".png")]
    cityscapes = any(_key(n, "").endswith(MASK_SUFFIX) for n in pngs)
    if cityscapes:
        pngs = [n for n in pngs if _key(n, "").endswith(MASK_SUFFIX)]
    return {_key(n, MASK_SUFFIX): n for n in pngs}, stamps, found.ignored + len(names) - len(pngs)


def _voc_lists(input_dir: str) -> dict[str, set[str]] | None:
    """Pascal VOC's split lists beside IMAGES (`../ImageSets/Segmentation/*.txt`): split -> image stems."""
    folder = os.path.join(os.path.dirname(os.path.abspath(input_dir)), *VOC_LISTS)
    if not os.path.isdir(folder):
        return None
    lists: dict[str, set[str]] = {}
    for name in sorted(os.listdir(folder)):
        split = SPLIT_FOLDERS.get(os.path.splitext(name)[0].lower())
        if name.endswith(".txt") and split is not None:
            with open(os.path.join(folder, name), encoding="utf-8", errors="surrogateescape") as f:
                lists[split] = {line.split()[0] for line in f if line.strip()}
    return lists or None


def _split_of(rel: str, lists: dict[str, set[str]] | None) -> str | None:
    """The split VOC's lists, else the image's first folder, give; "" when none does, None when a list
    leaves the image out."""
    if lists is not None:
        return next((s for s, stems in lists.items() if _key(rel, "") in stems), None)
    return SPLIT_FOLDERS.get(rel.split("/", 1)[0].lower(), "") if "/" in rel else ""


class Masks:
    """`--masks-dir`: each image's mask (the `mask` column: its path), its class `image`, its split."""

    name = "masks"
    columns: tuple[str, ...] = ("mask",)
    labels_images = True
    skip_reasons: tuple[str, ...] = ("no mask", "a mask without an image")

    def __init__(self, *, input_dir: str, masks_dir: str, settings: MaskSettings, recorded: str, split: bool) -> None:
        if fs.is_remote(input_dir) or fs.is_remote(masks_dir):
            raise UsageError(f"{option('masks_dir')} pairs images and masks in local folders")
        if not os.path.isdir(masks_dir):
            raise UsageError(f"{option('masks_dir', masks_dir)} is no folder")
        self.input_dir, self.masks_dir, self.settings, self.recorded, self.split = (
            input_dir, masks_dir, settings, recorded, split,
        )  # fmt: skip
        self.inputs: tuple[str, ...] = (masks_dir,)
        self.masks, self.stamps, self.not_masks = _masks(masks_dir)
        self.lists = _voc_lists(input_dir)
        rel = os.path.relpath(os.path.abspath(masks_dir), os.path.abspath(input_dir)).replace(os.sep, "/")
        self.inside = rel + "/"  # MASKS below IMAGES (ADE20K's root given): its files are no images
        self.paired: set[str] = set()
        self.left_out = 0
        self.pairs = 0

    def prepare(self, labels: list[str] | None, known_classes: list[str] | None, label_offset: int) -> list[str]:
        return [CLASS]

    def _pair(self, batch: Batch) -> tuple[list[int], list[str], list[str], list[Skip]]:
        """The images of `batch` with a mask: their positions, masks' paths and split folders; the skips."""
        keep: list[int] = []
        paths: list[str] = []
        folders: list[str] = []
        skips: list[Skip] = []
        for i, name in enumerate(batch.names):
            rel = decode_name(batch.prefix + name)
            where = _split_of(rel, self.lists)
            if rel.startswith(self.inside) or where is None:
                self.left_out += where is None and not rel.startswith(self.inside)
                continue
            mask = self.masks.get(_key(rel, IMAGE_SUFFIX))
            if mask is None:
                city = rel.endswith(IMAGE_SUFFIX + os.path.splitext(rel)[1])
                want = _key(rel, IMAGE_SUFFIX) + (MASK_SUFFIX if city else "")
                skips.append(Skip(batch.prefix + name, f"no mask: {self.masks_dir}/{want}.png is not there"))
                continue
            self.paired.add(mask)
            keep.append(i)
            paths.append(os.path.join(self.masks_dir, *mask.split("/")))
            folders.append("" if self.split else where)
        self.pairs += len(keep)
        return keep, paths, folders, skips

    def label(self, batch: Batch) -> Labelled:
        keep, paths, folders, skips = self._pair(batch)
        presplit = not self.split and (self.lists is not None or (bool(keep) and all(folders)))
        keys = [s for s in ("train", "validation", "test") if s in folders] if presplit else []
        return Labelled(keep, {"mask": paths}, skips, array("q", bytes(8 * len(keep))), folders, keys)

    def enrich(self, batch: Batch) -> Enriched:
        keep, paths, _, skips = self._pair(batch)
        return Enriched(keep, {"mask": paths}, skips)

    def leftovers(self, seen: set[bytes]) -> list[dict[str, str]]:
        """The masks of no image (in VOC's lists, when there are lists)."""
        out = []
        for key, mask in sorted(self.masks.items()):
            if mask not in self.paired and (self.lists is None or any(key in s for s in self.lists.values())):
                shown = utf8_text(f"{self.masks_dir.rstrip('/')}/{mask}")
                why = f"{self.skip_reasons[1]}: no {key}.* below {self.input_dir}"
                out.append({"path": shown, "split": "", "reason": why})
        return out

    def none_kept(self, input_dir: str, found: int, example: str) -> str:
        return f"no image below {input_dir} has a mask below {self.masks_dir}"

    def missing(self) -> Missing | None:
        return None

    def done(self, found: Discovery) -> None:
        if self.left_out:
            found.notes.append(f"{plural(self.left_out, 'image')} in no split list of {'/'.join(VOC_LISTS)} left out")
        found.ignored_files += self.not_masks

    def record(self) -> dict[str, Any] | None:
        s = self.settings
        return {
            "columns": {},
            "segmentation": {
                "masks_dir": self.recorded,
                "colors": s.colors_from,
                "ignore": s.ignore,
                "classes": list(s.names),
                "pairs": self.pairs,
            },
        }

    def stamp(self, table: ImageTable, i: int) -> bytes | None:
        """The mask's size and mtime, as its walk found them (16 bytes)."""
        path = table.columns.get("mask", {}).get(i)
        if path is None:
            return None
        return self.stamps.get(os.path.relpath(path, self.masks_dir).replace(os.sep, "/"))

    def input_changed(self, recorded: Mapping[str, Any]) -> bool:
        was = recorded.get("segmentation") or {}
        return (was.get("colors"), was.get("ignore")) != (self.settings.colors_from, self.settings.ignore)

    def written(self, metadata: dict[str, Any], skipped: list[dict[str, str]], tasks: Iterable[Task]) -> dict[str, Any]:
        return metadata  # the per-split class counts come from the encoder (write.finalize)

    def published(self, metadata: dict[str, Any], rels: Iterable[str]) -> dict[str, Any]:
        # an update keeps the counts of the version before: recounting needs each removed or changed
        # image's per-class pixels, which neither the catalog nor dataset.json keeps (only its mask does)
        return metadata


def for_convert(input_dir: str, o: Mapping[str, Any]) -> Masks | None:
    """The masks of `--masks-dir` (with `--mask-colors`, `--mask-ignore`), or None without it."""
    if o.get("masks_dir") is None:
        return None
    colors = o.get("mask_colors")
    if colors not in (None, "voc", "cityscapes"):  # a file, recorded so that update finds it from any folder
        colors = os.path.abspath(colors)
    settings = mask_settings(colors, int(o.get("mask_ignore", 255)))
    recorded = fs.recorded_path(o["masks_dir"], input_dir)
    return Masks(
        input_dir=input_dir, masks_dir=o["masks_dir"], settings=settings, recorded=recorded, split=bool(o.get("split"))
    )


def for_update(manifest: Mapping[str, Any], input_dir: str, output_dir: str) -> Masks | None:
    """A segmentation dataset's masks (dataset.json's `metadata.segmentation`), paired again."""
    entry = (manifest.get("metadata") or {}).get("segmentation")
    if not entry:
        return None
    options = manifest.get("options") or {}
    settings = mask_settings(options.get("mask_colors"), int(recorded_value(options, "mask_ignore")))
    recorded = str(entry.get("masks_dir"))
    masks_dir = fs.resolve_recorded(recorded, input_dir)
    return Masks(
        input_dir=input_dir, masks_dir=masks_dir, settings=settings, recorded=recorded, split=bool(options.get("split"))
    )
