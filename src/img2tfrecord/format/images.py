"""Facts about image files read from their bytes alone: what format the content is, what a PNG's
header declares, and what TensorFlow's decoder makes of it.

"What TensorFlow decodes" is the rule that matters (the stored bytes are read by
`tf.io.decode_image`, not by Pillow), and it is not what Pillow reports: a PNG colour key (tRNS)
on grey or RGB data becomes an alpha channel in Pillow but is ignored by TensorFlow, while on a
palette image TensorFlow expands it to RGBA. These rules are checked against TensorFlow's real
decoder over every mode in the test suite (tests/encode/test_conformance.py).
"""

from __future__ import annotations

import io
import re
import struct
import warnings
import zlib
from typing import NamedTuple

from img2tfrecord.format.schema import DEFAULT_MAX_PIXELS, FORMAT_RAW

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

# (magic at offset 0, name used in messages)
_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\xff\xd8\xff", "JPEG"),
    (PNG_MAGIC, "PNG"),
    (b"GIF87a", "GIF"),
    (b"GIF89a", "GIF"),
    (b"II*\x00", "TIFF (II*)"),
    (b"MM\x00*", "TIFF (MM*)"),
    (b"II+\x00", "BigTIFF (II+)"),
    (b"MM\x00+", "BigTIFF (MM+)"),
    (b"BM", "BMP"),
    (b"\x00\x00\x01\x00", "ICO"),
    (b"%PDF", "PDF"),
    (b"PK\x03\x04", "ZIP archive"),
    (b"\x1f\x8b", "gzip data"),
    (b"\x00\x00\x00\x0cjP  ", "JPEG 2000"),
    (b"\xff\x4f\xff\x51", "JPEG 2000 codestream"),
    (b"8BPS", "Photoshop PSD"),
)


def sniff(data: bytes) -> str | None:
    """The format of `data` from its magic bytes ("JPEG", "PNG", "TIFF (II*)", ...), or None."""
    for magic, name in _MAGIC:
        if data.startswith(magic):
            return name
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "WebP"
    if data[4:8] == b"ftyp" and data[8:12] in (b"heic", b"heix", b"mif1", b"avif", b"avis"):
        return "HEIF/AVIF"
    return None


# Containers that are not images, by their magic (offset 0): named, never quoted.
_NOT_IMAGE_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"%PDF", "a PDF document"),
    (b"PK\x03\x04", "a ZIP archive"),
    (b"PK\x05\x06", "a ZIP archive"),
    (b"\x1f\x8b", "gzip data"),
    (b"7z\xbc\xaf\x27\x1c", "a 7-Zip archive"),
    (b"Rar!\x1a\x07", "a RAR archive"),
    (b"BZh", "bzip2 data"),
    (b"\xfd7zXZ\x00", "xz data"),
    (b"\x28\xb5\x2f\xfd", "zstd data"),
    (b"\x7fELF", "an ELF executable"),
    (b"MZ", "a Windows executable"),
    (b"SQLite format 3\x00", "an SQLite database"),
    (b"\x93NUMPY", "a NumPy array"),
    (b"\x89HDF\r\n\x1a\n", "an HDF5 file"),
    (b"OggS", "Ogg media"),
    (b"ID3", "MP3 audio"),
    (b"\x1aE\xdf\xa3", "Matroska/WebM video"),
)


NOT_IMAGES = frozenset({"PDF", "ZIP archive", "gzip data"})  # kinds `sniff` names that no decoder reads


def describe_unknown(data: bytes) -> str:
    """What a file is that no decoder recognised, from its first bytes, without quoting them.

    A skip reason goes to the terminal and into dataset.json, which travels with the dataset: a
    `--file-list` row or a symlink pointing at `/etc/shadow` or a key file must not copy a byte
    of it there. So the reason names a kind (text, HTML, XML, JSON, a ZIP archive, a PDF...),
    never the content.
    """
    kind = _kind(data)
    if kind == "SVG":
        kind = "SVG (a vector image: not supported; rasterise it first)"
    return f"not an image: content is {kind}" if kind else "not an image: unknown binary data"


def describe_content(data: bytes) -> str:
    """What any file looks like from its first bytes ("a JPEG image", "text", "gzip data", "unknown
    binary data"), for a message about a file that is not what was asked for (a TFRecord, say);
    named by the same rules as `describe_unknown`, so never quoted."""
    name = sniff(data)
    if name and name not in NOT_IMAGES:
        return f"{'an' if name[0] in 'AEIOU' else 'a'} {name} image"
    kind = _kind(data)
    return "an SVG image" if kind == "SVG" else kind or "unknown binary data"


