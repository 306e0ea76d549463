"""What the walk says about an input not laid out as INPUT/CLASS/image: each message names the likely fix.

The usual slips: pointing at one class folder (`convert data/cat out`), split folders beside class
folders, images loose at the top. Apart from the walk (the listing itself), so the words can be
read and changed in one place.
"""

from __future__ import annotations

import os
from collections.abc import Collection

from img2tfrecord import fs
from img2tfrecord.conversion.plan.splits import SPLIT_DIR_NAMES
from img2tfrecord.errors import plural
from img2tfrecord.format.schema import utf8_text


def parent(folder: str) -> str:
    """The folder that holds `folder` ("data/cat" -> "data", "." -> "..")."""
    return os.path.normpath(os.path.join(folder, os.pardir))


def loose_warning(input_dir: str, n: int, example: str, top_level: bool) -> str:
    """Images outside any class folder, left out. At INPUT's top beside subfolders, INPUT is most
    likely one class folder whose subfolder became the only class: its parent is the likely fix."""
    lie = f"{plural(n, 'image')} {'lies' if n == 1 else 'lie'}"
    left = f"{'is' if n == 1 else 'are'} left out"
    if not top_level:
        return f"{lie} outside any class folder (e.g. {example}) and {left}: put them in INPUT/SPLIT/CLASS/"
    return (
        f"{lie} at the top of {input_dir}, outside any class folder (e.g. {example}), and {left}: "
        f"if {input_dir} is itself one class, give its parent folder {parent(input_dir)} as INPUT; "
        f"else move {'it' if n == 1 else 'them'} into a class folder {fs.join(input_dir, 'CLASS_NAME')}/"
    )


def no_classes(input_dir: str, loose: int, images: str) -> str:
    """No class folder at all: with images at the top, INPUT is most likely one class folder."""
    itself = (
        f", only {plural(loose, 'image')}: if it is one class, give its parent folder {parent(input_dir)} as INPUT;"
    )
    expected = f"expected {fs.join(input_dir, 'CLASS_NAME', 'image.jpg')} {images}"
    return f"no class folders found in {input_dir}{itself if loose else ':'} {expected}"


def mixed_split_warning(input_dir: str, folders: list[str]) -> str | None:
    """Split folders (train, val, ...) beside class folders: all are taken as classes."""
    named = [n for n in folders if n.lower() in SPLIT_DIR_NAMES]
    if not named:
        return None
    others = [n for n in folders if n.lower() not in SPLIT_DIR_NAMES]
    return (
        f"{input_dir} holds {'a split folder' if len(named) == 1 else 'split folders'} ({', '.join(named)}) next to class "
        f"folders ({', '.join(others[:3])}{', ...' if len(others) > 3 else ''}): {'it is' if len(named) == 1 else 'they are'} "
        "taken as classes; to use splits, move every class folder into train/, validation/ or test/"
    )


def junk_note(junk_dirs: Collection[str]) -> str | None:
    """The one line that says which folders were ignored as never being data (hidden and OS
    metadata files are not said: a Mac leaves a .DS_Store in every folder it opened)."""
    if not junk_dirs:
        return None
    names = sorted(junk_dirs)
    shown_names = ", ".join(utf8_text(n) for n in names[:5]) + (", ..." if len(names) > 5 else "")
    return f"ignored folders that are never classes or images: {shown_names}"
