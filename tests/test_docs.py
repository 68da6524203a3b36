"The docs site: built offline from the notebooks, then read in headless Chromium as a person would."
import functools, http.server, json, os, re, subprocess, sys, threading
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = Path("/usr/bin/chromium")
# offline: every host name fails to resolve except the local server's address
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"]
NB_DIRS = {"nbs": "", "kernels_nbs": "kernels/"}  # source folder -> folder of its pages in the site


def expected_pages():
    "{page path in the site: the notebook's title}, from the notebooks themselves (as nbdev names pages: config.html)."
    res = {}
    for d, prefix in NB_DIRS.items():
        for f in sorted((ROOT / d).glob("**/*.ipynb")):
            if any(p.startswith(("_", ".")) for p in f.relative_to(ROOT / d).parts): continue  # nbdev skips these
            mds = ["".join(c["source"]) for c in json.loads(f.read_text())["cells"] if c["cell_type"] == "markdown"]
            titles = [m[1].strip() for md in mds if (m := re.search(r"^#\s+(.+)$", md, re.M))]
            stem = "index" if f.stem == "index" else re.sub(r"^\d+[a-zA-Z0-9]*_", "", f.stem.lower())
            res[f"{prefix}{stem}.html"] = titles[0] if titles else None  # the title cell, as nbdev reads it
    return res


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out, work = tmp_path_factory.mktemp("site"), tmp_path_factory.mktemp("work")
    subprocess.run([sys.executable, str(ROOT / "tools" / "build_docs.py"), "--out", str(out), "--work", str(work)],
                   check=True, cwd=ROOT)
    return out


@pytest.fixture(scope="module")
def server(site):
    handler = functools.partial(QuietHandler, directory=str(site))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)  # port 0: a free port
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args): pass


@pytest.fixture(scope="module")
def browser():
    if not CHROMIUM.exists():
        if os.environ.get("CI"): pytest.fail(f"{CHROMIUM} is missing in CI: `make setup-browser` installs it")
        pytest.skip(f"{CHROMIUM} is missing (`make setup-browser` installs it with apt-get)")
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture
def page(browser, server):
    "A fresh page that records every request and every script error."
    pg = browser.new_page()
    pg.set_default_timeout(20_000)
    pg.requests, pg.errors = [], []
    pg.on("request", lambda r: pg.requests.append(r.url))
    pg.on("pageerror", lambda e: pg.errors.append(str(e)))
    yield pg
    outside = [u for u in pg.requests if not u.startswith((server, "data:", "blob:"))]
    assert not outside, f"the site asked for something outside itself: {outside}"
    assert not pg.errors, f"script errors: {pg.errors}"
    pg.close()


def test_site_has_every_notebook(site):
    pages = expected_pages()
    assert "index.html" in pages and len(pages) >= 2
    for p in pages: assert (site / p).is_file(), p


def test_nothing_loads_from_outside(site):
    "No page names a script, stylesheet or font outside the site (nbconvert's CDN macros and Google fonts are off)."
    for f in site.glob("**/*.html"):
        html = f.read_text()
        assert not re.findall(r'<script[^>]+src="(?:https?:)?//', html), f
        assert not re.findall(r'<link[^>]+href="(?:https?:)?//[^"]+"[^>]*rel="stylesheet"|<link[^>]+rel="stylesheet"[^>]+href="(?:https?:)?//', html), f
        assert "fonts.googleapis" not in html and "cdnjs" not in html and "unpkg.com" not in html, f
        assert '){target="' not in html, f"{f}: a Pandoc link attribute reached the page"


def test_front_page_and_nav(page, server):
    page.goto(f"{server}/index.html")
    assert "litevllm" in page.title()
    assert page.locator("article h1").first.inner_text().strip() == "litevllm"
    links = page.locator("nav.md-nav--primary a.md-nav__link[href]")
    nav = {}
    for i in range(links.count()):
        a = links.nth(i)
        nav[a.get_attribute("href").removeprefix("./")] = a.inner_text().strip()
    for path, title in expected_pages().items():
        assert path in nav, f"{path} is not in the nav: {nav}"
        if title: assert nav[path] == title, f"nav entry for {path}: {nav[path]!r}, expected {title!r}"
    page.wait_for_function("window.MathJax && window.MathJax.version")  # MathJax comes from the site itself


def test_mermaid_renders(page, server, site):
    "mkdocs-material turns each `pre.mermaid` into a `div.mermaid` holding the drawing once mermaid has run."
    with_mermaid = [p for p in expected_pages() if 'class="mermaid"' in (site / p).read_text()]
    assert "index.html" in with_mermaid
    for p in with_mermaid:
        n = (site / p).read_text().count('<pre class="mermaid">')
        page.goto(f"{server}/{p}")
        page.wait_for_function(f"document.querySelectorAll('article div.mermaid').length == {n}")
        assert page.locator("article pre.mermaid").count() == 0, p


def test_search_works_offline(page, server):
    page.goto(f"{server}/index.html")
    page.locator("label.md-search__icon, input.md-search__input").first.click()
    page.locator("input.md-search__input").press_sequentially("preemption", delay=30)  # search reacts to keyup
    results = page.locator(".md-search-result__item")
    results.first.wait_for()
    assert results.count() >= 1
    # every hit is a page of the site, and the scheduler's notebook (which explains preemption) is among them
    hrefs = [page.locator(".md-search-result__link").nth(i).get_attribute("href") for i in range(results.count())]
    assert all(h and (h.startswith(server) or not h.startswith("http")) for h in hrefs), hrefs  # nothing outside the site
    assert any("scheduler.html" in h for h in hrefs), hrefs
