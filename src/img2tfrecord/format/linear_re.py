"""A user's regular expression run in linear time: Python's syntax and meaning, RE2's engine.

A pattern such as `(a+)+$` takes Python's backtracking `re` exponential time on a long name, and
`--split-group` is recorded in dataset.json for every later update. RE2 (google-re2) never
backtracks; it has no backreferences or lookaround, and such a pattern is refused up front.

A pattern is Python's: it must compile with `re` too, and means what it meant there, so a recorded
pattern gives the same groups as before. Where RE2 reads a piece of Python's syntax otherwise, the
piece is rewritten before RE2 sees it: `\\w`, `\\d`, `\\s` and their negations become the exact
character sets Python gives them (Unicode, from Python's own tables: RE2's are ASCII), `\\Z` is
RE2's `\\z`, `\\uXXXX`/`\\UXXXXXXXX` are `\\x{...}`, `{,n}` is `{0,n}` (RE2: literal text).
Python's `$` also matches before a final newline, RE2's only at the end (a path ending in a newline). `\\b` and `\\B` stay RE2's (ASCII word characters).
"""

from __future__ import annotations

import functools
import re
import sys
import warnings
from typing import NamedTuple

from img2tfrecord.errors import UsageError

#: what RE2 does not do, named in the refusal
UNSUPPORTED = "backreferences, lookahead/lookbehind, conditionals and the (?x)/(?a) flags are not supported"
_SURROGATE = re.compile("[\ud800-\udfff]")
_UPTO = re.compile(r"\{,(?=\d+\})")


class Found(NamedTuple):
    """A match's spans, group 0 first (None for a group that took no part), in characters."""

    text: str
    spans: tuple[tuple[int, int] | None, ...]

    def group(self, i: int = 0) -> str | None:
        span = self.spans[i]
        return None if span is None else self.text[span[0] : span[1]]


class LinearPattern:
    """A compiled pattern: `pattern` as the user gave it, `groups` its number of groups, `search`."""

    __slots__ = ("_re2", "groups", "pattern")

    def __init__(self, pattern: str, engine: object, groups: int) -> None:
        self.pattern = pattern
        self.groups = groups
        self._re2 = engine

    def search(self, text: str) -> Found | None:
        """The leftmost match in `text`, as Python's `re.search` finds it. A lone surrogate (a name
        that is not UTF-8 on disk) is searched as U+FFFD: one character for one, so spans are the
        same; neither is a word, digit or space character."""
        safe = text if text.isascii() else _SURROGATE.sub("\ufffd", text)
        m = self._re2.search(safe)  # type: ignore[attr-defined]
        if m is None:
            return None
        spans = tuple(None if m.start(i) < 0 else (m.start(i), m.end(i)) for i in range(self.groups + 1))
        return Found(text, spans)

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (compile_linear, (self.pattern,))


def compile_linear(pattern: str, what: str = "pattern") -> LinearPattern:
    """`pattern` compiled for RE2; UsageError (one line, naming `what`) for one that is not a
    regular expression or uses what RE2 cannot run."""
    try:
        with warnings.catch_warnings():  # re's FutureWarnings (e.g. "possible nested set") are not the user's business
            warnings.simplefilter("ignore")
            groups = re.compile(pattern).groups
    except (re.error, OverflowError, RecursionError) as e:
        raise UsageError(f"bad {what}: not a regular expression ({e})") from None
    import re2  # google-re2

    options = re2.Options()
    options.log_errors = False  # its C++ log would reach stderr
    options.max_mem = 64 << 20  # a few `\w` sets are big automata
    try:
        engine = re2.compile(_translate(pattern), options)
    except (re2.error, UnicodeEncodeError, ValueError) as e:
        reason = e.args[0].decode("utf-8", "replace") if e.args and isinstance(e.args[0], bytes) else str(e)
        raise UsageError(
            f"bad {what}: RE2, which runs it without backtracking, refuses it ({reason}): {UNSUPPORTED}"
        ) from None
    if engine.groups != groups:  # a translation slip must not change which group is the group
        raise UsageError(f"bad {what}: {UNSUPPORTED} (it reads as {engine.groups} groups, not {groups})")
    return LinearPattern(pattern, engine, groups)


def _translate(pattern: str) -> str:
    """Python's pattern in RE2's syntax, with Python's meaning (see the module's docstring)."""
    out: list[str] = []
    i, n = 0, len(pattern)
    in_class = False
    while i < n:
        c = pattern[i]
        if c == "\\" and i + 1 < n:
            e = pattern[i + 1]
            if e in "dwsDWS":
                out.append(_shorthand(e, in_class))
            elif e == "Z" and not in_class:
                out.append(r"\z")
            elif e in "uU":
                width = 4 if e == "u" else 8
                digits = pattern[i + 2 : i + 2 + width]
                out.append(f"\\x{{{digits}}}")
                i += width
            else:
                out.append(pattern[i : i + 2])
            i += 2
            continue
        if in_class:
            if c == "]":
                in_class = False
            elif c == "[":
                c = r"\["  # Python: a literal `[`; RE2: `[:alpha:]` would be a POSIX class
            out.append(c)
            i += 1
            continue
        if c == "[":
            j = i + 1
            if pattern[j : j + 1] == "^":
                j += 1
            if pattern[j : j + 1] == "]":  # a first `]` is literal, in both
                j += 1
            out.append(pattern[i:j])
            in_class = True
            i = j
            continue
        if c == "{" and (m := _UPTO.match(pattern, i)):
            out.append("{0,")  # Python's `{,n}` is `{0,n}`; RE2 reads `{,n}` as text
            i = m.end()
            continue
        out.append(c)
        i += 1
    return "".join(out)


def _shorthand(letter: str, in_class: bool) -> str:
    """`\\w`, `\\d`, `\\s` (or a negation) as Python's set of characters, inside or outside a class."""
    ranges = _sets()[letter.lower()]
    if letter.isupper():
        ranges = _complement(ranges)
    body = "".join(_range_text(a, b) for a, b in ranges)
    return body if in_class else f"[{body}]"


@functools.cache
def _sets() -> dict[str, tuple[tuple[int, int], ...]]:
    """The code point ranges Python's `re` gives `\\w`, `\\d` and `\\s` in a str pattern, read from
    `re` itself over every code point (not surrogates: RE2 reads UTF-8)."""
    pieces = ("".join(map(chr, range(0xD800))), "".join(map(chr, range(0xE000, sys.maxunicode + 1))))
    return {
        letter: tuple(
            (ord(m.group()[0]), ord(m.group()[-1])) for piece in pieces for m in re.finditer("\\" + letter + "+", piece)
        )
        for letter in "wds"
    }


def _complement(ranges: tuple[tuple[int, int], ...]) -> tuple[tuple[int, int], ...]:
    out: list[tuple[int, int]] = []
    at = 0
    for a, b in ranges:
        if a > at:
            out.append((at, a - 1))
        at = b + 1
    if at <= sys.maxunicode:
        out.append((at, sys.maxunicode))
    # RE2 reads UTF-8, in which surrogates do not occur: leave them out
    cut = [(a, min(b, 0xD7FF)) for a, b in out if a < 0xD800] + [(max(a, 0xE000), b) for a, b in out if b > 0xDFFF]
    return tuple(sorted(set(cut)))


def _range_text(a: int, b: int) -> str:
    return f"\\x{{{a:X}}}" if a == b else f"\\x{{{a:X}}}-\\x{{{b:X}}}"
