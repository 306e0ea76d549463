"""convert(): walk -> encode (in parallel, TensorFlow-free workers) -> write -> publish.

One process owns TensorFlow and the TFRecordWriters; worker processes only read, validate and
serialize images (Pillow + protobuf, ~60 MB each instead of ~600 MB with TensorFlow). Work is
handed out in small chunks in plan order and results come back in that order through a bounded
window, so memory stays flat whatever the dataset size and the output is byte-identical for any
number of workers. TensorFlow is imported in a background thread while the first chunks are
being encoded, so its ~2.5 s start-up overlaps useful work.
"""

from __future__ import annotations

import collections
import multiprocessing
import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict
from typing import Any

from img2tfrecord import encoder, writer
from img2tfrecord.encoder import EncodeOptions, Result, Task
from img2tfrecord.errors import DataError, UsageError
from img2tfrecord.manifest import LABELS_NAME, MANIFEST_NAME, build_manifest, labels_text, manifest_text
from img2tfrecord.tf_import import tensorflow
from img2tfrecord.walker import Discovery, ImageItem, discover, parse_split_spec, read_labels_file

CHUNK = 8  # images per task: amortizes IPC, keeps the in-order window fine-grained
WINDOW_PER_WORKER = 8  # chunks in flight per worker
PREFETCH_BYTES = 128 * 1024 * 1024  # results held while TensorFlow is still importing


def parse_resize(value: str | int | tuple[int, int] | None) -> int | tuple[int, int] | None:
    """'256' -> 256 (shorter side); '224x224' -> (224, 224) (exact)."""
    if value is None or isinstance(value, (int, tuple)):
        ok = value is None or (isinstance(value, int) and value > 0) or (isinstance(value, tuple) and min(value) > 0)
        if not ok:
            raise UsageError(f"bad --resize {value!r}: sizes must be positive")
        return value
    m = re.fullmatch(r"\s*(\d+)\s*(?:[xX]\s*(\d+)\s*)?", str(value))
    if not m or int(m.group(1)) == 0 or (m.group(2) is not None and int(m.group(2)) == 0):
        raise UsageError(f"bad --resize {value!r}: use N (shorter side to N) or WxH, e.g. 256 or 224x224")
    return int(m.group(1)) if m.group(2) is None else (int(m.group(1)), int(m.group(2)))


def parse_shards(value: str | int | dict[str, int] | None) -> int | dict[str, int] | None:
    """'16' -> 16 in total; 'train=16,validation=2' -> per split."""
    if value is None or isinstance(value, dict) or isinstance(value, int):
        counts = value.values() if isinstance(value, dict) else [value] if value is not None else []
        if any(not isinstance(c, int) or c < 1 for c in counts):
            raise UsageError(f"bad --shards {value!r}: shard counts must be whole numbers >= 1")
        return value
    text = str(value).strip()
    if text.isdigit():
        return parse_shards(int(text))
    out: dict[str, int] = {}
    for part in text.split(","):
        name, sep, n = part.strip().partition("=")
        if not sep or not n.strip().isdigit():
            raise UsageError(f"bad --shards {value!r}: use N or e.g. train=16,validation=2")
        out[name.strip()] = int(n)
    return parse_shards(out)


