"""Options that shape the output, their allowed values (the CLI's choices come from here) and their parsing."""

from __future__ import annotations

import re
from dataclasses import dataclass

from img2tfrecord.errors import UsageError, option
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


def parse_resize(value: str | int | tuple[int, int] | None) -> int | tuple[int, int] | None:
    """'256' -> 256 (shorter side); '224x224' -> (224, 224) (exact)."""
    if value is None or isinstance(value, (int, tuple)):
        ok = value is None or (isinstance(value, int) and value > 0) or (isinstance(value, tuple) and min(value) > 0)
        if not ok:
            raise UsageError(f"bad {option('resize', value)}: sizes must be positive")
        return value
    m = re.fullmatch(r"\s*(\d+)\s*(?:[xX]\s*(\d+)\s*)?", str(value))
    if not m or int(m.group(1)) == 0 or (m.group(2) is not None and int(m.group(2)) == 0):
        raise UsageError(f"bad {option('resize', value)}: use N (shorter side to N) or WxH, e.g. 256 or 224x224")
    return int(m.group(1)) if m.group(2) is None else (int(m.group(1)), int(m.group(2)))


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


def parse_shards(value: str | int | dict[str, int] | None) -> int | dict[str, int] | None:
    """'16' -> 16 in total; 'train=16,validation=2' -> per split."""
    if value is None or isinstance(value, (dict, int)):
        counts = value.values() if isinstance(value, dict) else [value] if value is not None else []
        if any(not isinstance(c, int) or c < 1 for c in counts):
            raise UsageError(f"bad {option('shards', value)}: shard counts must be whole numbers >= 1")
        return value
    text = str(value).strip()
    if text.isdigit():
        return parse_shards(int(text))
    out: dict[str, int] = {}
    for part in text.split(","):
        name, sep, n = part.strip().partition("=")
        if not sep or not n.strip().isdigit():
            raise UsageError(f"bad {option('shards', value)}: use N or e.g. train=16,validation=2")
        if name.strip() in out:
            raise UsageError(f"bad {option('shards', value)}: {name.strip()} given twice")
        out[name.strip()] = int(n)
    return parse_shards(out)


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
