"""`img2tfrecord update`: options in, img2tfrecord.conversion.versions.update.update() called, what changed out."""

from __future__ import annotations

import contextlib
import signal
from typing import Any

import click

from img2tfrecord.cli import answer
from img2tfrecord.cli import convert as convert_cli
from img2tfrecord.cli import options as cli_options
from img2tfrecord.cli.text import report, safe, safe_lines, size_text, skipped_text
from img2tfrecord.errors import Img2TFRecordError, Interrupted, plural


def _changes_text(s: dict[str, Any]) -> list[str]:
    lines = []
    for name, sp in s["splits"].items():
        parts = [f"{sp[k]} {k}" for k in ("added", "removed", "changed", "retried") if sp[k]]
        parts.append(f"{sp['unchanged']} unchanged")
        if sp["still_skipped"]:
            parts.append(f"{sp['still_skipped']} still skipped")
        if sp.get("still_dropped"):
            parts.append(f"{sp['still_dropped']} still dropped (copies)")
        if sp.get("unlisted"):
            parts.append(f"{sp['unlisted']} kept unread (in a folder that cannot be listed now)")
        sh = s["shards"].get(name, {})
        shards = f"shards: {sh.get('new', 0)} new, {sh.get('rewritten', 0)} rewritten, {sh.get('kept', 0)} kept"
        if sh.get("removed"):
            shards += f", {sh['removed']} emptied"
        lines.append(f"  {name}: {', '.join(parts)}; {shards}")
        for cls, n in sp["classes"].items():
            moved = [f"{n[k]} {k}" for k in ("added", "removed", "changed", "retried") if n[k]]
            if moved:
                lines.append(f"    {cls}: {', '.join(moved)}")
    if counts := s.get("split_counts"):
        lines.append("  images per split, before -> after:")
        for cls, per in counts.items():
            lines.append(f"    {cls}: " + ", ".join(f"{name} {a} -> {b}" for name, (a, b) in per.items()))
    if s.get("annotations_changed"):
        lines.append("  the annotations changed since the last version: an image whose boxes changed counts as changed")
    if s["new_classes"]:
        lines.append(
            f"  {plural(len(s['new_classes']), 'new class', 'new classes')} (the next labels): {', '.join(s['new_classes'])}"
        )
    if d := s.get("dedupe"):  # a --dedupe drop dataset: the copy a fresh convert keeps
        said = [
            f"{plural(d['dropped'], 'new image')} dropped (a copy of one kept)" if d["dropped"] else "",
            f"{plural(d['displaced'], 'record')} dropped for an earlier new copy" if d["displaced"] else "",
            f"{plural(d['restored'], 'dropped copy', 'dropped copies')} encoded again (the kept copy left)"
            if d["restored"]
            else "",
        ]
        if any(said):
            lines.append("  duplicates (--dedupe drop): " + ", ".join(x for x in said if x))
    if s["vanished_classes"]:
        lines.append(
            f"  {plural(len(s['vanished_classes']), 'class', 'classes')} with no image left (labels kept, 0 images): "
            + ", ".join(s["vanished_classes"])
        )
    return lines


def summary_text(s: dict[str, Any]) -> str:
    if s["up_to_date"]:
        return f"{s['output']} is up to date with {s['input']} (version {s['version']}): nothing written"
    if s["dry_run"]:
        head = (
            f"Changes from {s['input']} to {s['output']} (dry run, nothing written): version {s['version']} -> "
            f"{s['version'] + 1}, {plural(s['shards_to_write'], 'new shard')}, {plural(s['shards_to_rewrite'], 'shard')} rewritten, "
            f"about {size_text(s['bytes_needed'])} to write"
        )
        refused = [f"  the real run would stop here (exit 1): {s['refused']}"] if s.get("refused") else []
        return "\n".join([head, *_changes_text(s), *refused])
    head = (
        f"Updated {s['output']} to version {s['version']}: {s['records']:,} records; "
        f"{plural(s['shards_new'], 'new shard')}, {plural(s['shards_rewritten'], 'shard')} rewritten, "
        f"{plural(s['shards_linked'], 'shard')} kept as {'it was' if s['shards_linked'] == 1 else 'they were'} ({'copies' if s.get('files_copied') else 'hard links'}); "
        f"{size_text(s['bytes_written'])} written in {s['elapsed_seconds']:.1f} s"
    )
    if s["skipped"]:
        head += f". {skipped_text(len(s['skipped']), boxes=bool(s.get('detection')))} skipped (listed in dataset.json)"
    if s.get("still_skipped"):
        head += f"; {plural(s['still_skipped'], 'image')} skipped before and unchanged, still skipped"
    if absent := convert_cli.absent_text(s):  # as convert says it
        head += "." + absent
    from img2tfrecord.cli.report import report_hint

    return "\n".join([head, *_changes_text(s), f"See it in a browser: {report_hint(s['output'])}"])


