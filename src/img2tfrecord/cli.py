"""Thin click layer: parse options, call the library, format output. No TensorFlow at import time."""

from __future__ import annotations

import click

from img2tfrecord import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="img2tfrecord")
def main() -> None:
    """Turn a folder of images into a sharded TFRecord dataset, and look inside it.

    \b
      img2tfrecord convert data/ out/ --shards 16
      img2tfrecord inspect out/train-00000
    """


def _register() -> None:
    from img2tfrecord.cli_convert import convert_command
    from img2tfrecord.cli_inspect import inspect_command

    main.add_command(convert_command, "convert")
    main.add_command(inspect_command, "inspect")


_register()
