"""COCO instances JSON, streamed (`convert --annotations instances.json`).

instances_train2017.json is 448 MB; `json.load` would build 5-10 times that in Python objects, most
of it segmentation polygons no box needs. So the file is read once, in chunks, through ijson's
event parser (its C backend), hashed as it is read, and only what a box needs is kept: per
annotation its image id and category id (each coded once to a small number), its bbox, area and
crowd flag in flat arrays, and for `--masks` its segmentation (conversion.plan.coco_masks). `images`, `annotations` and `categories` may come in any order, so the
names are resolved after the last byte: the boxes grouped by image with one stable sort, and an
image's `ImageBoxes` built when the walk looks it up (`CocoImages`). The result is what
`json.load` of the same file would give (tests/plan/test_coco_stream.py holds it to that).

A file under `WHOLE_BELOW` is parsed whole by `json` instead (without `--masks`, whose
segmentations are kept from the stream's events), its elements fed to the same
`_Kept`: streaming goes through Python once an event (~1.1 s for a 3.6 MB file of 25,682 boxes
here, where `json.loads` takes ~0.13 s), and below 16 MB the whole parse holds ~150 MB at most.
"""

from __future__ import annotations

import itertools
import json
import os
from array import array
from collections.abc import Iterator, Mapping
from typing import IO, Any, NamedTuple

import ijson
import xxhash

from img2tfrecord.conversion.plan.coco_masks import PREFIXES, Segments
from img2tfrecord.conversion.plan.raw_boxes import ImageBoxes, RawBox
from img2tfrecord.errors import UsageError, option
from img2tfrecord.format.parse_errors import parse_error, stream_error

ANN, IMG, CAT = "annotations.item", "images.item", "categories.item"
_FIELDS = {
    ANN: ("image_id", "category_id", "bbox", "iscrowd", "area"),
    IMG: ("id", "file_name", "width", "height"),
    CAT: ("id", "name"),
}
_FIELD = {f"{item}.{name}": (item, name) for item, names in _FIELDS.items() for name in names}
_BBOX_ITEM = f"{ANN}.bbox.item"
_WANTED = frozenset({"", "images", *_FIELDS, *_FIELD, _BBOX_ITEM})
_SCALARS = frozenset({"null", "boolean", "integer", "double", "number", "string"})
_CONTAINER = object()  # a field whose value is an object or a list: no usable id, name or number


WHOLE_BELOW = 16 * 2**20  # bytes: a smaller file is parsed whole (`_whole`), a larger one streamed


class _OwnError(ValueError):
    """A reading error in this module's own words (no text of the file in them)."""


class NotCoco(Exception):
    """JSON, but not an object: not COCO instances."""


class _Hashed:
    """The file as ijson reads it, hashed on the way (one read for the parse and the digest), a
    UTF-8 BOM dropped as the text readers drop it."""

    def __init__(self, f: IO[bytes], name: str) -> None:
        self._f, self._first = f, True
        self.start = self.offset = 0  # the last block read: a stream error lies in it
        self.hash = xxhash.xxh3_128(name.encode("utf-8", "surrogateescape") + b"\0")

    def read(self, size: int = -1) -> bytes:
        data = self._f.read(size)
        self.start, self.offset = self.offset, self.offset + len(data)
        self.hash.update(data)
        if self._first and data:
            self._first = False
            data = data.removeprefix(b"\xef\xbb\xbf")
        return data


