"""`img2tfrecord convert`: options in, img2tfrecord.conversion.convert.convert() called, summary out."""

from __future__ import annotations

import contextlib
import signal
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any, NoReturn

import click

from img2tfrecord.cli import answer
from img2tfrecord.cli.text import report, safe, safe_lines, size_text, skipped_text
from img2tfrecord.conversion.plan import options
from img2tfrecord.errors import Img2TFRecordError, Interrupted, plural
from img2tfrecord.format.schema import DEFAULT_MAX_PIXELS


def _err(msg: str) -> None:
    click.echo(safe(msg), err=True)  # names in messages, escaped as inspect shows them


class _Stderr:
    """Whatever `sys.stderr` is at the moment of each write: the bar's stream.

    The library points fd 2 at a capture file for the length of a run and gives `sys.stderr` a
    duplicate of the terminal meanwhile (cstderr), closing it when the run returns. A bar made
    during the run and holding that object could then not draw its last frame nor end its line
    (tqdm gives up silently on a closed file): the summary started mid-line, and the bar stayed
    at its last redraw (99%). Looking `sys.stderr` up at each write follows the swap.
    """

    muted = False  # a bar closed after Ctrl-C or an error: its last frame is not drawn again

    def write(self, s: str) -> int:
        return len(s) if self.muted else sys.stderr.write(s)

    def flush(self) -> None:
        sys.stderr.flush()

    def fileno(self) -> int:  # tqdm asks the terminal's width through it
        return sys.stderr.fileno()

    def isatty(self) -> bool:
        return sys.stderr.isatty()


@contextlib.contextmanager
def bar_stops_at_ctrl_c(progress: _Progress) -> Iterator[None]:
    """From the moment Ctrl-C arrives, the bar is not drawn again: the run then unwinds (workers
    stopped, finished shards settled), and a redraw meanwhile put a frame below the terminal's ^C,
    where the interruption's line belongs (seen on a busy machine). Otherwise Python's own
    handler: KeyboardInterrupt."""

    def on_sigint(signum: int, frame: Any) -> None:
        progress.stream.muted = True
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGINT, on_sigint)
    except ValueError:  # not the main thread: signals are not ours to handle
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


MAX_SKIP_LINES = 20  # skipped files named one a line on stderr; the rest in one line


class _Progress:
    """A tqdm bar on stderr (images/s and MB/s), only when stderr is a terminal.

    `close()` draws the last frame (100% after a finished run) and ends the bar's line, so that
    what follows (summary, error, "interrupted") starts on a line of its own. Its read speed counts
    from the run's start, made just before the library's own clock (`Timing.start`) as the summary's
    rate does, start-up included: counted from the bar's first frame, which comes after the first
    batch of images, it said 5.0 GB/s where the summary said 2.2 MB/s.
    """

    def __init__(self, enabled: bool, clock: Callable[[], float] = time.perf_counter) -> None:
        self.clock = clock
        self.started = clock()  # the run's start: the summary's rates count from it too
        self.bar: Any = None
        self.enabled = enabled
        self.stream = _Stderr()
        self.skips = 0

    def event(self, kind: str, msg: str) -> None:
        """A library event as a line of its own; past MAX_SKIP_LINES skipped files, one line says
        where the rest are (a subset of a big annotation file, or a folder of broken files, would
        otherwise print a line each: tens of thousands)."""
        if kind == "skipped":
            self.skips += 1
            if self.skips > MAX_SKIP_LINES:
                if self.skips == MAX_SKIP_LINES + 1:
                    self.write(
                        f"skipped: more than {MAX_SKIP_LINES} files; the rest are not shown here: "
                        "dataset.json lists every skipped file and why (so does --json)"
                    )
                return
        self.write(f"{kind}: {msg}")

    def start(self, total: int) -> None:
        if self.enabled:
            from tqdm import tqdm

            self.bar = tqdm(total=total, unit="img", file=self.stream, dynamic_ncols=True, smoothing=0.1)

    def update(self, images: int, bytes_read: int) -> None:
        if self.bar is None:
            return
        # MB/s next to tqdm's images/s, on every update: workers report a few times a second, in
        # steps of any size, so a "now and then" rule (every 64th image) could leave it out
        elapsed = self.clock() - self.started
        self.bar.set_postfix_str(f"{_rate(bytes_read, elapsed)} read", refresh=False)
        self.bar.update(images - self.bar.n)

    def write(self, msg: str) -> None:
        if self.bar is not None:
            self.bar.write(safe(msg), file=self.stream)
        else:
            _err(msg)

    def close(self, finished: bool = True) -> None:
        """End the bar's line. `finished`: draw the last frame first (100%); else (Ctrl-C, an
        error) the frame on screen stays as it is, followed by the terminal's ^C: drawn again it
        would be a second bar below the first whenever the ^C makes the line wrap."""
        if self.bar is not None:
            self.stream.muted = not finished
            self.bar.close()
            self.stream.muted = False
            if not finished:
                self.stream.write("\n")
            self.bar = None


