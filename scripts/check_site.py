"""Browser check of the built site (run `make site` first; `make browser-check` does both).

Serves site/ on 127.0.0.1, opens every page in headless Chromium (Debian's /usr/bin/chromium,
driven by Playwright) at 1280 px, and asserts on every page that
  - the vendored faces (Roboto, Roboto Mono, Noto Sans Math for arrows; `make assets`) rendered
    the text: in document.fonts every face the page used is 'loaded', none failed, and each
    comes from an @font-face rule whose woff2 the page fetched from this server (performance
    resource entries) under assets/vendor/fonts/; document.fonts.check() holds for the text face
    (and the code face where there is code); and Chromium's own record of the fonts that drew
    the content's text (CSS.getPlatformFontsForNode) names only those web fonts, no installed one,
  - no table is wider than the text column or scrolls at 1280 px, and none is hidden,
  - the page made no request off this machine (the site must work offline),
  - the language switch (mkdocs-static-i18n, issue 29): the page is in its edition's language
    (English at the root, Spanish under es/), the header's switch offers both, and picking the
    other language there, as a reader does, lands on this page's counterpart in that language,
    and every anchor of an English page is on its Spanish counterpart too (under the first font
    set only: it does not depend on fonts), and search finds a word of each edition in it;
and on the pages with math, code and figures (check_page) also that
  - every math span was typeset by MathJax (SVG output present, no raw TeX left),
  - the code blocks show their entangled titles (block name or target file), visibly,
  - the figures loaded.
It does all this once per font set: by default under two (DejaVu only, then Liberation only, each
through a fontconfig file that lists one directory), when both are installed; the layout (every
table's width, every page's height) must then be the same under both, to the pixel. The server
answers every font request late (LATE_FONTS_S), so a layout measured before the faces arrive shows
up as a difference every run rather than on a slow machine only.
Saves screenshots under build/ (of the first font set). Exits non-zero on any failure.
"""

import argparse
import functools
import http.server
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import urlparse

from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parents[1]
VIEWPORT = {"width": 1280, "height": 1000}  # a common laptop width; tables must fit it
CHROMIUM_FLAGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
# The faces vendored by `make assets` (docs/assets/vendor/fonts/fonts.css). Chromium names a face
# by its own family name, so Roboto's 300 weight is "Roboto Light".
VENDORED = ("Roboto", "Roboto Mono", "Noto Sans Math")
FONT_DIR = "/assets/vendor/fonts/"
# Font sets to render under: one directory of installed fonts each (Debian's fonts-dejavu-core,
# fonts-liberation), through a fontconfig file naming only it. "system": the machine's own setup.
# Each: its directory, and the family prefix its fonts share.
FONT_SETS = {"dejavu": ("/usr/share/fonts/truetype/dejavu", "DejaVu"),
             "liberation": ("/usr/share/fonts/truetype/liberation", "Liberation")}


# Every font file is served this late, so that whatever reads text metrics before the faces arrive
# (MathJax scaling its math to the surrounding x-height, once) reads the installed fallback's, and
# the layout comparison between font sets catches it every run, not only on a slow machine.
LATE_FONTS_S = 0.3


