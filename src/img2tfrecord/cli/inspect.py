"""`img2tfrecord inspect`: parse options, call `inspector.inspect`, format the report.

Nothing here imports TensorFlow (only `--verify` does, inside the library), so `--help` is fast.
"""

from __future__ import annotations

import signal
import sys
import unicodedata
from typing import Any

import click

from img2tfrecord.cli import answer
from img2tfrecord.cli import options as cli_options
from img2tfrecord.cli.report import report_hint
from img2tfrecord.cli.text import safe as _safe
from img2tfrecord.cli.text import size_text
from img2tfrecord.errors import Img2TFRecordError, UsageError, plural

BAR_WIDTH = 40
MAX_LABEL_ROWS = 50
CELL_WIDTH = 60


def _char_width(ch: str) -> int:
    """Terminal columns of one character: 2 for East Asian wide/full-width, 0 for combining marks."""
    if unicodedata.combining(ch) or unicodedata.category(ch) in ("Mn", "Me", "Cf"):
        return 0
    return 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1


def display_width(text: str) -> int:
    """Terminal columns `text` takes (`len` counts 日本の猫 as 4, a terminal draws 8)."""
    return sum(1 if " " <= ch < "\x7f" else _char_width(ch) for ch in text)


def _cell(text: str | None, width: int = CELL_WIDTH) -> str:
    """A table cell from record content: safe, and cut to `width` terminal columns."""
    t = _safe(text or "")
    if display_width(t) <= width:
        return t
    out, used = [], 0
    for ch in t:
        w = _char_width(ch)
        if used + w > width - 3:
            break
        out.append(ch)
        used += w
    return "".join(out) + "..."


def _bar_char() -> str:
    enc = (getattr(sys.stdout, "encoding", None) or "").lower()
    return "\u2588" if "utf" in enc else "#"


def _table(rows: list[list[str]], indent: str = "  ") -> list[str]:
    """Rows as aligned columns, padded by display width (wide characters take two columns)."""
    if not rows:  # a dataset.json that lists no shard
        return []
    sizes = [[display_width(c) for c in r] for r in rows]
    widths = [max(s[i] for s in sizes) for i in range(len(rows[0]))]
    return [
        indent + "  ".join(c + " " * (w - n) for c, n, w in zip(r, s, widths)).rstrip() for r, s in zip(rows, sizes)
    ]


def _count_values(f: dict[str, Any]) -> str:
    lo, hi = f["min_values"], f["max_values"]
    return str(lo) if lo == hi else f"{lo}..{hi}"


def _details(s: dict[str, Any], title: str) -> list[str]:
    """The detailed block of a file or of the total: a section after another, each its own renderer."""
    return [
        *_header(s, title),
        *_features(s),
        *_labels(s),
        *_boxes(s),
        *_images(s),
        *_first_records(s),
    ]


def _header(s: dict[str, Any], title: str) -> list[str]:
    """Records, bytes, compression; and how many records are not tf.train.Example at all."""
    out = [f"{title}: {s['records']:,} records, {size_text(s['bytes'])}, compression {s['compression'] or 'unknown'}"]
    if s["non_examples"]:
        n = s["non_examples"]
        out.append(f"  {plural(n, 'record')} {'is' if n == 1 else 'are'} not tf.train.Example")
    return out


def _features(s: dict[str, Any]) -> list[str]:
    """The schema the records show: a row per key, then what was left undescribed or unread."""
    from img2tfrecord.inspection.records import MAX_RECORD_KEYS
    from img2tfrecord.inspection.scan import REPORT_RECORD_BYTES
    from img2tfrecord.inspection.stats import MAX_FEATURE_KEYS

    out = []
    if s["features"]:
        out.append("  features (key, type, values per record):")
        rows = []
        for key, f in s["features"].items():
            note = "" if f["records"] == s["examples"] else f"in {f['records']:,} of {s['examples']:,} records"
            rows.append([_cell(key), "|".join(f["types"]), _count_values(f), note])
        out += _table(rows, "    ")
    if s["more_keys"]:
        more = f"more than {s['more_keys']:,}" if s["more_keys_capped"] else f"{s['more_keys']:,}"
        out.append(f"    ... and {more} more keys, not described (each file describes at most {MAX_FEATURE_KEYS})")
    if s["more_key_entries"]:
        out.append(
            f"    ... and {s['more_key_entries']:,} keys in records holding more than {MAX_RECORD_KEYS} (not read past those)"
        )
    if s["unread"]:
        n = s["unread"]
        out.append(
            f"  {plural(n, 'record')} over {size_text(REPORT_RECORD_BYTES)}: CRC checked, content not read (--verify reads {'it' if n == 1 else 'them'})"
        )
    return out


