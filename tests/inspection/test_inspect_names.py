"""`inspect` with class names beyond ASCII and datasets beyond one split (issue 21 items 8, 9, 12):
tables padded by display width, the contact sheet's row names, fonts, label column and file
format, and `--extract` of several splits into SPLIT/CLASS/ that `convert` reads back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image

from img2tfrecord.inspection.sheet import contact_sheet_size
from inspect_helpers import CLASS_COLORS, encode, example, picture, write_frames
from test_inspect import CLASSES, run, run_json

# --------------------------------------------------------------------------- contact sheet: names, fonts, formats


@pytest.fixture(scope="module")
def named(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A converted dataset with --label-offset 1 whose class names need more than ASCII."""
    import img2tfrecord

    root = tmp_path_factory.mktemp("named")
    for i, name in enumerate(["circle", "square", "triangle", "ünï cödé", "日本の猫"]):
        for j in range(2):
            save_to = root / "in" / name / f"{j}.png"
            save_to.parent.mkdir(parents=True, exist_ok=True)
            picture(20 + j, 16, CLASS_COLORS[CLASSES[i % 4]]).save(save_to)
    img2tfrecord.convert(str(root / "in"), str(root / "out"), label_offset=1, workers=1)
    return root / "out"


def test_contact_sheet_names_rows_by_label_with_an_offset(named: Path, tmp_path: Path) -> None:
    code, data = run_json(named, "--contact-sheet", tmp_path / "s.png", "-n", "2")
    assert code == 0
    assert data["contact_sheet"]["row_names"] == ["1  circle", "2  square", "3  triangle", "4  ünï cödé", "5  日本の猫"]
    assert [x["label"] for x in data["total"]["labels"]] == [1, 2, 3, 4, 5]


