"""The report page opened from disk by a real browser: Debian's headless Chromium (`make sysdeps`),
driven by Playwright's Python package pointed at that binary (no browser download).

Set REPORT_SCREENSHOT=FILE to keep the sample report's screenshot (`make docs-screenshot`: the docs' picture)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from helpers import make_dataset

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


@contextlib.contextmanager
def chromium_page(**context: Any) -> Iterator[Any]:
    """A page of Debian's headless Chromium, 1280x900 unless `context` says otherwise (Playwright's
    new_context options), closed with its browser after the block."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            yield browser.new_context(**{"viewport": {"width": 1280, "height": 900}, **context}).new_page()
        finally:
            browser.close()


@pytest.fixture(scope="module")
def page_file(tmp_path_factory) -> tuple[Path, Path]:
    """A dataset with a split, a skipped file, a duplicate and one update; its report."""
    from img2tfrecord.conversion.convert import convert
    from img2tfrecord.conversion.versions.update import update
    from img2tfrecord.inspection.report import report

    root = tmp_path_factory.mktemp("browser")
    src, out = root / "in", root / "out"
    make_dataset(src, {"cat": 14, "dog": 11, "日本の猫": 6, "<i>odd & co": 4}, size=(96, 72))
    (src / "dog" / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 not a jpeg")
    shutil.copy(src / "cat" / "img_002.jpg", src / "dog" / "copy.jpg")
    convert(str(src), str(out), split={"train": 0.75, "validation": 0.25})
    make_dataset(src, {"bird": 5}, seed=3, size=(80, 80))
    (src / "cat" / "img_000.png").unlink()
    update(str(src), str(out))
    html = root / "report.html"
    report(out, html, per_class=6)
    return out, html


def test_chromium_shows_the_page_from_disk_alone(page_file: tuple[Path, Path], tmp_path: Path) -> None:
    out, html = page_file
    man = json.loads((out / "dataset.json").read_text())
    assert os.access(CHROMIUM, os.X_OK), "Debian's chromium is needed (make sysdeps)"
    requests: list[str] = []
    errors: list[str] = []
    with chromium_page() as page:
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on("requestfailed", lambda r: errors.append(f"failed: {r.url}"))

        def route(r):
            requests.append(r.request.url)
            if r.request.url.startswith("file://"):
                r.continue_()
            else:
                r.abort()

        page.route("**/*", route)
        page.goto(html.as_uri())
        page.wait_for_load_state("load")
        natural = page.eval_on_selector_all("img", "els => els.map(e => e.complete ? e.naturalWidth : -1)")
        cells = page.eval_on_selector_all(
            "td.count", "els => els.map(e => [e.dataset.split, e.dataset.class, e.textContent.trim()])"
        )
        records_text = page.inner_text("#records")
        body = page.inner_text("body")
        history = page.inner_text("#history")
        page.screenshot(path=str(tmp_path / "report.png"), full_page=False)
    assert errors == []
    assert requests == [html.as_uri()]  # the page itself; its pictures are data: URIs, never requested
    assert natural and all(w > 0 for w in natural), natural
    assert len(natural) >= 6 * 4  # every class but the smallest has 6 thumbnails
    records = sum(sp["records"] for sp in man["splits"].values())
    assert records_text == f"{records:,}"
    expected = {(s, c): n for s, sp in man["splits"].items() for c, n in sp["class_counts"].items()}
    shown = {(s, c): int(text.split()[0].replace(",", "")) for s, c, text in cells}
    assert shown == expected
    for name in man["classes"]:
        assert name in body, name
    assert man["version"] == 2 and "Records per class by the version that wrote their shard" in body
    assert man["history"] == [
        {
            "version": 2,
            "created": man["created"],
            "classes": {
                "bird": {"added": 5, "removed": 0, "changed": 0},
                "cat": {"added": 0, "removed": 1, "changed": 0},
            },
        }
    ]
    assert re.search(r"^2\s+\S+\s+bird\s+5\s+0\s+0$", history, re.M), history
    assert re.search(r"^2\s+\S+\s+cat\s+0\s+1\s+0$", history, re.M), history
    assert (tmp_path / "report.png").stat().st_size > 10_000


def test_numbers_read_without_javascript(page_file: tuple[Path, Path]) -> None:
    out, html = page_file
    man = json.loads((out / "dataset.json").read_text())
    with chromium_page(java_script_enabled=False) as page:
        page.goto(html.as_uri())
        table = page.inner_text("#counts")
    for s, sp in man["splits"].items():
        assert s in table
        for c, n in sp["class_counts"].items():
            assert c in table and f"{n:,}" in table


def test_boxes_render_over_their_objects_on_the_thumbnails(tmp_path: Path) -> None:
    """sample_data's COCO set: each box element's bounding rectangle, as Chromium lays it out, is the
    annotation's box scaled to its thumbnail's rectangle (within a pixel)."""
    from img2tfrecord.conversion.convert import convert
    from img2tfrecord.inspection.report import report

    sample = Path(__file__).resolve().parents[2] / "sample_data"
    coco = json.loads((sample / "annotations.json").read_text())
    images = {im["id"]: im for im in coco["images"]}
    truth = {images[a["image_id"]]["file_name"]: (a["bbox"], images[a["image_id"]]) for a in coco["annotations"]}
    convert(str(sample), str(tmp_path / "out"), annotations=str(sample / "annotations.json"))
    html = tmp_path / "r.html"
    report(tmp_path / "out", html, per_class=4)
    with chromium_page() as page:
        page.goto(html.as_uri())
        shown = page.eval_on_selector_all(
            "#samples .frame",
            """els => els.map(f => {
                const img = f.querySelector('img').getBoundingClientRect();
                return [f.querySelector('img').alt, [img.x, img.y, img.width, img.height],
                        [...f.querySelectorAll('.box')].map(b => {
                            const r = b.getBoundingClientRect(); return [r.x, r.y, r.width, r.height, b.title];
                        })];
            })""",
        )
    assert len(shown) == 12  # 4 of each of the 3 classes, one box each
    names = {c["id"]: c["name"] for c in coco["categories"]}
    for name, (ix, iy, iw, ih), boxes in shown:
        (x, y, w, h), im = truth[name]
        sx, sy = iw / im["width"], ih / im["height"]
        ((bx, by, bw, bh, title),) = boxes
        assert title == names[next(a["category_id"] for a in coco["annotations"] if images[a["image_id"]] is im)]
        assert abs(bx - (ix + x * sx)) <= 1 and abs(by - (iy + y * sy)) <= 1, name
        assert abs(bw - w * sx) <= 1 and abs(bh - h * sy) <= 1, name


SAMPLE = Path(__file__).resolve().parents[2] / "sample_data"
LONG_NAME = "a_very_long_file_name_from_a_camera_export_0001.png"


@pytest.fixture(scope="module")
def sample_report(tmp_path_factory) -> Path:
    """sample_data (with a file whose name starts with a space, a long name, and a one-image class
    added by an update) converted as the README does, into `out`, at a fixed SOURCE_DATE_EPOCH: the
    page `make docs-screenshot` pictures. Relative paths, so the page's title is `out`."""
    from img2tfrecord.conversion.convert import convert
    from img2tfrecord.conversion.versions.update import update
    from img2tfrecord.inspection.report import report

    work = tmp_path_factory.mktemp("sample")
    shutil.copytree(SAMPLE, work / "sample_data", ignore=shutil.ignore_patterns("*.py", "*.json"))
    shutil.copy(SAMPLE / "circle" / "circle_00.png", work / "sample_data" / "circle" / "  leading spaces_d.png")
    shutil.copy(SAMPLE / "square" / "square_00.png", work / "sample_data" / "square" / LONG_NAME)
    cwd, epoch = os.getcwd(), os.environ.get("SOURCE_DATE_EPOCH")
    os.chdir(work)
    os.environ["SOURCE_DATE_EPOCH"] = "1764633600"  # 2025-12-02
    try:
        convert("sample_data", "out", split={"train": 0.8, "validation": 0.2})
        make_dataset(Path("sample_data"), {"star": 1}, size=(64, 64))
        update("sample_data", "out")
        report("out", "report.html", per_class=12)
    finally:
        os.chdir(cwd)
        if epoch is None:
            del os.environ["SOURCE_DATE_EPOCH"]
        else:
            os.environ["SOURCE_DATE_EPOCH"] = epoch
    return work / "report.html"


# Each rendered line of an element's text, read from the layout: the characters grouped by the top
# of their box (a <wbr> is an element, so the text is walked node by node).
_LINES_JS = """el => {
    const lines = new Map();
    const walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
        for (let i = 0; i < node.length; i++) {
            const r = document.createRange(); r.setStart(node, i); r.setEnd(node, i + 1);
            const box = r.getClientRects()[0]; if (!box) continue;
            const top = Math.round(box.top); lines.set(top, (lines.get(top) || '') + node.data[i]);
        }
    }
    return [...lines.entries()].sort((a, b) => a[0] - b[0]).map(e => e[1]);
}"""


def test_the_sample_report_reads_right_in_chromium(sample_report: Path, tmp_path: Path) -> None:
    """What a reader of the sample's report sees: its title and date, "1 record", a name's leading
    space, long names wrapped after their separators, the parent as a version number, and the
    history chart's heading saying what it shows. REPORT_SCREENSHOT=FILE keeps the picture (docs)."""
    with chromium_page() as page:
        page.goto(sample_report.as_uri())
        page.wait_for_load_state("load")
        title, sub, body = page.inner_text("h1"), page.inner_text("header .sub"), page.inner_text("body")
        star = page.inner_text('.classrow[data-class="star"] h3')
        names = page.eval_on_selector_all("#samples .fn", "els => els.map(e => e.innerText)")
        long_lines = page.eval_on_selector(f'#samples .fn[title$="{LONG_NAME}"]', _LINES_JS)
        versions = page.inner_text("#versions")
        page.screenshot(path=str(tmp_path / "report.png"))
        if os.environ.get("REPORT_SCREENSHOT"):
            page.screenshot(path=os.environ["REPORT_SCREENSHOT"])
    assert title == "out" and "created 2025-12-02T00:00:00Z" in sub
    assert star == "star (1 record)" and "(1 records)" not in body
    assert "circle/  leading spaces_d.png" in names  # two spaces, not collapsed to one
    assert len(long_lines) >= 2 and "".join(long_lines) == f"square/{LONG_NAME}"
    assert all(line[-1] in "_-. " for line in long_lines[:-1]), long_lines  # never mid-word
    assert "made from version 1" in body
    assert re.search(r"parent\s+version 1 \(its dataset.json's digest [0-9a-f]{64}\)", versions), versions
    assert "Changes per version\n" in versions and "Changes per version and class" in versions
    assert (tmp_path / "report.png").stat().st_size > 10_000


def test_a_detection_report_names_each_clipped_box_and_outlines_show_on_any_colour(tmp_path: Path) -> None:
    """sample_data's COCO boxes with one made to reach past its image: the page says which box was
    clipped (file, box, class, why), and every box outline has a dark line outside and a light
    line inside its class colour (a box in its object's own colour vanished without them)."""
    from img2tfrecord.conversion.convert import convert
    from img2tfrecord.inspection.report import report

    coco = json.loads((SAMPLE / "annotations.json").read_text())
    first = coco["annotations"][0]
    image = next(im for im in coco["images"] if im["id"] == first["image_id"])
    first["bbox"][2] = image["width"]  # now past the right edge: clipped
    (tmp_path / "ann.json").write_text(json.dumps(coco))
    convert(str(SAMPLE), str(tmp_path / "out"), annotations=str(tmp_path / "ann.json"))
    html = tmp_path / "r.html"
    report(tmp_path / "out", html, per_class=4)
    with chromium_page() as page:
        page.goto(html.as_uri())
        boxes_table = page.inner_text("#boxes")
        problems = page.eval_on_selector_all(
            "#box-problems tr", "rows => rows.slice(1).map(r => [...r.cells].map(c => c.innerText))"
        )
        page.click("#boxes a")  # "(which)" leads to the list
        at_list = page.evaluate("location.hash")
        edges = page.eval_on_selector_all(
            "#samples .box",
            "els => els.map(b => { const r = b.getBoundingClientRect(), f = b.parentElement.getBoundingClientRect();"
            " return [r.x, r.y + scrollY, r.width, f.y + scrollY]; })",
        )
        png = page.screenshot(full_page=True)
    assert "clipped to the image (which)\t1" in boxes_table
    name = next(c["name"] for c in coco["categories"] if c["id"] == first["category_id"])
    ((path, box, cls, why),) = problems
    assert (path, box, cls) == (image["file_name"], "0", name) and why.endswith("clipped"), problems
    assert at_list == "#box-problems"
    import io

    from PIL import Image

    shot = Image.open(io.BytesIO(png)).convert("L")
    checked = 0
    for x, y, w, frame_top in edges:
        if y - frame_top < 3:  # the outer line is cut by the thumbnail's frame
            continue
        mid = int(x + w / 2)
        # down through the top edge (its position rounded to a pixel either way): dark, the class's
        # colour for two pixels, light
        column = [shot.getpixel((mid, int(y) + d)) for d in range(-2, 6)]
        assert any(a < 40 and b > 180 for a, b in zip(column, column[3:])), (x, y, column)
        checked += 1
    assert checked >= 6
