"The docs site: built offline from the notebooks, then read in headless Chromium as a person would."
import ast, functools, html.parser, http.server, json, os, re, subprocess, sys, threading, urllib.parse
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


@pytest.fixture(scope="session")
def built(tmp_path_factory):
    """One site build per session. Executed notebooks come from .cache/docs/: `make test`'s nbtest step (build_docs.py
    --execute-only) has just executed every notebook into it, so this build executes none (nor does a second session)."""
    out, work = tmp_path_factory.mktemp("site"), tmp_path_factory.mktemp("work")
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "build_docs.py"), "--out", str(out), "--work", str(work)],
                       check=True, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    print(r.stdout)
    m = re.search(r"^executed (\d+) of (\d+) notebooks", r.stdout, re.M)
    if os.environ.get("CI") and m and int(m[1]):  # `make test`: nbtest filled the cache under the keys this build looks up
        import warnings
        warnings.warn(f"the docs build executed {m[1]} of {m[2]} notebooks that `make nbtest` had executed already "
                      "(its cache keys no longer match this build's options, or something changed in between)")
    return out, work


@pytest.fixture(scope="session")
def site(built): return built[0]


@pytest.fixture(scope="session")
def server(site):
    handler = functools.partial(QuietHandler, directory=str(site))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)  # port 0: a free port
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args): pass


# module scope, not session: playwright's sync API keeps an event loop running in this thread while it is open, and every
# later test module that calls asyncio.run() would fail with "cannot be called from a running event loop"
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


def without_search_index(pg, site):
    """Serve `pg` an empty search index. Every page load fetches the site's 3 MB index and builds a lunr index of it in a
    worker, about half of each visit's time: wasted on a test that looks at the article, not the search (which has tests of its own)."""
    no_docs = json.dumps({"config": json.loads((site / "search" / "search_index.json").read_text())["config"], "docs": []})
    pg.route("**/search/search_index.json", lambda route: route.fulfill(status=200, content_type="application/json", body=no_docs))


def test_front_page_and_nav(page, server):
    page.goto(f"{server}/index.html")
    assert "litevllm" in page.title()
    assert page.locator("article h1").first.inner_text().strip() == "litevllm"
    links = page.locator("nav.md-nav--primary a.md-nav__link[href]")
    nav = {}
    for i in range(links.count()):
        a = links.nth(i)
        nav[a.get_attribute("href").removeprefix("./")] = (a.text_content() or "").strip()  # text_content: links inside a collapsed part section are hidden
    for path, title in expected_pages().items():
        assert path in nav, f"{path} is not in the nav: {nav}"
        if title: assert nav[path] == title, f"nav entry for {path}: {nav[path]!r}, expected {title!r}"
    order = list(nav)  # reading order: Part I (the request's path, ending with the tour), Part II (the kernels first), Part III
    kernels = [i for i, p in enumerate(order) if p.startswith("kernels/")]
    assert kernels and order.index("request_lifecycle.html") < min(kernels) and max(kernels) < order.index("structured_output.html"), order
    assert order.index("structured_output.html") < order.index("cli.html") < order.index("server.html") < order.index("benchmarks.html"), order
    parts = [page.locator(f"nav.md-nav--primary label:has-text('{t}')").count() for t in ("Part I:", "Part II:", "Part III:")]
    assert all(parts), parts
    page.wait_for_function("window.MathJax && window.MathJax.version")  # MathJax comes from the site itself


def test_mermaid_renders(page, server, site):
    "mkdocs-material turns each `pre.mermaid` into a `div.mermaid` holding the drawing once mermaid has run."
    with_mermaid = [p for p in expected_pages() if 'class="mermaid"' in (site / p).read_text()]
    without_search_index(page, site)
    assert "index.html" in with_mermaid and "request.html" in with_mermaid  # request.html: drawn from LEGAL_TRANSITIONS
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


