"""`img2tfrecord report`: options in, `inspection.report.report()` called, one line out (or, with
`--json`, one JSON object on every exit: cli/answer.py)."""

from __future__ import annotations

import dataclasses

import click

from img2tfrecord.cli import answer
from img2tfrecord.cli import options as cli_options
from img2tfrecord.cli.text import safe
from img2tfrecord.errors import Img2TFRecordError, plural


def report_hint(out: str) -> str:
    """The command that writes OUT's report, as `inspect`, `convert` and `update` advise it."""
    import shlex

    return f"img2tfrecord report {shlex.quote(out)}"


@click.command(
    "report",
    cls=answer.Answering,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    short_help="Write one HTML page that shows a dataset.",
)
@click.argument("out", metavar="OUT")
@cli_options.storage_option
@click.option(
    "-o",
    "--output",
    "html",
    type=click.Path(dir_okay=False),
    metavar="FILE.html",
    help="Where to write the page. Default: OUT-report.html beside the dataset folder.",
)
@click.option(
    "-n",
    "--per-class",
    type=click.IntRange(min=0),
    default=8,
    show_default=True,
    help="Thumbnails per class (a seeded sample; 0: none).",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the thumbnail sample.")
@click.option(
    "--force",
    is_flag=True,
    help="Replace an existing HTML page img2tfrecord did not write (an earlier report is replaced without it).",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print one JSON object on stdout, on every exit: ok, exit_code, then path, bytes, records, classes, thumbnails, flagged, or error {kind, message}.",
)
def report_command(out: str, html: str | None, per_class: int, seed: int, force: bool, as_json: bool) -> None:
    """Write one self-contained HTML page about the dataset in OUT: counts per split and class,
    thumbnails per class, image sizes and formats, skipped files, duplicates and versions.

    It reads dataset.json, the catalog and the sampled records only, and the page needs no
    network: open it from disk in any browser, or send it along.

    \b
      img2tfrecord report out
      img2tfrecord report out -o out.html -n 16
    """
    from img2tfrecord.inspection.report import report

    try:
        w = report(out, html, per_class=per_class, seed=seed, force=force)
    except Img2TFRecordError as e:
        answer.error(e)
    answer.result(dataclasses.asdict(w))
    if as_json:
        return
    flagged = f"; {plural(w.flagged, 'split x class count')} flagged" if w.flagged else ""
    click.echo(
        f"wrote {safe(w.path)} ({w.bytes / 1e6:.1f} MB): {plural(w.records, 'record')}, "
        f"{plural(w.classes, 'class', 'classes')}, {plural(w.thumbnails, 'thumbnail')}{flagged}"
    )
