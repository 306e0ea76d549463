"""Per-image metadata: Hugging Face `imagefolder`'s `metadata.jsonl` / `metadata.csv`.

A metadata file at the top of INPUT (or `--metadata FILE`) has one row per image, keyed by
`file_name` (the image's path below INPUT); its other columns become features `image/<column>`
of that image's record. Each column has one type over the whole file (int64, float or bytes, as a
scalar or a list), inferred here once, so TensorFlow's parser can be given one spec: ints that
meet a float make the column float; strings beside numbers, or lists beside scalars, are a usage
error. A `labels` column of lists of class names makes multi-label records
(`image/class/label` and `image/class/text` become lists), and frees the images from class folders.

What a row cannot give (no `file_name`, not a JSON object, a value of no usable type, a value
missing) is a skip of that row, named `metadata.jsonl:LINE`, as the walk's skips are; an image with
no row is skipped by the walk (`walk.discover`), since every record must hold every declared feature.
This module only reads the file; the values are written by `format.schema.serialize_example`.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import re
from array import array
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import xxhash

from img2tfrecord import fs
from img2tfrecord.conversion.plan.labels import read_text_input
from img2tfrecord.conversion.plan.table import decode_name
from img2tfrecord.errors import UsageError, option, plural
from img2tfrecord.format.manifest import class_name_problem, shown
from img2tfrecord.format.parse_errors import parse_error
from img2tfrecord.format.schema import FEATURE_TYPES, MetaValue, filename_problem, utf8_text

METADATA_NAMES = ("metadata.jsonl", "metadata.csv")
MAX_METADATA_BYTES = 2_000_000_000
KEY = "file_name"
LABELS = "labels"
_INT64 = 1 << 63
_FLOAT32_OVERFLOW = 3.4028234663852886e38 + 2.0**103  # a float32 cast rounds this and above to infinity
_NUMBER = re.compile(r"[+-]?\d+")
_SURROGATE = re.compile("[\ud800-\udfff]")
_INT64_DIGITS = 19  # 2**63 has 19 digits: a longer whole number is beyond int64 before it is parsed


class _Unusable(NamedTuple):
    """A value read but not usable, with why (a whole number of 5,000 digits: Python's int() refuses
    more than 4,300, and int64 holds 19): its row is a skip with this reason."""

    why: str


def _whole_number(text: str) -> int | _Unusable:
    """A whole number's text as an int, or _Unusable when it has more digits than int64 holds."""
    digits = len(text.lstrip("+-").lstrip("0"))
    if digits > _INT64_DIGITS:
        return _Unusable(f"a whole number of {digits:,} digits is beyond an int64's range (-2**63 to 2**63-1)")
    return int(text)


def _json(text: str) -> Any:
    """`json.loads` with long whole numbers as _Unusable (not Python's digit-limit ValueError);
    ValueError for what is not JSON, RecursionError for what is nested too deep for Python."""
    return json.loads(text, parse_int=_whole_number)


class Column(NamedTuple):
    """One metadata column as dataset.json declares it: its feature kind and whether it is a list."""

    name: str
    kind: str  # int64 | float | bytes
    is_list: bool

    @property
    def key(self) -> str:
        return "image/" + self.name


@dataclass
class Metadata:
    """A metadata file read: its columns, each image's values (by rel path, as bytes) and what was skipped."""

    path: str  # as found or given
    name: str  # its base name, for reasons ("no row in metadata.jsonl")
    digest: str  # xxh3_128 of its bytes: `update` refuses a dataset whose metadata changed
    given: bool  # --metadata named it (else found at the top of INPUT)
    columns: list[Column]
    rows: dict[bytes, tuple[Any, ...]]  # rel -> one value per column (converted to the column's kind; text as str)
    labels: dict[bytes, list[str]] | None = None  # rel -> class names, when a `labels` column is there
    skipped: list[dict[str, str]] = field(default_factory=list)
    refused: set[bytes] = field(default_factory=set)  # rels whose row is a skip already (its reason said once)

    def entry(self) -> dict[str, Any]:
        """dataset.json's `metadata` entry."""
        return {
            "file": self.name if not self.given else self.path,
            "xxh3_128": self.digest,
            "columns": {c.name: {"type": c.kind, "list": c.is_list} for c in self.columns},
            "multi_label": self.labels is not None,
        }

    def values(self, rel: bytes) -> tuple[MetaValue, ...]:
        """The (key, kind, values) of one image's metadata features, sorted by key."""
        row = self.rows[rel]
        return tuple(
            sorted(
                (MetaValue(c.key, c.kind, tuple(v) if c.is_list else (v,)) for c, v in zip(self.columns, row)),
                key=lambda m: m.key,
            )
        )


