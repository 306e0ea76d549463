"""Everything the report shows from the dataset is text: class and split names that matplotlib
would read as mathtext (`$x^$`) or hide (`_val`) are drawn as written in the charts; file names
that look like markup, in the skipped-files and duplicates lists too, stay text when a real HTML
parser reads the page. And its low-share flag marks the cell of a skewed split."""

from __future__ import annotations

import shutil
from html.parser import HTMLParser
from pathlib import Path

from helpers import make_dataset


class Page(HTMLParser):
    """The page as an HTML parser sees it: its tags with their attributes, its text, the text of
    each SVG <text> element, and each split x class count cell's classes."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self.svg_text: list[str] = []
        self.cells: dict[tuple[str, str], set[str]] = {}
        self._in_svg_text = False
        self.feed(html)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        self.tags.append((tag, a))
        self._in_svg_text = tag == "text"
        classes = set((a.get("class") or "").split())
        if tag == "td" and "count" in classes:
            self.cells[str(a["data-split"]), str(a["data-class"])] = classes - {"n", "count"}

    def handle_endtag(self, tag: str) -> None:
        if tag == "text":
            self._in_svg_text = False

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self._in_svg_text:
            self.svg_text.append(data)


def test_names_matplotlib_would_parse_are_drawn_as_text(cli, tmp_path: Path) -> None:
    names = ["$x^$", "a\\frac{1}{2}", "_under", "$\\alpha$ & <b>", "x_{1}^2"]
    src = tmp_path / "in"
    make_dataset(src, {n: 3 for n in names})
    out = tmp_path / "out"
    res = cli("convert", src, out, "--split", "train=0.5,_val=0.5", "-q")
    assert res.exit_code == 0, res.output
    page_file = tmp_path / "r.html"
    res = cli("report", out, "-o", page_file, "-n", "1")
    assert res.exit_code == 0 and "Traceback" not in res.output, res.output
    page = Page(page_file.read_text(encoding="utf-8"))
    drawn = set(page.svg_text)
    for name in [*names, "train", "_val"]:  # the tick labels and the legend
        assert name in drawn, (name, sorted(drawn))
    assert {s for s, _ in page.cells} == {"train", "_val"} and {c for _, c in page.cells} == set(names)


def test_file_names_that_look_like_markup_stay_text_in_every_list(cli, tmp_path: Path) -> None:
    """A broken file (the skipped list) and eight copies of one image (a duplicates group: six
    thumbnails with their captions, then the rest as a list of paths), all named as markup."""
    src = tmp_path / "in"
    made = make_dataset(src, {"cat": 4, "dog": 4})
    evil = "<img src=x onerror=alert(1)>.jpg"
    (src / "cat" / evil).write_bytes(b"\xff\xd8\xff\xe0 not a jpeg")
    copies = [f"<svg onload=alert({i})><script>x{i}.jpg" for i in range(8)]
    for name in copies:
        shutil.copy(made["cat"][1], src / "dog" / name)
    out = tmp_path / "out"
    assert cli("convert", src, out, "-q").exit_code == 0
    page_file = tmp_path / "r.html"
    assert cli("report", out, "-o", page_file).exit_code == 0
    page = Page(page_file.read_text(encoding="utf-8"))
    assert not [t for t, _ in page.tags if t == "script"]
    assert not [a for t, a in page.tags if any(k.startswith("on") for k in a)]
    assert all(set(a) <= {"src", "width", "height", "alt"} for t, a in page.tags if t == "img")
    assert all((a["src"] or "").startswith("data:image/") for t, a in page.tags if t == "img")
    text = "".join(page.text)
    assert f"cat/{evil}" in text  # the skipped files' list
    for name in copies:  # the duplicates' group: captions and the list past the thumbnails
        assert name in text, name


def test_the_low_share_flag_marks_the_skewed_cells(cli, tmp_path: Path) -> None:
    """A pre-split input whose validation split holds 3 of dog's 23 images (the split holds 42% of
    all records: chance explains down to ~22%) and none of bird's: those two cells, no other."""
    src = tmp_path / "in"
    make_dataset(src / "train", {"cat": 50, "dog": 20, "bird": 3}, size=(16, 12))
    make_dataset(src / "validation", {"cat": 50, "dog": 3}, seed=1, size=(16, 12))
    out = tmp_path / "out"
    assert cli("convert", src, out, "-q").exit_code == 0
    page_file = tmp_path / "r.html"
    res = cli("report", out, "-o", page_file, "-n", "0")
    assert res.exit_code == 0 and "2 split x class counts flagged" in res.output, res.output
    page = Page(page_file.read_text(encoding="utf-8"))
    flagged = {key: classes for key, classes in page.cells.items() if classes}
    assert flagged == {("validation", "dog"): {"low"}, ("validation", "bird"): {"absent"}}
