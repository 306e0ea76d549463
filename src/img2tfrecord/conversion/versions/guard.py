"""update's guard against the wrong input: an update that would remove most of a dataset is refused.

`update big/ copy/`, with `big/` a tree other than the one `copy/` was made from, finds none of
copy's images and would replace the whole dataset, exit 0; nothing in dataset.json tells a wrong
folder from a real clean-up. So, as rsync's `--max-delete`, removals are limited: by default an
update may remove at most half of the dataset's records; `max_delete` sets the limit (a count, or
"P%" of the records), and a dry run shows the same verdict.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from img2tfrecord.errors import DataError, UsageError, option, plural

DEFAULT_LIMIT = "50%"


class Limit(NamedTuple):
    """At most `records` records, or at most `percent` percent of them (one of the two is set)."""

    records: int | None
    percent: float | None

    def allows(self, removed: int, total: int) -> bool:
        if self.records is not None:
            return removed <= self.records
        return removed * 100 <= total * (self.percent or 0)

    def text(self) -> str:
        return plural(self.records, "record") if self.records is not None else f"{self.percent:g}% of the records"


def parse_limit(value: str | int | None) -> Limit:
    """`max_delete`: None (half of the records), N (records) or "P%" (of the records); UsageError otherwise."""
    value = DEFAULT_LIMIT if value is None else value
    if isinstance(value, int) and not isinstance(value, bool):
        if value >= 0:
            return Limit(value, None)
    elif isinstance(value, str):
        m = re.fullmatch(r"\s*(\d+)\s*", value) or re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*%\s*", value)
        if m and not value.strip().endswith("%"):
            return Limit(int(m[1]), None)
        if m and float(m[1]) <= 100:
            return Limit(None, float(m[1]))
    raise UsageError(
        f"bad {option('max_delete', value)}: use a number of records (e.g. 100) or a percentage (e.g. 10%)"
    )


def refusal(removed: int, total: int, limit: Limit, input_dir: str, output_dir: str) -> str | None:
    """Why an update that removes `removed` of the `total` records is refused, or None."""
    if not removed or limit.allows(removed, total):
        return None
    return (
        f"update would remove {removed:,} of the {plural(total, 'record')} of {output_dir} ({removed * 100 / total:.0f}%), "
        f"more than {limit.text()} ({option('max_delete')}): is {input_dir} the folder it was made from? "
        f"Nothing was changed; if it is, add {option('max_delete', removed)} to remove them"
    )


def check_removals(removed: int, total: int, max_delete: str | int | None, input_dir: str, output_dir: str) -> None:
    """DataError (exit 1) when the update removes more records than `max_delete` allows."""
    why = refusal(removed, total, parse_limit(max_delete), input_dir, output_dir)
    if why is not None:
        raise DataError(why)