def serve(directory: Path) -> tuple[http.server.ThreadingHTTPServer, str]:
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            if FONT_DIR in self.path:
                time.sleep(LATE_FONTS_S)
            super().do_GET()

    handler = functools.partial(Quiet, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


class Run:
    """One browser under one font set; what it saw of each page's layout."""

    def __init__(self, browser, base: str, font_set: str, *, screenshots: bool,
                 block_fonts: bool, switch: bool):
        self.browser, self.base, self.font_set = browser, base, font_set
        self.screenshots, self.block_fonts, self.switch = screenshots, block_fonts, switch
        self.layout: dict[str, dict] = {}
        self.fallback = ""


def open_page(run: Run, path: str):
    """The page, loaded, its math typeset and its fonts settled; and the off-machine requests."""
    page = run.browser.new_page(viewport=VIEWPORT)
    offsite: list[str] = []
    page.on("request", lambda r: offsite.append(r.url)
            if urlparse(r.url).hostname not in ("127.0.0.1", None) and
            not r.url.startswith("data:") else None)
    if run.block_fonts:  # --block-fonts: what the check says when the vendored faces are missing
        page.route(f"**{FONT_DIR}files/**", lambda route: route.abort())
    response = page.goto(f"{run.base}/{path}", wait_until="load")
    if response is None or response.status != 200:
        page.close()
        return None, offsite, [f"{path}: HTTP {response and response.status}"]
    page.wait_for_function("window.MathJax && MathJax.startup && MathJax.startup.promise",
                           timeout=30000)
    page.evaluate("MathJax.startup.promise")
    page.evaluate("document.fonts.ready.then(() => true)")  # swap faces in before measuring
    return page, offsite, []


FONT_FACES_JS = r"""() => {
    const unq = s => s.trim().replace(/^["']|["']$/g, '');
    const weight = w => ({normal: '400', bold: '700'})[w] || String(w);
    const ranges = r => (r || 'U+0-10FFFF').split(',').map(x => x.trim().replace(/^U\+/i, ''))
        .filter(Boolean).map(x => x.split('-').map(h => parseInt(h, 16)))
        .map(([a, b]) => [a, b === undefined ? a : b]).sort((x, y) => x[0] - y[0] || x[1] - y[1])
        .map(x => x.join('-')).join(',');
    const key = (family, w, style, range) =>
        [unq(family), weight(w), style, ranges(range)].join('|');
    const source = {};  // each @font-face rule's first url(), absolute
    for (const sheet of document.styleSheets) {
        let rules; try { rules = sheet.cssRules; } catch (e) { continue; }
        for (const r of rules) if (r instanceof CSSFontFaceRule) {
            const st = r.style, m = st.getPropertyValue('src').match(/url\(["']?([^"')]+)["']?\)/);
            source[key(st.getPropertyValue('font-family'), st.getPropertyValue('font-weight'),
                       st.getPropertyValue('font-style'), st.getPropertyValue('unicode-range'))] =
                m ? new URL(m[1], sheet.href || location.href).href : null;
        }
    }
    const faces = [...document.fonts].map(f => ({
        family: unq(f.family), weight: weight(f.weight), style: f.style, status: f.status,
        url: source[key(f.family, f.weight, f.style, f.unicodeRange)] || null}));
    const fetched = performance.getEntriesByType('resource')
        .filter(e => /\.(woff2?|ttf|otf)$/i.test(new URL(e.name).pathname)).map(e => e.name);
    return {faces, fetched, origin: location.origin,
            text: document.fonts.check('16px "Roboto"')
                  && document.fonts.check('bold 16px "Roboto"'),
            code: document.fonts.check('16px "Roboto Mono"'),
            hasCode: document.querySelector('.md-content code') !== null};
}"""

# The page's text, as what decides the font it is drawn with: for each style (font family,
# weight, style, case) in use, every character that visible text in that style holds (bar
# MathJax's, whose SVG needs no font). Each such set is appended to the page in a probe span of
# that style, one span per style or one per character (`each`), for the platform-font check to
# read: far cheaper than asking for each of the thousands of text elements, and it misses no
# character.
PROBE_TEXT_JS = r"""(each) => {
    const styles = new Map();
    const walk = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
    for (let n = walk.nextNode(); n; n = walk.nextNode()) {
        const e = n.parentElement;
        if (!e || !n.textContent.trim() || e.closest('mjx-container, svg, script, style, noscript')
            || e.getClientRects().length === 0) continue;
        const cs = getComputedStyle(e);
        const key = [cs.fontFamily, cs.fontWeight, cs.fontStyle, cs.textTransform].join('|');
        if (!styles.has(key)) styles.set(key, new Map());
        const chars = styles.get(key);  // each character, and the first text that holds it
        for (const c of n.textContent) if (c.trim() && !chars.has(c))
            chars.set(c, n.textContent.trim().slice(0, 40));
    }
    document.querySelectorAll('[data-font-probe]').forEach(e => e.remove());
    const probes = [];
    for (const [key, chars] of styles) {
        const [family, weight, style, transform] = key.split('|');
        for (const text of each ? [...chars.keys()] : [[...chars.keys()].join('')]) {
            const span = document.createElement('span');
            span.textContent = text;
            span.setAttribute('data-font-probe', probes.length);
            Object.assign(span.style, {fontFamily: family, fontWeight: weight, fontStyle: style,
                                       textTransform: transform, whiteSpace: 'pre',
                                       position: 'absolute', left: '-99999px', top: '0'});
            document.body.appendChild(span);
            probes.push({family: family.split(',')[0].replace(/"/g, ''), weight, style, text,
                         sample: chars.get(text) || ''});
        }
    }
    return probes; }"""


def platform_fonts(page, selector: str) -> list[list[dict]]:
    """For each element matching `selector`, the fonts Chromium drew its own text with."""
    cdp = page.context.new_cdp_session(page)
    try:
        cdp.send("DOM.enable")
        cdp.send("CSS.enable")
        root = cdp.send("DOM.getDocument", {"depth": 0})["root"]["nodeId"]
        ids = cdp.send("DOM.querySelectorAll", {"nodeId": root, "selector": selector})["nodeIds"]
        return [cdp.send("CSS.getPlatformFontsForNode", {"nodeId": i})["fonts"] for i in ids]
    finally:
        cdp.detach()


def installed_glyphs(page, *, each: bool) -> tuple[list[dict], list[list[str]]]:
    """The page's text probes (PROBE_TEXT_JS) and, for each, the installed (not vendored) fonts
    Chromium drew some of it with."""
    probes = page.evaluate(PROBE_TEXT_JS, each)
    page.evaluate("document.fonts.ready.then(() => true)")
    drawn = platform_fonts(page, "[data-font-probe]")
    return probes, [[f["familyName"] for f in fonts
                     if not f["isCustomFont"] or not f["familyName"].startswith(VENDORED)]
                    for fonts in drawn]


def fonts_check(page, path: str) -> tuple[list[str], str]:
    """The vendored faces drew the page, from this server: see the module's docstring."""
    problems: list[str] = []
    info = page.evaluate(FONT_FACES_JS)
    here = info["origin"] + "/"
    local = [u for u in info["fetched"] if u.startswith(here) and FONT_DIR in u]
    if foreign := [u for u in info["fetched"] if u not in local]:
        problems.append(f"{path}: font files from outside this site's {FONT_DIR}: {foreign[:3]}")
    if failed := [f for f in info["faces"] if f["status"] == "error"]:
        problems.append(f"{path}: vendored faces failed to load: "
                        + ", ".join(f"{f['family']} {f['weight']} {f['style']} ({f['url']})"
                                    for f in failed[:4]))
    loaded = [f for f in info["faces"] if f["status"] == "loaded"]
    for f in loaded:
        if f["url"] not in local:
            problems.append(f"{path}: face {f['family']} {f['weight']} {f['style']} loaded, but "
                            f"not from a woff2 this page fetched under {FONT_DIR} ({f['url']})")
    families = {f["family"] for f in loaded}
    if "Roboto" not in families or not info["text"]:
        statuses = sorted({f["status"] for f in info["faces"] if f["family"] == "Roboto"})
        problems.append(f"{path}: the text face Roboto is not loaded (document.fonts: loaded "
                        f"{sorted(families) or 'none'}, Roboto's faces {statuses or 'absent'}; "
                        "run `make assets`?)")
    if info["hasCode"] and ("Roboto Mono" not in families or not info["code"]):
        problems.append(f"{path}: the code face Roboto Mono is not loaded")

    probes, drawn = installed_glyphs(page, each=False)
    if any(drawn):  # name the characters: probe them one by one
        probes, drawn = installed_glyphs(page, each=True)
        missing = [f"{p['text']!r} (U+{ord(p['text']):04X}) in {p['family']} {p['weight']} "
                   f"{p['style']} text such as {p['sample']!r}, drawn with {', '.join(fonts)}"
                   for p, fonts in zip(probes, drawn, strict=True) if fonts]
        problems.append(f"{path}: {len(missing)} characters drawn with installed fonts, not a "
                        f"vendored face (none loaded, or none has them): " + "; ".join(missing[:4]))
    page.evaluate("document.querySelectorAll('[data-font-probe]').forEach(e => e.remove())")
    styles = len({(p["family"], p["weight"], p["style"]) for p in probes})
    chars = sum(len(p["text"]) for p in probes)
    summary = (f"{len(loaded)} faces loaded from {FONT_DIR} "
               f"({', '.join(sorted(families)) or 'none'}) drew all the text ({chars} characters "
               f"in {styles} styles)" if not any(drawn) else "installed fonts drew some text")
    return problems, summary


def layout(page) -> dict:
    """What must not change with the installed fonts: every table's size, the page's height."""
    return page.evaluate("""() => ({
        height: document.documentElement.scrollHeight,
        tables: [...document.querySelectorAll('.md-content table')].map(t => {
            const r = t.getBoundingClientRect();
            return [Math.round(r.width * 100) / 100, Math.round(r.height * 100) / 100]; })})""")


def common_checks(run: Run, page, path: str, offsite: list[str]) -> tuple[list[str], str]:
    """What every page must pass: fonts, tables, offline."""
    problems, summary = fonts_check(page, path)
    table_problems, room = table_overflow(page, path)
    problems += table_problems
    run.layout[path] = layout(page)
    if offsite:
        problems.append(f"{path}: requests off this machine: {offsite[:5]}")
    tables = page.locator(".md-content table").count()
    summary += f"; {tables} tables" + (f" inside the column (at least {room:.0f} px to spare, "
                                       "squeezed to the narrowest)" if tables else "")
    return problems, summary


def check_page(run: Run, path: str, shot: Path, anchor: str, *, titles: bool = True,
               figures: bool = False, math: bool = True) -> list[str]:
    """Check one page; it must show named code blocks (`titles`), at least one image
    (`figures`), typeset math (`math`); never raw TeX, broken images or off-machine requests."""
    page, offsite, problems = open_page(run, path)
    if page is None:
        return problems

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
    more, summary = common_checks(run, page, path, offsite)
    problems += more

    if run.screenshots:
        page.locator(anchor).first.scroll_into_view_if_needed()
        page.evaluate("window.scrollBy(0, -80)")
        shot.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(shot))
    print(f"  {path}: {typeset}/{spans} math spans typeset, {len(named)} titled code blocks "
          f"(e.g. {named[0] if named else '-'}), {page.locator('.md-content img').count()} "
          f"figures; {summary}"
          + (f"; screenshot {shot.relative_to(ROOT)}" if run.screenshots else ""))
    problems += language_switch(run, page, path)
    page.close()
    return problems


