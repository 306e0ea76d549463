"""--file-list: the images named by a CSV/TSV file instead of a walk, into the same `ImageTable`
and `Discovery` as the folder walk (conversion.plan.walk), so the same files give the same plan.

A file list is parsed into the table with a row held as one bytes object until it is in (~200
bytes a row at the peak for 1 M rows; it was ~680).
"""

from __future__ import annotations

import csv
import os
import posixpath
import stat
from array import array
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from img2tfrecord import fs
from img2tfrecord.conversion.plan.labels import check_class_names, class_list, read_text_input
from img2tfrecord.conversion.plan.splits import EXACT, SPLIT_DIR_NAMES, Discovery, Missing, SplitRule, assemble
from img2tfrecord.conversion.plan.table import ImageTable, encode_name
from img2tfrecord.errors import UsageError, option
from img2tfrecord.format.naming import split_name_too_long
from img2tfrecord.format.schema import filename_problem, utf8_text

FILE_LIST_HEADERS = {"path", "filename", "file"}
MAX_FILE_LIST_BYTES = 2_000_000_000  # ~30 M rows; the list is held in memory while it is parsed (~4x its size)


def discover_file_list(
    input_dir: str,
    file_list: str,
    *,
    split: dict[str, float] | None = None,
    seed: int = 0,
    label_offset: int = 0,
    labels: list[str] | None = None,
    known_classes: list[str] | None = None,
    rule: SplitRule = EXACT,
) -> Discovery:
    """The images named by a CSV/TSV file instead of a walk (how big datasets are described in buckets).

    Rows are ``path,label_name`` or just ``path`` (the class is then the first folder of the path
    below INPUT), or ``path,label_name,split``: each image's split as listed (splits in the order
    the list first names them; not with --split). Relative paths are joined to INPUT; absolute and scheme:// paths are used as
    given. A first row whose path column reads path/filename/file is a header. Rows are sorted
    per class, so the order of the list does not matter, and listing exactly the files of a
    folder tree gives the same dataset as walking it. Local files are checked (and sized) here;
    remote ones are not (one request per object is the cost a file list avoids): a missing one
    is reported as skipped.
    """
    listed = _read_file_list(input_dir, file_list)
    given = bool(listed.splits)  # a split column: each image's split as listed
    if given and split:
        raise UsageError(
            f"{option('file_list', file_list)} gives each image's split (its third column): drop {option('split')}"
        )
    found = set(listed.labels)
    classes = class_list(found, labels, f"{option('file_list', file_list)} lists no images", known_classes)
    check_class_names((c for c in classes if c in found), f"{option('file_list', file_list)}: the label", "change it")
    root = fs.local(input_dir)
    table = ImageTable(root, fs.is_remote(root), classes, [i + label_offset for i in range(len(classes))])
    index = {c: i for i, c in enumerate(classes)}
    groups = {c: table.new_group("", i) for c, i in index.items()}
    keys = listed.splits or [""]
    per_class: dict[str, dict[str, Sequence[int]]] = {c: {k: array("q") for k in keys} for c in classes}
    excluded: dict[str, int] = {}
    chunk = 1 << 16  # rows moved into the table at a time (image/filename order: list order is irrelevant)
    for start in range(0, len(listed.rows), chunk):
        names: list[bytes] = []
        group_of, sizes, mtimes = array("I"), array("q"), array("q")
        for row in listed.rows[start : start + chunk]:
            n = _row_number(row)
            label = listed.labels[listed.label_of[n]]
            if label not in index:
                excluded[label] = excluded.get(label, 0) + 1
                continue
            if n in listed.paths:
                table.paths[len(table) + len(names)] = listed.paths[n]
            per_class[label][keys[listed.split_of[n]] if given else ""].append(len(table) + len(names))  # type: ignore[attr-defined]
            names.append(row[: -ROW_NUMBER - 1])
            group_of.append(groups[label])
            sizes.append(listed.sizes[n])
            mtimes.append(listed.mtimes[n])
        table.extend(group_of, names, sizes, mtimes)
    del listed
    return assemble(
        table,
        per_class,
        excluded,
        keys if given else list(split) if split else ["train"],
        presplit=given,
        split=split,
        seed=seed,
        ignored=0,
        warnings=[],
        what="class",
        whats="classes",
        no_images=f"{option('file_list', file_list)}: none of the listed images belongs to a class in {option('labels')}",
        rule=rule,
        missing=Missing(
            set(classes) - found if labels is not None else set(),  # a known class (like=) gone: "no images"
            lambda c: f"no row of {option('file_list', file_list)} is of that class",
            f"no row of {option('file_list', file_list)} is of those classes",
        ),
    )


class _Listed(NamedTuple):
    """A file list's rows, compactly: `rows` sorted by image/filename, each the name's bytes, a NUL
    and its row number (8 bytes); then by row number its label (into `labels`) and size, and the
    path to read where it is not INPUT joined with the name."""

    rows: list[bytes]
    labels: list[str]
    label_of: array
    sizes: array
    mtimes: array
    paths: dict[int, str]
    splits: list[str]  # the split column's names, in the order the list first gives them ([]: no such column)
    split_of: array  # by row number: index into `splits`


