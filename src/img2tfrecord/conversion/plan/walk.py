"""The folder walk: find the image candidates below INPUT's class folders, into an `ImageTable`.

Layouts (as Keras' `image_dataset_from_directory` and TFDS' ImageFolder understand them):

* ``INPUT/CLASS/.../image``: each immediate subfolder is a class; nested folders belong to it.
* ``INPUT/SPLIT/CLASS/.../image`` when every immediate subfolder is a split name (train,
  validation or val, test): the splits are used as they are, with one class list for all.

This module only lists files; labels come from conversion.plan.labels, split assignment and order from
conversion.plan.splits (shared with --file-list, conversion.plan.filelist), so the same files give the same
plan (and bytes) whichever way they were found. The real image format is read from the content
later (encoder); here a file is a candidate when its extension looks like an image.

Inputs with a scheme (``gs://bucket/data``) are listed through ``tf.io.gfile``, one class folder
per thread, so a bucket with thousands of classes is listed in parallel.

Scale (issue 13: 100 M images must plan on one Beam driver): what is found goes straight into an
`ImageTable` (conversion.plan.table), never into an object per image. A local class folder is read with
names as bytes and its files stat'ed relative to the open folder (`_walk_class_fast`; the one stat
gives size and mtime), and laid out so that a split's image numbers are in image/filename order:
sorting a split sorts integers. On 1 M files in 10 classes (`bench/plan.py`, 2 cores),
`convert --dry-run` takes about the time of a bare `os.scandir` walk that keeps (path, size)
tuples, sorts and shuffles them (1.1x; it was 2.7x), and ~75 bytes an image at its peak RSS (~91 with
the mtime column and the hash order; the bare walk ~230; it was ~700). The stat of each file is most of both."""

from __future__ import annotations

import errno
import os
import posixpath
import sys
from array import array
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from itertools import chain
from typing import NamedTuple

from img2tfrecord import fs
from img2tfrecord.conversion.plan import skips
from img2tfrecord.conversion.plan.labels import class_list
from img2tfrecord.conversion.plan.splits import (
    EXACT,
    SPLIT_DIR_NAMES,
    Discovery,
    Missing,
    SplitRule,
    assemble,
    split_of,
)
from img2tfrecord.conversion.plan.table import ImageTable, encode_name
from img2tfrecord.conversion.plan.walk_remote import LIST_THREADS
from img2tfrecord.conversion.plan.walk_remote import stat_remote as stat_remote  # re-exported: update's walk uses it
from img2tfrecord.conversion.plan.walk_text import junk_note, loose_warning, mixed_split_warning, no_classes
from img2tfrecord.errors import DataError, UsageError, option
from img2tfrecord.format.manifest import class_name_problem, shown
from img2tfrecord.format.schema import utf8_text

IMAGE_EXTENSIONS = frozenset({".jpg", ".jpeg", ".png", ".gif", ".bmp", ".webp", ".tif", ".tiff"})

IMAGE_EXTENSIONS_B = frozenset(e.encode() for e in IMAGE_EXTENSIONS)

# The fast local walk reads names as bytes and stats files relative to an open folder (fstatat):
# POSIX, with names that decode as UTF-8 with surrogate escapes (so bytes are what str.encode gives).
_BYTES_WALK = (
    os.name == "posix"
    and os.stat in os.supports_dir_fd
    and sys.getfilesystemencoding().lower().replace("-", "") == "utf8"
    and sys.getfilesystemencodeerrors() == "surrogateescape"
)


# Folders that never hold a class or data: archive and NAS metadata, notebook checkpoints, trash
# and file system bookkeeping; and every hidden (dot) folder. Ignored wherever they are, said once.
NEVER_DATA_DIRS = frozenset({"__MACOSX", "@eaDir", "$RECYCLE.BIN", "System Volume Information", "lost+found"})
# Files that operating systems leave beside images (and every hidden file: .DS_Store, ._IMG.jpg).
OS_JUNK_FILES = frozenset({"thumbs.db", "ehthumbs.db", "desktop.ini"})  # compared in lower case
_NEVER_DATA_DIRS_B = frozenset(n.encode() for n in NEVER_DATA_DIRS)
_OS_JUNK_FILES_B = frozenset(n.encode() for n in OS_JUNK_FILES)