# --- every output of the notebooks reaches the page -----------------------------------------------------------------

SKIP_FLAGS = {"slow", "gpu", "notest", "export", "exports", "hide"}  # cells the page does not show run (or shows no output of)


def _draws(node):
    "Does this statement call something that draws: plt.*, plot_*, step_through?"
    for n in ast.walk(node):
        if isinstance(n, ast.Call):
            f = n.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            if isinstance(f, ast.Attribute) and getattr(f.value, "id", "") == "plt" and name in ("subplots", "figure", "plot", "imshow", "bar"): return True
            if name.startswith("plot_") or name == "step_through": return True
    return False


def figure_cells(nb_path):
    "Code cells of a notebook that draw a figure at top level (from the source: not from what the build made)."
    n = 0
    for c in json.loads(nb_path.read_text())["cells"]:
        src = "".join(c["source"])
        if c["cell_type"] != "code": continue
        flags = {m[1] for m in re.finditer(r"^#\|\s*([\w-]+)", src, re.M)}
        if flags & SKIP_FLAGS: continue
        try: tree = ast.parse("\n".join(l for l in src.splitlines() if not l.lstrip().startswith(("%", "!"))))
        except SyntaxError: continue
        if any(_draws(s) for s in tree.body if not isinstance(s, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))): n += 1
    return n


def source_notebooks():
    "{page path: source notebook}"
    res = {}
    for d, prefix in NB_DIRS.items():
        for f in sorted((ROOT / d).glob("*.ipynb")):
            if f.name.startswith(("_", ".")): continue
            stem = "index" if f.stem == "index" else re.sub(r"^\d+[a-zA-Z0-9]*_", "", f.stem.lower())
            res[f"{prefix}{stem}.html"] = f
    return res


def test_figure_cells_found():
    "The pages that must show figures: the scheduler (timelines, the step-through), the KV cache, the tour."
    nbs = source_notebooks()
    for p in ("scheduler.html", "kv_cache.html", "request_lifecycle.html"): assert figure_cells(nbs[p]) >= 1, p


def test_every_figure_is_an_image(seen, built):
    "Page by page: each cell that draws gives at least one picture, every picture loads, the executed outputs all show."
    site, work = built
    for p, nb in source_notebooks().items():
        executed = json.loads((work / "docs" / p.replace(".html", ".ipynb")).read_text())
        n_png = sum("image/png" in o.get("data", {}) for c in executed["cells"] if c["cell_type"] == "code" for o in c.get("outputs", []))
        sizes = [(im["src"][:40], im["natural"]) for im in seen[p]["images"]]
        broken = [s for s, w in sizes if not w]
        assert not broken, f"{p}: images that do not load: {broken}"
        assert len(sizes) >= max(figure_cells(nb), n_png), f"{p}: {len(sizes)} images, {figure_cells(nb)} cells draw, {n_png} PNG outputs"


def test_step_through_slider_moves(page, server):
    "05_scheduler's step-through: a reader without a kernel moves the slider and sees another step's picture."
    page.goto(f"{server}/scheduler.html")
    st = page.locator(".step-through").first
    slider, shown = st.locator("input[type=range]"), st.locator("img:visible")
    n = int(slider.get_attribute("max")) + 1
    assert n >= 3 and st.locator("img").count() == n
    assert shown.count() == 1 and shown.get_attribute("alt") == "step 0"
    slider.fill(str(n - 1))
    assert shown.count() == 1 and shown.get_attribute("alt") == f"step {n - 1}"


