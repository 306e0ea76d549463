"""Where a dataset's shards are: from an output directory (its dataset.json), shard files or globs, to `ShardRef`s with their manifest entry. Used by inspect and load()."""

from __future__ import annotations

import difflib
import glob
import os
import shlex
import stat
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from img2tfrecord import fs
from img2tfrecord.errors import DataError, UsageError, option, plural, said
from img2tfrecord.format.images import MAX_PIXELS
from img2tfrecord.format.manifest import LABELS_NAME, MAX_MANIFEST_BYTES, ManifestError, parse_manifest
from img2tfrecord.format.manifest import MANIFEST_NAME as MANIFEST
from img2tfrecord.format.naming import _AUX_SUFFIXES, PUBLISHING_NAME, SHARD_RE, STAGING_DIR, shard_split
from img2tfrecord.format.workspace_journal import switch_cut_short, unfinished_beside

if TYPE_CHECKING:  # pragma: no cover
    pass


@dataclass
class Manifest:
    """A parsed dataset.json: what convert promised about an output directory."""

    dir: fs.AnyPath
    data: dict[str, Any]
    # Where its files are read: the folder held open by the reader (`format.pinning.open_folder`:
    # /proc/self/fd/N), so it reads the version whose dataset.json it read; None: by `dir`.
    reads: fs.AnyPath | None = field(default=None, repr=False, compare=False)
    holder: Any = field(default=None, repr=False, compare=False)  # keeps that folder open while this lives

    @property
    def folder(self) -> fs.AnyPath:
        """The folder as it is read (`reads`, else `dir`); messages name `dir`."""
        return self.reads if self.reads is not None else self.dir

    def at(self, name: str) -> fs.AnyPath:
        """The path to read the folder's file `name` by (messages name `dir / name`)."""
        return self.folder / name

    @property
    def classes(self) -> list[str]:
        return list(self.data.get("classes") or [])

    @property
    def label_offset(self) -> int:
        return int(self.data.get("label_offset") or 0)

    @property
    def compression(self) -> str:
        """ "none", "gzip" or "zlib" (dataset.json writes null for none)."""
        return ((self.data.get("options") or {}).get("compression") or "none").lower()

    @property
    def splits(self) -> dict[str, dict[str, Any]]:
        return dict(self.data.get("splits") or {})

    @property
    def formats(self) -> list[str]:
        """The `image/format` values of the records (JPEG, PNG, BMP, RAW); empty if not listed."""
        return sorted(self.data.get("formats") or {})

    @property
    def stored_channels(self) -> int | None:
        """The channel count of every image when `--channels` fixed it, else None."""
        value = str((self.data.get("options") or {}).get("channels"))
        return int(value) if value in ("1", "3") else None

    def class_name(self, label: int) -> str | None:
        i = label - self.label_offset
        classes = self.classes
        return classes[i] if 0 <= i < len(classes) else None

    def shards(self, split: str | None = None) -> list[ShardRef]:
        """Every shard the manifest lists (of one split, or of all in manifest order)."""
        splits = self.splits
        if split is not None and split not in splits:
            raise UsageError(f"{self.dir / MANIFEST} has no split {split!r}; its splits: {', '.join(splits) or 'none'}")
        out = []
        for name, info in splits.items():
            if split is not None and name != split:
                continue
            for entry in info.get("shards") or []:
                if not isinstance(entry, dict) or not isinstance(entry.get("file"), str):
                    raise DataError(f"{self.dir / MANIFEST}: split {name}: a shard entry without a file name")
                out.append(ShardRef(self.dir / entry["file"], name, self, entry))
        return out


@dataclass
class ShardRef:
    """One file to read; `manifest`/`entry` are set when a dataset.json describes it."""

    path: fs.AnyPath
    split: str | None = None
    manifest: Manifest | None = None
    entry: dict[str, Any] | None = field(default=None, repr=False)

    @property
    def source(self) -> fs.AnyPath:
        """The path to read the file by: through the folder its reader holds open, if one does."""
        if self.manifest is not None and self.manifest.reads is not None and self.entry is not None:
            return self.manifest.at(self.path.name)
        return self.path


def read_manifest(directory: str | os.PathLike[str], via: str | None = None) -> Manifest | None:
    """The directory's dataset.json, None if it has none; a broken one is a DataError whose one
    line names the field (`manifest.parse_manifest`, the one validation every reader shares).
    `via`: the same folder as a reader holds it open (`format.pinning`), read there."""
    folder = fs.as_path(directory)
    path = folder / MANIFEST
    source = fs.as_path(via) / MANIFEST if via is not None else path
    if not source.is_file():
        return None
    try:
        with source.open("rb") as f:  # read no more than a manifest can be, whatever the file holds
            data = parse_manifest(f.read(MAX_MANIFEST_BYTES + 1))
    except OSError as e:
        raise DataError(f"{path}: cannot read the manifest: {e.strerror or e}") from e
    except ManifestError as e:
        hint = "; the file was edited or damaged (convert again to rebuild it)" if e.damaged else ""
        raise DataError(f"{path}: {e}{hint}") from None
    return Manifest(folder, data)


