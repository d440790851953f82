"""Great Expectations Data Docs that are complete and styled offline.

Great Expectations writes pages that load Bootstrap, jQuery, bootstrap-table, Font Awesome
and Vega from CDNs, and fills the index's tables (the validations, the suites) in the
browser with bootstrap-table: offline, or on a machine that cannot reach the CDNs, the index
lists nothing. `make_offline(site)` rewrites every page of a Data Docs site in place:

- the index's tables are rendered as static HTML rows from the same data (the status, run
  time, run name (the trace), asset, batch and suite of every validation, each row linking
  to its page; newest first);
- every `<script>` and every stylesheet or script from another host is removed, the logo
  image (a beacon with the context's id) and CSS backgrounds from the vendor's web assets
  point at the site's own `static/images/logo-long.png` or nothing (so a page makes no
  network request and no script error), and `static/styles/flashml_offline.css`
  (written beside Great Expectations' own local stylesheet) gives the pages the layout,
  tables, badges and status icons the CDN stylesheets gave.

It is idempotent: a page already rewritten is left as it is (Great Expectations rewrites
the index and the new validation's page on every build; `validate_table` calls this after
each build).
"""

from __future__ import annotations

import ast
import html
import re
from pathlib import Path
from typing import Any

from flashml.files import atomic_path

CSS_NAME = "flashml_offline.css"
MARK = "<!-- flashml: offline -->"

CSS = """/* flashml: what the CDN stylesheets (Bootstrap 4, Font Awesome, bootstrap-table) gave the
   Great Expectations Data Docs, in the little of it the pages use. */
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 0;
       color: #212529; background: #fff; line-height: 1.45; }
a { color: #0b66c3; text-decoration: none; } a:hover { text-decoration: underline; }
.container, .container-fluid { padding: 0 1rem; }
.row { display: flex; flex-wrap: wrap; margin: 0 -0.5rem; }
.row > [class*="col"] { padding: 0 0.5rem; box-sizing: border-box; flex: 1 1 0; min-width: 0; }
.col-md-2, .col-lg-2 { flex: 0 0 18% !important; }
.col-md-10, .col-lg-10 { flex: 0 0 80% !important; }
nav, .navbar { display: flex; align-items: center; gap: 1rem; padding: 0.5rem 1rem;
               background: #f8f9fa; border-bottom: 1px solid #dee2e6; }
.navbar-brand img { height: 28px; }
.card { border: 1px solid #dee2e6; border-radius: 6px; margin: 0 0 1rem; background: #fff; }
.card-header { padding: 0.5rem 0.9rem; background: #f7f7f9; border-bottom: 1px solid #dee2e6; }
.card-body { padding: 0.6rem 0.9rem; }
.list-group { list-style: none; padding: 0; margin: 0; }
.list-group-item { padding: 0.35rem 0.6rem; border-bottom: 1px solid #eee; display: block; }
table { border-collapse: collapse; width: 100%; margin: 0.4rem 0 1rem; font-size: 0.92rem; }
th, td { border: 1px solid #dee2e6; padding: 0.3rem 0.5rem; text-align: left;
         vertical-align: top; }
thead th { background: #f1f3f5; }
tbody tr:nth-child(odd) { background: #fafbfc; }
tr.flashml-row:hover { background: #eef5ff; }
.text-success { color: #198754; } .text-danger { color: #c82333; }
.text-warning { color: #b8860b; } .text-muted { color: #6c757d; }
.badge { display: inline-block; padding: 0.1rem 0.45rem; border-radius: 0.6rem;
         font-size: 0.8rem; background: #e9ecef; }
.badge-success { background: #d1e7dd; } .badge-danger { background: #f8d7da; }
.btn { display: inline-block; padding: 0.15rem 0.5rem; border: 1px solid #ccc;
       border-radius: 4px; background: #f8f9fa; font-size: 0.85rem; }
.fas, .fa, .far { font-style: normal; }
.fa-check-circle::before, .fa-check::before { content: "\\2714"; }
.fa-times::before, .fa-times-circle::before { content: "\\2718"; }
.fa-exclamation-triangle::before { content: "\\26A0"; }
.fa-info-circle::before, .fa-question-circle::before { content: "\\2139"; }
.fa-home::before { content: "\\2302"; } .fa-angle-double-left::before { content: "\\00AB"; }
.invisible, .d-none, #ge-cta-footer { display: none !important; }
.cooltip .top, .cooltip .bottom { display: none; }
.cooltip:hover .top, .cooltip:hover .bottom { display: block; position: absolute;
  background: #333; color: #fff; padding: 0.4rem; border-radius: 4px; white-space: pre;
  z-index: 10; font-size: 0.8rem; }
pre, code { background: #f6f8fa; padding: 0.1rem 0.3rem; border-radius: 3px; }
.flashml-offline-note { font-size: 0.8rem; color: #6c757d; padding: 0.3rem 1rem; }
"""

_EXTERNAL_LINK = re.compile(r"<link\b[^>]*\bhref\s*=\s*[\"']?(?:https?:)?//[^>]*>", re.I)
_EXTERNAL_SCRIPT = re.compile(
    r"<script\b[^>]*\bsrc\s*=\s*[\"']?(?:https?:)?//[^>]*>\s*</script>", re.I)
