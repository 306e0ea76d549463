"""Reading datasets back: shard discovery, compression sniffing, and the one-line `tf.data` loader.

Discovery and sniffing are pure Python (the `inspect` command uses them without TensorFlow);
only `features_spec()` and `load()` import TensorFlow, lazily, through `tf_import.tensorflow()`.
"""

from __future__ import annotations

import contextlib
import gc
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, NamedTuple

from google.protobuf.message import DecodeError

from img2tfrecord import cstderr, fs
from img2tfrecord.errors import DataError, UsageError
from img2tfrecord.format.framing import COMPRESSIONS, check_framing, detect_compression, read_records
from img2tfrecord.format.layout import Manifest
from img2tfrecord.format.load_files import Source, identity, replaced, split_files
from img2tfrecord.format.manifest import LABELS_NAME, MANIFEST_NAME
from img2tfrecord.format.schema import FORMAT_RAW, Declared, declared_features, feature_kinds
from img2tfrecord.format.seg_masks import MASK_KEY, mask_decoder, resized_mask
from img2tfrecord.tf_import import tensorflow

if TYPE_CHECKING:  # pragma: no cover
    import tensorflow as tf

MANIFEST, LABELS = MANIFEST_NAME, LABELS_NAME  # the names convert writes


def features_spec(metadata: dict[str, Any] | None = None) -> dict[str, Any]:
    """The `tf.io.parse_single_example` spec of our schema: every key required, one value each, but
    for the lists a dataset made with a metadata file declares (`metadata`: dataset.json's
    entry; conversion.plan.metadata): its `image/<column>` features and, multi-label, the labels,
    each a 1-D tensor of any length (`tf.io.RaggedFeature`)."""
    tf = tensorflow()
    dtypes = {"bytes": tf.string, "int64": tf.int64, "float": tf.float32}
    return {
        key: tf.io.RaggedFeature(dtypes[d.kind]) if d.is_list else tf.io.FixedLenFeature([], dtypes[d.kind])
        for key, d in declared_features(metadata).items()
    }


def _unfit(kinds: dict[str, tuple[str | None, int]], declared: dict[str, Declared]) -> bool:
    """Whether a record's feature kinds (`feature_kinds`) miss what the dataset declares."""
    for key, d in declared.items():
        got = kinds.get(key)
        if got is None or (got[0] not in (d.kind, None) if d.is_list else got != (d.kind, 1)):
            return True
    return False


def _check_split_total(man: Manifest, split: str, records: int) -> None:
    """DataError (one line naming dataset.json) when the split's record count is not the sum of its
    shards' counts there: load() tells tf.data the count it reads, and a wrong one would surface as
    TensorFlow's FailedPreconditionError once the shards run out. After the shards' own checks,
    which name the shard whose count is wrong."""
    listed = [(r.entry or {}).get("records") for r in man.shards(split)]
    counts = [n for n in listed if isinstance(n, int) and not isinstance(n, bool)]
    if len(counts) == len(listed) and sum(counts) != records:
        raise DataError(
            f"{man.dir / MANIFEST}: splits.{split}.records is {records:,}, but its shards' records add up to "
            f"{sum(counts):,}; the file was edited or damaged (convert again to rebuild it)"
        )


