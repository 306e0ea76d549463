"""The listing below the walk (conversion.plan.walk): what is an image candidate, what is never
data (junk folders and OS files), and the walk of one class folder into names, sizes and mtimes:
on POSIX as bytes with stats relative to the open folder (`walk_class_fast`), else portably
(`walk_class`), or through `tf.io.gfile` for a remote folder (`walk_class_remote`). Apart from
the walk so that `discover`, which lays the folders out, stays one module's reading."""

from __future__ import annotations

import errno
import os
import posixpath
from array import array
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from itertools import chain
from typing import NamedTuple

from img2tfrecord import fs
from img2tfrecord.conversion.plan import skips
from img2tfrecord.conversion.plan.table import encode_name

IMAGE_EXTENSIONS = frozenset({".jpg", ".jpeg", ".png", ".gif", ".bmp", ".webp", ".tif", ".tiff"})


IMAGE_EXTENSIONS_B = frozenset(e.encode() for e in IMAGE_EXTENSIONS)


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
        why = reason_of(e)
        if rel in ("", "/"):
            self.error = why
        else:
            self.skipped.append((rel, f"{what}: {why}"))

    def merge(self, other: WalkReport) -> None:
        self.skipped += other.skipped
        self.junk_dirs |= other.junk_dirs
        self.junk_files += other.junk_files


def reason_of(e: BaseException) -> str:
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


class Entry(NamedTuple):
    """A folder entry, local or remote; `error` when the OS cannot tell whether it is a folder."""

    name: str
    path: str
    is_dir: bool
    error: OSError | None = None
    size: int = 0  # a remote listing's, when it gives them (0: unknown)
    mtime_ns: int = 0


def local_entries(path: str) -> list[Entry]:
    out = []
    for e in _list_dir(path):
        try:
            is_dir = e.is_dir(follow_symlinks=True)
            image = os.path.splitext(e.name)[1].lower() in IMAGE_EXTENSIONS  # read (and skipped) as one
            out.append(Entry(e.name, e.path, is_dir, None if is_dir or image else _broken_link(e.is_symlink(), e.path)))
        except OSError as err:  # a symlink loop (ELOOP), a name too long...
            out.append(Entry(e.name, e.path, False, err))
    return out


def _broken_link(is_link: bool, path: str | bytes) -> OSError | None:
    """The error of a symlink whose target is missing (a folder on a disk not mounted now, say):
    what cannot be told a folder or a file is a passing skip, not a file to ignore."""
    if is_link and not os.path.exists(path):
        return FileNotFoundError(errno.ENOENT, skips.BROKEN_LINK)
    return None


def remote_entries(path: str, pool: ThreadPoolExecutor | None = None) -> list[Entry]:
    """Sorted entries of a remote folder, asking `isdir` only where the name does not tell.

    A name with an image extension is taken to be a file (no request), so listing a class
    folder of a million images costs its listing calls only.
    """
    listed = sorted(fs.list_entries(path), key=lambda e: e.name)
    paths = [posixpath.join(path, e.name) for e in listed]

    def kind(i: int) -> bool:
        name, is_dir = listed[i].name, listed[i].is_dir
        if is_dir is not None:
            return is_dir
        if os.path.splitext(name)[1].lower() in IMAGE_EXTENSIONS:
            return False
        return fs.isdir(paths[i])

    dirs = list(pool.map(kind, range(len(listed)))) if pool else [kind(i) for i in range(len(listed))]
    return [Entry(e.name, p, d, None, e.size, e.mtime_ns) for e, p, d in zip(listed, paths, dirs)]


def walk_class_remote(root: str, rel_prefix: str) -> ClassFiles:
    """`walk_class` for a remote folder (object stores have no symlinks); sizes and mtimes as the
    listing gives them (fsspec's stores), else 0: unknown, for `walk_remote.stat_remote` to ask."""
    found: list[tuple[str, str, int, int]] = []
    ignored = 0
    report = WalkReport()
    stack: list[tuple[str, str]] = [(root, "")]
    while stack:
        path, rel = stack.pop()
        try:
            entries = remote_entries(path)
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
                found.append((e.path, f"{rel}{e.name}", e.size, e.mtime_ns))
            else:
                ignored += 1
        stack.extend(reversed(subdirs))
    found.sort(key=lambda t: t[1])
    return _class_files(found, ignored, report)


class ClassFiles(NamedTuple):
    """The image candidates below one class folder: names relative to it ('/'-separated, as
    `encode_name` gives them), sorted as the names' str sort; their sizes and st_mtime_ns (one
    stat gives both); non-images ignored; what could not be read."""

    names: list[bytes]
    sizes: array
    mtimes: array
    ignored: int
    report: WalkReport


def _class_files(found: list[tuple[str, str, int, int]], ignored: int, report: WalkReport) -> ClassFiles:
    """The columns of a walk's (path, rel, size, mtime) list."""
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


@dataclass
class Visited:
    """The folders (device, inode) walked so far, shared by the walks of one INPUT's class folders,
    and the class folders themselves: a folder reached twice (a symlink into another class, two
    links to one folder) is walked once, and a class folder only as its own class."""

    keys: set[tuple[int, int]] = field(default_factory=set)
    roots: frozenset[tuple[int, int]] = frozenset()

    def first(self, key: tuple[int, int], top: bool) -> bool:
        """Whether the folder `key` is to be walked now (and, if so, mark it walked)."""
        if key in self.keys or (not top and key in self.roots):
            return False
        self.keys.add(key)
        return True

    @classmethod
    def of(cls, roots: list[str]) -> Visited:
        """A walk of the class folders `roots` (one that cannot be stat'ed fails its own walk)."""
        keys = set()
        for r in roots:
            try:
                st = os.stat(r)
            except OSError:
                continue
            keys.add((st.st_dev, st.st_ino))
        return cls(roots=frozenset(keys))


def walk_class_fast(root: str, visited: Visited | None = None) -> ClassFiles:
    """`walk_class` for a local folder on POSIX: the same files, order, symlink rules and report,
    with names as bytes (no decoding, one small object each) and stats relative to the folder.

    This loop is most of a million-file dry run: per entry, one `is_dir` (the directory entry's
    type, no system call), an extension test and, for an image, one `fstatat`.
    """
    exts, junk_dirs, junk_files = IMAGE_EXTENSIONS_B, _NEVER_DATA_DIRS_B, _OS_JUNK_FILES_B
    chunks: list[tuple[bytes, list[bytes], _Stats]] = []
    ignored = 0
    report = WalkReport()
    visited = Visited() if visited is None else visited
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
            if not visited.first((st.st_dev, st.st_ino), not rel):  # a loop, a folder walked already, another class
                continue
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


def walk_class(root: str, rel_prefix: str, visited: Visited | None = None) -> ClassFiles:
    """All image candidates below one class folder, sorted; follows symlinks without looping."""
    found: list[tuple[str, str, int, int]] = []
    ignored = 0
    report = WalkReport()
    visited = Visited() if visited is None else visited
    stack: list[tuple[str, str]] = [(root, "")]
    while stack:
        path, rel = stack.pop()
        try:
            st = os.stat(path)
        except OSError as err:
            report.failed(rel, err)
            continue
        if not visited.first((st.st_dev, st.st_ino), not rel):  # a loop, a folder walked already, another class
            continue
        try:
            entries = local_entries(path)
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
    return _class_files(found, ignored, report)
