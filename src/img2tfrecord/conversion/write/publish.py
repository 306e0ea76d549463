"""Publishing a dataset in one step: a workspace beside OUTPUT, one lock, and one switch.

A reader of OUTPUT (inspect, load(), TFDS, a plain glob) must see the old dataset, the new one
complete, or something every reader of ours refuses as incomplete: never a mix. Locally the whole
new version (shards, indexes, labels.txt, TFDS files, dataset.json last, all fsynced) is built in
a workspace beside OUTPUT, on the same file system, and switched in with one system call:

    PARENT/.NAME.img2tfrecord/      the workspace (removed when the run is over)
        lock                        flock'd by the one run that may write OUTPUT
        journal.jsonl               finished shards, for --resume (conversion.write.resume)
        dataset/                    the new version being built (`Workspace.build`)
        published                   sha256 of the new dataset.json, written just before the switch

`renameat2(build, OUTPUT, RENAME_EXCHANGE)` swaps the two folders atomically; where the kernel or
the file system lacks it, OUTPUT is renamed aside and the new folder renamed in (a reader in
between finds no OUTPUT, which it refuses). The old version is then removed: a reader holding
its shards open keeps reading them (unlinked files live on until closed). `recover` finishes the
removal, or the second rename, after a kill (the `published` marker says which state it is).

Where no atomic switch exists the dataset is published *in place* (`Workspace.in_place`):
object stores (gs://; no rename of folders), an OUTPUT that is a mount point or whose parent is
not writable, or the current directory (a shell inside it would be left in a deleted folder).
The build folder is then OUTPUT/.img2tfrecord-staging, and `publish` commits (writes
`PUBLISHING_NAME` there: the file list and metadata that finish the publish), removes the old
dataset.json, then the old TFDS files, labels.txt and stale shards, moves the new shards in, and
writes dataset.json last: until then the staging folder and the missing dataset.json make
`format.layout.check_complete` (used by inspect, --verify and load()) refuse the folder. A publish
cut short after its commit is rolled forward by the next run's `recover` (update and compact call
`finish_cut_short` before they read dataset.json).

Files in OUTPUT that are not part of a dataset (a README.md, notes) survive `--overwrite`: they
are hard-linked into the new version before the switch (in place: left where they are). A
sub-folder that is not ours is refused before any work (`foreign_entries`), never deleted.

API (convert uses it; `update` / `compact` build their version in `ws.build`, hard-linking the
unchanged shards from OUTPUT there, and call the same `publish`):

    ws = workspace(output_dir)            # paths and mode; no side effect
    lock = OutputLock(ws); lock.acquire() # one run per OUTPUT (UsageError if another holds it)
    try:
        recover(ws)                       # finish what a killed run's switch left
        prepare(ws, keep=resume)          # ws.build exists (emptied unless keep)
        ... write the new version's shards into ws.build; reuse(ws, unchanged) links OUTPUT's ...
        publish(ws, files, metadata)      # metadata in order (dataset.json last), fsync, switch
    except failure:
        discard(ws)                       # (or keep ws.build + journal for --resume)
    finally:
        lock.release()                    # last: every cleanup happens under the lock
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import hashlib
import json
import os
import shutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import NoReturn

from img2tfrecord import fs
from img2tfrecord.conversion.write.output_lock import OutputLock
from img2tfrecord.conversion.write.signals import signals_deferred
from img2tfrecord.conversion.write.workspace import (
    ASIDE,
    BUILD,
    JOURNAL,
    OLD,
    PUBLISHED,
    Workspace,
    foreign_entries,
    workspace,
)
from img2tfrecord.errors import DataError, UsageError, option
from img2tfrecord.format import pinning
from img2tfrecord.format.layout import finish_advice
from img2tfrecord.format.manifest import MANIFEST_NAME
from img2tfrecord.format.naming import PUBLISHING_NAME, SHARD_RE
from img2tfrecord.format.tfds import FILE_NAMES as TFDS_NAMES
from img2tfrecord.format.workspace_journal import switch_cut_short

_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


# --------------------------------------------------------------------------- the workspace's life


def recover(ws: Workspace) -> bool:
    """Settle what a run killed during its switch left (call it holding the lock). True when that
    run had switched its dataset in: then only its old version was left, and is removed now.

    Otherwise (OUTPUT's dataset.json is not the one the `published` marker names) the switch
    never happened: the marker goes, an old version renamed aside is renamed back (killed between
    the two renames), and the build folder and journal stay for --resume.

    In place (no switch), a publish cut short after its commit (`PUBLISHING_NAME` in the staging
    folder) is rolled forward: its new version is completed from the staging folder (True)."""
    if ws.in_place:
        return _roll_forward(ws)
    marker = os.path.join(ws.root, PUBLISHED)
    try:
        want = fs.read_bytes(marker).decode("ascii").strip()
    except (OSError, UnicodeDecodeError):
        want = None
    if want is not None and _digest_of(os.path.join(ws.output, MANIFEST_NAME)) == want:
        _remove_workspace(ws)
        return True
    sweep(ws)
    aside = os.path.join(ws.root, ASIDE)
    if not os.path.lexists(ws.output) and os.path.isdir(aside):
        os.rename(aside, ws.output)
        _fsync_dir(os.path.dirname(ws.output))
    if want is not None:
        os.remove(marker)
    return False


def prepare(ws: Workspace, keep: bool = False) -> None:
    """Make the build folder (and the workspace); emptied first unless `keep` (--resume)."""
    try:
        if not keep:
            fs.rmtree(ws.build)
            if not ws.in_place:
                with contextlib.suppress(FileNotFoundError):
                    os.remove(os.path.join(ws.root, JOURNAL))
        fs.makedirs(ws.build)
        if ws.in_place and not fs.is_remote(ws.output):
            fs.makedirs(ws.output)
    except OSError as e:
        raise UsageError(f"cannot create output {ws.shown}: {e.strerror or e}") from None


def discard(ws: Workspace) -> None:
    """A failed run that leaves nothing to resume: remove its build folder and journal (under the lock).

    In place, OUTPUT itself goes too if the run created it and it is still empty. A publish in place
    that was committed (and cut short) is never discarded: the next run rolls it forward."""
    if ws.in_place and fs.exists(fs.join(ws.build, PUBLISHING_NAME)):
        return
    fs.rmtree(ws.build)
    if ws.in_place:
        if not fs.is_remote(ws.output):
            with contextlib.suppress(OSError):
                os.rmdir(ws.output)
        return
    for name in (JOURNAL, PUBLISHED):
        with contextlib.suppress(FileNotFoundError):
            os.remove(os.path.join(ws.root, name))


def has_unfinished(ws: Workspace) -> bool:
    return fs.exists(fs.join(ws.journal_dir, JOURNAL))


def reuse(ws: Workspace, names: Iterable[str], new_names: Iterable[str] | None = None) -> int:
    """Put OUTPUT's files `names` (unchanged shards, their indexes) into the build folder without
    rewriting them: a hard link locally (same inode: no bytes copied, and a reader of the old
    version is not disturbed), a server-side copy on object stores. For `update` / `compact`.
    `new_names`: the name each gets in the new version (a shard renumbered `-of-` a new count).
    Returns how many were copied because the file system has no hard links (`fs.link_or_copy`)."""
    names = list(names)
    copied = 0
    for name, new in zip(names, list(new_names) if new_names is not None else names):
        src, dst = fs.join(ws.output, name), fs.join(ws.build, new)
        if fs.is_remote(src):
            fs.gfile(src).copy(src, dst, overwrite=True)
            continue
        with contextlib.suppress(FileNotFoundError):
            os.remove(dst)
        copied += fs.link_or_copy(src, dst)
    return copied


# --------------------------------------------------------------------------- publish


@dataclass
class Published:
    """What `publish` did: `switched` once the new version is in place (the old one may still be being
    removed); `leftover`: the line to say when removing the old version failed."""

    switched: bool = False
    leftover: str | None = None


def publish(
    ws: Workspace,
    files: Iterable[str],
    metadata: Mapping[str, str],
    durable: bool = True,
    state: Published | None = None,
) -> None:
    """Complete the new version in `ws.build` (the shard and index `files` are there) and put it in place.

    `metadata` is written in its order: dataset.json must be last. Anything else in the build
    folder (a partial file) is removed first. Raises OSError; until the switch, OUTPUT is untouched
    (locally) and the build folder and journal are kept for --resume."""
    state = state if state is not None else Published()
    names = list(metadata)
    if names and names[-1] != MANIFEST_NAME:
        raise ValueError("publish: dataset.json must be the last metadata file")
    files = list(files)
    if ws.in_place:
        _publish_in_place(ws, files, metadata, durable, state)
        return
    keep = set(files) | set(metadata)
    for name in os.listdir(ws.build):
        if name not in keep:
            _remove(os.path.join(ws.build, name))
    _carry_over(ws)
    for name, text in metadata.items():
        fs.write_text(os.path.join(ws.build, name), text)  # fsync'd, renamed into place
    if durable:
        for name in files:
            fs.fsync(os.path.join(ws.build, name))
        _fsync_dir(ws.build)
    digest = hashlib.sha256(metadata[MANIFEST_NAME].encode("utf-8")).hexdigest() if names else ""
    fs.write_text(os.path.join(ws.root, PUBLISHED), digest + "\n")
    with signals_deferred():  # the switch and the removal of the old version run to their end
        switch(ws)
        state.switched = True
        state.leftover = _remove_workspace(ws)


def switch(ws: Workspace) -> None:
    """Put `ws.build` at `ws.output` in one step: exchange the two folders, or rename the old one
    aside and the new one in; the old version is left in the workspace (`_remove_workspace`)."""
    out, build = ws.output, ws.build
    os.makedirs(os.path.dirname(out), exist_ok=True)
    if os.path.lexists(out):
        with contextlib.suppress(OSError):
            shutil.copymode(out, build)  # the folder keeps its permissions
        if not _exchange(build, out):
            aside = os.path.join(ws.root, ASIDE)
            os.rename(out, aside)
            try:
                os.rename(build, out)
            except BaseException:  # the old version back in place (after a kill: `recover` does it)
                with contextlib.suppress(OSError):
                    os.rename(aside, out)
                raise
    else:
        os.rename(build, out)
    _fsync_dir(os.path.dirname(out))


_renameat2: object = None


def _exchange(a: str, b: str) -> bool:
    """renameat2(RENAME_EXCHANGE); False where the C library, kernel or file system lacks it."""
    global _renameat2
    if _renameat2 is None:
        try:
            fn = ctypes.CDLL(None, use_errno=True).renameat2
            fn.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint)
            fn.restype = ctypes.c_int
            _renameat2 = fn
        except (OSError, AttributeError):
            _renameat2 = False
    if not _renameat2:
        return False
    rc = _renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)  # type: ignore[operator]
    if rc == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), b)


def _carry_over(ws: Workspace) -> None:
    """Hard-link OUTPUT's files that are not part of a dataset into the new version."""
    if not os.path.isdir(ws.output):
        return
    for name in foreign_entries(ws.output):
        src, dst = os.path.join(ws.output, name), os.path.join(ws.build, name)
        if os.path.isdir(src) and not os.path.islink(src):
            continue  # refused before the run (check_foreign); one made since stays with the old version
        if not os.path.lexists(dst):
            fs.link_or_copy(src, dst, follow_symlinks=False)


def _remove_workspace(ws: Workspace) -> str | None:
    """After the switch: the old version, the journal, the marker, then (by the lock) the workspace.

    The old version is renamed to `OLD*` in the workspace, then removed unless a reader still holds
    it (`format.pinning`: load() reads the version it opened through its open folder); a later
    command removes it once free (`sweep`). Returns the line to say when removing failed (the new
    version is in place all the same; what is left is removed by the next command)."""
    failed: OSError | None = None
    for name in (BUILD, ASIDE):
        path = os.path.join(ws.root, name)
        if os.path.lexists(path):
            try:
                os.rename(path, _old_name(ws.root))
            except OSError as e:  # the marker stays: `recover` retires it next time
                return _leftover(ws, e)
    failed = sweep(ws)
    for name in (JOURNAL, PUBLISHED):  # the marker last: while it is there, `recover` finishes this
        try:
            os.remove(os.path.join(ws.root, name))
        except FileNotFoundError:
            pass
        except OSError as e:
            return _leftover(ws, e)
    return _leftover(ws, failed) if failed is not None else None


def _old_name(root: str) -> str:
    n = 1
    while os.path.lexists(os.path.join(root, f"{OLD}{n}")):
        n += 1
    return os.path.join(root, f"{OLD}{n}")


def sweep(ws: Workspace) -> OSError | None:
    """Remove the old versions kept in the workspace that no reader holds any more (under the lock);
    the first error, if any (the rest is tried all the same, and again by the next command)."""
    try:
        names = sorted(n for n in os.listdir(ws.root) if n.startswith(OLD))
    except OSError:
        return None
    errors: list[BaseException] = []
    for name in names:
        path = os.path.join(ws.root, name)
        if not pinning.in_use(path):
            shutil.rmtree(path, onerror=lambda fn, p, info: errors.append(info[1]))
    failed = next((e for e in errors if isinstance(e, OSError)), None)
    return failed


def _leftover(ws: Workspace, e: OSError) -> str:
    return (
        f"removing the old version of {ws.shown} failed ({e.strerror or e}); the new version is in place, and "
        f"what is left of the old one (in {ws.root}) is removed by the next update, compact or convert of it"
    )


def _publish_in_place(
    ws: Workspace, files: list[str], metadata: Mapping[str, str], durable: bool, state: Published
) -> None:
    """No atomic switch: the old dataset.json goes first, the new one comes last (see the module docstring).

    First the commit: the staging folder gets `PUBLISHING_NAME` (the file list and the metadata
    texts; one object, there whole or not at all) once every file of the new version is in it, so
    from the first change to OUTPUT on, what is left to do is written down, and is done: SIGINT and
    SIGTERM wait for the end; a run cut short anyway (a kill, an I/O error) is finished by the next
    update, compact or convert --resume (`recover` -> `_roll_forward`)."""
    fs.write_text(
        fs.join(ws.build, PUBLISHING_NAME), json.dumps({"files": files, "metadata": list(metadata.items())}) + "\n"
    )
    try:
        with signals_deferred():
            _finish_in_place(ws, files, metadata, durable)
            state.switched = True
    except Exception as e:
        if state.switched:
            raise
        why = getattr(e, "strerror", None) or getattr(e, "message", None) or str(e) or type(e).__name__
        raise DataError(
            f"publishing the dataset in {ws.shown} failed: {why}; it is incomplete (readers refuse it) until the "
            f"next update or compact of it, or the same convert with {option('resume', True)}, finishes the publish "
            f"from {ws.build}"
        ) from None


def _finish_in_place(ws: Workspace, files: list[str], metadata: Mapping[str, str], durable: bool) -> None:
    """The in-place publish after its commit; run again by `_roll_forward` it does the same (a file
    already moved is found in OUTPUT, metadata is written anew)."""
    out, staging = ws.output, ws.build
    keep = set(files)
    gone = [MANIFEST_NAME, *TFDS_NAMES, *metadata]
    present = set(fs.listdir(out))
    for name in dict.fromkeys(gone):
        if name in present:
            fs.remove(fs.join(out, name))
    for name in sorted(present):
        if SHARD_RE.match(name.removesuffix(".idx")) and name not in keep:
            fs.remove(fs.join(out, name))
    for name in files:
        src = fs.join(staging, name)
        if fs.exists(src):
            fs.rename(src, fs.join(out, name))
        elif name not in present:  # neither still staged nor moved by the run that was cut short
            raise DataError(f"{src} is missing, and {name} is not in {ws.shown} either")
    for name, text in metadata.items():
        fs.write_text(fs.join(out, name), text)
    if durable and not fs.is_remote(out):
        _fsync_dir(out)
    for name in fs.listdir(staging):  # the journal before the marker: never a journal left alone
        if name != PUBLISHING_NAME:
            path = fs.join(staging, name)
            if fs.isdir(path):
                fs.rmtree(path)
            else:
                fs.remove(path)
    fs.remove(fs.join(staging, PUBLISHING_NAME))
    fs.rmtree(staging)


def _roll_forward(ws: Workspace) -> bool:
    """Finish an in-place publish that was cut short after its commit; False when there is none."""
    marker = fs.join(ws.build, PUBLISHING_NAME)
    if not fs.exists(marker):
        return False
    try:
        plan = json.loads(fs.read_bytes(marker))
        files = [str(n) for n in plan["files"]]
        metadata = {str(n): str(t) for n, t in plan["metadata"]}
    except (ValueError, KeyError, TypeError) as e:  # not ours: nothing this run can finish
        _give_up(marker, f"{marker}: unreadable ({e})")
    try:
        _finish_in_place(ws, files, metadata, durable=True)
    except DataError as e:  # a file of the new version is gone: it cannot be completed
        _give_up(marker, str(e))
    except Exception as e:  # the store failed again: the marker stays, the next run tries again
        why = getattr(e, "strerror", None) or getattr(e, "message", None) or str(e) or type(e).__name__
        raise DataError(
            f"finishing the publish cut short in {ws.shown} failed: {why}; run the command again to finish it"
        ) from None
    return True


def _give_up(marker: str, why: str) -> NoReturn:
    """A committed publish that cannot be finished: its marker goes (so `convert --overwrite` can
    start over; the staging folder is then an unfinished run like any other), and the user is told."""
    with contextlib.suppress(Exception):
        fs.remove(marker)
    raise DataError(
        f"{why}: the publish cut short there cannot be finished; convert with {option('overwrite', True)} "
        "to rebuild the dataset"
    )


def finish_cut_short(output_dir: str, dry_run: bool = False) -> bool:
    """Before a command reads OUTPUT's dataset.json (update, compact): a publish cut short there is
    settled first, under the lock (`recover`): one in place is finished; a switch killed between
    its two renames (no RENAME_EXCHANGE) has the old version renamed back; one killed after it has
    its old version removed. A dry run says so instead: it writes nothing. True when a new version
    had been switched in."""
    ws = workspace(output_dir)
    if not _cut_short(ws):
        return False
    if dry_run:
        if not ws.in_place and os.path.lexists(ws.output):  # complete: the old version or the new one
            return False
        pending = None if ws.in_place else switch_cut_short(ws.output)
        if pending is not None:  # the command that renames it back and finishes the run (as inspect says)
            raise UsageError(
                f"{ws.shown}: the publish of a new version was cut short (the dataset is in {pending.aside}); "
                f"to put it back and finish the publish, {finish_advice(pending.command)}"
            )
        state = "readers refuse the folder" if ws.in_place else f"the dataset is in {os.path.join(ws.root, ASIDE)}"
        raise UsageError(
            f"{ws.shown}: the publish of a new version was cut short ({state}); "
            f"run the command without {option('dry_run', True)} to finish it first"
        )
    lock = OutputLock(ws)
    lock.acquire()
    try:
        return recover(ws)
    finally:
        lock.release(remove=not has_unfinished(ws))


def _cut_short(ws: Workspace) -> bool:
    if ws.in_place:
        return fs.exists(fs.join(ws.build, PUBLISHING_NAME))
    return os.path.lexists(os.path.join(ws.root, PUBLISHED)) or os.path.lexists(os.path.join(ws.root, ASIDE))


def _digest_of(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except OSError:
        return None


def _fsync_dir(path: str) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _remove(path: str) -> None:
    with contextlib.suppress(OSError):
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.remove(path)
