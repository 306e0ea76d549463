"""Class names and the --labels file: what a class name may be (a line of labels.txt: a name
that could not be one is refused, not escaped), the one check of a class list, and the labels
file read as `--labels`' parser (format.options) and the walk take it.

Also the bounded reading of the text files that name inputs (--labels, --file-list): a device or
a pipe that never ends (/dev/zero) or a file far larger than any real list is refused after a
bounded read, not read until memory runs out. In `format` because the options' table, which
parses --labels, is: readers of a dataset need none of it.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Sequence

from img2tfrecord import fs
from img2tfrecord.errors import UsageError, option, size_text

# What labels.txt cannot hold in a line, as every reader of it splits lines (`str.splitlines`: \n,
# \r, \x0b, \x0c, \x1c-\x1e, \x85, U+2028, U+2029) or as a terminal shows them: every control
# character (C0, DEL, C1) and the two Unicode line separators. Refused, not escaped: an escaped
# name would no longer be the folder's name, so `--labels labels.txt` would not find it again.
_NOT_IN_A_LINE = frozenset([*map(chr, range(0x20)), *map(chr, range(0x7F, 0xA0)), "\u2028", "\u2029"])


def class_name_problem(name: str) -> str | None:
    """Why `name` cannot be a class (a line of labels.txt), or None."""
    if not name.strip():
        return "is empty" if not name else "is only white space"
    bad = next((c for c in name if c in _NOT_IN_A_LINE), None)
    if bad is not None:
        what = "a line break" if bad in "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029" else "a control character"
        return f"holds {what} (U+{ord(bad):04X}), which labels.txt (one name per line) cannot hold"
    return None


def shown(name: str) -> str:
    """`name` quoted with its control characters escaped, as dataset.json writes them."""
    return json.dumps(name, ensure_ascii=False)


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
