"""What the report says about a set of records, in memory independent of their number."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from img2tfrecord.inspection.records import ALL_ROLE_KEYS, RecordInfo, _clip

# Keys described per file and in the total (besides the role keys, always described): a file whose
# records invent keys would otherwise cost memory and report lines per distinct key. Keys past it
# are counted as distinct up to MAX_COUNTED_KEYS (a set of their hashes), then only as "more than".
MAX_FEATURE_KEYS = 64
MAX_COUNTED_KEYS = 100_000
MAX_LABELS = 100_000  # distinct labels counted; records of other labels are counted in labels_omitted


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


def format_name(fmt: str | None, sixteen_bit: bool) -> str:
    """A record's format as the report counts it: a 16-bit PNG apart (decode it with dtype=tf.uint16 to keep the bits)."""
    fmt = fmt or "unknown"
    return "PNG 16-bit" if fmt == "PNG" and sixteen_bit else fmt


def shape_fields(
    formats: Counter[str], heights: Counter[int], widths: Counter[int], channels: Counter[int]
) -> dict[str, Any]:
    """The formats, height, width and channels of a report: `inspect --json`'s from the records it
    read, the HTML report's from the catalog, both through this one function."""
    return {
        "formats": dict(sorted(formats.items(), key=lambda kv: (-kv[1], kv[0]))),
        "height": _range(heights),
        "width": _range(widths),
        "channels": {str(c): n for c, n in sorted(channels.items())},
    }


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
        self.unread = 0  # records longer than a report reads (CRC-checked, not parsed)
        self.features: dict[str, _FeatureStat] = {}
        self._other_keys = 0  # how many non-role keys `features` holds
        self.more_keys: set[int] = set()  # hashes of the keys past MAX_FEATURE_KEYS (at most MAX_COUNTED_KEYS)
        self.more_keys_capped = False  # True when more distinct keys were seen than `more_keys` holds
        self.more_key_entries = 0  # records' keys that no record kept (past records.MAX_RECORD_KEYS)
        self.labels_omitted = 0
        self.labels: Counter[int] = Counter()
        self.label_names: dict[int, str | None] = {}
        self.unlabelled = 0
        self.formats: Counter[str] = Counter()
        self.heights: Counter[int] = Counter()
        self.widths: Counter[int] = Counter()
        self.channels: Counter[int] = Counter()
        self.first: list[dict[str, Any]] = []
        self.boxes: Counter[str] = Counter()  # detection records: boxes per class (image/object/class/text)
        self.box_records = 0  # records that hold the Object Detection API's boxes (maybe none)

    def _feature(self, key: str) -> _FeatureStat | None:
        """The key's stats, made if the caps allow; None (and counted) past them."""
        fs = self.features.get(key)
        if fs is None:
            if key not in ALL_ROLE_KEYS:
                if self._other_keys >= MAX_FEATURE_KEYS:
                    self._more_key(hash(key))
                    return None
                self._other_keys += 1
            fs = self.features[key] = _FeatureStat()
        return fs

    def _more_key(self, h: int) -> None:
        if h in self.more_keys:
            return
        if len(self.more_keys) < MAX_COUNTED_KEYS:
            self.more_keys.add(h)
        else:
            self.more_keys_capped = True

    def _label(self, label: int, n: int, name: str | None) -> None:
        if label not in self.labels and len(self.labels) >= MAX_LABELS:
            self.labels_omitted += n
            return
        self.labels[label] += n
        if self.label_names.get(label) is None:
            self.label_names[label] = _clip(name)

    def add(self, info: RecordInfo, label_name: str | None) -> None:
        self.examples += 1
        for key, (kind, n) in info.features.items():
            fs = self._feature(key)
            if fs is not None:
                fs.add(kind, n)
        self.more_key_entries += info.more_keys
        if info.label is None:
            self.unlabelled += 1
        else:
            self._label(info.label, 1, label_name)
        if info.image is not None:
            sixteen = info.image[24:25] == b"\x10" and info.image[12:16] == b"IHDR"  # IHDR bit depth 16
            self.formats[format_name(info.format, sixteen)] += 1
        if info.height is not None:
            self.heights[info.height] += 1
        if info.width is not None:
            self.widths[info.width] += 1
        if info.channels is not None:
            self.channels[info.channels] += 1
        if len(self.first) < self.keep_first:
            self.first.append(info.row())
        if info.boxes is not None:
            self.box_records += 1
            self.boxes.update(info.boxes)

    def merge(self, o: Stats, path: str | None = None) -> None:
        self.records += o.records
        self.bytes += o.bytes
        self.compressions |= o.compressions
        self.examples += o.examples
        self.non_examples += o.non_examples
        self.unread += o.unread
        for key, fs in o.features.items():
            mine = self._feature(key)
            if mine is not None:
                mine.merge(fs)
        for h in o.more_keys:
            self._more_key(h)
        self.more_keys_capped |= o.more_keys_capped
        self.more_key_entries += o.more_key_entries
        for label, n in o.labels.items():
            self._label(label, n, o.label_names.get(label))
        self.labels_omitted += o.labels_omitted
        self.unlabelled += o.unlabelled
        self.formats.update(o.formats)
        self.heights.update(o.heights)
        self.widths.update(o.widths)
        self.channels.update(o.channels)
        self.boxes.update(o.boxes)
        self.box_records += o.box_records
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
            "unread": self.unread,
            "features": {
                k: {
                    "types": sorted(f.types),
                    "min_values": f.min_values,
                    "max_values": f.max_values,
                    "records": f.records,
                }
                for k, f in sorted(self.features.items())
            },
            # keys not described above: distinct ones (a lower bound when *_capped), and entries past
            # the keys each record keeps
            "more_keys": len(self.more_keys),
            "more_keys_capped": self.more_keys_capped,
            "more_key_entries": self.more_key_entries,
            "labels": [
                {"label": lab, "name": self.label_names.get(lab), "count": n} for lab, n in sorted(self.labels.items())
            ],
            "labels_omitted": self.labels_omitted,
            "unlabelled": self.unlabelled,
            **shape_fields(self.formats, self.heights, self.widths, self.channels),
            "first_records": list(self.first),
            **self._boxes(),
        }

    def _boxes(self) -> dict[str, Any]:
        """Detection records' boxes per class; nothing for records without them (the report as before)."""
        if not self.box_records:
            return {}
        per_class = dict(sorted(self.boxes.items(), key=lambda kv: (-kv[1], kv[0])))
        return {"boxes": {"records": self.box_records, "total": sum(self.boxes.values()), "per_class": per_class}}
