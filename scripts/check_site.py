"""Browser check of the built site (run `make site` first; `make browser-check` does both).

Serves site/ on 127.0.0.1, opens a page with math, code and a figure in headless Chromium
(Debian's /usr/bin/chromium, driven by Playwright), and asserts that
  - every math span was typeset by MathJax (SVG output present, no raw TeX left),
  - the code blocks show their entangled titles (block name or target file), visibly,
  - the figures loaded,
  - no table overflows the text column at 1280 px (a wide table would scroll, clipped),
  - the page made no request off this machine (the site must work offline).
Saves screenshots under build/. Exits non-zero on any failure.
"""

import argparse
import functools
import http.server
import sys
import threading
from pathlib import Path
from urllib.parse import urlparse

from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parents[1]
VIEWPORT = {"width": 1280, "height": 1000}  # a common laptop width; tables must fit it
CHROMIUM_FLAGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]


def serve(directory: Path) -> tuple[http.server.ThreadingHTTPServer, str]:
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    handler = functools.partial(Quiet, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def check_page(browser, base: str, path: str, shot: Path, anchor: str, *, titles: bool = True,
               figures: bool = False, math: bool = True) -> list[str]:
    """Check one page; it must show named code blocks (`titles`), at least one image
    (`figures`), typeset math (`math`); never raw TeX, broken images or off-machine requests."""
    problems: list[str] = []
    page = browser.new_page(viewport=VIEWPORT)
    offsite: list[str] = []
    page.on("request", lambda r: offsite.append(r.url)
            if urlparse(r.url).hostname not in ("127.0.0.1", None) and
            not r.url.startswith("data:") else None)
    response = page.goto(f"{base}/{path}", wait_until="load")
    if response is None or response.status != 200:
        return [f"{path}: HTTP {response and response.status}"]
    page.wait_for_function("window.MathJax && MathJax.startup && MathJax.startup.promise",
                           timeout=30000)
    page.evaluate("MathJax.startup.promise")

    spans = page.locator(".arithmatex").count()
    typeset = page.locator(".arithmatex > mjx-container:has(svg)").count()
    raw = page.evaluate("""() => [...document.querySelectorAll('.arithmatex')]
        .filter(e => !e.querySelector('mjx-container')).map(e => e.textContent.slice(0, 60))""")
    if math and spans == 0:
        problems.append(f"{path}: no math on the page")
    if typeset < spans or raw:
        problems.append(f"{path}: {len(raw)} of {spans} math spans not typeset, e.g. {raw[:3]}")
    leftover = page.evaluate(r"""() => {
        const parts = [...document.querySelectorAll('.md-content, .md-nav')].map(n => {
            const c = n.cloneNode(true);
            c.querySelectorAll('pre, code, mjx-container, script').forEach(e => e.remove());
            return c.textContent; });
        return parts.join(' ').match(/\\[A-Za-z]+|\\[()\[\]]/g) || []; }""")
    if leftover:
        problems.append(f"{path}: raw TeX left in the text or the navigation: {leftover[:5]}")

    titles = page.evaluate("""() => [...document.querySelectorAll('.highlight .filename')]
        .filter(e => { const r = e.getBoundingClientRect(); const s = getComputedStyle(e);
                       return r.width > 0 && r.height > 0 && s.visibility !== 'hidden'
                              && s.display !== 'none' && parseFloat(s.opacity) > 0; })
        .map(e => e.textContent.trim())""")
    named = [t for t in titles if t.startswith("#") or t.startswith("file:")]
    if titles and not named:
        problems.append(f"{path}: no visible code block titles (got {titles[:3]})")

    broken = page.evaluate("""() => [...document.querySelectorAll('.md-content img')]
        .filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.src)""")
    if broken:
        problems.append(f"{path}: figures that did not load: {broken}")
    if figures and page.locator(".md-content img").count() == 0:
        problems.append(f"{path}: no figure on the page")
    problems += table_overflow(page, path)
    if offsite:
        problems.append(f"{path}: requests off this machine: {offsite[:5]}")

    page.locator(anchor).first.scroll_into_view_if_needed()
    page.evaluate("window.scrollBy(0, -80)")
    shot.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(shot))
    print(f"{path}: {typeset}/{spans} math spans typeset, {len(named)} titled code blocks "
          f"(e.g. {named[0] if named else '-'}), {page.locator('.md-content img').count()} "
          f"figures, {page.locator('.md-content table').count()} tables; screenshot "
          f"{shot.relative_to(ROOT)}")
    page.close()
    return problems


