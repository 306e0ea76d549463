"""Text for the terminal: names from files and records shown escaped, the same way everywhere.

A file name may hold a newline (splitting a message in two), a terminal escape sequence (which
the terminal runs instead of showing, so the name on screen is not the real one) or a bidi
override. `inspect`'s tables, convert's skip and warning messages and every `error:` line show
such characters as Python escapes (`\\n`, `\\x1b`, `\\u202e`); dataset.json holds the real name.
"""

from __future__ import annotations

import re

from img2tfrecord.errors import wording

# Control characters (newlines, terminal escapes) and bidi overrides: shown escaped.
_UNSAFE = re.compile(r"[\x00-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069]")


def safe(text: str) -> str:
    """`text` made harmless for a terminal: one line, no escape sequences, every character visible.
    Option markers a library message still holds are worded for the CLI first (`--dedupe drop`),
    so no message reaches the terminal as `\x1d...`, whichever path it took."""
    text = wording(text, cli=True)
    return _UNSAFE.sub(lambda m: m[0].encode("unicode_escape").decode("ascii"), text)


def safe_lines(text: str) -> str:
    """`safe` for each line of a message we made multi-line ourselves (a dry run's plan)."""
    return "\n".join(map(safe, text.split("\n")))


def size_text(n: float, per: str = "") -> str:
    """Bytes in a unit that shows a number ("850 KB", "120 bytes", not "0.0 MB"); MB at most, to
    compare runs at a glance."""
    for unit, size in (("MB", 1e6), ("KB", 1e3)):
        if n >= size:
            return f"{n / size:,.1f} {unit}{per}"
    return f"{n:.0f} bytes{per}"
