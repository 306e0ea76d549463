"""Why a file is not what it should be, said by position and kind, never by its bytes.

A parser's own message may quote the file (yajl's `lexical error ... root:x:0:0:root ... (right
here) ------^`, Python's `invalid literal for int() with base 10: 'root:x'`): a file named in an
edited dataset.json, an `--annotations` or a metadata file may be any file on the machine, and
its content must not reach a terminal, a CI log or a `--json` object. Each reader says what kind
of thing is wrong and where (line and column, or byte), as these functions phrase it.
"""

from __future__ import annotations

import json


def parse_error(e: BaseException) -> str:
    """What `e`, raised by json.loads (or a reader's int()/float() of the file's text), says,
    without the file's text: the kind of problem and its position."""
    if isinstance(e, json.JSONDecodeError):  # its msg is json's own fixed words; doc/pos the file
        return f"{e.msg} at line {e.lineno:,}, column {e.colno:,}"
    if isinstance(e, UnicodeDecodeError):  # its str quotes the byte: name its position only
        return f"not UTF-8 text (byte {e.start:,})"
    if isinstance(e, RecursionError):
        return "nested too deeply"
    if isinstance(e, ValueError) and "integer string conversion" in str(e):
        return "a number of more digits than Python reads (4,300)"
    return f"a value of the wrong kind ({type(e).__name__})"
