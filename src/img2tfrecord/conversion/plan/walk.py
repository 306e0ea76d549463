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
names as bytes and its files stat'ed relative to the open folder (`walk_class_fast`; the one stat
gives size and mtime), and laid out so that a split's image numbers are in image/filename order:
sorting a split sorts integers. On 1 M files in 10 classes (`bench/plan.py`, 2 cores),
`convert --dry-run` takes about the time of a bare `os.scandir` walk that keeps (path, size)
tuples, sorts and shuffles them (1.1x; it was 2.7x), and ~75 bytes an image at its peak RSS (~91 with
the mtime column and the hash order; the bare walk ~230; it was ~700). The stat of each file is most of both."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple

from img2tfrecord import fs
from img2tfrecord.conversion.plan import skips
from img2tfrecord.conversion.plan.enrich import Batch, Enricher, Skip, enrich_batch, fill
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
from img2tfrecord.conversion.plan.table import ImageTable, decode_name, encode_name
from img2tfrecord.conversion.plan.walk_files import (  # re-exported: the walk's vocabulary
    IMAGE_EXTENSIONS as IMAGE_EXTENSIONS,
)
from img2tfrecord.conversion.plan.walk_files import (
    NEVER_DATA_DIRS as NEVER_DATA_DIRS,
)
from img2tfrecord.conversion.plan.walk_files import (
    OS_JUNK_FILES as OS_JUNK_FILES,
)
from img2tfrecord.conversion.plan.walk_files import (
    PATH_MAX as PATH_MAX,
)
from img2tfrecord.conversion.plan.walk_files import (
    ClassFiles,
    Entry,
    Visited,
    WalkReport,
    local_entries,
    never_data_dir,
    os_junk_file,
    reason_of,
    remote_entries,
    walk_class,
    walk_class_fast,
    walk_class_remote,
)
from img2tfrecord.conversion.plan.walk_files import (
    is_hidden as is_hidden,
)
from img2tfrecord.conversion.plan.walk_remote import LIST_THREADS
from img2tfrecord.conversion.plan.walk_remote import stat_remote as stat_remote  # re-exported: update's walk uses it
from img2tfrecord.conversion.plan.walk_text import junk_note, loose_warning, mixed_split_warning, no_classes
from img2tfrecord.errors import DataError, UsageError, option
from img2tfrecord.format.manifest import class_name_problem, shown
from img2tfrecord.format.schema import utf8_text

# The fast local walk reads names as bytes and stats files relative to an open folder (fstatat):
# POSIX, with names that decode as UTF-8 with surrogate escapes (so bytes are what str.encode gives).
_BYTES_WALK = (
    os.name == "posix"
    and os.stat in os.supports_dir_fd
    and sys.getfilesystemencoding().lower().replace("-", "") == "utf8"
    and sys.getfilesystemencodeerrors() == "surrogateescape"
)


class ClassWalk(NamedTuple):
    """A folder to walk: a class folder (of a split folder), or the whole of INPUT ("", "", INPUT)."""

    name: str  # the class ("" for the whole input)
    split: str  # the split folder's key ("" when none)
    path: str


def walk_classes(walks: Sequence[ClassWalk], remote: bool) -> Iterator[ClassFiles]:
    """Walk every folder; remote folders concurrently, results in order. A local folder reached
    twice is walked once (docs/converting.md): by its own class when it is a class folder, else by
    the first class that reaches it."""
    if not remote:
        seen = Visited.of([w.path for w in walks])
        yield from (walk_class_fast(w.path, seen) if _BYTES_WALK else walk_class(w.path, "", seen) for w in walks)
        return
    with ThreadPoolExecutor(min(LIST_THREADS, max(1, len(walks))), thread_name_prefix="list") as pool:
        yield from pool.map(lambda w: walk_class_remote(w.path, w.name + "/"), walks)


def check_input(input_dir: str) -> bool:
    """Whether `input_dir` is remote; UsageError when it is no folder."""
    remote = fs.is_remote(input_dir)
    if not (fs.isdir(input_dir) if remote else os.path.isdir(input_dir)):
        bare = input_dir.rstrip("/") or input_dir  # "cat_000.jpg/" names a file too
        what = "is a file, not a folder" if (fs.exists(bare) if remote else os.path.exists(bare)) else "does not exist"
        raise UsageError(f"input {input_dir} {what}: give the folder that holds one subfolder per class")
    return remote


class _Layout(NamedTuple):
    """INPUT's top: split folders or not, the class folders to walk, loose images, non-images."""

    presplit: bool
    split_roots: dict[str, str]  # split key ("" when not presplit) -> its folder
    walks: list[ClassWalk]
    loose: list[Entry]
    ignored: int
    warnings: list[str]


