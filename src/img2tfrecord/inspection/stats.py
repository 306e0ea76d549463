"""What the report says about a set of records, in memory independent of their number."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from img2tfrecord.inspection.records import RecordInfo


def _median(c: Counter) -> int | None:
    """Lower median of a value -> count histogram."""
    n = sum(c.values())
    if not n:
        return None
    target, acc = (n - 1) // 2, 0
    for v in sorted(c):
        acc += c[v]
        if acc > target:
            return v
    return None  # pragma: no cover


def _range(c: Counter) -> dict[str, int | None] | None:
    return {"min": min(c), "median": _median(c), "max": max(c)} if c else None


@dataclass
class _FeatureStat:
    types: set[str] = field(default_factory=set)
    min_values: int | None = None
    max_values: int | None = None
    records: int = 0

    def add(self, kind: str | None, n: int) -> None:
        self.types.add(kind or "empty")
        self.min_values = n if self.min_values is None else min(self.min_values, n)
        self.max_values = n if self.max_values is None else max(self.max_values, n)
        self.records += 1

    def merge(self, o: _FeatureStat) -> None:
        self.types |= o.types
        for attr, fn in (("min_values", min), ("max_values", max)):
            a, b = getattr(self, attr), getattr(o, attr)
            setattr(self, attr, b if a is None else a if b is None else fn(a, b))
        self.records += o.records


class Stats:
    """Everything the report says about a set of records, in memory independent of their number."""

    def __init__(self, keep_first: int) -> None:
        self.keep_first = keep_first
        self.records = 0
        self.bytes = 0
        self.compressions: set[str] = set()
        self.examples = 0
        self.non_examples = 0
        self.features: dict[str, _FeatureStat] = {}
        self.labels: Counter[int] = Counter()
        self.label_names: dict[int, str | None] = {}
        self.unlabelled = 0
        self.formats: Counter[str] = Counter()
        self.heights: Counter[int] = Counter()
        self.widths: Counter[int] = Counter()
        self.channels: Counter[int] = Counter()
        self.first: list[dict[str, Any]] = []

    def add(self, info: RecordInfo, label_name: str | None) -> None:
        self.examples += 1
        for key, (kind, n) in info.features.items():
            self.features.setdefault(key, _FeatureStat()).add(kind, n)
        if info.label is None:
            self.unlabelled += 1
        else:
            self.labels[info.label] += 1
            if self.label_names.get(info.label) is None:
                self.label_names[info.label] = label_name
        if info.image is not None:
            fmt = info.format or "unknown"
            if fmt == "PNG" and info.image[24:25] == b"\x10" and info.image[12:16] == b"IHDR":  # IHDR bit depth 16
                fmt = "PNG 16-bit"  # decode with dtype=tf.uint16 to keep the bits
            self.formats[fmt] += 1
        if info.height is not None:
            self.heights[info.height] += 1
        if info.width is not None:
            self.widths[info.width] += 1
        if info.channels is not None:
            self.channels[info.channels] += 1
        if len(self.first) < self.keep_first:
            self.first.append(info.row())

    def merge(self, o: Stats, path: str | None = None) -> None:
        self.records += o.records
        self.bytes += o.bytes
        self.compressions |= o.compressions
        self.examples += o.examples
        self.non_examples += o.non_examples
        for key, fs in o.features.items():
            self.features.setdefault(key, _FeatureStat()).merge(fs)
        self.labels.update(o.labels)
        for label, name in o.label_names.items():
            if self.label_names.get(label) is None:
                self.label_names[label] = name
        self.unlabelled += o.unlabelled
        self.formats.update(o.formats)
        self.heights.update(o.heights)
        self.widths.update(o.widths)
        self.channels.update(o.channels)
        for row in o.first[: max(0, self.keep_first - len(self.first))]:
            self.first.append({"file": path, **row} if path else row)

    def to_dict(self) -> dict[str, Any]:
        comp = sorted(self.compressions)
        return {
            "records": self.records,
            "bytes": self.bytes,
            "compression": comp[0] if len(comp) == 1 else ("mixed" if comp else None),
            "examples": self.examples,
            "non_examples": self.non_examples,
            "features": {
                k: {
                    "types": sorted(f.types),
                    "min_values": f.min_values,
                    "max_values": f.max_values,
                    "records": f.records,
                }
                for k, f in sorted(self.features.items())
            },
            "labels": [
                {"label": lab, "name": self.label_names.get(lab), "count": n} for lab, n in sorted(self.labels.items())
            ],
            "unlabelled": self.unlabelled,
            "formats": dict(sorted(self.formats.items(), key=lambda kv: (-kv[1], kv[0]))),
            "height": _range(self.heights),
            "width": _range(self.widths),
            "channels": {str(c): n for c, n in sorted(self.channels.items())},
            "first_records": list(self.first),
        }
