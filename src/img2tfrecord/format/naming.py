"""File names of a dataset: shards (`train-00002-of-00016`, Inception's and tf.raw_ops.ShardedFilename's pattern), and the files that sit beside them."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    pass


# {split}-{i:05d}-of-{n:05d}, no extension even when compressed (docs/schema.md).
SHARD_RE = re.compile(r"^(?P<split>.+)-(?P<index>\d{5})-of-(?P<count>\d{5})$")


# Files that sit beside shards but are never shards: a glob or prefix never selects them.
_AUX_SUFFIXES = (".idx", ".json", ".txt", ".tmp", ".partial", ".lock", ".catalog")


STAGING_DIR = ".img2tfrecord-staging"


LOCK_NAME = ".img2tfrecord.lock"  # held (flock) by the run writing into an output directory


# In STAGING_DIR, once a publish in place (object stores) has every file of its new version
# there and is about to change OUTPUT: the file list and metadata that finish it (conversion.write.publish).
PUBLISHING_NAME = "publishing.json"


# A split name is part of file names: `{split}-00000-of-00001`, its `.idx`, and while an update or
# compact writes them `.rebalanced.idx` and `.tmp` (34 bytes beside the name). File systems take
# 255 bytes a name: a longer split name is refused up front, not when its first shard is written.
MAX_SPLIT_NAME_BYTES = 200
# What a dataset.json read back may name: a split whose shard names (15 bytes beside it) fit at all.
# (A dataset made before the limit above, with a name of 201-240 bytes, still opens.)
MAX_RECORDED_SPLIT_NAME_BYTES = 240


# A top folder of INPUT (or a --file-list split column, --split's names) so named is that split
SPLIT_DIR_NAMES = {"train": "train", "validation": "validation", "val": "validation", "test": "test"}


def split_name_too_long(name: str, limit: int = MAX_SPLIT_NAME_BYTES) -> str | None:
    """Why `name` cannot name a split's files (it is too long for a file name), or None."""
    n = len(name.encode("utf-8", "surrogatepass"))
    if n > limit:
        return f"the split name {name[:20]}... is {n:,} bytes; at most {limit} (its shards' file names must fit the file system's 255)"
    return None


def shard_split(name: str) -> str:
    """The split of a shard file name (which must match SHARD_RE)."""
    m = SHARD_RE.match(name)
    if m is None:
        raise ValueError(f"{name} is not a shard name (NAME-NNNNN-of-NNNNN)")
    return m["split"]


def shard_name(split: str, index: int, count: int) -> str:
    """`train-00002-of-00016`: Inception's and tf.raw_ops.ShardedFilename's pattern."""
    return f"{split}-{index:05d}-of-{count:05d}"