def _to_channels(tf: Any, img: Any, channels: int | None, have: int | None = None) -> Any:
    """Convert a uint8 or uint16 HxWxC image of 1-4 channels to `channels` (None: leave it).

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
        opaque = lambda: tf.fill(tf.concat([tf.shape(img)[:2], [1]], 0), tf.constant(img.dtype.max, img.dtype))
        base = tf.concat([base, pick(has_alpha, lambda: img[..., -1:], opaque)], axis=-1)
    return tf.ensure_shape(base, [None, None, channels])


def image_decoder(
    formats: Iterable[str] | None = None,
    stored_channels: int | None = None,
    channels: int | None = 3,
    dtype: str = "uint8",
) -> Any:
    """A graph function (encoded, format, height, width, stored channels) -> HxWx`channels` image
    of `dtype` ("uint8", or "uint16" for datasets with 16-bit PNGs: 8-bit images are then scaled
    up as `tf.image.convert_image_dtype` does, v * 257; a 16-bit PNG decoded as uint8 is v >> 8).

    JPEG/PNG/BMP/GIF are decoded by content, RAW by reshaping. `formats` (the `image/format`
    values a manifest lists) and `stored_channels` (what `--channels` made every image) let it
    drop the branches that cannot occur: tracing those branches was most of load()'s start-up.
    With channels=3 TensorFlow's decoders convert grey and alpha themselves (the same pixels as
    `_to_channels`: grey replicated, alpha dropped); other conversions are `_to_channels`'.
    """
    tf = tensorflow()
    if dtype not in ("uint8", "uint16"):
        raise UsageError(f"load: dtype must be uint8 or uint16, not {dtype!r}")
    out_dtype = tf.uint16 if dtype == "uint16" else tf.uint8
    kinds = set(formats) if formats else None
    native = 3 if channels == 3 else 0  # channels decoders convert to exactly as _to_channels does

    def widen(img: Any) -> Any:  # RAW and JPEG are 8-bit by nature
        return img if dtype == "uint8" else tf.image.convert_image_dtype(img, out_dtype)

    def raw(encoded: Any, height: Any, width: Any, stored: Any) -> Any:
        return widen(tf.reshape(tf.io.decode_raw(encoded, tf.uint8), tf.stack([height, width, stored])))

    if kinds == {FORMAT_RAW}:

        def decode(encoded: Any, image_format: Any, height: Any, width: Any, stored: Any) -> Any:
            img = tf.ensure_shape(raw(encoded, height, width, stored), [None, None, stored_channels])
            return _to_channels(tf, img, channels, stored_channels)
    elif kinds and FORMAT_RAW not in kinds:
        op = (
            (lambda b: widen(tf.io.decode_jpeg(b, channels=native)))
            if kinds == {"JPEG"}
            else (lambda b: tf.io.decode_image(b, channels=native, dtype=out_dtype, expand_animations=False))
        )
        have = 3 if native else stored_channels

        def decode(encoded: Any, image_format: Any, height: Any, width: Any, stored: Any) -> Any:
            return _to_channels(tf, tf.ensure_shape(op(encoded), [None, None, have]), channels, have)
    else:  # no manifest, or one that mixes RAW with encoded images: decide per record

        def decode(encoded: Any, image_format: Any, height: Any, width: Any, stored: Any) -> Any:
            coded = lambda: tf.io.decode_image(encoded, channels=0, expand_animations=False, dtype=out_dtype)
            img = tf.cond(tf.equal(image_format, FORMAT_RAW), lambda: raw(encoded, height, width, stored), coded)
            return _to_channels(tf, tf.ensure_shape(img, [None, None, None]), channels)

    return decode


def decode_image(
    encoded: Any, image_format: Any, height: Any, width: Any, stored_channels: Any, channels: int | None = 3
) -> Any:
    """Decode one record's image in a tf.data graph: JPEG/PNG/BMP/GIF by content, RAW by reshape."""
    return image_decoder(channels=channels)(encoded, image_format, height, width, stored_channels)


VERIFY_LEVELS = ("none", "framing", "full")


def _check_shards(src: Source, comp: str, verify: str, split: str) -> list[int | None]:
    """`load`'s checks before TensorFlow sees the files (see `verify`); raises DataError.

    Returns each file's record count where known (counted here, else from dataset.json).
    """
    man = src.man
    listed = {os.fspath(r.path): (r.entry or {}).get("records") for r in man.shards(split)} if man else {}
    reads = dict(zip(src.shown, src.reads))

    def one(f: str) -> int | None:
        want = listed.get(f)
        want = want if isinstance(want, int) and not isinstance(want, bool) else None
        try:
            if verify == "full":
                n = _verify_records(reads[f], comp, man, f)
            elif verify == "framing" and comp == "none":
                n = check_framing(reads[f])
            else:  # TensorFlow streams compressed files without reserving the claimed length
                return want
        except OSError as e:
            raise DataError(f"{f}: cannot read: {e.strerror or e}") from e
        if want is not None and want != n:
            raise DataError(f"{f}: holds {n:,} records, {MANIFEST} says {want:,}")
        return n

    if len(src.shown) == 1:
        return [one(src.shown[0])]
    with ThreadPoolExecutor(min(8, len(src.shown))) as pool:  # file reads release the GIL
        return list(pool.map(one, src.shown))  # raises the first file's error, in file order


