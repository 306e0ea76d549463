"""Fonts for the contact sheet's class names: one that has a glyph for every character, or an
honest fallback.

Pillow's scalable default font (`ImageFont.load_default(size)`, Pillow >= 10.1) covers Latin,
Greek and Cyrillic (`ünï cödé`) but not CJK (`日本の猫` comes out as empty boxes), and no
well-kept Python package ships a CJK font (one is 15-20 MB; the PyPI ones are 0.0.1 wrappers),
so none is a dependency. Instead, for characters the default font lacks, fontconfig (`fc-list`,
where installed) is asked for an installed font that covers them (Debian: fonts-noto-cjk,
fonts-ipafont-gothic, fonts-wqy-zenhei). A character no font covers is drawn as its `\\uXXXX`
escape, never as a box, and the report counts such names.

Coverage is tested by drawing: a character whose bitmap equals the font's "missing glyph"
(that of a private-use code point no font has) is missing.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
from dataclasses import dataclass
from typing import Any

SIZE = 14
# Words in a font's file name that mark a style other than a plain sans: the plain one is preferred.
_NOT_PLAIN = ("bold", "italic", "oblique", "mono", "math", "light", "condensed", "serif", "mincho", "ming")
_SANS = ("dejavusans.", "notosans-regular", "notosanscjk-regular", "liberationsans-regular")
_NOTDEF = "\U0010fffd"  # plane 16 private use: no font has it, so it draws the missing-glyph box


@dataclass(frozen=True)
class Label:
    """A class name as drawn: the text (escapes for characters no font has), its font, and
    whether any character had to be escaped."""

    text: str
    font: Any
    font_name: str
    escaped: bool


@functools.cache
def default_font() -> Any:
    from PIL import ImageFont

    try:
        return ImageFont.load_default(size=SIZE)
    except TypeError:  # Pillow < 10.1: the bitmap font (ASCII only)
        return ImageFont.load_default()


@functools.cache
def _font_file(path: str) -> Any:
    from PIL import ImageFont

    return ImageFont.truetype(path, SIZE)


def _bitmap(font: Any, ch: str) -> bytes:
    from PIL import Image, ImageDraw

    im = Image.new("L", (3 * SIZE, 2 * SIZE))
    ImageDraw.Draw(im).text((2, 2), ch, font=font, fill=255)
    return im.tobytes()


@functools.lru_cache(maxsize=8192)
def _covers(font: Any, ch: str) -> bool:
    """True when `font` has a glyph for `ch` (blank characters count as covered)."""
    if ch.isspace() or ch.isascii():
        return True
    return _bitmap(font, ch) != _bitmap(font, _NOTDEF)


def _covers_all(font: Any, text: str) -> bool:
    return all(_covers(font, ch) for ch in text)


@functools.lru_cache(maxsize=256)
def installed_fonts(chars: str) -> tuple[str, ...]:
    """Font files fontconfig says cover every one of `chars`; () without fontconfig."""
    fc = shutil.which("fc-list")
    if fc is None or not chars:
        return ()
    charset = " ".join(f"{ord(c):x}" for c in sorted(set(chars)))
    try:
        out = subprocess.run(
            [fc, f":charset={charset}", "file"], capture_output=True, text=True, timeout=10, check=False
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return ()
    files = {line.strip().rstrip(":") for line in out.splitlines() if line.strip()}
    fonts = [f for f in files if f.lower().endswith((".ttf", ".otf", ".ttc", ".otc"))]
    return tuple(sorted(fonts, key=_preference))


def _preference(path: str) -> tuple[int, int, str]:
    """Sort key of a font file: a common plain sans first, then plain styles, then the rest."""
    name = path.lower().rsplit("/", 1)[-1]
    return (not name.startswith(_SANS), sum(w in name for w in _NOT_PLAIN), path)


def label(text: str) -> Label:
    """How to draw `text`: the default font if it has every glyph, else an installed font that
    has them all, else the default font with the missing characters escaped."""
    font = default_font()
    missing = "".join(dict.fromkeys(ch for ch in text if not _covers(font, ch)))
    if not missing:
        return Label(text, font, "default", False)
    for path in installed_fonts(missing):
        try:
            other = _font_file(path)
        except OSError:
            continue
        if _covers_all(other, text):
            return Label(text, other, path, False)
    shown = "".join(ch if ch not in missing else _escape(ch) for ch in text)
    return Label(shown, font, "default", True)


def _escape(ch: str) -> str:
    """`\\u00fc`, `\\u65e5` (`\\U0001f431` past the BMP): the code point, whatever the character."""
    n = ord(ch)
    return f"\\u{n:04x}" if n < 0x10000 else f"\\U{n:08x}"
