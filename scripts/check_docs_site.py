"""Check a built documentation site (`make docs`, after `mkdocs build --strict`): every internal
link and anchor resolves to a file and an id in the site, and no page or stylesheet loads
anything from outside it (scripts, stylesheets, fonts, images, frames, preconnects), so the
site works offline from file:// and from `python -m http.server -d site`. Links *to* other
sites (`<a href="https://...">`) are allowed: a reader may follow them, the page does not
fetch them. No network is used.

    python scripts/check_docs_site.py [SITE_DIR]      # default: site/; exit 1 on a problem
"""

from __future__ import annotations

import re
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

#: (tag, attribute) pairs whose URL the browser fetches when the page loads.
_LOADED = {("script", "src"), ("img", "src"), ("iframe", "src"), ("source", "src"),
           ("video", "src"), ("audio", "src"), ("embed", "src"), ("object", "data"),
           ("input", "src"), ("image", "href")}
_CSS_URL = re.compile(r"""url\(\s*['"]?([^'")]+)['"]?\s*\)|@import\s+['"]([^'"]+)['"]""")


def is_external(url: str) -> bool:
    """A URL that leaves the site: a scheme with a host, or protocol-relative."""
    u = url.strip()
    return bool(re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*://", u)) or u.startswith("//")


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.ids: set[str] = set()
        self.links: list[str] = []  # <a href>, <link href> of any rel
        self.loaded: list[str] = []  # URLs fetched at load time
        self.styles: list[str] = []  # inline <style> text and style attributes
        self._in_style = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        for key in ("id", "name"):
            if key in a and (key == "id" or tag == "a"):
                self.ids.add(a[key])
        if tag == "a" and "href" in a:
            self.links.append(a["href"])
        if tag == "link" and "href" in a:
            rel = a.get("rel", "").lower()
            if any(r in rel for r in ("stylesheet", "preconnect", "preload", "prefetch",
                                      "dns-prefetch", "icon", "modulepreload", "manifest")):
                self.loaded.append(a["href"])
            else:
                self.links.append(a["href"])
        for t, attr in _LOADED:
            if tag == t and attr in a:
                self.loaded.append(a[attr])
        if "srcset" in a:
            self.loaded.extend(p.strip().split(" ")[0] for p in a["srcset"].split(",") if p)
        if "style" in a:
            self.styles.append(a["style"])
        self._in_style = tag == "style"

    def handle_endtag(self, tag: str) -> None:
        if tag == "style":
            self._in_style = False

    def handle_data(self, data: str) -> None:
        if self._in_style:
            self.styles.append(data)


def css_urls(text: str) -> list[str]:
    return [m.group(1) or m.group(2) for m in _CSS_URL.finditer(text)]


def check_site(site: Path) -> list[str]:
    """The problems of the site at `site`, one line each (empty: none)."""
    site = site.resolve()
    problems: list[str] = []
    pages: dict[Path, _Page] = {}
    for f in sorted(site.rglob("*.html")):
        p = _Page()
        p.feed(f.read_text(encoding="utf-8"))
        pages[f] = p
    if not pages:
        return [f"{site}: no HTML pages (build the site first: make docs)"]
    for f, p in pages.items():
        rel = f.relative_to(site)
        for url in p.loaded + [u for s in p.styles for u in css_urls(s)]:
            if is_external(url):
                problems.append(f"{rel}: loads {url} from outside the site")
            elif url and not url.startswith("data:"):
                target = _resolve(site, f, url)
                if target is not None and not target.exists():
                    problems.append(f"{rel}: loads {url}, which is not in the site")
        for url in p.links:
            if is_external(url) or url.startswith(("mailto:", "javascript:", "data:")):
                continue
            parts = urlsplit(url)
            target = f if not parts.path else _resolve(site, f, url)
            if target is None:
                continue
            if target.is_dir():
                target = target / "index.html"
            if not target.exists():
                problems.append(f"{rel}: broken link {url}")
                continue
            frag = unquote(parts.fragment)
            if frag and target.suffix == ".html" and frag not in pages[target].ids:
                problems.append(f"{rel}: link {url}: no anchor #{frag} in "
                                f"{target.relative_to(site)}")
    for css in sorted(site.rglob("*.css")):
        for url in css_urls(css.read_text(encoding="utf-8", errors="replace")):
            if is_external(url):
                problems.append(f"{css.relative_to(site)}: loads {url} from outside the site")
    if not (site / "search" / "search_index.js").exists():
        problems.append("search/search_index.js missing: the offline plugin makes search "
                        "work from file://")
    return problems


def _resolve(site: Path, page: Path, url: str) -> Path | None:
    """The file `url` (relative to `page`, or to the site root when it starts with /) names."""
    path = unquote(urlsplit(url).path)
    if not path:
        return page
    base = site if path.startswith("/") else page.parent
    target = (base / path.lstrip("/")).resolve()
    try:
        target.relative_to(site)
    except ValueError:
        return target  # outside the site: reported as missing unless it exists
    return target


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    site = Path(args[0] if args else "site")
    problems = check_site(site)
    for line in problems:
        print(f"docs: {line}", file=sys.stderr)
    n = len(list(site.rglob("*.html")))
    if problems:
        print(f"docs: {len(problems)} problem(s) in {n} pages of {site}", file=sys.stderr)
        return 1
    print(f"docs: {n} pages, every internal link and anchor resolves, nothing loaded from "
          f"outside {site}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