def find(input_dir: str, given: str | None) -> str | None:
    """The metadata file: `given`, else `metadata.jsonl` or `metadata.csv` at the top of INPUT (not both)."""
    if given is not None:
        if not fs.exists(given):
            raise UsageError(f"{option('metadata', given)}: {given} does not exist")
        return given
    found = [p for p in (fs.join(input_dir, n) for n in METADATA_NAMES) if fs.exists(p) and not fs.isdir(p)]
    if len(found) > 1:
        raise UsageError(f"{input_dir} holds both {' and '.join(METADATA_NAMES)}: keep one")
    return found[0] if found else None


def file_digest(path: str) -> str:
    """xxh3_128 of the metadata file's bytes (dataset.json records it; update compares it)."""
    return xxhash.xxh3_128_hexdigest(fs.read_bytes(path))


def read_metadata(path: str, given: bool) -> Metadata:
    """Read and type a metadata file (UsageError for a column of no one type; bad rows are skips)."""
    name = os.path.basename(path.rstrip("/"))
    text = read_text_input(path, f"metadata file {path}", MAX_METADATA_BYTES)
    rows = _csv_rows(text, name) if name.lower().endswith(".csv") else _jsonl_rows(text, name)
    skipped = rows.skipped
    good: list[tuple[int, dict[str, Any]]] = []
    keys: dict[str, int] = {}
    refused: set[bytes] = set()
    for line, row in rows.rows:
        rel, why = _file_name(row.get(KEY))
        if why:
            skipped.append(_skip(f"{name}:{line}", why))
        elif rel in keys:
            skipped.append(_skip(f"{name}:{line}", f"{KEY} {shown(rel)} has a row already (line {keys[rel]})"))
        elif why := _row_problem(row):
            skipped.append(_skip(rel, f"{name}:{line}: {why}"))
            refused.add(rel.encode("utf-8", "surrogateescape"))
        else:
            keys[rel] = line
            good.append((line, row))
    names = sorted({k for _, r in good for k in r if k != KEY})
    columns = [_infer(c, good, name) for c in names]
    _check_columns(columns, name)
    out = Metadata(
        path, name, file_digest(path), given, [c for c in columns if c.name != LABELS], {}, None, skipped, refused
    )
    if any(c.name == LABELS for c in columns):
        out.labels = {}
    for line, row in good:
        rel = row[KEY]
        missing = next((c.name for c in columns if c.name not in row), None)
        if missing is not None:
            skipped.append(_skip(rel, f"{name}:{line}: no value for column {missing}"))
            refused.add(rel.encode("utf-8", "surrogateescape"))
            continue
        if out.labels is not None:
            if not row[LABELS]:
                skipped.append(_skip(rel, f"{name}:{line}: {LABELS} is empty"))
                refused.add(rel.encode("utf-8", "surrogateescape"))
                continue
            out.labels[rel.encode("utf-8", "surrogateescape")] = list(row[LABELS])
        out.rows[rel.encode("utf-8", "surrogateescape")] = tuple(_convert(row[c.name], c) for c in out.columns)
    return out


def _skip(path: str, reason: str) -> dict[str, str]:
    return {"path": path, "split": "", "reason": reason}


class _Rows(NamedTuple):
    rows: list[tuple[int, dict[str, Any]]]  # (line, row)
    skipped: list[dict[str, str]]


def _jsonl_rows(text: str, name: str) -> _Rows:
    rows, skipped = [], []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = _json(line)
        except ValueError as e:
            skipped.append(_skip(f"{name}:{n}", f"not a JSON object: {parse_error(e)}"))
            continue
        except RecursionError:  # [[[[...: Python's JSON reader recurses per level
            skipped.append(_skip(f"{name}:{n}", "not a JSON object: nested too deep"))
            continue
        if not isinstance(row, dict):
            skipped.append(_skip(f"{name}:{n}", "not a JSON object"))
            continue
        rows.append((n, row))
    return _Rows(rows, skipped)


