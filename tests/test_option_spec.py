"""One options table (format.options, issue 40 item 1): an option added as one row of it is taken by
the `convert` and `update` commands (their --help), recorded in dataset.json and checked there,
carried by `convert --like` and compared by `update`, which refuses another value: no other list
of option names has to learn it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from helpers import make_dataset
from img2tfrecord.cli import options as cli_options
from img2tfrecord.cli.convert import convert_command
from img2tfrecord.cli.update import update_command
from img2tfrecord.errors import cli_wording
from img2tfrecord.format import options as table
from img2tfrecord.format.manifest import ManifestError, validate_manifest

# the one place the test adds the option: a row of the table
TINT = table.OptionSpec(
    "tint",
    "str",
    "none",
    choices=("none", "red"),
    show_default=True,
    help="A test's own option: nothing uses it, everything carries it.",
    recorded=True,
    check=table.Check("one_of", ("none", "red")),
    update=len(table.update_names()) + 1,
)


def _remade(command: click.Command, name: str) -> click.Command:
    """`command` with its table-made options made again from the table as it is now (the real
    commands were made when their module was imported); its arguments and own options kept."""
    made = {s.name for s in table.OPTIONS} if name == "convert" else set(table.update_names())
    own = [p for p in command.params if p.name not in made]
    args, rest = (
        [p for p in own if isinstance(p, click.Argument)],
        [p for p in own if not isinstance(p, click.Argument)],
    )
    return type(command)(
        command.name,
        params=[*args, *cli_options.params(name), *rest],
        callback=command.callback,
        context_settings=command.context_settings,
    )


@pytest.fixture
def with_tint(monkeypatch: pytest.MonkeyPatch) -> tuple[click.Command, click.Command]:
    monkeypatch.setattr(table, "OPTIONS", (*table.OPTIONS, TINT))
    return _remade(convert_command, "convert"), _remade(update_command, "update")


def _run(command: click.Command, *args: Any) -> Any:
    with cli_wording():  # messages worded for the command line, as the `img2tfrecord` group words them
        return CliRunner().invoke(command, [str(a) for a in args], catch_exceptions=False)


def _options(out: Path) -> dict[str, Any]:
    return json.loads((out / "dataset.json").read_text())["options"]


def test_an_option_added_to_the_table_reaches_the_cli_dataset_json_like_and_update(
    with_tint: tuple[click.Command, click.Command], tmp_path: Path
) -> None:
    convert, update = with_tint
    help_text = _run(convert, "--help").output
    assert "--tint [none|red]" in help_text and "A test's own option" in help_text and "[default: none]" in help_text
    assert "--tint [none|red]" in _run(update, "--help").output

    data, out = tmp_path / "data", tmp_path / "out"
    make_dataset(data, {"cat": 3, "dog": 3}, size=(16, 12))
    r = _run(convert, data, out, "--tint", "red", "-q")
    assert r.exit_code == 0, r.output
    manifest = json.loads((out / "dataset.json").read_text())
    assert manifest["options"]["tint"] == "red"
    validate_manifest(manifest)  # read back: its check is the row's
    with pytest.raises(ManifestError, match=r"options\.tint"):
        validate_manifest({**manifest, "options": {**manifest["options"], "tint": "blue"}})

    r = _run(convert, data, tmp_path / "again", "--like", out, "-q")
    assert r.exit_code == 0, r.output
    assert _options(tmp_path / "again")["tint"] == "red"  # --like carries it

    r = _run(update, data, out, "--tint", "red", "-q")  # the value it was made with: accepted
    assert r.exit_code == 0, r.output
    r = _run(update, data, out, "--tint", "none")
    assert r.exit_code == 2
    assert f"{out} was converted with --tint red; update keeps a dataset's options" in r.output
    assert f"--like {out} --overwrite --tint none" in r.output


def test_a_dataset_made_without_it_records_nothing_of_it(
    with_tint: tuple[click.Command, click.Command], tmp_path: Path
) -> None:
    """At its default, a new option leaves dataset.json as it was before the option."""
    convert, _ = with_tint
    make_dataset(tmp_path / "data", {"cat": 2, "dog": 2}, size=(16, 12))
    r = _run(convert, tmp_path / "data", tmp_path / "out", "-q")
    assert r.exit_code == 0, r.output
    assert "tint" not in _options(tmp_path / "out")


def test_the_commands_options_are_the_tables_rows() -> None:
    """Every row is a flag of `convert`; every row update compares is one of `update`'s, with the
    row's help (convert) or the recorded-option help (update)."""
    conv = {p.name: p for p in convert_command.params}
    for s in table.OPTIONS:
        assert conv[s.name].help == s.help and s.flag in conv[s.name].opts, s.name
    upd = {p.name: p for p in update_command.params}
    for name in table.update_names():
        assert upd[name].help == cli_options.RECORDED_HELP, name


def test_a_dataset_json_without_an_option_means_its_default_or_what_it_meant_before_it() -> None:
    """update, compact and --like read dataset.json's options through the table (`recorded_value`):
    a missing or null value is the default, or for a dataset made before the option what it meant
    then (split_rule: the hash rule)."""
    assert table.recorded_value({}, "seed") == 0
    assert table.recorded_value({"seed": None, "label_offset": 1}, "label_offset") == 1
    assert table.recorded_value({"seed": None}, "seed") == 0
    assert table.recorded_value({}, "split_rule") == "hash"
    assert table.recorded_value({"split_rule": "exact"}, "split_rule") == "exact"
    assert table.recorded_value({}, "checksum") == table.DEFAULT_CHECKSUM


def test_the_settings_defaults_are_the_tables() -> None:
    """EncodeOptions and ShardSettings (how shards are written) default to the table's defaults."""
    from dataclasses import fields

    from img2tfrecord.conversion.plan.options import EncodeOptions, ShardSettings

    for f in fields(EncodeOptions):
        assert getattr(EncodeOptions(), f.name) == table.spec(f.name).default, f.name
    for name in ("compression", "index", "checksum", "fsync", "dedupe", "strict"):
        assert getattr(ShardSettings(), name) == table.spec(name).default, name


def test_convert_s_own_keywords_are_the_tables_run_rows() -> None:
    """convert()'s own keywords (the run's: workers, engine, ...) spell their defaults and types in
    its signature for Python readers; the table's run rows, which make their flags, agree."""
    import inspect

    from img2tfrecord.conversion.convert import convert

    own = inspect.signature(convert).parameters
    for s in table.specs("run"):
        assert own[s.name].default == s.default and own[s.name].annotation == s.annotation, s.name
