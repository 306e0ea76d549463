"""Pascal VOC annotations (`convert --annotations DIR` of XML files): one XML per image, read here
into each image's boxes in pixels, or into the reason it cannot be used.

Every XML is judged on its own, so one broken or foreign file cannot hide the others: the folder
is VOC when any XML's root is `<annotation>`. An XML that is not well-formed, or a VOC one with a
field that is no usable number (`<width>nan</width>`, `<difficult>inf</difficult>`, a coordinate
of `1e400`), is unusable: the image it is of (by its `<filename>`, or its own name's stem) is
skipped with that reason instead of being written with no boxes, which would teach a detector
that the image holds nothing. Two XMLs that name one `<filename>` make that image unusable too
(which one holds its boxes is a guess). Empty elements, as labelme2voc writes them (`<folder/>`,
`<difficult/>`, `<truncated/>`), are their defaults. An XML without `<size>` (or of 0x0) leaves
the size to the image's own header (`plan.detection`), never to YOLO's normalised reading.
"""

from __future__ import annotations

import math
import os
import xml.etree.ElementTree as ET
from typing import NamedTuple

from img2tfrecord.conversion.plan.raw_boxes import ImageBoxes, RawBox

MAX_PIXELS_SIDE = 1 << 31  # a width or height beyond any image a decoder reads (TensorFlow: int32)


class Unusable(NamedTuple):
    """An annotation entry that names an image but cannot give its boxes: its file, and why, as
    said of the file (listed when no image matched it) and of the image (skipped)."""

    path: str
    reason: str
    image: str


def _unusable(rel: str, why: str) -> Unusable:
    return Unusable(rel, why, f"its annotation {rel} {why}")


class VocRead(NamedTuple):
    """A folder's XML files read: the boxes by `<filename>` and by the XML's stem, and what was not used."""

    voc_files: int  # XMLs whose root is <annotation>
    classes: list[str]  # sorted
    by_name: dict[str, ImageBoxes]
    by_stem: dict[str, ImageBoxes]
    stem_of: dict[str, str]  # a by_name key -> its XML's stem
    origin: dict[str, str]  # a stem -> its XML, as named
    bad_name: dict[str, Unusable]  # a <filename> no boxes can be given for
    bad_stem: dict[str, Unusable]  # an XML's stem, likewise
    problems: list[dict[str, str]]  # XMLs that are no VOC annotation at all: skipped


class BadVoc(ValueError):
    """A VOC field that cannot be read; its message says which, by position, not by content."""


def read_voc(top: str, xmls: list[str]) -> VocRead:
    """Read the XML files `xmls` (relative to `top`)."""
    by_name: dict[str, ImageBoxes] = {}
    by_stem: dict[str, ImageBoxes] = {}
    stem_of: dict[str, str] = {}
    origin: dict[str, str] = {}
    bad_name: dict[str, Unusable] = {}
    bad_stem: dict[str, Unusable] = {}
    problems: list[dict[str, str]] = []
    names: set[str] = set()
    voc_files = 0
    for rel in xmls:
        stem = os.path.splitext(rel)[0]
        origin[stem] = rel
        try:
            root = ET.parse(os.path.join(top, rel)).getroot()
        except ET.ParseError as e:
            line, column = e.position
            bad_stem[stem] = _unusable(rel, f"is not well-formed XML (line {line}, column {column + 1})")
            continue
        except (OSError, RecursionError) as e:
            bad_stem[stem] = _unusable(rel, f"cannot be read: {getattr(e, 'strerror', None) or type(e).__name__}")
            continue
        except LookupError as e:  # the XML declaration names an encoding no codec reads
            bad_stem[stem] = _unusable(rel, f"declares an encoding Python cannot read ({e})")
            continue
        if root.tag != "annotation":
            problems.append(
                {"path": rel, "reason": "not a Pascal VOC annotation (its root element is not <annotation>)"}
            )
            continue
        voc_files += 1
        filename = (root.findtext("filename") or "").strip()
        try:
            width, height = _size(root)
            objects = tuple(_object(o, n) for n, o in enumerate(root.iter("object")))
        except BadVoc as e:
            bad = _unusable(rel, f"is not a usable Pascal VOC annotation: {e}")
            bad_stem[stem] = bad
            if filename:
                bad_name.setdefault(filename, bad)
            continue
        got = ImageBoxes(width=width, height=height, source_id=filename or rel, boxes=objects)
        if filename in by_name or filename in bad_name:  # two XMLs of one image
            first = origin[stem_of[filename]] if filename in by_name else bad_name[filename].path
            bad_name[filename] = Unusable(
                first,
                f"names one image with {rel} (not found below the input folder)",
                f"two annotations name it, {first} and {rel}: which one holds its boxes is ambiguous; remove one",
            )
            by_name.pop(filename, None)
            stem_of.pop(filename, None)
            by_stem.pop(os.path.splitext(first)[0], None)
            bad_stem.pop(os.path.splitext(first)[0], None)
            continue
        names.update(b.name for b in objects)
        if filename:
            by_name[filename] = got
            stem_of[filename] = stem
        by_stem[stem] = got
    return VocRead(voc_files, sorted(names), by_name, by_stem, stem_of, origin, bad_name, bad_stem, problems)


