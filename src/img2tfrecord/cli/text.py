"""Text for the terminal: names from files and records shown escaped, the same way everywhere.

A file name may hold a newline (splitting a message in two), a terminal escape sequence (which
the terminal runs instead of showing, so the name on screen is not the real one) or a bidi
override. `inspect`'s tables, convert's skip and warning messages and every `error:` line show
such characters as Python escapes (`\\n`, `\\x1b`, `\\u202e`); dataset.json holds the real name.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import sys
import textwrap

import click

from img2tfrecord.errors import plural, size_text, wording

__all__ = [
    "report",
    "safe",
    "safe_lines",
    "size_text",
    "skipped_text",
]  # size_text: errors' one formatter of sizes, for the commands

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


def report(text: str, err: bool) -> None:
    """Print the summary of a command whose work is done (published): a stream that cannot take it
    (its disk full, a closed pipe) loses the text but not the exit code, which says what happened.

    The stream that failed is swapped for os.devnull, so Python's flush at exit fails no more."""
    try:
        stream = sys.stderr if err else sys.stdout
        click.echo(fit_to_terminal(text, stream), err=err)
        if stream is not None:
            stream.flush()
    except OSError:
        with contextlib.suppress(OSError):
            sink = open(os.devnull, "w")  # noqa: SIM115 - the process's stream from now on
            if err:
                sys.stderr = sink
            else:
                sys.stdout = sink


_COMMAND = re.compile(r"(^|: )img2tfrecord [a-z]")


def fit_to_terminal(text: str, stream: object) -> str:
    """`text` wrapped at word boundaries to the terminal's width when `stream` is a terminal (the
    terminal itself would break a long summary mid-word: "(122 imag" / "es/s"); a continued line
    is indented two more than its first. Piped or captured output stays one line per fact, for
    scripts that grep it. A word longer than the width (a path) is left whole, and so is a line
    that gives a command to run (`See it in a browser: img2tfrecord report out`): copied, it is one."""
    isatty = getattr(stream, "isatty", None)
    if isatty is None or not isatty():
        return text
    width = shutil.get_terminal_size().columns - 1  # a line as wide as the terminal makes some wrap twice
    if width < 20:
        return text
    lines = []
    for line in text.split("\n"):
        if _COMMAND.search(line):
            lines.append(line)
            continue
        indent = line[: len(line) - len(line.lstrip(" "))]
        wrapped = textwrap.wrap(
            line, width, subsequent_indent=indent + "  ", break_long_words=False, break_on_hyphens=False
        )
        lines.extend(wrapped or [line])
    return "\n".join(lines)


def skipped_text(n: int, *, boxes: bool) -> str:
    """'3 unusable images'; with annotations read (`boxes`), '3 unusable images or annotations': a
    COCO annotation of no image, or an `images` entry no image can take, is skipped there too."""
    if boxes:
        return plural(n, "unusable image or annotation", "unusable images or annotations")
    return plural(n, "unusable image")