ROW_NUMBER = 8  # bytes of the row number after a listed name's NUL


def _lines(text: str) -> Iterator[str]:
    """`text`'s lines, ends kept, as `io.StringIO(text)` gives them, without a second copy of the text."""
    start, n = 0, len(text)
    while start < n:
        end = text.find("\n", start)
        end = n if end < 0 else end + 1
        yield text[start:end]
        start = end


def _first_line(text: str) -> str:
    """The first non-blank of `text.splitlines()`, reading only as far as needed."""
    chunk = 1 << 16
    while True:
        lines = text[:chunk].splitlines()
        for k, line in enumerate(lines):
            if line.strip() and (k < len(lines) - 1 or chunk >= len(text)):
                return line
            if line.strip():
                break  # may be cut at the chunk's end: read more
        if chunk >= len(text):
            return ""
        chunk *= 4


class _Stat(NamedTuple):
    size: int
    mtime: int


_Fail = Callable[[int, str], UsageError]


@dataclass
class _Rows:
    """The rows read so far, as columns: a name + NUL + row number each, and arrays by row number."""

    rows: list[bytes] = field(default_factory=list)
    lines: array = field(default_factory=lambda: array("q"))  # the line each row was on
    label_of: array = field(default_factory=lambda: array("I"))
    sizes: array = field(default_factory=lambda: array("q"))
    mtimes: array = field(default_factory=lambda: array("q"))
    split_of: array = field(default_factory=lambda: array("H"))
    label_index: dict[str, int] = field(default_factory=dict)
    split_index: dict[str, int] = field(default_factory=dict)
    paths: dict[int, str] = field(default_factory=dict)  # rows whose file is not INPUT/rel
    missing: list[tuple[int, str]] = field(default_factory=list)  # (line, path) of files not there

    def add(self, rel: str, line: int, label: str, st: _Stat, path: str, root: str) -> None:
        number = len(self.rows)
        self.rows.append(encode_name(rel) + b"\0" + number.to_bytes(ROW_NUMBER, "big"))
        self.lines.append(line)
        self.label_of.append(self.label_index.setdefault(label, len(self.label_index)))
        self.sizes.append(st.size)
        self.mtimes.append(st.mtime)
        if path != fs.join(root, rel):
            self.paths[number] = path


def _read_file_list(input_dir: str, file_list: str) -> _Listed:
    """Parse and check every row; UsageError naming the line for anything wrong (the first wrong
    line, as a reading that stopped there would say).

    A million rows are held as one bytes object and three array entries each, not as tuples of
    strings, and a name listed twice is found by sorting, not in a dict of every name."""
    where = option("file_list", file_list)
    text = read_text_input(file_list, where, MAX_FILE_LIST_BYTES)
    first = _first_line(text)
    delimiter = "\t" if file_list.lower().endswith((".tsv", ".tab")) or "\t" in first else ","
    reader = csv.reader(_lines(text), delimiter=delimiter, strict=True)
    root = fs.local(input_dir)
    got = _Rows()
    columns = 0

    def fail(line: int, message: str) -> UsageError:
        """The error at `line`, unless a name listed twice on an earlier line came first."""
        twice = _listed_twice(got.rows, got.lines, text, delimiter, where, before=line)
        return twice or UsageError(f"{where} line {line}: {message}")

    try:
        for row in reader:
            line = reader.line_num
            cells = [c.strip() for c in row]
            if not any(cells):
                continue
            if not columns and cells[0].lower() in FILE_LIST_HEADERS:
                columns = len(cells)  # header row: fixes the column count, holds no image
                continue
            if len(cells) not in (1, 2, 3) or (columns and len(cells) != columns):
                want = {1: "path", 2: "path,label_name", 3: "path,label_name,split"}.get(
                    columns, "path,label_name[,split] (or only path)"
                )
                raise fail(line, f"expected {want}, got {len(cells)} column(s): {delimiter.join(row)!r}")
            columns = len(cells)
            _read_row(input_dir, root, cells, line, fail, got)
    except csv.Error as e:
        raise fail(reader.line_num, str(e)) from None
    twice = _listed_twice(got.rows, got.lines, text, delimiter, where)  # sorts the rows
    if twice:
        raise twice
    if got.missing:
        line, path = got.missing[0]
        more = f" ({len(got.missing) - 1} more listed file(s) are missing too)" if len(got.missing) > 1 else ""
        raise UsageError(f"{where} line {line}: {path} does not exist{more}")
    return _Listed(
        got.rows,
        list(got.label_index),
        got.label_of,
        got.sizes,
        got.mtimes,
        got.paths,
        list(got.split_index),
        got.split_of,
    )