def test_contact_sheet_draws_names_with_a_font_that_has_their_characters(
    named: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from img2tfrecord.inspection import fonts

    for name in ("ünï cödé", "日本の猫"):
        if not fonts.installed_fonts(name) and not all(fonts._covers(fonts.default_font(), c) for c in name):
            pytest.skip(
                f"no installed font has the characters of {name!r} (Debian: fonts-dejavu-core, fonts-ipafont-gothic)"
            )
        lab = fonts.label(name)
        assert not lab.escaped and lab.text == name
        assert fonts._covers_all(lab.font, name)
        boxes = fonts._bitmap(fonts.default_font(), name[-1])
        assert fonts._bitmap(lab.font, name[-1]) != boxes  # a glyph, not the missing-glyph box
    sheet = tmp_path / "s.png"
    code, data = run_json(named, "--contact-sheet", sheet, "-n", "2")
    assert code == 0 and data["contact_sheet"]["names_escaped"] == 0
    # with no font for them, the characters are drawn as escapes, and the report says so
    monkeypatch.setattr(fonts, "installed_fonts", lambda chars: ())
    fonts._covers.cache_clear()
    r = run(named, "--contact-sheet", tmp_path / "t.png", "-n", "2")
    assert r.exit_code == 0 and "class names drawn with \\uXXXX escapes" in r.stdout
    assert fonts.label("日本の猫").text == "\\u65e5\\u672c\\u306e\\u732b"


def test_contact_sheet_label_column_fits_the_names(named: Path, tmp_path: Path) -> None:
    from img2tfrecord.inspection.sheet import MAX_LABEL_WIDTH, MIN_LABEL_WIDTH

    png = encode(picture(8, 8, (9, 9, 9)), "PNG")
    recs = [
        example(
            {"image/encoded": ("bytes", [png]), "image/class/label": ("int64", [i]), "image/class/text": ("bytes", [t])}
        )
        for i, t in enumerate([b"a", b"b" * 200])
    ]
    short, long = tmp_path / "short", tmp_path / "long"
    write_frames(short, recs[:1])
    write_frames(long, recs)
    widths = {}
    for path in (short, long):
        code, data = run_json(path, "--contact-sheet", tmp_path / f"{path.name}.png", "-n", "1")
        c = data["contact_sheet"]
        widths[path.name] = c["label_width"]
        assert Image.open(tmp_path / f"{path.name}.png").size == contact_sheet_size(c["rows"], 1, c["label_width"])
    assert widths == {"short": MIN_LABEL_WIDTH, "long": MAX_LABEL_WIDTH}
    assert contact_sheet_size(1, 1, widths["short"])[0] < contact_sheet_size(1, 1)[0]  # narrower than the old fixed 220


@pytest.mark.parametrize(("name", "fmt"), [("sheet.jpg", "JPEG"), ("sheet.JPEG", "JPEG"), ("sheet.webp", "WEBP")])
def test_contact_sheet_is_written_in_the_format_its_extension_names(
    named: Path, tmp_path: Path, name: str, fmt: str
) -> None:
    r = run(named, "--contact-sheet", tmp_path / name, "-n", "1")
    assert r.exit_code == 0, r.output
    assert Image.open(tmp_path / name).format == fmt


@pytest.mark.parametrize("name", ["sheet.gif", "sheet", "sheet.txt"])
def test_contact_sheet_refuses_an_extension_it_cannot_write(named: Path, tmp_path: Path, name: str) -> None:
    r = run(named, "--contact-sheet", tmp_path / name)
    assert r.exit_code == 2 and r.stdout == "" and len(r.stderr.splitlines()) == 1
    assert "unknown picture extension" in r.stderr and ".png, .jpg" in r.stderr
    assert not (tmp_path / name).exists()


def _columns(text: str) -> int:
    """Terminal columns, computed here from the Unicode tables: wide and full-width characters take 2."""
    import unicodedata

    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def test_tables_align_by_display_width_with_wide_characters(named: Path) -> None:
    out = run(named, "-n", "5").stdout
    bars = [line for line in out.splitlines() if "\u2588" in line]
    assert len(bars) == 5 and any("日本の猫" in b for b in bars)
    assert len({_columns(b[: b.index("\u2588")]) for b in bars}) == 1, bars  # every bar starts in one column
    lines = out.splitlines()
    head = next(i for i, line in enumerate(lines) if line.strip().startswith("#  filename"))
    table = lines[head : head + 6]
    assert any("日本の猫" in row for row in table), table
    starts = {_columns(row[: row.index("  PNG")]) for row in table[1:]}  # the format column, after wide names
    assert len(starts) == 1, table


def test_extract_all_of_several_splits_keeps_them_apart_and_converts_back(tmp_path: Path) -> None:
    """A pre-split dataset extracts into SPLIT/CLASS/, which `convert` reads as pre-split again:
    every split holds the same records (names, labels, bytes) as before; nothing merged or renamed."""
    import img2tfrecord
    from img2tfrecord.format.framing import RawRecord, read_records
    from img2tfrecord.inspection.records import parse_record

    src = tmp_path / "src"
    for split, seed in (("train", 0), ("validation", 1)):
        for cls, color in (("cat", CLASS_COLORS["cat"]), ("dog", CLASS_COLORS["dog"])):
            (src / split / cls).mkdir(parents=True)
            for i in range(3):  # the same file names in both splits: merged, they would clash
                picture(20 + i + seed, 16, color).save(src / split / cls / f"{i}.png")
    (src / "validation" / "fox").mkdir()  # a class with no images in one split keeps its label
    (src / "train" / "fox").mkdir()
    picture(18, 18, CLASS_COLORS["fox"]).save(src / "train" / "fox" / "f.png")
    a, b, x = tmp_path / "a", tmp_path / "b", tmp_path / "x"
    img2tfrecord.convert(str(src), str(a), workers=1)
    r = run(a, "--extract", x, "--all")
    assert r.exit_code == 0, r.output
    assert f"extracted 13 images to {x} (a folder per split, then per class)" in r.stdout and "renamed" not in r.stdout
    assert sorted(p.name for p in x.iterdir()) == ["train", "validation"]
    assert (x / "validation" / "fox").is_dir()
    img2tfrecord.convert(str(x), str(b), workers=1)

    def records(d: Path) -> dict[str, list[tuple]]:
        man = json.loads((d / "dataset.json").read_text())
        out: dict[str, list[tuple]] = {}
        for split, info in man["splits"].items():
            for sh in info["shards"]:
                for i, data in enumerate(read_records(d / sh["file"])):
                    rec = parse_record(RawRecord(i, 0, data, True))
                    out.setdefault(split, []).append((rec.filename, rec.label, rec.text, rec.image))
        return {k: sorted(v) for k, v in out.items()}

    ma, mb = (json.loads((d / "dataset.json").read_text()) for d in (a, b))
    assert ma["classes"] == mb["classes"] == ["cat", "dog", "fox"]
    assert {s: v["class_counts"] for s, v in ma["splits"].items()} == {
        s: v["class_counts"] for s, v in mb["splits"].items()
    }
    assert records(a) == records(b) and set(records(a)) == {"train", "validation"}
    # one split alone extracts flat, as before
    y = tmp_path / "y"
    assert run(a, "--split", "train", "--extract", y, "--all").exit_code == 0
    assert sorted(p.name for p in y.iterdir()) == ["cat", "dog", "fox"]
