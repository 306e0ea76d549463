"""Where `report -o`, `inspect --contact-sheet`, `--extract` and `--export-list` may write: never inside a
dataset folder, never over a file that is not an earlier output of the same kind (another page or
picture only with --force), never over what is not a regular file; one line and exit 2 otherwise,
before anything is read, and the dataset still verifies."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from helpers import make_dataset


@pytest.fixture
def made(cli, tmp_path: Path) -> tuple[Path, Path]:
    """(input, output) of a small conversion, in the layout the issue names: in/CLASS/*.png, o/."""
    src, out = tmp_path / "in", tmp_path / "o"
    make_dataset(src, {"circle": 4, "square": 4})
    assert cli("convert", src, out, "--shards", "1", "-q").exit_code == 0
    return src, out


def _snapshot(*folders: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for f in folders for p in sorted(f.rglob("*")) if p.is_file()}


def _refused(result, said: str) -> None:
    assert result.exit_code == 2, (result.exit_code, result.output)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and said in lines[0], result.stderr
    assert "Traceback" not in result.output


def _verifies(cli, out: Path) -> None:
    res = cli("inspect", out, "--verify")
    assert res.exit_code == 0, res.output


def test_report_never_writes_inside_the_dataset_nor_over_an_input(cli, made, tmp_path: Path) -> None:
    src, out = made
    before = _snapshot(src, out)
    shard = next(out.glob("train-*"))
    image = next(src.glob("circle/*.png"))
    for target, said in [
        (out / "dataset.json", "is inside the dataset folder"),
        (shard, "is inside the dataset folder"),
        (out / "new.html", "is inside the dataset folder"),
        (image, "exists and is not an HTML page"),
    ]:
        _refused(cli("report", out, "-o", target), said)
        _refused(cli("report", out, "-o", target, "--force"), said)  # --force is for HTML pages only
    assert _snapshot(src, out) == before and not (out / "new.html").exists()
    _verifies(cli, out)


def test_report_replaces_its_own_page_and_another_only_with_force(cli, made, tmp_path: Path) -> None:
    _, out = made
    page = tmp_path / "r.html"
    assert cli("report", out, "-o", page).exit_code == 0
    first = page.read_bytes()
    page.write_bytes(first.replace(b"<title>", b"<title>old "))
    assert cli("report", out, "-o", page).exit_code == 0  # our own earlier report: no --force needed
    assert page.read_bytes() == first
    theirs = tmp_path / "notes.html"
    theirs.write_text("<html><body>my notes</body></html>")
    _refused(cli("report", out, "-o", theirs), "was not written by img2tfrecord; --force replaces it")
    assert theirs.read_text() == "<html><body>my notes</body></html>"
    assert cli("report", out, "-o", theirs, "--force").exit_code == 0
    assert theirs.read_bytes() == first
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in", "notes.html", "o", "r.html"]  # no temporary file


def test_report_a_link_to_an_earlier_report_writes_through_it(cli, made, tmp_path: Path) -> None:
    _, out = made
    page, link = tmp_path / "r.html", tmp_path / "link.html"
    assert cli("report", out, "-o", page).exit_code == 0
    link.symlink_to(page)
    assert cli("report", out, "-o", link).exit_code == 0
    assert link.is_symlink() and page.is_file()


def _special_files(tmp_path: Path, suffix: str) -> list[tuple[Path, str]]:
    """A FIFO, a link to /dev/null and a link to a folder, named *suffix in tmp_path."""
    fifo = tmp_path / f"fifo{suffix}"
    os.mkfifo(fifo)
    to_null = tmp_path / f"null{suffix}"
    to_null.symlink_to(os.devnull)
    to_dir = tmp_path / f"dir{suffix}"
    to_dir.symlink_to(tmp_path)
    return [(fifo, "is a FIFO"), (to_null, "is a device"), (to_dir, "is a directory")]


def test_never_renames_over_what_is_not_a_regular_file(cli, made, tmp_path: Path) -> None:
    _, out = made
    for target, said in _special_files(tmp_path, ".html"):
        res = cli("report", out, "-o", target, "--force")
        if "is a directory" in said:  # click's own check for -o names it first
            assert res.exit_code == 2 and "is a directory" in res.stderr, res.stderr
        else:
            _refused(res, said)
    (tmp_path / "pics").mkdir()
    for target, said in _special_files(tmp_path / "pics", ".png"):
        _refused(cli("inspect", out, "--contact-sheet", target, "--force"), said)
    if Path("/dev/full").is_char_device():  # the case: run as root, it became a regular file
        _refused(cli("report", out, "-o", "/dev/full", "--force"), "is a device")
        assert Path("/dev/full").is_char_device()
    assert Path(os.devnull).is_char_device()
    assert (tmp_path / "fifo.html").is_fifo() and (tmp_path / "dir.html").resolve() == tmp_path


def test_contact_sheet_and_extract_stay_out_of_dataset_folders(cli, made, tmp_path: Path) -> None:
    src, out = made
    before = _snapshot(src, out)
    image = next(src.glob("circle/*.png"))
    shard = next(out.glob("train-*"))
    _refused(cli("inspect", out, "--contact-sheet", out / "sheet.png"), "is inside the dataset folder")
    _refused(cli("inspect", shard, "--contact-sheet", out / "sheet.png"), "is inside the dataset folder")
    _refused(cli("inspect", out, "--contact-sheet", image), "was not written by img2tfrecord; --force")
    _refused(cli("inspect", out, "--extract", out / "imgs"), "is inside the dataset folder")
    _refused(cli("inspect", shard, "--extract", out / "x" / "y"), "is inside the dataset folder")
    assert _snapshot(src, out) == before and sorted(p.name for p in out.iterdir() if p.is_dir()) == []
    _verifies(cli, out)
    # loose shards (no dataset.json): a new sheet may go beside them, never over one of them
    loose = tmp_path / "loose"
    loose.mkdir()
    shutil.copy(shard, loose / shard.name)
    (loose / "x.png").symlink_to(loose / shard.name)
    _refused(cli("inspect", loose / shard.name, "--contact-sheet", loose / "x.png", "--force"), "is not a picture")
    assert (loose / shard.name).read_bytes() == shard.read_bytes()
    assert cli("inspect", loose / shard.name, "--contact-sheet", loose / "s.png").exit_code == 0


def test_contact_sheet_replaces_its_own_and_another_picture_with_force(cli, made, tmp_path: Path) -> None:
    src, out = made
    for name in ("s.png", "s.jpg", "s.webp", "s.tif"):
        sheet = tmp_path / name
        assert cli("inspect", out, "--contact-sheet", sheet).exit_code == 0
        first = sheet.read_bytes()
        assert cli("inspect", out, "--contact-sheet", sheet).exit_code == 0, name  # ours: replaced
        assert sheet.read_bytes() == first
    picture = tmp_path / "photo.png"
    shutil.copy(next(src.glob("circle/*.png")), picture)
    kept = picture.read_bytes()
    _refused(cli("inspect", out, "--contact-sheet", picture), "--force replaces it")
    assert picture.read_bytes() == kept
    assert cli("inspect", out, "--contact-sheet", picture, "--force").exit_code == 0
    assert picture.read_bytes() != kept
    text = tmp_path / "notes.png"
    text.write_text("not a picture")
    _refused(cli("inspect", out, "--contact-sheet", text, "--force"), "exists and is not a picture")
    _refused(cli("inspect", out, "--force"), "--force only goes with --contact-sheet")


@pytest.mark.parametrize(
    "args",
    [
        ["--extract", "/proc/x"],
        ["--extract", "/etc/passwd/x"],
        ["--contact-sheet", "/proc/x.png"],
        ["--contact-sheet", "/etc/passwd/x.png"],
    ],
)
def test_unwritable_output_paths_are_one_line(cli, made, args: list[str]) -> None:
    _, out = made
    res = cli("inspect", out, *args)
    assert res.exit_code == 2 and "Traceback" not in res.output, res.output
    assert len(res.stderr.strip().splitlines()) == 1 and res.stderr.startswith("error: "), res.stderr
    assert not Path("/proc/x.png").exists() and not Path("/proc/x").exists()


def test_report_to_an_unwritable_path_is_one_line(cli, made) -> None:
    _, out = made
    for target in ("/proc/x.html", "/etc/passwd/x.html"):
        res = cli("report", out, "-o", target)
        assert res.exit_code == 2 and "Traceback" not in res.output, res.output
        assert len(res.stderr.strip().splitlines()) == 1 and res.stderr.startswith("error: "), res.stderr
    assert not [p for p in os.listdir("/proc") if p.startswith((".x.html", "x.html"))]


def test_report_of_the_current_folder_goes_beside_it(cli, made, tmp_path: Path, monkeypatch) -> None:
    """`report .` run inside the dataset folder: its default page is OUT-report.html beside the
    folder, by the folder's name (`.-report.html` would be inside it, and is refused)."""
    _, out = made
    monkeypatch.chdir(out)
    res = cli("report", ".", "-n", "0")
    assert res.exit_code == 0, res.output
    assert (tmp_path / "o-report.html").is_file() and not list(out.glob("*.html"))


def test_export_list_never_writes_inside_the_dataset_nor_over_a_file_it_did_not_write(
    cli, made, tmp_path: Path
) -> None:
    """--export-list is an output like the others: a mistyped path (dataset.json, the user's own
    --file-list CSV, an image, a device) is refused before anything is read; its own earlier list
    is replaced, whole, and converts back with --file-list."""
    src, out = made
    own_csv = tmp_path / "mine.csv"
    own_csv.write_text("file,class\ncircle/img_000.png,circle\n")
    image = next(src.glob("circle/*.png"))
    before = _snapshot(src, out) | {own_csv: own_csv.read_bytes()}
    for target, said in [
        (out / "dataset.json", "is inside the dataset folder"),
        (out / "list.csv", "is inside the dataset folder"),
        (own_csv, "exists and is not a file list img2tfrecord wrote"),
        (image, "exists and is not a file list img2tfrecord wrote"),
        (Path("/dev/null"), "is a device"),
    ]:
        _refused(cli("inspect", out, "--export-list", target), said)
    assert _snapshot(src, out) | {own_csv: own_csv.read_bytes()} == before
    listed = tmp_path / "list.csv"
    for _ in range(2):  # the second run replaces the first's list: its own
        res = cli("inspect", out, "--export-list", listed)
        assert res.exit_code == 0, res.output
    assert listed.read_text().startswith("path,label,split\n") and not list(tmp_path.glob(".list.csv*"))
    res = cli("convert", src, tmp_path / "again", "--file-list", listed, "-q")
    assert res.exit_code == 0, res.output


def test_a_page_written_under_the_fallback_temporary_name_has_the_usual_mode(cli, made, tmp_path: Path) -> None:
    """When `.NAME.img2tfrecord.tmp` is taken (a run killed mid-write left it), the page is written
    under another temporary name: it still gets 0666 less the umask, as any new file, not mkstemp's 0600."""
    _, out = made
    page = tmp_path / "page.html"
    (tmp_path / ".page.html.img2tfrecord.tmp").write_text("left by a killed run")
    old = os.umask(0o022)
    try:
        res = cli("report", out, "-o", page)
    finally:
        os.umask(old)
    assert res.exit_code == 0, res.output
    assert page.stat().st_mode & 0o777 == 0o644
