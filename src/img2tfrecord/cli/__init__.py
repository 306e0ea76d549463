"""Thin click layer: parse options, call the library, format output. No TensorFlow at import time.

Subcommands are imported only when invoked (a lazy group), so `img2tfrecord --help` stays fast.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click
from click.exceptions import NoArgsIsHelpError

from img2tfrecord import __version__
from img2tfrecord.cli import answer
from img2tfrecord.cli.text import safe
from img2tfrecord.errors import cli_wording

T = TypeVar("T")

# name -> (module, attribute, one-line help shown by `img2tfrecord --help`)
COMMANDS = {
    "convert": ("img2tfrecord.cli.convert", "convert_command", "Convert an image folder into sharded TFRecords."),
    "update": (
        "img2tfrecord.cli.update",
        "update_command",
        "Bring a dataset up to date with its input: new shards for what changed.",
    ),
    "compact": (
        "img2tfrecord.cli.update",
        "compact_command",
        "Fold updated shards into the layout a fresh conversion makes.",
    ),
    "inspect": ("img2tfrecord.cli.inspect", "inspect_command", "Inspect, verify, extract or preview TFRecord shards."),
    "report": ("img2tfrecord.cli.report", "report_command", "Write one HTML page that shows a dataset."),
}


class OneLineUsageError(click.UsageError):
    """click's own usage errors (a bad option value, an unknown option, a missing argument) in the
    form of all our errors: one line, `error: ...`, exit 2. click prints them as three lines
    (usage, hint, message)."""

    def __init__(self, error: click.UsageError) -> None:
        super().__init__(error.format_message(), error.ctx)

    def show(self, file: Any = None) -> None:
        message = self.message.replace(". (Did you mean", " (did you mean").rstrip(".")
        hint = f"; see '{self.ctx.command_path} --help'" if self.ctx is not None else ""
        click.echo(f"error: {safe(message)}{hint}", err=True)
        answer.record("usage", f"{message}{hint}")


def _one_line(call: Callable[[], T]) -> T:
    try:
        return call()
    except (OneLineUsageError, NoArgsIsHelpError):  # the latter shows the help, as it should
        raise
    except click.UsageError as e:
        raise OneLineUsageError(e) from None


class LazyGroup(click.Group):
    def main(self, args: Any = None, *rest: Any, **kw: Any) -> Any:
        """click's main (a `--json` before the command's name moved after it: `answer.hoisted`), and
        on the way out, whatever ended the command (a return, an error, a usage error click found,
        Ctrl-C), the one JSON answer `--json` asked for (cli/answer.py)."""
        argv = answer.hoisted(list(sys.argv[1:] if args is None else args))
        if kw.get("standalone_mode") is False:
            return super().main(argv, *rest, **kw)
        return answer.answered(lambda a: super(LazyGroup, self).main(a, *rest, **kw), argv)

    def make_context(
        self, info_name: str | None, args: list[str], parent: click.Context | None = None, **extra: Any
    ) -> click.Context:
        return _one_line(lambda: super(LazyGroup, self).make_context(info_name, args, parent, **extra))

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        module, attr, _ = COMMANDS[name]
        return getattr(importlib.import_module(module), attr)

    def invoke(self, ctx: click.Context) -> Any:
        """The subcommand, parsed (its usage errors one line too) and run with the library's messages
        naming options as typed (`--overwrite`, not `overwrite=True`). A Ctrl-C before a command has
        its own handler in place (while it is imported: the first ~0.2 s) is ours too: one line,
        exit 130, not click's "Aborted!" and exit 1."""
        try:
            with cli_wording():
                return _one_line(lambda: super(LazyGroup, self).invoke(ctx))
        except KeyboardInterrupt:
            answer.failed(130, "interrupted", "interrupted: nothing was written")

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        with formatter.section("Commands"):
            formatter.write_dl([(name, short) for name, (_, _, short) in COMMANDS.items()])


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="img2tfrecord")
def main() -> None:
    """Turn a folder of images into a sharded TFRecord dataset, and look inside it.

    \b
      img2tfrecord convert data/ out/ --shards 16
      img2tfrecord inspect out/train-00000
    """