def table_overflow(page, path: str) -> list[str]:
    """Tables wider than the text column (they would scroll, clipped) on a loaded page."""
    overflow = page.evaluate("""() => {
        const column = document.querySelector('.md-content__inner').getBoundingClientRect();
        return [...document.querySelectorAll('.md-content table')].map(t => {
            const wrap = t.closest('.md-typeset__scrollwrap') || t.parentElement;
            const r = t.getBoundingClientRect();
            const head = (t.querySelector('th') || t).textContent.trim().slice(0, 40);
            return {head, width: Math.round(r.width), column: Math.round(column.width),
                    scrolls: wrap.scrollWidth > wrap.clientWidth + 1
                             || t.scrollWidth > t.clientWidth + 1,
                    past: r.right > column.right + 1 || r.left < column.left - 1};
        }).filter(o => o.scrolls || o.past); }""")
    return [f"{path}: table starting {o['head']!r} overflows its column at {VIEWPORT['width']} px "
            f"({o['width']} px wide, column {o['column']} px)" for o in overflow]


def check_tables(browser, base: str, path: str) -> list[str]:
    """Only the table check, for the pages check_page does not cover."""
    page = browser.new_page(viewport=VIEWPORT)
    response = page.goto(f"{base}/{path}", wait_until="load")
    if response is None or response.status != 200:
        return [f"{path}: HTTP {response and response.status}"]
    problems = table_overflow(page, path)
    print(f"{path}: {page.locator('.md-content table').count()} tables fit the column"
          if not problems else f"{path}: {len(problems)} tables overflow")
    page.close()
    return problems


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--site", type=Path, default=ROOT / "site")
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    args = parser.parse_args()
    if not (args.site / "index.html").exists():
        sys.exit(f"no built site at {args.site}: run `make site` first")
    server, base = serve(args.site)
    problems = []
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=args.chromium, args=CHROMIUM_FLAGS)
            checked = ["theory/00-motivation/", "foundations/", "theory/01-online-softmax/",
                       "lab/02-flash-triton/"]
            problems += check_page(browser, base, "theory/00-motivation/",
                                   ROOT / "build/screenshot-theory-00.png", "#the-roofline",
                                   figures=True)
            problems += check_page(browser, base, "foundations/",
                                   ROOT / "build/screenshot-foundations.png", "#the-reference")
            problems += check_page(browser, base, "theory/01-online-softmax/",
                                   ROOT / "build/screenshot-theory-01.png", "img",
                                   titles=False, figures=True)
            problems += check_page(browser, base, "lab/02-flash-triton/",
                                   ROOT / "build/screenshot-lab-02.png", "#the-benchmark",
                                   figures=True)
            for page in ("theory/02-flash-attention/", "theory/03-paged-and-sliding/",
                         "theory/04-gqa-mqa-mla/", "gpu-primer/",
                         "lab/00-online-softmax/", "results/", ""):
                name = page.strip("/").replace("/", "-") or "index"
                problems += check_page(browser, base, page, ROOT / f"build/screenshot-{name}.png",
                                       "h1", titles=page.startswith("lab/"),
                                       figures=page not in ("lab/00-online-softmax/", "",
                                                            "theory/03-paged-and-sliding/",
                                                            "gpu-primer/"),
                                       math=page != "")
                checked.append(page)
            for html in sorted(args.site.glob("**/index.html")):  # every other page: tables only
                page = html.parent.relative_to(args.site).as_posix()
                page = "" if page == "." else page + "/"
                if page not in checked and not page.startswith(("assets/", "generated/")):
                    problems += check_tables(browser, base, page)
            browser.close()
    finally:
        server.shutdown()
    if problems:
        print("browser check FAILED:\n  " + "\n  ".join(problems))
        sys.exit(1)
    print("browser check: OK")


if __name__ == "__main__":
    main()