def is_hidden(name: str) -> bool:
    """Dot files (.DS_Store, .git) and AppleDouble `._*` files are never data."""
    return name.startswith(".")


def never_data_dir(name: str) -> bool:
    """A folder that is never a class nor holds images (`__MACOSX`, `@eaDir`, `.ipynb_checkpoints`)."""
    return name.startswith(".") or name in NEVER_DATA_DIRS


def os_junk_file(name: str) -> bool:
    """A file the OS leaves beside images (`Thumbs.db`, `desktop.ini`, `.DS_Store`, `._*`)."""
    return name.startswith(".") or name.lower() in OS_JUNK_FILES


@dataclass
class WalkReport:
    """What one walk could not read or left out on purpose, besides the images it found.

    `skipped` holds (path below the walked folder, '/'-ended for a folder, the OS's reason);
    `error` is set when the walked folder itself cannot be listed."""

    skipped: list[tuple[str, str]] = field(default_factory=list)
    junk_dirs: set[str] = field(default_factory=set)
    junk_files: int = 0
    error: str | None = None

    def failed(self, rel: str, e: BaseException, what: str = skips.CANNOT_LIST) -> None:
        why = _reason(e)
        if rel in ("", "/"):
            self.error = why
        else:
            self.skipped.append((rel, f"{what}: {why}"))

    def merge(self, other: WalkReport) -> None:
        self.skipped += other.skipped
        self.junk_dirs |= other.junk_dirs
        self.junk_files += other.junk_files


def _reason(e: BaseException) -> str:
    """The OS's words for `e` (`Permission denied`), with the limit named for a path too long."""
    if isinstance(e, OSError) and e.strerror:
        said = e.strerror[:1].lower() + e.strerror[1:]  # as the encoder's reasons: "permission denied"
        if e.errno == errno.ENAMETOOLONG and e.filename is not None:
            n = len(os.fsencode(e.filename))
            return f"{said} (its path is {n:,} bytes; the OS takes at most {PATH_MAX:,})"
        return said
    return getattr(e, "message", None) or str(e) or type(e).__name__  # tf.errors.* on remote paths


PATH_MAX = os.pathconf("/", "PC_PATH_MAX") if hasattr(os, "pathconf") else 4096


def _list_dir(path: str) -> list[os.DirEntry]:
    with os.scandir(path) as it:
        return sorted(it, key=lambda e: e.name)


class _Entry(NamedTuple):
    """A folder entry, local or remote; `error` when the OS cannot tell whether it is a folder."""

    name: str
    path: str
    is_dir: bool
    error: OSError | None = None


def _local_entries(path: str) -> list[_Entry]:
    out = []
    for e in _list_dir(path):
        try:
            is_dir = e.is_dir(follow_symlinks=True)
            image = os.path.splitext(e.name)[1].lower() in IMAGE_EXTENSIONS  # read (and skipped) as one
            out.append(
                _Entry(e.name, e.path, is_dir, None if is_dir or image else _broken_link(e.is_symlink(), e.path))
            )
        except OSError as err:  # a symlink loop (ELOOP), a name too long...
            out.append(_Entry(e.name, e.path, False, err))
    return out


def _broken_link(is_link: bool, path: str | bytes) -> OSError | None:
    """The error of a symlink whose target is missing (a folder on a disk not mounted now, say):
    what cannot be told a folder or a file is a passing skip, not a file to ignore."""
    if is_link and not os.path.exists(path):
        return FileNotFoundError(errno.ENOENT, skips.BROKEN_LINK)
    return None


def _remote_entries(path: str, pool: ThreadPoolExecutor | None = None) -> list[_Entry]:
    """Sorted entries of a remote folder, asking `isdir` only where the name does not tell.

    A name with an image extension is taken to be a file (no request), so listing a class
    folder of a million images costs its listing calls only.
    """
    listed = sorted(fs.list_entries(path))
    paths = [posixpath.join(path, n) for n, _ in listed]

    def kind(i: int) -> bool:
        name, is_dir = listed[i]
        if is_dir is not None:
            return is_dir
        if os.path.splitext(name)[1].lower() in IMAGE_EXTENSIONS:
            return False
        return fs.isdir(paths[i])

    dirs = list(pool.map(kind, range(len(listed)))) if pool else [kind(i) for i in range(len(listed))]
    return [_Entry(n, p, d) for (n, _), p, d in zip(listed, paths, dirs)]