class _Kept:
    """What the stream keeps: per box a few numbers in flat arrays; images and categories by id."""

    def __init__(self, masks: bool = False) -> None:
        self.segments = Segments() if masks else None
        self.wanted: frozenset[str] = _WANTED | PREFIXES if masks else _WANTED
        self.no_mask = array("q")  # annotations with no segmentation pycocotools can rasterize (--masks)
        self.image_codes: dict[Any, int] = {}  # COCO image id -> a number, first seen in either list
        self.cat_codes: dict[Any, int] = {}  # category id -> a number, first seen in either list
        self.box_image, self.box_cat, self.box_index = array("q"), array("q"), array("q")
        self.xywh, self.area, self.crowd = array("d"), array("d"), array("b")
        self.bad = array("q")  # annotations with no usable bbox or category id
        self.annotations = 0
        self.files: dict[str, int] = {}  # file_name -> image row (a name given twice: the last)
        self.width, self.height, self.image_code = array("q"), array("q"), array("q")
        self.source_ids: list[str] = []
        self.cats: dict[Any, str] = {}
        self.keys: set[str] = set()  # the top-level keys
        self.images_list = False

    def add(self, item: str, cur: dict[str, Any] | None) -> None:
        """One element of `images`, `annotations` or `categories` (None: not an object)."""
        if item == ANN:
            self._annotation(cur)
        elif cur is None:
            return
        elif item == IMG:
            self._image(cur)
        elif cur.get("id", _CONTAINER) is not _CONTAINER and isinstance(cur.get("name"), str):
            self.cats[cur["id"]] = cur["name"]

    def _annotation(self, cur: dict[str, Any] | None) -> None:
        self._box(cur)
        if self.segments is not None:
            self.segments.begin()  # the next annotation's parts start here

    def _box(self, cur: dict[str, Any] | None) -> None:
        i = self.annotations
        self.annotations += 1
        try:
            assert cur is not None and cur.get("category_id", _CONTAINER) is not _CONTAINER
            x, y, w, h = (float(v) for v in cur["bbox"])
        except (AssertionError, KeyError, TypeError, ValueError):
            self.bad.append(i)
            if self.segments is not None:
                self.segments.discard()
            return
        if self.segments is not None and not self.segments.commit():
            self.no_mask.append(i)
            return
        image = cur.get("image_id")
        self.keep(
            i,
            None if image is _CONTAINER else image,
            cur["category_id"],
            (x, y, w, h),
            cur.get("area"),
            cur.get("iscrowd"),
        )

    def keep(self, i: int, image: Any, cat: Any, xywh: tuple[float, ...], area: Any, crowd: Any) -> None:
        """Annotation `i`'s box, read: its ids coded, its numbers into the arrays; an area that is
        no number is -1 (the box's own), the crowd flag is its truth."""
        self.box_image.append(self.image_codes.setdefault(image, len(self.image_codes)))
        self.box_cat.append(self.cat_codes.setdefault(cat, len(self.cat_codes)))
        self.box_index.append(i)
        self.xywh.extend(xywh)
        self.area.append(float(area) if isinstance(area, (int, float)) else -1.0)
        self.crowd.append(1 if crowd else 0)

    def _image(self, cur: dict[str, Any]) -> None:
        name = cur.get("file_name")
        if not isinstance(name, str):
            return
        name = name.removeprefix("./")
        key = cur.get("id")
        key = None if key is _CONTAINER else key
        self.files[name] = len(self.source_ids)
        self.width.append(_int(cur.get("width")))
        self.height.append(_int(cur.get("height")))
        self.image_code.append(self.image_codes.setdefault(key, len(self.image_codes)))
        self.source_ids.append(str(key if "id" in cur and key is not None else name))


def _int(v: Any) -> int:
    try:
        return int(v or 0)
    except (TypeError, ValueError):
        return 0


MAX_DEPTH = 16  # containers deep: past this a value's prefix is not built (what a box needs is 4 deep)
MAX_NESTING = 500  # containers deep: a file nested deeper is refused


class _Open(NamedTuple):
    prefix: str | None  # the container's own prefix (None: too deep to matter)
    item: str | None  # an array's elements' prefix; None for an object


def _events(f: _Hashed, wanted: frozenset[str]) -> Iterator[tuple[str, str, Any]]:
    """`ijson.parse`'s (prefix, event, value) for the prefixes `_stream` wants, the prefix built
    here and only MAX_DEPTH levels deep: ijson's own builds every level's prefix in full, so a
    200 KB file of nested brackets took gigabytes (depth squared) until the kernel killed the
    process. The events of other prefixes (segmentation's numbers: most of a COCO file) cost a
    comparison each."""
    open_: list[_Open] = []
    nxt: str | None = ""  # the prefix of the next value
    for event, value in ijson.basic_parse(f, use_float=True):
        if event in _SCALARS:
            if nxt in wanted:
                yield nxt, event, value  # type: ignore[misc]
        elif event == "map_key":
            p = open_[-1].prefix
            nxt = None if p is None or len(open_) > MAX_DEPTH else (f"{p}.{value}" if p else value)
            if p in wanted:
                yield p, event, value  # type: ignore[misc]
        elif event == "start_map" or event == "start_array":
            if nxt in wanted:
                yield nxt, event, value  # type: ignore[misc]
            item = None
            if event == "start_array":
                item = None if nxt is None or len(open_) >= MAX_DEPTH else (f"{nxt}.item" if nxt else "item")
            open_.append(_Open(nxt, item))
            nxt = item
            if len(open_) > MAX_NESTING:  # as json's parser refuses (its recursion limit): no COCO file is so deep
                raise _OwnError(f"nested more than {MAX_NESTING} levels deep")
        else:  # end_map, end_array
            p = open_.pop().prefix
            if p in wanted:
                yield p, event, value  # type: ignore[misc]
            nxt = open_[-1].item if open_ else None


