"""TFRecord framing: `uint64 length | masked CRC-32C of it | data | masked CRC-32C of data` (record_writer.h), read and checked without TensorFlow.

One streaming reader (`TFRecordFile`, `read_records`) for inspect, verify and resume, and a header-only walk (`record_spans`) for re-cutting shards and checking framing before TensorFlow reads."""

from __future__ import annotations

import gzip
import os
import struct
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, BinaryIO

import google_crc32c

from img2tfrecord import fs
from img2tfrecord.errors import DataError
from img2tfrecord.fs import hasher

if TYPE_CHECKING:  # pragma: no cover
    pass


COMPRESSIONS = ("none", "gzip", "zlib")


HEADER_BYTES = 12  # uint64 length + uint32 masked CRC of the length


FOOTER_BYTES = 4  # uint32 masked CRC of the data


def mask_crc(crc: int) -> int:
    """TFRecord's CRC mask (record_writer.h): rotate right by 15 and add a constant."""
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def masked_crc(data: bytes | bytearray | memoryview) -> int:
    """TFRecord's masked CRC-32C of `data`."""
    return mask_crc(google_crc32c.value(bytes(data) if isinstance(data, memoryview) else data))


def is_record_header(head: bytes) -> bool:
    """True when `head` (12 bytes) is a length whose CRC matches: the start of a TFRecord."""
    if len(head) < 12:
        return False
    (crc,) = struct.unpack_from("<I", head, 8)
    return masked_crc(head[:8]) == crc


class HeaderError(ValueError):
    """A record header that cannot be used; the message says why (no file or offset in it)."""


def record_length(head: bytes, left: int | None) -> int:
    """The data length a record header announces, or HeaderError.

    `left` is how many bytes the file holds from this header on, when known. A length the file
    cannot hold is refused here, before anyone allocates it: its CRC may well be valid (a broken
    or malicious writer), and TensorFlow's reader reserves the claimed length up front.
    """
    if len(head) < HEADER_BYTES:
        raise HeaderError(f"truncated record header: {len(head)} of {HEADER_BYTES} bytes (file cut short?)")
    if not is_record_header(head):
        raise HeaderError("corrupt record header: the length's CRC does not match; cannot read on")
    (length,) = struct.unpack_from("<Q", head)
    if left is not None and length + HEADER_BYTES + FOOTER_BYTES > left:
        more = max(0, left - HEADER_BYTES)
        if more >= length:
            raise HeaderError(f"truncated record: its {length:,} data bytes are there but its data CRC is cut short")
        raise HeaderError(f"truncated record: it claims {length:,} data bytes but the file holds {more:,} more")
    return length


def check_framing(path: str | os.PathLike[str]) -> int:
    """Walk the record headers of an uncompressed TFRecord file; return its record count.

    Reads 12 bytes per record and seeks over the data, so it costs about 2 us a record. Raises
    DataError naming the record and byte offset of a truncated file, a corrupt header or a length
    the file cannot hold (which makes TensorFlow allocate that length, or crash the process).
    Data CRCs are not checked: that needs every byte (`inspect --verify`).
    """
    return sum(1 for _ in record_spans(path))


def record_spans(path: str | os.PathLike[str]) -> Iterator[tuple[int, int]]:
    """(offset, framed size) of every record of an uncompressed TFRecord file, from its headers
    alone; raises DataError like `check_framing`."""
    remote = fs.is_remote(os.fspath(path))
    f: Any
    with fs.open_read(path) if remote else open(path, "rb", buffering=0) as f:
        fd = -1 if remote else f.fileno()
        size = fs.opened_size(f) if remote else os.fstat(fd).st_size
        index = offset = 0
        while offset < size:
            if remote:  # a GFile reads ahead in blocks: a seek within one costs no request
                f.seek(offset)
                head = f.read(HEADER_BYTES)
            else:
                head = os.pread(fd, HEADER_BYTES, offset)  # one system call a record
            try:
                length = record_length(head, size - offset)
            except HeaderError as e:
                msg = str(e)
                if index == 0 and msg.startswith("corrupt"):
                    try:  # a better word for a file that is no (uncompressed) TFRecord at all
                        msg = f"a {detect_compression(path)}-compressed file, read as uncompressed"
                    except DataError as de:
                        msg = str(de).removeprefix(f"{path}: ")
                raise DataError(f"{path}: record {index} at byte {offset:,}: {msg}") from None
            yield offset, HEADER_BYTES + length + FOOTER_BYTES
            offset += HEADER_BYTES + length + FOOTER_BYTES
            index += 1


