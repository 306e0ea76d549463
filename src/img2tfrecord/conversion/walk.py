"""The folder walk: find the image candidates below INPUT's class folders, into an `ImageTable`.

Layouts (as Keras' `image_dataset_from_directory` and TFDS' ImageFolder understand them):

* ``INPUT/CLASS/.../image``: each immediate subfolder is a class; nested folders belong to it.
* ``INPUT/SPLIT/CLASS/.../image`` when every immediate subfolder is a split name (train,
  validation or val, test): the splits are used as they are, with one class list for all.

This module only lists files; labels come from conversion.labels, split assignment and order from
conversion.splits (shared with --file-list, conversion.filelist), so the same files give the same
plan (and bytes) whichever way they were found. The real image format is read from the content
later (encoder); here a file is a candidate when its extension looks like an image.

Inputs with a scheme (``gs://bucket/data``) are listed through ``tf.io.gfile``, one class folder
per thread, so a bucket with thousands of classes is listed in parallel.

Scale (issue 13: 100 M images must plan on one Beam driver): what is found goes straight into an
`ImageTable` (conversion.table), never into an object per image. A local class folder is read with
names as bytes and its files stat'ed relative to the open folder (`_walk_class_fast`; the one stat
gives size and mtime), and laid out so that a split's image numbers are in image/filename order:
sorting a split sorts integers. On 1 M files in 10 classes (`bench/plan.py`, 2 cores),
`convert --dry-run` takes about the time of a bare `os.scandir` walk that keeps (path, size)
tuples, sorts and shuffles them (1.1x; it was 2.7x), and ~75 bytes an image at its peak RSS (the
bare walk ~230; it was ~700). The stat of each file is most of both.
"""

from __future__ import annotations

import os
import posixpath
import sys
from array import array
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from itertools import chain
from typing import NamedTuple

from img2tfrecord import fs
from img2tfrecord.conversion.labels import class_list
from img2tfrecord.conversion.splits import SPLIT_DIR_NAMES, Discovery, assemble
from img2tfrecord.conversion.table import ImageTable, Task, encode_name
from img2tfrecord.errors import UsageError, plural

IMAGE_EXTENSIONS = frozenset({".jpg", ".jpeg", ".png", ".gif", ".bmp", ".webp", ".tif", ".tiff"})
LIST_THREADS = 32  # concurrent gfile listings of a remote input (each is one or a few HTTP requests)

IMAGE_EXTENSIONS_B = frozenset(e.encode() for e in IMAGE_EXTENSIONS)
ImageItem = Task  # one candidate image: where it is, what it will be labelled

# The fast local walk reads names as bytes and stats files relative to an open folder (fstatat):
# POSIX, with names that decode as UTF-8 with surrogate escapes (so bytes are what str.encode gives).
_BYTES_WALK = (
    os.name == "posix"
    and os.stat in os.supports_dir_fd
    and sys.getfilesystemencoding().lower().replace("-", "") == "utf8"
    and sys.getfilesystemencodeerrors() == "surrogateescape"
)


def is_hidden(name: str) -> bool:
    """Dot files (.DS_Store, .git) and AppleDouble `._*` files are never data."""
    return name.startswith(".")


def _list_dir(path: str) -> list[os.DirEntry]:
    with os.scandir(path) as it:
        return sorted(it, key=lambda e: e.name)


class _Entry(NamedTuple):
    """A folder entry, local or remote."""

    name: str
    path: str
    is_dir: bool


def _local_entries(path: str) -> list[_Entry]:
    return [_Entry(e.name, e.path, _is_dir(e)) for e in _list_dir(path)]


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


def _walk_class_remote(root: str, rel_prefix: str) -> tuple[list[tuple[str, str, int, int]], int]:
    """`_walk_class` for a remote folder (object stores have no symlinks; sizes and mtimes are
    unknown: 0, since a listing gives names only and a stat per object is the request it avoids)."""
    found: list[tuple[str, str, int, int]] = []
    ignored = 0
    stack: list[tuple[str, str]] = [(root, "")]
    while stack:
        path, rel = stack.pop()
        try:
            entries = _remote_entries(path)
        except Exception:  # tf.errors.NotFoundError & co. are not OSErrors
            continue
        subdirs = []
        for e in entries:
            if is_hidden(e.name):
                continue
            if e.is_dir:
                subdirs.append((e.path, f"{rel}{e.name}/"))
            elif os.path.splitext(e.name)[1].lower() in IMAGE_EXTENSIONS:
                found.append((e.path, f"{rel}{e.name}", 0, 0))
            else:
                ignored += 1
        stack.extend(reversed(subdirs))
    found.sort(key=lambda t: t[1])
    return found, ignored