def _stream(f: _Hashed, kept: _Kept) -> None:
    """Feed every event of interest to `kept`; the others (segmentation, info, licenses) pass by."""
    cur: dict[str, Any] | None = None
    wanted, segments = kept.wanted, kept.segments
    for prefix, event, value in _events(f, wanted):
        if prefix not in wanted:
            continue
        if segments is not None and prefix in PREFIXES:
            segments.event(prefix, event, value)
        elif prefix in _FIELDS:  # an element of one of the three lists
            if event == "start_map":
                cur = {}
            elif event == "start_array":
                cur = None
            elif event in ("end_map", "end_array") or event in _SCALARS:
                kept.add(prefix, cur)
                cur = None
        elif prefix == _BBOX_ITEM:
            if cur is not None and isinstance(cur.get("bbox"), list):
                if event in _SCALARS:
                    cur["bbox"].append(value)
                elif event in ("start_map", "start_array"):
                    cur["bbox"] = None
        elif prefix in _FIELD:
            if cur is None or event in ("end_map", "end_array", "map_key"):
                continue
            name = _FIELD[prefix][1]
            if name == "bbox":
                cur[name] = [] if event == "start_array" else None
            else:
                cur[name] = value if event in _SCALARS else _CONTAINER
        elif prefix == "":
            if event == "map_key":
                kept.keys.add(value)
            elif event not in ("start_map", "end_map"):
                raise NotCoco("not an object")
        elif event == "start_array":  # prefix "images"
            kept.images_list = True


def _whole(f: _Hashed, kept: _Kept) -> None:
    """`_stream`'s work for a small file: parsed whole, each element of the three lists reduced to
    what the stream would have kept of it (`_element`), in the file's order."""
    data = json.loads(f.read(), parse_constant=_no_constant)
    if not isinstance(data, dict):
        raise NotCoco("not an object")
    kept.keys.update(data)
    for key, value in data.items():
        if key == "images" and isinstance(value, list):
            kept.images_list = True
        item = {"images": IMG, "annotations": ANN, "categories": CAT}.get(key)
        if item == ANN and isinstance(value, list):  # most of the elements
            _annotations(kept, value)
        elif item is not None and isinstance(value, list):
            for element in value:
                kept.add(item, _element(item, element))


_PLAIN = frozenset({int, float, str, bool, type(None)})


def _annotations(kept: _Kept, elements: list[Any]) -> None:
    """A whole parse's annotations into `kept`: a usual one (an object, its bbox a list of four
    numbers, its ids, area and crowd flag plain values) straight to `_Kept.keep`, as `_box` hands
    it on (~2 us against ~6); any other through `_element` and `_box`, as the stream gives it."""
    assert kept.segments is None, "--masks streams"
    keep = kept.keep
    for element in elements:
        if type(element) is dict:
            bbox, cat, image = element.get("bbox"), element.get("category_id", _CONTAINER), element.get("image_id")
            area, crowd = element.get("area"), element.get("iscrowd")
            if (
                type(bbox) is list
                and len(bbox) == 4
                and type(cat) in _PLAIN
                and type(image) in _PLAIN
                and type(area) in _PLAIN
                and type(crowd) in _PLAIN
            ):
                try:
                    xywh = tuple(map(float, bbox))
                except (TypeError, ValueError):  # a list or an object in it, text that is no number: a bad one
                    pass
                else:
                    keep(kept.annotations, image, cat, xywh, area, crowd)
                    kept.annotations += 1
                    continue
        kept._annotation(_element(ANN, element))


def _no_constant(name: str) -> Any:
    raise _OwnError(f"{name} is not JSON")  # as the stream's parser says: NaN and Infinity are no JSON numbers


def _element(item: str, element: Any) -> dict[str, Any] | None:
    """An element's fields as the stream gives them: an object or a list in a field is `_CONTAINER`,
    a bbox a list of numbers or None (not a list, or a list holding a list or an object)."""
    if type(element) is not dict:
        return None
    cur = {name: element[name] for name in _FIELDS[item] if name in element}
    for name, v in cur.items():
        if type(v) in _NESTED:  # json gives exactly list and dict for these
            if item == ANN and name == "bbox":
                cur[name] = None if any(type(x) in _NESTED for x in v) or type(v) is dict else list(v)
            else:
                cur[name] = _CONTAINER
        elif item == ANN and name == "bbox":
            cur[name] = None
    return cur


_NESTED = (list, dict)