def _display(name: str) -> str:
    """A file or class name as valid UTF-8 text (non-UTF-8 bytes shown as \\xNN)."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


class _Encoder:
    """Ordered, bounded parallel map of `encode_chunk` over the plan (in-process when workers=1)."""

    def __init__(self, opts: EncodeOptions, workers: int) -> None:
        self.opts = opts
        self.workers = workers
        self.pool = None
        if workers > 1:
            ctx = multiprocessing.get_context("spawn")  # never fork a process that runs TensorFlow threads
            self.pool = ctx.Pool(workers, initializer=encoder.init_worker, initargs=(opts,))

    def map(self, tasks: list[Task]) -> Iterator[Result]:
        chunks = (tasks[i : i + CHUNK] for i in range(0, len(tasks), CHUNK))
        if self.pool is None:
            for chunk in chunks:
                yield from (encoder.encode_task(t, self.opts) for t in chunk)
            return
        window: collections.deque = collections.deque()
        limit = self.workers * WINDOW_PER_WORKER
        for chunk in chunks:
            window.append(self.pool.apply_async(encoder.encode_chunk, (chunk,)))
            if len(window) >= limit:
                yield from window.popleft().get()
        while window:
            yield from window.popleft().get()

    def close(self, terminate: bool = False) -> None:
        if self.pool is not None:
            if terminate:
                self.pool.terminate()
            else:
                self.pool.close()
            self.pool.join()
            self.pool = None


def _options_record(opts: EncodeOptions, **more: Any) -> dict[str, Any]:
    d = asdict(opts)
    d["resize"] = list(d["resize"]) if isinstance(d["resize"], tuple) else d["resize"]
    d.update(more)
    return d


def convert(
    input_dir: str,
    output_dir: str,
    *,
    shards: str | int | dict[str, int] | None = None,
    split: str | dict[str, float] | None = None,
    seed: int = 0,
    label_offset: int = 0,
    labels: str | list[str] | None = None,
    encoding: str = "keep",
    quality: int = 95,
    resize: str | int | tuple[int, int] | None = None,
    channels: str = "keep",
    max_pixels: int = 100_000_000,
    validate: bool = True,
    strict: bool = False,
    compression: str | None = None,
    index: bool = False,
    overwrite: bool = False,
    workers: int | None = None,
    dry_run: bool = False,
    on_event: Callable[[str, str], None] | None = None,
    progress: Callable[[int, int, int], None] | None = None,
) -> dict[str, Any]:
    """Convert an image folder into a sharded TFRecord dataset and return the run's summary.

    `on_event(kind, message)` receives "warning" and "skipped" messages as they happen;
    `progress(images, bytes_read, total)` is called after each image. Raises UsageError (bad options,
    no images, output exists) or DataError (--strict with bad images, I/O failure).
    """
    t_start = time.perf_counter()
    emit = on_event or (lambda kind, msg: None)
    # ---- options ----
    if encoding not in encoder.ENCODINGS:
        raise UsageError(f"bad --encoding {encoding!r}: choose one of {', '.join(encoder.ENCODINGS)}")
    if str(channels) not in encoder.CHANNEL_CHOICES:
        raise UsageError(f"bad --channels {channels!r}: choose keep, 1 or 3")
    if not 1 <= quality <= 100:
        raise UsageError(f"bad --quality {quality}: choose 1..100")
    if max_pixels < 1:
        raise UsageError(f"bad --max-pixels {max_pixels}: must be positive")
    if compression not in writer.COMPRESSIONS:
        raise UsageError(f"bad --compression {compression!r}: choose gzip or zlib")
    if index and compression:
        raise UsageError("--index describes uncompressed shards (DALI reads no compressed TFRecords): drop --compression or --index")
    workers = workers or os.cpu_count() or 1
    if workers < 1:
        raise UsageError(f"bad --workers {workers}: must be >= 1")
    opts = EncodeOptions(
        encoding=encoding, quality=quality, resize=parse_resize(resize), channels=str(channels),
        max_pixels=max_pixels, validate=validate,
    )  # fmt: skip
    shard_request = parse_shards(shards)
    fractions = parse_split_spec(split) if isinstance(split, str) else split
    class_list = read_labels_file(labels) if isinstance(labels, str) else labels
    in_abs, out_abs = os.path.realpath(input_dir), os.path.realpath(output_dir)
    if out_abs == in_abs or out_abs.startswith(in_abs + os.sep):
        raise UsageError(f"output {output_dir} is inside input {input_dir}: the tool would read its own output; choose another folder")

    # ---- walk and plan ----
    found: Discovery = discover(input_dir, split=fractions, seed=seed, label_offset=label_offset, labels=class_list)
    for w in found.warnings:
        emit("warning", w)
    split_bytes = {s: _estimate_bytes(items, opts) for s, items in found.splits.items()}
    counts, shard_warnings = writer.auto_shard_counts(split_bytes, {s: len(v) for s, v in found.splits.items()}, shard_request)
    for w in shard_warnings:
        emit("warning", w)
    for s, items in found.splits.items():
        if not items:
            emit("warning", f"split {s} has no images; no shards are written for it")
    plan = {s: writer.shard_bounds(len(items), counts[s]) for s, items in found.splits.items() if items}
    options = _options_record(
        opts, seed=seed, label_offset=label_offset, compression=compression, index=index,
        split=fractions, shards=dict(counts), labels=class_list is not None,
    )  # fmt: skip
    summary: dict[str, Any] = {
        "input": input_dir,
        "output": output_dir,
        "classes": found.classes,
        "ignored_files": found.ignored_files,
        "warnings": list(found.warnings) + shard_warnings,
        "dry_run": dry_run,
    }
    if dry_run:
        summary["splits"] = {
            s: {
                "images": len(found.splits[s]),
                "class_counts": _class_counts(found.splits[s], found.classes),
                "shards": [{"file": writer.shard_name(s, i, len(b)), "images": e - st} for i, (st, e) in enumerate(b)],
            }
            for s, b in plan.items()
        }
        summary["images"] = sum(len(v) for v in found.splits.values())
        summary["elapsed_seconds"] = round(time.perf_counter() - t_start, 3)
        return summary

    # ---- encode and write ----
    staging = writer.prepare_output(output_dir, overwrite)
    tasks = [
        (it.path, it.filename, it.label, it.text, it.size)
        for s in plan
        for it in found.splits[s]
    ]
    enc = _Encoder(opts, min(workers, max(1, len(tasks) // CHUNK)))
    tf_thread = threading.Thread(target=tensorflow, name="import-tensorflow", daemon=True)
    tf_thread.start()
    state = _RunState()
    try:
        results = enc.map(tasks)
        prefetched = _prefetch(results, tf_thread)
        tensorflow()  # joins the import (or raises its error here)
        t_ready = time.perf_counter()
        n_prefetched = len(prefetched)
        stream = _chain(prefetched, results)
        split_info: dict[str, dict[str, Any]] = {}
        for s, bounds in plan.items():
            items = found.splits[s]
            shard_infos = []
            class_counts = dict.fromkeys(found.classes, 0)
            for i, (start, end) in enumerate(bounds):
                sw = writer.ShardWriter(staging, writer.shard_name(s, i, len(bounds)), compression, index)
                for item in items[start:end]:
                    rec, fmt_or_reason, transcoded, orient, size = next(stream)
                    state.count(size)
                    if rec is None:
                        state.skip(item, s, fmt_or_reason, emit, strict)
                    else:
                        sw.write(rec)
                        class_counts[item.text] += 1
                        state.record(fmt_or_reason, transcoded, orient)
                    if progress:
                        progress(state.images, state.bytes_read, len(tasks))
                shard_infos.append(sw.close())
            split_info[s] = {
                "records": sum(si.records for si in shard_infos),
                "class_counts": {_display(c): n for c, n in class_counts.items()},
                "shards": [si.as_json() for si in shard_infos],
            }
        enc.close()
    except BaseException:
        enc.close(terminate=True)
        writer.discard_staging(staging)
        _remove_if_empty(output_dir)
        raise
    t_end = time.perf_counter()
    if state.orientation_ignored:
        emit(
            "warning",
            f"{state.orientation_ignored} JPEG(s) carry an EXIF rotation that --encoding keep leaves to the reader "
            "(tf.io.decode_jpeg ignores it); use --encoding jpeg to apply it",
        )

    # ---- publish ----
    classes = [_display(c) for c in found.classes]
    manifest = build_manifest(
        classes=classes, label_offset=label_offset, options=options, splits=split_info, skipped=state.skipped,
        transcoded=state.transcoded, formats=state.formats, ignored_files=found.ignored_files,
    )  # fmt: skip
    files = [sh["file"] for si in split_info.values() for sh in si["shards"]]
    files += [sh["index"] for si in split_info.values() for sh in si["shards"] if "index" in sh]
    try:
        writer.publish(staging, output_dir, files, {LABELS_NAME: labels_text(classes), MANIFEST_NAME: manifest_text(manifest)})
    except OSError as e:
        writer.discard_staging(staging)
        raise DataError(f"cannot publish the dataset in {output_dir}: {e.strerror or e}") from None

    steady = max(t_end - t_ready, 1e-9)
    elapsed = t_end - t_start
    summary.update(
        images=state.images,
        records=sum(si["records"] for si in split_info.values()),
        bytes=sum(sh["bytes"] for si in split_info.values() for sh in si["shards"]),
        input_bytes=state.bytes_read,
        skipped=len(state.skipped),
        skipped_files=state.skipped,
        transcoded=manifest["transcoded"],
        formats=manifest["formats"],
        splits={
            s: {"records": si["records"], "shards": len(si["shards"]), "bytes": sum(sh["bytes"] for sh in si["shards"])}
            for s, si in split_info.items()
        },
        warnings=summary["warnings"] + state.late_warnings,
        elapsed_seconds=round(elapsed, 3),
        images_per_second=round(state.images / max(elapsed, 1e-9), 1),
        mb_per_second=round(state.bytes_read / 1e6 / max(elapsed, 1e-9), 2),
        steady_seconds=round(steady, 3),
        steady_images_per_second=round((state.images - n_prefetched) / steady, 1),
        steady_mb_per_second=round((state.bytes_read - state.prefetched_bytes(n_prefetched)) / 1e6 / steady, 2),
        workers=enc.workers,
    )
    return summary


class _RunState:
    """Counters of one run (kept out of convert() to keep it readable)."""

    def __init__(self) -> None:
        self.images = 0
        self.bytes_read = 0
        self.skipped: list[dict[str, str]] = []
        self.transcoded: dict[str, int] = {}
        self.formats: dict[str, int] = {}
        self.orientation_ignored = 0
        self.late_warnings: list[str] = []
        self._sizes: list[int] = []

    def count(self, size: int) -> None:
        self.images += 1
        self.bytes_read += size
        if len(self._sizes) < 1_000_000:
            self._sizes.append(size)

    def prefetched_bytes(self, n: int) -> int:
        return sum(self._sizes[:n])

    def record(self, fmt: str, transcoded: str | None, orient: bool) -> None:
        self.formats[fmt] = self.formats.get(fmt, 0) + 1
        if transcoded:
            self.transcoded[transcoded] = self.transcoded.get(transcoded, 0) + 1
        self.orientation_ignored += orient

    def skip(self, item: ImageItem, split: str, reason: str, emit: Callable[[str, str], None], strict: bool) -> None:
        rel = _display(item.rel)
        self.skipped.append({"path": rel, "split": split, "reason": reason})
        emit("skipped", f"{rel}: {reason}")
        if strict:
            raise DataError(f"--strict: {rel}: {reason}; nothing was published")


def _prefetch(results: Iterator[Result], tf_thread: threading.Thread) -> list[Result]:
    """Collect results while TensorFlow imports, up to PREFETCH_BYTES, so workers are not idle."""
    out: list[Result] = []
    held = 0
    while tf_thread.is_alive() and held < PREFETCH_BYTES:
        try:
            r = next(results)
        except StopIteration:
            break
        out.append(r)
        held += len(r[0] or b"")
    return out


def _chain(first: list[Result], rest: Iterator[Result]) -> Iterator[Result]:
    yield from first
    first.clear()
    yield from rest


def _remove_if_empty(path: str) -> None:
    try:
        os.rmdir(path)
    except OSError:
        pass


def _class_counts(items: list[ImageItem], classes: list[str]) -> dict[str, int]:
    counts = dict.fromkeys(classes, 0)
    for it in items:
        counts[it.text] += 1
    return {_display(c): n for c, n in counts.items()}


def _estimate_bytes(items: list[ImageItem], opts: EncodeOptions) -> int:
    """Rough output size of a split, used only to choose a default shard count."""
    source = sum(it.size for it in items)
    if opts.resize is None:
        return source * (10 if opts.encoding == "raw" else 1)
    w, h = (opts.resize, opts.resize * 4 // 3) if isinstance(opts.resize, int) else opts.resize
    per_pixel = {"raw": 3.0, "png": 1.5, "jpeg": 0.3, "keep": 0.3}[opts.encoding]
    return min(source, int(len(items) * w * h * per_pixel)) if opts.encoding != "raw" else int(len(items) * w * h * 3)