def _walk_class_remote(root: str, rel_prefix: str) -> tuple[list[tuple[str, str, int, int]], int, WalkReport]:
    """`_walk_class` for a remote folder (object stores have no symlinks; sizes and mtimes are
    unknown: 0, since a listing gives names only and a stat per object is the request it avoids)."""
    found: list[tuple[str, str, int, int]] = []
    ignored = 0
    report = WalkReport()
    stack: list[tuple[str, str]] = [(root, "")]
    while stack:
        path, rel = stack.pop()
        try:
            entries = _remote_entries(path)
        except Exception as err:  # tf.errors.NotFoundError & co. are not OSErrors
            report.failed(rel, err)
            continue
        subdirs = []
        for e in entries:
            if e.is_dir:
                if never_data_dir(e.name):
                    report.junk_dirs.add(e.name)
                else:
                    subdirs.append((e.path, f"{rel}{e.name}/"))
            elif os_junk_file(e.name):
                report.junk_files += 1
            elif os.path.splitext(e.name)[1].lower() in IMAGE_EXTENSIONS:
                found.append((e.path, f"{rel}{e.name}", 0, 0))
            else:
                ignored += 1
        stack.extend(reversed(subdirs))
    found.sort(key=lambda t: t[1])
    return found, ignored, report


class ClassFiles(NamedTuple):
    """The image candidates below one class folder: names relative to it ('/'-separated, as
    `encode_name` gives them), sorted as the names' str sort; their sizes and st_mtime_ns (one
    stat gives both); non-images ignored; what could not be read."""

    names: list[bytes]
    sizes: array
    mtimes: array
    ignored: int
    report: WalkReport


def _walk_classes(walks: list[tuple[str, str, str]], remote: bool) -> Iterator[ClassFiles]:
    """Walk every (class, split key, folder); remote folders concurrently, results in order."""
    if not remote:
        yield from (
            _walk_class_fast(path) if _BYTES_WALK else _as_class_files(*_walk_class(path, "")) for _, _, path in walks
        )
        return
    with ThreadPoolExecutor(min(LIST_THREADS, max(1, len(walks))), thread_name_prefix="list") as pool:
        yield from pool.map(lambda w: _as_class_files(*_walk_class_remote(w[2], w[0] + "/")), walks)


def _as_class_files(found: list[tuple[str, str, int, int]], ignored: int, report: WalkReport) -> ClassFiles:
    return ClassFiles(
        [encode_name(r) for _, r, _, _ in found],
        array("q", (sz for _, _, sz, _ in found)),
        array("q", (mt for _, _, _, mt in found)),
        ignored,
        report,
    )


def _sort_names(names: list[bytes]) -> None:
    """Sort file system names as their str forms sort (what the walk has always done): as bytes
    when they are valid UTF-8 (whose byte order is code point order), else by the decoded str."""
    try:
        b"/".join(names).decode("utf-8")  # '/' never occurs in a name and ends any multi-byte sequence
        names.sort()
    except UnicodeDecodeError:
        names.sort(key=os.fsdecode)


class _Stats(NamedTuple):
    sizes: array
    mtimes: array


def _sizes(fd: int, names: list[bytes]) -> _Stats:
    """Each file's size and st_mtime_ns from one stat relative to its open folder (following
    symlinks); 0 and 0 if it fails."""
    stat = os.stat
    sizes, mtimes = array("q"), array("q")
    for k in range(0, len(names), STAT_BATCH):  # a batch of stat results at a time, not a folder's
        batch = names[k : k + STAT_BATCH]
        got: list[os.stat_result | None]
        try:
            got = [stat(n, dir_fd=fd) for n in batch]
        except OSError:
            got = [_stat_or_none(n, fd) for n in batch]
        sizes.extend([st.st_size if st else 0 for st in got])
        mtimes.extend([st.st_mtime_ns if st else 0 for st in got])
    return _Stats(sizes, mtimes)