def _layout(
    input_dir: str, top: list[Entry], split: dict[str, float] | None, remote: bool, report: WalkReport
) -> _Layout:
    """The split folders and class folders below INPUT (see the module docstring)."""
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
    walks: list[ClassWalk] = []
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
            walks.append(ClassWalk(e.name, skey, e.path))
    return _Layout(presplit, split_roots, walks, loose, ignored, warnings)


class _Filled(NamedTuple):
    """The class folders walked into the table: image numbers per class and split, and what was left out."""

    per_class: dict[str, dict[str, Sequence[int]]]  # class name -> split key -> image numbers
    excluded: dict[str, int]
    skipped: list[dict[str, str]]
    ignored: int
    walked: int  # image candidates found in the classes kept (with enrichers: before they leave any out)
    left_out: dict[int, str]  # an enricher (by position) -> the first path it left out


def _fill(
    table: ImageTable,
    lay: _Layout,
    index: dict[str, int],
    split: dict[str, float] | None,
    seed: int,
    report: WalkReport,
    enrichers: Sequence[Enricher],
) -> _Filled:
    """Walk every class folder into `table`, class folders in the order of their "class/" prefix
    (each split's image numbers are then in image/filename order; see conversion.plan.table); with
    `enrichers` (conversion.plan.enrich), only the images they keep, each with their columns."""
    rank = {k: i for i, k in enumerate(lay.split_roots)}
    walks = sorted(lay.walks, key=lambda w: (rank[w.split], w.name + "/"))
    per_class: dict[str, dict[str, Sequence[int]]] = {}
    excluded: dict[str, int] = {}
    skipped = [{"path": utf8_text(rel), "split": "", "reason": why} for rel, why in report.skipped]  # INPUT's own
    ignored, seen, walked = lay.ignored, set[bytes](), 0
    left_out: dict[int, str] = {}  # an enricher (by position) -> the first path it left out
    for w, found in zip(walks, walk_classes(walks, table.remote)):
        c, skey, path = w.name, w.split, w.path
        ignored += found.ignored
        split_dir = f"{os.path.basename(lay.split_roots[skey])}/" if skey else ""
        prefix = split_dir + c + "/"
        if c not in index:
            excluded[c] = excluded.get(c, 0) + len(found.names)
            if enrichers:
                seen.update(encode_name(prefix) + n for n in found.names)
            continue
        if found.report.error is not None:
            raise DataError(
                f"cannot list class folder {path}: {found.report.error}; its images would be missing: "
                f"fix its permissions, or leave the class out with {option('labels')}"
            )
        report.merge(found.report)
        walked += len(found.names)
        for rel, why in found.report.skipped:
            whose = skey or ("" if rel.endswith("/") else split_of(prefix + rel, seed, split))
            skipped.append({"path": utf8_text(prefix + rel), "split": whose, "reason": why})
        batch = Batch(encode_name(prefix), skey, found.names, found.sizes, found.mtimes)
        columns: dict[str, list[Any]] = {}
        if enrichers:
            seen.update(batch.prefix + n for n in batch.names)
            batch, _, columns, skips = enrich_batch(enrichers, batch)
            skipped += [_skip(s, skey, seed, split) for s in skips]
            _first_left_out(enrichers, skips, left_out)
        group = table.new_group(prefix, index[c], len(split_dir))
        per_class.setdefault(c, {})[skey] = numbers = table.extend(group, batch.names, batch.sizes, batch.mtimes)
        fill(table, numbers, columns)
    for e in enrichers:
        skipped += e.leftovers(seen)
    return _Filled(per_class, excluded, skipped, ignored, walked, left_out)


def _skip(s: Skip, skey: str, seed: int, split: dict[str, float] | None) -> dict[str, str]:
    """An enricher's skip as the walk lists it: with the split the image would have gone to."""
    rel = decode_name(s.rel)
    return {"path": utf8_text(rel), "split": skey or split_of(rel, seed, split), "reason": s.reason}


def _first_left_out(enrichers: Sequence[Enricher], skips: Sequence[Skip], left_out: dict[int, str]) -> None:
    """Note, per enricher, the first path (by name) it left out: what `none_kept` names."""
    for k, e in enumerate(enrichers):
        mine = [utf8_text(decode_name(s.rel)) for s in skips if s.reason.startswith(e.skip_reasons)]
        if mine:
            first = min(mine)
            left_out[k] = min(left_out.get(k, first), first)