_SCRIPT = re.compile(r"<script\b[^>]*>.*?</script>", re.I | re.S)
_REMOTE_IMG = re.compile(r"(<img\b[^>]*\bsrc\s*=\s*)([\"'])(?:https?:)?//[^\"']*\2", re.I)
_REMOTE_URL = re.compile(r"url\(\s*([\"']?)(?:https?:)?//[^)]*\)", re.I)
_TABLE_CALL = re.compile(r"\$\('#([\w-]+)'\)\.bootstrapTable\(")
#: Cells Great Expectations fills with its own markup (icons, links); the rest is text.
_HTML_CELLS = {"validation_success", "batch_identifier", "expectation_suite_name"}


def _table_data(script: str) -> tuple[str, list[dict[str, Any]], list[dict[str, Any]]] | None:
    """(table id, columns, rows) of a `$('#id').bootstrapTable({columns: [...], data:
    [...], ...})` call (Great Expectations writes them as Python literals), else None."""
    m = _TABLE_CALL.search(script)
    if m is None:
        return None
    try:
        c0 = script.index("columns: ", m.end()) + len("columns: ")
        d0 = script.index(",\n", c0)
        data_at = script.index("data: ", d0) + len("data: ")
        end = script.index(",\n", data_at)
        while True:  # the data literal ends at the first ",\n" after which it parses
            try:
                rows = ast.literal_eval(script[data_at:end])
                break
            except (SyntaxError, ValueError):
                end = script.index(",\n", end + 1)
        columns = ast.literal_eval(script[c0:d0])
    except (ValueError, SyntaxError):
        return None
    if not (isinstance(columns, list) and isinstance(rows, list)):
        return None
    return m.group(1), columns, rows


def _static_rows(columns: list[dict[str, Any]], rows: list[dict[str, Any]]) -> str:
    """The table's rows as HTML: newest run first (as the index sorts them), each linking to
    its page."""
    rows = sorted(rows, key=lambda r: -float(r.get("_run_time_sort") or 0))
    head = "".join(f"<th>{html.escape(str(c.get('title', c.get('field', ''))))}</th>"
                   for c in columns)
    body = []
    for r in rows:
        link = html.escape(str(r.get("_table_row_link_path", "")), quote=True)
        cells = []
        for i, c in enumerate(columns):
            field = str(c.get("field", ""))
            value = r.get(field, "")
            text = str(value) if field in _HTML_CELLS else html.escape(str(value))
            if i == 0 and field == "validation_success":
                text += f" {html.escape(str(r.get('_validation_success_text', '')))}"
            if link and field in ("run_name", "run_time") or (link and len(columns) == 1):
                text = f'<a href="{link}">{text}</a>'
            cells.append(f"<td>{text}</td>")
        body.append(f'<tr class="flashml-row">{"".join(cells)}</tr>')
    return f"<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody>"


def render_page(page: str, css_href: str) -> str:
    """One Data Docs page made static and offline (the module docstring)."""
    if MARK in page:
        return page
    tables = {}
    for script in _SCRIPT.findall(page):
        found = _table_data(script)
        if found is not None:
            tables[found[0]] = _static_rows(found[1], found[2])
    for tid, rows in tables.items():
        page = re.sub(r"(<table\b[^>]*\bid=\"" + re.escape(tid) + r"\"[^>]*>)\s*</table>",
                      lambda m, rows=rows: m.group(1) + rows + "</table>", page, count=1)
    page = _EXTERNAL_SCRIPT.sub("", page)
    page = _EXTERNAL_LINK.sub("", page)
    page = _SCRIPT.sub("", page)
    # the logo (with a tracking query) and CSS backgrounds from the vendor's web assets
    logo = css_href.replace(f"styles/{CSS_NAME}", "images/logo-long.png")
    page = _REMOTE_IMG.sub(lambda m: f'{m.group(1)}"{logo}"', page)
    page = _REMOTE_URL.sub("none", page)
    # the toolbars' buttons (filters, search) worked through the scripts
    page = re.sub(r"<button\b[^>]*onclick=[^>]*>.*?</button>", "", page, flags=re.S)
    link = f'<link rel="stylesheet" type="text/css" href="{css_href}">'
    return page.replace("</head>", f"{MARK}\n{link}\n</head>", 1)


def make_offline(site: Path) -> int:
    """Rewrite every page of the Data Docs site `site` (its `index.html`'s folder) to be
    static and offline; returns the number of pages rewritten."""
    site = Path(site)
    styles = site / "static" / "styles"
    styles.mkdir(parents=True, exist_ok=True)
    css = styles / CSS_NAME
    if not css.is_file() or css.read_text() != CSS:
        with atomic_path(css) as tmp:
            tmp.write_text(CSS)
    done = 0
    for sheet in styles.glob("*.css"):  # Great Expectations' own: a logo from the web
        text = sheet.read_text(encoding="utf-8")
        if _REMOTE_URL.search(text):
            with atomic_path(sheet) as tmp:
                tmp.write_text(_REMOTE_URL.sub("none", text), encoding="utf-8")
    for p in sorted(site.rglob("*.html")):
        text = p.read_text(encoding="utf-8")
        depth = len(p.relative_to(site).parts) - 1
        new = render_page(text, "../" * depth + f"static/styles/{CSS_NAME}")
        if new != text:
            with atomic_path(p) as tmp:
                tmp.write_text(new, encoding="utf-8")
            done += 1
    return done
