"""`inspect --contact-sheet`: a picture with a row of thumbnails per class, for eyeballing a dataset.

Written in the format its file name's extension names (PNG, JPEG, WebP, BMP, TIFF); any other
extension is a usage error before anything is read, as is a FILE it must not replace
(`outputs.check_file`). The picture is encoded whole, marked as ours in its metadata, and written
by `outputs.write_file`. Class names are drawn with a font that has their characters
(`fonts.label`), in a column as wide as the longest name (within bounds). A
detection record's boxes are outlined on its thumbnail in its classes' colours (`boxes`); a
record without them is drawn as before, byte for byte.
"""

from __future__ import annotations

import io
import os
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from img2tfrecord.errors import UsageError, option, said
from img2tfrecord.format.images import MAX_PIXELS, image_problem
from img2tfrecord.format.layout import Manifest
from img2tfrecord.format.schema import FORMAT_RAW
from img2tfrecord.inspection import fonts, outputs
from img2tfrecord.inspection.boxes import MAX_DRAWN, draw_boxes
from img2tfrecord.inspection.extract import _raw_to_png
from img2tfrecord.inspection.records import RecordInfo

THUMB = 96  # thumbnail cell, pixels square


GAP = 6  # between cells and around the sheet


LABEL_WIDTH = 220  # the text column on the left of each row: the default, and what names are cut to fit past
MIN_LABEL_WIDTH, MAX_LABEL_WIDTH = 120, 480  # the column is sized to the names within these

# extension -> Pillow format name, and the save options of each
FORMATS = {
    ".png": "PNG",
    ".jpg": "JPEG",
    ".jpeg": "JPEG",
    ".webp": "WEBP",
    ".bmp": "BMP",
    ".tif": "TIFF",
    ".tiff": "TIFF",
}
_SAVE_OPTIONS: dict[str, dict[str, Any]] = {"JPEG": {"quality": 90}, "WEBP": {"quality": 90}}


def _marked(fmt: str) -> dict[str, Any]:
    """Save options that put outputs.SHEET_MARKER in the picture's metadata, so the next
    `--contact-sheet` to this file knows it may replace it (a BMP has no place for it)."""
    from PIL import PngImagePlugin

    marker = outputs.SHEET_MARKER
    if fmt == "PNG":
        info = PngImagePlugin.PngInfo()
        info.add_text("Software", marker)
        return {"pnginfo": info}
    if fmt == "JPEG":
        return {"comment": marker}
    if fmt == "WEBP":
        rdf = "http://www.w3.org/1999/02/22-rdf-syntax-ns#"
        xmp = (
            f'<x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:RDF xmlns:rdf="{rdf}"><rdf:Description'
            f' xmlns:xmp="http://ns.adobe.com/xap/1.0/" xmp:CreatorTool="{marker}"/></rdf:RDF></x:xmpmeta>'
        )
        return {"xmp": xmp.encode()}
    if fmt == "TIFF":
        return {"tiffinfo": {305: marker}}  # the Software tag
    return {}


def contact_sheet_size(rows: int, per_row: int, label_width: int = LABEL_WIDTH) -> tuple[int, int]:
    """(width, height) of a contact sheet with `rows` classes and `per_row` thumbnails each."""
    return label_width + per_row * (THUMB + GAP) + GAP, max(1, rows) * (THUMB + GAP) + GAP


def _thumbnail(info: RecordInfo, max_pixels: int = MAX_PIXELS, side: int = THUMB) -> Any:
    """An RGB thumbnail of the pixels as stored (no EXIF rotation: what TensorFlow decodes).

    Small images are scaled up to the cell, so a 32x32 dataset is as easy to judge as a photo one.
    None when the image must not be decoded (`image_problem`).
    """
    from PIL import Image, ImageOps

    img: Image.Image
    if info.format == FORMAT_RAW:
        png = _raw_to_png(info)
        if png is None:
            return None
        img = Image.open(io.BytesIO(png))
    else:
        if (
            image_problem(info.image or b"", info.format, info.height, info.width, info.channels, max_pixels)
            is not None
        ):
            return None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # DecompressionBombWarning: the size was checked above
            img = Image.open(io.BytesIO(info.image or b""))
        img.draft("RGB", (side, side))  # JPEG: decode at reduced scale
    img.load()
    if img.mode.startswith("I"):  # a 16-bit PNG: Pillow's convert would clip to 255 (white); scale as TensorFlow does
        import numpy as np

        img = Image.fromarray((np.asarray(img).astype(np.uint32) >> 8).clip(0, 255).astype(np.uint8), "L")
    if img.mode not in ("L", "LA", "RGB", "RGBA"):
        img = img.convert("RGBA" if img.mode in ("PA", "P") and "transparency" in img.info else "RGB")
    img = ImageOps.contain(img, (side, side))
    if img.mode in ("RGBA", "LA", "PA") or (img.mode == "P" and "transparency" in img.info):
        img = img.convert("RGBA")
        bg = Image.new("RGBA", img.size, (255, 255, 255, 255))
        return Image.alpha_composite(bg, img).convert("RGB")
    return img.convert("RGB")


# A sheet is for eyeballing: past these, labels are left out, so a file inventing a million labels
# cannot make the sheet (4 bytes a pixel in Pillow) or the thumbnails waiting for it take gigabytes.
MAX_SHEET_ROWS = 200


MAX_SHEET_CELLS = 1000  # rows x thumbnails per row: at most ~15 Mpixel, ~60 MB


def _label_text(text: str, limit: int = 60) -> str:
    """One short line of drawable text: control characters (newlines too) become spaces."""
    text = "".join(" " if ch < " " or "\x7f" <= ch <= "\x9f" else ch for ch in text[: limit + 1])
    return text if len(text) <= limit else text[: limit - 1] + "…"


