"""The page: the facts and pictures put into `templates/report.html.j2` by Jinja2, autoescape on.

Every name from the dataset (classes, files, reasons) reaches the page through the template's
escaping; only the SVG that matplotlib wrote (its own text escaped by matplotlib) is marked safe.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from markupsafe import Markup, escape

from img2tfrecord._version import __version__
from img2tfrecord.errors import plural, size_text

if TYPE_CHECKING:
    from img2tfrecord.inspection.report.facts import Facts
    from img2tfrecord.inspection.report.sample import DupGroup, Sample


def _charts(f: Facts) -> dict[str, str]:
    from img2tfrecord.inspection.report import charts

    flagged = f.flagged_classes
    counts = {s: {c: cell.count for c, cell in row.items()} for s, row in f.counts.items()}
    out = {"split_class": charts.split_class_chart(f.classes, f.splits, counts, flagged)} if f.classes else {}
    sh = f.shapes
    if sh is not None and sh.known:
        out["height"] = charts.histogram(sh.heights, "height (pixels)")
        out["width"] = charts.histogram(sh.widths, "width (pixels)")
        out["aspect"] = charts.histogram(
            [w / h for w, h in zip(sh.widths, sh.heights)], "aspect ratio (width / height)"
        )
        out["channels"] = charts.bars(sh.fields["channels"], "channels")
    if sh is not None and sh.fields["formats"]:
        out["formats"] = charts.bars(sh.fields["formats"], "format")
    if f.history:
        totals = [{k: sum(n.get(k, 0) for n in h["classes"].values()) for k in CHANGES} for h in f.history]
        out["history"] = charts.history_chart(
            [h["version"] for h in f.history], *([t[k] for t in totals] for k in CHANGES)
        )
    return {k: Markup(v) for k, v in out.items()}


CHANGES = ("added", "removed", "changed")

# After these a long name may wrap ("a_very_long_name.png" as "a_very_long_" / "name.png"), so the
# browser breaks it mid-word only where a part is wider than its column.
_BREAK_AFTER = re.compile(r"([_\-./\\ ]+)")


def breakable(text: object) -> Markup:
    """`text` escaped, with a line-break opportunity (<wbr>) after each separator in it."""
    return Markup(_BREAK_AFTER.sub(r"\1<wbr>", str(escape(text))))


def page(
    f: Facts, sample: Sample | None, dups: list[DupGroup], origins: list[dict[str, Any]], per_class: int, seed: int
) -> str:
    from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

    env = Environment(
        loader=PackageLoader("img2tfrecord.inspection.report", "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["human"] = size_text  # the units every message uses
    env.filters["pct"] = lambda x: f"{100 * x:.1f}%"
    env.filters["num"] = lambda n: f"{n:,}"
    env.filters["plural"] = plural  # "1 record", "2 records"
    env.filters["breakable"] = breakable
    template = env.get_template("report.html.j2")
    return template.render(
        f=f,
        sample=sample,
        dups=dups,
        origins=origins,
        charts=_charts(f),
        per_class=per_class,
        seed=seed,
        tool_version=__version__,
        # update and compact make version N from version N - 1: the digest alone says nothing to a reader
        parent_version=f.lineage["version"] - 1
        if isinstance(f.lineage.get("version"), int) and f.lineage["version"] > 1
        else None,
        dup_groups_total=int(f.duplicates.get("group_count") or len(f.duplicates.get("groups") or [])),
    )