STAT_BATCH = 4096


def _stat_or_none(name: bytes, fd: int) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=fd)
    except OSError:
        return None  # broken symlink, vanished, no search permission: the encoder says why


def _walk_class_fast(root: str) -> ClassFiles:
    """`_walk_class` for a local folder on POSIX: the same files, order, symlink rules and report,
    with names as bytes (no decoding, one small object each) and stats relative to the folder.

    This loop is most of a million-file dry run: per entry, one `is_dir` (the directory entry's
    type, no system call), an extension test and, for an image, one `fstatat`.
    """
    exts, junk_dirs, junk_files = IMAGE_EXTENSIONS_B, _NEVER_DATA_DIRS_B, _OS_JUNK_FILES_B
    chunks: list[tuple[bytes, list[bytes], _Stats]] = []
    ignored = 0
    report = WalkReport()
    visited: set[tuple[int, int]] = set()
    stack: list[tuple[bytes, bytes]] = [(os.fsencode(root), b"")]
    while stack:
        path, rel = stack.pop()
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        except OSError as err:
            report.failed(os.fsdecode(rel), err)
            continue
        try:
            st = os.fstat(fd)
            key = (st.st_dev, st.st_ino)
            if key in visited:  # a symlink loop or a second link to a folder already walked
                continue
            visited.add(key)
            files: list[bytes] = []
            subdirs: list[bytes] = []
            try:
                with os.scandir(path) as it:  # a bytes path: bytes names (a folder's fd would give str)
                    for e in it:
                        name = e.name
                        try:
                            is_dir = e.is_dir()
                        except OSError as err:
                            report.failed(os.fsdecode(rel + name), err, skips.CANNOT_TELL)
                            continue
                        if is_dir:
                            if name[:1] == b"." or name in junk_dirs:
                                report.junk_dirs.add(os.fsdecode(name))
                            else:
                                subdirs.append(name)
                            continue
                        if name[:1] == b"." or name.lower() in junk_files:
                            report.junk_files += 1
                            continue
                        dot = name.rfind(b".")
                        if dot > 0 and name[dot:].lower() in exts:
                            files.append(name)
                        elif broken := _broken_link(e.is_symlink(), e.path):  # not an image's name: a folder?
                            report.failed(os.fsdecode(rel + name), broken, skips.CANNOT_TELL)
                        else:
                            ignored += 1
            except OSError as err:
                report.failed(os.fsdecode(rel), err)
                continue
            _sort_names(files)
            chunks.append((rel, files, _sizes(fd, files)))
        finally:
            os.close(fd)
        _sort_names(subdirs)
        stack.extend((os.path.join(path, n), rel + n + b"/") for n in reversed(subdirs))
    if len(chunks) == 1 and not chunks[0][0]:  # a flat class folder: sorted already
        return ClassFiles(chunks[0][1], chunks[0][2].sizes, chunks[0][2].mtimes, ignored, report)
    names = [rel + n for rel, files, _ in chunks for n in files]
    sizes = array("q", chain.from_iterable(st.sizes for _, _, st in chunks))
    mtimes = array("q", chain.from_iterable(st.mtimes for _, _, st in chunks))
    by_name = list(range(len(names)))
    try:
        b"/".join(names).decode("utf-8")
        by_name.sort(key=names.__getitem__)
    except UnicodeDecodeError:
        by_name.sort(key=lambda i: os.fsdecode(names[i]))
    return ClassFiles(
        [names[i] for i in by_name],
        array("q", (sizes[i] for i in by_name)),
        array("q", (mtimes[i] for i in by_name)),
        ignored,
        report,
    )


