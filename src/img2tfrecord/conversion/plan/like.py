"""`convert --like OUT`: convert with the options and labels an existing dataset records, and the
advice that uses it.

A dataset's dataset.json records every option that shaped it (`options`, in `plan_job`'s names),
the shard request as it was asked for (`shard_request`) and its classes in label order (updates
append new classes at the end, so they are not in sorted order); its catalog gives each image's
split, which the image keeps (updates keep splits, so exact splits drawn again would differ). `like_options` turns these back
into `plan_job`'s keywords, generically: every recorded option that is one of the options' table
(format.options) is passed on as recorded, so an option added to dataset.json later carries over with no code here.
Options given beside `like` override only what they name.

`convert_like_advice` is the one place that words a command the tool advises to make a dataset
again with one thing changed ("run: img2tfrecord convert IN OUT --like OUT --overwrite --encoding
jpeg"): naming `--like OUT`, the command keeps everything else of the dataset.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any

from img2tfrecord import fs
from img2tfrecord.conversion.plan.splits import Prior, prior_of, recorded_rule
from img2tfrecord.errors import DataError, UsageError, option, said
from img2tfrecord.format import catalog as catalog_file
from img2tfrecord.format.catalog import CATALOG_NAME
from img2tfrecord.format.conversion_options import ConversionOptions
from img2tfrecord.format.layout import read_manifest
from img2tfrecord.format.manifest import MANIFEST_NAME
from img2tfrecord.format.options import OPTIONS, specs

# recorded options plan_job takes from elsewhere in dataset.json (the shards' request is
# `shard_request`, the labels are `classes`)
_RECORDED_ELSEWHERE = tuple(s.name for s in OPTIONS if s.elsewhere)
# input files beside the images, recorded relative to INPUT when inside it (fs.recorded_path)
_RECORDED_PATHS = tuple(s.name for s in OPTIONS if s.recorded and s.path and not s.elsewhere)
# options given beside `like` that draw the splits anew, so images no longer keep the dataset's
_SPLIT_DRAW = {s.name for s in OPTIONS if s.draws_splits}


def like_options(dataset_dir: str) -> dict[str, Any]:
    """`plan_job`'s keywords that make a dataset like the one in `dataset_dir`: its recorded options,
    its shard request, and its classes with their label numbers. UsageError when it holds no dataset."""
    if not fs.exists(fs.join(dataset_dir, MANIFEST_NAME)):
        raise UsageError(f"{option('like', dataset_dir)}: {dataset_dir} holds no dataset ({MANIFEST_NAME} is missing)")
    man = read_manifest(dataset_dir)
    if man is None:  # pragma: no cover - checked just above; a race with a concurrent removal
        raise UsageError(f"{option('like', dataset_dir)}: {dataset_dir} holds no dataset")
    keywords = {s.name for s in specs("plan")}
    recorded = dict(man.data.get("options") or {})
    out = {k: v for k, v in recorded.items() if k in keywords and k not in _RECORDED_ELSEWHERE}
    if isinstance(out.get("resize"), list):  # [W, H]: dataset.json has no tuples
        out["resize"] = tuple(out["resize"])
    if (request := man.data.get("shard_request")) is not None:
        out["shards"] = request
    classes = man.classes
    if not classes:
        raise DataError(f"{option('like', dataset_dir)}: {man.dir / MANIFEST_NAME} lists no classes")
    made = ConversionOptions.from_json(recorded)
    if made.labels is not None:  # made with --labels: that list is the set of classes
        out["labels"] = classes
    else:  # the classes keep their labels; classes the input has beyond them get the next ones
        out["known_classes"] = classes
    if (prior := _split_prior(dataset_dir, made)) is not None:
        out["split_prior"] = prior
    return out


def _split_prior(dataset_dir: str, made: ConversionOptions) -> Prior | None:
    """The splits the dataset's images have, which they keep (as in an update): exact splits drawn
    again from scratch would move images an update had left where they were. None for the hash rule
    (an image's split is its path's) or a dataset with no split or no catalog."""
    path = fs.join(dataset_dir, CATALOG_NAME)
    if not made.split or recorded_rule(made.json).name == "hash" or not fs.exists(path):
        return None
    try:
        cat = catalog_file.decode(fs.read_bytes(path))
    except catalog_file.CatalogError as e:
        raise DataError(f"{option('like', dataset_dir)}: {path}: {e}") from None
    return prior_of(cat.rels.blob, cat.rels.ends, cat.splits.codes, cat.splits.values, made.seed)


def with_like(like: str, given: Mapping[str, Any], input_dir: str) -> dict[str, Any]:
    """`given` (convert's options as the caller named them) over `like_options(like)`; the input
    files dataset.json records (`--annotations`, `--metadata`: relative to INPUT, or absolute)
    resolved against `input_dir`, as `update` resolves them."""
    recorded = like_options(like)
    for key in _RECORDED_PATHS:
        if isinstance(recorded.get(key), str):
            recorded[key] = fs.resolve_recorded(recorded[key], input_dir)
    out = recorded | dict(given)
    if "labels" in given:  # a label list of the caller's own replaces the dataset's classes
        out.pop("known_classes", None)
    if _SPLIT_DRAW & set(given):  # splits drawn anew: nothing keeps the dataset's
        out.pop("split_prior", None)
    return out


def _cli_value(value: Any) -> str:
    """An option's value as the CLI takes it: `train=0.8,validation=0.2`, `224x224`, `8`."""
    if isinstance(value, Mapping):
        return ",".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return "x".join(str(v) for v in value)
    return str(value)


def cli_flags(options: Mapping[str, Any]) -> list[str]:
    """convert's command-line flags for `options` (convert()'s keywords): `--encoding jpeg`,
    `--index` / `--no-index`, `--split train=0.8,validation=0.2`."""
    out: list[str] = []
    for key, value in options.items():
        flag = "--" + key.replace("_", "-")
        if value is True or value is False:
            out.append(flag if value else "--no-" + flag[2:])
        else:
            out += [flag, _cli_value(value)]
    return out


def convert_like_advice(
    input_dir: str, output_dir: str, change: Mapping[str, Any], *, file_list: str | None = None
) -> str:
    """'run: img2tfrecord convert IN OUT --like OUT --overwrite --encoding jpeg' (the CLI), or
    "call convert('IN', 'OUT', like='OUT', overwrite=True, encoding='jpeg')" (Python): the dataset
    in OUT made again from IN with every option and label it has, but `change` (convert()'s
    keywords; `labels` a file's path). A message's words, for `errors.wording` to render."""
    where = {"file_list": file_list} if file_list is not None else {}
    cmd = ["img2tfrecord", "convert", input_dir, output_dir, "--like", output_dir, "--overwrite"]
    cmd += cli_flags({**where, **change})
    args = ", ".join(f"{k}={v!r}" for k, v in {"like": output_dir, "overwrite": True, **where, **change}.items())
    return said(f"run: {shlex.join(cmd)}", f"call convert({input_dir!r}, {output_dir!r}, {args})")


def rebuild_advice(input_dir: str | None, output_dir: str) -> str:
    """The command that makes OUTPUT again from its input with every option and label it has (a
    catalog that no longer matches its shards is rebuilt so). `input_dir` None (compact knows no
    input): the placeholder INPUT, said to be the dataset's input folder."""
    advice = convert_like_advice(input_dir or "INPUT", output_dir, {})
    return advice + ("" if input_dir else " (INPUT: the folder the dataset was converted from)")