def _kind(data: bytes) -> str | None:
    """The kind of a non-image file ("text", "a ZIP archive", "SVG"...), None for unknown binary data."""
    head = data[:512]
    for magic, name in _NOT_IMAGE_MAGIC:
        if head.startswith(magic):
            return name
    if head[257:262] == b"ustar":
        return "a tar archive"
    if head[4:8] == b"ftyp":
        return "MP4/QuickTime media"
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as e:  # a multi-byte character cut at the 512th byte is still text
        text = head[: e.start].decode("utf-8") if e.start >= len(head) - 3 else ""
    text = text.lstrip("\ufeff")
    if not text or not all(ch.isprintable() or ch in "\r\n\t\f" for ch in text):
        return None
    start = text.lstrip()[:256].lower()
    if re.match(r"<(!doctype html|html|head|body)\b", start):
        return "HTML"
    if "<svg" in start:
        return "SVG"
    if start.startswith("<?xml") or start.startswith("<"):
        return "XML"
    if start[:1] in ("{", "["):
        return "JSON or other text"
    return "text"


class PngHeader(NamedTuple):
    width: int
    height: int
    bit_depth: int
    color_type: int
    interlaced: bool
    has_trns: bool  # a tRNS chunk before the first IDAT
    has_exif: bool  # an eXIf chunk before the first IDAT (orientation may be there)


def png_header(data: bytes) -> PngHeader | None:
    """IHDR and the chunks before the image data; None if this is not a well-formed PNG start."""
    if not data.startswith(PNG_MAGIC) or data[12:16] != b"IHDR" or len(data) < 33:
        return None
    width, height, depth, ctype, _comp, _filt, interlace = struct.unpack(">IIBBBBB", data[16:29])
    trns = exif = False
    pos, end = 33, len(data)
    while pos + 8 <= end:
        length = int.from_bytes(data[pos : pos + 4], "big")
        kind = data[pos + 4 : pos + 8]
        if kind in (b"IDAT", b"IEND"):
            break
        trns |= kind == b"tRNS"
        exif |= kind == b"eXIf"
        pos += 12 + length
    return PngHeader(width, height, depth, ctype, bool(interlace), trns, exif)


# PNG colour type -> channels of tf.io.decode_png(channels=0); palette (3) is expanded to RGB,
# or RGBA when it has a tRNS chunk; a tRNS colour key on grey (0) or RGB (2) is ignored.
_PNG_CHANNELS = {0: 1, 2: 3, 4: 2, 6: 4}


def tf_png_channels(h: PngHeader) -> int | None:
    """Channels TensorFlow decodes this PNG to; None for an invalid colour type."""
    if h.color_type == 3:
        return 4 if h.has_trns else 3
    return _PNG_CHANNELS.get(h.color_type)


def png_chunks_sound(data: bytes) -> bool:
    """Every critical chunk (IHDR, PLTE, IDAT, IEND) has a matching CRC, and IEND is there.

    libpng, which TensorFlow decodes with, fails on a bad CRC in a critical chunk and on a
    missing end; Pillow checks neither IDAT's CRC nor the end (a bit flipped in an IDAT CRC, or a
    file cut after its image data, decodes in Pillow and raises in TensorFlow). A bad CRC in an
    ancillary chunk is only a warning in libpng, as in Pillow.
    """
    view = memoryview(data)
    pos, end = 8, len(data)
    while pos + 12 <= end:
        length = int.from_bytes(view[pos : pos + 4], "big")
        stop = pos + 12 + length
        if stop > end:
            return False
        kind = bytes(view[pos + 4 : pos + 8])
        critical = not kind[0] & 0x20  # lower-case first letter: ancillary
        if critical and zlib.crc32(view[pos + 4 : pos + 8 + length]) != int.from_bytes(view[stop - 4 : stop], "big"):
            return False
        if kind == b"IEND":
            return True
        pos = stop
    return False


def tf_error_message(e: BaseException) -> str:
    """TensorFlow's op error without the `{{function_node ...}}` and `[Op:...]` wrapping."""
    msg = getattr(e, "message", None) or str(e)
    msg = re.sub(r"\{\{[^}]*\}\}\s*", "", msg)
    msg = re.sub(r"\s*\[Op:\w+\].*$", "", msg, flags=re.S)
    return msg.strip().splitlines()[0] if msg.strip() else type(e).__name__


