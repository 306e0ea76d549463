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
Both read the bytes by one rule (conversion.plan.coco_text: a file the whole parse is unsure of
is streamed) and check each element with the same functions (`_Kept.add`, `_entry`), so a file is
read alike, or refused in the same words, whatever its size.
"""

from __future__ import annotations

import itertools
import json
import os
from array import array
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

import ijson

from img2tfrecord.conversion.plan.coco_masks import PREFIXES, Segments
from img2tfrecord.conversion.plan.coco_text import Source, at, located, whole_is_safe
from img2tfrecord.conversion.plan.raw_boxes import ImageBoxes, RawBox
from img2tfrecord.errors import UsageError, option

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


class NotCoco(Exception):
    """JSON, but not an object: not COCO instances."""


class _Unsure(Exception):
    """The whole parse cannot tell what the stream would read of this file: stream it."""


MAX_SIDE = 2**31 - 1  # pixels: an image's width or height beyond this is no image's


class _Entry(NamedTuple):
    """An element of `images`, read: its place, file name and id (None: none usable), size, and
    why it cannot be used ("" if it can)."""

    pos: int  # its index in `images`
    name: str | None
    key: Any
    width: int
    height: int
    why: str


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
        self.entries: list[_Entry] = []  # the elements of `images`, in the file's order
        self.cats: dict[Any, str] = {}
        self.keys: set[str] = set()  # the top-level keys
        self.images_list = False

    def add(self, item: str, cur: dict[str, Any] | None) -> None:
        """One element of `images`, `annotations` or `categories` (None: not an object)."""
        if item == ANN:
            self._annotation(cur)
        elif item == IMG:
            self.entries.append(_entry(len(self.entries), cur))
        elif cur is None:
            return
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
        self.keep(
            i,
            cur.get("image_id"),  # _CONTAINER (an object or a list): no image's id
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


def _entry(index: int, cur: dict[str, Any] | None) -> _Entry:
    """An element of `images` checked: a file name, and a width and height in whole pixels."""
    if cur is None:
        return _Entry(index, None, None, 0, 0, "not an object")
    name, key = cur.get("file_name"), cur.get("id")
    key = None if key is _CONTAINER else key
    if not isinstance(name, str) or not name:
        return _Entry(index, None, key, 0, 0, "no file_name" if name in (None, "") else f"file_name is {_kind(name)}")
    name = name.removeprefix("./")
    sides = [_side(cur, k) for k in ("width", "height")]
    why = next((w for w in sides if isinstance(w, str)), "")
    width, height = (w if isinstance(w, int) else 0 for w in sides)
    return _Entry(index, name, key, width, height, why)


def _side(cur: dict[str, Any], k: str) -> int | str:
    """An image's width or height (`k`) in pixels, or why it is none (its number, or the kind of
    value it is: never the file's text)."""
    v = cur.get(k)
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        if 1 <= v <= MAX_SIDE and v == int(v):
            return int(v)
        return f"{k} {v!r} is not a whole number of pixels from 1 to {MAX_SIDE:,}"
    return f"no {k}" if k not in cur else f"{k} is {_kind(v)}, not a whole number of pixels"


def _kind(v: Any) -> str:
    """A JSON value's kind, as a message names it."""
    if v is _CONTAINER:
        return "a list or an object"
    return {bool: "true or false", str: "text", type(None): "null"}.get(type(v), "a number")


MAX_DEPTH = 16  # containers deep: past this a value's prefix is not built (what a box needs is 4 deep)


class _Open(NamedTuple):
    prefix: str | None  # the container's own prefix (None: too deep to matter)
    item: str | None  # an array's elements' prefix; None for an object


def _events(f: Source, wanted: frozenset[str]) -> Iterator[tuple[str, str, Any]]:
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
        else:  # end_map, end_array
            p = open_.pop().prefix
            if p in wanted:
                yield p, event, value  # type: ignore[misc]
            nxt = open_[-1].item if open_ else None


def _stream(f: Source, kept: _Kept) -> None:
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


def _whole(f: Source, kept: _Kept) -> None:
    """`_stream`'s work for a small file: parsed whole, each element of the three lists reduced to
    what the stream would have kept of it (`_element`), in the file's order."""
    text = f.read()
    if f.problem is not None or not whole_is_safe(text):
        raise _Unsure
    try:
        data = json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError):  # the stream says why, in its words and at its position
        raise _Unsure from None
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
    raise ValueError(f"{name} is not JSON")  # as the stream's parser says: NaN and Infinity are no JSON numbers


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