class ClassFiles(NamedTuple):
    """The image candidates below one class folder: names relative to it ('/'-separated, as
    `encode_name` gives them), sorted as the names' str sort; their sizes and st_mtime_ns (one
    stat gives both); non-images ignored."""

    names: list[bytes]
    sizes: array
    mtimes: array
    ignored: int


def _walk_classes(walks: list[tuple[str, str, str]], remote: bool) -> Iterator[ClassFiles]:
    """Walk every (class, split key, folder); remote folders concurrently, results in order."""
    if not remote:
        yield from (
            _walk_class_fast(path) if _BYTES_WALK else _as_class_files(*_walk_class(path, "")) for _, _, path in walks
        )
        return
    with ThreadPoolExecutor(min(LIST_THREADS, max(1, len(walks))), thread_name_prefix="list") as pool:
        yield from pool.map(lambda w: _as_class_files(*_walk_class_remote(w[2], w[0] + "/")), walks)


def _as_class_files(found: list[tuple[str, str, int, int]], ignored: int) -> ClassFiles:
    return ClassFiles(
        [encode_name(r) for _, r, _, _ in found],
        array("q", (sz for _, _, sz, _ in found)),
        array("q", (mt for _, _, _, mt in found)),
        ignored,
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
    for n in names:
        try:
            st = stat(n, dir_fd=fd)
        except OSError:
            sizes.append(0)  # broken symlink or vanished: the encoder reports it as skipped
            mtimes.append(0)
            continue
        sizes.append(st.st_size)
        mtimes.append(st.st_mtime_ns)
    return _Stats(sizes, mtimes)


def _walk_class_fast(root: str) -> ClassFiles:
    """`_walk_class` for a local folder on POSIX: the same files, order, and symlink rules, with
    names as bytes (no decoding, one small object each) and stats relative to the folder.

    This loop is most of a million-file dry run: per entry, one `is_dir` (the directory entry's
    type, no system call), an extension test and, for an image, one `fstatat`.
    """
    exts = IMAGE_EXTENSIONS_B
    chunks: list[tuple[bytes, list[bytes], _Stats]] = []
    ignored = 0
    visited: set[tuple[int, int]] = set()
    stack: list[tuple[bytes, bytes]] = [(os.fsencode(root), b"")]
    while stack:
        path, rel = stack.pop()
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        except OSError:
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
                        if name[:1] == b".":  # hidden
                            continue
                        try:
                            is_dir = e.is_dir()
                        except OSError:
                            is_dir = False
                        if is_dir:
                            subdirs.append(name)
                            continue
                        dot = name.rfind(b".")
                        if dot > 0 and name[dot:].lower() in exts:
                            files.append(name)
                        else:
                            ignored += 1
            except OSError:
                continue
            _sort_names(files)
            chunks.append((rel, files, _sizes(fd, files)))
        finally:
            os.close(fd)
        _sort_names(subdirs)
        stack.extend((os.path.join(path, n), rel + n + b"/") for n in reversed(subdirs))
    if len(chunks) == 1 and not chunks[0][0]:
        return ClassFiles(chunks[0][1], chunks[0][2].sizes, chunks[0][2].mtimes, ignored)  # flat: sorted already
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
    )


def _is_dir(entry: os.DirEntry) -> bool:
    try:
        return entry.is_dir(follow_symlinks=True)
    except OSError:
        return False


def _walk_class(root: str, rel_prefix: str) -> tuple[list[tuple[str, str, int, int]], int]:
    """All image candidates below one class folder, sorted; follows symlinks without looping.

    Returns ([(path, rel_to_class_root, size, mtime_ns)], ignored_non_image_count).
    """
    found: list[tuple[str, str, int, int]] = []
    ignored = 0
    visited: set[tuple[int, int]] = set()
    stack: list[tuple[str, str]] = [(root, "")]
    while stack:
        path, rel = stack.pop()
        try:
            st = os.stat(path)
        except OSError:
            continue
        key = (st.st_dev, st.st_ino)
        if key in visited:  # a symlink loop or a second link to a folder already walked
            continue
        visited.add(key)
        try:
            entries = _list_dir(path)
        except OSError:
            continue
        subdirs = []
        for e in entries:
            if is_hidden(e.name):
                continue
            child_rel = f"{rel}{e.name}"
            if _is_dir(e):
                subdirs.append((e.path, child_rel + "/"))
            elif os.path.splitext(e.name)[1].lower() in IMAGE_EXTENSIONS:
                try:
                    st = e.stat(follow_symlinks=True)
                    size, mtime = st.st_size, st.st_mtime_ns
                except OSError:
                    size = mtime = 0  # broken symlink or vanished: the encoder reports it as skipped
                found.append((e.path, child_rel, size, mtime))
            else:
                ignored += 1
        stack.extend(reversed(subdirs))
    found.sort(key=lambda t: t[1])
    return found, ignored


