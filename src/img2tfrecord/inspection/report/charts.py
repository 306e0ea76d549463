"""The report's charts: matplotlib figures rendered to inline SVG (no script, no font file, no request).

matplotlib draws without a display (its `Figure` alone, no pyplot state) and writes SVG whose text
stays text (`svg.fonttype: none`, shown in the page's own fonts), with ids from a fixed salt and no
date, so the same dataset gives the same page. The numbers are in the page's tables too: a chart
is for the eye. Every string is drawn as written: no mathtext (`$...$`), and a legend entry
whose name starts with `_` is shown (matplotlib hides such labels unless they are given).
"""

from __future__ import annotations

import io
import logging
import re
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

MAX_BARS = 60  # classes drawn in the split x class chart (the table lists them all)
SPLIT_COLORS = ("#4c78a8", "#f58518", "#54a24b", "#b279a2", "#9d755d", "#e45756", "#72b7b2", "#bab0ac")
FLAG = "#d62728"
RC: Any = {
    "svg.fonttype": "none",
    "svg.hashsalt": "img2tfrecord",
    "text.parse_math": False,  # names are text: `$x^$` is a class, not a formula matplotlib cannot parse
    "font.size": 9,
    # measured with these (the browser draws the text in its own fonts): a CJK one when installed
    "font.sans-serif": ["DejaVu Sans", "IPAGothic", "IPAPGothic", "Noto Sans CJK JP", "Droid Sans Fallback"],
    "axes.spines.top": False,
    "axes.spines.right": False,
}


def _svg(fig: object) -> str:
    import matplotlib

    out = io.StringIO()
    with matplotlib.rc_context(RC), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Glyph missing from font": the text stays text, the browser draws it
        fig.savefig(out, format="svg", metadata={"Date": None}, bbox_inches="tight")  # type: ignore[attr-defined]
    text = out.getvalue()
    text = text[text.index("<svg") :]  # the XML prolog and DOCTYPE do not belong inside HTML
    # nor do the RDF metadata and the namespace declarations (HTML knows svg and xlink): the page
    # then names no address at all
    text = re.sub(r"<metadata>.*?</metadata>\s*", "", text, flags=re.S)
    return re.sub(r' xmlns(:\w+)?="[^"]*"', "", text)


def _figure(width: float, height: float) -> object:
    import matplotlib

    logging.getLogger("matplotlib").setLevel(logging.ERROR)  # "Glyph missing": the page's fonts draw the text
    with matplotlib.rc_context(RC):
        from matplotlib.figure import Figure

        return Figure(figsize=(width, height), layout="constrained")


def split_class_chart(
    classes: Sequence[str], splits: Sequence[str], counts: Mapping[str, Mapping[str, int]], flagged: set[str]
) -> str:
    """Horizontal stacked bars: a class per bar, a colour per split; flagged classes' names in red."""
    import matplotlib

    shown = list(classes[:MAX_BARS])
    fig = _figure(7.5, 0.6 + 0.24 * max(1, len(shown)))
    with matplotlib.rc_context(RC):
        ax = fig.add_subplot()  # type: ignore[attr-defined]
        left = [0] * len(shown)
        ys = range(len(shown))
        for i, s in enumerate(splits):
            values = [counts[s].get(c, 0) for c in shown]
            ax.barh(ys, values, left=left, color=SPLIT_COLORS[i % len(SPLIT_COLORS)], label=s, height=0.7)
            left = [a + b for a, b in zip(left, values)]
        ax.set_yticks(list(ys), [c if len(c) <= 40 else c[:39] + "…" for c in shown])
        for tick, c in zip(ax.get_yticklabels(), shown):
            if c in flagged:
                tick.set_color(FLAG)
                tick.set_fontweight("bold")
        ax.invert_yaxis()
        ax.set_xlabel("records")
        if splits:  # handles and labels given: a split named `_val` is listed (a label with `_` first is not)
            handles = ax.containers[: len(splits)]
            ax.legend(handles, list(splits), loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    return _svg(fig)


def histogram(values: Any, xlabel: str, bins: int = 30) -> str:
    """A histogram of per-record values (sizes, aspect ratios)."""
    import matplotlib

    fig = _figure(3.4, 2.2)
    with matplotlib.rc_context(RC):
        ax = fig.add_subplot()  # type: ignore[attr-defined]
        import numpy as np

        arr = np.asarray(values, dtype=float)
        ax.hist(arr, bins=bins if len(arr) and arr.min() < arr.max() else 1, color=SPLIT_COLORS[0])
        ax.set_xlabel(xlabel)
        ax.set_ylabel("records")
    return _svg(fig)


def bars(values: Mapping[str, int], xlabel: str) -> str:
    """Vertical bars of a few categories (channels, formats)."""
    import matplotlib

    fig = _figure(3.4, 2.2)
    with matplotlib.rc_context(RC):
        ax = fig.add_subplot()  # type: ignore[attr-defined]
        keys = list(values)
        ax.bar(range(len(keys)), [values[k] for k in keys], color=SPLIT_COLORS[0])
        ax.set_xticks(range(len(keys)), keys)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("records")
    return _svg(fig)


def history_chart(versions: Sequence[int], added: Sequence[int], removed: Sequence[int], changed: Sequence[int]) -> str:
    """Images added, removed and changed by each version (grouped bars)."""
    import matplotlib

    fig = _figure(5.0, 2.4)
    with matplotlib.rc_context(RC):
        ax = fig.add_subplot()  # type: ignore[attr-defined]
        xs = range(len(versions))
        for k, (name, vals, color) in enumerate(
            (("added", added, "#54a24b"), ("removed", removed, FLAG), ("changed", changed, "#f58518"))
        ):
            ax.bar([x + (k - 1) * 0.27 for x in xs], vals, width=0.27, label=name, color=color)
        ax.set_xticks(list(xs), [f"v{v}" for v in versions])
        ax.set_ylabel("images")
        ax.legend(frameon=False)
    return _svg(fig)