def _csv_rows(text: str, name: str) -> _Rows:
    """CSV cells typed as pandas reads them: whole numbers, decimals, else text; a cell that is a
    JSON array (`["cat", "dog"]`, `[1, 2]`) is a list; an empty cell is no value. UsageError for
    what the csv module cannot read (a cell over its 131,072 characters), naming the line."""
    reader = csv.DictReader(io.StringIO(text, newline=""))
    rows = []
    try:
        for row in reader:
            typed = {k: _cell(v) for k, v in row.items() if k is not None and v not in (None, "")}
            rows.append((reader.line_num, typed))
    except csv.Error as e:
        line = reader.line_num + 1  # the row being read (line_num counts the rows read whole)
        if "field limit" in str(e):
            raise UsageError(
                f"{name}: line {line:,}: a cell is longer than {csv.field_size_limit():,} characters, "
                "the most a CSV cell may hold here"
            ) from None
        raise UsageError(f"{name}: line {line:,}: not CSV ({e})") from None
    return _Rows(rows, [])


def _cell(v: str) -> Any:
    if _NUMBER.fullmatch(v.strip()):
        return _whole_number(v.strip())
    try:
        return float(v)
    except ValueError:
        pass
    if v.startswith("["):
        try:
            got = _json(v)
            if isinstance(got, list):
                return got
        except ValueError:  # not JSON: text
            pass
        except RecursionError:  # JSON, nested deeper than Python's reader goes
            return _Unusable("a JSON list nested too deep")
    return v


def _file_name(value: Any) -> tuple[str, str]:
    """(rel, "") for a usable `file_name`, else ("", why)."""
    if value is None:
        return "", f"no {KEY}"
    if not isinstance(value, str):
        return "", f"{KEY} is not a string"
    rel = value.removeprefix("./")
    try:
        rel.encode("utf-8", "surrogateescape")  # \udc80-\udcff: a name's undecodable byte, as the walk reads it
    except UnicodeEncodeError:
        return "", f"{KEY} {json.dumps(value)} is not text (a lone surrogate: no file can have that name)"
    if (problem := filename_problem(rel)) or rel.startswith(("/", "../")) or "://" in rel:
        return "", f"{KEY} {shown(value)} is not a path below the input folder ({problem or 'it leaves it'})"
    return rel, ""


def _kind(v: Any) -> str | None:
    """int, float, str; list:int / list:float / list:str / list: (empty); None for no usable type.
    (A number out of its type's range is `_out_of_range`'s, which `_row_problem` asks first.)"""
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, int):
        return "int"
    if isinstance(v, float):
        return "float"
    if isinstance(v, str):
        return "str"
    if isinstance(v, list):  # one level: a list in a list is of no usable type (no recursion)
        inner = {None if isinstance(x, list) else _kind(x) for x in v}
        if not inner:
            return "list:"
        if inner <= {"int", "float"}:
            return "list:float" if "float" in inner else "list:int"
        return "list:str" if inner == {"str"} else None
    return None


def _beyond_float32(v: float) -> bool:
    """A finite number a float32 feature cannot hold (TensorFlow would store an infinity)."""
    return math.isfinite(v) and abs(v) >= _FLOAT32_OVERFLOW


def _out_of_range(v: Any) -> str:
    """Why a value (or a list's first such value) cannot be stored as its feature's type, or "":
    a number beyond it, a string that is not text (a lone surrogate from a JSON `\\ud800`)."""
    for x in v if isinstance(v, list) else [v]:
        if isinstance(x, _Unusable):
            return x.why
        if isinstance(x, str) and (bad := _SURROGATE.search(x)):
            return f"{json.dumps(bad.group())} is a lone surrogate, not text (UTF-8 cannot hold it)"
        if isinstance(x, float) and _beyond_float32(x):
            return f"{x!r} is beyond a float32's range (at most 3.4e+38 either side)"
        if isinstance(x, int) and not isinstance(x, bool) and not -_INT64 <= x < _INT64:
            return f"{x} is beyond an int64's range (-2**63 to 2**63-1)"
    return ""


def _row_problem(row: dict[str, Any]) -> str:
    for k, v in row.items():
        if k != KEY and (why := _out_of_range(v)):
            return f"column {k}: {why}"
        if k != KEY and _kind(v) is None:
            what = "null" if v is None else type(v).__name__
            return (
                f"column {k}: a value of no usable type ({what}; expected a number, a string or a list of one of them)"
            )
    return ""


