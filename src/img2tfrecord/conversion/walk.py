"""Discovery: find the images, give them labels, shuffle them, cut them into splits.

Layouts (as Keras' `image_dataset_from_directory` and TFDS' ImageFolder understand them):

* ``INPUT/CLASS/.../image``: each immediate subfolder is a class; nested folders belong to it.
* ``INPUT/SPLIT/CLASS/.../image`` when every immediate subfolder is a split name (train,
  validation or val, test): the splits are used as they are, with one class list for all.

Labels are the index of the class name in sorted order (or in ``--labels`` order) plus an offset,
so they are stable: an empty class folder keeps its label. The real image format is read from the
content later (encoder); here a file is a candidate when its extension looks like an image.

Inputs with a scheme (``gs://bucket/data``) are listed through ``tf.io.gfile``, one class folder
per thread, so a bucket with thousands of classes is listed in parallel. ``--file-list`` replaces
the walk by a CSV/TSV of ``path[,label_name]`` rows; both give the same `Discovery`, and the same
files give the same plan (and bytes) whichever way they were found.

Scale (issue 13: 100 M images must plan on one Beam driver): what is found goes straight into an
`ImageTable` (conversion.table), never into an object per image. A local class folder is read with
names as bytes and its files stat'ed relative to the open folder (`_walk_class_fast`), and laid
out so that a split's image numbers are in image/filename order: sorting a split sorts integers.
On 1 M files in 10 classes (`bench/plan.py`, 2 cores), `convert --dry-run` now takes about the
time of a bare `os.scandir` walk that keeps (path, size) tuples, sorts and shuffles them (1.1x;
it was 2.7x), and ~75 bytes an image at its peak RSS (the bare walk ~230; it was ~700). The stat
of each file is most of both. A file list is parsed into the same table, a row held as one bytes
object until it is in (~200 bytes a row at the peak for 1 M rows; it was ~680).
"""

from __future__ import annotations

import csv
import os
import posixpath
import random
import stat
import sys
from array import array
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from itertools import chain
from typing import NamedTuple

from img2tfrecord import fs
from img2tfrecord.conversion.table import ImageTable, Task, TaskView, encode_name
from img2tfrecord.errors import UsageError, plural
from img2tfrecord.format.schema import filename_problem, utf8_text

IMAGE_EXTENSIONS = frozenset({".jpg", ".jpeg", ".png", ".gif", ".bmp", ".webp", ".tif", ".tiff"})
SPLIT_DIR_NAMES = {"train": "train", "validation": "validation", "val": "validation", "test": "test"}
LIST_THREADS = 32  # concurrent gfile listings of a remote input (each is one or a few HTTP requests)
FILE_LIST_HEADERS = {"path", "filename", "file"}

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


@dataclass
class Discovery:
    """What the walk found: classes, candidate images per split (views over one `ImageTable`, in
    plan order), and what it ignored."""

    classes: list[str]
    splits: dict[str, TaskView]
    ignored_files: int = 0  # files that are no image candidates (notes.txt)
    warnings: list[str] = field(default_factory=list)
    presplit: bool = False
    excluded_files: int = 0  # images of classes --labels leaves out


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


def _walk_class_remote(root: str, rel_prefix: str) -> tuple[list[tuple[str, str, int]], int]:
    """`_walk_class` for a remote folder (object stores have no symlinks; sizes are unknown: 0)."""
    found: list[tuple[str, str, int]] = []
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
                found.append((e.path, f"{rel}{e.name}", 0))
            else:
                ignored += 1
        stack.extend(reversed(subdirs))
    found.sort(key=lambda t: t[1])
    return found, ignored


class ClassFiles(NamedTuple):
    """The image candidates below one class folder: names relative to it ('/'-separated, as
    `encode_name` gives them), sorted as the names' str sort; their sizes; non-images ignored."""

    names: list[bytes]
    sizes: array
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


