"""The `convert` and `update` commands' flags for the conversion options, made from their table
(format.options): a row there is a flag here, with its type, default and help."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import click

from img2tfrecord import stores
from img2tfrecord.errors import UsageError
from img2tfrecord.format import options as spec_table
from img2tfrecord.format.options import OptionSpec

F = TypeVar("F", bound=Callable[..., Any])

# update's help of every option it takes to compare with dataset.json's
RECORDED_HELP = "As dataset.json records it; another value is refused (exit 2), naming the convert --like OUTPUT_DIR --overwrite that changes only it."


def click_option(s: OptionSpec, *, recorded: bool = False) -> Callable[[F], F]:
    """The click option of the row `s`: convert's (its default, shown when the row says so), or,
    `recorded`, update's (no default: a value not given is dataset.json's)."""
    kw: dict[str, Any] = {"help": RECORDED_HELP if recorded else s.help}
    if s.choices:
        kw["type"] = click.Choice(s.choices)
    elif s.int_range:
        kw["type"] = click.IntRange(*s.int_range)
    elif s.file:
        kw["type"] = click.Path(dir_okay=False, path_type=str)
    elif s.kind is int:
        kw["type"] = int
    if s.metavar:
        kw["metavar"] = s.metavar
    if recorded:
        if s.negatable:
            kw["default"] = None  # neither --x nor --no-x given
    elif s.kind is bool and not s.negatable:
        kw["is_flag"] = True
    elif s.default is not None or s.negatable:
        kw["default"] = s.default
    if s.show_default and not recorded:
        kw["show_default"] = True
    decl = f"{s.flag}/--no-{s.flag[2:]}" if s.negatable else s.flag
    return click.option(decl, s.name, **kw)


def _apply(f: F, rows: Iterable[OptionSpec], recorded: bool) -> F:
    for s in reversed(list(rows)):  # the last decorator applied is the first option listed
        f = click_option(s, recorded=recorded)(f)
    return f


def _update_rows() -> list[OptionSpec]:
    return [spec_table.spec(name) for name in spec_table.update_names()]


def convert_options(f: F) -> F:
    """Every row of the table, as `convert` takes it, in the table's order."""
    return _apply(f, spec_table.OPTIONS, recorded=False)


def update_options(f: F) -> F:
    """The rows `update` compares with dataset.json's, in `update --help`'s order."""
    return _apply(f, _update_rows(), recorded=True)


def params(command: str) -> list[click.Parameter]:
    """The click options `command` ("convert" or "update") makes from the table as it is now (a
    test that adds a row builds the command again with them)."""

    def holder() -> None:  # pragma: no cover - never called: it collects the options
        pass

    (convert_options if command == "convert" else update_options)(holder)
    return list(reversed(holder.__click_params__))  # type: ignore[attr-defined]


def _use_storage_options(ctx: click.Context, param: click.Parameter, items: tuple[str, ...]) -> None:
    try:
        stores.use_options(dict(stores.parse_option(i) for i in items))
    except UsageError as e:
        raise click.BadParameter(str(e).removeprefix("--storage-option "), ctx, param) from None


def storage_option(f: F) -> F:
    """`--storage-option KEY=VALUE` (repeatable): a keyword argument of the bucket's fsspec back-end,
    for this run and its workers; never recorded (it may hold a secret)."""
    return click.option(
        "--storage-option",
        "storage_options",
        multiple=True,
        metavar="KEY=VALUE",
        expose_value=False,
        callback=_use_storage_options,
        help="A keyword argument of the bucket's back-end (s3fs, adlfs, gcsfs), repeatable: endpoint_url=http://127.0.0.1:9000, anon=true; VALUE is JSON when it reads as JSON. Beside IMG2TFRECORD_STORAGE_OPTIONS, over it; never recorded.",
    )(f)
