"""Per-image work: probe, validate, transcode if needed, and serialize one Example.

This is the hot path (it runs once per image, in the process that then writes the record), so it
reads each file once and decodes no more than it must. What is stored is decided by what
TensorFlow's decoder makes of the bytes, not by what Pillow says the image is
(`imageformat` holds those rules; tests/encode/test_conformance.py checks them against TensorFlow):

* JPEG, keep mode: the markers give height/width/channels (~5 us); with validation the scan is
  entropy-decoded at 1/8 scale by libjpeg-turbo in strict mode (simplejpeg), so a corrupt scan
  that libjpeg would silently fill with grey (an EOI/RST marker or garbage mid-stream), which
  Pillow and TensorFlow only warn about, is a skip;
* PNG and 24-bit BMP, keep mode: the header gives the shape TensorFlow decodes to (a tRNS colour
  key on grey/RGB adds no channel); with validation Pillow decodes it all, and a PNG whose
  critical chunks libpng (TensorFlow) would refuse, e.g. a bad IDAT CRC, is re-encoded from
  Pillow's decode;
* everything else, and every image in the re-encoding modes, is decoded (first frame), turned
  upright (EXIF or TIFF orientation), brought to one of L, LA, RGB, RGBA or 16-bit grey without
  loss, and encoded. 16-bit stays 16-bit in PNG; pixel values that fit no format TensorFlow
  decodes (float, 32-bit integers beyond 16 bits) are skipped with that reason.

The rule: an image is skipped only when TensorFlow's decoder would fail on what would be stored,
or give pixels that differ from the source's. So libjpeg's header-only warnings (junk before a
table or APP segment, a bad ICC marker) and an unreadable EXIF block keep a JPEG as it is, while
lost entropy-coded data skips it; a BMP TensorFlow refuses (bytes after the pixel rows) becomes a
PNG. Anything wrong with a file raises `SkipImage` with a short, true reason about *that* file:
the format found from its magic bytes, the decoder's error, and what the C libraries printed or
Pillow logged while it was read (`cstderr.reading`); a non-image is named, never quoted. A file
is read whole only when its first bytes say it may be an image of at most --max-pixels (`source`).
"""

from __future__ import annotations

import io
import itertools
import warnings
from collections.abc import Callable, Container, Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import xxhash
from PIL import (
    BmpImagePlugin,
    GifImagePlugin,
    Image,
    ImageFile,
    ImageOps,
    PngImagePlugin,
    TiffImagePlugin,
    UnidentifiedImageError,
    WebPImagePlugin,
)

from img2tfrecord import cstderr
from img2tfrecord.conversion.encode import boxes, seg_masks
from img2tfrecord.conversion.encode.sixteen import SIXTEEN, eight_bit, resize16, sixteen_bit
from img2tfrecord.conversion.encode.source import (  # the read before the work (SkipImage is found here too)
    EXIF_TRANSPOSE,
    JpegFrame,
    SkipImage,
    describe_error,
    pixels_problem,
    probe_jpeg,
    read_source,
)
from img2tfrecord.conversion.plan.job import Task
from img2tfrecord.conversion.plan.options import EncodeOptions
from img2tfrecord.format.images import (
    MODE_CHANNELS,
    NOT_IMAGES,
    bmp_tf_reads,
    describe_unknown,
    jpeg_frame_problem,
    jpeg_header_view,
    png_chunks_sound,
    png_header,
    sniff,
    tf_png_channels,
)
from img2tfrecord.format.schema import FORMAT_RAW, MetaValue, serialize_example, utf8_text

# We enforce our own --max-pixels before decoding; Pillow's global limit would raise at open().
Image.MAX_IMAGE_PIXELS = None
ImageFile.LOAD_TRUNCATED_IMAGES = False
warnings.filterwarnings("ignore", module="PIL")