def _opened(tf: Any, src: Source) -> Any:
    """A graph function: shard number -> the file name TensorFlow opens, once that file is checked
    (in Python, once a shard) to be the one load() found: a shard removed or replaced since (a
    version published in place, or with no folder held open) stops the reader with our one line,
    before TensorFlow opens it (whose `ignore_errors` would retry a missing file forever)."""
    names = tf.constant(src.reads)
    found = [identity(f) for f in src.reads]

    def changed(s: Any) -> str:
        i = int(s)
        if found[i] is None or identity(src.reads[i]) == found[i]:
            return ""  # the same file (or none when load() was called either: TensorFlow's own error)
        return replaced(src, i)

    def opened(s: Any) -> Any:
        said = tf.py_function(changed, [s], tf.string)
        with tf.control_dependencies([tf.debugging.Assert(tf.equal(said, ""), [said])]):
            return tf.identity(names[s])

    return opened


_NOT_OURS = "is not a tf.train.Example with the img2tfrecord features"


def _checked_records(tf: Any, src: Source, counts: list[int], reading: _Reading, order: _Order) -> Any:
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
    compression_type, spec, image_of, out = reading.compression_type, reading.spec, reading.image_of, reading.out
    comp = compression_type.lower() or "none"
    files = src.reads
    declared = declared_features(src.man.data.get("metadata") if src.man else None)
    opened = _opened(tf, src)
    sizes = tf.constant(counts, tf.int64)

    def decode(r: Any) -> Any:
        ex = tf.io.parse_single_example(r, spec)
        return out(ex, image_of(ex))

    def shard(s: Any) -> Any:
        read = _shard_reader(tf, src, compression_type)(opened(s)).ignore_errors()
        good = read.map(_graph(decode), num_parallel_calls=tf.data.AUTOTUNE, deterministic=True).ignore_errors()

        def short(*x: Any) -> Any:  # pulled only when the shard has fewer records than it should
            msg = tf.py_function(
                lambda s: _describe_short_shard(
                    files[int(s)], counts[int(s)], comp, spec, image_of, src.shown[int(s)], declared
                ),
                [s],
                tf.string,
            )
            with tf.control_dependencies([tf.debugging.Assert(False, [msg])]):
                return tf.nest.map_structure(tf.identity, x if len(x) > 1 else x[0])

        blank = tf.nest.map_structure(lambda sp: tf.zeros([d or 0 for d in sp.shape], sp.dtype), good.element_spec)
        return good.concatenate(tf.data.Dataset.from_tensors(blank).map(_graph(short))).take(sizes[s])

    ds = tf.data.Dataset.range(len(files))
    if order.shuffle_files:
        ds = ds.shuffle(len(files), seed=order.seed, reshuffle_each_iteration=True)
    return ds.interleave(
        _graph(shard),
        cycle_length=order.cycle_length,
        block_length=1,
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=order.deterministic,
    )