def discover(
    input_dir: str,
    *,
    split: dict[str, float] | None = None,
    seed: int = 0,
    label_offset: int = 0,
    labels: list[str] | None = None,
    known_classes: list[str] | None = None,
    rule: SplitRule = EXACT,
    enrichers: Sequence[Enricher] = (),
) -> Discovery:
    """Walk `input_dir` and return the candidate list of every split, in plan order (conversion.plan.splits).

    Deterministic: the same tree, seed and options give the same lists on any machine. `enrichers`
    (conversion.plan.enrich, none giving classes): what they add to each image; images one leaves out are skipped.
    """
    remote = check_input(input_dir)
    report = WalkReport()  # what the walk cannot read or leaves out, below INPUT
    top = [e for e in _entries(input_dir, remote, report, "", "input") if not owned(e.path, enrichers)]
    lay = _layout(input_dir, top, split, remote, report)
    loose = lay.loose
    left_out = loose_warning(input_dir, len(loose), loose[0].name, top_level=not lay.presplit) if loose else ""
    images = f"(images: {', '.join(sorted(IMAGE_EXTENSIONS))})"
    folders = {w.name for w in lay.walks}
    classes = class_list(folders, labels, no_classes(input_dir, len(loose), images), known_classes)
    for c in classes:
        if c in folders and (problem := class_name_problem(c)):
            raise UsageError(f"the class folder {shown(fs.join(input_dir, c))} {problem}: rename it")
    table = ImageTable(input_dir, remote, classes, [i + label_offset for i in range(len(classes))], split_rel=True)
    table.enrichers = enrichers
    filled = _fill(table, lay, {c: i for i, c in enumerate(classes)}, split, seed, report, enrichers)
    if remote:  # a listing gives no size or mtime; the catalog needs them for update to see changes
        stat_remote(table)
    split_keys = list(lay.split_roots) if lay.presplit else (list(split) if split else ["train"])
    found_all = assemble(
        table,
        filled.per_class,
        filled.excluded,
        split_keys,
        presplit=lay.presplit,
        split=split,
        seed=seed,
        ignored=filled.ignored,
        warnings=lay.warnings + [left_out] * bool(loose),
        what="class folder",
        whats="class folders",
        no_images=_no_images(input_dir, images, enrichers, filled),
        rule=rule,
        missing=_missing(input_dir, set(classes) - folders, lay.presplit),
    )
    found_all.skipped = sorted(filled.skipped, key=lambda s: s["path"])
    found_all.loose = left_out
    if note := junk_note(report.junk_dirs):
        found_all.notes.append(note)
    return found_all


def _no_images(input_dir: str, images: str, enrichers: Sequence[Enricher], filled: _Filled) -> str:
    """What to say when no image is left: none found, or none an enricher kept (a metadata file's rows)."""
    if filled.walked and filled.left_out:
        k = min(filled.left_out)
        return enrichers[k].none_kept(input_dir, filled.walked, filled.left_out[k])
    return f"no images found in {input_dir}: expected {fs.join(input_dir, 'CLASS_NAME', 'image.jpg')} {images}"


def _missing(input_dir: str, classes: set[str], presplit: bool) -> Missing:
    """The classes of --labels with no folder, and how to say so."""
    if presplit:
        return Missing(
            classes,
            lambda c: f"no split folder of {input_dir} holds a folder {c}",
            f"no split folder of {input_dir} holds their folders",
        )
    return Missing(
        classes, lambda c: f"its folder {fs.join(input_dir, c)} is missing", f"their folders in {input_dir} are missing"
    )


def owned(path: str, enrichers: Sequence[Enricher]) -> bool:
    """Whether `path` (an entry of INPUT) is an enricher's own input (the metadata file): neither an
    image nor an ignored file."""
    if not enrichers:
        return False
    remote = fs.is_remote(path)
    mine = path.rstrip("/") if remote else os.path.abspath(path)
    return any(mine == (p.rstrip("/") if remote else os.path.abspath(p)) for e in enrichers for p in e.inputs)


def _entries(path: str, remote: bool, report: WalkReport, rel: str, what: str) -> list[Entry]:
    """The entries of INPUT or a split folder that may hold data, sorted; junk counted in `report`,
    entries the OS cannot tell the kind of are skips. A folder that cannot be listed is a DataError."""
    try:
        if remote:
            with ThreadPoolExecutor(LIST_THREADS, thread_name_prefix="list") as pool:
                entries = remote_entries(path, pool)
        else:
            entries = local_entries(path)
    except Exception as err:  # OSError, or tf.errors.* for a remote folder
        raise DataError(f"cannot list {what} {path}: {reason_of(err)}") from None
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
