"""update's options: a dataset's record-shaping options are its own (dataset.json), never changed by `update`.

A new version must hold records shaped like the old ones, or a reader would get two kinds of
record in one dataset. So `update` takes every such option from dataset.json; one given again
with the same value is accepted, one with another value is refused, with the `convert
--like OUTPUT --overwrite` command that makes the dataset again with that one option changed.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable
from typing import Any

from img2tfrecord.conversion.plan.like import cli_flags, convert_like_advice
from img2tfrecord.conversion.plan.options import EncodeOptions, ShardSettings
from img2tfrecord.errors import UsageError, check_keywords, option, said
from img2tfrecord.format.conversion_options import ConversionOptions
from img2tfrecord.format.options import OptionSpec, json_form, parsed, spec, update_names


def _converted_with(row: OptionSpec, then: Any) -> str:
    """How the dataset was made, as the user would have asked for it: `--shards 8` (the request
    as typed, not the counts it gave), `--no-validate`, `--index not given`, `no --labels`."""
    key = row.name
    if then is None and row.unset is not None:
        return said(f"no {row.flag}{row.unset}", f"no {key}{row.unset}")
    if then is None:
        return said(f"{row.flag} not given", f"{key}={then!r}")
    if row.check is not None and row.check.kind == "names":  # a list of class names: its first few
        return said(f"{row.flag} listing {', '.join(then[:5])}{' ...' if len(then) > 5 else ''}", f"{key}={then!r}")
    return said(shlex.join(cli_flags({key: then})), f"{key}={then!r}")


def _same(row: OptionSpec, now: Any, then: Any, asked: Any) -> bool:
    """Whether a given value (parsed, in dataset.json's form) is the recorded one."""
    if row.same is not None:
        return row.same(now, then, asked)
    return bool(now == then) or (row.kind is bool and bool(now) == bool(then))  # a flag: null is off


def refuse_other_options(
    recorded: dict[str, Any],
    given: dict[str, Any],
    input_dir: str,
    output_dir: str,
    file_list: str | None = None,
    *,
    own: Iterable[str] = (),
) -> None:
    """UsageError when a given option differs from dataset.json's, naming the convert to run instead:
    `convert --like OUTPUT`, which keeps every other option and the labels (`like.convert_like_advice`).
    `recorded`: dataset.json's options and the values it keeps elsewhere that update compares (its
    `shard_request`: a row's `elsewhere`); `own`: update()'s own parameters, for the message of a
    keyword that is neither."""
    check_keywords("update", given, [*update_names(), *own])  # the table says which it compares
    for key, value in given.items():
        if value is None:
            continue
        row = spec(key)
        then = recorded.get(key)
        if then is None and row.absent is not ...:
            then = row.absent  # a dataset made before the option: what it did then
        asked = recorded.get(row.elsewhere, then) if row.elsewhere else then  # the request as typed
        if _same(row, json_form(parsed(key, value)), then, asked):
            continue
        raise UsageError(
            f"{output_dir} was converted with {_converted_with(row, asked)}; update keeps a dataset's options. "
            f"To convert with {option(key, value)} instead, keeping the rest, "
            + convert_like_advice(input_dir, output_dir, {key: value}, file_list=file_list)
        )


def recorded_settings(made: ConversionOptions, *, fsync: bool, strict: bool) -> ShardSettings:
    """How the dataset's shards were written (dataset.json's options), for the new shards."""
    opts = EncodeOptions(
        encoding=made.encoding,
        quality=made.quality,
        resize=made.resize,
        resize_mode=made.resize_mode,
        channels=made.channels,
        max_pixels=made.max_pixels,
        validate=made.validate,
        mask_colors=made.mask_colors,
        mask_ignore=made.mask_ignore,
    )
    return ShardSettings(
        encode=opts,
        compression=made.compression,
        index=made.index,
        checksum=made.checksum,
        fsync=fsync,
        dedupe=made.dedupe,
        strict=strict,
    )