class _Refs(html.parser.HTMLParser):
    "Every link, image and id of a page, and the table-of-contents entries."
    def __init__(self):
        super().__init__(); self.links, self.srcs, self.ids, self.toc, self._toc = [], [], set(), [], None
    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "id" in a: self.ids.add(a["id"])
        if tag == "a" and a.get("href"):
            self.links.append(a["href"])
            if "md-nav__link" in (a.get("class") or "") and a["href"].startswith("#"): self._toc = [a["href"], ""]
        if tag in ("img", "script") and a.get("src"): self.srcs.append(a["src"])
    def handle_data(self, data):
        if self._toc is not None: self._toc[1] += data
    def handle_endtag(self, tag):
        if tag == "a" and self._toc is not None: self.toc.append((self._toc[0], self._toc[1].strip())); self._toc = None


def test_no_broken_links_or_images(site):
    "Every internal link, image and script resolves to a file of the site, every #anchor to an id; no empty TOC entry."
    parsed = {f: _Refs() for f in site.glob("**/*.html") if f.name != "404.html"}  # 404.html: absolute paths, by design
    for f, r in parsed.items(): r.feed(f.read_text())
    bad = []
    for f, r in parsed.items():
        for href, text in r.toc:
            if not text: bad.append(f"{f.name}: empty table-of-contents entry {href}")
        for u in r.links + r.srcs:
            if re.match(r"^[a-z]+:", u) or u.startswith("//"): continue  # outside (the repo link) or data:
            path, _, anchor = urllib.parse.unquote(u).partition("#")
            target = (f.parent / path).resolve() if path else f
            if target.is_dir(): target = target / "index.html"
            if not target.is_file(): bad.append(f"{f.relative_to(site)}: {u} (no such file)"); continue
            if anchor and target.suffix == ".html":
                ids = parsed[target].ids if target in parsed else set()
                if anchor not in ids: bad.append(f"{f.relative_to(site)}: {u} (no such anchor)")
    assert not bad, "\n".join(bad[:40]) + f"\n({len(bad)} in all)"
    # kernel functions resolve: a book page outside kernels/ links to a kernel's own entry
    assert any(re.match(r"^(\./)?kernels/\w+\.html#\w+", u) for f, r in parsed.items() if f.parent == site for u in r.links)


@pytest.mark.parametrize("term, page_name", [("token_budget", "scheduler.html"), ("allocate_slots", "kv_cache.html"),
                                             ("num_computed_tokens", None), ("block_table", "attention.html")])
def test_search_finds_vllm_terms(page, server, term, page_name):
    "A reader coming from vLLM searches its names and lands on the notebook that explains them."
    page.goto(f"{server}/index.html")
    page.locator("label.md-search__icon, input.md-search__input").first.click()
    page.locator("input.md-search__input").press_sequentially(term, delay=20)
    results = page.locator(".md-search-result__item")
    results.first.wait_for()
    hrefs = [page.locator(".md-search-result__link").nth(i).get_attribute("href") for i in range(results.count())]
    assert hrefs and all(h.startswith(server) or not h.startswith("http") for h in hrefs), hrefs
    if page_name: assert any(page_name in h for h in hrefs), (term, hrefs)


# --- the build itself --------------------------------------------------------------------------------------------------

def _nb(*cells):
    return {"nbformat": 4, "nbformat_minor": 5, "metadata": {"kernelspec": {"name": "python3", "display_name": "python3", "language": "python"}},
            "cells": [{"cell_type": "code", "id": f"c{i}", "metadata": {}, "outputs": [], "execution_count": None, "source": s}
                      for i, s in enumerate(cells)]}