# Modes an image is brought to before encoding, and their channels / bits per sample.
STORED_MODES = {m: (MODE_CHANNELS[m], 16 if m == "I;16" else 8) for m in ("L", "LA", "RGB", "RGBA", "I;16")}
_PLUGINS: dict[str, Callable[[io.BytesIO], Image.Image]] = {  # Pillow's readers, to name a header's problem
    "TIFF (II*)": TiffImagePlugin.TiffImageFile,
    "TIFF (MM*)": TiffImagePlugin.TiffImageFile,
    "PNG": PngImagePlugin.PngImageFile,
    "GIF": GifImagePlugin.GifImageFile,
    "BMP": BmpImagePlugin.BmpImageFile,
    "WebP": WebPImagePlugin.WebPImageFile,
}


@dataclass(slots=True, kw_only=True)
class Result:
    """How one image is stored. The process that validates an image also writes it, so the bytes
    that were checked are exactly the bytes stored (no second read, no pipe).

    kind "keep": `payload` is the file's own bytes. kind "encoded": `payload` is the new encoding
    (PNG/JPEG/RAW). kind "skip": `payload` is None and `reason` says why. Built by keyword only
    (a slotted dataclass, not a tuple), so a new field is one line here and where it is set.
    """

    kind: str  # "keep", "encoded", "skip", or DROPPED (a duplicate --dedupe drop leaves out, never read)
    payload: bytes | None = None
    fmt: str = ""  # the stored format: JPEG, PNG, BMP or RAW ("" when nothing is stored)
    reason: str = ""  # why the image was skipped (kind "skip"), else ""
    height: int = 0
    width: int = 0
    channels: int = 0
    transcoded: str | None = None  # e.g. "GIF->PNG" in keep mode
    orientation_ignored: bool = False  # keep mode left an EXIF rotation to the reader
    size: int = 0  # bytes read
    digest: str = ""  # xxh3-128 of the file's bytes: finds byte-identical duplicates
    depth: int = 8  # bits per sample of the stored pixels: 16 only for 16-bit PNGs
    reduced: str | None = None  # why fewer bits were stored than the source has (counted in dataset.json)
    source_width: int = 0  # the pixels as stored in the source file (before any turn or resize)
    source_height: int = 0
    turned: int = 1  # the EXIF orientation applied to the pixels (1: none): boxes turn with them
    extra: tuple[MetaValue, ...] = ()  # features the worker made beside the image's: a segmentation mask
    mask_pixels: dict[str, int] | None = None  # the mask's pixels per class id (--masks-dir)


def encode_image(path: str, opts: EncodeOptions) -> Result:
    """Read and check one file; return how to store it, or raise SkipImage (with what the C
    decoders printed about it, if anything)."""
    data = read_source(path, opts.max_pixels)
    kind = sniff(data)
    failed: SkipImage | None = None
    with cstderr.reading() as said:  # what the decoders say now is about this image, and only this one
        try:
            result = _encode(data, kind, opts)
        except SkipImage as e:
            failed = e
    if failed is not None:
        text = said.text()
        raise SkipImage(f"{failed} [decoder: {text[:300]}]" if text else str(failed)) from None
    if said.c and any("warning" not in line.lower() for line in said.c.split("; ")):
        # A C decoder reported an error but let the image through (libtiff's Fax4Decode "Bad code
        # word" does): its pixels are garbage from that point. Warnings alone are not our business,
        # nor is a Python log record of a decoder that then returned the image.
        raise SkipImage(f"{kind or result.fmt}: corrupt data: {said.c[:300]}")
    return result