def _infer(column: str, rows: list[tuple[int, dict[str, Any]]], name: str) -> Column:
    """One type for `column` over every row, or UsageError naming the first row that disagrees."""
    first: tuple[int, str] | None = None
    base, is_list = "", False
    for line, row in rows:
        if column not in row:
            continue
        k = _kind(row[column])
        assert k is not None
        listed, scalar = k.startswith("list:"), k.removeprefix("list:")
        if first is None:
            first, is_list = (line, k), listed
        elif listed != is_list:
            raise UsageError(
                f"{name}: column {column} mixes lists and single values (line {first[0]} holds "
                f"{'a list' if is_list else 'a single value'}, line {line} does not): give every row the same kind"
            )
        if not scalar:
            continue
        if base and (base == "str") != (scalar == "str"):
            raise UsageError(
                f"{name}: column {column} mixes strings and numbers (first at line {line}): "
                "give every row the same type, e.g. quote the numbers"
            )
        base = "float" if {base, scalar} == {"int", "float"} else (base or scalar)
    kind = {"int": "int64", "float": "float", "str": "bytes", "": "bytes"}[base]
    return Column(column, kind, is_list)


def _check_columns(columns: list[Column], name: str) -> None:
    for c in columns:
        if c.name == LABELS:
            if not (c.is_list and c.kind == "bytes"):
                raise UsageError(f"{name}: column {LABELS} must hold lists of class names (strings)")
            continue
        if not c.name.isascii() or not c.name or any(ch.isspace() for ch in c.name):
            raise UsageError(f"{name}: column {c.name!r} cannot name a feature (ASCII without spaces): rename it")
        if c.key in FEATURE_TYPES:
            raise UsageError(f"{name}: column {c.name} would be {c.key}, one of the tool's own features: rename it")


def _convert(v: Any, c: Column) -> Any:
    one = {"int64": int, "float": float, "bytes": str}[c.kind]
    return [one(x) for x in v] if c.is_list else one(v)


def check_label_names(labels: dict[bytes, list[str]], name: str) -> set[str]:
    """Every class name of the `labels` column, checked as labels.txt lines (UsageError)."""
    found = {c for names in labels.values() for c in names}
    for c in sorted(found):
        if problem := class_name_problem(c):
            raise UsageError(f"{name}: the class name {shown(c)} {problem}")
    return found


class Joined(NamedTuple):
    """A class folder's images that have a row, with their features; the rels of those without."""

    names: list[bytes]
    sizes: array
    mtimes: array
    meta: list[tuple[MetaValue, ...]]
    unmatched: list[bytes]  # rels below INPUT with no row


def join(meta: Metadata, prefix: bytes, names: list[bytes], sizes: array, mtimes: array, seen: set[bytes]) -> Joined:
    """The images of one folder (names below `prefix`) that `meta` has a row for; each rel is added to `seen`."""
    out = Joined([], array("q"), array("q"), [], [])
    for name, size, mtime in zip(names, sizes, mtimes):
        rel = prefix + name
        seen.add(rel)
        if rel in meta.rows:
            out.names.append(name)
            out.sizes.append(size)
            out.mtimes.append(mtime)
            out.meta.append(meta.values(rel))
        elif rel not in meta.refused:  # a refused row's image was skipped with its reason
            out.unmatched.append(rel)
    return out


def no_usable_row(meta: Metadata, input_dir: str, images: int, example: str) -> str:
    """The error when images were found but none has a usable row: say that (and why), not "no
    images found". `example` is one image's path below INPUT."""
    unusable = len(meta.skipped) + len(meta.refused)
    head = f"no image in {input_dir} has a usable row in {meta.name} ({plural(images, 'image')} found"
    if not meta.rows and not unusable:
        why = "; the file has no rows"
    elif not meta.rows:
        first = min(meta.skipped, key=lambda s: s["path"]) if meta.skipped else None
        e_g = f": e.g. {first['path']}: {first['reason']}" if first else ""
        why = (
            f"; its only row is not usable{e_g}" if unusable == 1 else f"; none of its {unusable:,} rows is usable{e_g}"
        )
    else:
        named = utf8_text(decode_name(min(meta.rows)))
        verb = "names" if len(meta.rows) == 1 else "name"
        why = f"; its {plural(len(meta.rows), 'usable row')} {verb} none of them, e.g. {shown(named)}"
    return f"{head}{why}): give each image a row whose {KEY} is its path below the input, e.g. {shown(example)}"


def no_row(meta: Metadata, rel: bytes, split: str) -> dict[str, str]:
    """The skip of an image the metadata file has no row for."""
    return {"path": utf8_text(decode_name(rel)), "split": split, "reason": f"no row in {meta.name}"}


def not_found(meta: Metadata, seen: set[bytes]) -> list[dict[str, str]]:
    """The skips of the rows that name no image the walk found."""
    return [
        _skip(
            utf8_text(decode_name(rel)), f"named in {meta.name} but not found below the input folder (or not an image)"
        )
        for rel in sorted(meta.rows.keys() - seen)
    ]
