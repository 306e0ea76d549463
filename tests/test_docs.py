"""Every example of README.md and the docs site runs, on sample_data, and shows what it prints.

The runner is tests/docs_examples.py; the site itself is built by `make docs` (mkdocs --strict).
One test per document: its blocks build on each other (convert, then inspect the output).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from docs_examples import ROOT, RUN_LANGUAGES, Block, Session, blocks, commands, documents, output_matches

README = ROOT / "README.md"
HISTORY = re.compile(
    r"\bissue \d+|\bissues? #?\d+|reviewer|previous version|earlier version|\bsession\b|<this repository>", re.I
)


def _runnable(path: Path) -> list[Block]:
    return [b for b in blocks(path) if b.language in RUN_LANGUAGES and b.not_run is None]


@pytest.mark.parametrize(
    "path", [p for p in documents() if _runnable(p) and p != README], ids=lambda p: str(p.relative_to(ROOT))
)
def test_every_example_of_the_document_runs(path: Path, tmp_path: Path) -> None:
    """README.md's run after `make demo`: test_the_readme_runs_in_order_after_make_demo."""
    session = Session(tmp_path)
    for block in _runnable(path):
        session.run(block)


def test_a_block_not_run_says_why() -> None:
    skipped = [b for p in documents() for b in blocks(p) if b.not_run is not None]
    for block in skipped:
        assert block.language in RUN_LANGUAGES, f"{block.where}: a `not run` mark on a {block.language} block"
        assert len(block.not_run.split()) >= 4, f"{block.where}: say why it is not run: {block.not_run!r}"
    ran = sum(len(_runnable(p)) for p in documents())
    assert ran >= 3 * len(skipped), f"{ran} blocks run, {len(skipped)} not"


def test_every_code_block_names_its_language() -> None:
    for path in documents():
        for block in blocks(path):
            assert block.language, f"{block.where}: name the block's language (sh, console, python, text, json...)"


def test_shown_output_is_compared_and_a_wrong_one_fails(tmp_path: Path) -> None:
    assert output_matches("a\n...\nd 1...s", "a\nb\nc\nd 1.5 s\n")
    assert output_matches("a\n...\nb", "a\nb")  # `...` may stand for no line
    assert not output_matches("a\nb", "a\nc")
    assert not output_matches("a", "a\nb")  # nothing printed beyond what is shown
    block = Block(README, 1, "console", "$ img2tfrecord --version\nimg2tfrecord 9.9.9\n", None)
    (command,) = commands(block)
    assert (command.line, command.expected, command.exit_code) == ("img2tfrecord --version", "img2tfrecord 9.9.9", 0)
    with pytest.raises(AssertionError, match="not what the docs show"):
        Session(tmp_path).run(block)


def test_a_command_that_must_fail_says_its_exit_code(tmp_path: Path) -> None:
    block = Block(README, 1, "sh", "img2tfrecord inspect missing \\\n  --verify  # exit 2\n", None)
    (command,) = commands(block)
    assert command.exit_code == 2 and command.line == "img2tfrecord inspect missing  --verify  # exit 2"
    Session(tmp_path).run(block)
    with pytest.raises(AssertionError, match="exited 2, not 0"):
        Session(tmp_path / "again").run(Block(README, 1, "sh", "img2tfrecord inspect missing\n", None))


def test_the_readme_is_a_front_door() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines"
    first = next(b for b in blocks(README) if b.language in ("sh", "console") and "img2tfrecord convert" in b.text)
    assert first.not_run is None and first.line <= 60, first.where
    assert any("make test" in b.text for b in blocks(README)) and any("make demo" in b.text for b in blocks(README))
    assert "(LICENSE)" in "\n".join(lines) and "docs/" in "\n".join(lines)


def test_no_words_about_how_the_project_was_built() -> None:
    for path in [p for p in documents()] + [ROOT / "ARCHITECTURE.md", ROOT / "CHANGELOG.md"]:
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            assert not HISTORY.search(line), f"{path.relative_to(ROOT)}:{n}: {line}"


def test_the_readme_runs_in_order_after_make_demo(tmp_path: Path, cli) -> None:
    """A newcomer's first five minutes: `make demo`'s img2tfrecord commands as the Makefile has them, then
    every README block in order, in one copy of the checkout's sample_data and .gitignore: each succeeds,
    the demo writes the sample's boxes, and nothing is left that git would list as untracked."""
    import json
    import shlex
    import shutil
    import subprocess

    recipe = ROOT.joinpath("Makefile").read_text().split("\ndemo:", 1)[1].split("\n\n", 1)[0]
    steps = [
        shlex.split(line.split("/img2tfrecord ", 1)[1]) for line in recipe.splitlines() if "/img2tfrecord " in line
    ]
    assert [s[:2] for s in steps] == [["convert", "sample_data"], ["inspect", "demo/out"]] + [
        ["convert", "sample_data"],
        ["inspect", "demo/out-detection"],
    ]
    session = Session(tmp_path / "checkout")
    shutil.copy(ROOT / ".gitignore", session.folder / ".gitignore")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(session.folder)
        for step in steps:
            res = cli(*step)
            assert res.exit_code == 0, (step, res.output)
        assert "no problems" in res.output
    detection = json.loads((session.folder / "demo/out-detection/dataset.json").read_text())["metadata"]["detection"]
    assert (detection["format"], detection["boxes"], detection["clipped"], detection["dropped"]) == ("coco", 30, 0, 0)
    assert (session.folder / "demo/contact-sheet.png").is_file()

    for block in _runnable(README):
        session.run(block)
    subprocess.run(["git", "init", "-q"], cwd=session.folder, check=True)
    listed = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=all"],
        cwd=session.folder,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    left = [line[3:] for line in listed if not line[3:].startswith(("sample_data/", ".gitignore"))]
    assert left == [], "files the README's examples leave in a checkout, not ignored by .gitignore"


# Options of other tools that the docs name: pip's, pytest-xdist's and Beam's pipeline options named in
# prose (those inside --beam-options' quotes are left out); the benchmarks' are read from their argparse calls.
OTHER_TOOLS_OPTIONS = {"--no-deps", "--no-cache-dir", "--target", "--dist", "--help"}
BEAM_PIPELINE_OPTIONS = {"--runner", "--project", "--region", "--parallelism"}


def _our_options() -> set[str]:
    import click

    from img2tfrecord.cli import main

    ctx = click.Context(main)
    commands = [main] + [main.get_command(ctx, name) for name in main.list_commands(ctx)]
    return {o for c in commands if c is not None for p in c.params for o in [*p.opts, *p.secondary_opts]}


def test_every_option_the_docs_name_exists() -> None:
    """An option named in prose or in an example is one `--help` lists (a renamed option leaves no stale
    word); the benchmarks' and the fuzz runner's options are read from their argparse calls."""
    bench = {
        o
        for p in [*(ROOT / "bench").glob("*.py"), *(ROOT / "tests" / "fuzz").glob("*.py")]
        for o in re.findall(r"add_argument\(\s*\"(--[a-z-]+)\"", p.read_text())
    }
    known = _our_options() | bench | OTHER_TOOLS_OPTIONS | BEAM_PIPELINE_OPTIONS
    stale = []
    for path in documents():
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if "# exit 2" in line or line.startswith("error:"):  # a usage error's example and what it prints
                continue
            line = re.sub(r"--beam-options[ =]\"[^\"]*\"?|--[a-z]+_[a-z_]+=?\S*", "", line)
            stale += [
                f"{path.name}:{n}: {o}" for o in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", line) if o not in known
            ]
    assert not stale, "options no command has: " + ", ".join(stale)
