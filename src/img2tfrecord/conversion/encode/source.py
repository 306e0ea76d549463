"""Reading one source file: what its first 64 KiB say before the rest is read.

A file is read whole only when its first bytes say it may be an image (a magic we know, or a
header one of Pillow's readers accepts) and, when its header is among them, one of at most
--max-pixels: a 2 GB sparse "photo.jpg" of zeros, or a 30,000 x 30,000 PNG bomb of a few hundred
KB, costs the sniff, not the file. Apart from `encode` (the per-image work) so that each stays a
readable size; `encode` re-exports what callers used to find there (`SkipImage`, `probe_jpeg`).
"""

from __future__ import annotations

import errno
import io
import os
import stat
import warnings
from typing import NamedTuple

from PIL import Image, UnidentifiedImageError

from img2tfrecord import cstderr
from img2tfrecord.conversion.plan import skips
from img2tfrecord.format.images import NOT_IMAGES, describe_unknown, jpeg_header_view, png_header, sniff

# Sizes are judged here and in `encode` (--max-pixels), not by Pillow's global limit, which would raise at open().
Image.MAX_IMAGE_PIXELS = None


# EXIF orientation -> the transpose that turns it upright, as ImageOps.exif_transpose (the pixels
# encode.example turns, and --masks' masks with them, encode.masks)
EXIF_TRANSPOSE = {
    2: Image.Transpose.FLIP_LEFT_RIGHT,
    3: Image.Transpose.ROTATE_180,
    4: Image.Transpose.FLIP_TOP_BOTTOM,
    5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_270,
    7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_90,
}


class SkipImage(Exception):
    """This file cannot become a record; the message says why (shown to the user)."""


HEAD_BYTES = 64 * 1024  # read before knowing whether a file is an image (a 2 GB "photo.jpg" of zeros is not)


