"""The conformance matrix's inputs: every Pillow mode in every format we accept, crossed with the
eight EXIF/TIFF orientations where the container can say one, plus hand-made files Pillow cannot
write (16-bit RGB PNG, 4/16-bit and RLE BMPs, GIF without a global palette, an oversized IDAT) and
damaged files whose skip reason must name what they are.

Each `Case` knows the *upright* pixels it was made from (independently of Pillow's
`exif_transpose`: the stored pixels are the upright ones put through the inverse of the
orientation with numpy), so a test can tell a record stored upright from one that is not.
"""

from __future__ import annotations

import base64
import io
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image

W, H = 24, 16  # not square: a rotation changes the shape


# Orientation o: how the stored pixels must be transformed to be displayed upright (EXIF 274).
def orient(a: np.ndarray, o: int) -> np.ndarray:
    """Display (upright) pixels of stored pixels `a` with EXIF orientation `o`."""
    return {
        1: lambda: a,
        2: lambda: a[:, ::-1],
        3: lambda: a[::-1, ::-1],
        4: lambda: a[::-1],
        5: lambda: a.swapaxes(0, 1),
        6: lambda: np.rot90(a, -1),
        7: lambda: a[::-1, ::-1].swapaxes(0, 1),
        8: lambda: np.rot90(a, 1),
    }[o]()


def unorient(a: np.ndarray, o: int) -> np.ndarray:
    """Stored pixels that display as upright `a` under orientation `o` (the inverse of `orient`)."""
    return orient(a, {6: 8, 8: 6}.get(o, o))


