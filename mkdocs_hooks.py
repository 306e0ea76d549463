"""mkdocs hook (mkdocs.yml `hooks:`): the Python API reference's table of `convert()`'s keywords, made from the code.

Types and defaults come from `convert()`'s signature for its own keywords and from the options'
table (img2tfrecord.format.options) for the conversion options it passes on; meanings from the
`convert` command's `--help` of the same option (made from that table), so the page cannot fall
behind either. A page asks for the table with the line `<!-- convert keywords -->`."""

from __future__ import annotations

import inspect
import re
from typing import Any

MARKER = "<!-- convert keywords -->"

# Keywords with no CLI option of the same meaning: the Python side's own.
PYTHON_ONLY = {
    "on_event": '`on_event(kind, message)` receives the run\'s "warning" and "skipped" messages as they happen.',
    "progress": "`progress(images, bytes_read, total)` is called after each image (local engine).",
    "labels": "The class names in label order: a list, or the path of a labels file (`--labels`).",
}


def _cli_help() -> dict[str, str]:
    import click

    from img2tfrecord.cli import main

    command = main.get_command(click.Context(main), "convert")
    assert command is not None
    return {p.name: p.help or "" for p in command.params if isinstance(p, click.Option) and p.name}


def _type(annotation: Any) -> str:
    text = annotation if isinstance(annotation, str) else inspect.formatannotation(annotation)
    return re.sub(r"\b(os\.)?PathLike\[str\]", "PathLike", text)


def table() -> str:
    from img2tfrecord.conversion.convert import _PARAMETERS, convert
    from img2tfrecord.format.options import specs

    helps = _cli_help()
    own = inspect.signature(convert).parameters
    table = {s.name: (s.annotation, s.default) for s in specs("plan")}
    rows = ["| keyword | type | default | meaning |", "|---|---|---|---|"]
    for name in _PARAMETERS:
        annotation, default = (own[name].annotation, own[name].default) if name in own else table[name]
        meaning = PYTHON_ONLY.get(name) or helps.get(name)
        if not meaning:
            raise ValueError(f"convert() keyword {name!r} has no --help and no Python-only meaning")
        shown = "" if default is inspect.Parameter.empty else f"`{default!r}`"
        meaning = meaning.replace("|", "\\|").replace("\n", " ")
        rows.append(f"| `{name}` | `{_type(annotation)}` | {shown} | {meaning} |")
    return "\n".join(rows)


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    return markdown.replace(MARKER, table()) if MARKER in markdown else markdown