def _as_class_files(found: list[tuple[str, str, int]], ignored: int) -> ClassFiles:
    return ClassFiles([encode_name(r) for _, r, _ in found], array("q", (sz for _, _, sz in found)), ignored)


def _sort_names(names: list[bytes]) -> None:
    """Sort file system names as their str forms sort (what the walk has always done): as bytes
    when they are valid UTF-8 (whose byte order is code point order), else by the decoded str."""
    try:
        b"/".join(names).decode("utf-8")  # '/' never occurs in a name and ends any multi-byte sequence
        names.sort()
    except UnicodeDecodeError:
        names.sort(key=os.fsdecode)


def _sizes(fd: int, names: list[bytes]) -> array:
    """Each file's size, stat'ed relative to its open folder (following symlinks); 0 if it fails."""
    stat = os.stat
    try:
        return array("q", [stat(n, dir_fd=fd).st_size for n in names])
    except OSError:
        pass
    out = array("q")
    for n in names:
        try:
            out.append(stat(n, dir_fd=fd).st_size)
        except OSError:
            out.append(0)  # broken symlink or vanished: the encoder reports it as skipped
    return out


def _walk_class_fast(root: str) -> ClassFiles:
    """`_walk_class` for a local folder on POSIX: the same files, order, and symlink rules, with
    names as bytes (no decoding, one small object each) and stats relative to the folder.

    This loop is most of a million-file dry run: per entry, one `is_dir` (the directory entry's
    type, no system call), an extension test and, for an image, one `fstatat`.
    """
    exts = IMAGE_EXTENSIONS_B
    chunks: list[tuple[bytes, list[bytes], array]] = []
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
        return ClassFiles(chunks[0][1], chunks[0][2], ignored)  # a flat class folder: sorted already
    names = [rel + n for rel, files, _ in chunks for n in files]
    sizes = array("q", chain.from_iterable(sz for _, _, sz in chunks))
    by_name = list(range(len(names)))
    try:
        b"/".join(names).decode("utf-8")
        by_name.sort(key=names.__getitem__)
    except UnicodeDecodeError:
        by_name.sort(key=lambda i: os.fsdecode(names[i]))
    return ClassFiles([names[i] for i in by_name], array("q", (sizes[i] for i in by_name)), ignored)


def _is_dir(entry: os.DirEntry) -> bool:
    try:
        return entry.is_dir(follow_symlinks=True)
    except OSError:
        return False


def _walk_class(root: str, rel_prefix: str) -> tuple[list[tuple[str, str, int]], int]:
    """All image candidates below one class folder, sorted; follows symlinks without looping.

    Returns ([(path, rel_to_class_root, size)], ignored_non_image_count).
    """
    found: list[tuple[str, str, int]] = []
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
                    size = e.stat(follow_symlinks=True).st_size
                except OSError:
                    size = 0  # broken symlink or vanished: the encoder reports it as skipped
                found.append((e.path, child_rel, size))
            else:
                ignored += 1
        stack.extend(reversed(subdirs))
    found.sort(key=lambda t: t[1])
    return found, ignored


def read_labels_file(path: str) -> list[str]:
    """One class name per line; blank lines and surrounding whitespace ignored; no duplicates."""
    try:
        with open(path, encoding="utf-8") as f:
            names = [line.strip() for line in f if line.strip()]
    except OSError as e:
        raise UsageError(f"cannot read --labels file {path}: {e.strerror}") from None
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise UsageError(f"--labels file {path} lists {', '.join(dupes)} more than once")
    if not names:
        raise UsageError(f"--labels file {path} is empty")
    return names


