"""The documentation site (mkdocs.yml, docs/) and the README front page: the generated reference
pages are current (a new CLI option, run setting, ABI function or manifest field without docs
fails here), the README's headline figures are the committed benchmark results, and the
site checker finds what it must (broken links and anchors, assets from outside the site).
`make docs` builds the real site and runs the checker on it."""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import pytest

from conftest import REPO

sys.path.insert(0, str(REPO / "scripts"))
sys.path.insert(0, str(REPO / "bench"))

import check_docs_site  # noqa: E402
import gen_docs_reference as gen  # noqa: E402

REF = REPO / "docs" / "reference"


@pytest.mark.parametrize("page", sorted(gen.PAGES))
def test_reference_page_is_current(page: str) -> None:
    want = gen.render()[REF / page]
    assert (REF / page).read_text() == want, (
        f"docs/reference/{page} is stale: run `.venv/bin/python scripts/gen_docs_reference.py` "
        "and commit the page")


def _commands(p: argparse.ArgumentParser, path: tuple[str, ...] = ("flashml",)):
    yield path, p
    for a in p._actions:
        if isinstance(a, argparse._SubParsersAction):
            for name, sp in a.choices.items():
                yield from _commands(sp, path + (name,))


def test_every_cli_option_is_in_the_reference() -> None:
    """Each command has its section, and each option string appears in that section."""
    from flashml.cli import build_parser

    text = (REF / "cli.md").read_text()
    sections = re.split(r"\n(?=## `)", text)
    by_cmd = {s.split("`")[1]: s for s in sections[1:]}
    missing = []
    for path, p in _commands(build_parser()):
        name = " ".join(path)
        if name not in by_cmd:
            missing.append(name)
            continue
        for a in p._actions:
            if isinstance(a, argparse._HelpAction):  # -h/--help: on every command
                continue
            for opt in a.option_strings:
                if f"`{opt}`" not in by_cmd[name]:
                    missing.append(f"{name} {opt}")
    assert not missing, missing


def test_every_setting_is_in_the_reference() -> None:
    from flashml import settings

    text = (REF / "settings.md").read_text()
    rows = {line.split(" | ")[0]: line for line in text.splitlines() if line.startswith("| `")}
    missing = [o.name for o in settings._OPTIONS if f"| `{o.flag}`" not in rows
               or (o.dag_type and f"`{o.name}` ({o.dag_type})" not in rows[f"| `{o.flag}`"])]
    assert not missing, missing


def test_every_abi_function_is_in_the_reference() -> None:
    text = (REF / "abi.md").read_text()
    names = set()
    for h in (gen.POLICY_H, gen.FLASHRT_H):
        names |= set(re.findall(r"^[A-Za-z_][\w \*]*?\b((?:flashml|flashrt)_\w+)\s*\(",
                                h.read_text(), re.M))
    assert len(names) > 40
    missing = sorted(n for n in names if f"| `{n}` |" not in text)
    assert not missing, missing


def test_header_parser_reads_comments_and_groups() -> None:
    """The ABI page's declarations and comments come from the header as written."""
    h = ("/* a group: admit when score >= threshold. */\n"
         "double f_score(const double *x);\ndouble f_threshold(void);\n\n"
         "int f_other(int32_t *a,\n            int b);\n")
    got = gen.header_functions(h)
    assert [n for n, _, _ in got] == ["f_score", "f_threshold", "f_other"]
    assert got[0][2] == got[1][2] == "a group: admit when score >= threshold."
    assert got[2] == ("f_other", "int f_other(int32_t *a, int b);", "")


def test_every_manifest_field_is_in_the_reference() -> None:
    schema = json.loads(gen.SCHEMA.read_text())
    text = (REF / "manifest.md").read_text()
    missing = [k for k in schema["properties"] if f"| `{k}` |" not in text]
    assert not missing, missing


def test_readme_is_a_front_page_with_current_headlines() -> None:
    from render_headlines import section

    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= 200
    assert section() in readme, (
        "README.md's headline figures are not the committed results: run "
        "`.venv/bin/python bench/render_headlines.py --write`")
    for link in re.findall(r"\]\((docs/[^)#]+)", readme):
        assert (REPO / link).exists(), link


