"""The plan: which images, in which order, in which shard. Made once, from the walk and the options only, so the output bytes depend on nothing else.

A split's candidate list, in the order of each image's seeded path hash (conversion.plan.splits), is cut at
`round(n * i / k)` (as TFDS does), so every shard mixes classes.

A shard's images are a `TaskView` over the walk's `ImageTable` (columns, ~53 bytes an image; see
conversion.plan.table): the plan of a million images holds no Python object per image, and its
`Task`s are made when a shard is handed to a worker. Measured by `bench/plan.py` on 1 M files
(2 cores): the planning process peaks at ~75 bytes an image (~91 with mtimes and hash order) (target 150: 100 M images in < 15 GB),
where a `Task` per image took ~700. Cyclic garbage collection is paused while the plan is made
(`_gc_paused`): with an object per image, every collection rescanned all earlier ones (measured
in-process on 1 M files, one run each: 23.8 -> 18.9 s for the old plan); with columns there is
little left for it to scan (6.5-8.5 s either way, within this machine's noise), and nothing made here forms a cycle, so the pause
costs nothing and keeps a big --file-list (a few objects a row while parsing) from paying it."""

from __future__ import annotations

import contextlib
import gc
import math
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, NamedTuple

from img2tfrecord import fs
from img2tfrecord.conversion.plan.enrich import Enricher
from img2tfrecord.conversion.plan.enrichers import discover_input, records
from img2tfrecord.conversion.plan.enrichers import for_convert as enrichers_for
from img2tfrecord.conversion.plan.mask_colors import mask_settings
from img2tfrecord.conversion.plan.options import (
    CHANNEL_CHOICES,
    DEDUPE_MODES,
    ENCODINGS,
    TF_COMPRESSION,
    EncodeOptions,
    ShardSettings,
    check_resize_mode,
)
from img2tfrecord.conversion.plan.splits import SPLIT_RULES, SplitRule
from img2tfrecord.conversion.plan.table import Task, sizes_of
from img2tfrecord.errors import DataError, UsageError, option, plural
from img2tfrecord.format.conversion_options import ConversionOptions, field_names
from img2tfrecord.format.naming import shard_name
from img2tfrecord.format.options import parsed, spec, specs
from img2tfrecord.format.split_groups import group_pattern

TARGET_SHARD_BYTES = 200 * 1024 * 1024  # ceil(total / 200 MiB) shards -> each in (100, 200] MiB


def shard_bounds(n: int, k: int) -> list[tuple[int, int]]:
    """[start, end) of each of k shards over n records; sizes differ by at most one."""
    cuts = [round(n * i / k) for i in range(k + 1)]
    return list(zip(cuts[:-1], cuts[1:]))


# With --index, no shard may hold a single record: its index is one line, which the `tfrecord`
# package (PyPI, the usual PyTorch reader of TFRecords) cannot read (numpy.loadtxt gives a 1-D
# array; its issue #9). Two records per shard at least, so shards of one split never hold one.
MIN_INDEXED_RECORDS = 2


def min_shard_records(index: bool) -> int:
    return MIN_INDEXED_RECORDS if index else 1


@dataclass(frozen=True)
class ShardCounts:
    """`auto_shard_counts`' answer: shards per split, and what it had to change of the request."""

    counts: dict[str, int]
    warnings: list[str]