def _labels(s: dict[str, Any]) -> list[str]:
    """A bar per label (the first MAX_LABEL_ROWS), scaled to the most common; then the unlabelled."""
    from img2tfrecord.inspection.stats import MAX_LABELS

    out = []
    if s["labels"]:
        out.append("  labels:")
        top = max(x["count"] for x in s["labels"])
        ch = _bar_char()
        rows = []
        for x in s["labels"][:MAX_LABEL_ROWS]:
            bar = ch * max(1, round(BAR_WIDTH * x["count"] / top))
            rows.append([str(x["label"]), _cell(x["name"]), bar, f"{x['count']:,}"])
        out += _table(rows, "    ")
        if len(s["labels"]) > MAX_LABEL_ROWS:
            out.append(f"    ... and {len(s['labels']) - MAX_LABEL_ROWS} more labels (see --json)")
        if s["labels_omitted"]:
            out.append(
                f"    ... and {plural(s['labels_omitted'], 'record')} of labels past the first {MAX_LABELS:,} (not counted)"
            )
    if s["unlabelled"]:
        out.append(f"  records without a label: {s['unlabelled']:,}")
    return out


def _boxes(s: dict[str, Any]) -> list[str]:
    """Detection datasets: how many boxes in how many records, and a count per class."""
    if not (b := s.get("boxes")):
        return []
    out = [f"  boxes: {b['total']:,} in {plural(b['records'], 'record')}"]
    return out + _table([[_cell(c), f"{n:,}"] for c, n in list(b["per_class"].items())[:MAX_LABEL_ROWS]], "    ")


def _images(s: dict[str, Any]) -> list[str]:
    """What the images are: formats, the range of heights and widths, channels."""
    out = []
    if s["formats"]:
        out.append("  formats:  " + ", ".join(f"{_cell(k)} {v:,}" for k, v in s["formats"].items()))
    for dim in ("height", "width"):
        r = s[dim]
        if r:
            out.append(f"  {dim + ':':9} min {r['min']}, median {r['median']}, max {r['max']}")
    if s["channels"]:
        out.append("  channels: " + ", ".join(f"{k}: {v:,}" for k, v in s["channels"].items()))
    return out


def _first_records(s: dict[str, Any]) -> list[str]:
    """A table of the first records; a file column when they come from more than one file."""
    if not s["first_records"]:
        return []
    sources = list(dict.fromkeys(r.get("file") for r in s["first_records"]))
    of = f" of {sources[0]}" if len(sources) == 1 and sources[0] else ""
    n = len(s["first_records"])
    out = [f"  first {plural(n, 'record') if n > 1 else 'record'}{of}:"]
    rows = [["#", "filename", "label", "text", "HxWxC", "format", "bytes"] + (["file"] if len(sources) > 1 else [])]
    for r in s["first_records"]:
        shape = "x".join("?" if r[k] is None else str(r[k]) for k in ("height", "width", "channels"))
        enc = "" if r["encoded_bytes"] is None else f"{r['encoded_bytes']:,}"
        rows.append(
            [
                str(r["index"]),
                _cell(r["filename"]),
                "" if r["label"] is None else str(r["label"]),
                _cell(r["text"]),
                shape,
                _cell(r["format"]),
                enc,
            ]
            + ([r.get("file") or ""] if len(sources) > 1 else [])
        )
    return out + _table(rows, "    ")