def _describe_short_shard(
    read: str,
    count: int,
    compression: str,
    spec: dict[str, Any],
    image_of: Any,
    path: str,
    declared: dict[str, Declared] | None = None,
) -> str:
    """Why a shard gave load() fewer than its `count` records: the first one TensorFlow could not
    read, parse or decode, found by reading it again (Python, called from the graph only then)."""
    from img2tfrecord.format.framing import FramingError, TFRecordFile

    tf = tensorflow()
    declared = declared or declared_features(None)
    index = 0
    try:
        for rec in TFRecordFile(read, compression):
            index = rec.index
            what = f"{path}: record {index}"
            if not rec.crc_ok or rec.oversize:
                why = "its data CRC does not match" if not rec.crc_ok else f"{rec.skipped_length:,} bytes long"
                return f"{what} cannot be read (at byte {rec.offset:,}): {why}; `img2tfrecord inspect` shows more"
            try:
                kinds = feature_kinds(rec.data)  # ours first: TensorFlow's parser can fail with a UnicodeDecodeError
            except DecodeError:
                kinds = {}
            if _unfit(kinds, declared):
                return f"{what} {_NOT_OURS} (at byte {rec.offset:,}); `img2tfrecord inspect` shows what it holds"
            ex = tf.io.parse_single_example(rec.data, spec)
            try:
                image_of(ex)
            except tf.errors.OpError as e:
                name = ex["image/filename"].numpy().decode("utf-8", "backslashreplace")
                fmt = ex["image/format"].numpy().decode("ascii", "replace")
                why = (e.message or "").strip().splitlines()[0][:200]
                return (
                    f"{what}: image/filename {name} ({fmt}, {len(ex['image/encoded'].numpy()):,} bytes) does not decode: {why}; "
                    "`img2tfrecord inspect --verify` shows more"
                )
            index += 1
    except FramingError as e:
        return f"{path}: record {e.index} cannot be read (at byte {e.offset:,}): {e.message}; `img2tfrecord inspect` shows why"
    except OSError as e:
        return f"{path}: record {index} cannot be read: {e.strerror or e}"
    return f"{path}: record {index} cannot be read (cut short: it holds {index:,} of the {count:,} records {MANIFEST} lists)"


def _plain_records(tf: Any, src: Source, reading: _Reading, order: _Order) -> Any:
    """`out(example, image)` of every record of `files`, unchecked: TensorFlow's own errors."""
    ds = tf.data.Dataset.range(len(src.reads))
    if order.shuffle_files:
        ds = ds.shuffle(len(src.reads), seed=order.seed, reshuffle_each_iteration=True)
    opened = _opened(tf, src)
    records = _shard_reader(tf, src, reading.compression_type)
    read = _graph(lambda s: records(opened(s)))
    ds = ds.interleave(
        read,
        cycle_length=order.cycle_length,
        block_length=1,
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=order.deterministic,
    )
    spec, image_of, out = reading.spec, reading.image_of, reading.out

    def one(r: Any) -> Any:
        ex = tf.io.parse_single_example(r, spec)
        return out(ex, image_of(ex))

    return ds.map(_graph(one), num_parallel_calls=tf.data.AUTOTUNE, deterministic=order.deterministic)


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


def _shard_reader(tf: Any, src: Source, compression_type: str) -> Callable[[Any], Any]:
    """A shard's file name -> its records: TensorFlow's reader, or, for an object store TensorFlow
    cannot open (s3://: no tensorflow-io), our streaming reader over fsspec in a generator."""
    if not any(fs.is_remote(f) and not fs.via_tensorflow(f) for f in src.reads):
        return lambda name: tf.data.TFRecordDataset(name, compression_type=compression_type)
    comp = compression_type.lower() or "none"

    def records(name: bytes) -> Iterator[bytes]:
        yield from read_records(name.decode(), comp)

    spec = tf.TensorSpec([], tf.string)
    return lambda name: tf.data.Dataset.from_generator(records, args=(name,), output_signature=spec)


def _graph(fn: Any) -> Any:
    """A tf.data function as written: ours use `tf.cond`, not Python `if`, so AutoGraph's source
    rewriting (most of the time TensorFlow took to trace load()'s functions) is skipped."""
    return tensorflow().autograph.experimental.do_not_convert(fn)