def table_overflow(page, path: str) -> tuple[list[str], float]:
    """Tables wider than the text column (they would scroll, clipped), or hidden, on a loaded
    page; and the room left beside the tightest (the column less its narrowest possible width)."""
    tables = page.evaluate("""() => {
        const column = document.querySelector('.md-content__inner').getBoundingClientRect();
        return [...document.querySelectorAll('.md-content table')].map(t => {
            const wrap = t.closest('.md-typeset__scrollwrap') || t.parentElement;
            const r = t.getBoundingClientRect();
            const head = (t.querySelector('th') || t).textContent.trim().slice(0, 40);
            const cells = [...t.querySelectorAll('th, td')];
            const width = t.style.width;  // the narrowest it can be: its longest unbreakable runs
            t.style.width = 'min-content';
            const least = t.getBoundingClientRect().width;
            t.style.width = width;
            return {head, width: Math.round(r.width), column: Math.round(column.width),
                    least: least,
                    scrolls: wrap.scrollWidth > wrap.clientWidth + 1
                             || t.scrollWidth > t.clientWidth + 1,
                    past: r.right > column.right + 1 || r.left < column.left - 1,
                    hidden: cells.filter(c => c.getClientRects().length === 0
                                              || getComputedStyle(c).visibility !== 'visible')
                                 .length};
        }); }""")
    page_scrolls = page.evaluate(
        "document.documentElement.scrollWidth > document.documentElement.clientWidth + 1")
    problems = [f"{path}: table starting {o['head']!r} overflows its column at "
                f"{VIEWPORT['width']} px ({o['width']} px wide, column {o['column']} px)"
                for o in tables if o["scrolls"] or o["past"]]
    problems += [f"{path}: table starting {o['head']!r} has {o['hidden']} hidden cells"
                 for o in tables if o["hidden"]]
    if page_scrolls:
        problems.append(f"{path}: the page scrolls sideways at {VIEWPORT['width']} px")
    return problems, min((o["column"] - o["least"] for o in tables), default=0.0)