@pytest.mark.parametrize("cells, fails", [
    (["x = 41", "#| slow\nraise RuntimeError('a slow cell is not run by the build')", "x + 1"], False),
    (["x = 41", "1/0", "x + 1"], True),
])
def test_a_failing_cell_fails_the_build(tmp_path, cells, fails):
    "The build executes every cell but the flagged ones, and a cell that raises stops it, naming the notebook and the cell."
    (tmp_path / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    src, dst = tmp_path / "nbs" / "t.ipynb", tmp_path / "out" / "t.ipynb"
    src.parent.mkdir(); src.write_text(json.dumps(_nb(*cells)))
    code = (f"import sys; from pathlib import Path; sys.path.insert(0, {str(ROOT / 'tools')!r}); import build_docs\n"
            f"build_docs._proc_one((Path({str(src)!r}), Path({str(dst)!r}), True, ['slow', 'gpu', 'notest'], None))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    if fails:
        assert r.returncode != 0 and "ZeroDivisionError" in r.stderr and "t.ipynb cell" in r.stderr, r.stderr[-2000:]
    else:
        assert r.returncode == 0, r.stderr[-2000:]
        out = [c.get("outputs") for c in json.loads(dst.read_text())["cells"] if c["cell_type"] == "code"]
        assert any("42" in json.dumps(o) for o in out), out  # the last cell ran, after the skipped slow one


def test_nbtest_names_the_failing_cell(tmp_path):
    """`make nbtest` (build_docs.py --execute-only) runs what nbdev-test runs: #| hide cells, in the notebook's folder, and
    the flagged cells --flags names (NBFLAGS); not #| eval: false or other flagged cells. Every notebook runs; each failure
    names its notebook and cell (numbered from 1, as nbdev-test does); the step fails at the end, listing the failed ones."""
    (tmp_path / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    d = tmp_path / "nbs"
    d.mkdir()
    (d / "bad.ipynb").write_text(json.dumps(_nb("x = 41", "#| hide\nimport os\nassert os.path.basename(os.getcwd()) == 'nbs', os.getcwd()",
                                                "1/0", "x + 1")))
    (d / "good.ipynb").write_text(json.dumps(_nb("x = 41", "#| eval: false\n1/0", "#| notest\n1/0", "#| slow\ny = x + 1", "#| hide\nassert y == 42")))
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "build_docs.py"), "--execute-only", "--flags", "slow", str(d)],
                       capture_output=True, text=True, cwd=tmp_path)
    err, failed = r.stderr, r.stderr.split("Failed On The Following Notebooks")[-1]
    assert r.returncode == 1, r.stdout + err[-3000:]
    assert f"ZeroDivisionError in {(d / 'bad.ipynb').resolve()} cell #3 (id c2):" in err, err[-3000:]
    assert "1/0" in err and "Traceback" in err and "bad.ipynb" in failed and "good.ipynb" not in failed, err[-3000:]


def _text(html_text, sep=" "): return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", sep, html_text))


def test_api_reference(site):
    "Enums list their members; deque and pydantic subclasses show their own signature; show_docs in definition order."
    req = _text((site / "request.html").read_text())
    assert "class RequestStatus(enum.IntEnum)" in req and "member value" in req
    assert all(f"{m.name} {m.value}" in req for m in __import__("litevllm.request", fromlist=["RequestStatus"]).RequestStatus)
    code = _text((site / "scheduler.html").read_text(), sep="")  # highlighted code: tokens are spans
    assert "class FCFSRequestQueue(collections.deque)" in code and "*args, **kwargs" not in code.split("FCFSRequestQueue¶")[1][:200]
    order = [code.index(f"{n}¶") for n in ("NewRequestData", "CachedRequestData", "SchedulerOutput", "EngineCoreOutput")]
    assert order == sorted(order), order  # as defined in the notebook, not reversed
    for f in site.glob("*.html"):
        assert "A base class for creating Pydantic models" not in f.read_text(), f  # a model's own docstring, or none


# --- the book as a reader sees it: a screenshot of every page, and what can be checked without a person ----------------

MIN_LABEL_PX = 9  # the smallest text a figure may show, in CSS px, once the page has shrunk it to its content column
sys.path.insert(0, str(ROOT / "tools"))
import build_docs  # the build's own screenshot and PNG helpers


def _png_size(png): return int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")  # from the IHDR chunk