def detect_compression(path: str | os.PathLike[str]) -> str:
    """Return "none", "gzip" or "zlib" from a file's first bytes, or raise DataError.

    An uncompressed TFRecord starts with a length whose masked CRC-32C follows it, which a
    compressed stream (or any other file) almost never does by chance; gzip has the magic
    1f 8b; zlib has no reliable magic, so we decompress the start and look for a record header.
    An empty file is an empty uncompressed TFRecord file (TensorFlow reads 0 records from it).
    """
    with fs.open_read(path) as f:
        head = f.read(1 << 16)
    if not head or is_record_header(head):
        return "none"
    if head[:2] == b"\x1f\x8b":
        inner = _decompress_start(head, 16 + zlib.MAX_WBITS)
        if inner is None or (inner and not is_record_header(inner)):
            raise DataError(f"{path}: a gzip file, but not of TFRecords (or corrupt at the start)")
        return "gzip"
    if len(head) >= 2 and head[0] & 0x0F == 8 and (head[0] << 8 | head[1]) % 31 == 0:
        inner = _decompress_start(head, zlib.MAX_WBITS)
        if inner is not None and (not inner or is_record_header(inner)):
            return "zlib"
    if len(head) < 12:
        raise DataError(f"{path}: not a TFRecord file ({len(head)} bytes, shorter than one record header)")
    from img2tfrecord.format.images import describe_content  # named, never quoted: the file may be a key

    raise DataError(
        f"{path}: not a TFRecord file (no valid record header at byte 0; it looks like {describe_content(head)})"
    )


def _decompress_start(head: bytes, wbits: int) -> bytes | None:
    """The first bytes of a compressed stream, or None if `head` does not decompress."""
    try:
        return zlib.decompressobj(wbits).decompress(head, 64)
    except zlib.error:
        return None


_CHUNK = 1 << 22  # reads from streams of unknown size grow by at most 4 MiB at a time


# A bigger record is CRC-checked while streaming past it but never held in memory: a gzip file of
# a few MB can hold a record of gigabytes (valid CRC and all), and no image record is this big.
MAX_RECORD_BYTES = 256 << 20


class FramingError(Exception):
    """The file cannot be read past this point (truncated, corrupt length, broken compression)."""

    def __init__(self, index: int, offset: int, message: str) -> None:
        super().__init__(message)
        self.index = index
        self.offset = offset
        self.message = message


@dataclass(frozen=True, slots=True)
class RawRecord:
    """One framed record. `offset` is where its header starts (in the decompressed stream).

    A record longer than the reader's `max_record_bytes` comes with empty `data` and its length
    in `skipped_length` (its CRC was still checked, so `crc_ok` holds).
    """

    index: int
    offset: int
    data: bytes
    crc_ok: bool
    skipped_length: int | None = None

    @property
    def oversize(self) -> bool:
        return self.skipped_length is not None

    @property
    def length(self) -> int:
        """The data length from the header (not len(data) when oversize)."""
        return len(self.data) if self.skipped_length is None else self.skipped_length