def check_common(run: Run, path: str) -> list[str]:
    """Only the checks every page must pass, for the pages check_page does not cover."""
    page, offsite, problems = open_page(run, path)
    if page is None:
        return problems
    more, summary = common_checks(run, page, path, offsite)
    print(f"  {path}: {summary}")
    more += language_switch(run, page, path)
    page.close()
    return problems + more


LANGUAGES = ("en", "es")  # English at the site's root, Spanish under es/ (mkdocs.yml's i18n)


def counterpart(path: str) -> str:
    """The same page in the other edition: "lab/x/" <-> "es/lab/x/", "" <-> "es/"."""
    return path.removeprefix("es/") if path.startswith("es/") else "es/" + path


def language_switch(run: Run, page, path: str) -> list[str]:
    """The switch of a loaded page (see the module's docstring); it leaves the page elsewhere."""
    if not run.switch:
        return []
    lang = "es" if path.startswith("es/") else "en"
    other = next(x for x in LANGUAGES if x != lang)
    want = f"{run.base}/{counterpart(path)}"
    problems = []
    if (got := page.evaluate("document.documentElement.lang")) != lang:
        problems.append(f"{path or 'index'}: <html lang={got!r}>, not {lang!r}")
    links = page.evaluate("""() => Object.fromEntries([...document.querySelectorAll(
        '.md-header .md-select a[hreflang]')].map(a => [a.hreflang, a.href]))""")
    if sorted(links) != sorted(LANGUAGES):
        return problems + [f"{path or 'index'}: the language switch offers {sorted(links)}, "
                           f"not {list(LANGUAGES)}"]
    if links[other] != want:
        problems.append(f"{path or 'index'}: the switch's {other} link is {links[other]}, "
                        f"not {want}")
    ids = set(page.evaluate("() => [...document.querySelectorAll('.md-content [id]')]"
                            ".map(e => e.id)"))
    page.hover(".md-header .md-select")  # the menu opens under the pointer, as for a reader
    with page.expect_navigation(wait_until="load"):
        page.click(f".md-header .md-select a[hreflang={other}]")
    landed = page.url.split("#")[0]
    there = page.evaluate("""() => [document.documentElement.lang,
        [...document.querySelectorAll('.md-content [id]')].map(e => e.id)]""")
    if landed != want or there[0] != other:
        problems.append(f"{path or 'index'}: picking {other} in the switch landed on {landed} "
                        f"(lang {there[0]!r}), not {want} ({other!r})")
    elif lang == "en" and (lost := sorted(ids - set(there[1]))):  # Spanish may add (a glossary)
        problems.append(f"{path or 'index'}: anchors missing from its {other} counterpart "
                        f"(a link or a switch with #anchor would miss them): {lost[:6]}")
    return problems