def _encode(data: bytes, kind: str | None, opts: EncodeOptions) -> Result:
    jpeg = None
    view = data  # a JPEG as libjpeg reads its headers (junk between segments and ICC left out)
    if kind == "JPEG":
        view = jpeg_header_view(data)
        if problem := jpeg_frame_problem(view):
            raise SkipImage(problem)
        jpeg = probe_jpeg(view)  # None: CMYK/YCCK, or markers we leave to Pillow
        if jpeg is not None:
            return _jpeg(data, view, jpeg, opts)
    im = _open(data, kind)
    fmt = im.format or "unknown"
    label = kind or fmt
    width, height = im.size
    _check_pixels(width, height, opts)
    transcoded = None
    try:
        if fmt in ("JPEG", "MPO") and jpeg is None and opts.validate:
            _check_jpeg_scan(view)  # CMYK/YCCK: Pillow would decode a corrupt scan silently
        if not opts.reencodes:
            kept = _keep(im, data, fmt, opts.validate)
            if isinstance(kept, Result):
                return replace(kept, size=len(data), digest=_digest(data), source_width=width, source_height=height)
            was = "CMYK JPEG" if fmt in ("JPEG", "MPO") and im.mode == "CMYK" else fmt
            transcoded = kept or f"{was}->{'JPEG' if fmt in ('JPEG', 'MPO') else 'PNG'}"
        deep = _source_bits(im, data) > 8
        payload, out_fmt, (h, w, c), depth = _transcode(im, fmt, opts, None, data)
        turned = _turned(im)
    except SkipImage:
        raise
    except Exception as e:  # Pillow raises OSError, SyntaxError, ValueError, EOFError, struct.error...
        raise SkipImage(f"{label}: corrupt or truncated: {describe_error(e)}") from None
    reduced = None
    if deep and depth == 8:
        reduced = (
            "16-bit -> 8-bit (the target holds 8 bits)"
            if im.mode in SIXTEEN or im.mode in ("I", "F")
            else "16-bit colour -> 8-bit (Pillow decodes it to 8 bits)"
        )
    return Result(
        kind="encoded",
        payload=payload,
        fmt=out_fmt,
        height=h,
        width=w,
        channels=c,
        transcoded=transcoded,
        size=len(data),
        digest=_digest(data),
        depth=depth,
        reduced=reduced,
        source_width=width,
        source_height=height,
        turned=turned,
    )


def _turned(im: Image.Image) -> int:
    """The EXIF orientation `ImageOps.exif_transpose` applied to `im` (1: none): the tag it reads,
    cached by Pillow from that call."""
    orientation = im.getexif().get(0x0112, 1)
    return orientation if orientation in EXIF_TRANSPOSE else 1


def _jpeg(data: bytes, view: bytes, jpeg: JpegFrame, opts: EncodeOptions) -> Result:
    """An 8-bit grey/colour JPEG: kept, or decoded by libjpeg-turbo directly (strict when validating), no Pillow open."""
    _check_pixels(jpeg.width, jpeg.height, opts)
    if opts.reencodes:
        try:
            payload, out_fmt, (h, w, c), depth = _transcode(None, "JPEG", opts, jpeg, view)
        except ValueError as e:
            raise SkipImage(f"JPEG: corrupt or truncated: {describe_error(e)}") from None
        turned = jpeg.orientation if jpeg.orientation in EXIF_TRANSPOSE else 1
        return Result(
            kind="encoded",
            payload=payload,
            fmt=out_fmt,
            height=h,
            width=w,
            channels=c,
            size=len(data),
            digest=_digest(data),
            depth=depth,
            source_width=jpeg.width,
            source_height=jpeg.height,
            turned=turned,
        )
    if opts.validate:
        _check_jpeg_scan(view)
    orientation_ignored = jpeg.orientation not in (1, None)
    c = jpeg.channels
    return Result(
        kind="keep",
        payload=data,
        fmt="JPEG",
        height=jpeg.height,
        width=jpeg.width,
        channels=c,
        orientation_ignored=orientation_ignored,
        size=len(data),
        digest=_digest(data),
        source_width=jpeg.width,
        source_height=jpeg.height,
    )


def _source_bits(im: Image.Image, data: bytes) -> int:
    """Bits per sample of the source as its header says (Pillow decodes 16-bit colour as 8-bit)."""
    if im.mode in SIXTEEN or im.mode in ("I", "F"):
        return 16
    if im.format == "PNG" and (hdr := png_header(data)) is not None:
        return hdr.bit_depth
    bits = getattr(im, "tag_v2", {}).get(258) if im.format == "TIFF" else None  # BitsPerSample
    if isinstance(bits, tuple):
        return max(bits, default=8)
    return bits if isinstance(bits, int) else 8