class ContactSheet:
    """A grid of thumbnails, one row per class (label and name), up to `per_class` each.

    Rows and cells are capped (MAX_SHEET_ROWS, MAX_SHEET_CELLS); images of labels past the cap
    are counted in `omitted`.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        per_class: int,
        force: bool = False,
        read: Iterable[str | os.PathLike[str]] = (),
    ) -> None:
        """`read`: the dataset folders being inspected, where the sheet must not go (`outputs`);
        `force`: replace a picture img2tfrecord did not write."""
        self.path = Path(path)
        if per_class < 1:
            raise UsageError(
                f"{option('contact_sheet')} needs {said('-n', 'records')} of at least 1 (thumbnails per class)"
            )
        fmt = FORMATS.get(self.path.suffix.lower())
        if fmt is None:
            raise UsageError(
                f"{option('contact_sheet', str(self.path))}: unknown picture extension {self.path.suffix or '(none)'!r}; name a .png, .jpg, .webp, .bmp or .tif file"
            )
        self.target = outputs.check_file(self.path, outputs.SHEET, force, read)
        self.format: str = fmt
        self.per_class = min(per_class, MAX_SHEET_CELLS)
        self.max_rows = max(1, min(MAX_SHEET_ROWS, MAX_SHEET_CELLS // self.per_class))
        self.rows: dict[int | None, list[Any]] = {}  # label -> thumbnails (None: not decodable)
        self.drawn: dict[tuple[int | None, int], Any] = {}  # (label, cell) -> the record's boxes, if any
        self.names: dict[int | None, str | None] = {}
        self.broken = 0
        self.omitted = 0  # images whose label did not get a row

    def _row(self, label: int | None) -> list[Any] | None:
        row = self.rows.get(label)
        if row is None and len(self.rows) < self.max_rows:
            row = self.rows[label] = []
        return row

    def add_classes(self, man: Manifest) -> None:
        for i, name in enumerate(man.classes):
            if self._row(i + man.label_offset) is not None:
                self.names.setdefault(i + man.label_offset, name)

    def add(self, info: RecordInfo, class_name: str | None, max_pixels: int = MAX_PIXELS) -> None:
        if info.image is None:
            return
        cells = self._row(info.label)
        if cells is None:
            self.omitted += 1
            return
        if self.names.get(info.label) is None:
            self.names[info.label] = class_name
        if len(cells) >= self.per_class:
            return
        try:
            thumb = _thumbnail(info, max_pixels)
        except Exception:
            thumb = None
        if thumb is None:
            self.broken += 1
        elif info.objects:
            self.drawn[info.label, len(cells)] = info.objects[:MAX_DRAWN]
        cells.append(thumb)

    def row_labels(self) -> list[tuple[int | None, str]]:
        """(label, text) of each row, top to bottom: what the sheet writes beside its thumbnails."""
        keys = sorted(k for k in self.rows if k is not None) + ([None] if None in self.rows else [])
        out = []
        for key in keys:
            name = self.names.get(key)
            out.append((key, _label_text(("no label" if key is None else f"{key}") + (f"  {name}" if name else ""))))
        return out

    def render(self) -> dict[str, Any]:
        from PIL import Image, ImageDraw

        rows = self.row_labels()
        labels = [fonts.label(text) for _, text in rows]
        probe = ImageDraw.Draw(Image.new("RGB", (1, 1)))
        longest = max((probe.textlength(x.text, font=x.font) for x in labels), default=0)
        label_width = int(min(MAX_LABEL_WIDTH, max(MIN_LABEL_WIDTH, longest + 3 * GAP)))
        width, height = contact_sheet_size(len(rows), self.per_class, label_width)
        sheet = Image.new("RGB", (width, height), (255, 255, 255))
        draw = ImageDraw.Draw(sheet)
        plain = fonts.default_font()
        for r, ((key, _), lab) in enumerate(zip(rows, labels)):
            y = GAP + r * (THUMB + GAP)
            text = lab.text
            while draw.textlength(text, font=lab.font) > label_width - 2 * GAP and len(text) > 2:
                text = text[:-2] + "…"
            draw.text((GAP, y + THUMB // 2), text, fill=(0, 0, 0), font=lab.font, anchor="lm")
            if not self.rows[key]:
                draw.text((label_width, y + THUMB // 2), "(no images)", fill=(150, 150, 150), font=plain, anchor="lm")
            for i, thumb in enumerate(self.rows[key]):
                x = label_width + i * (THUMB + GAP)
                draw.rectangle([x, y, x + THUMB - 1, y + THUMB - 1], fill=(235, 235, 235))
                if thumb is None:
                    draw.line([x, y, x + THUMB - 1, y + THUMB - 1], fill=(200, 0, 0), width=3)
                    draw.line([x, y + THUMB - 1, x + THUMB - 1, y], fill=(200, 0, 0), width=3)
                    continue
                left, top = x + (THUMB - thumb.width) // 2, y + (THUMB - thumb.height) // 2
                sheet.paste(thumb, (left, top))
                if (key, i) in self.drawn:
                    draw_boxes(draw, self.drawn[key, i], left, top, thumb.width, thumb.height)
        buf = io.BytesIO()
        sheet.save(buf, self.format, **_SAVE_OPTIONS.get(self.format, {}), **_marked(self.format))
        outputs.write_file(self.target, str(self.path), buf.getvalue())
        return {
            "file": str(self.path),
            "format": self.format,
            "width": width,
            "height": height,
            "label_width": label_width,
            "rows": len(rows),
            "row_names": [text for _, text in rows],
            "per_row": self.per_class,
            "unreadable": self.broken,
            "omitted": self.omitted,
            "names_escaped": sum(x.escaped for x in labels),  # no installed font has their characters
        }