def test_screenshots_of_every_page(built):
    "The build leaves a full-page screenshot of every page, 1400 px wide, in site/_screenshots/: the book as a reader sees it."
    site = built[0]
    if not CHROMIUM.exists(): pytest.skip(f"{CHROMIUM} is missing: the build takes no screenshots")
    shots = {f.name: f for f in (site / "_screenshots").glob("*.png")}
    for p in build_docs.site_pages(site):
        f = shots.get(p.removesuffix(".html").replace("/", "__") + ".png")
        assert f, f"no screenshot of {p}: {sorted(shots)}"
        w, h = _png_size(f.read_bytes())
        assert w == build_docs.SCREEN_WIDTH and h >= 900, (p, w, h)  # full page: at least the window's height


@pytest.fixture(scope="module")
def seen(built):
    """Every page once, at the screenshots' width: its images (bytes, natural and shown width), stderr boxes, overflowing
    code, as the build's browser read them (`build_docs.SEEN_JS`) while it took the page's screenshot, beside it."""
    import base64
    site, res = built[0], {}
    if not CHROMIUM.exists():
        if os.environ.get("CI"): pytest.fail(f"{CHROMIUM} is missing in CI: `make setup-browser` installs it")
        pytest.skip(f"{CHROMIUM} is missing: the build reads no pages")
    for p in build_docs.site_pages(site):
        f = site / "_screenshots" / (p.removesuffix(".html").replace("/", "__") + ".json")
        assert f.exists(), f"the build read nothing of {p} (no {f.name} beside its screenshot)"
        r = json.loads(f.read_text())
        for i, im in enumerate(r["images"]):
            src = im["src"]
            f = None if src.startswith("data:") else (site / p).parent / urllib.parse.unquote(src)
            im["png"] = base64.b64decode(src.split(",", 1)[1]) if f is None else f.read_bytes() if f.is_file() else b""
            im["where"] = f"{p} image {i} ({src[:30]}...)"
        res[p] = r
    return res


def test_figure_labels_readable(seen):
    """No figure's smallest text shows below MIN_LABEL_PX once the page has shrunk the figure to its column. The build
    writes each figure's smallest text size (px in the PNG) into the PNG it draws (`build_docs.record_text_sizes`);
    a figure file under nbs/images/ from a `#| slow` cell is checked when it carries that too."""
    small, unmeasured, n = [], [], 0
    for p, r in seen.items():
        for im in r["images"]:
            if not im["natural"]: continue
            px = build_docs.png_text(im["png"]).get(build_docs.MIN_TEXT_KEY)
            if px is None:
                if im["src"].startswith("data:"): unmeasured.append(im["where"])  # drawn by the build: it must say
                continue
            n += 1
            shown = float(px) * im["shown"] / im["natural"]
            if shown < MIN_LABEL_PX: small.append(f"{im['where']}: smallest text {shown:.1f} px at {im['shown']:.0f} px wide")
    assert n >= 10, f"only {n} figures carry their text size"
    assert not unmeasured, f"figures the build drew without a text size: {unmeasured}"
    assert not small, "labels too small to read:\n" + "\n".join(small)


def _looks_same(a:bytes, b:bytes) -> bool:
    "Two PNGs that show the same picture, whatever their resolution: 64×64 grey thumbnails within 0.5% of pixels."
    import io
    from PIL import Image
    def thumb(png):
        im = Image.open(io.BytesIO(png)).convert("RGBA")
        bg = Image.new("RGBA", im.size, "white"); bg.alpha_composite(im)
        return bg.convert("L").resize((64, 64), Image.BOX), im.size[0] / im.size[1]
    (ta, ra), (tb, rb) = thumb(a), thumb(b)
    if abs(ra / rb - 1) > 0.05: return False
    differ = sum(abs(x - y) > 48 for x, y in zip(ta.tobytes(), tb.tobytes()))
    return differ < 0.005 * 64 * 64


