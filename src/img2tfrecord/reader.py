"""Reading datasets back: shard discovery, compression sniffing, and the one-line `tf.data` loader.

Discovery and sniffing are pure Python (the `inspect` command uses them without TensorFlow);
only `features_spec()` and `load()` import TensorFlow, lazily, through `tf_import.tensorflow()`.
"""

from __future__ import annotations

import contextlib
import gc
import glob
import json
import os
import re
import struct
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Sequence

import google_crc32c
from google.protobuf.message import DecodeError

from img2tfrecord.errors import DataError, UsageError
from img2tfrecord.manifest import LABELS_NAME, MANIFEST_NAME
from img2tfrecord.schema import FEATURE_TYPES, FORMAT_RAW, feature_kinds, serialize_example
from img2tfrecord.tf_import import tensorflow

if TYPE_CHECKING:  # pragma: no cover
    import tensorflow as tf

MANIFEST, LABELS = MANIFEST_NAME, LABELS_NAME  # the names convert writes
# {split}-{i:05d}-of-{n:05d}, no extension even when compressed (README "Output layout").
SHARD_RE = re.compile(r"^(?P<split>.+)-(?P<index>\d{5})-of-(?P<count>\d{5})$")
# Files that sit beside shards but are never shards: a glob or prefix never selects them.
_AUX_SUFFIXES = (".idx", ".json", ".txt", ".tmp", ".partial", ".lock")

COMPRESSIONS = ("none", "gzip", "zlib")


