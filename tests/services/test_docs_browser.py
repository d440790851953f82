"""The documentation site as a reader opens it: built by MkDocs (strict), opened from disk
(file://) in Debian's Chromium (Playwright) with the network off (every request that is not a
file of the site is refused and recorded): the pages render, links between them work, search
finds a page, and nothing is requested from outside the site. Skips without Chromium (.ci/run
installs it)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no Chromium (apt-get install "
                                "chromium; .ci/run does): the browser tests need a real browser")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("docs") / "site"
    mkdocs = Path(sys.executable).with_name("mkdocs")
    proc = subprocess.run([str(mkdocs), "build", "--strict", "-d", str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    return out


def test_docs_site_works_offline_from_disk(site: Path) -> None:
    from playwright.sync_api import sync_playwright

    outside: list[str] = []

    def only_local(route) -> None:  # the network is off: only the site's own files load
        url = route.request.url
        if url.startswith("file://") or url.startswith(("data:", "blob:", "about:")):
            route.continue_()
        else:
            outside.append(url)
            route.abort()

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM,
                                    args=["--no-sandbox", "--allow-file-access-from-files"])
        context = browser.new_context(viewport={"width": 1400, "height": 900})
        context.route("**/*", only_local)
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto((site / "index.html").as_uri())
        assert "flashml" in page.title()
        # a link from the home page to a system page, and its anchors
        page.click("article a[href='systems/mat.html']")
        page.wait_for_url("**/systems/mat.html")
        assert "Run it on your own trace" in page.inner_text("article")
        # the generated reference renders its tables
        page.goto((site / "reference" / "cli.html").as_uri())
        assert "flashml pipeline run" in page.inner_text("article")
        # search, from file:// (the offline plugin's index and the local worker shim)
        page.goto((site / "index.html").as_uri())
        page.click("label.md-search__icon, .md-search__input")
        page.keyboard.type("eviction age", delay=20)  # Material searches on key events
        page.wait_for_selector(".md-search-result__item", timeout=60_000)
        assert page.locator(".md-search-result__item").count() > 0
        browser.close()
    assert outside == [], f"requests outside the site: {outside}"
    assert errors == [], errors
