"""`inspect OUT --verify` when OUT does not exist: a killed conversion leaves its finished shards in
`.OUT.img2tfrecord/` beside it and no OUT. Inspect says so (finished shards, the --resume command
to run, or the folder to remove), exit 1; a prefix matches only files named like shards, so an
`out.err` beside the missing `out` is never read as a shard; convert's interrupt message names
the folder that keeps the finished shards."""

from __future__ import annotations

import os
import shlex
import shutil
from pathlib import Path

import pytest

import img2tfrecord
from helpers import make_dataset
from img2tfrecord.errors import Interrupted


def _interrupted(src: Path, out: Path, **options: object) -> Interrupted:
    """Convert `src` into `out`, stopped by Ctrl-C (KeyboardInterrupt) half way."""

    def stop(images: int, nbytes: int, total: int) -> None:
        if images >= total // 2:
            raise KeyboardInterrupt

    with pytest.raises(Interrupted) as e:
        img2tfrecord.convert(src, out, workers=1, progress=stop, **options)
    assert not out.exists()
    return e.value


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    src = tmp_path / "data"
    make_dataset(src, {"a": 12, "b": 12}, size=(16, 12))
    return src


def test_inspect_of_a_missing_output_names_the_unfinished_run_and_its_resume_runs(
    tree: Path, tmp_path: Path, cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # relative paths, as a CI step types them
    reference = tmp_path / "reference"
    options = {"shards": 6, "split": "train=0.5,validation=0.5", "seed": 3, "encoding": "png"}
    img2tfrecord.convert("data", reference, workers=1, **options)
    e = _interrupted(Path("data"), Path("out"), **options)
    (tmp_path / "out.err").write_text("")  # what `convert data out 2>out.err` leaves
    r = cli("inspect", "out", "--verify")
    assert r.exit_code == 1, r.output
    assert r.stderr == (
        f"error: out does not exist: a conversion into it was interrupted, and .out.img2tfrecord beside it holds "
        f"{e.done} of its 6 shards finished; to finish it, run: img2tfrecord convert data out --encoding png "
        "--seed 3 --split train=0.5,validation=0.5 --shards 6 --resume; to discard it, remove .out.img2tfrecord\n"
    )
    assert 0 < e.done < 6
    argv = shlex.split(r.stderr.split("run: ", 1)[1].split("; to discard")[0])
    r = cli(*argv[1:])
    assert r.exit_code == 0, r.output
    assert f"resuming: {e.done} of 6 shards" in r.stderr and "already finished and" in r.stderr, r.stderr
    names = sorted(p.name for p in reference.iterdir())
    assert sorted(p.name for p in Path("out").iterdir()) == names
    for name in names:
        if name != "dataset.json":
            assert (Path("out") / name).read_bytes() == (reference / name).read_bytes(), name
    assert not Path(".out.img2tfrecord").exists()


def test_the_other_way_on_removing_the_folder_leaves_a_plain_missing_path(tree: Path, tmp_path: Path, cli) -> None:
    out = tmp_path / "out"
    _interrupted(tree, out, shards=4)
    folder = tmp_path / ".out.img2tfrecord"
    assert folder.is_dir()
    shutil.rmtree(folder)
    r = cli("inspect", out, "--verify")
    assert r.exit_code == 2 and "no such file, directory or shard prefix" in r.stderr, r.output


def test_a_prefix_matches_only_files_named_like_shards(tree: Path, tmp_path: Path, cli) -> None:
    (tmp_path / "out.err").write_text("")
    r = cli("inspect", tmp_path / "out", "--verify")
    assert r.exit_code == 2 and "no such file, directory or shard prefix" in r.stderr, r.output
    out = tmp_path / "ds"
    img2tfrecord.convert(tree, out, shards=1, workers=1)
    (out / "train-00000-of-00001.err").write_text("")
    r = cli("inspect", out / "train-0", "--verify")
    assert r.exit_code == 0 and "verified 1 file, 24 records" in r.stdout, r.output


def test_the_interrupt_message_names_the_folder_that_keeps_the_finished_shards(
    tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    e = _interrupted(Path("data"), Path("out"), shards=6)
    assert os.listdir(".out.img2tfrecord")
    from img2tfrecord.errors import cli_wording

    with cli_wording():  # as the convert command prints it
        text = e.describe("out")
    assert text == (
        f"interrupted: nothing was published ({e.done} of 6 shards finished, kept in .out.img2tfrecord; "
        "run the same command with --resume to continue)"
    )


def test_a_run_no_command_line_can_say_is_named_in_words(tree: Path, tmp_path: Path, cli) -> None:
    """A conversion `like` another dataset took its labels from it: no flags give them again."""
    like = tmp_path / "like"
    img2tfrecord.convert(tree, like, workers=1)
    out = tmp_path / "out"
    e = _interrupted(tree, out, like=like, shards=6)
    r = cli("inspect", out)
    assert r.exit_code == 1, r.output
    assert (
        f"holds {e.done} of its 6 shards finished; to finish it, run the convert command that was interrupted again with --resume; to discard it, remove {tmp_path / '.out.img2tfrecord'}\n"
        in r.stderr
    )
