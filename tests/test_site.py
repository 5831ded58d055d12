"""The built site in a real browser: every page of ``_build/html`` opened in headless Chromium.

Run after ``make book`` (CI: ``make check-site``). Each page is served over HTTP from 127.0.0.1 and
loaded in Debian's Chromium driven by Playwright (never ``playwright install``: the system browser
is used), and the tests assert, for EVERY page:

* the page loads with no uncaught JavaScript error;
* every ``<img>`` has loaded and decoded, with a nonzero natural width and height;
* every maths element Sphinx wrote (``.math``) was typeset by MathJax into an ``mjx-container``,
  with no TeX error (``mjx-merror``), and no raw TeX (``$$``, ``\\(``, ``\\begin{``, ``\\theta`` ...)
  is left in the visible text outside code;
* no request for a file of the site failed (HTTP 4xx/5xx in the server's log or a failed request
  in the browser), and no request went to any other host: the site must work offline;
* every link to a file of the site points at a file that exists.

And for the site as a whole: every notebook of ``_toc.yml`` has a page with at least one image
(its figure), and the method page's equations carry the paper's numbers (1)-(6), (14), (18), (19).

Without a built site (``_build/html/index.html``), Playwright or Chromium the tests are skipped
with the reason; ``ITERLIN_REQUIRE_SITE=1`` (set by ``make check-site`` and CI) makes those
failures instead. ``ITERLIN_CHROMIUM`` names another Chromium binary.
"""

from __future__ import annotations

import functools
import http.server
import os
import re
import shutil
import threading
import urllib.parse
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
SITE = ROOT / "_build" / "html"
REQUIRE = os.environ.get("ITERLIN_REQUIRE_SITE", "") not in ("", "0")
CHROMIUM = os.environ.get("ITERLIN_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
# The flags the machine's documentation gives for headless Chromium on a closed network.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
PAGE_TIMEOUT_MS = 60_000


def _unavailable(reason: str):
    if REQUIRE:
        pytest.fail(f"ITERLIN_REQUIRE_SITE is set but {reason}", pytrace=False)
    pytest.skip(reason)


# ------------------------------------------------------------------------------------------------
# Serving the site
# ------------------------------------------------------------------------------------------------


class _Handler(http.server.SimpleHTTPRequestHandler):
    """Serves the site; records (path, status) of every request; no console noise."""

    log: list[tuple[str, int]]

    def log_request(self, code="-", size="-"):
        try:
            status = int(code)
        except (TypeError, ValueError):
            status = 0
        self.server.requests.append((urllib.parse.urlsplit(self.path).path, status))

    def log_message(self, format, *args):  # noqa: A002 (the base class's name)
        pass


def _serve(directory: Path):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Handler, directory=str(directory)))
    server.requests = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return server, thread


# ------------------------------------------------------------------------------------------------
# One browser session over every page (the expensive part, done once per test module)
# ------------------------------------------------------------------------------------------------

# Runs in the page after `load`: force lazy images to load, wait for them, wait for MathJax's
# typesetting, then report what the tests check.
_INSPECT = r"""
async () => {
  const imgs = Array.from(document.images);
  for (const img of imgs) { img.loading = "eager"; }
  await Promise.all(imgs.map(img => img.complete ? null :
    new Promise(resolve => { img.addEventListener("load", resolve); img.addEventListener("error", resolve); })));
  await Promise.all(imgs.map(img => img.decode ? img.decode().catch(() => null) : null));
  const mathNodes = Array.from(document.querySelectorAll(".math"));
  let mathjax = "absent";
  if (window.MathJax && window.MathJax.startup && window.MathJax.startup.promise) {
    try { await window.MathJax.startup.promise; mathjax = "ok " + window.MathJax.version; }
    catch (e) { mathjax = "failed: " + e; }
  } else if (window.MathJax) {
    mathjax = "configured but not loaded";
  }
  // Visible text outside code, scripts and typeset maths, to look for raw TeX.
  const skip = new Set(["SCRIPT", "STYLE", "PRE", "CODE", "TEXTAREA", "MJX-CONTAINER", "NOSCRIPT"]);
  const texts = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT, {
    acceptNode(node) {
      for (let el = node.parentElement; el; el = el.parentElement) {
        if (skip.has(el.tagName) || el.classList.contains("highlight")) return NodeFilter.FILTER_REJECT;
      }
      return NodeFilter.FILTER_ACCEPT;
    }
  });
  while (walker.nextNode()) texts.push(walker.currentNode.nodeValue);
  return {
    images: imgs.map(img => ({src: img.currentSrc || img.src, complete: img.complete,
                              w: img.naturalWidth, h: img.naturalHeight})),
    math: mathNodes.length,
    mathTypeset: mathNodes.filter(n => n.querySelector("mjx-container")).length,
    mjx: document.querySelectorAll("mjx-container").length,
    mjxDisplay: document.querySelectorAll('mjx-container[display="true"]').length,
    merrors: Array.from(document.querySelectorAll("mjx-merror")).map(e => e.getAttribute("data-mjx-error") || e.textContent),
    mathText: mathNodes.map(n => n.textContent).join("\n"),
    mathjax: mathjax,
    text: texts.join(" "),
    links: Array.from(document.querySelectorAll("a[href]")).map(a => a.href),
  };
}
"""