@click.command(cls=answer.Answering, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.argument("input_dir", type=click.Path(file_okay=False, path_type=str))
@click.argument("output_dir", type=click.Path(file_okay=False, path_type=str))
@cli_options.storage_option
@click.option(
    "--check-content",
    is_flag=True,
    help="Also compare each image's content digest (reads every file), not only its size and mtime.",
)
@click.option("--file-list", metavar="FILE", help="The input as a CSV/TSV file list (as for convert).")
@click.option(
    "--strict",
    is_flag=True,
    help="Fail (exit 1, publish nothing) if an image it reads is unusable or a file or folder cannot be read.",
)
@click.option(
    "--resume",
    is_flag=True,
    help="Continue an interrupted update: reuse its finished new and rewritten shards whose sources are unchanged.",
)
@click.option("--fsync/--no-fsync", default=True, show_default=True, help="As for convert.")
@click.option(
    "--max-delete",
    metavar="N|P%",
    help="Refuse (exit 1, nothing written) an update that would remove more records than this: a number, or a percentage of the dataset's records. Default: 50% (an input folder other than the dataset's removes them all).",
)
@click.option("--workers", type=click.IntRange(min=1), help="Worker processes for the new images (as for convert).")
@cli_options.update_options
@click.option(
    "--dry-run", is_flag=True, help="List what changed (per split and class) and what would be written; write nothing."
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="One JSON object on stdout on every exit: ok, exit_code, then the summary, or error {kind, message} and what the run learnt.",
)
@click.option("--quiet", "-q", is_flag=True, help="No progress bar, no summary (warnings still go to stderr).")
def update_command(input_dir: str, output_dir: str, as_json: bool, quiet: bool, **kw: Any) -> None:
    """Bring the dataset in OUTPUT_DIR up to date with INPUT_DIR, at the cost of what changed.

    New and changed images go into new shards; shards that lose images are rewritten by copying
    their other records; every other shard is kept as it is (hard-linked into the new version).
    Labels keep their meaning (new classes get the next labels). No image changes split: under
    --split, a new image goes to the split its class is furthest below its share in (the hash
    rule: where its path's hash falls); `compact --rebalance` makes the shares exact again.

    \b
      img2tfrecord update data/ out/ --dry-run
      img2tfrecord update data/ out/

    Exit codes: 0 success or up to date, 1 data failure, 2 usage error, 130 Ctrl-C (143 SIGTERM).
    """
    signal.signal(signal.SIGTERM, convert_cli._on_sigterm)  # first: importing the library starts threads
    from img2tfrecord import tf_import

    # the record writer loads while the library is imported (not for a dry run, which writes nothing)
    try:
        with contextlib.nullcontext() if kw["dry_run"] else tf_import.record_io_loading(_UPDATE_EXTENSIONS):
            _update(input_dir, output_dir, as_json, quiet, kw)
    except KeyboardInterrupt:  # as the load's thread started, before update() began: nothing written
        convert_cli.interrupted(f"interrupted: {output_dir} is unchanged; run the same command again to update it")


# The extension modules `update` imports after the command starts (measured), loaded before the record
# writer's load starts in a thread (tf_import.record_io_loading): a dlopen waits for the other thread's.
_UPDATE_EXTENSIONS = (
    *("_struct", "binascii", "array", "_decimal", "_csv", "_queue", "_ctypes", "zlib", "_hashlib", "_json"),
    *("PIL._imaging", "PIL._webp", "google_crc32c", "xxhash", "numpy", "simplejpeg"),
    *("fcntl", "_socket", "select", "_posixsubprocess", "_multiprocessing"),
)


def _update(input_dir: str, output_dir: str, as_json: bool, quiet: bool, kw: dict[str, Any]) -> None:
    from img2tfrecord.conversion.versions.update import update

    progress = convert_cli._Progress(
        enabled=not quiet and not as_json and convert_cli._stderr_is_terminal() and not kw["dry_run"]
    )

    def on_event(kind: str, msg: str) -> None:
        answer.event(kind, msg)
        progress.event(kind, msg)

    def on_progress(images: int, nbytes: int, total: int) -> None:
        if progress.bar is None:
            progress.start(total)
        progress.update(images, nbytes)

    try:
        with convert_cli.bar_stops_at_ctrl_c(progress):
            summary = update(
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
        if isinstance(e, Interrupted) and e.published:
            convert_cli.interrupted(
                f"interrupted once {output_dir} was updated: it is complete, nothing is left to do", e
            )
        elif isinstance(e, Interrupted):
            from img2tfrecord.conversion.versions.resume import interrupted_line

            convert_cli.interrupted(interrupted_line(output_dir, e.done, e.total), e)
        convert_cli.interrupted(f"interrupted: {output_dir} is unchanged; run the same command again to update it")
    progress.close()
    answer.result(summary)
    if not as_json and not quiet:
        report(safe_lines(summary_text(summary)), err=not (summary["dry_run"] or summary["up_to_date"]))


@click.command(cls=answer.Answering, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.argument("output_dir", type=click.Path(file_okay=False, path_type=str))
@cli_options.storage_option
@click.option("--fsync/--no-fsync", default=True, show_default=True, help="As for convert.")
@click.option("--dry-run", is_flag=True, help="Say how many shards there are and would be; write nothing.")
@click.option(
    "--rebalance",
    is_flag=True,
    help="Also make every class's --split shares exact again (as a fresh convert splits the same images), moving images between splits; says how many moved. Converts a dataset of the hash split rule to the exact rule.",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="One JSON object on stdout on every exit: ok, exit_code, then the summary, or error {kind, message} and what the run learnt.",
)
@click.option("--quiet", "-q", is_flag=True, help="No summary (errors still go to stderr).")
def compact_command(output_dir: str, fsync: bool, dry_run: bool, rebalance: bool, as_json: bool, quiet: bool) -> None:
    """Fold the shards updates appended and rewrote into the layout a fresh conversion makes.

    Every image keeps its split (unless --rebalance), so the result equals, byte for byte
    (dataset.json apart from its lineage and options), `convert --file-list LIST INPUT OUT2
    --labels OUTPUT_DIR/labels.txt` with the dataset's options, LIST being the dataset's own
    assignment (`inspect OUTPUT_DIR --export-list LIST`); records are copied, never re-encoded,
    and INPUT is not read. A dataset already in that layout is left as it is (nothing written,
    same version).

    Exit codes: 0 success or nothing to do, 1 data failure, 2 usage error, 130 Ctrl-C (143 SIGTERM).
    """
    signal.signal(signal.SIGTERM, convert_cli._on_sigterm)
    from img2tfrecord.conversion.versions.compact import compact

    try:
        s = compact(output_dir, fsync=fsync, dry_run=dry_run, rebalance=rebalance)
    except Img2TFRecordError as e:
        answer.error(e)
    except KeyboardInterrupt as e:
        if isinstance(e, Interrupted) and e.published:
            convert_cli.interrupted(
                f"interrupted once {output_dir} was compacted: it is complete, nothing is left to do", e
            )
        convert_cli.interrupted(f"interrupted: {output_dir} is unchanged")
    answer.result(s)
    if as_json or quiet:
        return
    for w in s.get("warnings") or []:
        report(safe(f"warning: {w}"), err=True)
    moved = _moved_text(s.get("rebalanced"))
    if s["compact"]:
        text = f"{output_dir} is already compact (version {s['version']}, {plural(s['shards_after'], 'shard')}): nothing to do"
    elif dry_run:
        text = f"{output_dir}: {plural(s['shards_before'], 'shard')} now, {s['shards_after']} after compact (dry run)"
        text += f"; {moved} would move" if moved else ""
    else:
        text = (
            f"Compacted {output_dir} to version {s['version']}: {plural(s['shards_after'], 'shard')} "
            f"(were {s['shards_before']}); {size_text(s['bytes_written'])} written"
        )
        text += f"; {moved} moved" if moved else ""
    report(safe(text), err=not (dry_run or s["compact"]))


def _moved_text(r: dict[str, Any] | None) -> str:
    """--rebalance's moves: "3 images (train -> validation 2, validation -> train 1)"."""
    if r is None:
        return ""
    if not r["moved"]:
        return "no image"
    return f"{plural(r['moved'], 'image')} ({', '.join(f'{k} {n}' for k, n in r['from'].items())})"
