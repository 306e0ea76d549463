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
from img2tfrecord.format.conversion_options import ConversionOptions
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
    back = ConversionOptions.from_json(manifest["options"]).to_json()  # the JSON round trip, through the table
    assert list(back.items()) == list(manifest["options"].items())
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


# Each option update compares: (how the dataset is made, the same value typed otherwise, another value).
# The same value goes through the option's parser (its row's): `val=` is validation, 8X8 is 8x8, a
# labels file is read. A row update compares without a case here fails the first assertion.
UPDATE_CASES: dict[str, tuple[list[str], list[str], list[str]]] = {
    "shards": (["--shards", "2"], ["--shards", " 2"], ["--shards", "3"]),
    "split": (
        ["--split", "train=0.5,validation=0.5"],
        ["--split", "train=0.50,val=0.5"],
        ["--split", "train=0.6,validation=0.4"],
    ),
    "seed": (["--seed", "3"], ["--seed", "3"], ["--seed", "4"]),
    "labels": (["--labels", "{labels}"], ["--labels", "{same_labels}"], ["--labels", "{other_labels}"]),
    "label_offset": (["--label-offset", "1"], ["--label-offset", "1"], ["--label-offset", "2"]),
    "encoding": (["--encoding", "png"], ["--encoding", "png"], ["--encoding", "jpeg"]),
    "quality": (["--quality", "90"], ["--quality", "90"], ["--quality", "80"]),
    "resize": (["--resize", "8"], ["--resize", "8"], ["--resize", "8X8"]),
    "resize_mode": (["--resize-mode", "shrink"], ["--resize-mode", "shrink"], ["--resize-mode", "always"]),
    "channels": (["--channels", "3"], ["--channels", "3"], ["--channels", "1"]),
    "max_pixels": (["--max-pixels", "1000000"], ["--max-pixels", "1000000"], ["--max-pixels", "2000000"]),
    "validate": (["--no-validate"], ["--no-validate"], ["--validate"]),
    "compression": (["--compression", "gzip"], ["--compression", "gzip"], ["--compression", "zlib"]),
    "index": ([], ["--no-index"], ["--index"]),
    "masks": ([], ["--no-masks"], ["--masks"]),
    "dedupe": (["--dedupe", "off"], ["--dedupe", "off"], ["--dedupe", "drop"]),
    "checksum": (["--checksum", "sha256"], ["--checksum", "sha256"], ["--checksum", "xxh3_128"]),
}


def test_update_takes_each_option_as_typed_and_refuses_another_value(tmp_path: Path) -> None:
    """A matrix over the rows update compares: the value the dataset was made with, typed as the
    command line takes it (parsed by its row), is accepted; another is refused, in one line that
    says how the dataset was made and advises convert --like with only that option changed."""
    assert set(UPDATE_CASES) == set(table.update_names())
    data, out = tmp_path / "data", tmp_path / "out"
    make_dataset(data, {"a": 3, "b": 3}, size=(16, 12))
    files = {"labels": "a\nb\n", "same_labels": "a\r\nb", "other_labels": "b\na\n"}
    for name, text in files.items():
        (tmp_path / f"{name}.txt").write_text(text)

    def args(given: list[str]) -> list[str]:
        return [a.format(**{k: tmp_path / f"{k}.txt" for k in files}) for a in given]

    made = [a for made, _, _ in UPDATE_CASES.values() for a in args(made)]
    r = _run(convert_command, data, out, *made, "-q")
    assert r.exit_code == 0, r.output
    recorded = _options(out)
    typed = ConversionOptions.from_json(recorded)  # read back typed, through the table
    for name, value in recorded.items():
        assert table.json_form(getattr(typed, name)) == value, name
        if table.spec(name).kind is not str and value is not None:  # a whole number, a flag: of its type
            assert type(getattr(typed, name)) is table.spec(name).kind, name
    assert typed.resize == 8 and typed.seed == 3 and typed.validate is False and typed.labels == ["a", "b"]
    assert list(typed.to_json().items()) == list(recorded.items())  # written back key for key, in order
    for name, (_, same, other) in UPDATE_CASES.items():
        r = _run(update_command, data, out, *args(same), "--dry-run", "-q")
        assert r.exit_code == 0, (name, r.output)
        r = _run(update_command, data, out, *args(other), "--dry-run")
        assert r.exit_code == 2 and f"{out} was converted with " in r.output, (name, r.output)
        assert len(r.output.strip().splitlines()) == 1 and "Traceback" not in r.output, (name, r.output)
        assert f"--like {out} --overwrite {' '.join(args(other))}" in r.output, (name, r.output)


def test_the_typed_options_are_the_tables_recorded_rows() -> None:
    """ConversionOptions (dataset.json's options, typed) has a field for each recorded row, with the
    row's default; read from a dataset.json that records nothing, each is what the row says such a
    dataset meant (`recorded_value`: split_rule the hash rule); a row it has no field for yet (the
    test's own) is kept in its `json`."""
    from dataclasses import fields

    names = [f.name for f in fields(ConversionOptions) if f.name != "json"]
    assert sorted(names) == sorted(table.recorded_names())
    empty = ConversionOptions.from_json(None)
    for name in names:
        assert getattr(ConversionOptions(), name) == table.spec(name).default, name
        assert table.json_form(getattr(empty, name)) == table.recorded_value({}, name), name
    assert empty.split_rule == "hash" and ConversionOptions.from_json({"resize": [4, 3]}).resize == (4, 3)
    assert ConversionOptions.from_json({"tint": "red"}).json == {"tint": "red"}