def _read_row(input_dir: str, root: str, cells: list[str], line: int, fail: _Fail, got: _Rows) -> None:
    """One row of path[,label_name[,split]] checked and added to `got`."""
    given = cells[0]
    if not given:
        raise fail(line, "empty path")
    path, rel, below = _resolve_listed(input_dir, given)
    if len(cells) == 3:
        name = _split_name(cells[2], given, line, fail)
        got.split_of.append(got.split_index.setdefault(name, len(got.split_index)))
    if len(cells) >= 2:
        label = cells[1]
        if not label:
            raise fail(line, f"empty label for {given}")
    elif below and "/" in rel:
        label = rel.split("/", 1)[0]
    else:
        raise fail(
            line,
            f"cannot tell the class of {given}: it is not in a CLASS folder "
            f"below {input_dir}; add a label column (path,label_name)",
        )
    if problem := filename_problem(utf8_text(rel)):
        raise fail(line, f"{given} cannot be an image/filename: it {problem}")
    got.add(rel, line, label, _stat_listed(path, line, fail, got.missing), path, root)


def _stat_listed(path: str, line: int, fail: _Fail, missing: list[tuple[int, str]]) -> _Stat:
    """A listed local file's size and mtime (0 and 0 when unknown: remote, or unreachable)."""
    if fs.is_remote(path):
        return _Stat(0, 0)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        missing.append((line, path))
        return _Stat(0, 0)
    except OSError:  # no permission to reach it, a loop, a path too long: the encoder says which
        return _Stat(0, 0)
    if stat.S_ISDIR(st.st_mode):
        raise fail(line, f"{path} is a folder, not an image")
    return _Stat(st.st_size, st.st_mtime_ns)


def _split_name(cell: str, given: str, line: int, fail: _Fail) -> str:
    """A split column's cell as a split name (val -> validation); UsageError for one that is not a name."""
    name = SPLIT_DIR_NAMES.get(cell.lower(), cell)
    if not name or not name.replace("_", "").isalnum():
        raise fail(line, f"bad split {cell!r} for {given}: expected a name such as train, validation or test")
    if long := split_name_too_long(name):
        raise fail(line, f"bad split for {given}: {long}")
    return name


def _listed_twice(
    rows: list[bytes], lines: array, text: str, delimiter: str, where: str, before: int | None = None
) -> UsageError | None:
    """The error for the first line that lists a name again (earlier than `before`), or None.
    Sorts `rows` by name (then row number), so that equal names are neighbours."""
    rows.sort(key=_row_key) if _has_nul(rows) else rows.sort()
    again: tuple[int, int] | None = None  # (line listing a name again, the line it was first on)
    for a, b in zip(rows, rows[1:]):
        if a[: -ROW_NUMBER - 1] == b[: -ROW_NUMBER - 1]:
            line, first = lines[_row_number(b)], lines[_row_number(a)]
            if (again is None or line < again[0]) and (before is None or line < before):
                again = (line, first)
    if again is None:
        return None
    line, first = again
    # the name as written on that line (the rows hold it normalized)
    reader = csv.reader(_lines(text), delimiter=delimiter, strict=True)
    given = next(row[0].strip() for row in reader if reader.line_num == line)
    return UsageError(f"{where} line {line}: {given} is listed twice (first on line {first})")


def _row_number(row: bytes) -> int:
    return int.from_bytes(row[-ROW_NUMBER:], "big")


def _row_key(row: bytes) -> tuple[bytes, int]:
    return row[: -ROW_NUMBER - 1], _row_number(row)


def _has_nul(rows: list[bytes]) -> bool:
    """Whether a name holds a NUL, which would make name + NUL + number sort apart from the name."""
    return any(row.find(b"\0") < len(row) - ROW_NUMBER - 1 for row in rows)


def _resolve_listed(input_dir: str, given: str) -> tuple[str, str, bool]:
    """(path to read, image/filename, whether it lies below INPUT).

    The name is the path relative to INPUT when the file lies below it, else the path as
    written (a relative one normalized: `../x.jpg`); `schema.filename_problem` accepts both.
    """
    if fs.is_remote(given) or "://" in given:
        base = input_dir.rstrip("/") + "/"
        rel = given[len(base) :]
        if (
            given.startswith(base)
            and rel not in ("", "..")
            and posixpath.normpath(rel) == rel
            and not rel.startswith("../")
        ):
            return given, rel, True
        return given, given, False  # another bucket, or an object key no folder walk would name so
    if os.path.isabs(given):
        if fs.is_remote(input_dir):
            return given, given, False
        base, full = os.path.abspath(fs.local(input_dir)), os.path.abspath(given)
        if full.startswith(base.rstrip(os.sep) + os.sep):
            return given, full[len(base.rstrip(os.sep)) + 1 :].replace(os.sep, "/"), True
        return given, given, False
    rel = posixpath.normpath(given.replace(os.sep, "/"))
    if rel == ".." or rel.startswith("../"):
        return fs.join(input_dir, given), rel, False
    return fs.join(fs.local(input_dir), rel), rel, True
