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
from img2tfrecord.cli import options as cli_options
from img2tfrecord.cli.text import report, safe, safe_lines, size_text, skipped_text
from img2tfrecord.errors import Img2TFRecordError, Interrupted, plural


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
    text += absent_text(s)
    if s["transcoded"]:
        text += " Transcoded: " + ", ".join(f"{k} {v}" for k, v in s["transcoded"].items()) + "."
    if s["ignored_files"]:
        text += f" Ignored {plural(s['ignored_files'], 'non-image file')}."
    if s["excluded_files"]:
        text += f" Left out {plural(s['excluded_files'], 'image')} of classes not in --labels."
    return text + _boxes_text(s) + f"\nSee it in a browser: {report_hint(s['output'])}"


def absent_text(s: dict[str, Any]) -> str:
    """The summary's sentence per split left with no image of a class (its warning says why it matters):
    convert's and update's, the same."""
    return "".join(
        f" No image of {', '.join(names[:5])}{' ...' if len(names) > 5 else ''} in {split} (see the warning)."
        for split, names in (s.get("absent_classes") or {}).items()
    )


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
@cli_options.storage_option
@cli_options.convert_options
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
def convert_command(input_dir: str, output_dir: str, as_json: bool, quiet: bool, **kw: Any) -> None:
    """Convert INPUT_DIR/CLASS/.../image files into sharded TFRecords in OUTPUT_DIR.

    \b
    Examples:
      img2tfrecord convert data/ out/ --shards 16
      img2tfrecord convert data/ out/ --split train=0.8,validation=0.2 --encoding jpeg --resize 256

    Exit codes: 0 success (skipped files are reported), 1 data failure (--strict with bad images,
    I/O error), 2 usage error, 130 Ctrl-C (143 SIGTERM).
    """
    from img2tfrecord.conversion.write.engines.pool import discard_early, start_early

    signal.signal(signal.SIGTERM, _on_sigterm)  # first: the workers and the load's thread start next
    # the workers start first (before the library's imports and the plan), then the record writer loads
    # in a thread of this process while the library imports and plans: both ready when the walk ends
    engine = kw.get("engine") or "local"
    start_early(
        input_dir,
        output_dir,
        workers=kw.get("workers"),
        engine=engine,
        dry_run=bool(kw.get("dry_run")),
        file_list=kw.get("file_list"),
    )
    try:
        with _writer_loading(output_dir, engine, kw):
            _convert(input_dir, output_dir, as_json, quiet, kw)
    except KeyboardInterrupt:  # before convert() began (as the library imported, as a thread started)
        interrupted("interrupted: nothing was written")
    finally:
        discard_early()  # refused before convert() took them (convert() stops them itself otherwise)


def _writer_loading(output_dir: str, engine: str, kw: dict[str, Any]) -> contextlib.AbstractContextManager[None]:
    """The record writer loading in a thread while the block runs, when this run writes records
    locally in this process (not a dry run, not Beam's, not to a remote OUTPUT)."""
    from img2tfrecord import fs, tf_import
    from img2tfrecord.conversion.write.engines.pool import EXTENSIONS

    if kw.get("dry_run") or engine != "local" or fs.is_remote(output_dir):
        return contextlib.nullcontext()
    return tf_import.record_io_loading(EXTENSIONS)


def _convert(input_dir: str, output_dir: str, as_json: bool, quiet: bool, kw: dict[str, Any]) -> None:
    from img2tfrecord.conversion.convert import convert

    if kw["like"] is not None:  # --like: what the user typed replaces the dataset's; click's defaults do not
        source = click.get_current_context().get_parameter_source
        kw = {k: v for k, v in kw.items() if source(k) is not click.core.ParameterSource.DEFAULT}
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
