"""The parsers of the conversion options' given values (the options' table names each row's): a
command line's text or a Python caller's value into the value the plan uses, checked (UsageError,
worded for whoever asked: `errors.option`). `update` compares a given value with dataset.json's
through them too (conversion.versions.options), so `--resize 224x224` and `resize=(224, 224)` are
one value."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from img2tfrecord.errors import UsageError, option
from img2tfrecord.format.class_names import read_labels_file
from img2tfrecord.format.naming import SPLIT_DIR_NAMES, split_name_too_long


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


def parse_split_spec(spec: str) -> dict[str, float]:
    """'train=0.8,validation=0.2' -> {'train': 0.8, 'validation': 0.2}; fractions must sum to 1."""
    fractions: dict[str, float] = {}
    for part in spec.split(","):
        name, sep, value = part.strip().partition("=")
        name = SPLIT_DIR_NAMES.get(name.strip().lower(), name.strip())
        try:
            frac = float(value)
        except ValueError:
            frac = -1.0
        if not sep or not name or not name.replace("_", "").isalnum() or not 0 <= frac <= 1:
            raise UsageError(f"bad {option('split', spec)}: expected e.g. train=0.8,validation=0.2")
        if long := split_name_too_long(name):
            raise UsageError(f"bad {option('split', spec[:60] + '...' if len(spec) > 60 else spec)}: {long}")
        if name in fractions:
            raise UsageError(f"bad {option('split', spec)}: {name} given twice")
        fractions[name] = frac
    if abs(sum(fractions.values()) - 1.0) > 1e-6:
        raise UsageError(f"bad {option('split', spec)}: the fractions add up to {sum(fractions.values()):g}, not 1")
    return fractions


def parse_split(value: str | Mapping[str, float] | None) -> dict[str, float] | None:
    """--split: 'train=0.8,validation=0.2' parsed (`parse_split_spec`); a mapping or None as given."""
    if isinstance(value, str):
        return parse_split_spec(value)
    return dict(value) if value is not None else None


def parse_labels(value: str | list[str] | None) -> list[str] | None:
    """--labels: a file's path read into its class names (`read_labels_file`); a list or None as given."""
    return read_labels_file(value) if isinstance(value, str) else value


def parse_channels(value: Any) -> str:
    """--channels: "keep", "1" or "3" as text (a Python caller may give 1 or 3)."""
    return str(value)


def same_shards(now: Any, then: Any, asked: Any) -> bool:
    """update's --shards is the dataset's: the request as it was typed (`asked`, dataset.json's
    shard_request), the counts it gave, or (a total) the same number of shards in all."""
    return now in (asked, then) or (isinstance(now, int) and isinstance(then, dict) and sum(then.values()) == now)


def same_split(now: Any, then: Any, asked: Any) -> bool:
    """update's --split is the dataset's: the same fractions in the same order (the order decides
    which slice of the hash each split gets)."""
    if isinstance(now, dict) and isinstance(then, dict):
        return list(now.items()) == list(then.items())
    return bool(now == then)