def incomplete_reason(directory: str, via: str | None = None) -> str | None:
    """Why a dataset folder is not a complete dataset, or None (local or remote, e.g. gs://).

    convert writes dataset.json last: shard files without it, beside a run's staging folder, a
    half-written dataset.json or labels.txt, are a publish that has not finished (on object
    stores, where there is no atomic switch, that is a state a reader can see). And without a
    dataset.json, each split's `NAME-NNNNN-of-NNNNN` files must be exactly 0..NNNNN-1 of one
    count. (What dataset.json itself holds is checked where it is parsed.) `via`: as `read_manifest`'s."""
    directory = via if via is not None else directory
    try:
        names = set(fs.listdir(directory))
    except Exception:  # unreadable: the caller's own access says why
        return None
    shards = [m for m in map(SHARD_RE.match, sorted(names)) if m]
    if MANIFEST in names:
        return None
    if not shards and STAGING_DIR in names and fs.exists(fs.join(directory, STAGING_DIR, PUBLISHING_NAME)):
        return f"no shard files yet and no {MANIFEST}"  # a publish in place cut short before its first move
    if not shards:
        return None
    if names & {STAGING_DIR, MANIFEST + ".tmp", LABELS_NAME}:
        return f"{len(shards)} shard files but no {MANIFEST}, which convert writes last"
    splits: dict[str, list[tuple[int, int]]] = {}
    for m in shards:
        splits.setdefault(m["split"], []).append((int(m["index"]), int(m["count"])))
    for split, found in splits.items():
        counts = sorted({count for _, count in found})
        if len(counts) > 1:
            return f"split {split} mixes shards of {' and '.join(f'-of-{c:05d}' for c in counts)}"
        if sorted(i for i, _ in found) != list(range(counts[0])):
            return f"split {split} has {len(found)} of its {counts[0]} shard files"
    return None


def check_complete(directory: str, via: str | None = None) -> None:
    """Refuse (DataError, one line) a folder that `incomplete_reason` finds incomplete."""
    why = incomplete_reason(directory, via)
    if why is not None and fs.exists(fs.join(via if via is not None else directory, STAGING_DIR, PUBLISHING_NAME)):
        raise DataError(
            f"{directory} is an incomplete dataset ({why}): the publish of its new version was cut short; the next "
            f"update or compact of it, or the same convert with {option('resume', True)}, finishes it"
        )
    if why is not None:
        raise DataError(
            f"{directory} is an incomplete dataset ({why}): a conversion into it was interrupted or is still "
            f"running; {said('run the same convert command', 'call convert() again')} with {option('resume', True)} to finish it"
        )


def refuse_unfinished(output: str) -> None:
    """DataError when `output` does not exist but an interrupted run into it left its workspace beside
    it (`.out.img2tfrecord/`: finished shards kept for --resume), saying so and both ways on; or
    when the switch of a new version was cut short between its two renames, where the dataset is
    and the command that puts it back and finishes the run (as `update --dry-run` says it)."""
    pending = switch_cut_short(output)
    if pending is not None:
        raise DataError(
            f"{output} does not exist: the publish of its new version was cut short between its two renames "
            f"(no atomic exchange here), and the dataset is in {pending.aside}; to put it back and finish the "
            f"publish, {finish_advice(pending.command)}"
        )
    left = unfinished_beside(output)
    if left is None:
        return
    if left.command is not None:
        cli = f"run: {shlex.join([*left.command, '--resume'])}"
    else:
        cli = "run the convert command that was interrupted again with --resume"
    finish = said(cli, "call convert() again as it was called, with resume=True")
    raise DataError(
        f"{output} does not exist: a conversion into it was interrupted, and {left.folder} beside it holds "
        f"{left.done} of its {plural(left.total, 'shard')} finished; to finish it, {finish}; to discard it, "
        f"remove {left.folder}"
    )


def finish_advice(command: list[str]) -> str:
    """'run: img2tfrecord update IN OUT --resume' (or its Python call): what finishes a cut-short publish."""
    return said("run: " + shlex.join(command), _python_call(command))


