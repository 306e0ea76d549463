"""Why an image or folder was skipped: a verdict about its content, or a passing error.

The catalog remembers a skip so that `update` does not read an unchanged file again to reach the
same verdict (not an image, corrupt, too many pixels). An OS or I/O error is no verdict: the same
bytes may read fine once a permission is fixed, a disk is mounted again or a store answers, and a
permission fix changes neither size nor mtime. So these reasons (the walk's and the reader's) are
told apart here, by the words they start with: `update` tries such an image again every time,
keeps the record an earlier version made of it, and keeps the records below a folder it cannot
list (`changes.diff`, `versions.faults`).
"""

from __future__ import annotations

# the reader's (conversion.encode.source)
VANISHED = "file vanished (or is a broken symlink) before it could be read"
DENIED = "permission denied"
CANNOT_READ = "cannot read: "  # + the OS's or the remote store's words
CHANGED_WHILE_READ = "file changed while it was being read; run again"
# the walk's (conversion.plan.walk)
CANNOT_LIST = "cannot list folder"
CANNOT_TELL = "cannot tell whether it is a folder"
BROKEN_LINK = "No such file or directory (a link to a missing target)"  # an OSError's strerror, as the OS words it

_PASSING = (VANISHED, DENIED, CANNOT_READ, CHANGED_WHILE_READ, CANNOT_LIST, CANNOT_TELL)


def is_passing(reason: str) -> bool:
    """True when the skip `reason` is an OS or I/O error (tried again), not a verdict about content."""
    return reason.startswith(_PASSING)
