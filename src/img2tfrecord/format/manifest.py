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
from img2tfrecord.format import jsontext
from img2tfrecord.format.class_names import class_name_problem as class_name_problem  # re-exported
from img2tfrecord.format.class_names import shown as shown
from img2tfrecord.format.naming import MAX_RECORDED_SPLIT_NAME_BYTES, SHARD_RE, split_name_too_long
from img2tfrecord.format.options import DEDUPE_MODES as DEDUPE_MODES  # re-exported: where they were
from img2tfrecord.format.options import ENCODINGS as ENCODINGS
from img2tfrecord.format.options import INT64 as _INT64
from img2tfrecord.format.options import Check, specs
from img2tfrecord.format.parse_errors import parse_error
from img2tfrecord.format.schema import declared_features
from img2tfrecord.fs import CHECKSUMS, hasher

MANIFEST_NAME = "dataset.json"
LABELS_NAME = "labels.txt"
LABEL_MAP_NAME = "label_map.pbtxt"  # a detection dataset's (the Object Detection API's label map)
FORMAT_VERSION = 1
CATALOG_FILE = "dataset.catalog"  # format.catalog.CATALOG_NAME (which imports numpy: not imported here)
CATALOG_CHECKSUM = "xxh3_128"


def catalog_checksum_problem(manifest: Mapping[str, Any], data: bytes) -> str | None:
    """How the catalog's bytes differ from what dataset.json's `catalog` records (None: the same,
    or a dataset.json of a version that recorded none)."""
    entry = manifest.get("catalog")
    if not isinstance(entry, dict):
        return None
    now = catalog_entry(data)
    if now["bytes"] != entry.get("bytes"):
        return f"it is {now['bytes']:,} bytes; dataset.json says {entry.get('bytes'):,}"
    if now[CATALOG_CHECKSUM] != entry.get(CATALOG_CHECKSUM):
        return f"its {CATALOG_CHECKSUM} is not the one dataset.json records"
    return None


