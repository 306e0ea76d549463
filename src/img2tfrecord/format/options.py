"""The conversion options: one table (`OPTIONS`) says, for each, its Python type and default, its
command-line flag and help, what dataset.json records of it and whether `update` compares it.

Every list of options is derived from it: the `convert` and `update` commands' flags (cli), the
keywords `convert()` takes and the API reference's table (mkdocs_hooks.py), the checks of
dataset.json's `options` (format.manifest), `update`'s refusal of another value
(conversion.versions.options) and `convert --like` (conversion.plan.like); update, compact and
--like read dataset.json's values through `recorded_value`. Adding an option is one row here and
the code that uses its value (tests/test_option_spec.py adds one and follows it everywhere).
A row names its value's parser (`parse`: `--resize 224x224`, `--split train=0.8,...`, a --labels
file read; format.option_values) and, when "the same value" is not plain equality, how `update`
compares it with dataset.json's (`same`).

It lives in `format` because dataset.json's `options` are part of the format (readers check them
without importing the converter); the rows are plain data and plain functions, so nothing here
imports click. Checks across options (--index with --compression) stay with the plan
(conversion.plan.job.check_options).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from img2tfrecord.format import option_values as parsers
from img2tfrecord.format.schema import DEFAULT_MAX_PIXELS
from img2tfrecord.fs import CHECKSUMS

# The allowed values of the options (the CLI's click.Choice lists and dataset.json's checks are these).
ENCODINGS = ("keep", "jpeg", "png", "raw")
DEDUPE_MODES = ("report", "drop", "off")
ENGINES = ("local", "beam")
SPLIT_RULES = ("exact", "hash")  # --split-rule: exact shares per class, or the path's hash alone
COMPRESSION_CHOICES = ("gzip", "zlib")
CHECKSUM_CHOICES = CHECKSUMS
RESIZE_MODES = ("always", "shrink")
CHANNEL_CHOICES = ("keep", "1", "3")
DEFAULT_CHECKSUM = "xxh3_128"  # every record also carries TFRecord's own CRC-32C
INT64 = 1 << 63  # a recorded seed or label offset is a whole number within int64


@dataclass(frozen=True)
class Check:
    """How dataset.json's value of an option is checked (format.manifest): `kind` is one of
    one_of (`values`), whole (`lo`..`hi`; `nullable`: null too), resize, fractions, shard_counts,
    names (a list of class names, or null)."""

    kind: str
    values: tuple[Any, ...] = ()
    lo: int = 0
    hi: int | None = None
    nullable: bool = False


@dataclass(frozen=True)
class OptionSpec:
    """One option of `convert`: what the library, the CLI and dataset.json know of it.

    `stage`: "plan" for an option of the conversion (`plan_job`'s keyword), "run" for one of the
    run alone (`convert()`'s own keyword: where to write, how many workers), never recorded.
    `recorded`: dataset.json's `options` hold it (its checks: `check`); `update`: the position of
    its flag in `update --help`, 0 when update does not take it (update compares a given value
    with the recorded one and refuses another: it shapes the records). `elsewhere`: the key of
    dataset.json that `convert --like` takes it back from, when `options` holds not the request
    but what it gave (shards: the counts; labels: the classes). `path`: its value names an input
    file (a pathlib.Path is taken; recorded relative to INPUT when `recorded`).
    `parse`: a given value (the command line's text or a Python caller's value) to the plan's
    (`parsed`); none: taken as given. `same(now, then, asked)`: whether `update`'s given value
    (parsed, in dataset.json's form) is the recorded one `then` (`asked`: dataset.json's
    `elsewhere` value, the request as typed); none: equal (a flag's null is off). `unset`: how a
    dataset made without it says so ("no --labels", with this after it), else "--x not given".
    `draws_splits`: given beside `convert --like`, the images' splits are drawn anew.
    `sparse`, `recorded_with`: when dataset.json leaves a recorded option out (format.conversion_options)."""

    name: str
    annotation: str  # its type in convert()'s documented signature
    default: Any = None
    help: str = ""
    stage: str = "plan"
    metavar: str | None = None
    choices: tuple[str, ...] | None = None
    int_range: tuple[int | None, int | None] | None = None  # click.IntRange(lo, hi)
    kind: type = str  # str, int or bool (bool: a flag)
    negatable: bool = False  # a bool flag with its --no- form: --validate/--no-validate
    show_default: bool = False
    file: bool = False  # the CLI takes an existing file's path (click.Path(dir_okay=False))
    recorded: bool = False
    check: Check | None = None
    update: int = 0
    elsewhere: str | None = None
    path: bool = False
    absent: Any = ...  # what a dataset.json that records no value (null, or no key) means; ...: the default
    parse: Callable[[Any], Any] | None = None
    same: Callable[[Any, Any, Any], bool] | None = None
    unset: str | None = None
    draws_splits: bool = False
    sparse: bool = False  # dataset.json holds it only when not at its default (as before the option)
    recorded_with: str | None = None  # dataset.json holds it only beside this option (skip_empty: annotations)

    @property
    def flag(self) -> str:
        """Its command-line flag: `--split-rule`."""
        return "--" + self.name.replace("_", "-")


def _one_of(*values: Any) -> Check:
    return Check("one_of", values)


OPTIONS: tuple[OptionSpec, ...] = (
    OptionSpec(
        "like",
        "str | os.PathLike[str] | None",
        stage="run",
        metavar="DATASET",
        help="Take every option DATASET was converted with (its dataset.json: split, seed, shards as asked, encoding, ...) and its labels, numbers included (classes INPUT_DIR has beyond them get the next ones); each image DATASET holds keeps its split unless --split, --seed, --split-rule or --split-group is given. Options given too replace only what they name. DATASET may be OUTPUT_DIR itself (with --overwrite).",
    ),
    OptionSpec(
        "shards",
        "str | int | dict[str, int] | None",
        metavar="N|SPLIT=N,...",
        help="Shards in total, or per split (e.g. train=16,validation=2). Default: ~100-200 MB per shard.",
        recorded=True,
        check=Check("shard_counts"),
        update=1,
        elsewhere="shard_request",
        parse=parsers.parse_shards,
        same=parsers.same_shards,
        unset=" (about 100-200 MB a shard)",
    ),
    OptionSpec(
        "split",
        "str | dict[str, float] | None",
        metavar="NAME=FRAC,...",
        help="Split every class, e.g. train=0.8,validation=0.2: each split of each class of n images gets floor or ceil of its fraction times n, the images chosen by a seeded hash of their paths; update never moves an image (new ones go where their class is furthest below its share). Not with an INPUT_DIR already split into train/validation/test folders, nor a --file-list with a split column (those are used as they are).",
        recorded=True,
        check=Check("fractions"),
        update=2,
        parse=parsers.parse_split,
        same=parsers.same_split,
        draws_splits=True,
    ),
    OptionSpec(
        "split_rule",
        "str",
        "exact",
        choices=SPLIT_RULES,
        show_default=True,
        help="How --split picks an image's split: exact (shares per class exact to one image) or hash (a pure function of the path's hash: shares follow the fractions only on average; what datasets made before the exact rule use). Recorded in dataset.json; update keeps it.",
        recorded=True,
        check=_one_of(None, *SPLIT_RULES),
        absent="hash",  # made before the exact rule
        draws_splits=True,
    ),
    OptionSpec(
        "split_group",
        "str | None",
        metavar="PATTERN",
        help="Keep images of one group in one split: a regular expression searched in each path below INPUT_DIR; its first group (or the whole match) names the group, e.g. 'patient_(\\d+)'. Paths it does not match are groups of one. Run in linear time by RE2 (no backreferences or lookaround). Recorded in dataset.json.",
        recorded=True,
        draws_splits=True,
    ),
    OptionSpec(
        "seed",
        "int",
        0,
        kind=int,
        show_default=True,
        help="Seed of the shuffle and of --split.",
        recorded=True,
        check=Check("whole", lo=-INT64),
        update=3,
        draws_splits=True,
    ),
    OptionSpec(
        "labels",
        "str | list[str] | None",
        file=True,
        help="File with one class name per line: fixes label order and the subset of classes.",
        recorded=True,
        check=Check("names", nullable=True),
        update=4,
        elsewhere="classes",
        path=True,
        parse=parsers.parse_labels,
        unset="",
    ),
    OptionSpec(
        "label_offset",
        "int",
        0,
        kind=int,
        show_default=True,
        help="Added to every label (Inception's tooling uses 1: 0 = background).",
        recorded=True,
        check=Check("whole", lo=-INT64),
        update=5,
    ),
    OptionSpec(
        "encoding",
        "str",
        "keep",
        choices=ENCODINGS,
        show_default=True,
        help="keep: store the file bytes (transcoding only what TF cannot decode); jpeg/png: re-encode; raw: decoded uint8 pixels.",
        recorded=True,
        check=_one_of(*ENCODINGS),
        update=6,
    ),
    OptionSpec(
        "quality",
        "int",
        95,
        kind=int,
        int_range=(1, 100),
        show_default=True,
        help="JPEG quality of re-encoded JPEGs: --encoding jpeg, and keep's JPEGs under --resize/--channels.",
        recorded=True,
        check=Check("whole", lo=1, hi=100),
        update=7,
    ),
    OptionSpec(
        "resize",
        "str | int | tuple[int, int] | None",
        metavar="N|WxH",
        help="Resize: shorter side to N (aspect kept), or exactly WxH. Implies re-encoding.",
        recorded=True,
        check=Check("resize"),
        update=8,
        parse=parsers.parse_resize,
    ),
    OptionSpec(
        "resize_mode",
        "str",
        "always",
        choices=RESIZE_MODES,
        show_default=True,
        help="always: every image to the --resize size, small ones enlarged; shrink: only images whose shorter side is over N (--resize N), the others keep their size.",
        recorded=True,
        update=9,
        absent="always",  # made before the option: every image was resized
        sparse=True,
    ),
    OptionSpec(
        "channels",
        "str",
        "keep",
        choices=CHANNEL_CHOICES,
        show_default=True,
        help="Convert every image to 1 (grayscale) or 3 (RGB) channels.",
        recorded=True,
        check=_one_of(None, "keep", 1, 2, 3, 4, "1", "2", "3", "4"),
        update=10,
        parse=parsers.parse_channels,
    ),
    OptionSpec(
        "max_pixels",
        "int",
        DEFAULT_MAX_PIXELS,
        kind=int,
        int_range=(1, None),
        show_default=True,
        help="Skip images with more pixels than this, before decoding them.",
        recorded=True,
        check=Check("whole", lo=1, nullable=True),
        update=11,
    ),
    OptionSpec(
        "validate",
        "bool",
        True,
        kind=bool,
        negatable=True,
        show_default=True,
        help="Fully decode every image so corrupt files are skipped, not written.",
        recorded=True,
        check=_one_of(True, False),
        update=12,
    ),
    OptionSpec("strict", "bool", False, kind=bool, help="Fail (exit 1, publish nothing) if any image is unusable."),
    OptionSpec(
        "compression",
        "str | None",
        choices=COMPRESSION_CHOICES,
        help="Compress the shards (JPEG/PNG payloads barely shrink).",
        recorded=True,
        check=_one_of(None, "none", *COMPRESSION_CHOICES),
        update=13,
    ),
    OptionSpec(
        "index",
        "bool",
        False,
        kind=bool,
        negatable=True,
        help="Write a DALI index ({shard}.idx) next to each shard (uncompressed shards only: not with --compression).",
        recorded=True,
        check=_one_of(None, True, False),
        update=14,
    ),
    OptionSpec(
        "dedupe",
        "str",
        "report",
        choices=DEDUPE_MODES,
        show_default=True,
        help="Byte-identical images (within a class, across classes = conflicting labels, across splits = leakage): report them, drop all but the first copy, or don't look (saves 32 bytes of memory per image during the run, ~100 at its end).",
        recorded=True,
        check=_one_of(*DEDUPE_MODES),
        update=16,
    ),
    OptionSpec(
        "checksum",
        "str",
        DEFAULT_CHECKSUM,
        choices=CHECKSUM_CHOICES,
        show_default=True,
        help="Checksum of each shard file in dataset.json, checked by inspect --verify and --resume (every record also has its own CRC). xxh3_128 (xxhsum -H2) costs ~10 us per 100 KB image, sha256 (sha256sum) ~55 us.",
        recorded=True,
        check=_one_of(*CHECKSUMS),
        update=17,
    ),
    OptionSpec(
        "fsync",
        "bool",
        True,
        kind=bool,
        negatable=True,
        show_default=True,
        help="Flush every shard to disk before publishing, so a power cut cannot leave a published dataset with lost data. --no-fsync leaves that to the OS: faster when the disk writes slower than the conversion runs (the output bytes are the same).",
    ),
    OptionSpec(
        "overwrite",
        "bool",
        False,
        kind=bool,
        stage="run",
        help="Replace what a non-empty OUTPUT_DIR holds: a dataset, or the finished shards of an unfinished run.",
    ),
    OptionSpec(
        "resume",
        "bool",
        False,
        kind=bool,
        stage="run",
        help="Continue an interrupted run of the same command: finished shards (checked by their checksum, or with --checksum none by their record CRCs) are reused; the result is identical. Without --resume, a run over an unfinished one's finished shards needs --overwrite.",
    ),
    OptionSpec(
        "workers",
        "int | None",
        kind=int,
        int_range=(1, None),
        stage="run",
        help="Worker processes (each encodes and writes whole shards). Default: all CPUs, fewer for small jobs. Output is identical for any value.",
    ),
    OptionSpec(
        "file_list",
        "str | None",
        metavar="FILE",
        help="CSV/TSV of path,label_name (or path: CLASS/.../image below INPUT_DIR), or path,label_name,split to give each image its split, to convert instead of walking INPUT_DIR; relative paths are joined to INPUT_DIR.",
        path=True,
    ),
    OptionSpec(
        "metadata",
        "str | None",
        metavar="FILE",
        help="metadata.jsonl or metadata.csv (Hugging Face imagefolder's): one row per image, file_name its path below INPUT_DIR, every other column a feature image/<column>; a labels column of class-name lists makes multi-label records. Default: INPUT_DIR/metadata.jsonl or metadata.csv, when there.",
        recorded=True,
        path=True,
        sparse=True,
    ),
    OptionSpec(
        "annotations",
        "str | None",
        metavar="FILE|DIR",
        help="Object detection boxes for the images anywhere below INPUT_DIR: a COCO instances JSON, a folder of Pascal VOC XML, or a folder of YOLO txt with its classes file (classes.txt, obj.names or data.yaml), told apart by content. Writes the TensorFlow Object Detection API's keys and label_map.pbtxt; boxes follow the pixels as stored in each file.",
        recorded=True,
        path=True,
        sparse=True,
    ),
    OptionSpec(
        "skip_empty",
        "bool",
        False,
        kind=bool,
        help="With --annotations: leave out the images that have no box (default: kept, with none).",
        recorded=True,
        recorded_with="annotations",
    ),
    OptionSpec(
        "masks",
        "bool",
        False,
        kind=bool,
        negatable=True,
        help="With COCO --annotations: each object's instance mask (its segmentation: polygons or RLE, rasterized by pycocotools) as a one-channel PNG of 0 and 1 in image/object/mask, turned and resized with the image. Needs: pip install 'img2tfrecord[masks]'.",
        recorded=True,
        update=15,
        sparse=True,
    ),
    OptionSpec(
        "masks_dir",
        "str | None",
        metavar="DIR",
        help="Semantic segmentation: pair each image below INPUT_DIR with the PNG mask of the same path and stem below DIR (Pascal VOC's SegmentationClass, ADE20K's annotations; Cityscapes' *_gtFine_labelIds.png for *_leftImg8bit images) and write it as image/segmentation/class/encoded, a PNG of the class ids (grey values and palette indices are the ids; RGB needs --mask-colors). An image without a mask, a mask without an image and a mask of another size are skips.",
        recorded=True,
        sparse=True,
        path=True,
    ),
    OptionSpec(
        "mask_colors",
        "str | None",
        metavar="FILE|voc|cityscapes",
        help="With --masks-dir: the class of each colour of RGB masks: a file of r,g,b,name lines (ids from 0 in line order; a line named ignore maps to --mask-ignore), or the voc or cityscapes table. A pixel of a colour not listed skips its image.",
        recorded=True,
        sparse=True,
    ),
    OptionSpec(
        "mask_ignore",
        "int",
        255,
        kind=int,
        int_range=(0, 65535),
        show_default=True,
        help="With --masks-dir: the mask value that marks pixels of no class (VOC's border), recorded in dataset.json.",
        recorded=True,
        sparse=True,
        check=Check("whole", lo=0, hi=65535),
    ),
    OptionSpec(
        "engine",
        "str",
        "local",
        choices=ENGINES,
        show_default=True,
        stage="run",
        help="local: processes on this machine; beam: Apache Beam (DirectRunner, Dataflow, Flink, Spark), same bytes. Needs: pip install 'img2tfrecord[beam]'.",
    ),
    OptionSpec(
        "beam_options",
        "str | list[str] | None",
        metavar="'--runner=... ...'",
        stage="run",
        help="Beam pipeline options, as one quoted string. Default: --runner=DirectRunner --direct_running_mode=multi_processing --direct_num_workers=<--workers>.",
    ),
    OptionSpec(
        "dry_run",
        "bool",
        False,
        kind=bool,
        stage="run",
        help="Print the plan (classes, counts per split and shard) on stdout, and what the real run would refuse; write nothing.",
    ),
)


def specs(stage: str | None = None) -> Iterator[OptionSpec]:
    """The rows of `OPTIONS` (of one stage), in the order of `convert --help`."""
    return (s for s in OPTIONS if stage is None or s.stage == stage)


def spec(name: str) -> OptionSpec:
    """The row of the option `name` (KeyError for no such option)."""
    for s in OPTIONS:
        if s.name == name:
            return s
    raise KeyError(name)


def recorded_names() -> tuple[str, ...]:
    """The options dataset.json's `options` may hold."""
    return tuple(s.name for s in OPTIONS if s.recorded)


def update_names() -> tuple[str, ...]:
    """The options `update` takes to compare with dataset.json's, in the order of `update --help`."""
    return tuple(s.name for s in sorted((s for s in OPTIONS if s.update), key=lambda s: s.update))


def recorded_value(options: Mapping[str, Any], name: str) -> Any:
    """The option `name` as dataset.json's `options` record it: its value, or what a dataset.json
    without one means (a dataset made before the option: its row's `absent`, else its default)."""
    value = options.get(name)
    if value is not None:
        return value
    row = spec(name)
    return row.default if row.absent is ... else row.absent


def path_names() -> tuple[str, ...]:
    """The options whose value names an input file (a pathlib.Path is taken as its str)."""
    return tuple(s.name for s in OPTIONS if s.path)


def parsed(name: str, value: Any) -> Any:
    """The option `name`'s given value as the plan takes it: its row's parser's (UsageError for a
    bad one), or the value as given."""
    row = spec(name)
    return row.parse(value) if row.parse is not None else value


def json_form(value: Any) -> Any:
    """A parsed value as dataset.json holds it (no tuples: `--resize 224x224` is [224, 224])."""
    return list(value) if isinstance(value, tuple) else value