def jpeg_frame_problem(data: bytes) -> str | None:
    """Why a JPEG's frame header rules it out (12-bit, lossless, hierarchical), from its markers."""
    pos, end = 2, len(data)
    while pos + 4 <= end:
        if data[pos] != 0xFF:
            return None
        marker = data[pos + 1]
        if marker == 0xFF:
            pos += 1
            continue
        if marker in (0xD8, 0xD9, 0xDA):
            return None
        length = int.from_bytes(data[pos + 2 : pos + 4], "big")
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC) and pos + 5 <= end:
            precision = data[pos + 4]
            if marker in (0xC3, 0xC7, 0xCB, 0xCF):
                return f"lossless JPEG (SOF{marker - 0xC0}, {precision}-bit): not supported (TensorFlow and Pillow decode 8-bit DCT JPEGs)"
            if marker in (0xC5, 0xC6, 0xC7, 0xCD, 0xCE, 0xCF):
                return f"hierarchical JPEG (SOF{marker - 0xC0}): not supported"
            if precision != 8:
                return f"{precision}-bit JPEG: not supported (TensorFlow and Pillow decode 8-bit JPEGs only)"
            return None
        pos += 2 + length
    return None


_SOF_MARKERS = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}  # DHT, JPG and DAC share the range
_STANDALONE_MARKERS = frozenset(range(0xD0, 0xD8)) | {0x01, 0xD8, 0xD9}  # RSTn, TEM, SOI, EOI: no length


def jpeg_frame_size(data: bytes) -> tuple[int, int] | None:
    """(height, width) of a plainly laid-out JPEG's one frame header (SOFn), read up to its scan.

    None for anything less plain: junk between segments, a second frame header, a segment running
    past the data, a standalone marker before the scan. So where this answers, the frame is the
    one libjpeg and Pillow both read (libjpeg refuses a second one; Pillow would take the last),
    and callers fall back to a full header parser otherwise. A few microseconds: no table parsed.
    """
    if not data.startswith(b"\xff\xd8"):
        return None
    size: tuple[int, int] | None = None
    pos, end = 2, len(data)
    while pos + 4 <= end:
        if data[pos] != 0xFF:
            return None
        marker = data[pos + 1]
        if marker == 0xFF:  # a fill byte before the marker
            pos += 1
            continue
        if marker == 0xDA:
            return size
        if marker in _STANDALONE_MARKERS:
            return None
        length = (data[pos + 2] << 8) | data[pos + 3]
        if length < 2 or pos + 2 + length > end:
            return None
        if marker in _SOF_MARKERS:
            if size is not None or length < 8:
                return None
            size = ((data[pos + 5] << 8) | data[pos + 6], (data[pos + 7] << 8) | data[pos + 8])
        pos += 2 + length
    return None


def _next_marker(data: bytes, pos: int) -> int:
    """Where libjpeg's `next_marker` finds the next marker from `pos`: it discards bytes up to an
    0xFF, skips fill bytes, and goes on past a stuffed 0xFF 0x00. -1 if there is none."""
    end = len(data)
    while True:
        ff = data.find(b"\xff", pos)
        if ff < 0:
            return -1
        nxt = ff + 1
        while nxt < end and data[nxt] == 0xFF:
            nxt += 1
        if nxt >= end:
            return -1
        if data[nxt] != 0x00:
            return nxt - 1
        pos = nxt + 1


def jpeg_header_view(data: bytes) -> bytes:
    """The JPEG as libjpeg reads its headers: junk between header segments removed and ICC
    (APP2) segments left out. `data` itself when there is nothing to remove.

    libjpeg *warns* about these ("N extraneous bytes before marker 0xdb", "bad ICC marker"),
    skips them, and decodes every pixel; TensorFlow's decoder does the same. A strict decode
    (which turns any warning into an error, to catch lost entropy-coded data) is run on this view,
    so that only damage to the scan itself (junk before an RST or EOI marker, a premature end, a
    marker inside the scan) makes a JPEG unusable. Everything from the first SOS on is untouched.
    """
    if not data.startswith(b"\xff\xd8"):
        return data
    parts: list[bytes] = []
    keep_from, pos, end = 0, 2, len(data)
    while pos + 4 <= end:
        if data[pos] != 0xFF or data[pos + 1] in (0x00, 0xFF):
            nxt = _next_marker(data, pos)
            if nxt < 0:
                break
            if data[pos] != 0xFF or data[pos + 1] == 0x00:  # junk (fill bytes 0xFF 0xFF... are legal)
                parts.append(data[keep_from:pos])
                keep_from = nxt
            pos = nxt
            continue
        marker = data[pos + 1]
        if marker in (0xD8, 0xD9) or 0xD0 <= marker <= 0xD7:
            break
        length = int.from_bytes(data[pos + 2 : pos + 4], "big")
        if length < 2:
            break
        if marker == 0xE2:  # APP2: ICC profile chunks; no part of decoding pixels
            parts.append(data[keep_from:pos])
            keep_from = pos + 2 + length
        if marker == 0xDA:
            break
        pos += 2 + length
    if not parts:
        return data
    parts.append(data[keep_from:])
    return b"".join(parts)