class _CountingReader:
    """The raw file as it is read: counts (and optionally hashes) every byte.

    Sitting under the decompressor, it gives the checksum of the file on disk and the progress in
    on-disk bytes from the same single pass that reads the records.
    """

    def __init__(self, f: BinaryIO, checksum: str | None) -> None:
        self._f = f
        self._hash = hasher(checksum) if checksum else None
        self.pos = 0
        self.mode = "rb"

    def read(self, n: int = -1) -> bytes:
        b = self._f.read(n)
        if self._hash is not None:
            self._hash.update(b)
        self.pos += len(b)
        return b

    def drain(self) -> None:
        """Read to the end, so the hash covers bytes the record reader never needed."""
        while self.read(_CHUNK):
            pass

    def hexdigest(self) -> str | None:
        return self._hash.hexdigest() if self._hash is not None else None


class _ZlibReader:
    """A streaming reader of one zlib stream (TensorFlow's "ZLIB" compression)."""

    def __init__(self, raw: _CountingReader) -> None:
        self._raw = raw
        self._d = zlib.decompressobj()

    def read(self, n: int) -> bytes:
        out: list[bytes] = []
        need = n
        while need > 0 and not self._d.eof:
            chunk = self._d.unconsumed_tail or self._raw.read(1 << 16)
            piece = self._d.decompress(chunk, need)  # with no input left, this drains zlib's own buffer
            if not chunk and not piece:
                raise EOFError("it ends early (file truncated?)")
            out.append(piece)
            need -= len(piece)
        return b"".join(out)


def _read_exact(stream: Any, n: int) -> bytes:
    """Up to `n` bytes (fewer only at the end), read in bounded chunks."""
    if n <= _CHUNK:
        return stream.read(n)
    parts, got = [], 0
    while got < n:
        b = stream.read(min(_CHUNK, n - got))
        if not b:
            break
        parts.append(b)
        got += len(b)
    return b"".join(parts)


def _skip(stream: Any, n: int) -> tuple[int, int]:
    """Read up to `n` bytes in bounded chunks, keeping none: (bytes read, their unmasked CRC-32C)."""
    got = crc = 0
    while got < n:
        b = stream.read(min(_CHUNK, n - got))
        if not b:
            break
        crc = google_crc32c.extend(crc, b)
        got += len(b)
    return got, crc


def _iter_framed(stream: Any, size: int | None, max_record: int = MAX_RECORD_BYTES) -> Iterator[RawRecord]:
    """Records from a (decompressed) stream; `size` is the total when known, to bound lengths.

    Memory: one record of at most `max_record` bytes. Each step consumes at least 16 bytes or
    ends, so any input ends.
    """
    index = offset = 0
    while True:
        head = stream.read(HEADER_BYTES)
        if not head:
            return
        try:
            length = record_length(head, None if size is None else size - offset)
        except HeaderError as e:
            raise FramingError(index, offset, str(e)) from None
        if length > max_record:
            got, crc = _skip(stream, length)
            data = b""
        else:
            data = _read_exact(stream, length)
            got, crc = len(data), None
        if got < length:
            raise FramingError(index, offset, f"truncated record: {got:,} of {length:,} data bytes")
        foot = stream.read(FOOTER_BYTES)
        if len(foot) < FOOTER_BYTES:
            raise FramingError(index, offset, "truncated record: its data CRC is missing")
        (data_crc,) = struct.unpack("<I", foot)
        ok = (masked_crc(data) if crc is None else mask_crc(crc)) == data_crc
        yield RawRecord(index, offset, data, ok, None if crc is None else length)
        offset += HEADER_BYTES + length + FOOTER_BYTES
        index += 1


