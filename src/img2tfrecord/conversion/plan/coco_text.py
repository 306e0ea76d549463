"""A COCO file's bytes as JSON text, one rule for both of conversion.plan.coco's parsers.

A small file is parsed whole by `json`, a large one streamed by ijson's yajl; left alone they
disagree: `json` takes `1e400` (as inf), integers past 64 bits, UTF-16 text, two byte-order marks
and lone surrogate escapes (`"\\ud800"`, which yajl turns into `?`), yajl takes a form feed as
space; and their errors differ (yajl's carry the file's text as ASCII art). So the rule is the
stream's (yajl's grammar: RFC 8259 JSON in UTF-8, one BOM allowed, numbers within a double and an
int64) made strict where yajl is lax: `Source` checks the bytes as either parser reads them (no
control byte outside JSON's whitespace, no surrogate, no second BOM), the whole parse hands any
file it is unsure of to the stream (`whole_is_safe`), and every error is told by position, the
same for both (`located`): the first byte where the text stops being such JSON.
"""

from __future__ import annotations

import re
from typing import IO, NamedTuple

import ijson
import xxhash

BOM = b"\xef\xbb\xbf"
_CONTROL = bytes(b for b in range(32) if b not in (9, 10, 13))  # JSON's whitespace is tab, LF, CR and space
_NOT_CONTROL = bytes(b for b in range(256) if b not in _CONTROL)
_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")  # a surrogate's escape (maybe one of a pair)
_LOW = re.compile(rb"\\u[dD][c-fC-F][0-9a-fA-F]{2}")
_DIGITS = bytes.maketrans(b"123456789E", b"000000000e")
_NUMBER_END = frozenset(b",]} \t\r\n")
_KEEP = 12  # bytes held back at a chunk's end: a surrogate escape and its pair's
CHUNK = 64 * 1024  # ijson's read size


class Problem(NamedTuple):
    """Where the text stops being JSON this tool reads, and why (no byte of it quoted)."""

    offset: int  # bytes into the file
    reason: str


class Source:
    """The file as both parsers read it: hashed on the way (one read for the parse and the digest),
    a UTF-8 BOM dropped as the text readers drop it, and checked (`problem`: the first byte that
    is not JSON either parser would read alike, noted, not raised: the stream's own error may
    come first)."""

    def __init__(self, f: IO[bytes], name: str) -> None:
        self._f = f
        self.hash = xxhash.xxh3_128(name.encode("utf-8", "surrogateescape") + b"\0")
        self.offset = 0  # bytes read from the file
        self.problem: Problem | None = None
        self._held = b""  # the last bytes read, not yet checked (their escapes' pairs may come next)
        self._slashes = 0  # backslashes just before `_held`

    def read(self, size: int = -1) -> bytes:
        data = self._f.read(size)
        self.hash.update(data)
        start = self.offset
        self.offset += len(data)
        if start == 0:
            if data[:2] in (b"\xff\xfe", b"\xfe\xff"):
                self._note(0, "UTF-16 or UTF-32 text, not UTF-8 (save the file as UTF-8)")
            if data.startswith(BOM):
                data = data[3:]
                start = 3
                if data.startswith(BOM):
                    self._note(3, "a second byte-order mark")
        self._check(start, data, at_end=not data or size < 0)
        return data

    def _note(self, offset: int, reason: str) -> None:
        if self.problem is None or offset < self.problem.offset:
            self.problem = Problem(offset, reason)

    def _check(self, start: int, data: bytes, at_end: bool) -> None:
        """Check `data` (read at `start`) with the bytes held from the last read."""
        if self.problem is not None:
            return
        buf = self._held + data
        base = start - len(self._held)
        done = len(buf) if at_end else max(0, len(buf) - _KEEP)
        if data.translate(None, _NOT_CONTROL):
            i = next(i for i, b in enumerate(data) if b in _CONTROL)
            what = "a NUL byte (UTF-16 or binary, not UTF-8 text)" if data[i] == 0 else "a control character"
            self._note(start + i, f"{what} where JSON allows none")
        i = buf.find(b"\xed", 0, done)
        while i >= 0:
            if i + 1 < len(buf) and 0xA0 <= buf[i + 1] <= 0xBF:
                self._note(base + i, "a UTF-16 surrogate encoded as UTF-8 (not UTF-8 text)")
                break
            i = buf.find(b"\xed", i + 1, done)
        self._escapes(buf, base, done)
        rest = buf[:done]
        run = len(rest) - len(rest.rstrip(b"\\"))
        self._slashes = run + self._slashes if run == len(rest) else run
        self._held = buf[done:]

    def _escapes(self, buf: bytes, base: int, done: int) -> None:
        """A lone surrogate's escape in buf[:done] (a pair's is one character: fine)."""
        pos = 0
        while (m := _ESCAPE.search(buf, pos, done + 6)) is not None and m.start() < done:
            i = m.start()
            j = i
            while j and buf[j - 1] == 0x5C:  # backslashes before it
                j -= 1
            if (i - j + (self._slashes if j == 0 else 0)) % 2:  # an escaped backslash, then `u`
                pos = i + 1
                continue
            if buf[i + 2 : i + 3] in b"dD" and buf[i + 3 : i + 4] in b"89abAB" and _LOW.match(buf, i + 6):
                pos = i + 12  # a pair
                continue
            self._note(base + i, "a lone UTF-16 surrogate escape (no Unicode character)")
            return