def _span(counts: list[int], word: str) -> str:
    """'240 images', '1 image', '60-61 images': a range only when it is one."""
    lo, hi = min(counts), max(counts)
    return plural(lo, word) if lo == hi else f"{lo:,}-{plural(hi, word)}"


def _rate(nbytes: float, seconds: float) -> str:
    return size_text(nbytes / max(seconds, 1e-9), "/s")


def _seconds(t: float) -> str:
    return f"{t:.1f} s" if t >= 0.1 else f"{t * 1000:.0f} ms"


def _stderr_is_terminal() -> bool:
    return sys.stderr.isatty()


def _summary_text(s: dict[str, Any]) -> str:
    from img2tfrecord.cli.report import report_hint

    classes = s["classes"]
    if s.get("already_published"):  # --resume after a run killed once its dataset was in place
        splits = ", ".join(f"{n}: {v['records']:,} in {plural(v['shards'], 'shard')}" for n, v in s["splits"].items())
        return (
            f"{s['output']} already holds the dataset this command was making ({plural(s['records'], 'image')}: "
            f"{splits}): the interrupted run had published it; nothing left to do"
        )
    if s["dry_run"]:
        # counted from the walk: no image is opened, so one that does not decode is in the plan and
        # skipped by the real run (reading a million headers would make the plan a conversion's cost)
        lines = [f"Plan for {s['input']} -> {s['output']} (dry run: nothing written, images counted, not read):"]
        lines.append(
            f"  {plural(len(classes), 'class', 'classes')}: {', '.join(classes[:10])}{' ...' if len(classes) > 10 else ''}"
        )
        for name, sp in s["splits"].items():
            per = [sh["images"] for sh in sp["shards"]]
            lines.append(
                f"  {name}: {plural(sp['images'], 'image')} in {plural(len(per), 'shard')} of {_span(per, 'image')}; "
                + ", ".join(f"{c}={n}" for c, n in list(sp["class_counts"].items())[:10])
            )
        if s["ignored_files"]:
            lines.append(f"  {plural(s['ignored_files'], 'non-image file')} ignored")
        if s["excluded_files"]:
            lines.append(f"  {plural(s['excluded_files'], 'image')} of classes not in --labels left out")
        if s["refused"]:
            lines.append(f"  the real run would stop here (exit 2): {s['refused']}")
        return "\n".join(lines)
    splits = ", ".join(f"{n}: {v['records']:,} in {plural(v['shards'], 'shard')}" for n, v in s["splits"].items())
    # each number says what it counts: the shards' bytes, the source images' bytes; rates are
    # over the images this run converted into records (not those skipped, dropped or reused)
    rate = f"{s['images_per_second']:,.0f} images/s"
    if s["steady_seconds"] < s["elapsed_seconds"]:  # the progress bar starts with the first image
        rate += f" including start-up, {s['steady_images_per_second']:,.0f} images/s after it"
    rate += f"; {_rate(s['converted_bytes'], s['elapsed_seconds'])} of source images"
    wrote = (
        f"Wrote {plural(s['records'], 'image')} ({splits}) of {plural(len(classes), 'class', 'classes')} to {s['output']}: "
        f"{size_text(s['bytes'])} of shards"
    )
    timed = f"in {_seconds(s['elapsed_seconds'])} ({rate})"
    if s.get("reused_shards"):  # --resume: the rates are this run's own conversions, the rest is said apart
        text = (
            f"{wrote}. This run converted {plural(s['converted_images'], 'image')} "
            f"({size_text(s['converted_bytes'])} of source images) {timed}; "
            f"{s['reused_images']:,} came from the {plural(s['reused_shards'], 'finished shard')} of the interrupted run."
        )
    else:
        text = f"{wrote} from {size_text(s['converted_bytes'])} of source images, {timed}."
    if s["skipped_count"]:
        text += f" Skipped {skipped_text(s['skipped_count'], boxes=bool(s.get('detection')))} (listed in dataset.json)."
    for split, names in (s.get("absent_classes") or {}).items():
        text += f" No image of {', '.join(names[:5])}{' ...' if len(names) > 5 else ''} in {split} (see the warning)."
    if s["transcoded"]:
        text += " Transcoded: " + ", ".join(f"{k} {v}" for k, v in s["transcoded"].items()) + "."
    if s["ignored_files"]:
        text += f" Ignored {plural(s['ignored_files'], 'non-image file')}."
    if s["excluded_files"]:
        text += f" Left out {plural(s['excluded_files'], 'image')} of classes not in --labels."
    return text + _boxes_text(s) + f"\nSee it in a browser: {report_hint(s['output'])}"


