"""Per-image work: probe, validate, transcode if needed, and serialize one Example.

This is the hot path (it runs once per image, in the process that then writes the record), so it
reads each file once and decodes no more than it must:

* keep mode + validation: the header gives height/width/channels; JPEGs are validated with a
  1/8-scale DCT decode (libjpeg still entropy-decodes the whole stream, so truncation and corrupt
  scans raise) and PNG/BMP with a full decode (zlib must inflate everything anyway);
* keep mode, --no-validate: header only (JPEG markers parsed here, ~5 us; other formats by Pillow);
* re-encoding: JPEGs are decoded at the smallest DCT scale that still covers the target size.

Anything wrong with a file raises `SkipImage` with a short, human reason.
"""

from __future__ import annotations

import io
import itertools
import os
import warnings
from collections.abc import Callable, Container, Iterable, Iterator
from dataclasses import dataclass
from typing import NamedTuple

import xxhash
from PIL import Image, ImageFile, ImageOps, UnidentifiedImageError

from img2tfrecord.schema import DEFAULT_MAX_PIXELS, FORMAT_RAW, serialize_example, utf8_text

# We enforce our own --max-pixels before decoding; Pillow's global limit would raise at open().
Image.MAX_IMAGE_PIXELS = None
ImageFile.LOAD_TRUNCATED_IMAGES = False
warnings.filterwarnings("ignore", module="PIL")

ENCODINGS = ("keep", "jpeg", "png", "raw")
CHANNEL_CHOICES = ("keep", "1", "3")

_MODE_CHANNELS = {"1": 1, "L": 1, "I;16": 1, "I;16B": 1, "I;16L": 1, "I": 1, "F": 1, "LA": 2, "RGB": 3, "RGBA": 4}


class SkipImage(Exception):
    """This file cannot become a record; the message says why (shown to the user)."""


@dataclass(frozen=True)
class EncodeOptions:
    """Everything that shapes the bytes of a record (all of it goes into dataset.json)."""

    encoding: str = "keep"
    quality: int = 95
    resize: tuple[int, int] | int | None = None  # N: shorter side to N; (W, H): exact size
    channels: str = "keep"
    max_pixels: int = DEFAULT_MAX_PIXELS
    validate: bool = True

    @property
    def reencodes(self) -> bool:
        return self.encoding != "keep" or self.resize is not None or self.channels != "keep"


class Result(NamedTuple):
    """How one image is stored. The process that validates an image also writes it, so the bytes
    that were checked are exactly the bytes stored (no second read, no pipe).

    kind "keep": `payload` is the file's own bytes. kind "encoded": `payload` is the new encoding
    (PNG/JPEG/RAW). kind "skip": `payload` is None and `fmt` is the reason.
    """

    kind: str
    payload: bytes | None
    fmt: str
    height: int = 0
    width: int = 0
    channels: int = 0
    transcoded: str | None = None  # e.g. "GIF->PNG" in keep mode
    orientation_ignored: bool = False  # keep mode left an EXIF rotation to the reader
    size: int = 0  # bytes read
    digest: str = ""  # xxh3-128 of the file's bytes: finds byte-identical duplicates


def encode_image(path: str, opts: EncodeOptions) -> Result:
    """Read and check one file; return how to store it, or raise SkipImage."""
    data = _read(path)
    if not opts.validate and not opts.reencodes and (probed := probe_jpeg(data)) is not None:
        height, width, channels, orient = probed  # --no-validate: the header is all we need
        _check_pixels(width, height, opts)
        return Result("keep", data, "JPEG", height, width, channels, None, orient, len(data), _digest(data))
    im = _open(data)
    fmt = im.format or "unknown"
    width, height = im.size
    _check_pixels(width, height, opts)
    try:
        if not opts.reencodes:
            kept = _keep(im, data, fmt, opts.validate)
            if kept is not None:
                out_fmt, channels, orient = kept
                return Result("keep", data, out_fmt, height, width, channels, None, orient, len(data), _digest(data))
        payload, out_fmt, (h, w, c) = _transcode(im, fmt, opts)
    except SkipImage:
        raise
    except Exception as e:  # Pillow raises OSError, SyntaxError, ValueError, EOFError, struct.error...
        raise SkipImage(f"corrupt or truncated {fmt} image: {_describe(e)}") from None
    source = "CMYK JPEG" if fmt in ("JPEG", "MPO") and im.mode == "CMYK" else fmt
    transcoded = None if opts.reencodes else f"{source}->{out_fmt}"
    return Result("encoded", payload, out_fmt, h, w, c, transcoded, False, len(data), _digest(data))


