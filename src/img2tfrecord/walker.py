"""Discovery: find the images, give them labels, shuffle them, cut them into splits.

Layouts (as Keras' `image_dataset_from_directory` and TFDS' ImageFolder understand them):

* ``INPUT/CLASS/.../image``: each immediate subfolder is a class; nested folders belong to it.
* ``INPUT/SPLIT/CLASS/.../image`` when every immediate subfolder is a split name (train,
  validation or val, test): the splits are used as they are, with one class list for all.

Labels are the index of the class name in sorted order (or in ``--labels`` order) plus an offset,
so they are stable: an empty class folder keeps its label. The real image format is read from the
content later (encoder); here a file is a candidate when its extension looks like an image.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, field

from img2tfrecord.errors import UsageError

IMAGE_EXTENSIONS = frozenset({".jpg", ".jpeg", ".png", ".gif", ".bmp", ".webp", ".tif", ".tiff"})
SPLIT_DIR_NAMES = {"train": "train", "validation": "validation", "val": "validation", "test": "test"}


@dataclass(frozen=True)
class ImageItem:
    """One candidate image: where it is and what it will be labelled."""

    path: str  # absolute (or input-joined) path used to read the file
    rel: str  # path relative to the input directory, '/'-separated (for messages and the manifest)
    filename: str  # path relative to the split's root, '/'-separated (image/filename)
    label: int  # final label, offset included
    text: str  # class folder name
    size: int  # bytes on disk at listing time


@dataclass
class Discovery:
    """What the walk found: classes, candidate images per split, and what it ignored."""

    classes: list[str]
    splits: dict[str, list[ImageItem]]
    ignored_files: int = 0
    warnings: list[str] = field(default_factory=list)
    presplit: bool = False


def is_hidden(name: str) -> bool:
    """Dot files (.DS_Store, .git) and AppleDouble `._*` files are never data."""
    return name.startswith(".")


def _list_dir(path: str) -> list[os.DirEntry]:
    with os.scandir(path) as it:
        return sorted(it, key=lambda e: e.name)


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


def _stratify(files: list, fractions: dict[str, float], rng: random.Random) -> dict[str, list]:
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
    if not os.path.isdir(input_dir):
        what = "does not exist" if not os.path.exists(input_dir) else "is not a directory"
        raise UsageError(f"input {input_dir} {what}: give the folder that holds one subfolder per class")
    top = [e for e in _list_dir(input_dir) if not is_hidden(e.name)]
    top_dirs = [e for e in top if _is_dir(e)]
    warnings: list[str] = []
    loose = [e for e in top if not _is_dir(e) and os.path.splitext(e.name)[1].lower() in IMAGE_EXTENSIONS]
    ignored = len(top) - len(top_dirs)

    presplit = bool(top_dirs) and all(e.name.lower() in SPLIT_DIR_NAMES for e in top_dirs)
    if presplit:
        if split:
            raise UsageError(
                f"{input_dir} is already split into {', '.join(e.name for e in top_dirs)}; drop --split"
            )
        names = [SPLIT_DIR_NAMES[e.name.lower()] for e in top_dirs]
        if len(set(names)) != len(names):
            raise UsageError(f"{input_dir} has both 'val' and 'validation' folders: keep one")
        split_roots = {SPLIT_DIR_NAMES[e.name.lower()]: e.path for e in top_dirs}
    else:
        split_roots = {"": input_dir}

    # class name -> split key -> candidates
    per_class: dict[str, dict[str, list[tuple[str, str, int]]]] = {}
    for skey, sroot in split_roots.items():
        entries = [e for e in _list_dir(sroot) if not is_hidden(e.name)] if skey else top
        for e in entries:
            if not _is_dir(e):
                if skey:
                    ignored += 1
                    if os.path.splitext(e.name)[1].lower() in IMAGE_EXTENSIONS:
                        loose.append(e)
                continue
            found, ign = _walk_class(e.path, e.name + "/")
            ignored += ign
            per_class.setdefault(e.name, {})[skey] = found
    if loose:
        warnings.append(
            f"{len(loose)} image(s) lie outside any class folder (e.g. {loose[0].name}) and are ignored: "
            "put them in INPUT/CLASS/"
        )

    if labels is not None:
        classes = list(labels)
        unlisted = sorted(set(per_class) - set(classes))
        if unlisted:
            n_unlisted = sum(len(v) for c in unlisted for v in per_class[c].values())
            ignored += n_unlisted
            warnings.append(
                f"{len(unlisted)} class folder(s) not in --labels are ignored ({n_unlisted} files): "
                + ", ".join(unlisted[:5])
                + ("..." if len(unlisted) > 5 else "")
            )
    else:
        classes = sorted(per_class)
    if not classes:
        raise UsageError(
            f"no class folders found in {input_dir}: expected {input_dir}/CLASS_NAME/image.jpg "
            f"(images: {', '.join(sorted(IMAGE_EXTENSIONS))})"
        )
    for c in classes:
        if not any(per_class.get(c, {}).values()):
            warnings.append(f"class {c!r} has no images; its label is kept")

    label_of = {c: i + label_offset for i, c in enumerate(classes)}
    splits: dict[str, list[ImageItem]] = {}
    split_keys = list(split_roots) if presplit else (list(split) if split else ["train"])
    for s in split_keys:
        splits[s] = []
    for c in classes:
        for skey, found in per_class.get(c, {}).items():
            prefix = f"{os.path.basename(split_roots[skey])}/" if skey else ""
            items = [
                ImageItem(path=p, rel=prefix + c + "/" + r, filename=c + "/" + r, label=label_of[c], text=c, size=sz)
                for p, r, sz in found
            ]
            if presplit:
                splits[skey].extend(items)
            elif split:
                for s, part in _stratify(items, split, random.Random(f"img2tfrecord:{seed}:stratify:{c}")).items():
                    splits[s].extend(part)
            else:
                splits["train"].extend(items)
    for s, items in splits.items():
        items.sort(key=lambda it: it.filename)
        random.Random(f"img2tfrecord:{seed}:shuffle:{s}").shuffle(items)
    if not any(splits.values()):
        raise UsageError(
            f"no images found in {input_dir}: expected {input_dir}/CLASS_NAME/image.jpg "
            f"(images: {', '.join(sorted(IMAGE_EXTENSIONS))})"
        )
    return Discovery(classes=classes, splits=splits, ignored_files=ignored, warnings=warnings, presplit=presplit)