def _check_pixels(width: int, height: int, opts: EncodeOptions) -> None:
    if (why := pixels_problem(width, height, opts.max_pixels)) is not None:
        raise SkipImage(why)


def _check_jpeg_scan(data: bytes) -> None:
    """Entropy-decode the whole scan at 1/8 scale, failing on what libjpeg only warns about.

    libjpeg recovers from a damaged scan (a marker or garbage in the middle, a truncated file)
    by filling the rest with grey and printing "Corrupt JPEG data: ..."; Pillow and TensorFlow
    go on with those pixels. simplejpeg's strict mode turns that warning into an error, at the
    cost of a 1/8-scale decode (~1 ms for an ImageNet JPEG, less than Pillow's draft decode).
    """
    try:
        _simplejpeg().decode_jpeg(
            data, colorspace="GRAY", fastdct=True, fastupsample=True, min_height=1, min_width=1, strict=True
        )
    except ValueError as e:
        raise SkipImage(f"JPEG: corrupt or truncated: {describe_error(e)}") from None


def _simplejpeg() -> Any:
    """simplejpeg, imported when a JPEG is first decoded: it imports numpy (~150 ms, ~16 MB),
    which `--no-validate` keep-mode workers and a coordinating process never need."""
    import simplejpeg

    return simplejpeg


def _digest(data: bytes) -> str:
    return xxhash.xxh3_128_hexdigest(data)


def to_record(task: Task, result: Result) -> bytes:
    """The serialized Example of a non-skipped result."""
    assert result.payload is not None, "a skipped image has no record"
    extra = task.meta + result.extra
    if task.objects is not None:  # an annotated image: the Object Detection API's features too
        extra += boxes.features(
            task.objects,
            result.payload,
            width=result.source_width,
            height=result.source_height,
            orientation=result.turned,
            out=(result.width, result.height),
        )
    return serialize_example(
        encoded=result.payload,
        image_format=result.fmt,
        height=result.height,
        width=result.width,
        channels=result.channels,
        label=task.label,
        text=utf8_text(task.text).encode("utf-8"),
        filename=utf8_text(task.filename).encode("utf-8"),
        extra=extra,
    )


def _open(data: bytes, kind: str | None) -> Image.Image:
    """Pillow's view of the file; a file it cannot read is named by its magic bytes and the
    error of that format's own reader (Pillow's "cannot identify image file" says neither)."""
    try:
        return Image.open(io.BytesIO(data))
    except UnidentifiedImageError:
        pass
    except Exception as e:
        raise SkipImage(f"{kind or 'image'}: unreadable header: {describe_error(e)}") from None
    if kind is None or kind in NOT_IMAGES:
        raise SkipImage(describe_unknown(data))
    plugin = _PLUGINS.get(kind)
    why = "not supported"
    if plugin is not None:
        try:
            plugin(io.BytesIO(data))
        except Exception as e:
            why = describe_error(e)
    elif kind == "JPEG":
        why = "no frame header Pillow can read"
    raise SkipImage(f"{kind}: cannot read header: {why}")


def _keep(im: Image.Image, data: bytes, fmt: str, validate: bool) -> Result | str | None:
    """A Result when the file's own bytes can be stored; else None (transcode), or a
    "PNG->PNG"-style label when TensorFlow's decoder would refuse bytes Pillow reads.

    The declared shape is what TensorFlow decodes the bytes to, by rules checked against its real
    decoder over every mode (`imageformat.tf_png_channels`; tests/encode/test_conformance.py). The rules,
    not a TensorFlow decode here: encoding then needs no TensorFlow at all (an eager decode costs
    ~150 us of dispatch an image), and the bytes stored cannot depend on which process wrote them.
    """
    w, h = im.size
    if fmt == "PNG" and (hdr := png_header(data)) is not None and (channels := tf_png_channels(hdr)) is not None:
        depth = 16 if hdr.bit_depth == 16 else 8
        if validate:
            im.load()  # Pillow reads it all: zlib inflates every byte, the filters are undone
            if not png_chunks_sound(data):  # libpng (TensorFlow) fails on what Pillow lets pass
                return "PNG->PNG"
        orient = hdr.has_exif and im.getexif().get(0x0112, 1) not in (1, None)
        return Result(
            kind="keep",
            payload=data,
            fmt="PNG",
            height=h,
            width=w,
            channels=channels,
            orientation_ignored=orient,
            depth=depth,
        )
    tile = getattr(im, "tile", None)  # an ImageFile's decoder plan: ("raw", box, offset, (rawmode, ...))
    if (
        fmt == "BMP"
        and im.mode == "RGB"
        and tile
        and tile[0][0] == "raw"
        and tile[0][3][0] == "BGR"
        and bmp_tf_reads(data, w, h)
    ):
        if validate:  # uncompressed 24-bit, nothing after the rows: what tf.io.decode_bmp reads
            im.load()
        return Result(kind="keep", payload=data, fmt="BMP", height=h, width=w, channels=3)
    return None


