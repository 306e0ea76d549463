"""The code blocks of README.md and docs/, read and run as a reader would run them.

A document's blocks run in order in one fresh folder holding a copy of `sample_data/`, so a
`convert` in one block makes the `out/` that the next block inspects or loads:

- ```sh blocks: every line is a command (comments and `\\` continuations as in a shell);
- ```console blocks: `$ ` lines are commands, the lines after one are its output, compared with
  what it printed (stdout and stderr, as a terminal shows them). A line `...` stands for any lines,
  `...` inside a line for any text. A command that must fail ends with `# exit N`;
- ```python blocks: run in one namespace per document; a block of `>>>` lines is a doctest, its
  shown results compared (ELLIPSIS on).

`img2tfrecord ...` (and `python -m img2tfrecord ...`) runs the real CLI in-process through click's
CliRunner, as the suite's `cli` fixture does; any other command line runs in bash with this
interpreter's bin folder first on PATH. A block preceded by `<!-- not run: REASON -->` is skipped;
the reason says where else it is covered.
"""

from __future__ import annotations

import doctest
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUN_LANGUAGES = {"sh", "console", "python"}
_FENCE = re.compile(r"^(\s*)```(\S*)\s*$")
_NOT_RUN = re.compile(r"<!--\s*not run:\s*(.+?)\s*-->")
_EXIT = re.compile(r"#\s*exit (\d+)\s*$")
_ASSIGN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


@dataclass(frozen=True)
class Block:
    """One fenced code block: where it is, its language, its text, and why it is not run (if so)."""

    path: Path
    line: int  # 1-based line of the opening fence
    language: str
    text: str
    not_run: str | None

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


@dataclass(frozen=True)
class Command:
    """A shell command of a block and, in a console block, the output it must print."""

    line: str
    expected: str | None
    exit_code: int


def documents() -> list[Path]:
    """README.md, CONTRIBUTING.md and every page of the docs site."""
    pages = sorted((ROOT / "docs").rglob("*.md"))
    return [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *pages]


def blocks(path: Path) -> list[Block]:
    """The fenced blocks of a Markdown file, with a `not run` comment just before one attached."""
    found: list[Block] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        fence = _FENCE.match(lines[i])
        if not fence:
            i += 1
            continue
        indent, language = fence.groups()
        end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == "```"), None)
        if end is None:
            raise AssertionError(f"{path.relative_to(ROOT)}:{i + 1}: code block never closed")
        body = "\n".join(line[len(indent) :] for line in lines[i + 1 : end]) + "\n"
        before = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        marker = _NOT_RUN.search(before)
        found.append(Block(path, i + 1, language, body, marker.group(1) if marker else None))
        i = end + 1
    return found


def commands(block: Block) -> list[Command]:
    """The commands of a sh or console block, `\\` continuations joined."""
    lines = block.text.splitlines()
    out: list[Command] = []
    i = 0
    while i < len(lines):
        line, i = lines[i], i + 1
        if block.language == "console" and not line.startswith("$ "):
            continue  # output before the first command: none is shown so
        line = line[2:] if block.language == "console" else line
        while line.endswith("\\") and i < len(lines):
            line, i = line[:-1] + " " + lines[i].lstrip(), i + 1
        expected: list[str] = []
        while block.language == "console" and i < len(lines) and not lines[i].startswith("$ "):
            expected.append(lines[i])
            i += 1
        if line.strip() and not line.lstrip().startswith("#"):
            out.append(_command(line, expected))
    return out


def _command(line: str, expected: list[str] | None) -> Command:
    code = _EXIT.search(line)
    shown = "\n".join(expected).rstrip() if expected else None
    return Command(line, shown or None, int(code.group(1)) if code else 0)


def output_matches(expected: str, actual: str) -> bool:
    """`actual` is `expected`, where a line `...` stands for any lines and `...` in a line for any text."""
    parts = []
    for line in expected.splitlines():
        if line.strip() == "...":
            parts.append(r"(?:[^\n]*\n)*?")
        else:
            parts.append(r"[^\n]*?".join(map(re.escape, line.rstrip().split("..."))) + r"[ \t]*\n")
    actual = "\n".join(line.rstrip() for line in actual.rstrip().splitlines()) + "\n"
    return re.fullmatch("".join(parts), actual) is not None


class Session:
    """One document's run: its folder (a copy of sample_data/), its Python namespace, its CLI."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        shutil.copytree(ROOT / "sample_data", folder / "sample_data")
        self.namespace: dict = {"__name__": "__docs__"}

    def run(self, block: Block) -> None:
        here = os.getcwd()
        os.chdir(self.folder)
        try:
            if block.language == "python":
                self._python(block)
            else:
                for command in commands(block):
                    self._shell(block, command)
        finally:
            os.chdir(here)

    def _python(self, block: Block) -> None:
        if ">>> " not in block.text:
            exec(compile(block.text, block.where, "exec"), self.namespace)
            return
        test = doctest.DocTestParser().get_doctest(block.text, self.namespace, block.where, block.where, 0)
        runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
        failures: list[str] = []
        runner.run(test, out=failures.append, clear_globs=False)
        self.namespace.update(test.globs)  # DocTest runs in a copy: keep what the block defined
        assert runner.failures == 0, f"{block.where}:\n" + "".join(failures)

    def _shell(self, block: Block, command: Command) -> None:
        words = shlex.split(command.line, comments=True)
        env = {}
        while words and _ASSIGN.match(words[0]):
            name, value = words.pop(0).split("=", 1)
            env[name] = value
        if words[:3] == ["python", "-m", "img2tfrecord"]:
            words = ["img2tfrecord", *words[3:]]
        shell_only = {"|", "&&", ";", ">", "<"} & set(words) or "$(" in command.line
        if words and words[0] == "img2tfrecord" and not shell_only:
            code, printed = _in_process(words[1:], env)
        else:
            code, printed = self._bash(command.line, env)
        said = f"{block.where}: `{command.line}`"
        assert code == command.exit_code, f"{said} exited {code}, not {command.exit_code}:\n{printed}"
        if command.expected is not None:
            assert output_matches(command.expected, printed), (
                f"{said} printed:\n{printed}\nnot what the docs show:\n{command.expected}"
            )

    def _bash(self, line: str, env: dict[str, str]) -> tuple[int, str]:
        path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
        done = subprocess.run(
            ["bash", "-c", line],
            cwd=self.folder,
            env={**os.environ, **env, "PATH": path},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=300,
        )
        return done.returncode, done.stdout


def _in_process(args: list[str], env: dict[str, str]) -> tuple[int, str]:
    from click.testing import CliRunner

    from img2tfrecord.cli import main

    result = CliRunner().invoke(main, args, env=env or None, catch_exceptions=False, prog_name="img2tfrecord")
    return result.exit_code, result.output