def _python_call(command: list[str]) -> str:
    """`command` (img2tfrecord's) as the Python call that does the same, for messages to Python."""
    if command[1] == "convert":
        return "call convert() again as it was called, with resume=True"
    args = ", ".join(repr(a) for a in command[2:] if not a.startswith("--"))
    return f"call {command[1]}({args}{', resume=True' if '--resume' in command else ''})"


def is_shard_candidate(path: fs.AnyPath) -> bool:
    """A regular file that could be a shard: not an index, manifest, label list or temp file."""
    return path.is_file() and not path.name.startswith(".") and not path.name.lower().endswith(_AUX_SUFFIXES)


def shard_files_in(directory: fs.AnyPath, split: str | None = None) -> list[fs.AnyPath]:
    """Files named like shards in `directory`, sorted (optionally of one split)."""
    out = []
    for p in fs.children(directory):
        m = SHARD_RE.match(p.name)
        if m and p.is_file() and (split is None or m["split"] == split):
            out.append(p)
    return out


def _manifest_for_file(
    path: fs.AnyPath, cache: dict[fs.AnyPath, Manifest | None]
) -> tuple[Manifest | None, str | None, dict | None]:
    """If the file's directory has a dataset.json listing it, that manifest, split and entry."""
    d = path.parent.resolve()
    if d not in cache:
        cache[d] = read_manifest(d)
    man = cache[d]
    if man is None:
        return None, None, None
    for name, info in man.splits.items():
        for entry in info.get("shards") or []:
            if entry.get("file") == path.name:
                return man, name, entry
    return man, None, None


def _in_held_folder(
    text: str,
    p: fs.AnyPath,
    cache: dict[fs.AnyPath, Manifest | None],
    open_folder: Callable[[fs.AnyPath], Manifest | None],
) -> fs.AnyPath:
    """Where to look for the files PATH (a file, glob or shard prefix) names: in its folder as held
    open, when that folder is a dataset folder `open_folder` holds (its dataset.json read first, the
    Manifest cached for `_manifest_for_file`), so the files found and the dataset.json describing
    them are of one version whatever is published meanwhile; else `p` itself (by name)."""
    folder = os.path.dirname(text) or "."
    if fs.is_remote(text) or glob.has_magic(folder) or not os.path.isfile(os.path.join(folder, MANIFEST)):
        return p  # several folders (a pattern), remote, or no dataset folder: by name
    key = fs.as_path(folder).resolve()
    if key not in cache:
        cache[key] = open_folder(fs.as_path(folder))
    man = cache[key]
    return p if man is None or man.reads is None else fs.as_path(os.path.join(os.fspath(man.reads), p.name))