_RAW_TEX = re.compile(r"\$\$|\\\(|\\\)|\\\[|\\\]|\\begin\{|\\end\{|\\[A-Za-z]{2,}")


def _wait_quiet(page, pending: set, quiet_ms: int = 500, timeout_ms: int = PAGE_TIMEOUT_MS) -> None:
    """Wait until no request of the page has been in flight for ``quiet_ms`` (late fonts, images)."""
    quiet = waited = 0
    while quiet < quiet_ms:
        if waited > timeout_ms:
            pytest.fail(f"{page.url}: requests still in flight after {timeout_ms} ms: {[r.url for r in pending]}")
        page.wait_for_timeout(100)
        waited += 100
        quiet = quiet + 100 if not pending else 0


_REFRESH = re.compile(r'<meta\s+http-equiv="refresh"\s+content="\d+;\s*url=([^"]+)"', re.I)


def _redirect_target(path: Path) -> str | None:
    """The URL of a meta-refresh redirect page (jupyter-book's root index.html), else None."""
    m = _REFRESH.search(path.read_text(encoding="utf-8", errors="replace")[:2000])
    return m.group(1) if m else None


@pytest.fixture(scope="module")
def site() -> dict:
    """Every page loaded once in Chromium: ``{"pages": {relpath: report}, "requests": [...], "origin"}``."""
    if not (SITE / "index.html").is_file():
        _unavailable(f"no built site at {SITE}/index.html: run `make book` first")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("Playwright is not installed (pip install -e '.[site]')")
    if not (os.path.isfile(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
        _unavailable(f"no Chromium at {CHROMIUM} (apt-get install chromium, or set ITERLIN_CHROMIUM)")

    server, thread = _serve(SITE)
    host, port = server.server_address[:2]
    origin = f"http://{host}:{port}"
    # Every page; _static/ holds theme template fragments (*.html macros), not pages.
    paths = sorted(rel for rel in (p.relative_to(SITE).as_posix() for p in SITE.rglob("*.html")) if not rel.startswith("_static/"))
    pages: dict[str, dict] = {}
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
            try:
                context = browser.new_context()
                for rel in paths:
                    page = context.new_page()
                    events = {"errors": [], "failed": [], "bad": [], "external": []}
                    pending: set = set()

                    def on_request(req, ev=events, pending=pending):
                        pending.add(req)
                        if not req.url.startswith(origin) and not req.url.startswith(("data:", "blob:", "about:")):
                            ev["external"].append(req.url)

                    def on_failed(req, ev=events, pending=pending):
                        pending.discard(req)
                        ev["failed"].append(f"{req.url} ({req.failure})")

                    page.on("pageerror", lambda exc, ev=events: ev["errors"].append(str(exc)))
                    page.on("request", on_request)
                    page.on("requestfinished", lambda req, pending=pending: pending.discard(req))
                    page.on("requestfailed", on_failed)
                    page.on("response", lambda r, ev=events: ev["bad"].append(f"{r.url} -> {r.status}") if r.status >= 400 else None)
                    redirect = _redirect_target(SITE / rel)
                    page.goto(f"{origin}/{rel}", wait_until="load", timeout=PAGE_TIMEOUT_MS)
                    if redirect is not None:
                        # e.g. the root index.html of jupyter-book: follow it; its target is a page
                        # of its own in this loop.
                        target = urllib.parse.urljoin(f"{origin}/{rel}", redirect)
                        page.wait_for_url(target, timeout=PAGE_TIMEOUT_MS)
                        report = {"images": [], "math": 0, "mathTypeset": 0, "mjx": 0, "mjxDisplay": 0,
                                  "merrors": [], "mathText": "", "mathjax": "absent", "text": "",
                                  "links": [target], "redirect": target}
                    else:
                        report = page.evaluate(_INSPECT)
                    _wait_quiet(page, pending)
                    report.update(events)
                    pages[rel] = report
                    page.close()
            finally:
                browser.close()
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
    return {"pages": pages, "requests": list(server.requests), "origin": origin}


def _fail_if(problems: list[str], what: str):
    if problems:
        shown = "\n  ".join(problems[:40])
        more = f"\n  ... and {len(problems) - 40} more" if len(problems) > 40 else ""
        pytest.fail(f"{len(problems)} {what}:\n  {shown}{more}", pytrace=False)


# ------------------------------------------------------------------------------------------------
# Every page
# ------------------------------------------------------------------------------------------------


def test_site_has_the_book_pages(site):
    pages = site["pages"]
    assert "book/intro.html" in pages and "book/method.html" in pages, sorted(pages)
    assert len(pages) >= 5


def test_pages_load_without_javascript_errors(site):
    _fail_if([f"{p}: {e}" for p, r in site["pages"].items() for e in r["errors"]], "uncaught JavaScript errors")


def test_every_image_loaded_with_a_size(site):
    bad = [
        f"{p}: {im['src']} (complete={im['complete']}, {im['w']}x{im['h']})"
        for p, r in site["pages"].items()
        for im in r["images"]
        if not (im["complete"] and im["w"] > 0 and im["h"] > 0)
    ]
    _fail_if(bad, "images that did not load")


def test_maths_is_typeset_by_the_local_mathjax(site):
    problems = []
    for p, r in site["pages"].items():
        if r["math"] == 0:
            continue
        if not r["mathjax"].startswith("ok"):
            problems.append(f"{p}: {r['math']} maths elements but MathJax {r['mathjax']}")
        elif r["mathTypeset"] != r["math"]:
            problems.append(f"{p}: only {r['mathTypeset']} of {r['math']} maths elements typeset")
        problems += [f"{p}: TeX error: {e}" for e in r["merrors"]]
    _fail_if(problems, "pages with maths not rendered")


def test_no_raw_tex_left_in_the_text(site):
    problems = []
    for p, r in site["pages"].items():
        for m in _RAW_TEX.finditer(r["text"]):
            a, b = max(m.start() - 40, 0), m.end() + 40
            problems.append(f"{p}: {m.group()!r} in ...{r['text'][a:b]!r}...")
    _fail_if(problems, "raw TeX fragments outside code")


def test_no_local_file_is_missing(site):
    problems = [f"{p}: {x}" for p, r in site["pages"].items() for x in r["bad"] + r["failed"]]
    # The server's own log also sees requests the page API does not report (e.g. the favicon).
    problems += [f"server: {path} -> {status}" for path, status in site["requests"] if status >= 400 and path != "/favicon.ico"]
    _fail_if(problems, "failed requests for files of the site")


def test_no_request_leaves_the_machine(site):
    _fail_if([f"{p}: {u}" for p, r in site["pages"].items() for u in r["external"]], "requests to other hosts")


def test_local_links_point_at_existing_files(site):
    origin = site["origin"]
    missing = set()
    for p, r in site["pages"].items():
        for href in r["links"]:
            if not href.startswith(origin + "/"):
                continue
            path = urllib.parse.unquote(urllib.parse.urlsplit(href).path).lstrip("/")
            target = SITE / path
            if target.is_dir():
                target = target / "index.html"
            if not target.exists():
                missing.add(f"{p}: {href[len(origin):]}")
    _fail_if(sorted(missing), "links to files that do not exist")


# ------------------------------------------------------------------------------------------------
# The book's content
# ------------------------------------------------------------------------------------------------


def _toc_notebooks() -> list[str]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    found = []

    def walk(entries):
        for e in entries or []:
            if e.get("file", "").startswith("book/executed/"):
                found.append(e["file"])
            for key in ("parts", "chapters", "sections"):
                walk(e.get(key))

    walk(toc.get("parts"))
    walk(toc.get("chapters"))
    return found


def test_every_notebook_page_shows_its_figure(site):
    notebooks = _toc_notebooks()
    assert notebooks, "_toc.yml lists no notebooks"
    problems = []
    for nb in notebooks:
        report = site["pages"].get(f"{nb}.html")
        if report is None:
            problems.append(f"{nb}.html: no such page")
        elif not any(im["w"] > 0 for im in report["images"]):
            problems.append(f"{nb}.html: no image (every figure notebook plots its figure)")
    _fail_if(problems, "notebook pages without their figure")


def test_method_page_numbers_equations_as_the_paper(site):
    report = site["pages"]["book/method.html"]
    assert report["mathjax"].startswith("ok"), report["mathjax"]
    assert report["mjxDisplay"] >= 10, report["mjxDisplay"]
    # (1)-(6) are Sphinx's numbers of the labelled equations, (14), (18), (19) MathJax's \tag{}s.
    for n in (1, 2, 3, 4, 5, 6, 14, 18, 19):
        assert f"({n})" in report["text"] + report["mathText"], f"equation ({n}) not numbered on the method page"