def format_report(rep: dict[str, Any], per_file: bool = False) -> str:
    """The human-readable report: a line per file, then the details of all files together."""
    lines: list[str] = []
    files = rep["files"]
    rows = []
    for f in files:
        status = "MISSING" if not f["exists"] else plural(f["problems"], "problem") if f["problems"] else "ok"
        rows.append([f["path"], f"{f['records']:,} records", size_text(f["bytes"]), f["compression"] or "-", status])
    lines += _table(rows, "")
    for lin in rep.get("lineage") or []:
        parent = f"parent {str(lin['parent'])[:16]}..." if lin.get("parent") else "no parent"
        lines.append(f"dataset {lin['dir']}: version {lin['version']} ({parent}), created {lin.get('created')}")
    if per_file and len(files) > 1:
        for f in files:
            lines += ["", *_details(f, f["path"])]
    lines += ["", *_details(rep["total"], "total" if len(files) > 1 else files[0]["path"] if files else "total")]
    if rep["extracted"]:
        e = rep["extracted"]
        lines += [
            "",
            f"extracted {e['images']:,} images to {e['dir']}"
            + (" (a folder per split, then per class)" if e["by_split"] else "")
            + (f" ({e['skipped']} records had no usable image)" if e["skipped"] else "")
            + (
                f"; {plural(e['renamed'], 'image')} renamed with ~N: another record had the same name"
                if e["renamed"]
                else ""
            ),
        ]
    if rep["contact_sheet"]:
        c = rep["contact_sheet"]
        notes = [f"{c['width']}x{c['height']}", f"{c['rows']} rows"]
        if c["unreadable"]:
            notes.append(f"{c['unreadable']} images not drawn (crossed out: undecodable or too large)")
        if c["omitted"]:
            notes.append(f"{c['omitted']} images of labels past the first {c['rows']} left out")
        if c["names_escaped"]:
            notes.append(
                f"{plural(c['names_escaped'], 'class name')} drawn with \\uXXXX escapes: no installed font has their characters (e.g. install fonts-noto-cjk)"
            )
        lines += ["", f"contact sheet: {c['file']} ({', '.join(notes)})"]
    n = len(rep["problems"]) + rep["problems_omitted"]
    if n:
        compressed = {f["path"] for f in files if f["compression"] not in (None, "none")}
        lines += ["", f"problems ({n}):"] + [f"  {_problem(p, p['file'] in compressed)}" for p in rep["problems"]]
        if rep["problems_omitted"]:
            lines.append(f"  ... and {rep['problems_omitted']} more")
    elif rep["verified"]:
        t = rep["total"]
        lines += ["", f"verified {plural(t['files'], 'file')}, {plural(t['records'], 'record')}: no problems"]
    return "\n".join(lines + _segmentation_text(rep) + _lists_text(rep))


def _segmentation_text(rep: dict[str, Any]) -> list[str]:
    """A segmentation dataset's mask classes: id, name, share of the mask pixels, images holding it."""
    lines = []
    for seg in rep.get("segmentation") or []:
        lines += ["", f"mask classes of {_safe(seg['dir'])} (id, name, share of pixels, images):"]
        rows = [
            [str(c["id"]), _cell(c["name"] or "-"), f"{100 * c['share']:.2f}%", f"{c['images']:,}"]
            for c in seg["classes"][:MAX_LABEL_ROWS]
        ]
        lines += _table(rows, "  ")
        if len(seg["classes"]) > MAX_LABEL_ROWS:
            lines.append(f"  ... and {len(seg['classes']) - MAX_LABEL_ROWS} more classes (see --json)")
    return lines


def _lists_text(rep: dict[str, Any]) -> list[str]:
    """--split-group's finding and --export-list's file, below the report."""
    lines = []
    if g := rep.get("split_groups"):
        n = g["crossing_count"]
        head = f"{n} of {plural(g['groups'], 'group')} (--split-group {g['pattern']}) cross splits"
        if not n:
            lines += ["", f"{head}: none leaks across splits"]
        else:
            lines += ["", f"{head} (leakage between splits):"]
            for name, per in list(g["crossing"].items())[:10]:
                lines.append(f"  {_safe(name)}: " + ", ".join(f"{s} {k}" for s, k in per.items()))
            if n > 10:
                lines.append(f"  ... and {n - 10} more (--json lists up to {len(g['crossing'])})")
    if e := rep.get("exported"):
        lines += ["", f"wrote {plural(e['images'], 'image')} as path,label,split to {_safe(e['file'])}"]
    return lines


def _datasets(paths: tuple[str, ...]) -> list[str]:
    """The PATHs that are dataset folders (a dataset.json in them), as typed: what `report` reads."""
    import os

    return [p for p in dict.fromkeys(paths) if os.path.isfile(os.path.join(p, "dataset.json"))]


def _problem(p: dict[str, Any], compressed: bool = False) -> str:
    where = p["file"]
    if p["record"] is not None:
        where += f": record {p['record']}"
    if p["offset"] is not None:
        where += f" at byte {p['offset']:,}" + (" (decompressed)" if compressed else "")
    return f"{where}: {_safe(p['message'])}"