def discover(
    input_dir: str,
    *,
    split: dict[str, float] | None = None,
    seed: int = 0,
    label_offset: int = 0,
    labels: list[str] | None = None,
) -> Discovery:
    """Walk `input_dir` and return the candidate list of every split, in plan order (conversion.splits).

    Deterministic: the same tree, seed and options give the same lists on any machine.
    """
    remote = fs.is_remote(input_dir)
    if not (fs.isdir(input_dir) if remote else os.path.isdir(input_dir)):
        what = (
            "does not exist"
            if not (fs.exists(input_dir) if remote else os.path.exists(input_dir))
            else "is not a directory"
        )
        raise UsageError(f"input {input_dir} {what}: give the folder that holds one subfolder per class")
    if remote:
        with ThreadPoolExecutor(LIST_THREADS, thread_name_prefix="list") as pool:
            top = [e for e in _remote_entries(input_dir, pool) if not is_hidden(e.name)]
    else:
        top = [e for e in _local_entries(input_dir) if not is_hidden(e.name)]
    top_dirs = [e for e in top if e.is_dir]
    warnings: list[str] = []
    loose = [e for e in top if not e.is_dir and os.path.splitext(e.name)[1].lower() in IMAGE_EXTENSIONS]
    ignored = len(top) - len(top_dirs)

    presplit = bool(top_dirs) and all(e.name.lower() in SPLIT_DIR_NAMES for e in top_dirs)
    if presplit:
        if split:
            raise UsageError(f"{input_dir} is already split into {', '.join(e.name for e in top_dirs)}; drop --split")
        names = [SPLIT_DIR_NAMES[e.name.lower()] for e in top_dirs]
        if len(set(names)) != len(names):
            raise UsageError(f"{input_dir} has both 'val' and 'validation' folders: keep one")
        split_roots = {SPLIT_DIR_NAMES[e.name.lower()]: e.path for e in top_dirs}
    else:
        split_roots = {"": input_dir}
        named = [e.name for e in top_dirs if e.name.lower() in SPLIT_DIR_NAMES]
        if named:
            others = [e.name for e in top_dirs if e.name.lower() not in SPLIT_DIR_NAMES]
            warnings.append(
                f"{input_dir} holds {'a split folder' if len(named) == 1 else 'split folders'} ({', '.join(named)}) next to class "
                f"folders ({', '.join(others[:3])}{', ...' if len(others) > 3 else ''}): {'it is' if len(named) == 1 else 'they are'} "
                "taken as classes; to use splits, move every class folder into train/, validation/ or test/"
            )

    walks: list[tuple[str, str, str]] = []  # (class name, split key, folder)
    for skey, sroot in split_roots.items():
        entries = (
            [e for e in (_remote_entries if remote else _local_entries)(sroot) if not is_hidden(e.name)]
            if skey
            else top
        )
        for e in entries:
            if not e.is_dir:
                if skey:
                    ignored += 1
                    if os.path.splitext(e.name)[1].lower() in IMAGE_EXTENSIONS:
                        loose.append(e)
                continue
            walks.append((e.name, skey, e.path))
    if loose:
        warnings.append(
            f"{plural(len(loose), 'image')} {'lies' if len(loose) == 1 else 'lie'} outside any class folder (e.g. {loose[0].name}) and {'is' if len(loose) == 1 else 'are'} ignored: "
            "put them in INPUT/CLASS/"
        )
    images = f"(images: {', '.join(sorted(IMAGE_EXTENSIONS))})"
    classes = class_list(
        {c for c, _, _ in walks},
        labels,
        f"no class folders found in {input_dir}: expected {input_dir}/CLASS_NAME/image.jpg {images}",
    )
    table = ImageTable(input_dir, remote, classes, [i + label_offset for i in range(len(classes))], split_rel=True)
    index = {c: i for i, c in enumerate(classes)}
    # Laid out split folder by split folder, class folders in the order of their "class/" prefix:
    # each split's image numbers are then in image/filename order (see conversion.table).
    rank = {k: i for i, k in enumerate(split_roots)}
    walks.sort(key=lambda w: (rank[w[1]], w[0] + "/"))
    per_class: dict[str, dict[str, Sequence[int]]] = {}  # class name -> split key -> image numbers
    excluded: dict[str, int] = {}
    for (c, skey, _), found in zip(walks, _walk_classes(walks, remote)):
        ignored += found.ignored
        if c not in index:
            excluded[c] = excluded.get(c, 0) + len(found.names)
            continue
        split_dir = f"{os.path.basename(split_roots[skey])}/" if skey else ""
        group = table.new_group(split_dir + c + "/", index[c], len(split_dir))
        per_class.setdefault(c, {})[skey] = table.extend(group, found.names, found.sizes, found.mtimes)
    split_keys = list(split_roots) if presplit else (list(split) if split else ["train"])
    return assemble(
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
        no_images=f"no images found in {input_dir}: expected {input_dir}/CLASS_NAME/image.jpg {images}",
    )
