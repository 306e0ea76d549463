"""The class list: its order gives the labels (sorted names, or a --labels file's order), and every
name must be one that labels.txt can hold (`format.manifest.class_name_problem`), so a published
labels.txt always passes its own `inspect --verify` and reads back as the same classes.

Also the bounded reading of the text files that name inputs (--labels, --file-list): a device or
a pipe that never ends (/dev/zero) or a file far larger than any real list is refused after a
bounded read, not read until memory runs out.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from img2tfrecord import fs
from img2tfrecord.errors import UsageError, option, size_text
from img2tfrecord.format.manifest import class_name_problem, shown

MAX_LABELS_BYTES = 64_000_000  # ImageNet-21k's 21,841 names are ~0.4 MB; 64 MB holds millions
READ_CHUNK = 1 << 20


def read_text_input(path: str, where: str, limit: int) -> str:
    """The UTF-8 text of `path` (a BOM dropped), read in chunks of at most `limit` bytes in all;
    UsageError, in one line, when it cannot be read, is larger, holds NUL bytes or is not UTF-8."""
    data = bytearray()
    try:
        opener = fs.gfile(path).GFile if fs.is_remote(path) else open
        with opener(path, "rb") as f:
            while True:
                chunk = f.read(min(READ_CHUNK, limit + 1 - len(data)))
                if not chunk:
                    break
                if (nul := chunk.find(b"\0")) >= 0:
                    raise UsageError(f"{where} is not a text file (byte {len(data) + nul:,} is NUL)")
                data += chunk
                if len(data) > limit:
                    raise UsageError(f"{where} is larger than {size_text(limit)}: not a list this tool can hold")
    except FileNotFoundError:
        raise UsageError(f"{where} does not exist") from None
    except IsADirectoryError:
        raise UsageError(f"{where} is a folder, not a file") from None
    except OSError as e:
        raise UsageError(f"cannot read {where}: {e.strerror or e}") from None
    except UsageError:
        raise
    except Exception as e:  # tf.errors.NotFoundError on gs:// & co.
        raise UsageError(f"cannot read {where}: {getattr(e, 'message', None) or e}") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise UsageError(f"{where} is not UTF-8 text (byte {e.start:,})") from None


def check_regular_file(path: str, where: str) -> None:
    """UsageError, in one line, unless `path` is a regular file (or a link to one): a FIFO's read
    waits for a writer that may never come and a device (/dev/zero) never ends, so a file that is
    read whole (an annotation file: up to gigabytes) is refused before it is opened. os.stat opens
    nothing, so a FIFO cannot block it."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise UsageError(f"{where} does not exist") from None
    except OSError as e:
        raise UsageError(f"cannot read {where}: {e.strerror or e}") from None
    if not stat.S_ISREG(st.st_mode):
        raise UsageError(f"{where} is {not_regular(st.st_mode)}, not a regular file: give the file itself")


def not_regular(mode: int) -> str:
    """What a file that is not a regular one is, as a message says it ('a FIFO')."""
    kinds = {
        stat.S_IFDIR: "a folder",
        stat.S_IFIFO: "a FIFO",
        stat.S_IFCHR: "a character device",
        stat.S_IFBLK: "a block device",
        stat.S_IFSOCK: "a socket",
    }
    return kinds.get(stat.S_IFMT(mode), "not a file")


def read_labels_file(path: str) -> list[str]:
    """One class name per line, exactly as written; blank (or all white space) lines ignored; no duplicates.

    Exactly: labels.txt holds the folder names as they are, so a class folder " cat " (white space is
    a legal part of a name) must read back as " cat " for `convert --labels OUT/labels.txt` and
    `update` to find it again. Keras matches class names to folder names exactly too; TFDS'
    ClassLabel strips each line, which is why `format.tfds` leaves its names file out for such
    names. A hand-typed "cat " beside a folder "cat" is refused by the walk (`splits`), not
    silently matched or dropped. Lines are split at '\\n' (and '\\r\\n', '\\r'), so a name that
    holds another line break or a control character is refused with its line, as labels.txt could
    not hold it."""
    where = f"{option('labels')} file {path}"
    text = read_text_input(path, where, MAX_LABELS_BYTES)
    names: list[str] = []
    lines: list[int] = []  # each name's line, for the message naming two lines of one name
    for number, line in enumerate(text.replace("\r\n", "\n").replace("\r", "\n").split("\n"), 1):
        name = line
        if not name.strip():
            continue
        if problem := class_name_problem(name):
            raise UsageError(f"{where} line {number}: the class name {shown(name)} {problem}")
        names.append(name)
        lines.append(number)
    if not names:
        raise UsageError(f"{where} is empty")
    check_class_list(names, lines, where, "line")
    return names


