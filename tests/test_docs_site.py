"""The docs site as people open it: `make docs`, then `site/index.html` from disk, offline.

The site is built here (mkdocs --strict, the `make docs` configuration) into a temporary folder and opened
in Debian's headless Chromium (`make sysdeps`) from `file://`: every page is a page (not a folder
listing), every internal link leads to one, nothing is asked of any server, and search answers."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import urldefrag, urlparse

import pytest

from docs_examples import ROOT

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site") / "site"
    mkdocs = Path(sys.executable).with_name("mkdocs")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [str(mkdocs), "build", "--strict", "--quiet", "--site-dir", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    return out


def _local_target(url: str, site: Path) -> Path | None:
    """The file a link of the site leads to, or None for a link that leaves it (http: and the like)."""
    parsed = urlparse(urldefrag(url).url)
    if parsed.scheme != "file":
        return None
    return Path(parsed.path)


def test_every_page_opens_from_disk_with_no_request_outside_it(site: Path) -> None:
    from playwright.sync_api import sync_playwright

    assert os.access(CHROMIUM, os.X_OK), "Debian's chromium is needed (make sysdeps)"
    outside: list[str] = []
    errors: list[str] = []
    seen: set[Path] = set()
    todo = [site / "index.html"]
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_page()
            page.on("console", lambda m: errors.append(f"{page.url}: {m.text}") if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(f"{page.url}: {e}"))

            def route(r):
                if r.request.url.startswith("file://"):
                    r.continue_()
                else:
                    outside.append(r.request.url)
                    r.abort()

            page.route("**/*", route)
            while todo:
                path = todo.pop()
                if path in seen:
                    continue
                seen.add(path)
                assert path.is_file(), f"a link leads to {path}, which is not a page file (a folder shows a listing)"
                page.goto(path.as_uri())
                page.wait_for_load_state("load")
                assert page.query_selector("article.md-content__inner") is not None, f"{path} shows no page"
                for href in page.eval_on_selector_all("a[href]", "els => els.map(e => e.href)"):
                    target = _local_target(href, site)
                    if target is not None and target.is_relative_to(site) and target.suffix in ("", ".html"):
                        todo.append(target)
        finally:
            browser.close()
    pages = {p for p in site.rglob("*.html") if p.name != "404.html"}
    assert pages <= seen, f"pages no link reaches: {sorted(str(p) for p in pages - seen)}"
    assert outside == []
    assert errors == []


def test_search_answers_from_disk(site: Path) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_page()
            page.route("**/*", lambda r: r.continue_() if r.request.url.startswith("file://") else r.abort())
            page.goto((site / "index.html").as_uri())
            page.wait_for_load_state("load")
            page.keyboard.press("s")  # the site's search shortcut, as a reader types it
            page.keyboard.type("contact sheet", delay=20)
            page.wait_for_selector("li.md-search-result__item", timeout=15000)
            hits = page.eval_on_selector_all("li.md-search-result__item a", "els => els.map(e => e.href)")
        finally:
            browser.close()
    assert hits and all(h.startswith("file://") for h in hits)
    assert any("inspecting.html" in h for h in hits)


def test_the_api_reference_lists_every_keyword_convert_takes(site: Path) -> None:
    """Generated from the signatures (mkdocs_hooks.py): a keyword added to convert() or plan_job shows up."""
    import re

    from img2tfrecord.conversion.convert import _PARAMETERS

    page = (site / "reference" / "api.html").read_text(encoding="utf-8")
    rows = re.findall(r"<tr>\s*<td><code>(\w+)</code></td>\s*<td><code>([^<]+)</code></td>", page)
    assert [name for name, _ in rows] == list(_PARAMETERS)
    assert dict(rows)["split_rule"] == "str" and "one quoted string" in page
