"""How a dataset was made, typed: dataset.json's `options` as a frozen dataclass, read through the
options' table (format.options), so `update`, `compact` and `convert --like` read `made.seed`, not
`options.get("seed")` with its default and its pre-option meaning spelled again at each use.

Each field is a recorded row of the table (tests/test_option_spec.py checks the two agree: names,
and each field's value for a dataset.json that records nothing is the row's); its value is the
row's `recorded_value` (a dataset made before the option: what it did then), parsed by the row's
parser (`--resize`'s [W, H] is (W, H), as the plan takes it) and made its row's kind (int, bool). `json` keeps the
options as dataset.json holds them: a new version writes them back as they were, and a row no
field names yet (a test's own) is carried by it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from img2tfrecord.format.options import DEFAULT_CHECKSUM, recorded_names, recorded_value, spec
from img2tfrecord.format.schema import DEFAULT_MAX_PIXELS


@dataclass(frozen=True, kw_only=True)
class ConversionOptions:
    """dataset.json's `options`, typed (`from_json`)."""

    shards: dict[str, int] | None = None  # the shard counts it gave (the request: dataset.json's shard_request)
    split: dict[str, float] | None = None
    split_rule: str = "exact"
    split_group: str | None = None
    seed: int = 0
    labels: list[str] | None = None  # made with --labels: the classes it listed
    label_offset: int = 0
    encoding: str = "keep"
    quality: int = 95
    resize: int | tuple[int, int] | None = None
    resize_mode: str = "always"
    channels: str = "keep"
    max_pixels: int = DEFAULT_MAX_PIXELS
    validate: bool = True
    compression: str | None = None
    index: bool = False
    dedupe: str = "report"
    checksum: str = DEFAULT_CHECKSUM
    metadata: str | None = None
    annotations: str | None = None
    skip_empty: bool = False
    masks: bool = False
    json: Mapping[str, Any] = field(default_factory=dict)  # as dataset.json holds them

    @classmethod
    def from_json(cls, options: Mapping[str, Any] | None) -> ConversionOptions:
        """The options of a dataset.json (its `options`: None or {} for a dataset that records none)."""
        options = dict(options or {})
        known = {f.name for f in fields(cls)} & set(recorded_names())
        return cls(**{name: _typed(name, recorded_value(options, name)) for name in known}, json=options)


def _typed(name: str, value: Any) -> Any:
    """A recorded value as its field holds it: parsed by its row's parser, made its row's kind."""
    row = spec(name)
    if value is None:
        return None
    if isinstance(value, list) and row.check is not None and row.check.kind == "resize":
        value = tuple(value)  # [W, H]: JSON has no tuples
    if row.parse is not None:
        value = row.parse(value)
    if row.kind is bool:
        return bool(value)
    if row.kind is int:
        return int(value)
    return value
