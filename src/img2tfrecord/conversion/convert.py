"""convert(): walk -> plan -> encode and write (an engine) -> rebalance -> publish.

The plan (which images, in which order, in which shard) is made once, from the walk and the
options only; an engine executes it, shard by shard: the local engine with worker processes
that each encode and write whole shards (`local_engine`), the Beam engine with Beam workers
that do the same (`beam_engine`). A shard's bytes depend only on the plan, so the output is
byte-identical for any engine and any number of workers; `finalize` then rebalances after
skipped images, writes the manifest and publishes atomically.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from img2tfrecord import cstderr, fs
from img2tfrecord.conversion import dedupe
from img2tfrecord.conversion import encode as encoder
from img2tfrecord.format import tfds as tfds_metadata
from img2tfrecord.conversion import write as writer
from img2tfrecord.conversion.dedupe import MODES as DEDUPE_MODES
from img2tfrecord.conversion.encode import EncodeOptions
from img2tfrecord.errors import DataError, Interrupted, UsageError, WorkerDied, plural
from img2tfrecord.conversion.resume import Journal, finished_count, header, load_done, prune
from img2tfrecord.format.manifest import LABELS_NAME, MANIFEST_NAME, build_manifest, labels_text, manifest_text
from img2tfrecord.conversion.walk import ImageItem, discover, discover_file_list, parse_split_spec, read_labels_file
from img2tfrecord.format.schema import DEFAULT_MAX_PIXELS, utf8_text
from img2tfrecord.conversion.write import ShardOutcome, ShardTask

UNKNOWN_IMAGE_BYTES = 110_000  # assumed size of a file listed without one (remote walk): an ImageNet JPEG
ENGINES = ("local", "beam")

EventSink = Callable[[str, str], None]


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
    if value is None or isinstance(value, (dict, int)):
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
        if name.strip() in out:
            raise UsageError(f"bad --shards {value!r}: {name.strip()} given twice")
        out[name.strip()] = int(n)
    return parse_shards(out)


@dataclass
class Job:
    """A validated, planned conversion: everything an engine needs, nothing engine-specific."""

    input_dir: str
    output_dir: str
    opts: EncodeOptions
    classes: list[str]
    label_offset: int
    options: dict[str, Any]
    plan: list[ShardTask]
    split_names: list[str]
    ignored_files: int
    compression: str | None
    index: bool
    strict: bool
    dedupe: str = "report"
    checksum: str = writer.DEFAULT_CHECKSUM
    fsync: bool = True  # shards durable before publishing (does not change the bytes)
    estimated_bytes: int = 0  # output size estimate (exact-ish for --encoding keep)
    warnings: list[str] = field(default_factory=list)
    excluded_files: int = 0  # images of classes not in --labels

    @property
    def tasks(self) -> int:
        return sum(len(s.tasks) for s in self.plan)


def plan_job(
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
    max_pixels: int = DEFAULT_MAX_PIXELS,
    validate: bool = True,
    strict: bool = False,
    compression: str | None = None,
    index: bool = False,
    file_list: str | None = None,
    dedupe: str = "report",
    checksum: str = writer.DEFAULT_CHECKSUM,
    fsync: bool = True,
) -> Job:
    """Check the options, walk the input (or read `file_list`) and cut it into shards. Raises UsageError."""
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
    if checksum not in fs.CHECKSUMS:
        raise UsageError(f"bad --checksum {checksum!r}: choose {', '.join(fs.CHECKSUMS)}")
    if dedupe not in DEDUPE_MODES:
        raise UsageError(f"bad --dedupe {dedupe!r}: choose report, drop or off")
    if index and compression:
        raise UsageError("--index describes uncompressed shards (DALI cannot read compressed TFRecords): drop --compression or --index")
    opts = EncodeOptions(
        encoding=encoding, quality=quality, resize=parse_resize(resize), channels=str(channels),
        max_pixels=max_pixels, validate=validate,
    )  # fmt: skip
    shard_request = parse_shards(shards)
    fractions = parse_split_spec(split) if isinstance(split, str) else split
    class_list = read_labels_file(labels) if isinstance(labels, str) else labels
    check_paths(input_dir, output_dir)

    if file_list:
        found = discover_file_list(input_dir, file_list, split=fractions, seed=seed, label_offset=label_offset, labels=class_list)
    else:
        found = discover(input_dir, split=fractions, seed=seed, label_offset=label_offset, labels=class_list)
    split_bytes = {s: _estimate_bytes(items, opts) for s, items in found.splits.items()}
    counts, shard_warnings = writer.auto_shard_counts(
        split_bytes, {s: len(v) for s, v in found.splits.items()}, shard_request, writer.min_shard_records(index)
    )
    empty = [f"split {s} has no images; no shards are written for it" for s, v in found.splits.items() if not v]
    tasks = {s: [(it.path, it.rel, it.filename, it.label, it.text, it.size) for it in items] for s, items in found.splits.items()}
    options = asdict(opts) | {
        "resize": list(opts.resize) if isinstance(opts.resize, tuple) else opts.resize,
        "seed": seed, "label_offset": label_offset, "compression": compression, "index": index,
        "split": fractions, "shards": dict(counts), "labels": class_list, "dedupe": dedupe, "checksum": checksum,
    }  # fmt: skip
    return Job(
        input_dir=input_dir, output_dir=output_dir, opts=opts, classes=found.classes, label_offset=label_offset,
        options=options, plan=writer.make_plan(tasks, counts), split_names=list(found.splits),
        ignored_files=found.ignored_files, compression=compression, index=index, strict=strict, dedupe=dedupe, checksum=checksum, fsync=fsync,
        warnings=found.warnings + shard_warnings + empty, estimated_bytes=sum(split_bytes.values()),
        excluded_files=found.excluded_files,
    )  # fmt: skip


def check_paths(input_dir: str, output_dir: str) -> None:
    """Refuse an output inside the input (or equal to it): the walk would read its own shards."""
    if not fs.is_remote(input_dir) and not fs.is_remote(output_dir):
        in_abs, out_abs = os.path.realpath(input_dir), os.path.realpath(output_dir)
        if out_abs == in_abs or out_abs.startswith(in_abs + os.sep):
            raise UsageError(f"output {output_dir} is inside input {input_dir}: the tool would read its own output; choose another folder")


@dataclass
class Timing:
    """When the run started, and when steady state began with how much already done.

    Steady state is the second half of the images: by then the interpreter, the worker pool and
    TensorFlow's ~3 s import are behind, and so is the backlog encoded while TensorFlow imported.
    """

    start: float = field(default_factory=time.perf_counter)
    steady_from: float = 0.0
    images_before: int = 0
    bytes_before: int = 0
    workers: int | None = None  # worker processes actually used (local engine)

    def image_done(self, images: int, nbytes: int, total: int) -> None:
        if not self.steady_from and images >= total // 2 and images < total:
            self.steady_from, self.images_before, self.bytes_before = time.perf_counter(), images, nbytes


@cstderr.quieted
def convert(
    input_dir: str,
    output_dir: str,
    *,
    workers: int | None = None,
    overwrite: bool = False,
    dry_run: bool = False,
    engine: str = "local",
    beam_options: str | list[str] | None = None,
    resume: bool = False,
    on_event: EventSink | None = None,
    progress: Callable[[int, int, int], None] | None = None,
    **options: Any,
) -> dict[str, Any]:
    """Convert an image folder into a sharded TFRecord dataset and return the run's summary.

    `options` are those of `plan_job` (shards, split, seed, labels, encoding, resize, ...).
    `on_event(kind, message)` receives "warning" and "skipped" messages as they happen;
    `progress(images, bytes_read, total)` is called after each image (local engine). Raises
    UsageError (bad options, no images, output exists) or DataError (--strict with bad images,
    I/O failure).
    """
    timing = Timing()
    emit = on_event or (lambda kind, msg: None)
    if workers is not None and workers < 1:
        raise UsageError(f"bad --workers {workers}: must be >= 1")
    if engine not in ENGINES:
        raise UsageError(f"bad --engine {engine!r}: choose local or beam")
    for path, what in ((input_dir, "input"), (output_dir, "output"), (options.get("file_list") or "", "--file-list")):
        fs.check_remote(path, what)  # a missing file system or an unreachable bucket: one line, before any work
    if engine == "beam":  # before a long listing: Beam installed, options parse, paths fit the runner
        from img2tfrecord.conversion.engines.beam import preflight

        preflight(beam_options, input_dir, output_dir)
    if engine != "local" and options.get("dedupe") == "drop":
        raise UsageError("--dedupe drop needs the local engine (it decides in plan order); use --dedupe report with Beam")
    if resume and engine != "local":
        raise UsageError("--resume works with the local engine; Beam runners retry failed work themselves")
    check_paths(input_dir, output_dir)
    if dry_run:
        job = plan_job(input_dir, output_dir, **options)
        refused = None
        try:  # what the real run would refuse, said now
            writer.check_output(output_dir, overwrite)
            _unfinished_run(output_dir, resume, overwrite)
        except UsageError as e:
            refused = str(e)  # shown with the plan
        for w in job.warnings:
            emit("warning", w)
        return _plan_summary(job, timing, refused)

    writer.check_output(output_dir, overwrite)
    existed = fs.is_remote(output_dir) or os.path.exists(output_dir)
    lock = writer.OutputLock(output_dir)
    lock.acquire()  # first: a second run is refused before it says or touches anything
    started = False
    try:
        if discarding := _unfinished_run(output_dir, resume, overwrite):
            emit("warning", discarding)
        job = plan_job(input_dir, output_dir, **options)
        for w in job.warnings:
            emit("warning", w)
        _check_space(job, emit)
        started = True
        return _run(job, engine, workers, overwrite, resume, beam_options, emit, progress, timing, lock)
    finally:
        lock.release()
        if not started and not existed:
            _cleanup(fs.join(output_dir, writer.STAGING_DIR), output_dir)  # the folder the lock created


def _unfinished_run(output_dir: str, resume: bool, overwrite: bool) -> str | None:
    """The warning to give when a run discards an unfinished one in `output_dir`, or None.

    Finished shards of an interrupted run are not thrown away unasked: without --resume (which
    reuses them) it takes --overwrite. Raises UsageError otherwise.
    """
    if resume:
        return None
    done = finished_count(fs.join(output_dir, writer.STAGING_DIR))
    if done is None:
        return None
    if done and not overwrite:
        raise UsageError(
            f"{output_dir} holds an unfinished run with {plural(done, 'finished shard')}: add --resume to reuse "
            f"{'it' if done == 1 else 'them'} (same command), or --overwrite to discard {'it' if done == 1 else 'them'} and start over"
        )
    return f"discarding the unfinished run in {output_dir}" + (f" and its {plural(done, 'finished shard')}" if done else "")


def _run(job: Job, engine: str, workers: int | None, overwrite: bool, resume: bool, beam_options: str | list[str] | None,
         emit: EventSink, progress: Callable[[int, int, int], None] | None, timing: Timing, lock: writer.OutputLock) -> dict[str, Any]:  # fmt: skip
    """Prepare the output, run an engine, publish; on failure, keep or remove what it wrote."""
    output_dir = job.output_dir
    staging = writer.prepare_output(output_dir, overwrite, keep_staging=resume)
    done, redone = load_done(job, staging) if resume else ({}, [])
    for name, why in redone:
        emit("warning", f"resuming: {name} is converted again: {why}")
    if done:
        emit("note", f"resuming: {len(done)} of {plural(len(job.plan), 'shard')} {'was' if len(done) == 1 else 'were'} already finished and {'is' if len(done) == 1 else 'are'} reused")
    journal = Journal(staging, header(job), done)
    try:
        if engine == "beam":
            from img2tfrecord.conversion.engines.beam import run_beam

            outcomes = run_beam(job, staging, beam_options, emit, workers=workers or os.cpu_count() or 1)
        else:
            from img2tfrecord.conversion.engines.local import run_local

            outcomes = run_local(job, staging, workers, emit, progress, timing, journal)
        return finalize(job, staging, outcomes, timing, emit, engine=engine)
    except KeyboardInterrupt:
        if engine != "local":  # Beam runners retry work themselves; there is nothing to resume
            lock.release()
            _cleanup(staging, output_dir)
            raise
        prune(staging, set(journal.done))  # keep finished shards for --resume, drop partial ones
        raise Interrupted(len(journal.done), len(job.plan)) from None
    except WorkerDied:
        prune(staging, set(journal.done))
        raise
    except BaseException as e:
        lock.release()  # before _cleanup, which removes the output directory if it is empty
        _cleanup(staging, output_dir)
        if isinstance(e, OSError) or type(e).__module__.startswith("tensorflow"):  # the disk, not the data
            raise DataError(f"writing the dataset in {output_dir} failed: {_describe_io(e)}; {_space_note(job)}") from None
        raise


def _cleanup(staging: str, output_dir: str) -> None:
    fs.rmtree(staging)
    if not fs.is_remote(output_dir):
        try:
            os.rmdir(output_dir)  # only if we created it and it is still empty
        except OSError:
            pass


def _free_bytes(output_dir: str) -> int | None:
    if fs.is_remote(output_dir):
        return None
    path = os.path.abspath(output_dir)
    while not os.path.exists(path):
        path = os.path.dirname(path)
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return None


def human_bytes(n: float) -> str:
    for unit in ("bytes", "KB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1000
    raise AssertionError("unreachable")


def _space_note(job: Job) -> str:
    free = _free_bytes(job.output_dir)
    note = f"the dataset needs about {human_bytes(job.estimated_bytes)}"
    return note + (f" and {human_bytes(free)} are free there" if free is not None else "")


def _describe_io(e: BaseException) -> str:
    msg = getattr(e, "message", None) or getattr(e, "strerror", None) or str(e)
    return msg.strip().splitlines()[0] if msg.strip() else type(e).__name__


def _check_space(job: Job, emit: EventSink) -> None:
    """Fail before any work when the output disk clearly cannot hold the dataset."""
    free = _free_bytes(job.output_dir)
    if free is None or job.estimated_bytes <= free:
        return
    if job.opts.reencodes:  # a rough estimate: say so, but let the user try
        emit("warning", f"the output may not fit: {_space_note(job)}")
        return
    raise DataError(f"not enough space in {job.output_dir}: {_space_note(job)}; free some space or choose another disk")


def finalize(job: Job, staging: str, outcomes: list[ShardOutcome], timing: Timing, emit: EventSink, engine: str = "local") -> dict[str, Any]:
    """Merge shard outcomes, rebalance after skips, publish, and build the summary."""
    skipped = [s for o in outcomes for s in o.skipped]
    if job.strict and skipped:  # engines that cannot stop early (Beam) end up here
        first = skipped[0]
        raise DataError(f"--strict: {plural(len(skipped), 'unusable image')}, e.g. {first['path']}: {first['reason']}; nothing was published")
    merged: dict[str, dict[str, int]] = {"formats": {}, "transcoded": {}, "depths": {}, "reduced": {}}
    split_info: dict[str, dict[str, Any]] = {}
    classes = [utf8_text(c) for c in job.classes]
    warnings = list(job.warnings)
    for s in job.split_names:
        mine = [o for o in outcomes if o.split == s]
        if not mine:
            continue
        infos = writer.rebalance(staging, [o.info for o in mine], job.compression, job.index, job.checksum, job.fsync)
        if len(infos) < len(mine):
            warnings.append(f"{s}: {len(infos)} shard(s) instead of {len(mine)}: after the skipped images, more would "
                            "leave a shard of one record, which --index readers cannot handle")  # fmt: skip
            emit("warning", warnings[-1])
        if job.index and sum(i.records for i in infos) == 1 and sum(len(sh.tasks) for sh in job.plan if sh.split == s) > 1:
            warnings.append(writer.one_record_warning(s))  # planned for more, left with one after the skips
            emit("warning", warnings[-1])
        class_counts = dict.fromkeys(classes, 0)
        for o in mine:
            for c, n in o.class_counts.items():
                class_counts[c] += n
            for key in ("formats", "transcoded", "depths", "reduced"):
                for k, n in getattr(o, key).items():
                    merged[key][k] = merged[key].get(k, 0) + n
        split_info[s] = {
            "records": sum(i.records for i in infos),
            "class_counts": class_counts,
            "shards": [i.as_json() for i in infos],
        }
    orient = sum(o.orientation_ignored for o in outcomes)
    duplicates = dedupe.report(
        job.dedupe,
        ((d, rel, o.split, text) for o in outcomes for d, rel, text in o.digests),
        [d for o in outcomes for d in o.dropped],
    ) if job.dedupe != "off" else {"mode": "off"}  # fmt: skip
    if line := dedupe.summary_line(duplicates):
        warnings.append(line)
        emit("warning", line)
    if merged["reduced"]:
        warnings.append("stored with fewer bits than their source: " + ", ".join(f"{plural(n, 'image')}: {why}" for why, n in sorted(merged["reduced"].items())))
        emit("warning", warnings[-1])
    if orient:
        warnings.append(
            f"{plural(orient, 'image')} {'carries' if orient == 1 else 'carry'} an EXIF rotation that --encoding keep leaves to the reader "
            "(TensorFlow's decoders ignore it); use --encoding jpeg or png to store them upright"
        )
        emit("warning", warnings[-1])
    t_end = time.perf_counter()
    manifest = build_manifest(
        classes=classes, label_offset=job.label_offset, options=job.options, splits=split_info, skipped=skipped,
        transcoded=merged["transcoded"], formats=merged["formats"], depths=merged["depths"], reduced=merged["reduced"], ignored_files=job.ignored_files, engine=engine,
        duplicates=duplicates, excluded_files=job.excluded_files,
    )  # fmt: skip
    files = [sh["file"] for si in split_info.values() for sh in si["shards"]]
    files += [sh["index"] for si in split_info.values() for sh in si["shards"] if "index" in sh]
    try:
        metadata = tfds_metadata.files(manifest) | {LABELS_NAME: labels_text(classes), MANIFEST_NAME: manifest_text(manifest)}
        writer.publish(staging, job.output_dir, files, metadata, job.fsync, stale=tfds_metadata.FILE_NAMES)
    except OSError as e:
        raise DataError(f"cannot publish the dataset in {job.output_dir}: {e.strerror or e}") from None

    images = sum(o.images for o in outcomes)
    bytes_read = sum(o.bytes_read for o in outcomes)
    elapsed = max(t_end - timing.start, 1e-9)
    steady = max(t_end - (timing.steady_from or timing.start), 1e-9)
    return {
        "input": job.input_dir,
        "output": job.output_dir,
        "dry_run": False,
        "engine": engine,
        "classes": classes,
        "images": images,
        "records": sum(si["records"] for si in split_info.values()),
        "bytes": sum(sh["bytes"] for si in split_info.values() for sh in si["shards"]),
        "input_bytes": bytes_read,
        "skipped": skipped,  # as in dataset.json: [{"path", "split", "reason"}]
        "skipped_count": len(skipped),
        "duplicates": {k: v for k, v in duplicates.items() if k != "groups"},  # dataset.json's, without the list of groups
        "ignored_files": job.ignored_files,
        "excluded_files": job.excluded_files,
        "transcoded": manifest["transcoded"],
        "formats": manifest["formats"],
        "splits": {
            s: {"records": si["records"], "shards": len(si["shards"]), "bytes": sum(sh["bytes"] for sh in si["shards"])}
            for s, si in split_info.items()
        },
        "warnings": warnings,
        "workers": timing.workers,
        "elapsed_seconds": round(elapsed, 3),
        "images_per_second": round(images / elapsed, 1),
        "mb_per_second": round(bytes_read / 1e6 / elapsed, 2),
        "steady_seconds": round(steady, 3),
        "steady_images_per_second": round((images - timing.images_before) / steady, 1),
        "steady_mb_per_second": round((bytes_read - timing.bytes_before) / 1e6 / steady, 2),
    }


def _plan_summary(job: Job, timing: Timing, refused: str | None = None) -> dict[str, Any]:
    splits: dict[str, Any] = {}
    for shard in job.plan:
        sp = splits.setdefault(shard.split, {"images": 0, "class_counts": dict.fromkeys(map(utf8_text, job.classes), 0), "shards": []})
        sp["images"] += len(shard.tasks)
        sp["shards"].append({"file": shard.name, "images": len(shard.tasks)})
        for t in shard.tasks:
            sp["class_counts"][utf8_text(t[4])] += 1
    return {
        "input": job.input_dir,
        "output": job.output_dir,
        "dry_run": True,
        "classes": [utf8_text(c) for c in job.classes],
        "images": job.tasks,
        "splits": splits,
        "ignored_files": job.ignored_files,
        "excluded_files": job.excluded_files,
        "warnings": job.warnings,
        "refused": refused,  # why the real run would stop (output not empty, ...), or None
        "options": job.options,
        "elapsed_seconds": round(time.perf_counter() - timing.start, 3),
    }


def _estimate_bytes(items: list[ImageItem], opts: EncodeOptions) -> int:
    """Rough output size of a split, used only to choose a default shard count."""
    source = sum(it.size for it in items)
    unknown = sum(1 for it in items if not it.size)  # remote listings carry no sizes
    if unknown:
        known = len(items) - unknown
        source += unknown * (source // known if known else UNKNOWN_IMAGE_BYTES)
    if opts.resize is None:
        return source * (10 if opts.encoding == "raw" else 1)
    w, h = (opts.resize, opts.resize * 4 // 3) if isinstance(opts.resize, int) else opts.resize
    if opts.encoding == "raw":
        return len(items) * w * h * 3
    per_pixel = {"png": 1.5, "jpeg": 0.3, "keep": 0.3}[opts.encoding]
    return min(source, int(len(items) * w * h * per_pixel))