class TFRecordFile:
    """Stream the records of one TFRecord file, compressed or not, with bounded memory.

    Iterating yields `RawRecord`s (a data-CRC mismatch is flagged on the record, since framing
    stays intact); damage that makes the rest unreadable raises `FramingError`.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        compression: str = "auto",
        *,
        checksum: str | None = None,
        max_record_bytes: int | None = None,
    ) -> None:
        self.path = fs.as_path(path)
        self.size = self.path.stat().st_size
        self.compression = detect_compression(self.path) if compression == "auto" else compression
        self.max_record_bytes = MAX_RECORD_BYTES if max_record_bytes is None else max_record_bytes
        self._checksum = checksum
        self._raw: _CountingReader | None = None

    @property
    def bytes_read(self) -> int:
        """On-disk bytes consumed so far (for progress)."""
        return self._raw.pos if self._raw else 0

    @property
    def checksum(self) -> str | None:
        """Hex digest of the whole file (with the algorithm asked for), once iteration has ended."""
        return self._raw.hexdigest() if self._raw else None

    def __iter__(self) -> Iterator[RawRecord]:
        with self.path.open("rb") as f:
            self._raw = raw = _CountingReader(f, self._checksum)
            stream: Any
            if self.compression == "gzip":
                stream = gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[call-overload]
            elif self.compression == "zlib":
                stream = _ZlibReader(raw)
            else:
                stream = raw
            it = _iter_framed(stream, self.size if self.compression == "none" else None, self.max_record_bytes)
            index = offset = 0
            while True:
                try:
                    rec = next(it)
                except StopIteration:
                    break
                except FramingError:
                    raw.drain()  # the hash still covers the whole file
                    raise
                except (EOFError, OSError, zlib.error) as e:  # gzip.BadGzipFile is an OSError
                    raw.drain()
                    if self.compression == "none":
                        raise FramingError(index, offset, f"read error: {e}") from e
                    raise FramingError(index, offset, f"{self.compression} stream is damaged: {e}") from e
                index, offset = rec.index + 1, rec.offset + HEADER_BYTES + rec.length + FOOTER_BYTES
                yield rec
            raw.drain()


def records_at(
    path: str | os.PathLike[str], offsets: Sequence[int], compression: str = "none", max_record_bytes: int | None = None
) -> Iterator[RawRecord]:
    """The records that start at `offsets` (in the decompressed stream, ascending), and no others
    read: an uncompressed file is read at those offsets only (a catalog's or an index's), a
    compressed one streamed up to the last of them. Raises FramingError on damage."""
    limit = MAX_RECORD_BYTES if max_record_bytes is None else max_record_bytes
    if compression != "none":
        wanted = set(offsets)
        last = max(offsets, default=-1)
        for rec in TFRecordFile(path, compression, max_record_bytes=limit):
            if rec.offset in wanted:
                yield rec
            if rec.offset >= last:
                return
        return
    p = fs.as_path(path)
    size = p.stat().st_size
    with p.open("rb") as f:
        for offset in offsets:
            f.seek(offset)
            try:
                rec = next(_iter_framed(f, size - offset, limit))
            except StopIteration:
                raise FramingError(0, offset, "no record starts there: the file ends") from None
            except FramingError as e:
                raise FramingError(e.index, offset, e.message) from None
            yield RawRecord(rec.index, offset, rec.data, rec.crc_ok, rec.skipped_length)


def read_records(
    path: str | os.PathLike[str], compression: str = "auto", max_record_bytes: int | None = None
) -> Iterator[bytes]:
    """The serialized records of a TFRecord file, without TensorFlow; raises DataError on damage.

    A record longer than `max_record_bytes` (default MAX_RECORD_BYTES) is a DataError too:
    raise the limit to read it.
    """
    f = TFRecordFile(path, compression, max_record_bytes=max_record_bytes)
    try:
        for rec in f:
            if not rec.crc_ok:
                raise DataError(f"{path}: record {rec.index} at byte {rec.offset}: data CRC mismatch")
            if rec.oversize:
                raise DataError(
                    f"{path}: record {rec.index} at byte {rec.offset}: {rec.length:,} data bytes, more than max_record_bytes={f.max_record_bytes:,}"
                )
            yield rec.data
    except FramingError as e:
        raise DataError(f"{path}: record {e.index} at byte {e.offset}: {e.message}") from e


RECORD_OVERHEAD = 16  # uint64 length + uint32 crc + uint32 crc (record_writer.h)
