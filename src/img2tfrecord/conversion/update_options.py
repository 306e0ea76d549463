"""update's options: a dataset's record-shaping options are its own (dataset.json), never changed by `update`.

A new version must hold records shaped like the old ones, or a reader would get two kinds of
record in one dataset. So `update` takes every such option from dataset.json; one given again
with the same value is accepted, one with another value is refused, with the `convert
--overwrite` command that makes a dataset with it.
"""

from __future__ import annotations

import shlex
from typing import Any

from img2tfrecord.conversion.labels import read_labels_file
from img2tfrecord.conversion.options import EncodeOptions, ShardSettings, parse_resize, parse_shards
from img2tfrecord.conversion.splits import parse_split_spec
from img2tfrecord.errors import UsageError, check_keywords, option, said

# update()'s own parameters, besides the record-shaping options it accepts to compare
UPDATE_PARAMETERS = ("check_content", "dry_run", "workers", "strict", "fsync", "file_list", "on_event", "progress")

# option name -> convert's flag
FLAGS = {
    "encoding": "--encoding",
    "quality": "--quality",
    "resize": "--resize",
    "channels": "--channels",
    "max_pixels": "--max-pixels",
    "validate": "--validate",
    "seed": "--seed",
    "label_offset": "--label-offset",
    "compression": "--compression",
    "index": "--index",
    "split": "--split",
    "shards": "--shards",
    "labels": "--labels",
    "dedupe": "--dedupe",
    "checksum": "--checksum",
}


def _normal(key: str, value: Any, recorded: Any, asked: Any = None) -> Any:
    """A given option's value in dataset.json's form."""
    if key == "resize":
        r = parse_resize(value)
        return list(r) if isinstance(r, tuple) else r
    if key == "split":
        return parse_split_spec(value) if isinstance(value, str) else value
    if key == "labels":
        return read_labels_file(value) if isinstance(value, str) else value
    if key == "shards":
        req = parse_shards(value)
        if req == asked or (isinstance(req, int) and isinstance(recorded, dict) and sum(recorded.values()) == req):
            return recorded  # as it was asked for, or the same total
        return req
    if key == "channels":
        return str(value)
    return value


def _shown(key: str, value: Any) -> str:
    if key == "split" and isinstance(value, dict):
        return ",".join(f"{k}={v:g}" for k, v in value.items())
    if key == "resize" and isinstance(value, list):
        return f"{value[0]}x{value[1]}"
    if key == "shards" and isinstance(value, dict):
        return ",".join(f"{k}={v}" for k, v in value.items())
    return str(value)


def refuse_other_options(recorded: dict[str, Any], given: dict[str, Any], input_dir: str, output_dir: str) -> None:
    """UsageError when a given option differs from dataset.json's, naming the convert to run instead."""
    check_keywords("update", given, [*FLAGS, *UPDATE_PARAMETERS])
    for key, value in given.items():
        if value is None:
            continue
        then = recorded.get(key)
        now = _normal(key, value, then, recorded.get("shard_request"))
        if key == "labels" and then is None:
            then = None  # the dataset was made without --labels
        if key == "split" and isinstance(now, dict) and isinstance(then, dict):
            same = list(now.items()) == list(then.items())  # the order decides which slice of the hash each gets
        else:
            same = now == then or (key in ("validate", "index") and bool(now) == bool(then))
        if same:
            continue
        flag = FLAGS[key]
        was = "not given" if then is None or then is False else _shown(key, then)
        cmd = ["img2tfrecord", "convert", input_dir, output_dir, "--overwrite"]
        if key in ("validate", "index"):
            cmd.append(flag if now else ("--no-validate" if key == "validate" else ""))
        elif key == "labels":
            cmd += [flag, str(value)]
        else:
            cmd += [flag, _shown(key, now)]
        call = f"convert({input_dir!r}, {output_dir!r}, overwrite=True, {key}={value!r})"
        raise UsageError(
            f"{output_dir} was converted with {said(f'{flag} {was}', f'{key}={then!r}')}; update keeps a dataset's "
            f"options. To convert with {option(key, value)} instead, "
            + said(f"run: {shlex.join([c for c in cmd if c])}", f"call {call}")
        )


def recorded_settings(options: dict[str, Any], *, fsync: bool, strict: bool) -> ShardSettings:
    """How the dataset's shards were written (dataset.json's options), for the new shards."""
    resize = options.get("resize")
    defaults = EncodeOptions()
    opts = EncodeOptions(
        encoding=options.get("encoding") or defaults.encoding,
        quality=int(options.get("quality") or defaults.quality),
        resize=tuple(resize) if isinstance(resize, list) else resize,  # type: ignore[arg-type]
        channels=str(options.get("channels") or defaults.channels),
        max_pixels=int(options.get("max_pixels") or defaults.max_pixels),
        validate=bool(options.get("validate", True)),
    )
    return ShardSettings(
        encode=opts,
        compression=options.get("compression"),
        index=bool(options.get("index")),
        checksum=options.get("checksum") or ShardSettings().checksum,
        fsync=fsync,
        dedupe=options.get("dedupe") or "report",
        strict=strict,
    )