def test_no_image_twice_in_a_row(seen):
    "No picture follows itself (05_scheduler's step-through once showed its step-0 figure above its own slider too)."
    twice = []
    for p, r in seen.items():
        ims = r["images"]
        for a, b in zip(ims, ims[1:]):
            if a["group"] and a["group"] == b["group"]: continue  # two frames of one step-through may differ by a cell
            if not (a["natural"] and b["natural"]): continue      # a broken image: test_every_figure_is_an_image says so
            if _looks_same(a["png"], b["png"]): twice.append(f"{a['where']} and {b['where']}")
    assert not twice, "the same picture twice in a row:\n" + "\n".join(twice)


def test_duplicate_check_can_fail():
    "The check above sees one figure at two resolutions as the same, and two frames of a run as different."
    import io
    import matplotlib; matplotlib.use("agg")
    import matplotlib.pyplot as plt
    def png(data, dpi):
        fig, ax = plt.subplots(figsize=(6, 3)); ax.imshow(data, cmap="Blues"); ax.set_title("tokens per step")
        b = io.BytesIO(); fig.savefig(b, format="png", dpi=dpi); plt.close(fig); return b.getvalue()
    grid = [[8, 1, 1, 0], [8, 1, 0, 0], [8, 0, 0, 0]]
    later = [[8, 1, 1, 1], [8, 1, 0, 5], [8, 0, 0, 0]]
    assert _looks_same(png(grid, 60), png(grid, 200))
    assert not _looks_same(png(grid, 100), png(later, 100))


def test_no_red_stderr_boxes(seen):
    """stderr in the book is a red box: only for a cell that says it shows an error (`#| error: true`). The build drops
    progress bars and shows other stderr (log lines, warnings) as plain output (`build_docs.book_streams`)."""
    red = [f"{p}: {e['text'][:120]!r}" for p, r in seen.items() for e in r["stderr"] if not e["marked"]]
    assert not red, "stderr shown as an error by cells that do not say they show one:\n" + "\n".join(red)


def test_book_streams():
    "Progress bars go, a bare ANSI code goes, log lines stay as plain output; `#| error: true` keeps stderr."
    bar = "\rLoading weights:   0%|          | 0/20 [00:00<?, ?it/s]\rLoading weights: 100%|##########| 20/20 [00:00<00:00, 6983.52it/s]\n"
    log = "litevllm: the grammar of request ch refused token 7\n"
    outs = [dict(output_type="stream", name="stdout", text="\x1b[2K\x1b[2K"), dict(output_type="stream", name="stderr", text=bar),
            dict(output_type="stream", name="stderr", text=[log]), dict(output_type="execute_result", data={"text/plain": "1"})]
    got = build_docs.book_streams([dict(o) for o in outs])
    assert got == [dict(output_type="stream", name="stdout", text=log), outs[3]], got
    assert [o.get("name") for o in build_docs.book_streams([dict(o) for o in outs], shows_error=True)] == ["stderr", None]


_MERMAID_OVERLAPS_JS = """async src => {  // as mkdocs-material draws it: the pre's text content (a tag in it is lost)
  document.body.innerHTML = '<div style="width:868px"><pre class="mermaid"></pre></div>';
  const pre = document.querySelector('pre.mermaid');
  pre.innerHTML = src;
  mermaid.initialize({startOnLoad: false});
  const {svg} = await mermaid.render('m' + Math.floor(Math.random() * 1e9), pre.textContent);
  const d = document.createElement('div'); d.innerHTML = svg; pre.replaceWith(d);
  const els = [...new Set(document.querySelectorAll('g.edgeLabel, g.node'))], res = [];
  const bs = els.map(e => [e, e.textContent.trim(), e.getBoundingClientRect()]).filter(([e, t, r]) => t && r.width > 0 && r.height > 0);
  for (let i = 0; i < bs.length; i++) for (let j = i + 1; j < bs.length; j++) {
    const [ea, ta, a] = bs[i], [eb, tb, b] = bs[j];
    if (ea.contains(eb) || eb.contains(ea)) continue;
    if (a.left + 1 < b.right && b.left + 1 < a.right && a.top + 1 < b.bottom && b.top + 1 < a.bottom) res.push([ta, tb]);
  }
  return res;
}"""


