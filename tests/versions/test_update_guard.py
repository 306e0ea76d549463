"""`update` pointed at the wrong folder: an update that would remove more than half of the dataset's
records is refused (exit 1, OUT untouched) with the counts and the override; `--max-delete N|P%`
sets the limit (rsync's idea); `--dry-run` shows the same verdict."""

from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path

import pytest

import img2tfrecord
from helpers import make_dataset
from img2tfrecord.errors import DataError


def _snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under the folder and beside it (the workspace), with its bytes."""
    files = {str(p.relative_to(folder.parent)): p.read_bytes() for p in folder.parent.rglob("*") if p.is_file()}
    return {k: v for k, v in files.items() if not k.startswith(("data", "other"))}


@pytest.fixture
def made(tmp_path: Path) -> tuple[Path, Path, Path]:
    data, other, out = tmp_path / "data", tmp_path / "other", tmp_path / "out"
    make_dataset(data, {"a": 6, "b": 6}, size=(16, 12))
    make_dataset(other, {"x": 4}, seed=3, size=(16, 12))
    img2tfrecord.convert(data, out, workers=1)
    return data, other, out


def test_update_of_another_tree_is_refused_with_the_counts_and_out_untouched(
    made: tuple[Path, Path, Path], cli
) -> None:
    data, other, out = made
    before = _snapshot(out)
    r = cli("update", other, out)
    assert r.exit_code == 1, r.output
    assert r.stderr == (
        f"error: update would remove 12 of the 12 records of {out} (100%), more than 50% of the records "
        f"(--max-delete): is {other} the folder it was made from? Nothing was changed; if it is, add "
        "--max-delete 12 to remove them\n"
    )
    assert _snapshot(out) == before
    # the override, added to the same command as the message says
    override = shlex.split(r.stderr.split("add ", 1)[1].split(" to remove")[0])
    r = cli("update", other, out, *override, "-q")
    assert r.exit_code == 0, r.output
    man = json.loads((out / "dataset.json").read_text())
    assert sum(sp["records"] for sp in man["splits"].values()) == 4 and man["version"] == 2


def test_the_dry_run_shows_the_same_verdict(made: tuple[Path, Path, Path], cli) -> None:
    data, other, out = made
    before = _snapshot(out)
    real = cli("update", other, out).stderr.removeprefix("error: ").strip()
    r = cli("update", other, out, "--dry-run")
    assert r.exit_code == 0 and f"  the real run would stop here (exit 1): {real}\n" in r.stdout, r.stdout
    r = cli("update", other, out, "--dry-run", "--json")
    assert json.loads(r.stdout)["refused"] == real
    r = cli("update", data, out, "--dry-run", "--json")
    assert json.loads(r.stdout)["refused"] is None
    assert _snapshot(out) == before


def test_half_is_the_default_limit_and_max_delete_sets_it(made: tuple[Path, Path, Path], cli) -> None:
    data, _, out = made
    images = sorted(p for p in data.rglob("*") if p.is_file())
    for p in images[:6]:  # exactly half: allowed
        p.unlink()
    assert cli("update", data, out, "-q").exit_code == 0
    for p in images[6:10]:  # 4 of the 6 left
        p.unlink()
    assert cli("update", data, out).exit_code == 1
    assert cli("update", data, out, "--max-delete", "3").exit_code == 1
    assert cli("update", data, out, "--max-delete", "60%").exit_code == 1
    with pytest.raises(DataError, match="4 of the 6 records"):
        img2tfrecord.update(data, out, max_delete=0)
    img2tfrecord.update(data, out, max_delete="70%")
    assert json.loads((out / "dataset.json").read_text())["version"] == 3


def test_max_delete_zero_refuses_any_removal(made: tuple[Path, Path, Path], cli) -> None:
    data, _, out = made
    next(p for p in data.rglob("*") if p.is_file()).unlink()
    r = cli("update", data, out, "--max-delete", "0")
    assert r.exit_code == 1 and "remove 1 of the 12 records" in r.stderr and "more than 0 records" in r.stderr
    assert cli("update", data, out, "-q").exit_code == 0


@pytest.mark.parametrize("bad", ["5x", "-1", "101%", "%"])
def test_a_bad_max_delete_is_one_usage_line(made: tuple[Path, Path, Path], cli, bad: str) -> None:
    data, _, out = made
    r = cli("update", data, out, "--max-delete", bad)
    assert r.exit_code == 2 and r.stderr.count("\n") == 1 and "bad --max-delete" in r.stderr, r.stderr


def test_an_update_of_the_same_tree_is_not_limited(made: tuple[Path, Path, Path], cli) -> None:
    data, _, out = made
    shutil.rmtree(data / "a")
    make_dataset(data, {"c": 8}, seed=5, size=(16, 12))  # 6 of 12 removed, 8 added
    assert cli("update", data, out, "-q").exit_code == 0
