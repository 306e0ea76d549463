"""Framed records copied by byte range: what a re-cut, `update`'s rewrites and `compact` do instead of
decoding and writing each record again (neighbouring records of one file in one copy, in the kernel
for local files: copy_file_range)."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any, BinaryIO, NamedTuple

from img2tfrecord import fs


class Span(NamedTuple):
    """One framed record's bytes in a file."""

    file: str
    offset: int
    length: int


def copy_spans(spans: Iterable[Span], dst: BinaryIO | Any) -> None:
    """Append each span's bytes to `dst`: neighbouring spans of one file in one copy (in the kernel
    locally; through `tf.io.gfile` for a remote file or `dst`, a GFile)."""
    run: Span | None = None
    remote = _RemoteSources()
    try:
        for span in spans:
            if run is not None and run.file == span.file and run.offset + run.length == span.offset:
                run = Span(run.file, run.offset, run.length + span.length)
                continue
            if run is not None:
                _copy_run(run, dst, remote)
            run = span
        if run is not None:
            _copy_run(run, dst, remote)
    finally:
        remote.close()


class _RemoteSources:
    """Remote source shards kept open across runs (a GFile reads ahead: the next run of the same
    shard is often in its buffer), the few most recent only (each holds its buffer)."""

    KEEP = 8

    def __init__(self) -> None:
        self.open: dict[str, Any] = {}

    def get(self, path: str) -> Any:
        f = self.open.pop(path, None)
        if f is None:
            if len(self.open) >= self.KEEP:
                self.open.pop(next(iter(self.open))).close()
            f = fs.open_read(path)
        self.open[path] = f  # most recent last
        return f

    def close(self) -> None:
        for f in self.open.values():
            f.close()
        self.open.clear()


def _copy_run(run: Span, dst: BinaryIO | Any, remote: _RemoteSources) -> None:
    if not fs.is_remote(run.file) and hasattr(dst, "fileno"):
        _copy_range(run.file, run.offset, run.length, dst)
        return
    src, length = remote.get(run.file) if fs.is_remote(run.file) else open(run.file, "rb"), run.length
    try:
        src.seek(run.offset)
        while length > 0:
            chunk = src.read(min(length, 1 << 24))
            if not chunk:
                raise OSError(f"{run.file} ended early while copying its records")
            dst.write(chunk)
            length -= len(chunk)
    finally:
        if not fs.is_remote(run.file):
            src.close()


def _copy_range(src_path: str, offset: int, length: int, dst: BinaryIO) -> None:
    """Append `length` bytes of `src_path` from `offset` to `dst` (copy_file_range: no user-space copy)."""
    with open(src_path, "rb") as src:
        while length > 0:
            try:
                n = os.copy_file_range(src.fileno(), dst.fileno(), length, offset)
            except (AttributeError, OSError):  # not Linux, or a filesystem that refuses it
                src.seek(offset)
                n = len(chunk := src.read(min(length, 1 << 24)))
                dst.write(chunk)
                dst.flush()
            if n <= 0:
                raise OSError(f"{src_path} ended early while re-cutting shards")
            offset += n
            length -= n
