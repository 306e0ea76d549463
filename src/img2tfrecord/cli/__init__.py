"""Thin click layer: parse options, call the library, format output. No TensorFlow at import time.

Subcommands are imported only when invoked (a lazy group), so `img2tfrecord --help` stays fast.
"""

from __future__ import annotations

import importlib
import sys

import click

from img2tfrecord import __version__

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
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        module, attr, _ = COMMANDS[name]
        return getattr(importlib.import_module(module), attr)

    def invoke(self, ctx: click.Context) -> object:
        """A Ctrl-C before a command has its own handler in place (while it is imported: the first
        ~0.2 s) is ours too: one line, exit 130, not click's "Aborted!" and exit 1."""
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            click.echo("interrupted: nothing was written", err=True)
            sys.exit(130)

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
