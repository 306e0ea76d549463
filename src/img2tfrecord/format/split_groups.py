"""`--split-group`: the group an image's path names (a patient, a video, a burst of photos).

The writing side (conversion.plan.quota) keeps a group in one split; the reading side
(inspection.dataset_lists) names the groups that cross splits in a dataset made without it. Both
read the group from the path alone, by the same rule, so they agree. The pattern runs in linear
time (format.linear_re: Python's syntax and groups, RE2's engine): it is recorded in dataset.json
and searched in every path of every later update.
"""

from __future__ import annotations

from img2tfrecord.errors import option
from img2tfrecord.format.linear_re import LinearPattern, compile_linear


def group_pattern(pattern: str | None) -> LinearPattern | None:
    """`--split-group`'s regular expression, compiled; UsageError for one that is not, or that
    needs backtracking (backreferences, lookaround)."""
    if pattern is None:
        return None
    return compile_linear(pattern, option("split_group", pattern))


def group_key(pattern: LinearPattern, rel: str) -> str | None:
    """The group of the image `rel` (its path below INPUT): the pattern's first group, or the
    whole match when it has none; None when the pattern does not match (the image is its own group)."""
    m = pattern.search(rel)
    if m is None:
        return None
    if pattern.groups and m.group(1) is not None:
        return m.group(1)
    return m.group(0)
