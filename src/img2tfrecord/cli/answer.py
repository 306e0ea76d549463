"""`--json`'s contract: every exit of convert, update, compact, inspect and report answers with one JSON object.

A CI script parses stdout whatever happened, so stdout holds exactly one object on every exit
(0, 1, 2, 130, 143): `ok` and `exit_code` first; on success the command's summary (or report);
on failure `error: {kind, message}` and what the run found out before it stopped (`warnings`,
and the error's own: `skipped` for --strict, the shards finished for an interrupted run, the
report's `problems` for inspect). The answer is printed in one place, `LazyGroup.main`, on the way
out, whatever ended the command: a return, an error, click's own usage error, Ctrl-C. Commands
only say what they have: `result(summary)`, `failed(...)`, `event(kind, message)`.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NoReturn

import click

from img2tfrecord.cli.text import report, safe
from img2tfrecord.errors import Img2TFRecordError

COMMANDS = ("convert", "update", "compact", "inspect", "report")  # the commands that take --json


@dataclass
class Answer:
    """What one invocation has to say in JSON (nothing is printed unless `wanted`)."""

    wanted: bool = False
    result: dict[str, Any] | None = None
    indent: int | None = None
    error: dict[str, str] | None = None
    learnt: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def text(self, exit_code: int) -> str | None:
        """The one JSON object for this exit; None for `--help` (text asked for, exit 0, no result)."""
        if exit_code == 0 and self.result is None and self.error is None:
            return None
        head: dict[str, Any] = {"ok": exit_code == 0, "exit_code": exit_code}
        if exit_code == 0:
            return json.dumps(head | (self.result or {}) | head, ensure_ascii=False, indent=self.indent)
        error = self.error or {"kind": "error", "message": f"exit status {exit_code}"}
        body = {"error": error, "warnings": self.warnings} | self.learnt
        return json.dumps(head | (self.result or {}) | body | head, ensure_ascii=False, indent=self.indent)


_current = Answer()


def begin(argv: list[str], command: str | None = None) -> Answer:
    """A new answer for `img2tfrecord ARGV` (or, given `command`, for that command's ARGV): wanted
    when the command is one of COMMANDS and `--json` is among its arguments (before a `--`)."""
    global _current
    words = argv[: argv.index("--")] if "--" in argv else argv
    if command is None:
        command = next((w for w in words if not w.startswith("-")), None)
        words = words[words.index(command) + 1 :] if command else []
    _current = Answer(wanted=command in COMMANDS and "--json" in words)
    return _current


def hoisted(argv: list[str]) -> list[str]:
    """`--json CMD ARGS` as `CMD --json ARGS`: the group itself takes only --help and --version,
    so a `--json` typed before the command's name is the command's (click would refuse it)."""
    at = next((i for i, w in enumerate(argv) if not w.startswith("-")), None)
    if at is None or "--json" not in argv[:at]:
        return argv
    before = [w for w in argv[:at] if w != "--json"]
    return [*before, argv[at], "--json", *argv[at + 1 :]]


def answered(main: Callable[[list[str]], Any], argv: list[str], command: str | None = None) -> Any:
    """Run click's `main(argv)`; on the way out, whatever ended it (a return, an error, a usage
    error click found, Ctrl-C), print the one JSON answer `--json` asked for."""
    if not begin(argv, command).wanted:
        return main(argv)
    try:
        return main(argv)
    except SystemExit as e:
        emit(e.code if isinstance(e.code, int) else 0 if e.code is None else 1)
        raise
    except BaseException as e:  # a bug: its traceback follows on stderr, the answer still comes
        record("internal", f"{type(e).__name__}: {e}")
        emit(1)
        raise


class Answering(click.Command):
    """A command that answers `--json` on every exit when run on its own (`convert_command.main()`,
    as tests and embedders do); under `img2tfrecord`, the group's main answers for it."""

    def main(self, args: Any = None, *rest: Any, **kw: Any) -> Any:
        argv = list(sys.argv[1:] if args is None else args)
        if kw.get("standalone_mode") is False:
            return super().main(argv, *rest, **kw)
        return answered(lambda a: super(Answering, self).main(a, *rest, **kw), argv, self.name)


def current() -> Answer:
    return _current


def result(summary: dict[str, Any], indent: int | None = None) -> None:
    """The command's summary: the JSON answer's body when it succeeds (and kept when it fails after)."""
    _current.result, _current.indent = summary, indent


def event(kind: str, message: str) -> None:
    """A message the library emitted while running: warnings are part of a failed run's answer."""
    if kind == "warning":
        _current.warnings.append(message)


def record(kind: str, message: str, learnt: dict[str, Any] | None = None) -> None:
    """The error of this exit, for the JSON answer (not printed: the caller has said it)."""
    _current.error = {"kind": kind, "message": message}
    _current.learnt |= learnt or {}


def failed(exit_code: int, kind: str, message: str, learnt: dict[str, Any] | None = None) -> NoReturn:
    """Say `message` on stderr (one line, as every error), record it for `--json`, and exit."""
    click.echo(safe(message), err=True)
    record(kind, message.removeprefix("error: "), learnt)
    sys.exit(exit_code)


def error(e: Img2TFRecordError) -> NoReturn:
    """The library's error: `error: ...` on stderr, its exit code, its kind and what it learnt."""
    failed(e.exit_code, e.kind, f"error: {e}", e.learnt())


def emit(exit_code: int) -> None:
    """Print the answer for this exit on stdout, when `--json` asked for one."""
    if _current.wanted and (text := _current.text(exit_code)) is not None:
        report(text, err=False)  # a published run keeps its exit code when stdout cannot take the answer