class _Images(NamedTuple):
    """The usable elements of `images`, by file name, and why the others are not used."""

    files: dict[str, int]  # file_name -> row
    width: array
    height: array
    code: array  # row -> image code (`_Kept.image_codes`)
    source_ids: list[str]
    refused: dict[str, str]  # file_name -> why that image is skipped (its entry not used)
    why: list[str]  # image code -> why an annotation of it is not used ("": it is used)
    problems: list[dict[str, str]]  # the entries not used, named


def _images(kept: _Kept, base: str) -> _Images:
    """Resolve `images`: an entry naming a file another entry names too, or with the id of another,
    is not used (which of them an image or an annotation is of is a guess; COCO's ids are unique),
    nor one without a file name or a usable size; each is named, and so is every annotation of an
    image that is not used or not listed. An entry repeated exactly (id, file name and size) counts
    once: nothing is ambiguous about it."""
    entries: list[_Entry] = []
    seen: set[tuple[Any, ...]] = set()
    for e in kept.entries:
        if e.why or (e.name, e.key, e.width, e.height) not in seen:
            entries.append(e)
            seen.add((e.name, e.key, e.width, e.height))
    by_name: dict[str, list[_Entry]] = {}
    by_key: dict[Any, list[_Entry]] = {}
    for e in entries:
        if e.name is not None:
            by_name.setdefault(e.name, []).append(e)
        if e.key is not None:
            by_key.setdefault(e.key, []).append(e)
    why = {e.pos: e.why for e in entries if e.why}
    refused: dict[str, str] = {}
    codes = kept.image_codes
    code_why: dict[int, str] = {codes.setdefault(None, len(codes)): "no image_id"}
    code_why[codes.setdefault(_CONTAINER, len(codes))] = "its image_id is a list or an object"
    for key, es in by_key.items():
        if len(es) > 1:
            listed = ", ".join(f"images[{e.pos}]" for e in es)
            for e in es:
                why.setdefault(e.pos, f"its id is the id of {len(es)} images ({listed}): COCO's image ids are unique")
            code_why[codes.setdefault(key, len(codes))] = (
                f"its image_id is the id of {len(es)} images in {base} ({listed})"
            )
    for name, es in by_name.items():
        if len(es) > 1:
            listed = ", ".join(f"images[{e.pos}]" for e in es)
            reason = f"{len(es)} entries of {base} name it ({listed}): which one is of this image is ambiguous"
            for e in es:
                also = f"; {why[e.pos]}" if e.pos in why else ""  # its own fault is said too
                why[e.pos] = f"its file_name is named by {len(es)} entries ({listed}){also}"
            refused[name] = reason
        elif es[0].pos in why:
            refused[name] = f"its entry in {base} (images[{es[0].pos}]) is not used: {why[es[0].pos]}"
    got = _Images({}, array("q"), array("q"), array("q"), [], refused, [], [])
    for e in entries:
        if e.pos in why:
            got.problems.append({"path": f"{base}:images[{e.pos}]", "reason": why[e.pos]})
            if e.key is not None:
                reason = f"its image's entry ({base}:images[{e.pos}]) is not used"
                code_why.setdefault(codes.setdefault(e.key, len(codes)), reason)
            continue
        assert e.name is not None, "an entry without a file name is not used"
        got.files[e.name] = len(got.source_ids)
        got.width.append(e.width)
        got.height.append(e.height)
        got.code.append(codes.setdefault(e.key, len(codes)) if e.key is not None else -1)
        got.source_ids.append(str(e.key if e.key is not None else e.name))
    used = set(got.code)
    got.why.extend(
        code_why.get(c, "" if c in used else f"its image_id names no image in {base}") for c in range(len(codes))
    )
    return got


