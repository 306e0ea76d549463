"""How a dataset was made, typed: dataset.json's `options` as a frozen dataclass, read through the
options' table (format.options), so `update`, `compact` and `convert --like` read `made.seed`, not
`options.get("seed")` with its default and its pre-option meaning spelled again at each use.

Each field is a recorded row of the table (tests/test_option_spec.py checks the two agree: names,
and each field's value for a dataset.json that records nothing is the row's); its value is the
row's `recorded_value` (a dataset made before the option: what it did then), parsed by the row's
parser (`--resize`'s [W, H] is (W, H), as the plan takes it) and made its row's kind (int, bool). `json` keeps the
options as dataset.json holds them: a new version writes them back as they were, and a row no
field names yet (a test's own) is carried by it. `to_json` is the way back: the plan records the
options it converted with through it (conversion.plan.job), so dataset.json's `options` are the
fields in their order, each row's rule (`sparse`, `recorded_with`) deciding when it is left out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from img2tfrecord.format.options import DEFAULT_CHECKSUM, json_form, recorded_names, recorded_value, spec
from img2tfrecord.format.schema import DEFAULT_MAX_PIXELS


@dataclass(frozen=True, kw_only=True)
class ConversionOptions:
    """dataset.json's `options`, typed (`from_json`)."""

    # in the order dataset.json has held them since its first version (`to_json`)
    encoding: str = "keep"
    quality: int = 95
    resize: int | tuple[int, int] | None = None
    resize_mode: str = "always"
    channels: str = "keep"
    max_pixels: int = DEFAULT_MAX_PIXELS
    validate: bool = True
    seed: int = 0
    label_offset: int = 0
    compression: str | None = None
    index: bool = False
    split: dict[str, float] | None = None
    split_rule: str = "exact"
    split_group: str | None = None
    shards: dict[str, int] | None = None  # the shard counts it gave (the request: dataset.json's shard_request)
    labels: list[str] | None = None  # made with --labels: the classes it listed
    dedupe: str = "report"
    checksum: str = DEFAULT_CHECKSUM
    metadata: str | None = None
    annotations: str | None = None
    skip_empty: bool = False
    masks: bool = False
    masks_dir: str | None = None  # semantic segmentation's masks folder (conversion.plan.seg_pairs)
    mask_colors: str | None = None  # an RGB mask's colour map: a file (absolute) or a built-in table's name
    mask_ignore: int = 255
    json: Mapping[str, Any] = field(default_factory=dict)  # as dataset.json holds them; rows with no field

    @classmethod
    def from_json(cls, options: Mapping[str, Any] | None) -> ConversionOptions:
        """The options of a dataset.json (its `options`: None or {} for a dataset that records none)."""
        options = dict(options or {})
        known = {f.name for f in fields(cls)} & set(recorded_names())
        return cls(**{name: _typed(name, recorded_value(options, name)) for name in known}, json=options)

    def to_json(self) -> dict[str, Any]:
        """dataset.json's `options` of these values, through the table: the fields in their order,
        each as JSON holds it (`json_form`), a `sparse` row's only when not at its default and a row
        `recorded_with` another only beside it; then the rows of `json` no field names (as given)."""
        out: dict[str, Any] = {}
        for name in field_names():
            row, value = spec(name), getattr(self, name)
            if (row.sparse and value == row.default) or (
                row.recorded_with and getattr(self, row.recorded_with) is None
            ):
                continue
            out[name] = json_form(value)
        return out | {k: v for k, v in self.json.items() if k not in out and k not in field_names()}


def field_names() -> tuple[str, ...]:
    """The options ConversionOptions types (every recorded row of the table, which a test checks)."""
    return tuple(f.name for f in fields(ConversionOptions) if f.name != "json")


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
