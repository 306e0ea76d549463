"""Shards: how many, which records go where, writing them, and publishing them atomically.

Shard boundaries are ``round(n * i / k)`` over a split's shuffled candidate list (as TFDS does),
so record counts differ by at most one (a skipped image makes its shard one smaller) and every
shard mixes classes. Shards are written into a hidden staging folder inside the output directory
and renamed into place only when the whole run succeeded, so an interrupted or failed run never
leaves a file under a final shard name; ``dataset.json`` is written last.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
import shutil
from dataclasses import dataclass, field

from img2tfrecord.errors import UsageError
from img2tfrecord.tf_import import tensorflow

TARGET_SHARD_BYTES = 200 * 1024 * 1024  # ceil(total / 200 MiB) shards -> each in (100, 200] MiB
STAGING_DIR = ".img2tfrecord-staging"
COMPRESSIONS = {None: "", "gzip": "GZIP", "zlib": "ZLIB"}
SHARD_NAME_RE = re.compile(r"^.+-\d{5}-of-\d{5}(\.idx)?$")
RECORD_OVERHEAD = 16  # uint64 length + uint32 crc + uint32 crc (record_writer.h)


def shard_name(split: str, index: int, count: int) -> str:
    """`train-00002-of-00016`: Inception's and tf.raw_ops.ShardedFilename's pattern."""
    return f"{split}-{index:05d}-of-{count:05d}"


def shard_bounds(n: int, k: int) -> list[tuple[int, int]]:
    """[start, end) of each of k shards over n records; sizes differ by at most one."""
    cuts = [round(n * i / k) for i in range(k + 1)]
    return list(zip(cuts[:-1], cuts[1:]))


def auto_shard_counts(
    split_bytes: dict[str, int], split_items: dict[str, int], requested: int | dict[str, int] | None
) -> tuple[dict[str, int], list[str]]:
    """Shard count per split, plus warnings.

    * None: aim at 100-200 MiB per shard;
    * an int N: N shards in total, shared in proportion to split size (at least 1 each);
    * a dict: those counts; other splits get shards in proportion to their size.
    Never more shards than candidate images (TFDS' rule), and never fewer than one.
    """
    warnings: list[str] = []
    names = [s for s in split_bytes if split_items[s] > 0]
    counts: dict[str, int] = {}
    if isinstance(requested, dict):
        unknown = sorted(set(requested) - set(split_bytes))
        if unknown:
            raise UsageError(f"--shards names split(s) {', '.join(unknown)}; the splits are {', '.join(split_bytes)}")
        counts.update({s: requested[s] for s in names if s in requested})
        given = [s for s in counts]
        per = sum(split_bytes[s] for s in given) / max(1, sum(counts.values())) if given else TARGET_SHARD_BYTES
        for s in names:
            if s not in counts:
                counts[s] = max(1, round(split_bytes[s] / per)) if given else max(1, math.ceil(split_bytes[s] / per))
    elif isinstance(requested, int):
        total = sum(split_bytes[s] for s in names) or 1
        exact = {s: requested * split_bytes[s] / total for s in names}
        counts = {s: max(1, int(exact[s])) for s in names}
        for s in sorted(names, key=lambda s: exact[s] - int(exact[s]), reverse=True):
            if sum(counts.values()) >= requested:
                break
            counts[s] += 1
    else:
        counts = {s: max(1, math.ceil(split_bytes[s] / TARGET_SHARD_BYTES)) for s in names}
    for s in names:
        if counts[s] > split_items[s]:
            warnings.append(f"{s}: {counts[s]} shards for {split_items[s]} images; using {split_items[s]}")
            counts[s] = split_items[s]
    return counts, warnings


@dataclass
class ShardInfo:
    """What the manifest records of a written shard."""

    file: str
    records: int = 0
    bytes: int = 0
    sha256: str = ""
    index: str | None = None

    def as_json(self) -> dict:
        d = {"file": self.file, "records": self.records, "bytes": self.bytes, "sha256": self.sha256}
        if self.index:
            d["index"] = self.index
        return d


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@dataclass
class ShardWriter:
    """One shard being written in the staging folder with tf.io.TFRecordWriter."""

    staging: str
    name: str
    compression: str | None = None
    index: bool = False
    info: ShardInfo = field(init=False)
    _offsets: list[tuple[int, int]] = field(default_factory=list, init=False)
    _pos: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        tf = tensorflow()
        self.info = ShardInfo(self.name)
        options = tf.io.TFRecordOptions(compression_type=COMPRESSIONS[self.compression])
        self._writer = tf.io.TFRecordWriter(os.path.join(self.staging, self.name), options)

    def write(self, record: bytes) -> None:
        self._writer.write(record)
        size = len(record) + RECORD_OVERHEAD
        if self.index:
            self._offsets.append((self._pos, size))
        self._pos += size
        self.info.records += 1

    def close(self) -> ShardInfo:
        """Flush, fsync and checksum the shard (and write its DALI index)."""
        self._writer.close()
        path = os.path.join(self.staging, self.name)
        _fsync(path)
        self.info.bytes = os.path.getsize(path)
        self.info.sha256 = sha256_file(path)
        if self.index:
            self.info.index = self.name + ".idx"
            with open(os.path.join(self.staging, self.info.index), "w", encoding="ascii") as f:
                f.writelines(f"{off} {size}\n" for off, size in self._offsets)
                f.flush()
                os.fsync(f.fileno())
        return self.info


def prepare_output(output_dir: str, overwrite: bool) -> str:
    """Check the output directory and create a fresh staging folder inside it; return its path."""
    if os.path.exists(output_dir) and not os.path.isdir(output_dir):
        raise UsageError(f"output {output_dir} exists and is not a directory")
    if os.path.isdir(output_dir):
        existing = [n for n in os.listdir(output_dir) if n != STAGING_DIR]
        if existing and not overwrite:
            raise UsageError(f"output {output_dir} is not empty ({len(existing)} entries): choose another folder or add --overwrite")
    try:
        os.makedirs(output_dir, exist_ok=True)
        staging = os.path.join(output_dir, STAGING_DIR)
        shutil.rmtree(staging, ignore_errors=True)
        os.makedirs(staging)
    except OSError as e:
        raise UsageError(f"cannot create output {output_dir}: {e.strerror}") from None
    return staging


def discard_staging(staging: str) -> None:
    shutil.rmtree(staging, ignore_errors=True)


def write_text_atomic(path: str, text: str) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def publish(staging: str, output_dir: str, files: list[str], metadata: dict[str, str]) -> None:
    """Move finished shards into place, then write metadata files (dataset.json last).

    Stale artifacts of an earlier run (shards, indexes, labels.txt, dataset.json) are removed
    first, so a dataset never mixes `-of-00004` and `-of-00005` shards.
    """
    keep = set(files)
    for name in os.listdir(output_dir):
        if name in metadata or (SHARD_NAME_RE.match(name) and name not in keep):
            os.remove(os.path.join(output_dir, name))
    for name in files:
        os.replace(os.path.join(staging, name), os.path.join(output_dir, name))
    for name, text in metadata.items():
        write_text_atomic(os.path.join(output_dir, name), text)
    discard_staging(staging)
    try:
        _fsync(output_dir)
    except OSError:
        pass