def fontconfig_file(font_set: str, tmp: Path) -> Path:
    """A fontconfig file that shows Chromium only `font_set`'s directory."""
    directory = FONT_SETS[font_set][0]
    conf = tmp / f"fonts-{font_set}.conf"
    conf.write_text(f"""<?xml version="1.0"?>
<!DOCTYPE fontconfig SYSTEM "urn:fontconfig:fonts.dtd">
<fontconfig>
  <dir>{directory}</dir>
  <include ignore_missing="yes">/etc/fonts/conf.d</include>
  <cachedir>{tmp / ('cache-' + font_set)}</cachedir>
</fontconfig>
""")
    return conf


def installed_fallback(run: Run) -> tuple[str, list[str]]:
    """The installed faces Chromium falls back to for sans-serif and monospace under this font
    set (what the site would be drawn with but for its own faces), and whether they belong to it."""
    page = run.browser.new_page(viewport=VIEWPORT)
    page.set_content('<p id="s" style="font-family: sans-serif">Hamburgefonstiv 0123</p>'
                     '<p id="m" style="font-family: monospace">Hamburgefonstiv 0123</p>')
    fonts = platform_fonts(page, "#s, #m")
    page.close()
    names = [", ".join(f["familyName"] for f in fs) for fs in fonts]
    problems = []
    if run.font_set in FONT_SETS:
        prefix = FONT_SETS[run.font_set][1]
        if not all(f["familyName"].startswith(prefix) for fs in fonts for f in fs):
            problems.append(f"font set {run.font_set}: Chromium still sees fonts outside it: "
                            f"{names}")
    return f"sans-serif -> {names[0]}, monospace -> {names[1]}", problems


