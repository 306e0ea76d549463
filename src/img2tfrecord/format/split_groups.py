"""`--split-group`: the group an image's path names (a patient, a video, a burst of photos).

The writing side (conversion.plan.quota) keeps a group in one split; the reading side
(inspection.dataset_lists) names the groups that cross splits in a dataset made without it. Both
read the group from the path alone, by the same rule, so they agree.
"""

from __future__ import annotations

import re

from img2tfrecord.errors import UsageError, option


def group_pattern(pattern: str | None) -> re.Pattern[str] | None:
    """`--split-group`'s regular expression, compiled; UsageError for one that is not."""
    if pattern is None:
        return None
    try:
        return re.compile(pattern)
    except re.error as e:
        raise UsageError(f"bad {option('split_group', pattern)}: not a regular expression ({e})") from None


def group_key(pattern: re.Pattern[str], rel: str) -> str | None:
    """The group of the image `rel` (its path below INPUT): the pattern's first group, or the
    whole match when it has none; None when the pattern does not match (the image is its own group)."""
    m = pattern.search(rel)
    if m is None:
        return None
    if m.re.groups and m.group(1) is not None:
        return m.group(1)
    return m.group(0)