def _lossless(im: Image.Image) -> Image.Image:
    """Pillow's decode in one of STORED_MODES without losing anything: palette expanded (to RGBA
    when it has transparency), 1-bit to 0/255 grey, a colour key to an alpha channel (16-bit grey
    keeps 16 bits and drops its key, as TensorFlow does), CMYK/YCbCr/LAB/HSV to RGB."""
    mode, trns = im.mode, "transparency" in im.info
    if mode in SIXTEEN or mode in ("I", "F"):
        return sixteen_bit(im)
    if mode in ("P", "PA"):
        return im.convert("RGBA" if trns or mode == "PA" else "RGB")
    if mode == "1":
        return im.convert("LA" if trns else "L")
    if mode in ("L", "RGB"):
        return im.convert(mode + "A" if mode == "L" else "RGBA") if trns else im
    if mode in ("LA", "RGBA"):
        return im
    if mode in ("La", "RGBa"):
        return im.convert(mode.upper())
    return im.convert("RGB")


def _fit(im: Image.Image, opts: EncodeOptions, target: str) -> Image.Image:
    """Apply --channels and what the target format can hold (JPEG: no alpha; JPEG/RAW: 8 bits)."""
    if opts.channels == "1":
        if im.mode != "I;16":
            im = im.convert("L")
    elif opts.channels == "3":
        im = (eight_bit(im) if im.mode == "I;16" else im).convert("RGB")
    if im.mode == "I;16" and target != "PNG":
        im = eight_bit(im)
    if target == "JPEG" and im.mode in ("LA", "RGBA"):
        im = im.convert(im.mode[:-1])
    return im


def _target_size(size: tuple[int, int], resize: tuple[int, int] | int, mode: str = "always") -> tuple[int, int]:
    w, h = size
    if isinstance(resize, int):
        if mode == "shrink" and min(w, h) <= resize:  # never enlarged
            return size
        scale = resize / min(w, h)
        return (resize, max(1, round(h * scale))) if w <= h else (max(1, round(w * scale)), resize)
    return resize


def _decode_jpeg(data: bytes, frame: JpegFrame, opts: EncodeOptions) -> Image.Image:
    """An 8-bit grey/colour JPEG's pixels from libjpeg-turbo (the same as Pillow's decode), at
    the smallest DCT scale still covering the resize target, and upright."""
    side = 0
    if opts.resize is not None:
        side = opts.resize if isinstance(opts.resize, int) else max(opts.resize)
    arr = _simplejpeg().decode_jpeg(
        data, colorspace="GRAY" if frame.channels == 1 else "RGB", min_height=side, min_width=side, strict=opts.validate
    )
    im = Image.fromarray(arr[:, :, 0] if frame.channels == 1 else arr)  # uint8: L or RGB, from the shape
    if frame.orientation in EXIF_TRANSPOSE:
        im = im.transpose(EXIF_TRANSPOSE[frame.orientation])
    return im