def whole_is_safe(data: bytes) -> bool:
    """Whether `json.loads` of `data` (checked by `Source`) reads what the stream would: no number
    that yajl refuses (past an int64, or past a double's range, which json makes inf). False
    for any such number, and for a few texts that only look like one (they are streamed)."""
    digits = data.translate(_DIGITS)
    if b"0" * 19 in digits:
        return False
    for exp in (b"e000", b"e+000"):
        i = digits.find(exp)
        while i >= 0:
            end = i + len(exp)
            while end < len(digits) and digits[end] == 0x30:
                end += 1
            if i and digits[i - 1] in b"0." and (end == len(digits) or digits[end] in _NUMBER_END):
                return False
            i = digits.find(exp, i + 1)
    return True


def located(path: str, error: BaseException, failed_after: int, problem: Problem | None) -> str:
    """The stream's `error` (raised once `failed_after` bytes were read) as one line naming its
    position: the first of the checks' `problem` and the byte where yajl fails, found by reading
    the file again and handing yajl the failing chunk a byte at a time."""
    start = max(0, failed_after - CHUNK)
    if problem is not None and problem.offset < start:
        return at(path, problem)
    fed = _Feed(open(path, "rb"), start)
    try:
        with fed.f:
            for _ in ijson.basic_parse(fed, use_float=True):
                pass
    except (ijson.JSONError, ValueError, RecursionError) as e:
        error = e
    offset = max(0, fed.offset - 1)
    if problem is not None and problem.offset <= offset:
        return at(path, problem)
    return at(path, Problem(offset, _reason(error)))


def _reason(error: BaseException) -> str:
    """yajl's own words without the file's text it draws beneath them."""
    if isinstance(error, UnicodeError):
        return "not UTF-8 text"
    text = error.args[0] if error.args else ""
    text = (text.decode("utf-8", "replace") if isinstance(text, bytes) else str(text)).strip()
    first = text.splitlines()[0] if text else type(error).__name__
    for prefix in ("parse error: ", "lexical error: "):
        first = first.removeprefix(prefix)
    return first.rstrip(".")


class _Feed:
    """The file in ijson's chunks up to `slow`, then a byte at a time: where yajl fails is then
    the byte last read."""

    def __init__(self, f: IO[bytes], slow: int) -> None:
        self.f, self._slow, self.offset = f, slow, 0
        if f.read(3) == BOM:  # dropped, as Source drops it
            self.offset = 3
        else:
            f.seek(0)

    def read(self, size: int = -1) -> bytes:
        if size == 0:  # ijson's first read asks for nothing (to tell bytes from text)
            return b""
        n = min(size, self._slow - self.offset) if self.offset < self._slow else 1
        data = self.f.read(n)
        self.offset += len(data)
        return data


def at(path: str, problem: Problem) -> str:
    """`problem` with its line and column (bytes from 1), counted by reading the file again."""
    line, last_newline, done = 1, -1, 0
    with open(path, "rb") as f:
        while done < problem.offset:
            chunk = f.read(min(CHUNK, problem.offset - done))
            if not chunk:
                break
            n = chunk.count(b"\n")
            if n:
                line += n
                last_newline = done + chunk.rindex(b"\n")
            done += len(chunk)
    return f"{problem.reason} at line {line}, column {problem.offset - last_newline} (byte {problem.offset})"
