"""Options that shape the output as the shard writers take them (`EncodeOptions`, `ShardSettings`);
their allowed values and parsers, which live with the options' table (format.options,
format.option_values), are re-exported here for the plan's modules."""

from __future__ import annotations

from dataclasses import dataclass

from img2tfrecord.errors import UsageError, option
from img2tfrecord.format.option_values import parse_resize as parse_resize  # re-exported: the parsers are the table's
from img2tfrecord.format.option_values import parse_shards as parse_shards
from img2tfrecord.format.options import (  # re-exported: the allowed values live with the options' table
    CHANNEL_CHOICES as CHANNEL_CHOICES,
)
from img2tfrecord.format.options import CHECKSUM_CHOICES as CHECKSUM_CHOICES
from img2tfrecord.format.options import COMPRESSION_CHOICES as COMPRESSION_CHOICES
from img2tfrecord.format.options import DEDUPE_MODES as DEDUPE_MODES
from img2tfrecord.format.options import DEFAULT_CHECKSUM as DEFAULT_CHECKSUM
from img2tfrecord.format.options import ENCODINGS as ENCODINGS
from img2tfrecord.format.options import ENGINES as ENGINES
from img2tfrecord.format.options import RESIZE_MODES as RESIZE_MODES
from img2tfrecord.format.options import SPLIT_RULES as SPLIT_RULES
from img2tfrecord.format.schema import DEFAULT_MAX_PIXELS


def check_resize_mode(mode: str, resize: int | tuple[int, int] | None) -> str:
    """`--resize-mode`: always (every image to the size; the default, as before the option) or
    shrink (img2dataset's resize_only_if_bigger: only images whose shorter side is over N; a WxH
    size is exact, so it takes no mode but always)."""
    if mode not in RESIZE_MODES:
        raise UsageError(f"bad {option('resize_mode', mode)}: choose {' or '.join(RESIZE_MODES)}")
    if mode == "shrink" and resize is None:
        raise UsageError(f"{option('resize_mode', mode)} says how to {option('resize')}: add {option('resize')} N")
    if mode == "shrink" and isinstance(resize, tuple):
        raise UsageError(
            f"{option('resize_mode', mode)} keeps the aspect ratio: use {option('resize')} N (shorter side), "
            f"not an exact WxH size"
        )
    return mode


@dataclass(frozen=True)
class EncodeOptions:
    """Everything that shapes the bytes of a record (all of it goes into dataset.json)."""

    encoding: str = "keep"
    quality: int = 95
    resize: tuple[int, int] | int | None = None  # N: shorter side to N; (W, H): exact size
    resize_mode: str = "always"  # "shrink": only images whose shorter side is over N (`check_resize_mode`)
    channels: str = "keep"
    max_pixels: int = DEFAULT_MAX_PIXELS
    validate: bool = True
    mask_colors: str | None = None  # --masks-dir's RGB masks: a colour map (conversion.plan.mask_colors)
    mask_ignore: int = 255

    @property
    def reencodes(self) -> bool:
        return self.encoding != "keep" or self.resize is not None or self.channels != "keep"


TF_COMPRESSION = {None: "", "gzip": "GZIP", "zlib": "ZLIB"}  # --compression -> TensorFlow's compression_type


@dataclass(frozen=True)
class ShardSettings:
    """How every shard is written, whichever engine or process writes it: built once from the
    options and handed whole to the engine and to `write.write_shard`, so no engine can miss one
    (the Beam engine once ignored --no-fsync this way)."""

    encode: EncodeOptions = EncodeOptions()
    compression: str | None = None  # None, "gzip" or "zlib"
    index: bool = False  # a DALI/tfrecord-package .idx beside each shard
    checksum: str = DEFAULT_CHECKSUM  # of each finished shard file, recorded in dataset.json
    fsync: bool = True  # shards durable before publishing (does not change the bytes)
    dedupe: str = "report"  # "report" | "drop" | "off": off keeps no per-record digests
    strict: bool = False  # any skipped image fails the run

    @property
    def digests(self) -> bool:
        """Whether shards keep a content digest per record (for --dedupe)."""
        return self.dedupe != "off"