def parse_split_spec(spec: str) -> dict[str, float]:
    """'train=0.8,validation=0.2' -> {'train': 0.8, 'validation': 0.2}; fractions must sum to 1."""
    fractions: dict[str, float] = {}
    for part in spec.split(","):
        name, sep, value = part.strip().partition("=")
        name = SPLIT_DIR_NAMES.get(name.strip().lower(), name.strip())
        try:
            frac = float(value)
        except ValueError:
            frac = -1.0
        if not sep or not name or not name.replace("_", "").isalnum() or not 0 <= frac <= 1:
            raise UsageError(f"bad --split {spec!r}: expected e.g. train=0.8,validation=0.2")
        if name in fractions:
            raise UsageError(f"bad --split {spec!r}: {name} given twice")
        fractions[name] = frac
    if abs(sum(fractions.values()) - 1.0) > 1e-6:
        raise UsageError(f"bad --split {spec!r}: the fractions add up to {sum(fractions.values()):g}, not 1")
    return fractions


def _stratify(files: Sequence[int], fractions: dict[str, float], rng: random.Random) -> dict[str, list[int]]:
    """Cut one class's files into splits by cumulative rounding, after a seeded shuffle."""
    files = list(files)
    rng.shuffle(files)
    n, out, start, acc = len(files), {}, 0, 0.0
    for name, frac in fractions.items():
        acc += frac
        end = round(n * acc)
        out[name] = files[start:end]
        start = end
    return out


def discover(
    input_dir: str,
    *,
    split: dict[str, float] | None = None,
    seed: int = 0,
    label_offset: int = 0,
    labels: list[str] | None = None,
) -> Discovery:
    """Walk `input_dir` and return the shuffled candidate list of every split.

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
    ignored = len(top) - len(top_dirs) - len(loose)  # non-image files; loose images are said apart

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
                    if os.path.splitext(e.name)[1].lower() in IMAGE_EXTENSIONS:
                        loose.append(e)
                    else:
                        ignored += 1
                continue
            walks.append((e.name, skey, e.path))
    if loose:
        warnings.append(
            f"{plural(len(loose), 'image')} {'lies' if len(loose) == 1 else 'lie'} outside any class folder (e.g. {loose[0].name}) and {'is' if len(loose) == 1 else 'are'} ignored: "
            "put them in INPUT/CLASS/"
        )
    images = f"(images: {', '.join(sorted(IMAGE_EXTENSIONS))})"
    classes = _class_list(
        {c for c, _, _ in walks},
        labels,
        f"no class folders found in {input_dir}: expected {fs.join(input_dir, 'CLASS_NAME', 'image.jpg')} {images}",
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
        per_class.setdefault(c, {})[skey] = table.extend(group, found.names, found.sizes)
    split_keys = list(split_roots) if presplit else (list(split) if split else ["train"])
    return _assemble(
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
    )


def _class_list(found: set[str], labels: list[str] | None, no_classes: str) -> list[str]:
    """The classes, in label order: --labels as given, else the names found, sorted."""
    classes = list(labels) if labels is not None else sorted(found)
    if not classes:
        raise UsageError(no_classes)
    return classes


def _in_order(parts: list[Sequence[int]]) -> array:
    """One split's image numbers, sorted (= image/filename order); whole groups need no sort."""
    if all(isinstance(p, range) for p in parts):
        return array("q", chain.from_iterable(sorted(parts, key=lambda r: r.start)))  # type: ignore[attr-defined]
    return array("q", sorted(chain.from_iterable(parts)))