# A word only each edition's text holds, and the section a search for it must offer.
SEARCHES = (("", "notation", "foundations/#notation"),
            ("es/", "glosario", "es/foundations/#glossary"))


def search_check(run: Run) -> list[str]:
    """Search works in both editions: typed into the header's search box of each edition's home,
    a word of that edition finds its section (Material's search worker, one index for both)."""
    problems = []
    for path, term, want in SEARCHES:
        page = run.browser.new_page(viewport=VIEWPORT)
        page.goto(f"{run.base}/{path}", wait_until="load")
        page.click("label.md-search__icon, .md-search__input")
        page.fill(".md-search__input", term)
        try:
            page.wait_for_selector(".md-search-result__item", timeout=15000)
        except Exception:  # Playwright's TimeoutError: no result at all
            pass
        found = page.evaluate("() => [...document.querySelectorAll("
                              "'.md-search-result__item a')].map(a => a.href)")
        page.close()
        if f"{run.base}/{want}" not in found:
            problems.append(f"search for {term!r} on /{path} does not offer /{want}: "
                            f"{found[:4]}")
        else:
            print(f"  search /{path}: {term!r} finds /{want} ({len(found)} results)")
    return problems


def check_site(run: Run, site: Path) -> list[str]:
    """Every page of the site under one browser (one font set)."""
    fallback, problems = installed_fallback(run)
    print(f"font set {run.font_set}: installed fonts seen by Chromium: {fallback}")
    if run.switch:
        problems += search_check(run)
    checked = ["theory/00-motivation/", "foundations/", "theory/01-online-softmax/",
               "lab/02-flash-triton/"]
    problems += check_page(run, "theory/00-motivation/",
                           ROOT / "build/screenshot-theory-00.png", "#the-roofline", figures=True)
    problems += check_page(run, "foundations/", ROOT / "build/screenshot-foundations.png",
                           "#the-reference")
    problems += check_page(run, "theory/01-online-softmax/",
                           ROOT / "build/screenshot-theory-01.png", "img", titles=False,
                           figures=True)
    problems += check_page(run, "lab/02-flash-triton/", ROOT / "build/screenshot-lab-02.png",
                           "#the-benchmark", figures=True)
    # the Spanish edition: a translated page with math and named code, the translated index, and
    # a page not translated yet (served from its English source), with figures and math
    problems += check_page(run, "es/foundations/", ROOT / "build/screenshot-es-foundations.png",
                           "#the-reference")
    problems += check_page(run, "es/theory/00-motivation/",
                           ROOT / "build/screenshot-es-theory-00.png", "#the-roofline",
                           figures=True)
    checked += ["es/foundations/", "es/theory/00-motivation/"]
    for page in ("theory/02-flash-attention/", "theory/03-paged-and-sliding/",
                 "theory/04-gqa-mqa-mla/", "gpu-primer/", "lab/00-online-softmax/", "results/",
                 "", "es/"):
        name = page.strip("/").replace("/", "-") or "index"
        name = "es-index" if name == "es" else name
        problems += check_page(run, page, ROOT / f"build/screenshot-{name}.png", "h1",
                               titles=page.startswith("lab/"),
                               figures=page not in ("lab/00-online-softmax/", "",
                                                    "theory/03-paged-and-sliding/", "gpu-primer/",
                                                    "es/"),
                               math=page not in ("", "es/"))
        checked.append(page)
    for html in sorted(site.glob("**/index.html")):  # every other page: the common checks
        page = html.parent.relative_to(site).as_posix()
        page = "" if page == "." else page + "/"
        if page not in checked and not page.startswith(("assets/", "generated/")):
            problems += check_common(run, page)
    return problems