def check_class_list(names: Sequence[str], ids: Sequence[object], source: str, kind: str = "id") -> None:
    """The one check of a class list, wherever it comes from (COCO's categories, a YOLO classes file
    or data.yaml, VOC's names, a metadata file's labels, --labels): every name one labels.txt can
    hold, and every name given once. `ids[i]` is how the source numbers `names[i]` (a category id,
    a class number, a line: `kind`), `source` names the source in the message.

    Two ids of one name would be two classes of one name: each image is listed under both (every
    record written twice) and label_map.pbtxt names it twice. Which class a box of either id means
    is the user's to say, so such a list is refused, naming the ids, never merged. One hashing
    pass: 50,000 names in milliseconds."""
    for name, i in zip(names, ids):
        if problem := class_name_problem(name):
            raise UsageError(f"{source}: the class name {shown(name)} ({kind} {i}) {problem}: rename it")
    first: dict[str, object] = {}
    shared: dict[str, list[object]] = {}  # a name given twice -> every id it is given to
    for name, i in zip(names, ids):
        if name in first:
            shared.setdefault(name, [first[name]]).append(i)
        else:
            first[name] = i
    if shared:
        name, which = next(iter(shared.items()))
        k = len(shared) - 1
        more = f" (and {k:,} more {'name' if k == 1 else 'names'} given twice)" if k else ""
        numbers = ", ".join(f"{i:,}" if type(i) is int else str(i) for i in which)
        kinds = {"entry": "entries"}.get(kind, kind + "s")
        raise UsageError(
            f"{source}: {kinds} {numbers} share the class name {shown(name)}{more}: a class list names each class "
            f"once; rename one of them, or give all their boxes one {kind}"
        )


def check_class_names(names: Iterable[str], what: str, fix: str) -> None:
    """UsageError for the first name labels.txt could not hold; `what` names where it came from."""
    for name in names:
        if problem := class_name_problem(name):
            raise UsageError(f"{what} {shown(name)} {problem}: {fix}")


def class_list(found: set[str], labels: list[str] | None, no_classes: str, known: list[str] | None = None) -> list[str]:
    """The classes, in label order: --labels as given; else `known` (an existing dataset's classes,
    `convert --like`), each keeping its label, then the other names found, sorted (update's rule:
    `updated_class_list`); else the names found, sorted."""
    if labels is None and known is not None:
        classes = updated_class_list(list(known), found).classes
    else:
        classes = list(labels) if labels is not None else sorted(found)
    if not classes:
        raise UsageError(no_classes)
    if labels is not None:
        check_class_list(classes, range(1, len(classes) + 1), "the labels", "entry")
    return classes


class ClassUpdate(NamedTuple):
    """The class list of an updated dataset (issue 22's label rule) and what changed in it."""

    classes: list[str]  # label order: the previous classes as they were, then the new ones
    new: list[str]  # found now, not before: appended, in sorted order
    vanished: list[str]  # before, not found now: they keep their label (and get 0 images)


def updated_class_list(previous: list[str], found: Iterable[str]) -> ClassUpdate:
    """Labels never change meaning: every previous class keeps its label number (a vanished one
    too), a new class gets the next free number, in sorted order among the new ones. Pass
    `classes` to `plan_job(labels=...)`, so a model trained on version 1 reads version 5 right."""
    known = set(previous)
    now = set(found)
    new = sorted(now - known)
    check_class_names(new, "the class", "rename it")
    return ClassUpdate([*previous, *new], new, [c for c in previous if c not in now])