def _walk_class(root: str, rel_prefix: str) -> tuple[list[tuple[str, str, int, int]], int, WalkReport]:
    """All image candidates below one class folder, sorted; follows symlinks without looping.

    Returns ([(path, rel_to_class_root, size, mtime_ns)], ignored_non_image_count, report).
    """
    found: list[tuple[str, str, int, int]] = []
    ignored = 0
    report = WalkReport()
    visited: set[tuple[int, int]] = set()
    stack: list[tuple[str, str]] = [(root, "")]
    while stack:
        path, rel = stack.pop()
        try:
            st = os.stat(path)
        except OSError as err:
            report.failed(rel, err)
            continue
        key = (st.st_dev, st.st_ino)
        if key in visited:  # a symlink loop or a second link to a folder already walked
            continue
        visited.add(key)
        try:
            entries = _local_entries(path)
        except OSError as err:
            report.failed(rel, err)
            continue
        subdirs = []
        for e in entries:
            child_rel = f"{rel}{e.name}"
            if e.error is not None:
                report.failed(child_rel, e.error, skips.CANNOT_TELL)
            elif e.is_dir:
                if never_data_dir(e.name):
                    report.junk_dirs.add(e.name)
                else:
                    subdirs.append((e.path, child_rel + "/"))
            elif os_junk_file(e.name):
                report.junk_files += 1
            elif os.path.splitext(e.name)[1].lower() in IMAGE_EXTENSIONS:
                try:
                    st = os.stat(e.path)
                    size, mtime = st.st_size, st.st_mtime_ns
                except OSError:
                    size = mtime = 0  # broken symlink, vanished, no search permission: the encoder says why
                found.append((e.path, child_rel, size, mtime))
            else:
                ignored += 1
        stack.extend(reversed(subdirs))
    found.sort(key=lambda t: t[1])
    return found, ignored, report