@click.command(
    "inspect",
    cls=answer.Answering,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    short_help="Look inside TFRecord shards; verify, extract, contact sheet.",
)
@click.argument("paths", nargs=-1, required=True, metavar="PATH...")
@cli_options.storage_option
@click.option(
    "-n",
    "--records",
    "n",
    type=click.IntRange(min=0),
    default=5,
    show_default=True,
    help="Records to show in the table; images for --extract; thumbnails per class for --contact-sheet.",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print the report as one JSON object on stdout, on every exit: ok, exit_code, then the report (keys: docs/inspecting.md), or error {kind, message}.",
)
@click.option(
    "--verify",
    is_flag=True,
    help="Also decode every image and check shapes, schema, dataset.json counts/sizes/checksums and .idx files.",
)
@click.option(
    "--extract",
    "extract_dir",
    type=click.Path(file_okay=False),
    metavar="DIR",
    help="Write the first -n images to DIR/<class>/<filename>, or DIR/<split>/<class>/<filename> for a split dataset (RAW as PNG); `convert DIR` rebuilds them.",
)
@click.option("--all", "extract_all", is_flag=True, help="With --extract: every image, not just -n.")
@click.option(
    "--contact-sheet",
    type=click.Path(dir_okay=False),
    metavar="FILE",
    help="Write a grid of thumbnails, a row per class (up to -n each), as FILE's extension says: .png, .jpg, .webp, .bmp, .tif.",
)
@click.option(
    "--force",
    is_flag=True,
    help="With --contact-sheet: replace an existing picture img2tfrecord did not write (an earlier sheet is replaced without it).",
)
@click.option(
    "--split",
    help="Only the shards of this split (from dataset.json, else the file name); a PATH with none of them is refused.",
)
@click.option("--per-file", is_flag=True, help="Show the detailed block for every file, not only the total.")
@click.option(
    "--split-group",
    metavar="PATTERN",
    help="Name the groups whose images lie in more than one split (leakage), a group being what PATTERN (a regular expression, as convert's --split-group) finds in each image's path. PATH: one dataset folder.",
)
@click.option(
    "--export-list",
    type=click.Path(dir_okay=False),
    metavar="FILE",
    help="Write the dataset's split assignment as a path,label,split file list; convert --file-list FILE --labels PATH/labels.txt (same options) gives what compact gives. PATH: one dataset folder.",
)
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    help="Threads decoding images for --verify. Default: all cores. The report is the same for any value.",
)
def inspect_command(
    *,
    paths: tuple[str, ...],
    n: int,
    as_json: bool,
    verify: bool,
    extract_dir: str | None,
    extract_all: bool,
    contact_sheet: str | None,
    force: bool,
    split: str | None,
    per_file: bool,
    workers: int | None,
    split_group: str | None,
    export_list: str | None,
) -> None:
    """Look inside TFRecord files (ours or any tf.train.Example files).

    PATH is a shard file, a glob, an output directory (its dataset.json lists the shards) or a
    unique prefix of a shard file name (out/train-00000 finds out/train-00000-of-00016).

    \b
      img2tfrecord inspect out --verify
      img2tfrecord inspect out/train-00000 -n 20 --json
      img2tfrecord inspect out --extract imgs/ --all
      img2tfrecord inspect out --contact-sheet sheet.png -n 8

    Exit status: 0 if no problem was found, 1 if any was, 2 for usage errors, 130 Ctrl-C (143 SIGTERM).
    """
    from img2tfrecord.cli.convert import _on_sigterm, interrupted
    from img2tfrecord.inspection import scan as inspector

    signal.signal(signal.SIGTERM, _on_sigterm)  # SIGTERM ends it as Ctrl-C does: one line, exit 143
    try:
        if extract_all and not extract_dir:
            raise UsageError("--all only goes with --extract DIR")
        report = inspector.inspect(
            list(paths),
            records=n,
            verify=verify,
            split=split,
            extract_dir=extract_dir,
            extract_all=extract_all,
            contact_sheet=contact_sheet,
            progress=sys.stderr.isatty(),
            workers=workers,
            split_group=split_group,
            export_list=export_list,
            force=force,
        )
    except Img2TFRecordError as e:
        answer.error(e)
    except KeyboardInterrupt:
        # the contact sheet is written whole at the end or not at all (inspection.outputs)
        interrupted(
            "interrupted: nothing was checked to the end" + f"; {extract_dir} may be incomplete" * bool(extract_dir)
        )
    data = report.to_dict()
    answer.result(data, indent=2)
    if not as_json:
        click.echo(format_report(data, per_file))
        for d in _datasets(paths):
            click.echo(f"\nSee it in a browser: {_safe(report_hint(d))}")
    if not report.ok:
        found = f"{plural(report.problem_count, 'problem')} found"
        if as_json:  # the report's text lists them; the JSON answer's stderr says why the exit is 1
            answer.failed(1, "problems", f"error: {found}")
        answer.record("problems", found)
        sys.exit(1)