def special_kind(path: fs.AnyPath) -> str | None:
    """What a path that exists but is neither a file nor a directory is (/dev/null: a character
    device), or None (it does not exist, or is a file or directory)."""
    try:
        mode = path.stat().st_mode
    except (OSError, ValueError):
        return None
    for test, name in (
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISFIFO, "a named pipe"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return None


def _list_names(paths: Sequence[fs.AnyPath], limit: int = 8) -> str:
    names = [p.name if len({q.parent for q in paths}) == 1 else str(p) for p in paths[:limit]]
    more = f" and {len(paths) - limit} more" if len(paths) > limit else ""
    return ", ".join(names) + more


def _nearby(p: fs.AnyPath) -> str:
    """What is beside a mistyped PATH, closest names first: its folders (`outt` for `out`, a
    dataset's most likely typo) shown with a slash, then its shard files; "" when nothing is."""
    parent = p.parent if p.parent.is_dir() else None
    if parent is None:
        return ""
    entries = [m for m in fs.children(parent) if not m.name.startswith(".")]
    folders = [m for m in entries if m.is_dir()]
    files = [m for m in entries if is_shard_candidate(m)]
    close = set(difflib.get_close_matches(p.name, [m.name for m in folders + files], n=3, cutoff=0.6))
    first = sorted(folders + files, key=lambda m: m.name not in close)  # stable: the rest by name
    names = [m.name + "/" if m in folders else m.name for m in first[:8]]
    more = f" and {len(first) - 8} more" if len(first) > 8 else ""
    return f" ({parent} has: {', '.join(names)}{more})" if names else ""


def open_by_name(directory: fs.AnyPath) -> Manifest | None:
    """A dataset folder's dataset.json read by name, the folder checked complete first."""
    check_complete(str(directory))
    return read_manifest(directory)


def resolve_paths(
    paths: Iterable[str | os.PathLike[str]],
    split: str | None = None,
    open_folder: Callable[[fs.AnyPath], Manifest | None] = open_by_name,
) -> list[ShardRef]:
    """Turn inspect's PATH arguments into shard files.

    A PATH is a file, a glob, an output directory (its dataset.json lists the shards; without one,
    the files named like shards), or a prefix that matches exactly one shard file. Anything
    missing or ambiguous is a UsageError naming what it matched. `open_folder` reads a dataset
    folder's dataset.json (`format.pinning.open_folder`: holding the folder open, so that its
    shards are read from the version whose dataset.json was read); a file, glob or prefix in a
    dataset folder is looked for in that folder as held (`_in_held_folder`).
    """
    refs: list[ShardRef] = []
    cache: dict[fs.AnyPath, Manifest | None] = {}
    for raw in paths:
        text = os.fspath(raw)
        p = fs.as_path(text)
        if not glob.has_magic(text) and not p.exists():
            refuse_unfinished(text)
        if p.is_dir() or (p.is_file() and p.name == MANIFEST):
            d = p if p.is_dir() else p.parent
            man = open_folder(d)
            if man is not None:
                refs.extend(man.shards(split))
                continue
            files = shard_files_in(d, split)
            if not files:
                what = f"of split {split!r} " if split else ""
                raise UsageError(
                    f"{text}: no {MANIFEST} and no shard files {what}(named NAME-NNNNN-of-NNNNN) in this directory"
                )
            refs.extend(ShardRef(f, shard_split(f.name)) for f in files)
            continue
        # a dataset folder's files are listed in it as held open, its dataset.json read there first
        look = _in_held_folder(text, p, cache, open_folder)
        matches: list[fs.AnyPath]
        if look.is_file():
            matches = [look]
        elif (kind := special_kind(look)) is not None:
            raise UsageError(f"{text}: is {kind}, not a TFRecord file or a dataset directory")
        elif glob.has_magic(text):
            pattern = text if look is p else os.path.join(glob.escape(os.fspath(look.parent)), p.name)
            matches = [m for m in glob_paths(pattern) if is_shard_candidate(m)]
            if not matches:
                raise UsageError(f"{text}: the pattern matches no shard file")
        else:
            matches = [m for m in _prefixed(look) if SHARD_RE.match(m.name) and is_shard_candidate(m)]
            if len(matches) > 1:
                raise UsageError(f"{text}: ambiguous, it is a prefix of {len(matches)} files: {_list_names(matches)}")
            if not matches:
                raise UsageError(f"{text}: no such file, directory or shard prefix{_nearby(p)}")
        if look is not p:  # named as given (in p's folder), read through the folder held (`ShardRef.source`)
            matches = [p.parent / m.name for m in matches]
        found = []
        for m in matches:
            man, sp, entry = _manifest_for_file(m, cache)
            if sp is None:
                sm = SHARD_RE.match(m.name)
                sp = sm["split"] if sm else None
            found.append(ShardRef(m, sp, man, entry))
        if split is not None:  # --split keeps the shards of that split, whatever PATH named them
            mine = [r for r in found if r.split == split]
            if not mine:
                theirs = sorted({r.split or "unknown" for r in found})
                raise UsageError(
                    f"{text}: no shard of split {split!r} (split {', '.join(theirs)}); drop {option('split')} or give another {said('PATH', 'path')}"
                )
            found = mine
        refs.extend(found)
    seen: set[fs.AnyPath] = set()
    unique = []
    for r in refs:
        key = r.path.resolve()
        if key not in seen:
            seen.add(key)
            unique.append(r)
    return unique


def glob_paths(pattern: str) -> list[fs.AnyPath]:
    """The paths a glob matches, sorted: Python's glob locally, `gfile.glob` on a remote file system."""
    if fs.is_remote(pattern):
        return [fs.RemotePath(m) for m in sorted(fs.gfile(pattern).glob(pattern))]
    return [Path(m) for m in sorted(glob.glob(pattern))]


def _prefixed(p: fs.AnyPath) -> list[fs.AnyPath]:
    """The paths that start with `p` (a shard name's unique prefix): a glob, or a remote folder's listing."""
    if isinstance(p, fs.RemotePath):
        parent = p.parent
        return sorted(parent / n for n in (fs.listdir(str(parent)) if parent.is_dir() else []) if n.startswith(p.name))
    return [Path(m) for m in sorted(glob.glob(glob.escape(str(p)) + "*"))]


def pixel_limit(man: Manifest | None) -> int:
    """The most pixels an image may have to be decoded: dataset.json's --max-pixels, else MAX_PIXELS."""
    opt = ((man.data.get("options") or {}) if man is not None else {}).get("max_pixels")
    return opt if isinstance(opt, int) and not isinstance(opt, bool) and opt > 0 else MAX_PIXELS
