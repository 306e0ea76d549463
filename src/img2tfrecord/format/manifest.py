"""dataset.json and labels.txt: what a reader (or a later --resume) needs to know about the output.

No machine facts go in. One timestamp does: the lineage's `created` (when this version was made),
taken from SOURCE_DATE_EPOCH when it is set (reproducible-builds.org's rule), so identical runs
with it set produce identical manifests; without it, two runs differ in that field alone.

Lineage: `version` counts the dataset's versions (1 for `convert`, +1 per `update`/`compact`),
`parent` is the sha256 of the previous version's dataset.json bytes (null for version 1), and
every shard entry says which `version` wrote its bytes, so a training job can log what it read
and a later version can be traced back to the one it was made from.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Mapping
from typing import Any

from img2tfrecord._version import __version__
from img2tfrecord.errors import UsageError
from img2tfrecord.format.schema import FEATURE_TYPES

MANIFEST_NAME = "dataset.json"
LABELS_NAME = "labels.txt"
FORMAT_VERSION = 1


def created_stamp(env: Mapping[str, str] | None = None) -> str:
    """The lineage's `created`: SOURCE_DATE_EPOCH when set (a UsageError if it is not a
    non-negative integer), else the current time; ISO 8601 in UTC, to the second."""
    raw = (os.environ if env is None else env).get("SOURCE_DATE_EPOCH")
    if raw is None or raw == "":
        seconds = int(_now())
    else:
        if not raw.strip().isdigit():
            raise UsageError(
                f"SOURCE_DATE_EPOCH={raw!r} is not a whole number of seconds since 1970: fix it or unset it"
            )
        seconds = int(raw.strip())
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def _now() -> float:
    return time.time()


def manifest_digest(text: str | bytes) -> str:
    """What a child version's `parent` holds: the sha256 of the parent's dataset.json bytes."""
    return hashlib.sha256(text.encode("utf-8") if isinstance(text, str) else text).hexdigest()


def build_manifest(
    *,
    classes: list[str],
    label_offset: int,
    options: dict[str, Any],
    splits: dict[str, dict[str, Any]],
    skipped: list[dict[str, str]],
    transcoded: dict[str, int],
    formats: dict[str, int],
    ignored_files: int,
    depths: dict[str, int] | None = None,
    reduced: dict[str, int] | None = None,
    engine: str = "local",
    duplicates: dict[str, Any] | None = None,
    excluded_files: int = 0,
    version: int = 1,
    parent: str | None = None,
    created: str | None = None,
    shard_request: int | dict[str, int] | None = None,
) -> dict[str, Any]:
    """The manifest; shard entries without a `version` are stamped with this one (they were written now)."""
    for info in splits.values():
        for shard in info.get("shards") or []:
            shard.setdefault("version", version)
    return {
        "format_version": FORMAT_VERSION,
        "tool": {"name": "img2tfrecord", "version": __version__, "engine": engine},
        "version": version,
        "parent": parent,
        "created": created if created is not None else created_stamp(),
        "classes": classes,
        "label_offset": label_offset,
        "options": options,
        # --shards as it was asked for (null: the 100-200 MiB rule), where options' "shards" holds the
        # counts it gave: `compact` cuts a split again as convert would
        "shard_request": shard_request,
        "features": dict(FEATURE_TYPES),
        "splits": splits,
        "skipped": skipped,
        "transcoded": dict(sorted(transcoded.items())),
        "formats": dict(sorted(formats.items())),
        # Bits per sample of the stored pixels -> records. 16 only for PNGs (16-bit sources stay
        # 16-bit); "dtype" is what load() decodes to by default: uint16 if any record is 16-bit.
        "depths": dict(sorted((depths or {}).items(), key=lambda kv: int(kv[0]))),
        "dtype": "uint16" if (depths or {}).get("16") else "uint8",
        "reduced_depth": dict(
            sorted((reduced or {}).items())
        ),  # why fewer bits were stored than the source had -> records
        "ignored_files": ignored_files,
        "excluded_files": excluded_files,
        "duplicates": duplicates or {},
    }


def manifest_text(manifest: dict[str, Any]) -> str:
    return json.dumps(manifest, indent=2, ensure_ascii=False) + "\n"


def labels_text(classes: list[str]) -> str:
    """labels.txt: one class name per line, which `class_name_problem` makes sure each can be."""
    return "".join(c + "\n" for c in classes)


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


def read_manifest(path: str) -> dict[str, Any]:
    with open(path, encoding="utf-8") as f:
        return json.load(f)