def _boxes_text(s: dict[str, Any]) -> str:
    """A detection run's boxes: counted, and each one clipped or dropped named."""
    d = s.get("detection")
    if not d:
        return ""
    text = f"\nBoxes: {d['boxes']:,} ({d['format']}); {d['clipped']:,} clipped, {d['dropped']:,} dropped"
    text += f"; {plural(d['empty_images'], 'image')} without boxes"
    if d["skipped_empty"]:
        text += f", {plural(d['skipped_empty'], 'image')} without boxes left out (--skip-empty)"
    shown = d["box_problems"][:20]
    text += "".join(f"\n  box {p['box']} of {p['path']} ({p['class']}): {p['reason']}" for p in shown)
    if len(d["box_problems"]) > len(shown):
        text += f"\n  ... {len(d['box_problems']) - len(shown):,} more in dataset.json (metadata.detection)"
    return text


@click.command(cls=answer.Answering, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
# not click.Path(file_okay=False): the library says what is wrong with a path, in one line
@click.argument("input_dir", type=click.Path(path_type=str))
@click.argument("output_dir", type=click.Path(path_type=str))
@click.option(
    "--like",
    metavar="DATASET",
    help="Take every option DATASET was converted with (its dataset.json: split, seed, shards as asked, encoding, ...) and its labels, numbers included (classes INPUT_DIR has beyond them get the next ones); each image DATASET holds keeps its split unless --split, --seed, --split-rule or --split-group is given. Options given too replace only what they name. DATASET may be OUTPUT_DIR itself (with --overwrite).",
)
@click.option(
    "--shards",
    metavar="N|SPLIT=N,...",
    help="Shards in total, or per split (e.g. train=16,validation=2). Default: ~100-200 MB per shard.",
)
@click.option(
    "--split",
    "split",
    metavar="NAME=FRAC,...",
    help="Split every class, e.g. train=0.8,validation=0.2: each split of each class of n images gets floor or ceil of its fraction times n, the images chosen by a seeded hash of their paths; update never moves an image (new ones go where their class is furthest below its share). Not with an INPUT_DIR already split into train/validation/test folders, nor a --file-list with a split column (those are used as they are).",
)
@click.option(
    "--split-rule",
    type=click.Choice(options.SPLIT_RULES),
    default="exact",
    show_default=True,
    help="How --split picks an image's split: exact (shares per class exact to one image) or hash (a pure function of the path's hash: shares follow the fractions only on average; what datasets made before the exact rule use). Recorded in dataset.json; update keeps it.",
)
@click.option(
    "--split-group",
    metavar="PATTERN",
    help=r"Keep images of one group in one split: a regular expression searched in each path below INPUT_DIR; its first group (or the whole match) names the group, e.g. 'patient_(\d+)'. Paths it does not match are groups of one. Run in linear time by RE2 (no backreferences or lookaround). Recorded in dataset.json.",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the shuffle and of --split.")
@click.option(
    "--labels",
    "labels_file",
    type=click.Path(dir_okay=False, path_type=str),
    help="File with one class name per line: fixes label order and the subset of classes.",
)
@click.option(
    "--label-offset",
    type=int,
    default=0,
    show_default=True,
    help="Added to every label (Inception's tooling uses 1: 0 = background).",
)
@click.option(
    "--encoding",
    type=click.Choice(options.ENCODINGS),
    default="keep",
    show_default=True,
    help="keep: store the file bytes (transcoding only what TF cannot decode); jpeg/png: re-encode; raw: decoded uint8 pixels.",
)
@click.option(
    "--quality",
    type=click.IntRange(1, 100),
    default=95,
    show_default=True,
    help="JPEG quality of re-encoded JPEGs: --encoding jpeg, and keep's JPEGs under --resize/--channels.",
)
@click.option(
    "--resize", metavar="N|WxH", help="Resize: shorter side to N (aspect kept), or exactly WxH. Implies re-encoding."
)
@click.option(
    "--resize-mode",
    type=click.Choice(options.RESIZE_MODES),
    default="always",
    show_default=True,
    help="always: every image to the --resize size, small ones enlarged; shrink: only images whose shorter side is over N (--resize N), the others keep their size.",
)
@click.option(
    "--channels",
    type=click.Choice(options.CHANNEL_CHOICES),
    default="keep",
    show_default=True,
    help="Convert every image to 1 (grayscale) or 3 (RGB) channels.",
)
@click.option(
    "--max-pixels",
    type=click.IntRange(min=1),
    default=DEFAULT_MAX_PIXELS,
    show_default=True,
    help="Skip images with more pixels than this, before decoding them.",
)
@click.option(
    "--validate/--no-validate",
    default=True,
    show_default=True,
    help="Fully decode every image so corrupt files are skipped, not written.",
)
@click.option("--strict", is_flag=True, help="Fail (exit 1, publish nothing) if any image is unusable.")
@click.option(
    "--compression",
    type=click.Choice(options.COMPRESSION_CHOICES),
    help="Compress the shards (JPEG/PNG payloads barely shrink).",
)
@click.option(
    "--index/--no-index",
    default=False,
    help="Write a DALI index ({shard}.idx) next to each shard (uncompressed shards only: not with --compression).",
)
@click.option(
    "--dedupe",
    type=click.Choice(options.DEDUPE_MODES),
    default="report",
    show_default=True,
    help="Byte-identical images (within a class, across classes = conflicting labels, across splits = leakage): report them, drop all but the first copy, or don't look (saves 32 bytes of memory per image during the run, ~100 at its end).",
)
@click.option(
    "--checksum",
    type=click.Choice(options.CHECKSUM_CHOICES),
    default=options.DEFAULT_CHECKSUM,
    show_default=True,
    help="Checksum of each shard file in dataset.json, checked by inspect --verify and --resume (every record also has its own CRC). xxh3_128 (xxhsum -H2) costs ~10 us per 100 KB image, sha256 (sha256sum) ~55 us.",
)
@click.option(
    "--fsync/--no-fsync",
    default=True,
    show_default=True,
    help="Flush every shard to disk before publishing, so a power cut cannot leave a published dataset with lost data. --no-fsync leaves that to the OS: faster when the disk writes slower than the conversion runs (the output bytes are the same).",
)
@click.option(
    "--overwrite",
    is_flag=True,
    help="Replace what a non-empty OUTPUT_DIR holds: a dataset, or the finished shards of an unfinished run.",
)
@click.option(
    "--resume",
    is_flag=True,
    help="Continue an interrupted run of the same command: finished shards (checked by their checksum, or with --checksum none by their record CRCs) are reused; the result is identical. Without --resume, a run over an unfinished one's finished shards needs --overwrite.",
)
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    help="Worker processes (each encodes and writes whole shards). Default: all CPUs, fewer for small jobs. Output is identical for any value.",
)
@click.option(
    "--file-list",
    metavar="FILE",
    help="CSV/TSV of path,label_name (or path: CLASS/.../image below INPUT_DIR), or path,label_name,split to give each image its split, to convert instead of walking INPUT_DIR; relative paths are joined to INPUT_DIR.",
)
@click.option(
    "--metadata",
    metavar="FILE",
    help="metadata.jsonl or metadata.csv (Hugging Face imagefolder's): one row per image, file_name its path below INPUT_DIR, every other column a feature image/<column>; a labels column of class-name lists makes multi-label records. Default: INPUT_DIR/metadata.jsonl or metadata.csv, when there.",
)
@click.option(
    "--annotations",
    metavar="FILE|DIR",
    help="Object detection boxes for the images anywhere below INPUT_DIR: a COCO instances JSON, a folder of Pascal VOC XML, or a folder of YOLO txt with its classes file (classes.txt, obj.names or data.yaml), told apart by content. Writes the TensorFlow Object Detection API's keys and label_map.pbtxt; boxes follow the pixels as stored in each file.",
)
@click.option(
    "--skip-empty",
    is_flag=True,
    help="With --annotations: leave out the images that have no box (default: kept, with none).",
)
@click.option(
    "--masks/--no-masks",
    default=False,
    help="With COCO --annotations: each object's instance mask (its segmentation: polygons or RLE, rasterized by pycocotools) as a one-channel PNG of 0 and 1 in image/object/mask, turned and resized with the image. Needs: pip install 'img2tfrecord[masks]'.",
)
@click.option(
    "--engine",
    type=click.Choice(options.ENGINES),
    default="local",
    show_default=True,
    help="local: processes on this machine; beam: Apache Beam (DirectRunner, Dataflow, Flink, Spark), same bytes. Needs: pip install 'img2tfrecord[beam]'.",
)
@click.option(
    "--beam-options",
    metavar="'--runner=... ...'",
    help="Beam pipeline options, as one quoted string. Default: --runner=DirectRunner --direct_running_mode=multi_processing --direct_num_workers=<--workers>.",
)
@click.option(
    "--dry-run",
    is_flag=True,
    help="Print the plan (classes, counts per split and shard) on stdout, and what the real run would refuse; write nothing.",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="One JSON object on stdout on every exit: ok, exit_code, then the summary, or error {kind, message} and what the run learnt.",
)
@click.option(
    "--quiet",
    "-q",
    is_flag=True,
    help="No progress bar, no summary, no notes (warnings and skipped files still go to stderr).",
)
def convert_command(
    input_dir: str, output_dir: str, labels_file: str | None, as_json: bool, quiet: bool, **kw: Any
) -> None:
    """Convert INPUT_DIR/CLASS/.../image files into sharded TFRecords in OUTPUT_DIR.

    \b
    Examples:
      img2tfrecord convert data/ out/ --shards 16
      img2tfrecord convert data/ out/ --split train=0.8,validation=0.2 --encoding jpeg --resize 256

    Exit codes: 0 success (skipped files are reported), 1 data failure (--strict with bad images,
    I/O error), 2 usage error, 130 Ctrl-C (143 SIGTERM).
    """
    from img2tfrecord.conversion.convert import convert

    if kw["like"] is not None:  # --like: what the user typed replaces the dataset's; click's defaults do not
        source = click.get_current_context().get_parameter_source
        kw = {k: v for k, v in kw.items() if source(k) is not click.core.ParameterSource.DEFAULT}
    if labels_file is not None:
        kw["labels"] = labels_file
    progress = _Progress(enabled=not quiet and not as_json and _stderr_is_terminal() and not kw.get("dry_run"))

    def on_event(kind: str, msg: str) -> None:
        answer.event(kind, msg)
        if quiet and kind == "note":  # --quiet keeps what went wrong (warnings, skips), not the notes
            return
        progress.event(kind, msg)

    def on_progress(images: int, nbytes: int, total: int) -> None:
        if progress.bar is None:
            progress.start(total)
        progress.update(images, nbytes)

    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        with bar_stops_at_ctrl_c(progress):
            summary = convert(
                input_dir,
                output_dir,
                on_event=on_event,
                progress=on_progress if progress.enabled else None,
                **kw,
            )
    except Img2TFRecordError as e:
        progress.close(finished=False)
        answer.error(e)
    except KeyboardInterrupt as e:
        progress.close(finished=False)
        if isinstance(e, Interrupted):
            interrupted(e.describe(output_dir), e)
        interrupted("interrupted: nothing was published; run the same command again to convert")
    progress.close()
    answer.result(summary)
    if not as_json and not quiet:
        text = safe_lines(_summary_text(summary))
        report(text, err=not summary["dry_run"])  # a dry run's plan is its output: stdout


_terminated = False


def interrupted(message: str, e: Interrupted | None = None) -> NoReturn:
    """Ctrl-C (exit 130) or SIGTERM (143): the line that says what is left, and for --json what is known."""
    answer.failed(143 if _terminated else 130, "interrupted", message, e.learnt() if e is not None else None)


def _on_sigterm(signum: int, frame: Any) -> None:
    """SIGTERM unwinds like Ctrl-C (workers stopped, partial files removed) but exits 143."""
    global _terminated
    _terminated = True
    raise KeyboardInterrupt