def test_every_docs_page_is_in_the_nav() -> None:
    nav = (REPO / "mkdocs.yml").read_text()
    pages = [p.relative_to(REPO / "docs").as_posix() for p in (REPO / "docs").rglob("*.md")]
    assert pages
    missing = [p for p in pages if p not in nav]
    assert not missing, missing


def test_no_development_labels_in_the_docs() -> None:
    """The manual speaks of the product: no "issue N" or "session N" labels."""
    bad = []
    for p in [REPO / "README.md", *(REPO / "docs").rglob("*.md")]:
        for i, line in enumerate(p.read_text().splitlines(), 1):
            if re.search(r"\b(?:issue|session) \d+", line):
                bad.append(f"{p.relative_to(REPO)}:{i}: {line.strip()[:80]}")
    assert not bad, bad


# --- the site checker ------------------------------------------------------------------------


def _site(tmp_path: Path, pages: dict[str, str]) -> Path:
    site = tmp_path / "site"
    for name, html in pages.items():
        f = site / name
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(html)
    (site / "search").mkdir(exist_ok=True)
    (site / "search" / "search_index.js").write_text("var __index = {}")
    return site


def test_checker_passes_a_self_contained_site(tmp_path: Path) -> None:
    site = _site(tmp_path, {
        "index.html": '<link rel="stylesheet" href="a.css"><h2 id="x">x</h2>'
                      '<a href="b/p.html#y">p</a> <a href="#x">x</a> '
                      '<a href="https://example.org/">elsewhere</a>',
        "a.css": "body { background: url(img.png) }", "img.png": "",
        "b/p.html": '<h2 id="y">y</h2><img src="../img.png"><a href="../index.html">home</a>'})
    assert check_docs_site.check_site(site) == []


def test_checker_finds_broken_links_anchors_and_external_assets(tmp_path: Path) -> None:
    site = _site(tmp_path, {
        "index.html": '<script src="https://unpkg.com/x/shim"></script>'
                      '<link rel="preconnect" href="https://fonts.gstatic.com">'
                      '<a href="gone.html">a</a> <a href="p.html#nope">b</a>',
        "p.html": '<style>@import "https://fonts.googleapis.com/css";</style>',
        "s.css": "@font-face { src: url(//cdn.example/f.woff2) }"})
    problems = "\n".join(check_docs_site.check_site(site))
    for what in ("loads https://unpkg.com/x/shim", "loads https://fonts.gstatic.com",
                 "broken link gone.html", "no anchor #nope",
                 "loads https://fonts.googleapis.com/css", "s.css: loads //cdn.example"):
        assert what in problems, (what, problems)


def _command_lines(text: str) -> list[str]:
    """The `flashml ...` lines of a page's code blocks (continuations joined, comments cut)."""
    out = []
    for block in re.findall(r"```[a-z]*\n(.*?)```", text, re.S):
        lines = block.split("\n")
        i = 0
        while i < len(lines):
            cmd = lines[i].strip().removeprefix("sudo ")
            while cmd.endswith("\\") and i + 1 < len(lines):
                i += 1
                cmd = cmd[:-1].rstrip() + " " + lines[i].strip()
            for part in re.sub(r"\s+#.*$", "", cmd).split(";"):
                if part.strip().startswith("flashml "):
                    out.append(part.strip())
            i += 1
    return out


def test_docs_command_lines_parse() -> None:
    """Every complete `flashml` command the manual shows (no placeholders such as FILE, DIR,
    `...`, `a|b` or `[...]`) is accepted by the CLI's parser as written."""
    import contextlib
    import io
    import shlex

    from flashml.cli import build_parser

    parser = build_parser()
    placeholder = re.compile(r"\.\.\.|\||\[|<|\bID\b|FILE|\bDIR\b|\bT\b|MBPS|\bN\b|\bK\b")
    checked, bad = 0, []
    for page in sorted((REPO / "docs").rglob("*.md")):
        if page.parent == REF and page.name in gen.PAGES:
            continue
        for cmd in _command_lines(page.read_text()):
            if placeholder.search(cmd):
                continue
            err = io.StringIO()
            try:
                with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                    parser.parse_args(shlex.split(cmd)[1:])
                checked += 1
            except SystemExit as e:  # --version and --help exit 0
                if e.code in (0, None):
                    checked += 1
                    continue
                bad.append(f"{page.relative_to(REPO)}: {cmd}: {err.getvalue().strip()[-200:]}")
    assert not bad, bad
    assert checked >= 20, checked