def auto_shard_counts(
    split_bytes: dict[str, int],
    split_items: dict[str, int],
    requested: int | dict[str, int] | None,
    min_records: int = 1,
) -> ShardCounts:
    """Shard count per split, plus warnings.

    * None: aim at 100-200 MiB per shard;
    * an int N: N shards in total, shared in proportion to split size (at least 1 each);
    * a dict: those counts; other splits get shards in proportion to their size.
    Never more shards than candidate images (TFDS' rule) or, with `min_records` 2 (--index),
    than half of them, so no shard holds a single record; and never fewer than one.
    """
    warnings: list[str] = []
    names = [s for s in split_bytes if split_items[s] > 0]
    counts: dict[str, int] = {}
    if isinstance(requested, dict):
        unknown = sorted(set(requested) - set(split_bytes))
        if unknown:
            raise UsageError(
                f"{option('shards')} names {'a split' if len(unknown) == 1 else 'splits'} that {'does' if len(unknown) == 1 else 'do'} not exist ({', '.join(unknown)}); the splits are {', '.join(split_bytes)}"
            )
        counts.update({s: requested[s] for s in names if s in requested})
        per = sum(split_bytes[s] for s in counts) / max(1, sum(counts.values())) if counts else TARGET_SHARD_BYTES
        for s in names:
            counts.setdefault(s, max(1, round(split_bytes[s] / per)))
    elif isinstance(requested, int):
        total = sum(split_bytes[s] for s in names) or 1
        exact = {s: requested * split_bytes[s] / total for s in names}
        counts = {s: max(1, int(exact[s])) for s in names}
        for s in sorted(names, key=lambda s: exact[s] - int(exact[s]), reverse=True):
            if sum(counts.values()) >= requested:
                break
            counts[s] += 1
    else:
        counts = {s: max(1, math.ceil(split_bytes[s] / TARGET_SHARD_BYTES)) for s in names}
    for s in names:
        most = max(1, split_items[s] // min_records)
        if counts[s] > most:
            why = (
                ""
                if min_records == 1
                else f" (with {option('index', True)}, a shard holds at least {min_records} records: a one-line index breaks common readers)"
            )
            warnings.append(f"{s}: {counts[s]} shards for {split_items[s]} images; using {most}{why}")
            counts[s] = most
        if min_records > 1 and split_items[s] < min_records:
            warnings.append(one_record_warning(s))
    return ShardCounts(counts=counts, warnings=warnings)


def one_record_warning(split: str) -> str:
    return (
        f"{split}: one record in all, so its shard's index is a single line, which the `tfrecord` package "
        "(PyTorch) cannot read (its issue #9); DALI and TensorFlow can"
    )


@dataclass(frozen=True, kw_only=True)
class PlannedShard:
    """One shard of the plan: which images, in which order. The unit of work of every engine."""

    split: str
    index: int
    count: int
    tasks: Sequence[Task]  # a TaskView over the plan's table (a tuple once sent to a worker)

    @property
    def name(self) -> str:
        return shard_name(self.split, self.index, self.count)


def make_plan(splits: Mapping[str, Sequence[Task]], counts: dict[str, int]) -> list[PlannedShard]:
    return [
        PlannedShard(split=s, index=i, count=counts[s], tasks=tasks[a:b])
        for s, tasks in splits.items()
        if tasks
        for i, (a, b) in enumerate(shard_bounds(len(tasks), counts[s]))
    ]


@dataclass(frozen=True)
class Drop:
    """--dedupe drop's decision on one later copy of an image: its content `digest` (hex) and the
    rel path of the copy that is `kept` (the first in plan order, or an earlier version's)."""

    digest: str
    kept: str


UNKNOWN_IMAGE_BYTES = 110_000  # assumed size of a file listed without one (remote walk): an ImageNet JPEG


@dataclass
class Plan:
    """A validated, planned conversion: which images go into which shard, how shards are written,
    and what the manifest will say of the input. Made once; every engine runs it as it is."""

    input_dir: str
    output_dir: str
    classes: list[str]
    label_offset: int
    split_names: list[str]
    shards: list[PlannedShard]
    settings: ShardSettings
    options: dict[str, Any]  # every option that shapes the bytes, as dataset.json records them
    ignored_files: int = 0  # non-image files
    excluded_files: int = 0  # images of classes not in --labels
    estimated_bytes: int = 0  # output size estimate (exact-ish for --encoding keep)
    warnings: list[str] = field(default_factory=list)
    skipped: list[dict[str, str]] = field(default_factory=list)  # what the walk could not read: path, split, reason
    shard_request: int | dict[str, int] | None = None  # --shards as asked (dataset.json's shard_request)
    notes: list[str] = field(default_factory=list)  # said once (junk folders ignored), not warnings
    # --dedupe drop decided before the run (update: across versions, conversion.versions.dedupe): the
    # rel path of each copy to leave out -> its `Drop`; None: the engine decides
    drop: dict[str, Drop] | None = None
    known_classes: list[str] | None = None  # `convert(like=...)`'s classes, which kept their labels
    metadata: dict[str, Any] | None = None  # dataset.json's `metadata` entry (conversion.plan.metadata), if any
    enrichers: Sequence[
        Enricher
    ] = ()  # the walk's enrichers (conversion.plan.enrich): finalize asks them for `metadata`

    @property
    def images(self) -> int:
        return sum(len(s.tasks) for s in self.shards)


@dataclass(frozen=True, kw_only=True)
class CheckedOptions:
    """The options that need parsing, parsed (`check_options`)."""

    encode: EncodeOptions
    shard_request: int | dict[str, int] | None
    fractions: dict[str, float] | None
    class_list: list[str] | None


def refuse_walk_skips(skipped: list[dict[str, str]], strict: bool, *, annotations: bool = False) -> None:
    """Under --strict, what the walk cannot read (convert's and update's) fails the run.
    `annotations`: the run reads an annotation file, whose unusable entries are skipped too."""
    if strict and skipped:
        first = skipped[0]
        what = (
            plural(len(skipped), "file, folder or annotation", "files, folders or annotations") + " cannot be used"
            if annotations
            else plural(len(skipped), "file or folder", "files or folders") + " cannot be read"
        )
        raise DataError(
            f"{option('strict', True)}: {what}, e.g. {first['path']}: {first['reason']}; nothing was written"
        )


def check_options(**options: Any) -> CheckedOptions:
    """Check and parse `plan_job`'s options without touching the input or the output (UsageError):
    convert calls it first, so a wrong command is told what is wrong, never to add --overwrite.

    `options` are `plan_job`'s; the ones not given take the defaults of the options' table
    (`plan_options`, format.options), so the list and its defaults exist once."""
    o = plan_options(options)
    encoding, channels, quality, max_pixels = o["encoding"], o["channels"], o["quality"], o["max_pixels"]
    compression, checksum, dedupe, index = o["compression"], o["checksum"], o["dedupe"], o["index"]
    if encoding not in ENCODINGS:
        raise UsageError(f"bad {option('encoding', encoding)}: choose one of {', '.join(ENCODINGS)}")
    if parsed("channels", channels) not in CHANNEL_CHOICES:
        raise UsageError(f"bad {option('channels', channels)}: choose keep, 1 or 3")
    if not 1 <= quality <= 100:
        raise UsageError(f"bad {option('quality', quality)}: choose 1..100")
    if max_pixels < 1:
        raise UsageError(f"bad {option('max_pixels', max_pixels)}: must be positive")
    if compression not in TF_COMPRESSION:
        raise UsageError(f"bad {option('compression', compression)}: choose gzip or zlib")
    if checksum not in fs.CHECKSUMS:
        raise UsageError(f"bad {option('checksum', checksum)}: choose {', '.join(fs.CHECKSUMS)}")
    if dedupe not in DEDUPE_MODES:
        raise UsageError(f"bad {option('dedupe', dedupe)}: choose report, drop or off")
    if index and compression:
        raise UsageError(
            f"{option('index', True)} describes uncompressed shards (DALI cannot read compressed TFRecords): "
            f"drop {option('compression')} or {option('index')}"
        )
    resize = parsed("resize", o["resize"])
    opts = EncodeOptions(
        encoding=encoding,
        quality=quality,
        resize=resize,
        resize_mode=check_resize_mode(o["resize_mode"], resize),
        channels=parsed("channels", channels),
        max_pixels=max_pixels,
        validate=o["validate"],
        mask_colors=o["mask_colors"],
        mask_ignore=o["mask_ignore"],
    )
    _check_masks(o)
    shard_request = parsed("shards", o["shards"])
    fractions, class_list = parsed("split", o["split"]), parsed("labels", o["labels"])
    if o["split_rule"] not in SPLIT_RULES:
        raise UsageError(f"bad {option('split_rule', o['split_rule'])}: choose {' or '.join(SPLIT_RULES)}")
    group_pattern(o["split_group"])
    if o["metadata"] is not None and o["file_list"]:
        raise UsageError(f"{option('metadata')} goes with a folder input, not {option('file_list')}: drop one")
    for other in ("metadata", "file_list"):
        if o["annotations"] is not None and o[other]:
            raise UsageError(f"{option('annotations')} goes with a folder of images, not {option(other)}: drop one")
    for flag in ("skip_empty", "masks"):
        if o[flag] and o["annotations"] is None:
            raise UsageError(f"{option(flag, True)} needs {option('annotations')}")
    if o["masks"]:
        from img2tfrecord.conversion.plan.annotations import require_pycocotools

        require_pycocotools()
    return CheckedOptions(encode=opts, shard_request=shard_request, fractions=fractions, class_list=class_list)


def _check_masks(o: Mapping[str, Any]) -> None:
    """`--masks-dir` and its options (the colour map read once here: conversion.plan.mask_colors); UsageError for a misuse."""
    if o["masks_dir"] is None:
        for name in ("mask_colors", "mask_ignore"):
            if o[name] != spec(name).default:
                raise UsageError(f"{option(name, o[name])} needs {option('masks_dir')}")
        return
    for other in ("annotations", "file_list", "metadata"):
        if o[other]:
            raise UsageError(
                f"{option('masks_dir')} pairs a folder's images with masks, not with {option(other)}: drop one"
            )
    mask_settings(o["mask_colors"], o["mask_ignore"])


# plan_job's keywords besides the options: what `convert(like=...)` adds (conversion.plan.like)
LIKE_KEYWORDS: dict[str, Any] = {"known_classes": None, "split_prior": None}


def plan_options(given: Mapping[str, Any]) -> dict[str, Any]:
    """`given` completed with the defaults of the options' table (format.options, its plan rows):
    the one list of the options (TypeError for a name that is not one, as a function's call with
    an unknown keyword would raise)."""
    defaults = {s.name: s.default for s in specs("plan")} | LIKE_KEYWORDS
    if unknown := sorted(set(given) - set(defaults)):
        raise TypeError(f"plan_job() got an unexpected keyword argument {unknown[0]!r}")
    return {**defaults, **given}


def plan_job(input_dir: str, output_dir: str, **options: Any) -> Plan:
    """Check the options, walk the input (or read `file_list`) and cut it into shards. Raises UsageError.

    `options`: the conversion options by name, those of format.options' table whose stage is
    "plan" (the ones not given take its defaults), and:
    `known_classes` (`convert(like=...)`, without `labels`): an existing dataset's classes, which
    keep their labels; the other classes found get the next ones, sorted (update's rule).
    `split_prior` (`convert(like=...)` with its split): the splits an existing dataset gives its
    images, which they keep, as in an update, so that the dataset made again is the same one."""
    o = plan_options(options)
    checked = check_options(**o)
    check_paths(input_dir, output_dir)
    with _gc_paused():
        return _plan(input_dir, output_dir, o, checked)


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """No cyclic garbage collection while the plan is made (see the module docstring)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _plan(input_dir: str, output_dir: str, o: Mapping[str, Any], checked: CheckedOptions) -> Plan:
    """The plan of `o` (`plan_options`: every option by name), `checked` its parsed values."""
    opts, shard_request, fractions, class_list = (
        checked.encode,
        checked.shard_request,
        checked.fractions,
        checked.class_list,
    )
    rule = SplitRule(o["split_rule"], o["split_group"], o["split_prior"])
    seed, label_offset, file_list, strict = o["seed"], o["label_offset"], o["file_list"], o["strict"]
    index, compression, dedupe, checksum = o["index"], o["compression"], o["dedupe"], o["checksum"]
    known_classes, metadata_file = o["known_classes"], o["metadata"]
    detect = Detect(o["annotations"], o["skip_empty"], o["masks"])
    masks_dir = o["masks_dir"]
    enrichers = enrichers_for(input_dir, o)
    found = discover_input(
        input_dir,
        enrichers,
        file_list=file_list,
        split=fractions,
        seed=seed,
        label_offset=label_offset,
        rule=rule,
        labels=class_list,
        known_classes=known_classes,
    )
    entry = records(enrichers)  # dataset.json's `metadata`
    if detect.annotations is not None:
        refuse_box_problems(entry or {}, strict)
    refuse_walk_skips(found.skipped, strict, annotations=detect.annotations is not None or masks_dir is not None)
    if strict and found.loose:
        raise DataError(f"{option('strict', True)}: {found.loose}; nothing was written")
    split_bytes = {s: estimate_task_bytes(items, opts) for s, items in found.splits.items()}
    cut = auto_shard_counts(
        split_bytes, {s: len(v) for s, v in found.splits.items()}, shard_request, min_shard_records(index)
    )
    counts, shard_warnings = cut.counts, cut.warnings
    empty = [f"split {s} has no images; no shards are written for it" for s, v in found.splits.items() if not v]
    made = ConversionOptions(
        **(asdict(opts) | _mask_files(input_dir, masks_dir, opts.mask_colors)),
        seed=seed,
        label_offset=label_offset,
        compression=compression,
        index=index,
        split=fractions,
        split_rule=rule.name,  # how --split's fractions pick an image's split (conversion.plan.splits)
        split_group=rule.group,
        shards=dict(counts),
        labels=class_list,
        dedupe=dedupe,
        checksum=checksum,
        **_input_files(input_dir, metadata_file, detect),
        json=_other_recorded(o),
    )
    options = made.to_json()  # dataset.json's `options` (and the resume fingerprint's), through the table
    settings = ShardSettings(
        encode=opts,
        compression=compression,
        index=index,
        checksum=checksum,
        fsync=o["fsync"],
        dedupe=dedupe,
        strict=strict,
    )
    return Plan(
        input_dir=input_dir,
        output_dir=output_dir,
        classes=found.classes,
        label_offset=label_offset,
        split_names=list(found.splits),
        shards=make_plan(found.splits, counts),
        settings=settings,
        options=options,
        ignored_files=found.ignored_files,
        excluded_files=found.excluded_files,
        estimated_bytes=sum(split_bytes.values()),
        shard_request=shard_request,
        warnings=found.warnings + shard_warnings + empty,
        skipped=found.skipped,
        notes=found.notes,
        known_classes=known_classes,
        metadata=entry,
        enrichers=enrichers,
    )


def _input_files(input_dir: str, metadata_file: str | None, detect: Detect) -> dict[str, Any]:
    """The options that name input files (only when given: their rows are sparse, so dataset.json is
    as before for every other dataset), recorded relative to INPUT when inside it, else absolute
    (fs.recorded_path)."""
    out: dict[str, Any] = {}
    if metadata_file is not None:
        out["metadata"] = fs.recorded_path(metadata_file, input_dir)
    if detect.annotations is not None:
        out |= {"annotations": fs.recorded_path(detect.annotations, input_dir), "skip_empty": detect.skip_empty}
        out["masks"] = bool(detect.masks)
    return out


def _other_recorded(o: Mapping[str, Any]) -> dict[str, Any]:
    """The recorded options (format.options) ConversionOptions has no field for yet, as given, when
    not at their default (so dataset.json stays as it was for a dataset made without them)."""
    typed = field_names()
    return {s.name: o[s.name] for s in specs("plan") if s.recorded and s.name not in typed and o[s.name] != s.default}


def _mask_files(input_dir: str, masks_dir: str | None, mask_colors: str | None) -> dict[str, Any]:
    """--masks-dir as recorded (relative to INPUT when inside it, fs.recorded_path) and a --mask-colors
    file by its absolute path, so update and convert --like find them again from any working folder."""
    if masks_dir is None:
        return {}
    out: dict[str, Any] = {"masks_dir": fs.recorded_path(masks_dir, input_dir)}
    if mask_colors not in (None, "voc", "cityscapes"):
        out["mask_colors"] = os.path.abspath(str(mask_colors))
    return out


class Detect(NamedTuple):
    """`--annotations`, `--skip-empty` and `--masks` (conversion.plan.detection)."""

    annotations: str | None
    skip_empty: bool
    masks: bool


def refuse_box_problems(entry: dict[str, Any], strict: bool) -> None:
    """Under --strict, a box clipped or dropped fails the run, as a skipped image does."""
    problems = entry["detection"]["box_problems"]
    if strict and problems:
        first = problems[0]
        more = f" (and {plural(len(problems) - 1, 'other box', 'other boxes')})" if len(problems) > 1 else ""
        raise DataError(
            f"{option('strict', True)}: box {first['box']} of {first['path']}: {first['reason']}{more}; nothing was written"
        )


def check_paths(input_dir: str, output_dir: str) -> None:
    """Refuse an output inside the input (or equal to it): the walk would read its own shards."""
    if not fs.is_remote(input_dir) and not fs.is_remote(output_dir):
        in_abs, out_abs = os.path.realpath(input_dir), os.path.realpath(output_dir)
        if out_abs == in_abs or out_abs.startswith(in_abs + os.sep):
            raise UsageError(
                f"output {output_dir} is inside input {input_dir}: the tool would read its own output; choose another folder"
            )


def estimate_task_bytes(items: Sequence[Task], opts: EncodeOptions) -> int:
    """Rough output size of a split: to choose a default shard count and check the free space."""
    return estimate_bytes(sizes_of(items), opts)


def estimate_bytes(sizes: Sequence[int], opts: EncodeOptions) -> int:
    """`estimate_task_bytes` from the source sizes alone (compact recounts a split's shards from its catalog)."""
    items = sizes
    source = sum(sizes)
    unknown = sizes.count(0)  # remote listings carry no sizes
    if unknown:
        known = len(items) - unknown
        source += unknown * (source // known if known else UNKNOWN_IMAGE_BYTES)
    if opts.resize is None:
        return source * (10 if opts.encoding == "raw" else 1)
    w, h = (opts.resize, opts.resize * 4 // 3) if isinstance(opts.resize, int) else opts.resize
    if opts.encoding == "raw":
        return len(items) * w * h * 3
    per_pixel = {"png": 1.5, "jpeg": 0.3, "keep": 0.3}[opts.encoding]
    return min(source, int(len(items) * w * h * per_pixel))