def _transcode(
    im: Image.Image | None, fmt: str, opts: EncodeOptions, jpeg: JpegFrame | None, data: bytes
) -> tuple[bytes, str, tuple[int, int, int], int]:
    """Decode (first frame), orient, convert, resize and encode. Returns payload, format, (h, w, c), bits.

    `jpeg`: the frame of an 8-bit grey/colour JPEG, decoded by libjpeg-turbo instead of Pillow (`im` unused)."""
    if opts.encoding == "keep":  # keep mode falls back here: lossless PNG, or JPEG q100 for CMYK JPEGs
        target = "JPEG" if fmt in ("JPEG", "MPO") else "PNG"
        quality = opts.quality if opts.reencodes else 100  # --resize/--channels asked for new pixels: --quality
    else:
        target, quality = {"jpeg": "JPEG", "png": "PNG", "raw": FORMAT_RAW}[opts.encoding], opts.quality
    if jpeg is not None:
        im = _decode_jpeg(data, jpeg, opts)
    else:
        assert im is not None
        if opts.resize is not None and fmt in ("JPEG", "MPO"):
            side = opts.resize if isinstance(opts.resize, int) else max(opts.resize)
            im.draft(im.mode, (side, side))  # decode at the smallest DCT scale still >= the target
        im.load()  # a freshly opened multi-frame file (GIF, TIFF, WebP) sits on its first frame
        im = ImageOps.exif_transpose(im)  # EXIF in JPEG/WebP/PNG, TIFF's own Orientation tag
    im = _fit(_lossless(im), opts, target)
    if opts.resize is not None:
        size = _target_size(im.size, opts.resize, opts.resize_mode)
        if size != im.size:
            resample = Image.Resampling.BICUBIC
            if im.mode == "I;16":
                im = resize16(im, size, resample)
            else:
                im = im.resize(size, resample, reducing_gap=3.0)
    w, h = im.size
    channels, depth = STORED_MODES[im.mode]
    if target == FORMAT_RAW:
        return im.tobytes(), FORMAT_RAW, (h, w, channels), depth
    buf = io.BytesIO()
    if (
        target == "JPEG"
    ):  # keep mode's CMYK->RGB: quality 100 and no chroma subsampling, as close to lossless as JPEG gets
        im.save(
            buf,
            "JPEG",
            quality=quality,
            **({"subsampling": 0} if opts.encoding == "keep" and not opts.reencodes else {}),
        )
    else:
        im.save(buf, "PNG")
    return buf.getvalue(), target, (h, w, channels), depth


# ---- per task ----


def encode_task(task: Task, opts: EncodeOptions) -> Result:
    """Encode one candidate; a bad image becomes a "skip" result, never an exception."""
    try:
        result = encode_image(task.path, opts)
    except SkipImage as e:
        return Result(kind="skip", reason=str(e), size=task.size)
    if task.objects is not None and (
        why := boxes.size_problem(task.objects, width=result.source_width, height=result.source_height)
    ):
        return Result(kind="skip", reason=why, size=task.size)
    if task.mask is None:
        return result
    src, out = (result.source_width, result.source_height), (result.width, result.height)
    turn, kept_turn = result.turned, result.orientation_ignored
    made = seg_masks.mask_features(task.mask, opts, source=src, turned=turn, kept_turn=kept_turn, out=out)
    if isinstance(made, str):
        return Result(kind="skip", reason=made, size=task.size)
    return replace(result, extra=made.features, mask_pixels=made.pixels)


DROPPED = "dropped"  # Result.kind of a duplicate left out by --dedupe drop (never read)


def encode_shard(
    tasks: Iterable[Task],
    opts: EncodeOptions,
    warming: Callable[[], bool] | None = None,
    hold_bytes: int = 64 * 1024 * 1024,
    drop: Container[str] = (),
) -> Iterator[Result]:
    """Encode `tasks` in order, lazily; tasks whose rel path is in `drop` are not read at all.

    Before returning, while `warming()` is true (TensorFlow still importing in the background),
    it encodes ahead and holds up to `hold_bytes` of results, so the import overlaps useful work.
    """
    results = (Result(kind=DROPPED, size=t.size) if t.rel in drop else encode_task(t, opts) for t in tasks)
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
        return _digest(read_source(path))
    except SkipImage:
        return None