# --------------------------------------------------------------------------- framing and sniffing


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
    with open(path, "rb", buffering=0) as f:  # the happy path, inlined (~2 us a record); record_spans says what is wrong
        fd = f.fileno()
        size = os.fstat(fd).st_size
        offset = count = 0
        crc, unpack, pread = google_crc32c.value, struct.unpack, os.pread
        while offset < size:
            head = pread(fd, HEADER_BYTES, offset)
            if len(head) < HEADER_BYTES:
                break
            length, want = unpack("<QI", head)
            c = crc(head[:8])
            if (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF != want:
                break
            offset += HEADER_BYTES + length + FOOTER_BYTES
            count += 1
        if offset == size:
            return count
    return sum(1 for _ in record_spans(path))  # raises the DataError that names the problem


def record_spans(path: str | os.PathLike[str]) -> Iterator[tuple[int, int]]:
    """(offset, framed size) of every record of an uncompressed TFRecord file, from its headers
    alone; raises DataError like `check_framing`."""
    with open(path, "rb", buffering=0) as f:
        fd = f.fileno()
        size = os.fstat(fd).st_size
        index = offset = 0
        while offset < size:
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


_MAGIC_NAMES: list[tuple[bytes, str]] = [
    (b"\xff\xd8\xff", "a JPEG image"),
    (b"\x89PNG\r\n\x1a\n", "a PNG image"),
    (b"GIF8", "a GIF image"),
    (b"BM", "a BMP image"),
    (b"PK\x03\x04", "a zip archive"),
    (b"\x1f\x8b", "a gzip file"),
    (b"%PDF", "a PDF document"),
    (b"\x93NUMPY", "a NumPy array"),
    (b"{", "JSON or text"),
]


def describe_bytes(head: bytes) -> str:
    """Name what a non-TFRecord file looks like, for a clear error message."""
    if len(head) >= 262 and head[257:262] == b"ustar":
        return "a tar archive"
    for magic, name in _MAGIC_NAMES:
        if head.startswith(magic):
            return name
    if head and all(32 <= b < 127 or b in b"\r\n\t" for b in head[:64]):
        return "text"
    return "starts with " + head[:8].hex(" ")


def detect_compression(path: str | os.PathLike[str]) -> str:
    """Return "none", "gzip" or "zlib" from a file's first bytes, or raise DataError.

    An uncompressed TFRecord starts with a length whose masked CRC-32C follows it, which a
    compressed stream (or any other file) almost never does by chance; gzip has the magic
    1f 8b; zlib has no reliable magic, so we decompress the start and look for a record header.
    An empty file is an empty uncompressed TFRecord file (TensorFlow reads 0 records from it).
    """
    with open(path, "rb") as f:
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
    raise DataError(
        f"{path}: not a TFRecord file (no valid record header at byte 0; it looks like {describe_bytes(head)})"
    )


def _decompress_start(head: bytes, wbits: int) -> bytes | None:
    """The first bytes of a compressed stream, or None if `head` does not decompress."""
    try:
        return zlib.decompressobj(wbits).decompress(head, 64)
    except zlib.error:
        return None


# --------------------------------------------------------------------------- manifests and discovery


@dataclass
class Manifest:
    """A parsed dataset.json: what convert promised about an output directory."""

    dir: Path
    data: dict[str, Any]

    @property
    def classes(self) -> list[str]:
        return list(self.data.get("classes") or [])

    @property
    def label_offset(self) -> int:
        return int(self.data.get("label_offset") or 0)

    @property
    def compression(self) -> str:
        """"none", "gzip" or "zlib" (dataset.json writes null for none)."""
        return ((self.data.get("options") or {}).get("compression") or "none").lower()

    @property
    def splits(self) -> dict[str, dict[str, Any]]:
        return dict(self.data.get("splits") or {})

    @property
    def formats(self) -> list[str]:
        """The `image/format` values of the records (JPEG, PNG, BMP, RAW); empty if not listed."""
        return sorted(self.data.get("formats") or {})

    @property
    def stored_channels(self) -> int | None:
        """The channel count of every image when `--channels` fixed it, else None."""
        value = str((self.data.get("options") or {}).get("channels"))
        return int(value) if value in ("1", "3") else None

    def class_name(self, label: int) -> str | None:
        i = label - self.label_offset
        classes = self.classes
        return classes[i] if 0 <= i < len(classes) else None

    def shards(self, split: str | None = None) -> list["ShardRef"]:
        """Every shard the manifest lists (of one split, or of all in manifest order)."""
        splits = self.splits
        if split is not None and split not in splits:
            raise UsageError(f"{self.dir / MANIFEST} has no split {split!r}; its splits: {', '.join(splits) or 'none'}")
        out = []
        for name, info in splits.items():
            if split is not None and name != split:
                continue
            for entry in info.get("shards") or []:
                if not isinstance(entry, dict) or not isinstance(entry.get("file"), str):
                    raise DataError(f"{self.dir / MANIFEST}: split {name}: a shard entry without a file name")
                out.append(ShardRef(self.dir / entry["file"], name, self, entry))
        return out


@dataclass
class ShardRef:
    """One file to read; `manifest`/`entry` are set when a dataset.json describes it."""

    path: Path
    split: str | None = None
    manifest: Manifest | None = None
    entry: dict[str, Any] | None = field(default=None, repr=False)


def read_manifest(directory: str | os.PathLike[str]) -> Manifest | None:
    """The directory's dataset.json, None if it has none; a broken one is a DataError."""
    path = Path(directory) / MANIFEST
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DataError(f"{path}: cannot read the manifest: {e}") from e
    if not isinstance(data, dict) or not isinstance(data.get("splits", {}), dict):
        raise DataError(f"{path}: not an img2tfrecord manifest (no 'splits' object)")
    return Manifest(Path(directory), data)


def is_shard_candidate(path: Path) -> bool:
    """A regular file that could be a shard: not an index, manifest, label list or temp file."""
    return path.is_file() and not path.name.startswith(".") and not path.name.lower().endswith(_AUX_SUFFIXES)


def shard_files_in(directory: Path, split: str | None = None) -> list[Path]:
    """Files named like shards in `directory`, sorted (optionally of one split)."""
    out = []
    for p in sorted(directory.iterdir()):
        m = SHARD_RE.match(p.name)
        if m and p.is_file() and (split is None or m["split"] == split):
            out.append(p)
    return out


def _manifest_for_file(path: Path, cache: dict[Path, Manifest | None]) -> tuple[Manifest | None, str | None, dict | None]:
    """If the file's directory has a dataset.json listing it, that manifest, split and entry."""
    d = path.parent.resolve()
    if d not in cache:
        cache[d] = read_manifest(d)
    man = cache[d]
    if man is None:
        return None, None, None
    for name, info in man.splits.items():
        for entry in info.get("shards") or []:
            if entry.get("file") == path.name:
                return man, name, entry
    return man, None, None


def _list_names(paths: Sequence[Path], limit: int = 8) -> str:
    names = [p.name if len({q.parent for q in paths}) == 1 else str(p) for p in paths[:limit]]
    more = f" and {len(paths) - limit} more" if len(paths) > limit else ""
    return ", ".join(names) + more


def resolve_paths(paths: Iterable[str | os.PathLike[str]], split: str | None = None) -> list[ShardRef]:
    """Turn inspect's PATH arguments into shard files.

    A PATH is a file, a glob, an output directory (its dataset.json lists the shards; without one,
    the files named like shards), or a prefix that matches exactly one shard file. Anything
    missing or ambiguous is a UsageError naming what it matched.
    """
    refs: list[ShardRef] = []
    cache: dict[Path, Manifest | None] = {}
    for raw in paths:
        text = os.fspath(raw)
        p = Path(text)
        if p.is_dir() or (p.is_file() and p.name == MANIFEST):
            d = p if p.is_dir() else p.parent
            man = read_manifest(d)
            if man is not None:
                refs.extend(man.shards(split))
                continue
            files = shard_files_in(d, split)
            if not files:
                what = f"of split {split!r} " if split else ""
                raise UsageError(f"{text}: no {MANIFEST} and no shard files {what}(named NAME-NNNNN-of-NNNNN) in this directory")
            refs.extend(ShardRef(f, SHARD_RE.match(f.name)["split"]) for f in files)
            continue
        if p.is_file():
            matches = [p]
        elif glob.has_magic(text):
            matches = [Path(m) for m in sorted(glob.glob(text))]
            matches = [m for m in matches if is_shard_candidate(m)]
            if not matches:
                raise UsageError(f"{text}: the pattern matches no shard file")
        else:
            matches = [Path(m) for m in sorted(glob.glob(glob.escape(text) + "*"))]
            matches = [m for m in matches if is_shard_candidate(m)]
            if len(matches) > 1:
                raise UsageError(f"{text}: ambiguous, it is a prefix of {len(matches)} files: {_list_names(matches)}")
            if not matches:
                parent = p.parent if p.parent.is_dir() else None
                near = [m for m in sorted(parent.iterdir()) if is_shard_candidate(m)] if parent else []
                hint = f" ({parent} has: {_list_names(near)})" if near else ""
                raise UsageError(f"{text}: no such file, directory or shard prefix{hint}")
        for m in matches:
            man, sp, entry = _manifest_for_file(m, cache)
            if sp is None:
                sm = SHARD_RE.match(m.name)
                sp = sm["split"] if sm else None
            refs.append(ShardRef(m, sp, man, entry))
    seen: set[Path] = set()
    unique = []
    for r in refs:
        key = r.path.resolve()
        if key not in seen:
            seen.add(key)
            unique.append(r)
    return unique


# --------------------------------------------------------------------------- TensorFlow side


def features_spec() -> dict[str, Any]:
    """The `tf.io.parse_single_example` spec of our schema: every key, one value, required."""
    tf = tensorflow()
    dtypes = {"bytes": tf.string, "int64": tf.int64, "float": tf.float32}
    return {key: tf.io.FixedLenFeature([], dtypes[kind]) for key, kind in FEATURE_TYPES.items()}


def _split_files(path: str | os.PathLike[str] | Sequence[str | os.PathLike[str]], split: str) -> tuple[list[str], Manifest | None, int | None]:
    """(shard files, manifest or None, record count or None) for `load`."""
    if not isinstance(path, (str, os.PathLike)):
        files = [os.fspath(p) for p in path]
        if not files:
            raise UsageError("load: the list of files is empty")
        return files, None, None
    text = os.fspath(path)
    p = Path(text)
    if p.is_file() and p.name == MANIFEST:
        p = p.parent
    if p.is_dir():
        man = read_manifest(p)
        if man is not None:
            refs = man.shards(split)
            if not refs:
                raise UsageError(f"{p / MANIFEST}: split {split!r} has no shards")
            records = man.splits[split].get("records")
            return [os.fspath(r.path) for r in refs], man, records if isinstance(records, int) else None
        files = shard_files_in(p, split)
        if not files:
            raise UsageError(f"{p}: no {MANIFEST} and no {split}-NNNNN-of-NNNNN shard files")
        return [os.fspath(f) for f in files], None, None
    if p.is_file():
        return [text], None, None
    files = [m for m in sorted(glob.glob(text)) if is_shard_candidate(Path(m))]
    if not files:
        raise UsageError(f"load: {text!r} is no directory, file or glob that matches shard files")
    return files, None, None


def _to_channels(tf: Any, img: Any, channels: int | None, have: int | None = None) -> Any:
    """Convert a uint8 HxWxC image of 1-4 channels to `channels` (None: leave it).

    `have`, when the manifest says how many channels every image has, picks the conversion here,
    in Python; otherwise it is chosen per image in the graph (`tf.cond`, slower to trace).
    """
    if channels is None or channels == have:
        return img

    def pick(pred: Any, yes: Any, no: Any) -> Any:
        return (yes() if pred else no()) if isinstance(pred, bool) else tf.cond(pred, yes, no)

    c = tf.shape(img)[-1] if have is None else have
    color = c >= 3
    has_alpha = c % 2 == 0 if have is not None else tf.equal(c % 2, 0)
    if channels in (1, 2):
        base = pick(color, lambda: tf.image.rgb_to_grayscale(img[..., :3]), lambda: img[..., :1])
    else:
        base = pick(color, lambda: img[..., :3], lambda: tf.tile(img[..., :1], [1, 1, 3]))
    if channels in (2, 4):
        opaque = lambda: tf.fill(tf.concat([tf.shape(img)[:2], [1]], 0), tf.constant(255, tf.uint8))  # noqa: E731
        base = tf.concat([base, pick(has_alpha, lambda: img[..., -1:], opaque)], axis=-1)
    return tf.ensure_shape(base, [None, None, channels])


def image_decoder(formats: Iterable[str] | None = None, stored_channels: int | None = None, channels: int | None = 3) -> Any:
    """A graph function (encoded, format, height, width, stored channels) -> uint8 HxWx`channels` image.

    JPEG/PNG/BMP/GIF are decoded by content, RAW by reshaping. `formats` (the `image/format`
    values a manifest lists) and `stored_channels` (what `--channels` made every image) let it
    drop the branches that cannot occur: tracing those branches was most of load()'s start-up.
    With channels=3 TensorFlow's decoders convert grey and alpha themselves (the same pixels as
    `_to_channels`: grey replicated, alpha dropped); other conversions are `_to_channels`'.
    """
    tf = tensorflow()
    kinds = set(formats) if formats else None
    native = 3 if channels == 3 else 0  # channels decoders convert to exactly as _to_channels does

    def raw(encoded: Any, height: Any, width: Any, stored: Any) -> Any:
        return tf.reshape(tf.io.decode_raw(encoded, tf.uint8), tf.stack([height, width, stored]))

    if kinds == {FORMAT_RAW}:
        def decode(encoded: Any, image_format: Any, height: Any, width: Any, stored: Any) -> Any:
            img = tf.ensure_shape(raw(encoded, height, width, stored), [None, None, stored_channels])
            return _to_channels(tf, img, channels, stored_channels)
    elif kinds and FORMAT_RAW not in kinds:
        op = (lambda b: tf.io.decode_jpeg(b, channels=native)) if kinds == {"JPEG"} else (
            lambda b: tf.io.decode_image(b, channels=native, expand_animations=False))  # fmt: skip
        have = 3 if native else stored_channels

        def decode(encoded: Any, image_format: Any, height: Any, width: Any, stored: Any) -> Any:
            return _to_channels(tf, tf.ensure_shape(op(encoded), [None, None, have]), channels, have)
    else:  # no manifest, or one that mixes RAW with encoded images: decide per record
        def decode(encoded: Any, image_format: Any, height: Any, width: Any, stored: Any) -> Any:
            coded = lambda: tf.io.decode_image(encoded, channels=0, expand_animations=False, dtype=tf.uint8)  # noqa: E731
            img = tf.cond(tf.equal(image_format, FORMAT_RAW), lambda: raw(encoded, height, width, stored), coded)
            return _to_channels(tf, tf.ensure_shape(img, [None, None, None]), channels)

    return decode


def decode_image(encoded: Any, image_format: Any, height: Any, width: Any, stored_channels: Any, channels: int | None = 3) -> Any:
    """Decode one record's image in a tf.data graph: JPEG/PNG/BMP/GIF by content, RAW by reshape."""
    return image_decoder(channels=channels)(encoded, image_format, height, width, stored_channels)


VERIFY_LEVELS = ("none", "framing", "full")


def _check_shards(files: list[str], comp: str, verify: str, man: Manifest | None, split: str) -> list[int | None]:
    """`load`'s checks before TensorFlow sees the files (see `verify`); raises DataError.

    Returns each file's record count where known (counted here, else from dataset.json).
    """
    listed = {os.fspath(r.path): (r.entry or {}).get("records") for r in man.shards(split)} if man else {}

    def one(f: str) -> int | None:
        want = listed.get(f)
        want = want if isinstance(want, int) and not isinstance(want, bool) else None
        try:
            if verify == "full":
                n = _verify_records(f, comp, man)
            elif verify == "framing" and comp == "none":
                n = check_framing(f)
            else:  # TensorFlow streams compressed files without reserving the claimed length
                return want
        except OSError as e:
            raise DataError(f"{f}: cannot read: {e.strerror or e}") from e
        if want is not None and want != n:
            raise DataError(f"{f}: holds {n:,} records, {MANIFEST} says {want:,}")
        return n

    if len(files) == 1:
        return [one(files[0])]
    with ThreadPoolExecutor(min(8, len(files))) as pool:  # file reads release the GIL
        return list(pool.map(one, files))  # raises the first file's error, in file order


_NOT_OURS = "is not a tf.train.Example with the img2tfrecord features"


def _checked_records(tf: Any, files: list[str], counts: list[int], compression_type: str, spec: dict[str, Any], image_of: Any, out: Any,
                     shuffle_files: bool, seed: int | None, cycle_length: int, deterministic: bool) -> Any:  # fmt: skip
    """`out(example, image)` of every record of `files`; one that cannot be read, parsed or decoded
    raises naming its shard, its index and, when it parses, its image/filename.

    TensorFlow's own errors name none of these: `DataLossError: corrupted record at 1234`,
    `Could not parse example input, value: '<the raw bytes>'` (which, when those bytes are not
    UTF-8, even surfaces as a UnicodeDecodeError), `Invalid JPEG data or crop window`. So each
    shard's errors are dropped where they happen (`ignore_errors`: an unreadable record ends the
    shard, one that does not parse or decode is left out), and the shard is cut at the record
    count dataset.json gives (`take`), after an element that raises: a shard that came up short
    reaches it, and then Python re-reads the shard to say which record failed and why.

    Nothing of this runs a function a record (tf.data runs each one ~25-40 us a record here), so
    the checks cost next to nothing while all is well: decoding is the shards' one function.
    """
    comp = compression_type.lower() or "none"
    names = tf.constant(files)
    sizes = tf.constant(counts, tf.int64)

    def decode(r: Any) -> Any:
        ex = tf.io.parse_single_example(r, spec)
        return out(ex, image_of(ex))

    def shard(s: Any) -> Any:
        read = tf.data.TFRecordDataset(names[s], compression_type=compression_type).ignore_errors()
        good = read.map(_graph(decode), num_parallel_calls=tf.data.AUTOTUNE, deterministic=True).ignore_errors()

        def short(*x: Any) -> Any:  # pulled only when the shard has fewer records than it should
            msg = tf.py_function(lambda s: _describe_short_shard(files[int(s)], counts[int(s)], comp, spec, image_of), [s], tf.string)
            with tf.control_dependencies([tf.debugging.Assert(False, [msg])]):
                return tf.nest.map_structure(tf.identity, x if len(x) > 1 else x[0])

        blank = tf.nest.map_structure(lambda sp: tf.zeros([d or 0 for d in sp.shape], sp.dtype), good.element_spec)
        return good.concatenate(tf.data.Dataset.from_tensors(blank).map(_graph(short))).take(sizes[s])

    ds = tf.data.Dataset.range(len(files))
    if shuffle_files:
        ds = ds.shuffle(len(files), seed=seed, reshuffle_each_iteration=True)
    return ds.interleave(_graph(shard), cycle_length=cycle_length, block_length=1, num_parallel_calls=tf.data.AUTOTUNE, deterministic=deterministic)


def _describe_short_shard(path: str, count: int, compression: str, spec: dict[str, Any], image_of: Any) -> str:
    """Why a shard gave load() fewer than its `count` records: the first one TensorFlow could not
    read, parse or decode, found by reading it again (Python, called from the graph only then)."""
    from img2tfrecord.inspector import FramingError, TFRecordFile  # noqa: PLC0415 - cycle

    tf = tensorflow()
    index = 0
    try:
        for rec in TFRecordFile(path, compression):
            index = rec.index
            what = f"{path}: record {index}"
            if not rec.crc_ok or rec.oversize:
                why = "its data CRC does not match" if not rec.crc_ok else f"{rec.skipped_length:,} bytes long"
                return f"{what} cannot be read (at byte {rec.offset:,}): {why}; `img2tfrecord inspect` shows more"
            try:
                kinds = feature_kinds(rec.data)  # ours first: TensorFlow's parser can fail with a UnicodeDecodeError
            except DecodeError:
                kinds = {}
            if any(kinds.get(key) != (kind, 1) for key, kind in FEATURE_TYPES.items()):
                return f"{what} {_NOT_OURS} (at byte {rec.offset:,}); `img2tfrecord inspect` shows what it holds"
            ex = tf.io.parse_single_example(rec.data, spec)
            try:
                image_of(ex)
            except tf.errors.OpError as e:
                name = ex["image/filename"].numpy().decode("utf-8", "backslashreplace")
                fmt = ex["image/format"].numpy().decode("ascii", "replace")
                why = (e.message or "").strip().splitlines()[0][:200]
                return (f"{what}: image/filename {name} ({fmt}, {len(ex['image/encoded'].numpy()):,} bytes) does not decode: {why}; "
                        "`img2tfrecord inspect --verify` shows more")  # fmt: skip
            index += 1
    except FramingError as e:
        return f"{path}: record {e.index} cannot be read (at byte {e.offset:,}): {e.message}; `img2tfrecord inspect` shows why"
    except OSError as e:
        return f"{path}: record {index} cannot be read: {e.strerror or e}"
    return f"{path}: record {index} cannot be read (cut short: it holds {index:,} of the {count:,} records {MANIFEST} lists)"


def _plain_records(tf: Any, files: list[str], compression_type: str, spec: dict[str, Any], image_of: Any, out: Any, shuffle_files: bool,
                   seed: int | None, cycle_length: int, deterministic: bool) -> Any:  # fmt: skip
    """`out(example, image)` of every record of `files`, unchecked: TensorFlow's own errors."""
    ds = tf.data.Dataset.from_tensor_slices(files)
    if shuffle_files:
        ds = ds.shuffle(len(files), seed=seed, reshuffle_each_iteration=True)
    read = _graph(lambda f: tf.data.TFRecordDataset(f, compression_type=compression_type))
    ds = ds.interleave(read, cycle_length=cycle_length, block_length=1, num_parallel_calls=tf.data.AUTOTUNE, deterministic=deterministic)

    def one(r: Any) -> Any:
        ex = tf.io.parse_single_example(r, spec)
        return out(ex, image_of(ex))

    return ds.map(_graph(one), num_parallel_calls=tf.data.AUTOTUNE, deterministic=deterministic)


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off while load() builds its graph.

    Right after `import tensorflow` (a million-odd objects) CPython is due a full collection, and
    graph building (thousands of ops and tensors that live on, no cycles to free) sets it off:
    here it walked TensorFlow's objects for ~0.15 s, a third of load()'s time to the first batch.
    Paused, that collection comes later, once, wherever the program allocates next.
    """
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _graph(fn: Any) -> Any:
    """A tf.data function as written: ours use `tf.cond`, not Python `if`, so AutoGraph's source
    rewriting (most of the time TensorFlow took to trace load()'s functions) is skipped."""
    return tensorflow().autograph.experimental.do_not_convert(fn)


def _verify_records(path: str, comp: str, man: Manifest | None) -> int:
    """Read every record of one shard in Python and check what TensorFlow would fail on; return the count.

    TensorFlow's errors (`corrupted record at 1234`, `Could not parse example input`) name
    neither the file nor the record, so `load(verify="full")` finds them first.
    """
    from img2tfrecord.inspector import FramingError, TFRecordFile, image_problem, pixel_limit  # noqa: PLC0415 - cycle
    from img2tfrecord.schema import Example  # noqa: PLC0415

    n = 0
    max_pixels = pixel_limit(man)
    unzipped = "" if comp == "none" else " (decompressed)"
    try:
        for rec in TFRecordFile(path, comp):
            where = f"{path}: record {rec.index} at byte {rec.offset:,}{unzipped}"
            if rec.oversize:
                raise DataError(f"{where}: {rec.length:,} data bytes, more than verify='full' reads into memory")
            if not rec.crc_ok:
                raise DataError(f"{where}: data CRC mismatch: the record's bytes are corrupt")
            ex = Example()
            try:
                ex.ParseFromString(rec.data)
            except DecodeError:
                raise DataError(f"{where}: not a tf.train.Example") from None
            fm = ex.features.feature
            for key, kind in FEATURE_TYPES.items():
                got = fm[key].WhichOneof("kind") if key in fm else None
                if got != kind + "_list" or len(getattr(fm[key], got).value) != 1:
                    raise DataError(f"{where}: feature {key} is not one {kind} value")
            problem = image_problem(
                fm["image/encoded"].bytes_list.value[0],
                fm["image/format"].bytes_list.value[0].decode("ascii", "replace"),  # load() compares it exactly
                fm["image/height"].int64_list.value[0],
                fm["image/width"].int64_list.value[0],
                fm["image/channels"].int64_list.value[0],
                max_pixels,
            )
            if problem:
                raise DataError(f"{where}: {problem}")
            n += 1
    except FramingError as e:
        raise DataError(f"{path}: record {e.index} at byte {e.offset:,}{unzipped}: {e.message}") from None
    return n


def load(
    path: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    split: str = "train",
    *,
    image_size: int | tuple[int, int] | None = None,
    channels: int | None = 3,
    shuffle_files: bool = False,
    seed: int | None = None,
    as_dict: bool = False,
    compression: str = "auto",
    resize_method: str = "bilinear",
    cycle_length: int | None = None,
    deterministic: bool | None = None,
    verify: str = "framing",
) -> "tf.data.Dataset":
    """A `tf.data.Dataset` of `(image, label)` from an img2tfrecord output directory (or shard files).

    Args:
      path: output directory (shards from its dataset.json, or `{split}-*-of-*` files), a shard
        file, a glob, or a list of shard files.
      split: which split of an output directory to read.
      image_size: `(height, width)` (or one int for square) to resize to; images are then float32
        in [0, 255] like Keras' `image_dataset_from_directory`. None keeps uint8 at stored size.
      channels: 1, 2, 3 or 4 to convert every image to (grey <-> RGB, alpha added/dropped),
        None to keep each image's stored channels.
      shuffle_files: read the shards in a random order (seeded by `seed`) each epoch.
      as_dict: yield a dict of every schema field plus "image" (decoded) and "label".
      compression: "auto" (dataset.json, else sniffed from the first file), "none", "gzip", "zlib".
      cycle_length: shards read in parallel (default: all, at most 16).
      deterministic: passed to `interleave`/`map`; default keeps order unless `shuffle_files`.
      verify: what is checked in Python before TensorFlow reads the shards (a problem raises
        DataError naming file, record and byte offset). "framing" (default): the record headers
        of uncompressed shards, 12 bytes a record, because TensorFlow allocates whatever length a
        header claims and can crash on a malicious one; and each shard's record count against
        dataset.json. "full": every record too (data CRC, our schema, RAW sizes, image headers
        within dataset.json's max_pixels), costing a read of the whole split. "none": nothing.

    The dataset knows its length when dataset.json gives the split's record count, so
    `len(ds)` works and a short read fails loudly instead of silently training on less.
    With every shard's record count known (dataset.json, or verify counting them), a record
    TensorFlow cannot read, parse or decode raises `tf.errors.InvalidArgumentError` naming the
    shard, the record and its image/filename once that shard is done (see `_checked_records`).
    """
    tf = tensorflow()
    if channels not in (None, 1, 2, 3, 4):
        raise UsageError(f"load: channels must be 1, 2, 3, 4 or None, not {channels!r}")
    if isinstance(image_size, int):
        image_size = (image_size, image_size)
    files, man, records = _split_files(path, split)
    comp = compression.lower()
    if comp == "auto":
        if man is not None:
            comp = man.compression
        else:
            kinds = {detect_compression(f) for f in files}
            if len(kinds) > 1:
                raise DataError(f"load: the shards mix compressions ({', '.join(sorted(kinds))}); load them separately")
            comp = kinds.pop()
    if comp not in COMPRESSIONS:
        raise UsageError(f"load: compression must be auto, none, gzip or zlib, not {compression!r}")
    if verify not in VERIFY_LEVELS:
        raise UsageError(f"load: verify must be {', '.join(VERIFY_LEVELS)}, not {verify!r}")
    counts = _check_shards(files, comp, verify, man, split) if verify != "none" else [None] * len(files)
    compression_type = "" if comp == "none" else comp.upper()
    if deterministic is None:
        deterministic = not shuffle_files
    with _collector_paused():  # see _collector_paused
        spec = features_spec()
        decode = image_decoder(man.formats if man else None, man.stored_channels if man else None, channels)

        def image_of(ex: Any) -> Any:
            img = decode(ex["image/encoded"], ex["image/format"], ex["image/height"], ex["image/width"], ex["image/channels"])
            return img if image_size is None else tf.image.resize(img, image_size, method=resize_method)

        def out(ex: Any, img: Any) -> Any:
            return {**ex, "image": img, "label": ex["image/class/label"]} if as_dict else (img, ex["image/class/label"])

        cycle = cycle_length or min(len(files), 16)
        if None in counts:  # no count to hold TensorFlow's reads against: its own errors it is
            ds = _plain_records(tf, files, compression_type, spec, image_of, out, shuffle_files, seed, cycle, deterministic)
        else:
            ds = _checked_records(tf, files, counts, compression_type, spec, image_of, out, shuffle_files, seed, cycle, deterministic)
        if records is not None:
            ds = ds.apply(tf.data.experimental.assert_cardinality(records))
        ds = ds.prefetch(tf.data.AUTOTUNE)
        if man is not None:
            ds.class_names = man.classes  # like Keras' image_dataset_from_directory
        return ds