def upright_rgb(w: int = W, h: int = H) -> np.ndarray:
    """Smooth enough for JPEG, distinct enough per pixel that a flip or a shift is seen."""
    y, x = np.mgrid[0:h, 0:w]
    return np.stack([x * 255 // (w - 1), y * 255 // (h - 1), (x * 5 + y * 7) % 256], -1).astype(np.uint8)


def upright_gray16(w: int = W, h: int = H, lo: int = 291, hi: int = 694) -> np.ndarray:
    y, x = np.mgrid[0:h, 0:w]
    return (lo + (x * h + y) * (hi - lo) // (w * h - 1)).astype(np.uint16)


@dataclass
class Case:
    """One source file and what is true of it."""

    name: str  # file name (class folder "m")
    data: bytes
    orientation: int = 1
    lossy_source: bool = False  # JPEG / lossy WebP: pixels compared with a tolerance
    skip: str | None = None  # a regex the skip reason must match (every mode), or None: must convert
    tags: set[str] = field(default_factory=set)


def _save(im: Image.Image, fmt: str, **kw) -> bytes:
    buf = io.BytesIO()
    im.save(buf, fmt, **kw)
    return buf.getvalue()


def _exif(o: int) -> bytes:
    e = Image.Exif()
    e[0x0112] = o
    return e.tobytes()


def _mode_image(mode: str, up_rgb: np.ndarray, up16: np.ndarray) -> Image.Image:
    """An image of Pillow mode `mode` whose pixels come from the given (already oriented) arrays."""
    rgb = Image.fromarray(up_rgb, "RGB")
    if mode == "1":
        return Image.fromarray(up_rgb[..., 0] > 127)
    if mode in ("L", "LA", "RGBA", "CMYK", "YCbCr"):
        im = rgb.convert(mode)
        if mode in ("LA", "RGBA"):  # a real alpha channel, not all 255
            alpha = Image.fromarray(up_rgb[..., 2])
            im.putalpha(alpha)
        return im
    if mode == "RGB":
        return rgb
    if mode in ("P", "PA"):
        im = rgb.quantize(16)
        if mode == "PA":
            im = im.convert("PA")
            im.putalpha(Image.fromarray(up_rgb[..., 2]))
        return im
    if mode == "I;16":
        return Image.fromarray(up16)
    if mode == "I;16B":
        return Image.frombytes("I;16B", (up16.shape[1], up16.shape[0]), up16.astype(">u2").tobytes())
    if mode == "I":
        return Image.fromarray(up16.astype(np.int32) * 94, "I")  # 0..65535 range, 32-bit container
    if mode == "F":
        return Image.fromarray(up16.astype(np.float32) / 7.0, "F")  # not integers: no lossless home
    raise ValueError(mode)


def _reads_back(data: bytes) -> bool:
    """Pillow decodes the file it wrote (Pillow 12 writes uncompressed YCbCr TIFFs it cannot read; 13 can)."""
    try:
        with Image.open(io.BytesIO(data)) as im:
            im.load()
        return True
    except OSError:
        return False


def _oriented(o: int) -> tuple[np.ndarray, np.ndarray]:
    return unorient(upright_rgb(), o), unorient(upright_gray16(), o)


# ---- hand-made files Pillow cannot write ----


def _png_chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)


def png_bytes(arr: np.ndarray, color_type: int, depth: int, extra_idat: bytes = b"", chunks: list[bytes] = ()) -> bytes:
    """A PNG of `arr` (h, w[, c]) written by hand: 16-bit colour, padded IDAT, extra chunks."""
    h, w = arr.shape[:2]
    dtype = ">u2" if depth == 16 else "u1"
    rows = arr.astype(dtype).reshape(h, -1).view(np.uint8).reshape(h, -1)
    raw = b"".join(b"\0" + rows[y].tobytes() for y in range(h))
    ihdr = struct.pack(">IIBBBBB", w, h, depth, color_type, 0, 0, 0)
    return b"".join(
        [
            b"\x89PNG\r\n\x1a\n",
            _png_chunk(b"IHDR", ihdr),
            *chunks,
            _png_chunk(b"IDAT", zlib.compress(raw) + extra_idat),
            _png_chunk(b"IEND", b""),
        ]
    )


def bmp_bytes(arr: np.ndarray, bits: int, palette: np.ndarray | None = None, rle8: bool = False) -> bytes:
    """A BITMAPINFOHEADER BMP, bottom-up: 4/8-bit palette (optionally RLE8) or 16-bit 5-5-5."""
    h, w = arr.shape[:2]
    rows = []
    for y in range(h - 1, -1, -1):
        r = arr[y]
        if bits == 4:
            px = list(r) + ([0] if w % 2 else [])
            row = bytes((px[i] << 4) | px[i + 1] for i in range(0, len(px), 2))
        elif bits == 8:
            row = bytes(r.astype(np.uint8))
        else:  # 16-bit 5-5-5 from RGB
            r16 = (
                ((r[:, 0].astype(np.uint16) >> 3) << 10)
                | ((r[:, 1].astype(np.uint16) >> 3) << 5)
                | (r[:, 2].astype(np.uint16) >> 3)
            )
            row = r16.astype("<u2").tobytes()
        if rle8:
            enc = bytearray()
            for i in range(0, len(row), 255):  # encoded runs of 1 (valid, if not compact)
                for b in row[i : i + 255]:
                    enc += bytes((1, b))
            enc += b"\0\0"  # end of line
            rows.append(bytes(enc))
        else:
            rows.append(row + b"\0" * (-len(row) % 4))
    if rle8:
        rows[-1] += b"\0\1"  # end of bitmap
    pixels = b"".join(rows)
    pal = b"".join(bytes((int(c[2]), int(c[1]), int(c[0]), 0)) for c in palette) if palette is not None else b""
    info = struct.pack(
        "<IiiHHIIiiII",
        40,
        w,
        h,
        1,
        bits,
        1 if rle8 else 0,
        len(pixels),
        2835,
        2835,
        len(palette) if palette is not None else 0,
        0,
    )
    offset = 14 + len(info) + len(pal)
    return b"BM" + struct.pack("<IHHI", offset + len(pixels), 0, 0, offset) + info + pal + pixels


def tiff_rgb16_bytes(arr: np.ndarray) -> bytes:
    """An uncompressed 48-bit RGB TIFF (a scanner's), little-endian: Pillow cannot write one."""
    h, w, _ = arr.shape
    pixels = arr.astype("<u2").tobytes()
    entries = [
        (256, 4, 1, w),
        (257, 4, 1, h),
        (258, 3, 3, None),
        (259, 3, 1, 1),
        (262, 3, 1, 2),
        (273, 4, 1, None),
        (277, 3, 1, 3),
        (278, 4, 1, h),
        (279, 4, 1, len(pixels)),
        (284, 3, 1, 1),
    ]
    ifd_size = 2 + 12 * len(entries) + 4
    bits_at = 8 + ifd_size
    data_at = bits_at + 6
    out = bytearray(b"II*\0" + struct.pack("<I", 8) + struct.pack("<H", len(entries)))
    for tag, typ, count, value in entries:
        value = {258: bits_at, 273: data_at}.get(tag, value)
        out += struct.pack("<HHI", tag, typ, count) + (
            struct.pack("<HH", value, 0) if typ == 3 and count == 1 else struct.pack("<I", value)
        )
    out += struct.pack("<I", 0) + struct.pack("<HHH", 16, 16, 16) + pixels
    return bytes(out)


def gif_without_global_palette(im: Image.Image, transparency: int) -> bytes:
    """Pillow's GIF with its global colour table moved into the image descriptor (a local table)."""
    data = bytearray(_save(im, "GIF", transparency=transparency))
    packed = data[10]
    assert packed & 0x80, "Pillow wrote no global colour table"
    size = 3 * (2 << (packed & 7))
    table = bytes(data[13 : 13 + size])
    del data[13 : 13 + size]
    data[10] = packed & 0x70  # no global table
    pos = data.index(b"\x2c", 13)  # image descriptor (after the graphic control extension)
    data[pos + 9] = 0x80 | (packed & 7)  # local table, same size
    data[pos + 10 : pos + 10] = table
    return bytes(data)


def _jpeg_with_scan_damage(kind: str) -> bytes:
    """A valid JPEG whose entropy-coded data is damaged in the middle (libjpeg only warns)."""
    y, x = np.mgrid[0:96, 0:128]
    im = Image.fromarray(np.stack([x * 2, y * 2, (x + y) % 256], -1).astype(np.uint8))
    data = bytearray(_save(im, "JPEG", quality=90))
    sos = data.index(b"\xff\xda")
    start = sos + 2 + ((data[sos + 2] << 8) | data[sos + 3])
    mid = start + (len(data) - start) // 3
    if kind == "eoi":
        data[mid:mid] = b"\xff\xd9"
    elif kind == "rst":
        data[mid:mid] = b"\xff\xd3"
    elif kind == "random":
        data[mid : mid + 64] = (
            np.random.default_rng(1).integers(0, 255, 64, dtype=np.uint8).tobytes().replace(b"\xff", b"\x00")
        )
    elif kind == "truncated":
        del data[mid:]
    return bytes(data)


# An arithmetic-coded JPEG of upright_rgb() (`jpegtran -arithmetic`; no Python library writes one).
ARITHMETIC_JPEG = base64.b64decode(
    "/9j/4AAQSkZJRgABAQAAAQABAAD/2wBDAAIBAQEBAQIBAQECAgICAgQDAgICAgUEBAMEBgUGBgYFBgYGBwkIBgcJBwYGCAsICQoKCgoKBggLDAsKDAkKCgr/2wBDAQICAgICAgUDAwUKBwYHCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgr/yQARCAAQABgDASIAAhEBAxEB/8wACgAQEAUBEBEF/9oADAMBAAIRAxEAPwD/AO032QiZTnGFhzjm1lhQfH5kI/lFqhyfizjLS0b4I4mxA7/xiu9YWPrz74Wr81Idc344igujkf34AkzlQw7ZygeUjgD69reKgt5fUUftUTl2+o7p5yxo5fz/2Q=="
)


# ---- the matrix ----

PNG_MODES = ["1", "L", "L+tRNS", "LA", "P", "P+tRNS", "RGB", "RGB+tRNS", "RGBA", "I;16", "I;16+tRNS"]
TIFF_MODES = ["1", "L", "LA", "P", "PA", "I;16", "I;16B", "I", "F", "RGB", "RGBA", "CMYK", "YCbCr"]
TIFF_COMPRESSIONS = [None, "tiff_lzw", "tiff_adobe_deflate", "packbits"]
JPEG_KINDS = {
    "L": {},
    "RGB": {},
    "CMYK": {},
    "progressive": {"progressive": True},
    "444": {"subsampling": 0},
    "420": {"subsampling": 2},
}
ORIENTATIONS = range(1, 9)


def _png_case(mode: str, o: int) -> bytes:
    rgb, g16 = _oriented(o)
    base = mode.split("+")[0]
    kw: dict = {"exif": _exif(o)} if o != 1 else {}
    im = _mode_image(base, rgb, g16)
    if mode.endswith("+tRNS"):
        kw["transparency"] = {
            "L": int(rgb[0, 0, 0]),
            "P": 0,
            "RGB": tuple(int(v) for v in rgb[0, 0]),
            "I;16": int(g16[0, 0]),
        }[base]
        if base == "L":
            im = Image.fromarray(rgb[..., 0])
    return _save(im, "PNG", **kw)


def matrix() -> list[Case]:
    """Every source of the conformance matrix."""
    cases: list[Case] = []
    for o in ORIENTATIONS:
        for mode in PNG_MODES:
            cases.append(Case(f"png_{mode.replace(';', '').replace('+', '_')}_o{o}.png", _png_case(mode, o), o))
        for mode in TIFF_MODES:
            rgb, g16 = _oriented(o)
            comps = TIFF_COMPRESSIONS if o in (1, 6) else [None]
            for comp in comps:
                if comp == "packbits" and mode in ("I;16", "I;16B", "I", "F"):
                    continue
                im = _mode_image(mode, rgb, g16)
                data = _save(im, "TIFF", compression=comp, tiffinfo={274: o})
                skip = r"float" if mode == "F" else None
                if mode == "YCbCr" and comp is None and not _reads_back(data):
                    skip = r"^TIFF \(II\*\): corrupt or truncated"  # Pillow < 13 writes what it cannot read back
                cases.append(Case(f"tif_{mode.replace(';', '')}_{comp or 'raw'}_o{o}.tif", data, o, skip=skip))
        rgb, _ = _oriented(o)
        for kind, kw in JPEG_KINDS.items():
            mode = kind if kind in ("L", "CMYK") else "RGB"
            im = _mode_image(mode, rgb, None)  # type: ignore[arg-type]
            ex = {"exif": _exif(o)} if o != 1 else {}
            cases.append(Case(f"jpg_{kind}_o{o}.jpg", _save(im, "JPEG", quality=95, **kw, **ex), o, lossy_source=True))
        for kind in ("lossy", "lossless", "lossless_alpha"):
            im = _mode_image("RGBA" if "alpha" in kind else "RGB", rgb, None)  # type: ignore[arg-type]
            ex = {"exif": _exif(o)} if o != 1 else {}
            data = _save(im, "WEBP", lossless=kind != "lossy", quality=95, **ex)
            cases.append(Case(f"webp_{kind}_o{o}.webp", data, o, lossy_source=kind == "lossy"))
    rgb, g16 = upright_rgb(), upright_gray16()
    for mode in ("1", "L", "P", "RGB", "RGBA"):  # Pillow's BMP writer: 1, 8, 8, 24, 32 bit
        cases.append(Case(f"bmp_{mode}.bmp", _save(_mode_image(mode, rgb, g16), "BMP")))
    pal_im = Image.fromarray(rgb).quantize(16)
    idx, pal = np.asarray(pal_im), np.array(pal_im.getpalette()[:48]).reshape(16, 3)
    cases.append(Case("bmp_4bit.bmp", bmp_bytes(idx, 4, pal)))
    cases.append(Case("bmp_8bit_rle.bmp", bmp_bytes(idx, 8, np.vstack([pal, np.zeros((240, 3), int)]), rle8=True)))
    cases.append(Case("bmp_16bit.bmp", bmp_bytes(rgb, 16)))
    cases.append(Case("gif_P_trns.gif", _save(pal_im, "GIF", transparency=0)))
    cases.append(Case("gif_no_global_palette_trns.gif", gif_without_global_palette(pal_im, 0)))
    frames = [Image.fromarray(np.roll(rgb, 3 * i, axis=1)).quantize(16) for i in range(3)]
    buf = io.BytesIO()
    frames[0].save(buf, "GIF", save_all=True, append_images=frames[1:], duration=50)
    cases.append(Case("gif_frames.gif", buf.getvalue(), tags={"animated"}))
    cases.append(Case("png_RGB16.png", png_bytes(np.dstack([g16, g16 * 2, g16 * 3]), 2, 16), tags={"rgb16"}))
    cases.append(Case("jpg_arithmetic.jpg", ARITHMETIC_JPEG, lossy_source=True))
    cases.append(
        Case("tif_RGB16_raw.tif", tiff_rgb16_bytes(np.dstack([g16, g16 * 2, g16 * 3])), tags={"rgb16", "reduced"})
    )
    cases.append(Case("png_RGBA16.png", png_bytes(np.dstack([g16, g16 * 2, g16 * 3, g16 * 4]), 6, 16), tags={"rgb16"}))
    cases.append(Case("png_oversized_idat.png", png_bytes(rgb, 2, 8, extra_idat=b"\0" * 8_100_000)))
    bad_crc = bytearray(png_bytes(rgb, 2, 8))
    bad_crc[bad_crc.index(b"IEND") - 8] ^= 1  # the IDAT CRC: Pillow does not check it, libpng (TensorFlow) does
    cases.append(Case("png_bad_idat_crc.png", bytes(bad_crc), tags={"tf_rejects"}))
    whole = png_bytes(rgb, 2, 8)  # cut after its image data: Pillow decodes it, libpng (TensorFlow) does not
    cases.append(Case("png_no_iend.png", whole[: whole.index(b"IEND") - 4], tags={"tf_rejects"}))
    cases.append(
        Case(
            "tif_I_beyond16.tif",
            _save(Image.fromarray(upright_gray16().astype(np.int32) * 200, "I"), "TIFF"),
            skip=r"16 bits",
        )
    )
    return cases


def damaged() -> list[Case]:
    """Files that must be skipped, with the reason a regex of what they are."""
    tiff_head = b"II*\0" + struct.pack("<I", 8) + b"\xff" * 40
    png_head = b"\x89PNG\r\n\x1a\n" + b"\x13" * 40
    gif_head = b"GIF89a" + b"\x01\x00\x01\x00" + b"\xff" * 30
    sof12 = (
        b"\xff\xd8\xff\xe0\x00\x10JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00"
        + b"\xff\xc1\x00\x0b\x0c\x00\x10\x00\x10\x01\x01\x11\x00"
        + b"\xff\xda\x00\x08\x01\x01\x00\x00\x3f\x00"
        + b"\x00" * 64
        + b"\xff\xd9"
    )
    return [
        Case("bad_tiff_header.tif", tiff_head, skip=r"^TIFF \(II\*\)"),
        Case("bad_png_header.png", png_head, skip=r"^PNG"),
        Case("bad_gif_header.gif", gif_head, skip=r"^GIF"),
        Case("jpeg_12bit.jpg", sof12, skip=r"12-bit JPEG"),
        Case("html.jpg", b"<!DOCTYPE html><html><body>404</body></html>\n", skip=r"not an image: content is HTML"),
        Case("jpeg_eoi_in_scan.jpg", _jpeg_with_scan_damage("eoi"), skip=r"(?i)corrupt|premature|truncat"),
        Case("jpeg_rst_in_scan.jpg", _jpeg_with_scan_damage("rst"), skip=r"(?i)corrupt|premature|truncat"),
        Case("jpeg_random_in_scan.jpg", _jpeg_with_scan_damage("random"), skip=r"(?i)corrupt|premature|truncat"),
        Case("jpeg_truncated.jpg", _jpeg_with_scan_damage("truncated"), skip=r"(?i)corrupt|premature|truncat"),
    ]


# ---- issue 19: what real-world files showed (generated here; no third-party file is committed) ----


def _jpeg_segments(data: bytes) -> list[tuple[int, int]]:
    """(offset, marker) of each segment from SOI up to and including the first SOS."""
    out, pos = [], 2
    while True:
        marker, length = data[pos + 1], struct.unpack(">H", data[pos + 2 : pos + 4])[0]
        out.append((pos, marker))
        if marker == 0xDA:
            return out
        pos += 2 + length


def _junk_before(data: bytes, marker: int, junk: bytes = b"\x00\x13\x37\x00\x42") -> bytes:
    """`junk` inserted before the first segment with `marker` (libjpeg: "N extraneous bytes before marker")."""
    pos = next(p for p, m in _jpeg_segments(data) if m == marker)
    return data[:pos] + junk + data[pos:]


def _with_segment(data: bytes, marker: int, body: bytes) -> bytes:
    """`data` with an APPn segment of `body` right after SOI."""
    return data[:2] + bytes([0xFF, marker]) + struct.pack(">H", len(body) + 2) + body + data[2:]


def bad_samples_per_pixel_tiff() -> bytes:
    """A TIFF whose SamplesPerPixel is 303169682: Pillow logs `More samples per pixel than can be
    decoded` (logger.error) while it reads it, then raises."""
    d = bytearray(_save(Image.fromarray(upright_rgb()), "TIFF"))
    ifd = struct.unpack_from("<I", d, 4)[0]
    for i in range(struct.unpack_from("<H", d, ifd)[0]):
        if struct.unpack_from("<H", d, ifd + 2 + 12 * i)[0] == 277:
            struct.pack_into("<HHII", d, ifd + 2 + 12 * i, 277, 4, 1, 303169682)
    return bytes(d)


def bmp_v5(rgb: np.ndarray, profile: bytes = b"") -> bytes:
    """A 24-bit BMP with a BITMAPV5HEADER; `profile`: an embedded ICC profile after the pixel rows
    (tf.io.decode_bmp refuses any byte after them: "Input size should match")."""
    h, w, _ = rgb.shape
    row = (w * 3 + 3) // 4 * 4
    pixels = b"".join(rgb[y, :, ::-1].tobytes().ljust(row, b"\0") for y in range(h - 1, -1, -1))
    off = 14 + 124
    cstype, prof_off = (b"DEBM", 124 + len(pixels)) if profile else (b"BGRs", 0)  # PROFILE_EMBEDDED / sRGB
    info = struct.pack("<IiiHHIIiiII", 124, w, h, 1, 24, 0, len(pixels), 2835, 2835, 0, 0)
    info += (
        struct.pack("<IIII", 0, 0, 0, 0)
        + cstype[::-1]
        + b"\0" * 48
        + struct.pack("<IIII", 4, prof_off, len(profile), 0)
    )
    body = info + pixels + profile
    return b"BM" + struct.pack("<IHHI", 14 + len(body), 0, 0, off) + body


CLEAN_JPEG: dict[str, bytes] = {}  # name -> the JPEG before it was damaged (release_cases fills it)


def release_cases() -> list[Case]:
    """Issue 19's real-world failures, one generated file each."""
    rgb = upright_rgb()
    plain = _save(Image.fromarray(rgb), "JPEG", quality=95)
    with_exif = _save(Image.fromarray(rgb), "JPEG", quality=95, exif=_exif(1))
    restarts = _save(Image.fromarray(rgb), "JPEG", quality=95, restart_marker_blocks=1)
    rst = restarts.index(b"\xff\xd0")
    icc = b"ICC_PROFILE\0" + bytes([0, 1]) + b"not a profile"  # sequence number 0: "bad ICC marker"
    header_only = {"must_keep"}  # libjpeg only warns; TensorFlow decodes the file's own bytes to the same pixels
    for name in ("jpg_junk_before_dqt.jpg", "jpg_junk_before_dht.jpg", "jpg_bad_icc.jpg", "jpg_truncated_exif.jpg"):
        CLEAN_JPEG[name] = plain
    CLEAN_JPEG["jpg_junk_before_app1.jpg"] = with_exif
    return [
        Case("jpg_junk_before_dqt.jpg", _junk_before(plain, 0xDB), lossy_source=True, tags=header_only),
        Case("jpg_junk_before_dht.jpg", _junk_before(plain, 0xC4), lossy_source=True, tags=header_only),
        Case("jpg_junk_before_app1.jpg", _junk_before(with_exif, 0xE1), lossy_source=True, tags=header_only),
        Case("jpg_bad_icc.jpg", _with_segment(plain, 0xE2, icc), lossy_source=True, tags=header_only),
        Case(
            "jpg_truncated_exif.jpg", _with_segment(plain, 0xE1, b"Exif\0\0MM\0"), lossy_source=True, tags=header_only
        ),
        Case(
            "jpg_junk_before_rst.jpg",
            restarts[:rst] + b"\x5a\xa5\x5a" + restarts[rst:],
            skip=r"^JPEG: corrupt or truncated: .*extraneous bytes before marker 0xd0",
        ),
        Case("bmp_v5.bmp", bmp_v5(rgb), tags={"must_keep"}),
        Case("bmp_v5_profile.bmp", bmp_v5(rgb, b"\0\0\x01\x00ICC-profile-bytes" * 4)),
        Case(
            "tif_bad_samples_per_pixel.tif", bad_samples_per_pixel_tiff(), skip=r"^TIFF \(II\*\): .*samples per pixel"
        ),
    ]


def write(cases: list[Case], root: Path, cls: str = "m") -> dict[str, Case]:
    """Write the cases under root/cls/; returns {file name: case}."""
    d = root / cls
    d.mkdir(parents=True, exist_ok=True)
    for c in cases:
        (d / c.name).write_bytes(c.data)
    return {c.name: c for c in cases}


MakeCases = Callable[[], list[Case]]