def _verify_records(path: str, comp: str, man: Manifest | None, shown: str = "") -> int:
    """Read every record of one shard in Python and check what TensorFlow would fail on; return the count.

    TensorFlow's errors (`corrupted record at 1234`, `Could not parse example input`) name
    neither the file nor the record, so `load(verify="full")` finds them first.
    """
    from img2tfrecord.format.framing import FramingError, TFRecordFile
    from img2tfrecord.format.images import image_problem
    from img2tfrecord.format.layout import pixel_limit
    from img2tfrecord.format.schema import Example

    n = 0
    read, path = path, shown or path
    max_pixels = pixel_limit(man)
    declared = declared_features(man.data.get("metadata") if man else None)
    unzipped = "" if comp == "none" else " (decompressed)"
    try:
        for rec in TFRecordFile(read, comp):
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
            for key, d in declared.items():
                got = fm[key].WhichOneof("kind") if key in fm else None
                if got != d.kind + "_list" or (not d.is_list and len(getattr(fm[key], got).value) != 1):
                    raise DataError(
                        f"{where}: feature {key} is not {'a list of' if d.is_list else 'one'} {d.kind} value"
                    )
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
    dtype: str | None = None,
) -> tf.data.Dataset:
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
      as_dict: yield a dict of every schema field plus "image" (decoded) and "label"; a segmentation
        dataset's also "segmentation_mask" (HxWx1 class ids, uint8 or uint16, resized with the image).
      compression: "auto" (dataset.json, else sniffed from the first file), "none", "gzip", "zlib".
      cycle_length: shards read in parallel (default: all, at most 16).
      deterministic: passed to `interleave`/`map`; default keeps order unless `shuffle_files`.
      verify: what is checked in Python before TensorFlow reads the shards (a problem raises
        DataError naming file, record and byte offset). "framing" (default): the record headers
        of uncompressed shards, 12 bytes a record, because TensorFlow allocates whatever length a
        header claims and can crash on a malicious one; and each shard's record count against
        dataset.json. "full": every record too (data CRC, our schema, RAW sizes, image headers
        within dataset.json's max_pixels), costing a read of the whole split. "none": nothing.
      dtype: "uint8" or "uint16" images; default dataset.json's `dtype` (uint16 when any record
        is a 16-bit PNG: 8-bit images are then scaled by 257), else uint8. Ignored with
        `image_size` (float32 then).

    The dataset knows its length when dataset.json gives the split's record count, so
    `len(ds)` works and a short read fails loudly instead of silently training on less.
    With every shard's record count known (dataset.json, or verify counting them), a record
    TensorFlow cannot read, parse or decode raises `tf.errors.InvalidArgumentError` naming the
    shard, the record and its image/filename once that shard is done (see `_checked_records`).

    TensorFlow's libjpeg prints warnings ("Corrupt JPEG data: ...") straight to file descriptor 2
    while the dataset is iterated, long after this returns; so from the first call on, fd 2 of
    this process is captured for good (`cstderr`; Python's sys.stderr still reaches the terminal).
    """
    cstderr.install()
    tf = tensorflow()
    if channels not in (None, 1, 2, 3, 4):
        raise UsageError(f"load: channels must be 1, 2, 3, 4 or None, not {channels!r}")
    for p in [path] if isinstance(path, (str, os.PathLike)) else path:  # a bucket that does not answer: one line
        fs.check_remote(os.fspath(p), "dataset")
    src = split_files(path, split)
    man, records, holder = src.man, src.records, src.holder
    # the open folder is held by the dataset (and what is made of it, iterators included), never by
    # a graph function: TensorFlow keeps the Python functions of eager graphs for good
    src = src._replace(holder=None)
    comp = _compression(src, compression)
    if verify not in VERIFY_LEVELS:
        raise UsageError(f"load: verify must be {', '.join(VERIFY_LEVELS)}, not {verify!r}")
    counts = _check_shards(src, comp, verify, split) if verify != "none" else [None] * len(src.shown)
    if records is not None and man is not None:
        _check_split_total(man, split, records)
    size = (image_size, image_size) if isinstance(image_size, int) else image_size
    want = dtype or (str(man.data.get("dtype") or "uint8") if man else "uint8")
    if deterministic is None:
        deterministic = not shuffle_files or seed is not None  # a seed asks for a repeatable order
    order = _Order(shuffle_files, seed, cycle_length or min(len(src.shown), 16), deterministic)
    with _collector_paused():  # see _collector_paused
        ds = _records(tf, src, counts, comp, _Elements(size, channels, want, resize_method, as_dict), order)
        if records is not None:
            ds = ds.apply(tf.data.experimental.assert_cardinality(records))
        ds = ds.prefetch(tf.data.AUTOTUNE)
        if man is not None:
            ds.class_names = man.classes  # like Keras' image_dataset_from_directory
        ds._img2tfrecord_folder = holder  # the folder read stays open while the dataset lives
        return ds


def _compression(src: Source, compression: str) -> str:
    """load()'s `compression`, checked; "auto" is dataset.json's, else what the shards' first bytes
    show (one kind: TensorFlow reads all the files of a dataset with one)."""
    comp = compression.lower()
    if comp == "auto":
        if src.man is not None:
            comp = src.man.compression
        else:
            kinds = {detect_compression(f) for f in src.reads}
            if len(kinds) > 1:
                raise DataError(f"load: the shards mix compressions ({', '.join(sorted(kinds))}); load them separately")
            comp = kinds.pop()
    if comp not in COMPRESSIONS:
        raise UsageError(f"load: compression must be auto, none, gzip or zlib, not {compression!r}")
    return comp


class _Elements(NamedTuple):
    """What load() makes of each record (its keywords, checked): built into the graph once."""

    image_size: tuple[int, int] | None
    channels: int | None
    dtype: str  # "uint8" or "uint16": asked for, else dataset.json's
    resize_method: str
    as_dict: bool


class _Order(NamedTuple):
    """In which order load() reads the shards (its keywords, `deterministic` and `cycle_length` resolved)."""

    shuffle_files: bool
    seed: int | None
    cycle_length: int
    deterministic: bool


class _Reading(NamedTuple):
    """How each record of a shard becomes an element: its framing, its parse spec, its image and the
    element made of the parsed example and that image (`_records` builds it from `_Elements`)."""

    compression_type: str  # TensorFlow's: "", "GZIP" or "ZLIB"
    spec: dict[str, Any]  # features_spec()
    image_of: Callable[[Any], Any]  # parsed example -> image tensor
    out: Callable[[Any, Any], Any]  # (parsed example, image) -> the element


def _records(tf: Any, src: Source, counts: Sequence[int | None], comp: str, elements: _Elements, order: _Order) -> Any:
    """The dataset of `elements`, one per record: checked against each shard's record count
    when every count is known, else with TensorFlow's own errors."""
    compression_type = "" if comp == "none" else comp.upper()
    man = src.man
    spec = features_spec(man.data.get("metadata") if man else None)
    decode = image_decoder(
        man.formats if man else None, man.stored_channels if man else None, elements.channels, elements.dtype
    )
    image_size, resize_method, as_dict = elements.image_size, elements.resize_method, elements.as_dict
    mask_of = mask_decoder(tf, man.data.get("metadata") if man else None)

    def image_of(ex: Any) -> Any:
        img = decode(
            ex["image/encoded"], ex["image/format"], ex["image/height"], ex["image/width"], ex["image/channels"]
        )
        return img if image_size is None else tf.image.resize(img, image_size, method=resize_method)

    def out(ex: Any, img: Any) -> Any:
        if not as_dict:
            return img, ex["image/class/label"]
        mask = {MASK_KEY: resized_mask(tf, mask_of(ex), image_size)} if mask_of else {}
        return {**ex, "image": img, "label": ex["image/class/label"], **mask}

    reading = _Reading(compression_type, spec, image_of, out)
    if None in counts:  # no count to hold TensorFlow's reads against: its own errors it is
        return _plain_records(tf, src, reading, order)
    known = [n for n in counts if n is not None]  # every count is known on this branch
    return _checked_records(tf, src, known, reading, order)