@pytest.fixture
def mermaid_page(browser, site):
    "A blank page with the site's own mermaid (the content column's width: 868 px at a 1400 px window)."
    pg = browser.new_page(viewport={"width": 1400, "height": 900})
    pg.set_content("<div></div>")
    pg.add_script_tag(content=(site / "assets" / "mermaid.min.js").read_text())
    yield pg
    pg.close()


def test_mermaid_labels_apart(mermaid_page, site):
    "Every mermaid diagram of the site: no edge label or node lies over another (the state diagram's grammar labels once did)."
    import html as html_mod
    bad, n = [], 0
    for f in sorted(site.glob("**/*.html")):
        for src in re.findall(r'<pre class="mermaid">(.*?)</pre>', f.read_text(), flags=re.S):
            n += 1
            src = re.sub(r"</?code>", "", src)  # still HTML-escaped, as it goes into the page
            if over := mermaid_page.evaluate(_MERMAID_OVERLAPS_JS, src): bad.append(f"{f.relative_to(site)}: {over} in\n{html_mod.unescape(src)[:300]}")
    assert n >= 3, f"only {n} mermaid diagrams found"
    assert not bad, "overlapping labels:\n" + "\n".join(bad)


def test_mermaid_check_can_fail(mermaid_page):
    "The check finds the overlaps of the state diagram as it was drawn before (a top-down state diagram, long labels)."
    import html as html_mod
    old = """stateDiagram-v2
    WAITING --> WAITING_FOR_FSM: structured output: grammar compiling
    WAITING --> RUNNING: scheduled
    WAITING_FOR_FSM --> WAITING: grammar compiled
    WAITING_FOR_FSM --> FINISHED_ERROR: grammar failed to compile
    WAITING --> FINISHED_IGNORED: can never fit
    RUNNING --> FINISHED_ERROR: grammar refused a token
    RUNNING --> PREEMPTED: out of KV blocks
    PREEMPTED --> RUNNING: rescheduled, recomputed"""
    assert mermaid_page.evaluate(_MERMAID_OVERLAPS_JS, html_mod.escape(old))


def test_figures_carry_their_text_size(tmp_path):
    "In the build's workers every PNG matplotlib writes (inline figures, savefig) says how small its smallest text is, in px."
    code = (f"import sys, io; sys.path.insert(0, {str(ROOT / 'tools')!r}); import build_docs as b; b.record_text_sizes()\n"
            "import matplotlib; matplotlib.use('agg'); import matplotlib.pyplot as plt\n"
            "fig, ax = plt.subplots(figsize=(4, 3)); ax.set_title('title', fontsize=14); ax.text(0.5, 0.5, 'small', fontsize=6)\n"
            "buf = io.BytesIO(); fig.savefig(buf, format='png', dpi=100, bbox_inches='tight')\n"
            f"fig.savefig({str(tmp_path / 'f.png')!r}, dpi=200); ax.texts[0].set_visible(False)\n"
            "buf2 = io.BytesIO(); fig.savefig(buf2, format='png', dpi=100)\n"
            f"print([b.png_text(x)[b.MIN_TEXT_KEY] for x in (buf.getvalue(), open({str(tmp_path / 'f.png')!r}, 'rb').read(), buf2.getvalue())])")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == ["['8.33',", "'16.67',", "'13.89']"], r.stdout  # 6 pt at 100 and 200 dpi; hidden, it no longer counts


def test_front_page_code_fits(seen):
    "The front page's code blocks fit the content column at a 1400 px window: no sideways scrolling to read a command."
    assert not seen["index.html"]["pre"], f"index.html: code lines too wide for the page: {seen['index.html']['pre']}"