def _check_pixels(width: int, height: int, opts: EncodeOptions) -> None:
    if width * height > opts.max_pixels:
        raise SkipImage(
            f"{width}x{height} = {width * height:,} pixels exceeds --max-pixels {opts.max_pixels:,} "
            "(possible decompression bomb); raise --max-pixels to include it"
        )


_SOF_MARKERS = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}  # frame headers (not DHT, JPG, DAC)


def probe_jpeg(data: bytes) -> tuple[int, int, int, bool] | None:
    """(height, width, channels, EXIF rotation) of an 8-bit gray or colour JPEG, from its markers.

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
            precision, height, width, channels = data[pos + 4], (data[pos + 5] << 8) | data[pos + 6], (data[pos + 7] << 8) | data[pos + 8], data[pos + 9]
            if precision != 8 or channels not in (1, 3) or not height or not width:
                return None
            try:
                orient = exif is not None and _exif_orientation(exif) not in (1, None)
            except Exception:
                return None
            return height, width, channels, orient
        if marker == 0xE1 and exif is None and data.startswith(b"Exif\0\0", pos + 4):
            exif = data[pos + 4 : pos + 2 + length]
        pos += 2 + length
    return None


def _exif_orientation(exif: bytes) -> int | None:
    e = Image.Exif()
    e.load(exif)
    return e.get(0x0112, 1)


def _digest(data: bytes) -> str:
    return xxhash.xxh3_128_hexdigest(data)


def to_record(task: Task, result: Result) -> bytes:
    """The serialized Example of a non-skipped result."""
    _path, _rel, filename, label, text, _size = task
    assert result.payload is not None, "a skipped image has no record"
    return serialize_example(
        encoded=result.payload, image_format=result.fmt, height=result.height, width=result.width,
        channels=result.channels, label=label, text=utf8_text(text).encode("utf-8"),
        filename=utf8_text(filename).encode("utf-8"),
    )  # fmt: skip


def _read(path: str) -> bytes:
    """The file's bytes, read through one open file descriptor (one fstat, one read)."""
    import errno, stat  # noqa: E401, PLC0415

    try:
        if "://" in path:
            from img2tfrecord import fs  # remote input: tf.io.gfile (imports TensorFlow in this worker)

            data = fs.read_bytes(path)
        else:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))  # a FIFO's open must not wait for a writer
            try:  # one fstat + one read: no buffered-reader overhead on the hot path
                st = os.fstat(fd)
                if not stat.S_ISREG(st.st_mode):  # a FIFO (or device) would block the read, or never end
                    kinds = {stat.S_IFIFO: "a FIFO", stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device"}
                    raise SkipImage("is a directory" if stat.S_ISDIR(st.st_mode) else f"not a regular file ({kinds.get(stat.S_IFMT(st.st_mode), 'not a file')}): not read")
                data = os.read(fd, st.st_size + 1)
                while len(data) < st.st_size and (more := os.read(fd, st.st_size + 1 - len(data))):  # short reads (NFS)
                    data += more
            finally:
                os.close(fd)
            if len(data) != st.st_size:
                raise SkipImage("file changed while it was being read; run again")
    except SkipImage:
        raise
    except FileNotFoundError:
        raise SkipImage("file vanished (or is a broken symlink) before it could be read") from None
    except PermissionError:
        raise SkipImage("permission denied") from None
    except IsADirectoryError:
        raise SkipImage("is a directory") from None
    except OSError as e:
        if e.errno == errno.ENXIO and os.path.exists(path):  # what open() says of a socket
            raise SkipImage("not a regular file (a socket): not read") from None
        raise SkipImage(f"cannot read: {e.strerror or e}") from None
    except Exception as e:  # tf.io.gfile errors (NotFoundError, PermissionDeniedError) are not OSErrors
        raise SkipImage(f"cannot read: {_describe(e)}") from None
    if not data:
        raise SkipImage("empty file (0 bytes)")
    return data


def _open(data: bytes) -> Image.Image:
    try:
        return Image.open(io.BytesIO(data))
    except UnidentifiedImageError:
        head = data[:16]
        kind = "text/HTML" if head.lstrip()[:1] in (b"<", b"{") or head.isascii() else "unknown data"
        raise SkipImage(f"not an image: content is {kind} (starts with {head[:8].hex(' ')})") from None
    except Exception as e:
        raise SkipImage(f"unreadable image header: {_describe(e)}") from None


def _describe(e: BaseException) -> str:
    msg = str(e) or type(e).__name__
    return msg if len(msg) < 200 else msg[:197] + "..."


def _png_channels(im: Image.Image) -> int | None:
    """Channels tf.io.decode_png gives: palette expands to RGB(A); tRNS adds alpha; 1-16 bit gray is 1."""
    trns = "transparency" in im.info
    if im.mode in ("P", "PA"):
        return 4 if trns or im.mode == "PA" else 3
    base = _MODE_CHANNELS.get(im.mode)
    if base is None:
        return None
    return base + 1 if trns and base in (1, 3) else base


def _keep(im: Image.Image, data: bytes, fmt: str, validate: bool) -> tuple[str, int, bool] | None:
    """(format, channels, orientation_ignored) when the original bytes can be stored; None to transcode."""
    if fmt in ("JPEG", "MPO") and im.mode in ("L", "RGB"):
        orient = "exif" in im.info and im.getexif().get(0x0112, 1) not in (1, None)  # APP1 parsed at open
        if validate:
            w, h = im.size
            im.draft(im.mode, (max(1, w // 8), max(1, h // 8)))
            im.load()
        return "JPEG", 1 if im.mode == "L" else 3, orient
    if fmt == "PNG" and (channels := _png_channels(im)) is not None:
        if validate:
            im.load()
        return "PNG", channels, False
    if fmt == "BMP" and im.mode == "RGB" and im.tile and im.tile[0][0] == "raw" and im.tile[0][3][0] == "BGR":
        if validate:  # uncompressed 24-bit: what tf.io.decode_bmp reads
            im.load()
        return "BMP", 3, False
    return None


def _to_8bit(im: Image.Image) -> Image.Image:
    import numpy as np  # only for 16-bit and float images; the main process never needs numpy (~16 MB)

    arr = np.asarray(im)
    if im.mode.startswith("I;16"):
        arr = arr >> 8
    return Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8), "L")


def _normalize_mode(im: Image.Image, opts: EncodeOptions, target: str) -> Image.Image:
    """Bring any Pillow mode to one we can store: L, LA, RGB, RGBA (or 16-bit gray in PNG)."""
    if opts.channels == "1":
        return _to_8bit(im) if im.mode.startswith("I") or im.mode == "F" else im.convert("L")
    if opts.channels == "3":
        return im.convert("RGB")
    mode = im.mode
    if mode in ("P", "PA"):
        im = im.convert("RGBA" if "transparency" in im.info or mode == "PA" else "RGB")
    elif mode == "1":
        im = im.convert("L")
    elif mode in ("La", "LA") or (mode == "L" and "transparency" in im.info):
        im = im.convert("LA")
    elif mode in ("RGBa", "RGBA") or (mode == "RGB" and "transparency" in im.info):
        im = im.convert("RGBA")
    elif mode.startswith("I;16") and target == "PNG":
        im = im if mode == "I;16" else im.convert("I;16")
    elif mode.startswith("I") or mode == "F":
        im = _to_8bit(im)
    elif mode not in ("L", "RGB"):  # CMYK, YCbCr, LAB, HSV
        im = im.convert("RGB")
    if target == "JPEG" and im.mode in ("LA", "RGBA"):  # JPEG has no alpha channel
        im = im.convert(im.mode[:-1])
    if target == "JPEG" and im.mode.startswith("I;16"):
        im = _to_8bit(im)
    return im


def _target_size(size: tuple[int, int], resize: tuple[int, int] | int) -> tuple[int, int]:
    w, h = size
    if isinstance(resize, int):
        scale = resize / min(w, h)
        return (resize, max(1, round(h * scale))) if w <= h else (max(1, round(w * scale)), resize)
    return resize


def _transcode(im: Image.Image, fmt: str, opts: EncodeOptions) -> tuple[bytes, str, tuple[int, int, int]]:
    """Decode (first frame), orient, convert, resize and encode. Returns payload, format, (h, w, c)."""
    if opts.encoding == "keep":  # keep mode falls back here: lossless PNG, or JPEG q100 for CMYK JPEGs
        target = "JPEG" if fmt in ("JPEG", "MPO") else "PNG"
        quality = opts.quality if opts.reencodes else 100  # --resize/--channels asked for new pixels: --quality
    else:
        target, quality = {"jpeg": "JPEG", "png": "PNG", "raw": FORMAT_RAW}[opts.encoding], opts.quality
    if opts.resize is not None and fmt in ("JPEG", "MPO"):
        side = opts.resize if isinstance(opts.resize, int) else max(opts.resize)
        im.draft(im.mode, (side, side))  # decode at the smallest DCT scale still >= the target
    im.load()  # a freshly opened multi-frame file (GIF, TIFF, WebP) sits on its first frame
    im = ImageOps.exif_transpose(im)
    im = _normalize_mode(im, opts, target)
    if opts.resize is not None:
        size = _target_size(im.size, opts.resize)
        if size != im.size:
            resample = Image.Resampling.BICUBIC
            if im.mode.startswith("I;16"):
                im = im.convert("I").resize(size, resample).convert("I;16")
            else:
                im = im.resize(size, resample, reducing_gap=3.0)
    w, h = im.size
    channels = _MODE_CHANNELS[im.mode]
    if target == FORMAT_RAW:
        if im.mode.startswith("I;16"):
            im = _to_8bit(im)
        return im.tobytes(), FORMAT_RAW, (h, w, channels)
    buf = io.BytesIO()
    if target == "JPEG":
        im.save(buf, "JPEG", quality=quality)
    else:
        im.save(buf, "PNG")
    return buf.getvalue(), target, (h, w, channels)


# ---- per task ----

Task = tuple[str, str, str, int, str, int]  # (path, rel to input, filename, label, text, size)


def encode_task(task: Task, opts: EncodeOptions) -> Result:
    """Encode one candidate; a bad image becomes a "skip" result, never an exception."""
    try:
        return encode_image(task[0], opts)
    except SkipImage as e:
        return Result("skip", None, str(e), size=task[5])


DROPPED = "dropped"  # Result.kind of a duplicate left out by --dedupe drop (never read)


def encode_shard(tasks: Iterable[Task], opts: EncodeOptions, warming: Callable[[], bool] | None = None,
                 hold_bytes: int = 64 * 1024 * 1024, drop: Container[str] = ()) -> Iterator[Result]:
    """Encode `tasks` in order, lazily; tasks whose rel path is in `drop` are not read at all.

    Before returning, while `warming()` is true (TensorFlow still importing in the background),
    it encodes ahead and holds up to `hold_bytes` of results, so the import overlaps useful work.
    """
    results = (Result(DROPPED, None, "", size=t[5]) if t[1] in drop else encode_task(t, opts) for t in tasks)
    head: list[Result] = []
    held = 0
    while warming is not None and warming() and held < hold_bytes:
        r = next(results, None)
        if r is None:
            break
        head.append(r)
        held += len(r.payload or b"") + 256
    return itertools.chain(head, results)


def digest_file(path: str) -> str | None:
    """xxh3-128 of a file's bytes (the --dedupe drop pre-pass); None if it cannot be read."""
    try:
        return _digest(_read(path))
    except SkipImage:
        return None