def _size(root: ET.Element) -> tuple[int, int]:
    """<size>'s width and height; (0, 0) when it is missing, empty or 0 in either: the image's own size."""
    size = root.find("size")
    if size is None:
        return 0, 0
    width, height = (_pixels(size.findtext(k), k) for k in ("width", "height"))
    return (width, height) if width > 0 and height > 0 else (0, 0)


def _pixels(text: str | None, key: str) -> int:
    """A <size> field: a whole number of pixels (500 or 500.0), 0 when empty."""
    if text is None or not text.strip():
        return 0
    try:
        v = float(text)
    except ValueError:
        raise BadVoc(f"<size>'s <{key}> is not a number") from None
    if not (math.isfinite(v) and v == int(v) and 0 <= v < MAX_PIXELS_SIDE):
        raise BadVoc(f"<size>'s <{key}> is not a whole number of pixels from 0 to {MAX_PIXELS_SIDE - 1:,}")
    return int(v)


def _object(o: ET.Element, n: int) -> RawBox:
    """One <object>: its name, <bndbox> corners (finite numbers) and 0/1 flags; `n` its place, from 0."""
    name = (o.findtext("name") or "").strip()
    if not name:
        raise BadVoc(f"object {n} has no <name>")
    bb = o.find("bndbox")
    if bb is None:
        raise BadVoc(f"object {n} has no <bndbox>")
    corners = []
    for k in ("xmin", "ymin", "xmax", "ymax"):
        text = (bb.findtext(k) or "").strip()
        try:
            v = float(text)
        except ValueError:
            raise BadVoc(f"object {n}'s <{k}> is {'missing' if not text else 'not a number'}") from None
        if not math.isfinite(v):
            raise BadVoc(f"object {n}'s <{k}> is not a finite number")
        corners.append(v)
    x0, y0, x1, y1 = corners
    difficult, truncated = (_flag(o.findtext(k), k, n) for k in ("difficult", "truncated"))
    return RawBox(name=name, xmin=x0, ymin=y0, xmax=x1, ymax=y1, difficult=difficult, truncated=truncated)


def _flag(text: str | None, key: str, n: int) -> int:
    """<difficult> or <truncated>: 0 or 1 (0 when missing or empty, as labelme2voc writes it)."""
    if text is None or not text.strip():
        return 0
    try:
        v = float(text)
    except ValueError:
        v = math.nan
    if v not in (0.0, 1.0):
        raise BadVoc(f"object {n}'s <{key}> is not 0 or 1")
    return int(v)


class StoredSize(NamedTuple):
    width: int
    height: int


def stored_size(path: str) -> StoredSize | None:
    """The width and height an image file stores (its header, read by Pillow without decoding the
    pixels: the size the encoder checks an annotation's against); None when it cannot be read."""
    import warnings

    from PIL import Image

    from img2tfrecord import fs

    try:
        with warnings.catch_warnings(), fs.open_read(path) as f:
            warnings.simplefilter("ignore")  # DecompressionBombWarning: --max-pixels is the encoder's to judge
            with Image.open(f) as im:
                return StoredSize(*im.size)
    except Exception:  # unreadable here: the encoder says why, if it cannot read it either
        return None
