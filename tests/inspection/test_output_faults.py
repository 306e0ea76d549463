"""A full disk while `report` writes its page or `inspect --contact-sheet` its picture (ENOSPC
injected by strace into the writes to that file, a real process): one line, exit 1, no traceback,
the earlier file as it was and nothing half-written beside it (no temporary file, no 0-byte
picture)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import make_dataset

STRACE = shutil.which("strace")
pytestmark = pytest.mark.skipif(STRACE is None, reason="strace is not installed (apt-get install strace)")


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    from img2tfrecord.conversion.convert import convert

    root = tmp_path_factory.mktemp("faults")
    make_dataset(root / "in", {"circle": 3, "square": 3})
    convert(str(root / "in"), str(root / "o"), shards=1)
    return root / "o"


def _full_disk(target: Path, *args: str | Path) -> subprocess.CompletedProcess:
    """`img2tfrecord ARGS` with every write to `target` or a temporary file beside it failing."""
    names = [target, target.with_name(f".{target.name}.img2tfrecord.tmp"), Path(f"{target}.tmp")]
    paths = [a for p in names for a in ("-P", str(p))]
    inject = ["-e", "trace=write", "-e", "inject=write:error=ENOSPC"]
    cmd = [STRACE, "-f", "-qq", "-o", os.devnull, *paths, *inject, sys.executable, "-m", "img2tfrecord"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("TF_CPP")}
    return subprocess.run([*cmd, *map(str, args)], capture_output=True, text=True, env=env, timeout=300)


def _one_line(res: subprocess.CompletedProcess) -> None:
    assert res.returncode == 1, (res.returncode, res.stderr)
    assert "Traceback" not in res.stderr, res.stderr
    lines = [x for x in res.stderr.splitlines() if x.startswith("error: ")]
    assert len(lines) == 1 and "No space left on device" in lines[0], res.stderr


@pytest.mark.parametrize("earlier", [False, True])
def test_enospc_while_writing_the_report(dataset: Path, tmp_path: Path, earlier: bool) -> None:
    page = tmp_path / "r.html"
    if earlier:
        from img2tfrecord.inspection.report import report

        report(dataset, page, per_class=1)
        before = page.read_bytes()
    _one_line(_full_disk(page, "report", dataset, "-o", page))
    assert [p.name for p in tmp_path.iterdir()] == (["r.html"] if earlier else [])
    if earlier:
        assert page.read_bytes() == before


@pytest.mark.parametrize("name", ["s.png", "s.jpg"])
def test_enospc_while_writing_the_contact_sheet(dataset: Path, tmp_path: Path, name: str) -> None:
    sheet = tmp_path / name
    _one_line(_full_disk(sheet, "inspect", dataset, "--contact-sheet", sheet))
    assert list(tmp_path.iterdir()) == []


def test_enospc_while_extracting_leaves_no_half_image(dataset: Path, tmp_path: Path) -> None:
    """Every image's file (and the record-NNNNNNNN fallback name) refuses writes: the first image
    fails, exit 1 in one line, and no file is left in DIR, neither empty nor cut short."""
    imgs = tmp_path / "imgs"
    names = [imgs / c / f"img_{i:03d}.{'png' if i % 3 == 0 else 'jpg'}" for c in ("circle", "square") for i in range(3)]
    names += [imgs / c / f"record-{k:08d}.{e}" for c in ("circle", "square") for k in range(6) for e in ("png", "jpg")]
    paths = [a for p in names for a in ("-P", str(p))]
    inject = ["-e", "trace=write", "-e", "inject=write:error=ENOSPC"]
    cmd = [STRACE, "-f", "-qq", "-o", os.devnull, *paths, *inject, sys.executable, "-m", "img2tfrecord"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("TF_CPP")}
    args = ["inspect", str(dataset), "--extract", str(imgs), "--all"]
    _one_line(subprocess.run([*cmd, *args], capture_output=True, text=True, env=env, timeout=300))
    assert sorted(p.name for p in imgs.rglob("*")) == ["circle", "square"]