def _assemble(
    table: ImageTable,
    per_class: dict[str, dict[str, Sequence[int]]],
    excluded: dict[str, int],
    split_keys: list[str],
    *,
    presplit: bool,
    split: dict[str, float] | None,
    seed: int,
    ignored: int,
    warnings: list[str],
    what: str,
    whats: str,
    no_images: str,
) -> Discovery:
    """Stratified splits and the seeded shuffle over the table's image numbers: shared by the folder
    walk and --file-list. `per_class` holds the image numbers of each class in image/filename order."""
    classes = table.classes
    if excluded:
        unlisted = sorted(excluded)
        n = sum(excluded.values())
        warnings.append(
            f"{plural(len(unlisted), what, whats)} not in --labels {'is' if len(unlisted) == 1 else 'are'} left out "
            f"({plural(n, 'image')}): " + ", ".join(unlisted[:5]) + ("..." if len(unlisted) > 5 else "")
        )
    for c in classes:
        if not any(len(v) for v in per_class.get(c, {}).values()):
            warnings.append(f"class {c!r} has no images; its label is kept")

    parts: dict[str, list[Sequence[int]]] = {s: [] for s in split_keys}
    for c in classes:
        for skey, numbers in per_class.get(c, {}).items():
            if presplit:
                parts[skey].append(numbers)
            elif split:
                for s, part in _stratify(numbers, split, random.Random(f"img2tfrecord:{seed}:stratify:{c}")).items():
                    parts[s].append(part)
            else:
                parts["train"].append(numbers)
    undecodable = [n for n in classes if not n.isascii() and utf8_text(n) != n]
    if not table.names.isascii() or not all(g.prefix.isascii() for g in table.groups):  # else none can be
        undecodable += [
            name
            for pieces in parts.values()
            for piece in pieces
            for i in piece
            if not (name := table.task(i).filename).isascii() and utf8_text(name) != name
        ]
    if undecodable:
        warnings.append(
            f"{plural(len(undecodable), 'name')} {'is' if len(undecodable) == 1 else 'are'} not valid UTF-8 (e.g. '{utf8_text(undecodable[0])}'): records, "
            "labels.txt and dataset.json hold the undecodable bytes as \\xNN escapes; rename the files to keep their names exact"
        )
    splits: dict[str, TaskView] = {}
    for s, pieces in parts.items():
        order = _in_order(pieces)
        random.Random(f"img2tfrecord:{seed}:shuffle:{s}").shuffle(order)
        splits[s] = TaskView(table, order)
    if not any(splits.values()):
        raise UsageError(no_images)
    return Discovery(
        classes=classes,
        splits=splits,
        ignored_files=ignored,
        warnings=warnings,
        presplit=presplit,
        excluded_files=sum(excluded.values()),
    )


def discover_file_list(
    input_dir: str,
    file_list: str,
    *,
    split: dict[str, float] | None = None,
    seed: int = 0,
    label_offset: int = 0,
    labels: list[str] | None = None,
) -> Discovery:
    """The images named by a CSV/TSV file instead of a walk (how big datasets are described in buckets).

    Rows are ``path,label_name`` or just ``path`` (the class is then the first folder of the path
    below INPUT). Relative paths are joined to INPUT; absolute and scheme:// paths are used as
    given. A first row whose path column reads path/filename/file is a header. Rows are sorted
    per class, so the order of the list does not matter, and listing exactly the files of a
    folder tree gives the same dataset as walking it. Local files are checked (and sized) here;
    remote ones are not (one request per object is the cost a file list avoids): a missing one
    is reported as skipped.
    """
    listed = _read_file_list(input_dir, file_list)
    classes = _class_list(set(listed.labels), labels, f"--file-list {file_list} lists no images")
    root = fs.local(input_dir)
    table = ImageTable(root, fs.is_remote(root), classes, [i + label_offset for i in range(len(classes))])
    index = {c: i for i, c in enumerate(classes)}
    groups = {c: table.new_group("", i) for c, i in index.items()}
    per_class: dict[str, dict[str, Sequence[int]]] = {c: {"": array("q")} for c in classes}
    excluded: dict[str, int] = {}
    chunk = 1 << 16  # rows moved into the table at a time (image/filename order: list order is irrelevant)
    for start in range(0, len(listed.rows), chunk):
        names: list[bytes] = []
        group_of, sizes = array("I"), array("q")
        for row in listed.rows[start : start + chunk]:
            n = _row_number(row)
            label = listed.labels[listed.label_of[n]]
            if label not in index:
                excluded[label] = excluded.get(label, 0) + 1
                continue
            if n in listed.paths:
                table.paths[len(table) + len(names)] = listed.paths[n]
            per_class[label][""].append(len(table) + len(names))  # type: ignore[attr-defined]
            names.append(row[: -ROW_NUMBER - 1])
            group_of.append(groups[label])
            sizes.append(listed.sizes[n])
        table.extend(group_of, names, sizes)
    del listed
    return _assemble(
        table,
        per_class,
        excluded,
        list(split) if split else ["train"],
        presplit=False,
        split=split,
        seed=seed,
        ignored=0,
        warnings=[],
        what="class",
        whats="classes",
        no_images=f"--file-list {file_list}: none of the listed images belongs to a class in --labels",
    )


