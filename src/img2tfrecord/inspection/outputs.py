"""Where `report`, `inspect --contact-sheet`, `--extract` and `--export-list` may write, and how.

A path typed by mistake must not cost data: these outputs never go inside a dataset folder (nor a
run's workspace or staging folder), never over a file that is not an earlier output of the same
kind (a page or a picture of ours; any HTML page or picture only with `--force`), and never over
what is not a regular file (a device, a FIFO, a folder, a link to one). A file is written whole to
a temporary file beside it and renamed over the target; on any error the temporary file goes, so
nothing half-written is left.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Callable, Iterable
from typing import NamedTuple

from img2tfrecord.errors import DataError, UsageError, option
from img2tfrecord.format.images import sniff
from img2tfrecord.format.manifest import MANIFEST_NAME
from img2tfrecord.format.naming import STAGING_DIR
from img2tfrecord.format.workspace_journal import WORKSPACE_SUFFIX

PAGE_MARKER = b'<meta name="generator" content="img2tfrecord'  # in the report's <head>
SHEET_MARKER = "img2tfrecord contact sheet"  # in the sheet's metadata (PNG text, JPEG comment, ...)
_PEEK = 4096  # bytes read to tell a page or a picture (the report's marker is in its first lines)


class Kind(NamedTuple):
    """One kind of output: how messages name it and how an existing file is recognised."""

    option: str  # the parameter, rendered by errors.option: "--contact-sheet" / "contact_sheet"
    cli: str | None  # the CLI's name of it when it differs ("output" for report's html)
    noun: str  # "an HTML page", "a picture"
    ours: Callable[[str], bool]  # an earlier output of ours: replaced without --force
    same: Callable[[str], bool]  # a file of this kind: replaced with --force


def _head(path: str, n: int = _PEEK) -> bytes:
    with open(path, "rb") as f:
        return f.read(n)


def _is_page(path: str) -> bool:
    head = _head(path).lstrip(b"\xef\xbb\xbf \t\r\n")
    return os.path.splitext(path)[1].lower() in (".html", ".htm") and (not head or head.startswith(b"<"))


def _is_our_page(path: str) -> bool:
    return PAGE_MARKER in _head(path)


def _is_picture(path: str) -> bool:
    head = _head(path, 32)
    return not head or sniff(head) not in (None, "PDF", "ZIP archive", "gzip data")


def _is_our_sheet(path: str) -> bool:
    """A sheet we wrote: a picture whose metadata holds SHEET_MARKER (a sheet is at most ~60 MB)."""
    if not _is_picture(path) or os.path.getsize(path) > 256 << 20:
        return False
    with open(path, "rb") as f:
        return SHEET_MARKER.encode() in f.read()


LIST_HEADER = b"path,label,split\n"  # the first line of every list --export-list writes


def _is_our_list(path: str) -> bool:
    return _head(path, len(LIST_HEADER)) == LIST_HEADER


def _never(path: str) -> bool:
    return False


REPORT = Kind("html", "output", "an HTML page", _is_our_page, _is_page)
# a file list: replaced only when it is one we wrote (its header line); no --force, since a CSV of
# the user's (the --file-list it was converted from) is what a mistyped path would cost
FILE_LIST = Kind("export_list", None, "a file list img2tfrecord wrote", _is_our_list, _never)
SHEET = Kind("contact_sheet", None, "a picture", _is_our_sheet, _is_picture)


def dataset_folder(path: str, read: Iterable[str | os.PathLike[str]] = ()) -> str | None:
    """The dataset folder `path` is (or lies in), as the user would know it; None if none.

    A dataset folder: one holding a dataset.json, a run's workspace or staging folder, or one of
    the folders `read` (the dataset or the shards' folders the command reads)."""
    folders = {os.path.realpath(r) for r in read}
    d = os.path.realpath(path)
    while True:
        name = os.path.basename(d)
        if (
            d in folders
            or os.path.isfile(os.path.join(d, MANIFEST_NAME))
            or name == STAGING_DIR
            or (name.startswith(".") and name.endswith(WORKSPACE_SUFFIX))
        ):
            return d
        parent = os.path.dirname(d)
        if parent == d:
            return None
        d = parent


def _what(mode: int) -> str:
    for test, what in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISCHR, "a device"),
        (stat.S_ISBLK, "a device"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return what
    return "not a regular file"


def check_file(path: str | os.PathLike[str], kind: Kind, force: bool, read: Iterable[str | os.PathLike[str]]) -> str:
    """Where `path`'s bytes may go (a link to a regular file: the file it names), or a UsageError
    saying why not, before anything is read."""
    shown = os.fspath(path)
    given = option(kind.option, shown, cli=kind.cli)
    real = os.path.realpath(shown)
    inside = dataset_folder(os.path.dirname(real) or ".", read)
    if inside is not None:
        raise UsageError(f"{given}: is inside the dataset folder {inside}; write it outside any dataset folder")
    parent = os.path.dirname(real) or "."
    if not os.path.isdir(parent):
        if os.path.exists(parent):
            raise UsageError(f"{shown}: {parent} is not a directory")
        raise UsageError(f"{shown}: its directory does not exist")
    try:
        st = os.stat(real)
    except FileNotFoundError:
        if os.path.islink(shown):
            raise UsageError(f"{given}: is a symbolic link to nothing; give a new file name") from None
        _probe(parent, given)
        return real
    except OSError as e:
        raise UsageError(f"{given}: cannot be written: {e.strerror or e}") from None
    if not stat.S_ISREG(st.st_mode):
        raise UsageError(f"{given}: is {_what(st.st_mode)}; give a new file name")
    try:
        ours, same = kind.ours(real), kind.same(real)
    except OSError as e:
        raise UsageError(f"{given}: exists and cannot be read: {e.strerror or e}; give a new file name") from None
    if ours or (force and same):
        _probe(parent, given)
        return real
    if same:
        raise UsageError(f"{given}: exists and was not written by img2tfrecord; {option('force')} replaces it")
    raise UsageError(f"{given}: exists and is not {kind.noun}; give a new file name")


def _probe(folder: str, given: str) -> None:
    """A file can be made in `folder` (a temporary one, removed at once), or a UsageError now rather
    than after the whole dataset was read: `/proc` takes no new file, even from root, whom
    `os.access` would answer yes."""
    try:
        fd, tmp = tempfile.mkstemp(prefix=".img2tfrecord-probe.", suffix=".tmp", dir=folder)
    except OSError as e:
        raise UsageError(f"{given}: cannot be written there: {e.strerror or e}") from None
    os.close(fd)
    _remove(tmp)


def check_folder(path: str | os.PathLike[str], given: str, read: Iterable[str | os.PathLike[str]]) -> None:
    """A folder to write files into (`--extract`, named `given` in messages): not inside a dataset
    folder nor one of the folders `read` (a UsageError before anything is read)."""
    inside = dataset_folder(os.fspath(path), read)
    if inside is not None:
        raise UsageError(f"{given}: is inside the dataset folder {inside}; extract outside any dataset folder")


def make_folder(path: str | os.PathLike[str], given: str) -> None:
    """Create the folder `path` (and its parents), or a UsageError saying why it cannot be: a file
    in its way (`/etc/passwd/x`), a file system that takes none (`/proc/x`), no permission."""
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        raise UsageError(f"{given}: cannot be created: {e.strerror or e}") from None
    _probe(os.fspath(path), given)


def write_file(real: str, shown: str, data: bytes) -> None:
    """`data` into `real` whole or not at all: a temporary file beside it, renamed over it.

    The temporary file is `.NAME.img2tfrecord.tmp` (another name if that one is taken), so a
    fault at any step can be placed on it; on any error it is removed and a DataError (exit 1)
    says what failed. A target that became a non-regular file in between is not renamed over."""
    folder, name = os.path.split(real)
    folder = folder or "."
    tmp = os.path.join(folder, f".{name}.img2tfrecord.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o666)
    except FileExistsError:
        try:
            fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".img2tfrecord.tmp", dir=folder)
            os.fchmod(fd, 0o666 & ~_umask())  # mkstemp's 0600 would become the output's mode
        except OSError as e:
            raise UsageError(f"cannot write {shown}: {e.strerror or e}") from None
    except OSError as e:
        raise UsageError(f"cannot write {shown}: {e.strerror or e}") from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        with contextlib.suppress(FileNotFoundError):
            if not stat.S_ISREG(os.lstat(real).st_mode):
                raise UsageError(f"{shown}: is no longer a regular file; nothing was written")
        os.replace(tmp, real)
    except OSError as e:
        _remove(tmp)
        raise DataError(f"cannot write {shown}: {e.strerror or e}; nothing was written") from None
    except BaseException:
        _remove(tmp)
        raise


def _umask() -> int:
    """The process's umask, read without setting it (os.umask sets it, racing other threads)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o022


def _remove(path: str) -> None:
    with contextlib.suppress(OSError):
        os.remove(path)