def bmp_tf_reads(data: bytes, width: int, height: int) -> bool:
    """TensorFlow's BMP decoder reads this uncompressed 24-bit BMP as it is.

    `tf.io.decode_bmp` takes the pixel offset from the file header and requires the file to end
    where the pixel rows do: size == offset + padded row size x |height| ("Input size should
    match (header_size + row_size * abs_height)"). Tried against it: BITMAPINFOHEADER, V4 and V5
    headers, top-down rows and a gap before the pixels decode to Pillow's pixels; any byte after
    the rows (a V5 header's embedded colour profile, trailing padding) fails the decode.
    """
    if len(data) < 30 or not data.startswith(b"BM") or int.from_bytes(data[28:30], "little") != 24:
        return False
    offset = int.from_bytes(data[10:14], "little")
    return len(data) == offset + (width * 3 + 3) // 4 * 4 * abs(height)


_IMAGE_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\xff\xd8\xff", "JPEG"),
    (b"\x89PNG\r\n\x1a\n", "PNG"),
    (b"GIF87a", "GIF"),
    (b"GIF89a", "GIF"),
    (b"BM", "BMP"),
)


_EXTENSIONS = {
    "JPEG": (".jpg", ".jpeg", ".jpe", ".jfif"),
    "PNG": (".png",),
    "BMP": (".bmp",),
    "GIF": (".gif",),
    "WEBP": (".webp",),
}


def sniff_image_format(data: bytes) -> str | None:
    """JPEG/PNG/GIF/BMP/WEBP from the first bytes; None if it is none of them."""
    for magic, name in _IMAGE_MAGIC:
        if data.startswith(magic):
            return name
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "WEBP"
    return None


# Channels of a Pillow mode, as Pillow decodes it (not what TensorFlow makes of the file: see tf_png_channels).
MODE_CHANNELS = {
    "1": 1,
    "L": 1,
    "I": 1,
    "I;16": 1,
    "F": 1,
    "LA": 2,
    "La": 2,
    "RGB": 3,
    "YCbCr": 3,
    "RGBA": 4,
    "CMYK": 4,
}


# Images whose header (or image/height x image/width) claims more pixels are not decoded: a 1 MB
# PNG can decode to gigabytes. convert's default --max-pixels; a dataset.json's own value wins.
MAX_PIXELS = DEFAULT_MAX_PIXELS


def _header_pixels(data: bytes) -> tuple[int, str] | None:
    """(pixels, " (WxH)" or "") from an image's header, read by Pillow without decoding; None if unreadable."""
    from PIL import Image

    try:
        with warnings.catch_warnings(), Image.open(io.BytesIO(data)) as im:
            warnings.simplefilter("ignore")  # DecompressionBombWarning: we judge the size ourselves
            w, h = im.size
            return w * h, f" ({w:,}x{h:,})"
    except Image.DecompressionBombError as e:  # Pillow's own limit, unless convert lifted it
        m = re.search(r"\((\d+) pixels\)", str(e))
        return (int(m[1]) if m else 1 << 62), ""
    except Exception:
        return None


def image_problem(
    image: bytes, fmt: str | None, h: int | None, w: int | None, c: int | None, max_pixels: int = MAX_PIXELS
) -> str | None:
    """Why an image must not be decoded (impossible RAW shape, too many pixels), from sizes and header only.

    Decoders allocate what the header says before reading pixel data, so a small record can
    claim gigabytes (a PNG of 50000x50000 zeros is 2 MB); this check costs no decoding.
    """
    if fmt == FORMAT_RAW:
        if h is None or w is None or c is None:
            return "RAW image without image/height, image/width and image/channels"
        if not 1 <= c <= 4 or h <= 0 or w <= 0:
            return f"RAW image with impossible shape {h}x{w}x{c}"
        if len(image) != h * w * c:
            return f"RAW image holds {len(image):,} bytes, but {h}x{w}x{c} needs {h * w * c:,}"
        return None
    if h is not None and w is not None and h > 0 and w > 0 and h * w > max_pixels:
        return f"image/height x image/width claim {h:,}x{w:,} = {h * w:,} pixels, more than the {max_pixels:,} decoded; not decoded"
    size = jpeg_frame_size(image)
    if size is not None and size[0] * size[1] <= max_pixels:  # the common case, without Pillow's parse
        return None
    head = _header_pixels(image)
    if head is not None and head[0] > max_pixels:
        return f"image header claims {head[0]:,} pixels{head[1]}, more than the {max_pixels:,} decoded; not decoded (decompression bomb?)"
    return None
