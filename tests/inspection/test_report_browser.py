"""The report page opened from disk by a real browser: Debian's headless Chromium (`make sysdeps`),
driven by Playwright's Python package pointed at that binary (no browser download).

Set REPORT_SCREENSHOT=FILE to keep the screenshot (the docs' picture is made so)."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest

from helpers import make_dataset

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


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
    from playwright.sync_api import sync_playwright

    out, html = page_file
    man = json.loads((out / "dataset.json").read_text())
    assert os.access(CHROMIUM, os.X_OK), "Debian's chromium is needed (make sysdeps)"
    requests: list[str] = []
    errors: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
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
            if os.environ.get("REPORT_SCREENSHOT"):
                page.screenshot(path=os.environ["REPORT_SCREENSHOT"], full_page=False)
        finally:
            browser.close()
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
    from playwright.sync_api import sync_playwright

    out, html = page_file
    man = json.loads((out / "dataset.json").read_text())
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_context(java_script_enabled=False).new_page()
            page.goto(html.as_uri())
            table = page.inner_text("#counts")
        finally:
            browser.close()
    for s, sp in man["splits"].items():
        assert s in table
        for c, n in sp["class_counts"].items():
            assert c in table and f"{n:,}" in table


def test_boxes_render_over_their_objects_on_the_thumbnails(tmp_path: Path) -> None:
    """sample_data's COCO set: each box element's bounding rectangle, as Chromium lays it out, is the
    annotation's box scaled to its thumbnail's rectangle (within a pixel)."""
    from playwright.sync_api import sync_playwright

    from img2tfrecord.conversion.convert import convert
    from img2tfrecord.inspection.report import report

    sample = Path(__file__).resolve().parents[2] / "sample_data"
    coco = json.loads((sample / "annotations.json").read_text())
    images = {im["id"]: im for im in coco["images"]}
    truth = {images[a["image_id"]]["file_name"]: (a["bbox"], images[a["image_id"]]) for a in coco["annotations"]}
    convert(str(sample), str(tmp_path / "out"), annotations=str(sample / "annotations.json"))
    html = tmp_path / "r.html"
    report(tmp_path / "out", html, per_class=4)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
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
        finally:
            browser.close()
    assert len(shown) == 12  # 4 of each of the 3 classes, one box each
    names = {c["id"]: c["name"] for c in coco["categories"]}
    for name, (ix, iy, iw, ih), boxes in shown:
        (x, y, w, h), im = truth[name]
        sx, sy = iw / im["width"], ih / im["height"]
        ((bx, by, bw, bh, title),) = boxes
        assert title == names[next(a["category_id"] for a in coco["annotations"] if images[a["image_id"]] is im)]
        assert abs(bx - (ix + x * sx)) <= 1 and abs(by - (iy + y * sy)) <= 1, name
        assert abs(bw - w * sx) <= 1 and abs(bh - h * sy) <= 1, name