def read_source(path: str, max_pixels: int | None = None) -> bytes:
    """The file's bytes, read through one open file descriptor (one fstat, one read; a file of 64 KiB
    or more: its first 64 KiB first, to know it is an image of at most `max_pixels` pixels, then all
    of it in one read into the bytes returned, where joining a second read to the first copied every
    photo once more)."""
    try:
        if "://" in path:
            data = _read_remote(path, max_pixels)
        else:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))  # a FIFO's open must not wait for a writer
            try:  # one fstat + one read: no buffered-reader overhead on the hot path
                st = os.fstat(fd)
                if not stat.S_ISREG(st.st_mode):  # a FIFO (or device) would block the read, or never end
                    kinds = {stat.S_IFIFO: "a FIFO", stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device"}
                    raise SkipImage(
                        "is a directory"
                        if stat.S_ISDIR(st.st_mode)
                        else f"not a regular file ({kinds.get(stat.S_IFMT(st.st_mode), 'not a file')}): not read"
                    )
                if st.st_size <= HEAD_BYTES:
                    data = _read_upto(fd, min(st.st_size + 1, HEAD_BYTES))
                else:  # read it only if its first bytes say it is an image; then whole, in one read
                    _judge(os.pread(fd, HEAD_BYTES, 0), max_pixels)  # (the file offset stays at 0)
                    data = _read_upto(fd, st.st_size + 1)
            finally:
                os.close(fd)
            if len(data) != st.st_size:
                raise SkipImage(skips.CHANGED_WHILE_READ)
    except SkipImage:
        raise
    except FileNotFoundError:
        raise SkipImage(skips.VANISHED) from None
    except PermissionError:
        raise SkipImage(skips.DENIED) from None
    except IsADirectoryError:
        raise SkipImage("is a directory") from None
    except OSError as e:
        if e.errno == errno.ENXIO and os.path.exists(path):  # what open() says of a socket
            raise SkipImage("not a regular file (a socket): not read") from None
        raise SkipImage(f"{skips.CANNOT_READ}{e.strerror or e}") from None
    except Exception as e:  # tf.io.gfile errors (NotFoundError, PermissionDeniedError) are not OSErrors
        raise SkipImage(f"{skips.CANNOT_READ}{describe_error(e)}") from None
    if not data:
        raise SkipImage("empty file (0 bytes)")
    return data


def _read_remote(path: str, max_pixels: int | None) -> bytes:
    """A gs:// (any tf.io.gfile) file judged as a local one is: its first 64 KiB, then the rest from
    the same open file only if they say it may be an image within `max_pixels` (a 2 GB object of
    zeros costs GFile's 512 KiB read buffer). Joining the two reads copies the file once in memory:
    cheaper than asking the object store for the head again."""
    from img2tfrecord import fs  # tf.io.gfile (imports TensorFlow in this worker)

    with fs.gfile(path).GFile(path, "rb") as f:
        head = f.read(HEAD_BYTES)
        if len(head) < HEAD_BYTES:
            return head
        _judge(head, max_pixels)
        return head + f.read()


def _judge(head: bytes, max_pixels: int | None) -> None:
    """Raise SkipImage when a file's first 64 KiB say it is no image, or one over `max_pixels`."""
    with cstderr.reading():  # what Pillow's readers say while sniffing is said to no one
        why = not_an_image(head) or too_many_pixels(head, max_pixels)
    if why is not None:
        raise SkipImage(why)


def _read_upto(fd: int, size: int, data: bytes = b"") -> bytes:
    """Read until `size` bytes or the end (short reads happen: NFS, FUSE)."""
    parts = [data] if data else []
    have = len(data)
    while have < size and (more := os.read(fd, min(size - have, 1 << 30))):
        parts.append(more)
        have += len(more)
    return b"".join(parts)


def not_an_image(head: bytes) -> str | None:
    """Why a file whose first bytes are `head` is not worth reading further; None if it may be an
    image (a magic we know, or a header one of Pillow's readers accepts)."""
    kind = sniff(head)
    if kind in NOT_IMAGES:
        return describe_unknown(head)
    if kind is not None:
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            Image.open(io.BytesIO(head)).close()
    except UnidentifiedImageError:
        return describe_unknown(head)
    except Exception:  # a reader took the header and wanted more bytes: read them
        return None
    return None


def too_many_pixels(head: bytes, max_pixels: int | None) -> str | None:
    """The --max-pixels skip reason when the header in a file's first bytes says it is too big, so
    that a 30,000 x 30,000 image (a PNG bomb of a few hundred KB, or a real 2 GB scan) is skipped
    without reading the rest; None when it fits or its size is not in `head` (the full read decides)."""
    size = header_size(head) if max_pixels is not None else None
    return pixels_problem(*size, max_pixels) if size is not None and max_pixels is not None else None


def pixels_problem(width: int, height: int, max_pixels: int) -> str | None:
    if width * height <= max_pixels:
        return None
    return (
        f"{width}x{height} = {width * height:,} pixels exceeds --max-pixels {max_pixels:,} "
        "(possible decompression bomb); raise --max-pixels to include it"
    )


def header_size(head: bytes) -> tuple[int, int] | None:
    """(width, height) from an image's header in `head` (a file's first bytes); None if not there."""
    if head.startswith(b"\xff\xd8") and (frame := probe_jpeg(jpeg_header_view(head))) is not None:
        return frame.width, frame.height
    if (hdr := png_header(head)) is not None:
        return hdr.width, hdr.height
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":  # Pillow's WebP reader wants the whole file
        return _webp_size(head)
    try:  # Pillow's readers parse headers only at open (Image.MAX_IMAGE_PIXELS is lifted above)
        with warnings.catch_warnings(), Image.open(io.BytesIO(head)) as im:
            warnings.simplefilter("ignore")
            return im.size
    except Exception:  # the header reaches past `head`, or is no header: the full read will tell
        return None


def _webp_size(head: bytes) -> tuple[int, int] | None:
    """A WebP's canvas from its first chunk (VP8X, lossless VP8L or lossy VP8), per the RIFF spec."""
    chunk = head[12:16]
    if chunk == b"VP8X" and len(head) >= 30:
        return int.from_bytes(head[24:27], "little") + 1, int.from_bytes(head[27:30], "little") + 1
    if chunk == b"VP8L" and len(head) >= 25 and head[20] == 0x2F:
        bits = int.from_bytes(head[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8 " and len(head) >= 30 and head[23:26] == b"\x9d\x01\x2a":
        return int.from_bytes(head[26:28], "little") & 0x3FFF, int.from_bytes(head[28:30], "little") & 0x3FFF
    return None


class JpegFrame(NamedTuple):
    height: int
    width: int
    channels: int
    orientation: int | None  # EXIF orientation, None without one


_SOF_MARKERS = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}  # frame headers (not DHT, JPG, DAC)


def probe_jpeg(data: bytes) -> JpegFrame | None:
    """Shape and EXIF orientation of an 8-bit gray or colour JPEG, from its markers.

    What Pillow's `Image.open` finds, at ~5 us instead of ~100 us: it walks the segments up to the
    frame header without reading tables. Anything unusual (CMYK, 12-bit, a height defined later
    by DNL, a damaged marker) returns None, and the caller takes Pillow's path.
    """
    if not data.startswith(b"\xff\xd8"):
        return None
    pos, end, exif = 2, len(data), None
    while pos + 4 <= end:
        if data[pos] != 0xFF:
            return None
        marker = data[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        length = (data[pos + 2] << 8) | data[pos + 3]
        if length < 2 or marker in (0xD8, 0xD9, 0xDA):
            return None  # no frame header before the scan: let Pillow explain
        if marker in _SOF_MARKERS:
            if length < 8 or pos + 10 > end:
                return None
            precision, channels = data[pos + 4], data[pos + 9]
            height, width = (data[pos + 5] << 8) | data[pos + 6], (data[pos + 7] << 8) | data[pos + 8]
            if precision != 8 or channels not in (1, 3) or not height or not width:
                return None
            return JpegFrame(height, width, channels, _exif_orientation(exif) if exif is not None else None)
        if marker == 0xE1 and exif is None and data.startswith(b"Exif\0\0", pos + 4):
            exif = data[pos + 4 : pos + 2 + length]
        pos += 2 + length
    return None


def _exif_orientation(exif: bytes) -> int | None:
    """The EXIF orientation; None when the block is truncated or invalid: no reader can find an
    orientation there, and TensorFlow decodes the JPEG without it (so it is kept as it is)."""
    e = Image.Exif()
    try:
        e.load(exif)
        return e.get(0x0112, 1)
    except Exception:  # Pillow raises SyntaxError, struct.error, ValueError... on damaged EXIF
        return None


def describe_error(e: BaseException) -> str:
    msg = str(e) or type(e).__name__
    return msg if len(msg) < 200 else msg[:197] + "..."