class CocoImages(Mapping[str, ImageBoxes]):
    """A COCO file's images by file name, each one's `ImageBoxes` built when asked for from the
    boxes kept in arrays, grouped by image (ImageBoxes and RawBoxes for every image at once would
    cost ~250 bytes a box). Plain Python: an image's few boxes are read from the arrays faster
    than numpy slices them and converts them back (4,000 images: 18 ms against 21)."""

    def __init__(self, kept: _Kept, names: list[str | None], keep: list[bool]) -> None:
        codes = kept.box_image
        order = [j for j, k in enumerate(keep) if k]
        order.sort(key=codes.__getitem__)  # stable: an image's boxes in the file's order
        counts = [0] * (len(kept.image_codes) + 1)
        for j in order:
            counts[codes[j] + 1] += 1
        self._starts = list(itertools.accumulate(counts))  # image code -> its first box in `_order`
        self._order = array("q", order)
        self._xywh, self._area, self._crowd, self._cat = kept.xywh, kept.area, kept.crowd, kept.box_cat
        self._names = names
        self.segments = kept.segments  # --masks: a box's segmentation is row `mask` of it
        self._files, self._width, self._height = kept.files, kept.width, kept.height
        self._code, self._source_ids = kept.image_code, kept.source_ids

    def __getitem__(self, name: str) -> ImageBoxes:
        row = self._files[name]
        code = self._code[row]
        xywh, area, crowd, cat, names = self._xywh, self._area, self._crowd, self._cat, self._names
        masks = self.segments is not None
        boxes = []
        for j in self._order[self._starts[code] : self._starts[code + 1]]:
            x, y, w, h = xywh[4 * j : 4 * j + 4]
            boxes.append(RawBox(names[cat[j]] or "", x, y, x + w, y + h, crowd[j], area[j], 0, 0, j if masks else -1))
        return ImageBoxes(self._width[row], self._height[row], self._source_ids[row], tuple(boxes))

    def __contains__(self, name: object) -> bool:
        return name in self._files

    def __iter__(self) -> Iterator[str]:
        return iter(self._files)

    def __len__(self) -> int:
        return len(self._files)


def _located(path: str, e: ijson.JSONError, f: _Hashed) -> str:
    """A stream error by its position, not by yajl's quote of the file: exact from Python's parser
    when the file is small enough to parse whole, else the block the stream was reading."""
    if f.offset < WHOLE_BELOW:
        try:
            with open(path, "rb") as again:
                json.loads(again.read().removeprefix(b"\xef\xbb\xbf"), parse_constant=_no_constant)
        except (ValueError, RecursionError) as e2:
            return str(e2) if isinstance(e2, _OwnError) else parse_error(e2)
        except OSError:
            pass
    return stream_error(e, f.start, f.offset)


class CocoRead(NamedTuple):
    """A COCO file read: its digest, classes in category-id order, images by name, what it could not read."""

    digest: str  # xxh3_128 over the file's name, a NUL and its bytes (annotations._digest's rule)
    classes: list[str]
    images: CocoImages
    problems: list[dict[str, str]]


def read_coco(path: str, max_bytes: int, masks: bool = False) -> CocoRead:
    """Stream the COCO instances file at `path`, with each box's segmentation for `masks`; UsageError
    when it is not JSON or not COCO instances."""
    where = option("annotations", path)
    try:
        if os.path.getsize(path) > max_bytes:
            raise UsageError(f"{where}: larger than {max_bytes:,} bytes: not a file this tool can hold")
        kept = _Kept(masks)
        with open(path, "rb") as raw:
            f = _Hashed(raw, os.path.basename(path))
            whole = kept.segments is None and os.fstat(raw.fileno()).st_size < WHOLE_BELOW
            (_whole if whole else _stream)(f, kept)  # --masks: segmentations are kept from the stream's events
    except OSError as e:
        raise UsageError(f"{where}: cannot read {path}: {e.strerror or e}") from None
    except ijson.JSONError as e:
        raise UsageError(f"{where}: not JSON, Pascal VOC XML or a YOLO folder: {_located(path, e, f)}") from None
    except (ValueError, RecursionError) as e:
        why = str(e) if isinstance(e, _OwnError) else parse_error(e)
        raise UsageError(f"{where}: not JSON, Pascal VOC XML or a YOLO folder: {why}") from None
    except NotCoco:
        kept.keys.clear()
    if not kept.images_list or "annotations" not in kept.keys:
        raise UsageError(f"{where}: a JSON file but not COCO instances (images, annotations)")
    names = [kept.cats.get(k) for k in kept.cat_codes]  # category code -> class name (None: unknown)
    keep = [names[c] is not None for c in kept.box_cat]
    bad = sorted([*kept.bad, *(i for i, k in zip(kept.box_index, keep) if not k)])
    base = os.path.basename(path)
    problems = [{"path": f"{base}:annotations[{i}]", "reason": "no bbox or category"} for i in bad]
    if kept.no_mask:  # --masks: an annotation without a usable segmentation is left out, as one without a box
        why = "no segmentation to make a mask of (polygons of 3 points or more, or RLE counts and size)"
        problems += [{"path": f"{base}:annotations[{i}]", "reason": why} for i in kept.no_mask]
        problems.sort(key=lambda p: int(p["path"].rsplit("[", 1)[1][:-1]))
    classes = [kept.cats[k] for k in sorted(kept.cats, key=lambda k: (str(type(k)), k))]
    return CocoRead(f.hash.hexdigest(), classes, CocoImages(kept, names, keep), problems)