def discover(
    input_dir: str,
    *,
    split: dict[str, float] | None = None,
    seed: int = 0,
    label_offset: int = 0,
    labels: list[str] | None = None,
    known_classes: list[str] | None = None,
    rule: SplitRule = EXACT,
) -> Discovery:
    """Walk `input_dir` and return the candidate list of every split, in plan order (conversion.plan.splits).

    Deterministic: the same tree, seed and options give the same lists on any machine.
    """
    remote = fs.is_remote(input_dir)
    if not (fs.isdir(input_dir) if remote else os.path.isdir(input_dir)):
        bare = input_dir.rstrip("/") or input_dir  # "cat_000.jpg/" names a file too
        what = "is a file, not a folder" if (fs.exists(bare) if remote else os.path.exists(bare)) else "does not exist"
        raise UsageError(f"input {input_dir} {what}: give the folder that holds one subfolder per class")
    report = WalkReport()  # what the walk cannot read or leaves out, below INPUT
    top = _entries(input_dir, remote, report, "", "input")
    top_dirs = [e for e in top if e.is_dir]
    warnings: list[str] = []
    loose = [e for e in top if not e.is_dir and os.path.splitext(e.name)[1].lower() in IMAGE_EXTENSIONS]
    ignored = len(top) - len(top_dirs) - len(loose)  # non-image files; loose images are said apart

    presplit = bool(top_dirs) and all(e.name.lower() in SPLIT_DIR_NAMES for e in top_dirs)
    if presplit:
        if split:
            raise UsageError(
                f"{input_dir} is already split into {', '.join(e.name for e in top_dirs)}; drop {option('split')}"
            )
        names = [SPLIT_DIR_NAMES[e.name.lower()] for e in top_dirs]
        if len(set(names)) != len(names):
            raise UsageError(f"{input_dir} has both 'val' and 'validation' folders: keep one")
        split_roots = {SPLIT_DIR_NAMES[e.name.lower()]: e.path for e in top_dirs}
    else:
        split_roots = {"": input_dir}
        if mixed := mixed_split_warning(input_dir, [e.name for e in top_dirs]):
            warnings.append(mixed)

    walks: list[tuple[str, str, str]] = []  # (class name, split key, folder)
    for skey, sroot in split_roots.items():
        entries = _entries(sroot, remote, report, os.path.basename(sroot) + "/", "split folder") if skey else top
        for e in entries:
            if not e.is_dir:
                if skey:
                    if os.path.splitext(e.name)[1].lower() in IMAGE_EXTENSIONS:
                        loose.append(e)
                    else:
                        ignored += 1
                continue
            walks.append((e.name, skey, e.path))
    left_out = loose_warning(input_dir, len(loose), loose[0].name, top_level=not presplit) if loose else ""
    warnings += [left_out] * bool(loose)
    images = f"(images: {', '.join(sorted(IMAGE_EXTENSIONS))})"
    classes = class_list({c for c, _, _ in walks}, labels, no_classes(input_dir, len(loose), images), known_classes)
    folders = {c for c, _, _ in walks}
    for c in classes:
        if c in folders and (problem := class_name_problem(c)):
            raise UsageError(f"the class folder {shown(fs.join(input_dir, c))} {problem}: rename it")
    table = ImageTable(input_dir, remote, classes, [i + label_offset for i in range(len(classes))], split_rel=True)
    index = {c: i for i, c in enumerate(classes)}
    # Laid out split folder by split folder, class folders in the order of their "class/" prefix:
    # each split's image numbers are then in image/filename order (see conversion.plan.table).
    rank = {k: i for i, k in enumerate(split_roots)}
    walks.sort(key=lambda w: (rank[w[1]], w[0] + "/"))
    per_class: dict[str, dict[str, Sequence[int]]] = {}  # class name -> split key -> image numbers
    excluded: dict[str, int] = {}
    skipped: list[dict[str, str]] = [
        {"path": utf8_text(rel), "split": "", "reason": why} for rel, why in report.skipped
    ]  # listing INPUT and its split folders
    for (c, skey, path), found in zip(walks, _walk_classes(walks, remote)):
        ignored += found.ignored
        if c not in index:
            excluded[c] = excluded.get(c, 0) + len(found.names)
            continue
        if found.report.error is not None:
            raise DataError(
                f"cannot list class folder {path}: {found.report.error}; its images would be missing: "
                f"fix its permissions, or leave the class out with {option('labels')}"
            )
        report.merge(found.report)
        split_dir = f"{os.path.basename(split_roots[skey])}/" if skey else ""
        prefix = split_dir + c + "/"
        for rel, why in found.report.skipped:
            whose = skey or ("" if rel.endswith("/") else split_of(prefix + rel, seed, split))
            skipped.append({"path": utf8_text(prefix + rel), "split": whose, "reason": why})
        group = table.new_group(prefix, index[c], len(split_dir))
        per_class.setdefault(c, {})[skey] = table.extend(group, found.names, found.sizes, found.mtimes)
    if remote:  # a listing gives no size or mtime; the catalog needs them for update to see changes
        stat_remote(table)
    split_keys = list(split_roots) if presplit else (list(split) if split else ["train"])
    found_all = assemble(
        table,
        per_class,
        excluded,
        split_keys,
        presplit=presplit,
        split=split,
        seed=seed,
        ignored=ignored,
        warnings=warnings,
        what="class folder",
        whats="class folders",
        no_images=f"no images found in {input_dir}: expected {fs.join(input_dir, 'CLASS_NAME', 'image.jpg')} {images}",
        rule=rule,
        missing=Missing(
            set(classes) - folders,
            (lambda c: f"no split folder of {input_dir} holds a folder {c}")
            if presplit
            else (lambda c: f"its folder {fs.join(input_dir, c)} is missing"),
            f"no split folder of {input_dir} holds their folders"
            if presplit
            else f"their folders in {input_dir} are missing",
        ),
    )
    found_all.skipped = sorted(skipped, key=lambda s: s["path"])
    found_all.loose = left_out
    if note := junk_note(report.junk_dirs):
        found_all.notes.append(note)
    return found_all


def _entries(path: str, remote: bool, report: WalkReport, rel: str, what: str) -> list[_Entry]:
    """The entries of INPUT or a split folder that may hold data, sorted; junk counted in `report`,
    entries the OS cannot tell the kind of are skips. A folder that cannot be listed is a DataError."""
    try:
        if remote:
            with ThreadPoolExecutor(LIST_THREADS, thread_name_prefix="list") as pool:
                entries = _remote_entries(path, pool)
        else:
            entries = _local_entries(path)
    except Exception as err:  # OSError, or tf.errors.* for a remote folder
        raise DataError(f"cannot list {what} {path}: {_reason(err)}") from None
    out = []
    for e in entries:
        if e.error is not None:
            report.failed(rel + e.name, e.error, skips.CANNOT_TELL)
        elif e.is_dir and never_data_dir(e.name):
            report.junk_dirs.add(e.name)
        elif not e.is_dir and os_junk_file(e.name):
            report.junk_files += 1
        else:
            out.append(e)
    return out