class _Listed(NamedTuple):
    """A file list's rows, compactly: `rows` sorted by image/filename, each the name's bytes, a NUL
    and its row number (8 bytes); then by row number its label (into `labels`) and size, and the
    path to read where it is not INPUT joined with the name."""

    rows: list[bytes]
    labels: list[str]
    label_of: array
    sizes: array
    paths: dict[int, str]


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


def _read_file_list(input_dir: str, file_list: str) -> _Listed:
    """Parse and check every row; UsageError naming the line for anything wrong (the first wrong
    line, as a reading that stopped there would say).

    A million rows are held as one bytes object and three array entries each, not as tuples of
    strings, and a name listed twice is found by sorting, not in a dict of every name."""
    where = f"--file-list {file_list}"
    try:
        raw = fs.read_bytes(file_list)
    except FileNotFoundError:
        raise UsageError(f"{where} does not exist") from None
    except OSError as e:
        raise UsageError(f"cannot read {where}: {e.strerror or e}") from None
    except Exception as e:  # tf.errors.NotFoundError on gs:// & co.
        raise UsageError(f"cannot read {where}: {getattr(e, 'message', None) or e}") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise UsageError(f"{where} is not UTF-8 text (byte {e.start})") from None
    del raw
    first = _first_line(text)
    delimiter = "\t" if file_list.lower().endswith((".tsv", ".tab")) or "\t" in first else ","
    reader = csv.reader(_lines(text), delimiter=delimiter, strict=True)
    root = fs.local(input_dir)
    rows: list[bytes] = []  # name + NUL + row number
    lines = array("q")  # by row number: the line it was on
    label_of, sizes = array("I"), array("q")
    label_index: dict[str, int] = {}
    paths: dict[int, str] = {}
    missing: list[tuple[int, str]] = []
    columns = 0

    def fail(line: int, message: str) -> UsageError:
        """The error at `line`, unless a name listed twice on an earlier line came first."""
        twice = _listed_twice(rows, lines, text, delimiter, where, before=line)
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
            if len(cells) not in (1, 2) or (columns and len(cells) != columns):
                want = {1: "path", 2: "path,label_name"}.get(columns, "path,label_name (or only path)")
                raise fail(line, f"expected {want}, got {len(cells)} column(s): {delimiter.join(row)!r}")
            columns = len(cells)
            given = cells[0]
            if not given:
                raise fail(line, "empty path")
            path, rel, below = _resolve_listed(input_dir, given)
            if len(cells) == 2:
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
            size = 0
            if not fs.is_remote(path):
                try:
                    st = os.stat(path)
                except OSError:
                    missing.append((line, path))
                    st = None
                if st is not None and stat.S_ISDIR(st.st_mode):
                    raise fail(line, f"{path} is a folder, not an image")
                size = st.st_size if st is not None else 0
            number = len(rows)
            rows.append(encode_name(rel) + b"\0" + number.to_bytes(ROW_NUMBER, "big"))
            lines.append(line)
            label_of.append(label_index.setdefault(label, len(label_index)))
            sizes.append(size)
            if path != fs.join(root, rel):
                paths[number] = path
    except csv.Error as e:
        raise fail(reader.line_num, str(e)) from None
    twice = _listed_twice(rows, lines, text, delimiter, where)  # sorts `rows`
    if twice:
        raise twice
    if missing:
        line, path = missing[0]
        more = f" ({len(missing) - 1} more listed file(s) are missing too)" if len(missing) > 1 else ""
        raise UsageError(f"{where} line {line}: {path} does not exist{more}")
    return _Listed(rows, list(label_index), label_of, sizes, paths)


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