def catalog_entry(data: bytes) -> dict[str, Any]:
    """dataset.json's `catalog`: the catalog's size and checksum, so a reader can tell that the
    catalog beside the shards is the one written with them (one hash of a small file)."""
    h = hasher(CATALOG_CHECKSUM)
    h.update(data)
    return {"file": CATALOG_FILE, "bytes": len(data), CATALOG_CHECKSUM: h.hexdigest()}


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
    catalog: bytes | None = None,
    metadata: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The manifest; shard entries without a `version` are stamped with this one (they were written now).
    `catalog`: the bytes of the catalog written beside it; `metadata`: the metadata file's entry
    (conversion.plan.metadata), whose columns are features too."""
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
        "features": {k: d.kind for k, d in declared_features(metadata).items()},
        **({"metadata": metadata} if metadata else {}),
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
        # the catalog's size and checksum: update and compact refuse a catalog that is not this one
        **({"catalog": catalog_entry(catalog)} if catalog is not None else {}),
    }


def manifest_text(manifest: dict[str, Any]) -> str:
    return jsontext.dumps(manifest) + "\n"  # json.dumps(indent=2, ensure_ascii=False)'s text, faster


def labels_text(classes: list[str]) -> str:
    """labels.txt: one class name per line, which `class_name_problem` makes sure each can be."""
    return "".join(c + "\n" for c in classes)


def label_map_text(classes: list[str]) -> str:
    """label_map.pbtxt: one `item { id: N name: 'x' }` per class, ids from 1 (0 is the
    Object Detection API's background)."""
    out = []
    for i, name in enumerate(classes, 1):
        quoted = name.replace("\\", "\\\\").replace("'", "\\'")
        out.append(f"item {{\n  id: {i}\n  name: '{quoted}'\n}}\n")
    return "".join(out)


def label_files(manifest: dict[str, Any]) -> dict[str, str]:
    """labels.txt, and label_map.pbtxt beside it for a detection dataset: name -> text."""
    out = {LABELS_NAME: labels_text(manifest["classes"])}
    if (manifest.get("metadata") or {}).get("detection"):
        out[LABEL_MAP_NAME] = label_map_text(manifest["classes"])
    return out


# --------------------------------------------------------------------------- reading it back
#
# Every reader (inspect, inspect --verify, load()) takes dataset.json through `parse_manifest`,
# so a hand-edited or damaged manifest is refused in one place, in one line that names the field,
# instead of surfacing as a TypeError wherever a reader first trips on it. Hand-written rather
# than a JSON Schema validator: the schema is small, it is checked with no new dependency, and
# the message is ours ("splits.train.shards[0].bytes is "x": expected a whole number >= 0").
# Fields readers do not use are checked only for their JSON type; unknown fields are allowed
# (a later version 1 may add some).

MAX_MANIFEST_BYTES = 1 << 30  # a manifest is kilobytes to megabytes; past this it is not one


class ManifestError(ValueError):
    """dataset.json does not hold what its format says; the message names the field. `damaged`
    is False when the file is sound but not for this version (a newer format_version)."""

    def __init__(self, message: str, damaged: bool = True) -> None:
        super().__init__(message)
        self.damaged = damaged


def _kind(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true/false"
    return {dict: "an object", list: "a list", str: "a string", int: "a number", float: "a number"}.get(
        type(v), type(v).__name__
    )


def _shown(v: Any) -> str:
    text = json.dumps(v, ensure_ascii=False) if isinstance(v, (str, int, float, bool, type(None))) else _kind(v)
    return text if len(text) <= 40 else text[:37] + "..."


def _fail(where: str, v: Any, want: str) -> ManifestError:
    return ManifestError(f"{where} is {_shown(v)}: expected {want}")


def _obj(v: Any, where: str) -> dict[str, Any]:
    if not isinstance(v, dict):
        raise _fail(where, v, "an object")
    return v


def _list(v: Any, where: str) -> list[Any]:
    if not isinstance(v, list):
        raise _fail(where, v, "a list")
    return v


def _str(v: Any, where: str) -> str:
    if not isinstance(v, str):
        raise _fail(where, v, "a string")
    return v


def _whole(v: Any, where: str, lo: int = 0) -> int:
    if not isinstance(v, int) or isinstance(v, bool) or not lo <= v < _INT64:
        raise _fail(where, v, f"a whole number >= {lo}" if lo > -_INT64 else "a whole number (int64)")
    return v


def _file_name(v: Any, where: str) -> str:
    """A file beside dataset.json: a plain name, so no entry can point a reader elsewhere."""
    name = _str(v, where)
    if not name or name in (".", "..") or "/" in name or "\\" in name or "\x00" in name:
        raise _fail(where, v, "a file name in the dataset's folder (no '/')")
    return name


def _counts(v: Any, where: str) -> None:
    for k, n in _obj(v, where).items():
        _whole(n, f"{where}.{k}")


def _optional(d: dict[str, Any], key: str, where: str, check: Any) -> None:
    if key in d:
        check(d[key], f"{where}{key}")


def _nullable(check: Any) -> Any:
    return lambda v, where: None if v is None else check(v, where)


def _one_of(*values: Any) -> Any:
    def check(v: Any, where: str) -> None:
        if v not in values or isinstance(v, bool) != any(isinstance(x, bool) for x in values if x == v):
            raise _fail(where, v, " or ".join(_shown(x) for x in values))

    return check


def _resize(v: Any, where: str) -> None:
    """null, N (the shorter side) or [width, height], as convert records --resize."""
    want = "null, a whole number >= 1 or [width, height]"
    if isinstance(v, list) and len(v) == 2:
        for i, x in enumerate(v):
            _whole(x, f"{where}[{i}]", 1)
    elif v is not None and (not isinstance(v, int) or isinstance(v, bool) or not 1 <= v < _INT64):
        raise _fail(where, v, want)


def _split_name(name: str, where: str) -> None:
    if not name or not name.replace("_", "").isalnum():
        raise ManifestError(f"{where} names a split {_shown(name)}: expected letters, digits and '_'")
    if long := split_name_too_long(name, MAX_RECORDED_SPLIT_NAME_BYTES):
        raise ManifestError(f"{where} names a split that cannot be a file name: {long}")


def _hex(v: Any, where: str) -> str:
    digest = _str(v, where)
    if not digest or any(c not in "0123456789abcdef" for c in digest):
        raise _fail(where, digest, "a lower-case hex digest")
    return digest


def _catalog_entry(v: Any, where: str) -> None:
    """dataset.json's `catalog`: the catalog file's name, size and checksum (`catalog_entry`)."""
    c = _obj(v, where)
    if c.get("file") != CATALOG_FILE:
        raise _fail(f"{where}.file", c.get("file"), _shown(CATALOG_FILE))
    _whole(c.get("bytes"), f"{where}.bytes")
    _hex(c.get(CATALOG_CHECKSUM), f"{where}.{CATALOG_CHECKSUM}")


def _fractions(v: Any, where: str) -> None:
    """--split as recorded: null or {split: fraction} with fractions in [0, 1] that add up to 1."""
    if v is None:
        return
    total = 0.0
    for name, frac in _obj(v, where).items():
        _split_name(name, where)
        if not isinstance(frac, (int, float)) or isinstance(frac, bool) or not 0 <= frac <= 1:
            raise _fail(f"{where}.{name}", frac, "a fraction from 0 to 1")
        total += frac
    if abs(total - 1.0) > 1e-6:
        raise ManifestError(f"{where} adds up to {total:g}: expected fractions that add up to 1")


def _shard_counts(v: Any, where: str) -> None:
    """--shards as recorded: null, a count, or {split: count}."""
    if isinstance(v, dict):
        for name, n in v.items():
            _split_name(name, where)
            _whole(n, f"{where}.{name}", 1)
    elif v is not None:
        _whole(v, where, 1)


def _metadata(v: Any, where: str) -> None:
    """The metadata file's entry (conversion.plan.metadata), and a detection dataset's `detection`."""
    entry = _obj(v, where)
    _optional(entry, "columns", f"{where}.", _obj)
    _optional(entry, "detection", f"{where}.", _detection)


def _detection(v: Any, where: str) -> None:
    """`metadata.detection` (conversion.plan.detection): the annotations, box counts, each box clipped or dropped."""
    d = _obj(v, where)
    _optional(d, "format", f"{where}.", _one_of("coco", "voc", "yolo"))
    _optional(d, "annotations", f"{where}.", _str)
    for key in ("boxes", "clipped", "dropped", "empty_images", "skipped_empty"):
        _optional(d, key, f"{where}.", _whole)
    for name, n in _obj(d.get("boxes_per_class", {}), f"{where}.boxes_per_class").items():
        _whole(n, f"{where}.boxes_per_class.{name}")
    for i, p in enumerate(_list(d.get("box_problems", []), f"{where}.box_problems")):
        for key in ("path", "box", "reason"):
            _str(_obj(p, f"{where}.box_problems[{i}]").get(key), f"{where}.box_problems[{i}].{key}")


def _check(c: Check) -> Any:
    """The check of one option's recorded value, as its row in format.options says."""
    if c.kind == "one_of":
        return _one_of(*c.values)
    if c.kind == "whole" and c.hi is not None:
        return lambda x, w: _range(x, w, c.lo, c.hi)
    if c.kind == "whole":
        check = lambda x, w: _whole(x, w, c.lo)  # noqa: E731
        return _nullable(check) if c.nullable else check
    if c.kind == "names":
        return _nullable(lambda x, w: [_str(n, f"{w}[{i}]") for i, n in enumerate(_list(x, w))])
    return {"resize": _resize, "fractions": _fractions, "shard_counts": _shard_counts}[c.kind]


def _options(v: Any, where: str) -> None:
    """dataset.json's `options`: each recorded option with a check (format.options) checked."""
    o = _obj(v, where)
    for spec in specs():
        if spec.recorded and spec.check is not None:
            _optional(o, spec.name, f"{where}.", _check(spec.check))


def _range(v: Any, where: str, lo: int, hi: int) -> int:
    if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
        raise _fail(where, v, f"a whole number from {lo} to {hi}")
    return v


def _shard(v: Any, where: str, checksums: tuple[str, ...]) -> None:
    s = _obj(v, where)
    if "file" not in s:
        raise ManifestError(f"{where} has no 'file'")
    _file_name(s["file"], f"{where}.file")
    _optional(s, "records", f"{where}.", _whole)
    _optional(s, "bytes", f"{where}.", _whole)
    _optional(s, "index", f"{where}.", _nullable(_file_name))
    for algorithm in checksums:
        if algorithm in s:
            _hex(s[algorithm], f"{where}.{algorithm}")


def _split(v: Any, where: str, checksums: tuple[str, ...]) -> None:
    s = _obj(v, where)
    name = where.removeprefix("splits.")
    _optional(s, "records", f"{where}.", _whole)
    _optional(s, "class_counts", f"{where}.", _counts)
    if "shards" not in s:
        raise ManifestError(f"{where} has no 'shards' list")
    files = set()
    for i, entry in enumerate(_list(s["shards"], f"{where}.shards")):
        _shard(entry, f"{where}.shards[{i}]", checksums)
        m = SHARD_RE.match(entry["file"])
        if m is None or m["split"] != name:  # a split renamed: its shards are another split's
            raise _fail(
                f"{where}.shards[{i}].file", entry["file"], f"a shard of the split {name} ({name}-NNNNN-of-NNNNN)"
            )
        if entry["file"] in files:
            raise ManifestError(f"{where}.shards[{i}].file {_shown(entry['file'])} is listed twice")
        files.add(entry["file"])


_DIGESTS = tuple(c for c in CHECKSUMS if c != "none")


def validate_manifest(data: Any, checksums: tuple[str, ...] = _DIGESTS) -> dict[str, Any]:
    """`data` (parsed dataset.json) if it holds what FORMAT_VERSION promises; else ManifestError
    naming the first field that is wrong. `checksums`: the digest fields a shard entry may hold."""
    m = _obj(data, "the manifest")
    if "format_version" not in m:
        raise ManifestError("no 'format_version': not an img2tfrecord dataset.json")
    version = m["format_version"]
    if isinstance(version, int) and not isinstance(version, bool) and version > FORMAT_VERSION:
        raise ManifestError(
            f"format_version is {version}: written by a newer img2tfrecord (this one reads {FORMAT_VERSION}); upgrade to read it",
            damaged=False,
        )
    if version != FORMAT_VERSION or isinstance(version, bool):
        raise _fail("format_version", version, str(FORMAT_VERSION))
    _optional(m, "tool", "", _obj)
    _optional(m, "version", "", lambda x, w: _whole(x, w, 1))
    _optional(m, "parent", "", _nullable(_hex))
    _optional(m, "created", "", _str)
    _optional(m, "shard_request", "", _shard_counts)
    _optional(m, "catalog", "", _catalog_entry)
    if "classes" in m:
        for i, name in enumerate(_list(m["classes"], "classes")):
            _str(name, f"classes[{i}]")
    _optional(m, "label_offset", "", lambda x, w: _whole(x, w, -_INT64))
    _optional(m, "options", "", _options)
    offset, opts = m.get("label_offset", 0), m.get("options") or {}
    if "label_offset" in opts and opts["label_offset"] != offset:  # readers name classes by the top-level one
        raise ManifestError(
            f"label_offset is {offset} but options.label_offset is {opts['label_offset']}: they must agree"
        )
    _optional(m, "features", "", lambda x, w: [_str(t, f"{w}.{k}") for k, t in _obj(x, w).items()])
    if "splits" not in m:
        raise ManifestError("no 'splits' object")
    fractions = opts.get("split")
    for name, split in _obj(m["splits"], "splits").items():
        _split_name(name, "splits")
        if isinstance(fractions, dict) and name not in fractions:
            raise ManifestError(f"splits.{name} is a split options.split does not name ({', '.join(fractions)})")
        _split(split, f"splits.{name}", checksums)
    _optional(m, "skipped", "", _list)
    for key in ("transcoded", "formats", "depths", "reduced_depth"):
        _optional(m, key, "", _counts)
    _optional(m, "dtype", "", _one_of("uint8", "uint16"))
    _optional(m, "ignored_files", "", _whole)
    _optional(m, "excluded_files", "", _whole)
    _optional(m, "duplicates", "", _obj)
    _optional(m, "history", "", _list)  # update's per-version changes per class
    _optional(m, "metadata", "", _metadata)
    return m


def parse_manifest(text: bytes | str) -> dict[str, Any]:
    """dataset.json's text, parsed and validated; ManifestError (one line) if it is not one."""
    if len(text) > MAX_MANIFEST_BYTES:
        raise ManifestError(f"more than {MAX_MANIFEST_BYTES:,} bytes: too large to be a manifest")
    try:
        data = json.loads(text)
    except RecursionError:
        raise ManifestError("nested too deeply to be a manifest") from None
    except (UnicodeDecodeError, ValueError) as e:
        raise ManifestError(f"not valid JSON: {parse_error(e)}") from None
    return validate_manifest(data)
