"""update's options: a dataset's record-shaping options are its own (dataset.json), never changed by `update`.

A new version must hold records shaped like the old ones, or a reader would get two kinds of
record in one dataset. So `update` takes every such option from dataset.json; one given again
with the same value is accepted, one with another value is refused, with the `convert
--like OUTPUT --overwrite` command that makes the dataset again with that one option changed.
"""

from __future__ import annotations

import shlex
from typing import Any

from img2tfrecord.conversion.plan.labels import read_labels_file
from img2tfrecord.conversion.plan.like import cli_flags, convert_like_advice
from img2tfrecord.conversion.plan.options import EncodeOptions, ShardSettings, parse_resize, parse_shards
from img2tfrecord.conversion.plan.splits import parse_split_spec
from img2tfrecord.errors import UsageError, check_keywords, option, said
from img2tfrecord.format.options import recorded_value, spec, update_names

# update()'s own parameters, besides the record-shaping options it accepts to compare
UPDATE_PARAMETERS = (
    *("check_content", "dry_run", "workers", "strict", "fsync", "file_list", "max_delete", "on_event", "progress"),
)


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


def _converted_with(key: str, then: Any) -> str:
    """How the dataset was made, as the user would have asked for it: `--shards 8` (the request
    as typed, not the counts it gave), `--no-validate`, `--index not given`."""
    if key == "labels" and then is None:
        return said("no --labels", "no labels")
    if key == "shards" and then is None:
        return said("no --shards (about 100-200 MB a shard)", "no shards (about 100-200 MB a shard)")
    if then is None:
        return said(f"--{key.replace('_', '-')} not given", f"{key}={then!r}")
    if key == "labels":
        return said(f"--labels listing {', '.join(then[:5])}{' ...' if len(then) > 5 else ''}", f"labels={then!r}")
    return said(shlex.join(cli_flags({key: then})), f"{key}={then!r}")


def refuse_other_options(
    recorded: dict[str, Any], given: dict[str, Any], input_dir: str, output_dir: str, file_list: str | None = None
) -> None:
    """UsageError when a given option differs from dataset.json's, naming the convert to run instead:
    `convert --like OUTPUT`, which keeps every other option and the labels (`like.convert_like_advice`).
    `recorded`: dataset.json's options and its `shard_request`."""
    check_keywords("update", given, [*update_names(), *UPDATE_PARAMETERS])  # the table says which it compares
    for key, value in given.items():
        if value is None:
            continue
        then = recorded.get(key)
        if key == "resize_mode" and then is None:
            then = "always"  # a dataset made before the option: every image was resized
        now = _normal(key, value, then, recorded.get("shard_request"))
        if key == "split" and isinstance(now, dict) and isinstance(then, dict):
            same = list(now.items()) == list(then.items())  # the order decides which slice of the hash each gets
        else:
            same = now == then or (spec(key).kind is bool and bool(now) == bool(then))  # a flag: null is off
        if same:
            continue
        was = recorded.get("shard_request") if key == "shards" else then
        raise UsageError(
            f"{output_dir} was converted with {_converted_with(key, was)}; update keeps a dataset's options. "
            f"To convert with {option(key, value)} instead, keeping the rest, "
            + convert_like_advice(input_dir, output_dir, {key: value}, file_list=file_list)
        )


def recorded_settings(options: dict[str, Any], *, fsync: bool, strict: bool) -> ShardSettings:
    """How the dataset's shards were written (dataset.json's options), for the new shards."""

    def get(name: str) -> Any:
        return recorded_value(options, name)

    resize = get("resize")
    opts = EncodeOptions(
        encoding=get("encoding"),
        quality=int(get("quality")),
        resize=tuple(resize) if isinstance(resize, list) else resize,
        resize_mode=get("resize_mode"),
        channels=str(get("channels")),
        max_pixels=int(get("max_pixels")),
        validate=bool(get("validate")),
        mask_colors=get("mask_colors"),
        mask_ignore=int(get("mask_ignore")),
    )
    return ShardSettings(
        encode=opts,
        compression=get("compression"),
        index=bool(get("index")),
        checksum=get("checksum"),
        fsync=fsync,
        dedupe=get("dedupe"),
        strict=strict,
    )