def same_layout(runs: list[Run]) -> list[str]:
    """Under every font set, each page laid out alike: its height and every table's size."""
    problems = []
    first = runs[0]
    for other in runs[1:]:
        for path, seen in first.layout.items():
            if other.layout.get(path) != seen:
                problems.append(
                    f"{path or 'index'}: laid out differently under font sets {first.font_set} "
                    f"and {other.font_set}: {seen} vs {other.layout.get(path)}")
    return problems


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--site", type=Path, default=ROOT / "site")
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    parser.add_argument("--font-set", action="append", choices=["system", *FONT_SETS],
                        help="render under this font set (repeat for several); default: dejavu "
                             "and liberation where both are installed, else system")
    parser.add_argument("--block-fonts", action="store_true",
                        help="refuse the vendored woff2 files, to see the check fail without them")
    args = parser.parse_args()
    if not (args.site / "index.html").exists():
        sys.exit(f"no built site at {args.site}: run `make site` first")
    font_sets = args.font_set or (
        list(FONT_SETS) if all(Path(d).is_dir() for d, _ in FONT_SETS.values()) else ["system"])
    server, base = serve(args.site)
    problems, runs = [], []
    start = time.monotonic()
    try:
        with sync_playwright() as p, tempfile.TemporaryDirectory() as tmp:
            for i, font_set in enumerate(font_sets):
                env = dict(os.environ)
                if font_set != "system":
                    env["FONTCONFIG_FILE"] = str(fontconfig_file(font_set, Path(tmp)))
                browser = p.chromium.launch(executable_path=args.chromium, args=CHROMIUM_FLAGS,
                                            env=env)
                run = Run(browser, base, font_set, screenshots=i == 0,
                          block_fonts=args.block_fonts, switch=i == 0)
                problems += check_site(run, args.site)
                runs.append(run)
                browser.close()
    finally:
        server.shutdown()
    problems += same_layout(runs)
    if problems:
        print("browser check FAILED:\n  " + "\n  ".join(problems))
        sys.exit(1)
    print(f"browser check: OK under font sets {', '.join(font_sets)}"
          + (" (every page laid out identically under each)" if len(runs) > 1 else "")
          + f" in {time.monotonic() - start:.0f} s")


if __name__ == "__main__":
    main()