class CocoImages(Mapping[str, ImageBoxes]):
    """A COCO file's images by file name, each one's `ImageBoxes` built when asked for from the
    boxes kept in arrays, grouped by image (ImageBoxes and RawBoxes for every image at once would
    cost ~250 bytes a box). Plain Python: an image's few boxes are read from the arrays faster
    than numpy slices them and converts them back (4,000 images: 18 ms against 21)."""

    def __init__(self, kept: _Kept, images: _Images, names: list[str | None], keep: list[bool]) -> None:
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
        self._files, self._width, self._height = images.files, images.width, images.height
        self._code, self._source_ids, self._refused = images.code, images.source_ids, images.refused

    def __getitem__(self, name: str) -> ImageBoxes:
        if name in self._refused:  # its entry is not used: the image is skipped, saying why
            return ImageBoxes(width=0, height=0, source_id=name, boxes=(), refused=self._refused[name])
        row = self._files[name]
        code = self._code[row]
        if code < 0:  # no id: no annotation is of it
            return ImageBoxes(
                width=self._width[row], height=self._height[row], source_id=self._source_ids[row], boxes=()
            )
        xywh, area, crowd, cat, names = self._xywh, self._area, self._crowd, self._cat, self._names
        masks = self.segments is not None
        boxes = []
        for j in self._order[self._starts[code] : self._starts[code + 1]]:
            x, y, w, h = xywh[4 * j : 4 * j + 4]
            boxes.append(
                RawBox(
                    name=names[cat[j]] or "",
                    xmin=x,
                    ymin=y,
                    xmax=x + w,
                    ymax=y + h,
                    is_crowd=crowd[j],
                    area=area[j],
                    mask=j if masks else -1,
                )
            )
        return ImageBoxes(
            width=self._width[row], height=self._height[row], source_id=self._source_ids[row], boxes=tuple(boxes)
        )

    def __contains__(self, name: object) -> bool:
        return name in self._files or name in self._refused

    def __iter__(self) -> Iterator[str]:
        return itertools.chain(self._files, self._refused)

    def __len__(self) -> int:
        return len(self._files) + len(self._refused)


class CocoRead(NamedTuple):
    """A COCO file read: its digest, classes in category-id order, images by name, what it could not read."""

    digest: str  # xxh3_128 over the file's name, a NUL and its bytes (annotations._digest's rule)
    classes: list[str]
    images: CocoImages
    problems: list[dict[str, str]]
    class_ids: tuple[Any, ...] = ()  # each class's category id, in `classes`' order


def read_coco(path: str, max_bytes: int, masks: bool = False) -> CocoRead:
    """Read the COCO instances file at `path` (parsed whole when small, else streamed: the same
    reading), with each box's segmentation for `masks`; UsageError when it is not JSON or not
    COCO instances."""
    where = option("annotations", path)
    base = os.path.basename(path)
    kept = _Kept(masks)
    try:
        if os.path.getsize(path) > max_bytes:
            raise UsageError(f"{where}: larger than {max_bytes:,} bytes: not a file this tool can hold")
        with open(path, "rb") as raw:
            f = Source(raw, base)
            whole = kept.segments is None and os.fstat(raw.fileno()).st_size < WHOLE_BELOW  # --masks: streamed
            if whole:
                try:
                    _whole(f, kept)
                except _Unsure:  # streamed, whose reading (or error) is the rule
                    whole, kept = False, _Kept(masks)
                    raw.seek(0)
                    f = Source(raw, base)
            if not whole:
                _stream(f, kept)
    except OSError as e:
        raise UsageError(f"{where}: cannot read {path}: {e.strerror or e}") from None
    except (ijson.JSONError, ValueError, RecursionError) as e:
        raise UsageError(
            f"{where}: not JSON, Pascal VOC XML or a YOLO folder: {located(path, e, f.offset, f.problem)}"
        ) from None
    except NotCoco:
        kept.keys.clear()
    if f.problem is not None and kept.keys:  # a byte neither parser reads alike, after the stream read on
        raise UsageError(f"{where}: not JSON, Pascal VOC XML or a YOLO folder: {at(path, f.problem)}")
    if not kept.images_list or "annotations" not in kept.keys:
        raise UsageError(f"{where}: a JSON file but not COCO instances (images, annotations)")
    names = [kept.cats.get(k) for k in kept.cat_codes]  # category code -> class name (None: unknown)
    images = _images(kept, base)
    no_image = images.why
    keep = [names[c] is not None and not no_image[g] for c, g in zip(kept.box_cat, kept.box_image)]
    notes = [(i, "no bbox or category") for i in kept.bad]
    for i, c, g, k in zip(kept.box_index, kept.box_cat, kept.box_image, keep):
        if not k:
            notes.append((i, "no bbox or category" if names[c] is None else no_image[g]))
    if kept.no_mask:  # --masks: an annotation without a usable segmentation is left out, as one without a box
        why = "no segmentation to make a mask of (polygons of 3 points or more, or RLE counts and size)"
        notes += [(i, why) for i in kept.no_mask]
    notes.sort()
    problems = images.problems + [{"path": f"{base}:annotations[{i}]", "reason": why} for i, why in notes]
    ids = sorted(kept.cats, key=lambda k: (str(type(k)), k))
    classes = [kept.cats[k] for k in ids]
    return CocoRead(f.hash.hexdigest(), classes, CocoImages(kept, images, names, keep), problems, tuple(ids))
