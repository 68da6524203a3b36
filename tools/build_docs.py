#!/usr/bin/env python
"""Build the documentation site offline, without Quarto: nbdev's notebook processing, then mkdocs-material + mkdocs-jupyter.

    python tools/build_docs.py [--out site] [--work _mkdocs] [--no-source] [--no-screenshots]
    python tools/build_docs.py --execute-only [--flags "slow gpu"] [--timing] [PATH ...]    (`make nbtest`)

1. Every notebook in `nbs/` and `kernels_nbs/` (nbdev's globbing: names starting with `_` or `.` are skipped) goes through
   nbdev's own docs processors (`nbdev.processors.FilterDefaults`, what `nbdev-proc-nbs` runs): front matter from the title
   cell, `#| hide` cells dropped, `show_doc` added after each exported definition. Then the notebook is **executed**
   (as Quarto does for nbdev), in 2 worker processes with one torch thread each, so every output reaches the page: figures,
   printed objects, tables. The cells run are those `nbdev-test` runs (`nbdev.test.nb_test_cells`: `#| hide` cells too;
   not cells flagged with a test flag, `tst_flags`: `slow`, `gpu`, `notest`, whose figures come from files in
   `nbs/images/`, which the site gets a copy of; not `#| eval: false`), as nbdev-test runs them (the notebook's folder
   as working directory and on `sys.path`, `IN_TEST=1`, `cell_timeout`), plus the `show_doc` cells. A cell that raises
   fails the build, naming the notebook and the cell. Executed notebooks are cached in `.cache/docs/`, keyed by the
   notebook's content, the library's code, `nbs/images/`, pyproject.toml, this script's part 1 and the build options:
   a rebuild re-runs only what changed.
   `--execute-only` is this step alone as the notebooks' test (`make nbtest`, in place of `nbdev-test`): every notebook
   executed, whatever the cache holds, each failure reported as nbdev-test does (notebook, cell, traceback) and the
   exit status 1 at the end; `--flags` runs flagged cells too. What passes fills the cache under the keys the build
   above looks up, so `make test` executes each notebook once: the docs test's build only converts, renders and shoots.
2. What Quarto would have read is turned into what mkdocs-jupyter reads: front matter -> `# title` / `> description`,
   `#| echo: false` -> a `remove_input` tag, other `#|` lines removed, keys nbformat rejects (`has_sd`,
   `metadata.execution`) stripped, links between notebooks and nbdev's doc links made local.
3. mkdocs builds the site (`mkdocs.yml` is written here, with a nav of the notebooks found). Nothing loads from outside:
   no Google fonts, mermaid and MathJax come from `docs_assets/`, nbconvert's CDN macros are replaced by empty ones,
   search is mkdocs-material's offline index. Each notebook's page (nbconvert's HTML, mkdocs-jupyter's work) is rendered
   first in 2 processes into mkdocs-jupyter's own cache (`.cache/docs/pages/`, its key: the page's notebook and options),
   where mkdocs finds it: a build without that cache 37 -> 28 s, with it 10 s (Zen 5, 2026-11-29).
4. Every page is opened in headless Chromium (Debian's /usr/bin/chromium, offline) at 1400 px and screenshot whole into
   `OUT/_screenshots/` (`scheduler.png`, `kernels__paged_attention.png`): the book as a reader sees it, to look at page
   by page, and beside each (`scheduler.json`) what tests/test_docs.py checks of the rendered page (`SEEN_JS`: images'
   widths, stderr boxes, code wider than its box). Cached in `.cache/docs/screens/` by page content; `--no-screenshots`
   skips them.

Figures: every PNG matplotlib writes while the build executes a notebook carries the size of its smallest text
(`record_text_sizes`), so that the docs test can find labels a page shrinks below readable. Streams: progress bars are
dropped and other stderr is shown as plain output, unless a cell says `#| error: true` (`book_streams`).

By default an exported cell's source is shown after its `show_doc`s, as nbdev shows `#| exports` cells: this is a book
about the code (cells of imports only stay hidden). `--no-source` gives nbdev's default (`show_doc` only).
"""
from __future__ import annotations
import argparse, ast, base64, contextlib, hashlib, json, os, re, shutil, subprocess, sys, tempfile, time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ASSETS = ROOT/'docs_assets'
NB_DIRS = {'nbs': '', 'kernels_nbs': 'kernels'}  # source folder -> folder in the site
SECTIONS = {'': None, 'kernels': 'Kernels'}
# The book's three parts and the benchmarks, by the notebook's number (nbs/ only; index.ipynb stays at the top)
PARTS = [(0, 19, "Part I: a request's path"), (20, 39, 'Part II: what the engine adds'), (40, 49, 'Part III: serving'),
         (50, 99, 'Benchmarks')]
SECTION_IN = {'kernels': "Part II: what the engine adds"}  # the kernels open Part II (LoRA's chapter uses its kernel)
# Notebooks that only start a module whose cells a chapter writes (`05_sched_*`, `42_openai_*`), or keep an old import
# path (`*_compat`): listed at the end of their part, under one collapsed entry, so the chapters read in a row.
MODULE_FILES = re.compile(r'^\d+[a-z]?_(sched|openai)_|_compat$')
MODULE_FILES_TITLE = 'Module files'
CACHE = ROOT/'.cache'/'docs'
TASKS_PER_WORKER = 4  # notebooks a worker process runs before a fresh one takes over
# Seconds each notebook took to execute, by path: the longest start first (a batch of workers waits for its slowest
# notebook; started first, the others fill the other worker meanwhile). `make nbtest` writes this machine's into
# CACHE/timings.json; a fresh clone (CI) reads the committed table, refreshed by copying that file here now and then.
TIMINGS = ROOT/'tools'/'nbtest_timings.json'
UNKNOWN_SECONDS = 10  # a notebook in neither table (a new one): placed among the middling ones

def expected_seconds() -> dict[str, float]:
    "Each notebook's last measured execution time: this machine's last `make nbtest` where it has one, else the committed table's."
    return {k: v for f in (TIMINGS, CACHE/'timings.json') if f.exists() for k, v in json.loads(f.read_text()).items()}

# --- 1. nbdev processing (runs in worker processes) ---------------------------------------------------------------------

def _rm_hidden(cell):
    "nbdev's `rm_export`, but exported source stays (marked `exported`), except cells of imports only."
    if cell.cell_type != 'code' or not cell.directives_: return
    d = cell.directives_.keys()
    if d & {'exporti', 'hide', 'default_exp'}: del cell['source']
    elif d & {'export', 'exports'}:
        trees = cell.parsed_()
        if trees and all(isinstance(t, (ast.Import, ast.ImportFrom)) for t in trees): del cell['source']
        else: cell.metadata['exported'] = True

class NotebookError(RuntimeError):
    "A cell of a notebook raised (or timed out): the message names the notebook and the cell, with the cell's traceback."

def _exec_all(path, run_idx, cell_timeout=None):
    """What `nbdev-test` runs, run inside nbdev's docs processing (in place of `exec_show_docs`): the notebook's cells at
    the positions `run_idx` (`nbdev.test.nb_test_cells`: no skip flag, not `#| eval: false`, no `skip-execution` tag,
    no `skip_exec` front matter; `#| hide` cells included), in order, in a shell that has the notebook's folder on
    `sys.path` and stops a cell after `cell_timeout` s; then the `show_doc` cells the processing added, where they fall."""
    import asyncio
    from nbdev.config import get_config
    from nbdev.processors import exec_show_docs, _do_eval
    from execnb.shell import CaptureShell, format_exc
    name = os.path.relpath(path, ROOT) if Path(path).resolve().is_relative_to(ROOT) else str(path)
    class exec_all(exec_show_docs):
        def begin(self):
            if not run_idx: return  # nbdev-test runs nothing here (skip_exec, not Python, or every cell skipped)
            self.k = CaptureShell(path, profile=bool(get_config(Path(path).parent).exec_profile))
            self.k.run_cell('from nbdev.showdoc import show_doc')  # for the show_doc cells the processing adds
            self.before = asyncio.all_tasks(self.k.loop)
        def __call__(self, cell):
            if not hasattr(self, 'k') or cell.cell_type != 'code': return
            i = cell.get('src_idx_')  # the cell's position in the source notebook; None: a cell the processing added
            if (i not in run_idx) if i is not None else not _do_eval(cell): return
            self.k.cell(cell, timeout=cell_timeout)
            if (e := self.k.exc):
                where = f'cell #{i + 1} (id {cell.id})' if i is not None else f'the show_doc cell added as #{cell.idx_ + 1}'
                raise NotebookError(f"{type(e).__name__} in {name} {where}:\n{'=' * 75}\n{cell.source}\n{'-' * 75}\n"
                                    + ''.join(format_exc(e))) from None
        def end(self):  # as nbdev-test: tasks a notebook leaves running are cancelled (a worker runs several notebooks)
            if not hasattr(self, 'k'): return
            if leaks := self.k._reap(self.before, 5): print(f'{name}: {len(leaks)} leaked task(s) survived cancellation', file=sys.stderr)
            # widget state: pages show widgets as static frames (see `convert`), not as live widgets
    return exec_all

def _book_renderer(base):
    """nbdev's `show_doc` renderer, with a class's own signature and docstring: enums list their members, pydantic models their
    fields, a subclass of a builtin (`deque`) shows its base rather than `(*args, **kwargs)`, nothing inherited from a library."""
    import dataclasses, enum, inspect
    class BookRenderer(base):
        def __init__(self, sym, *args, **kwargs):
            super().__init__(sym, *args, **kwargs)
            if not inspect.isclass(sym): return
            own_doc = inspect.cleandoc(sym.__dict__.get('__doc__') or '')
            bases = ', '.join(b.__qualname__ if b.__module__ == 'builtins' else f'{b.__module__.split(".")[0]}.{b.__qualname__}'
                              if b.__module__.split('.')[0] != sym.__module__.split('.')[0] else b.__qualname__ for b in sym.__bases__)
            head = f'class {self.nm}({bases})'
            if issubclass(sym, enum.Enum):
                self.dm = head
                rows = '\n'.join(f'| `{m.name}` | `{m.value!r}` |' for m in sym)
                self.docs = own_doc + f'\n\n| member | value |\n|---|---|\n{rows}'
            elif hasattr(sym, 'model_fields') and hasattr(sym, 'model_json_schema'):  # pydantic
                def field(n, f):
                    ann = inspect.formatannotation(f.annotation) if f.annotation is not None else ''
                    return f'    {n}: {ann}' + ('' if f.is_required() else f' = {f.get_default(call_default_factory=False)!r}')
                self.dm = head + ':\n' + '\n'.join(field(n, f) for n, f in sym.model_fields.items())
                self.docs = own_doc
            else:
                init = next((k.__dict__['__init__'] for k in sym.__mro__ if '__init__' in k.__dict__), None)
                ours = hasattr(init, '__code__') and (getattr(init, '__module__', '') or '').split('.')[0] == sym.__module__.split('.')[0]
                if not ours and not dataclasses.is_dataclass(sym): self.dm = head  # a builtin's `__init__` (deque) says nothing
                self.docs = own_doc or (self.docs if ours else '')
    return BookRenderer

def _add_site_dir_links():
    """nbdev's `_modidx` only indexes notebooks under `nbs/`: give the symbols exported from the other folders (the kernels)
    doc links too, so that `paged_decode` in a notebook links to its page. For this build only (nothing is written)."""
    import importlib
    from nbdev.doclinks import _get_modidx
    cfg_lib = ROOT/'litevllm'
    try: mi = importlib.import_module('litevllm._modidx')
    except ImportError: return
    if mi.d.get('_book'): return
    for d, site_dir in NB_DIRS.items():
        if not site_dir: continue
        for py in sorted(cfg_lib.rglob('*.py')):
            if py.name.startswith('_'): continue
            try: idx = _get_modidx(py, ROOT, ROOT/d)
            except ValueError: continue  # exported from another folder
            for mod, syms in idx.items():
                mi.d['syms'].setdefault(mod, {}).update({k: (f'{site_dir}/{loc}', src) for k, (loc, src) in syms.items()})
    mi.d['_book'] = True

MIN_TEXT_KEY = 'MinTextPx'  # PNG text chunk: height in pixels of the figure's smallest drawn text, in the PNG's own pixels

def png_add_text(png:bytes, key:str, value:str) -> bytes:
    "`png` with a tEXt chunk `key`=`value` right after its header (PNG readers skip chunks they do not know)."
    import struct, zlib
    if not png.startswith(b'\x89PNG\r\n\x1a\n'): return png
    data = key.encode('latin-1') + b'\0' + value.encode('latin-1')
    chunk = struct.pack('>I', len(data)) + b'tEXt' + data + struct.pack('>I', zlib.crc32(b'tEXt' + data) & 0xffffffff)
    end_ihdr = 8 + 4 + 4 + struct.unpack('>I', png[8:12])[0] + 4
    return png[:end_ihdr] + chunk + png[end_ihdr:]

def png_text(png:bytes) -> dict:
    "A PNG's tEXt chunks."
    import struct
    res, i = {}, 8
    while i + 8 <= len(png):
        n, kind = struct.unpack('>I', png[i:i + 4])[0], png[i + 4:i + 8]
        if kind == b'tEXt':
            k, _, v = png[i + 8:i + 8 + n].partition(b'\0'); res[k.decode('latin-1')] = v.decode('latin-1')
        if kind == b'IDAT': break  # text chunks of interest come before the image data
        i += 12 + n
    return res

def record_text_sizes():
    """From now on, every PNG matplotlib writes in this process (the inline backend's figures, `savefig`) carries the
    height in pixels of its smallest drawn text (`MIN_TEXT_KEY`): the docs test scales it to the size the page shows the
    image at and finds labels too small to read."""
    import io, matplotlib.text
    from matplotlib.backend_bases import FigureCanvasBase
    if getattr(FigureCanvasBase.print_figure, '_book', False): return
    sizes = []  # px of each text drawn while a figure is being printed
    draw, print_figure = matplotlib.text.Text.draw, FigureCanvasBase.print_figure
    def text_draw(self, renderer, *args, **kwargs):
        if self.get_visible() and self.get_text().strip() and hasattr(renderer, 'points_to_pixels'):
            sizes.append(renderer.points_to_pixels(self.get_fontsize()))
        return draw(self, renderer, *args, **kwargs)
    def printed(self, filename, *args, **kwargs):
        fmt = kwargs.get('format') or (args[4] if len(args) > 4 else None)
        if fmt is None and isinstance(filename, (str, os.PathLike)): fmt = Path(filename).suffix[1:] or None
        fmt = (fmt or matplotlib.rcParams['savefig.format']).lower()
        pos = filename.tell() if isinstance(filename, io.BytesIO) else 0
        sizes.clear()
        res = print_figure(self, filename, *args, **kwargs)
        if fmt != 'png' or not sizes: return res
        value = f'{min(sizes):.2f}'
        if isinstance(filename, io.BytesIO):
            png = png_add_text(filename.getvalue()[pos:], MIN_TEXT_KEY, value)
            filename.seek(pos); filename.truncate(); filename.write(png)
        elif isinstance(filename, (str, os.PathLike)) and Path(filename).is_file():
            Path(filename).write_bytes(png_add_text(Path(filename).read_bytes(), MIN_TEXT_KEY, value))
        return res
    printed._book = True
    matplotlib.text.Text.draw, FigureCanvasBase.print_figure = text_draw, printed

def _proc_one(item):
    """Run nbdev's docs processors on one notebook (`src` -> `dst`), executing it as `nbdev-test` does (`_exec_all`);
    optionally keep exported source. `key`: the executed notebook is looked up in / saved to the cache under it
    (`read_cache=False`, as `--execute-only` does: always executed, then saved). A failing cell raises `NotebookError`."""
    src, dst, show_source, skip_flags, key, *rest = item
    read_cache = rest[0] if rest else True
    cached = CACHE/f'{key}.ipynb'
    dst.parent.mkdir(parents=True, exist_ok=True)
    if key and read_cache and cached.exists(): shutil.copy(cached, dst); return str(dst)
    if str(ROOT) not in sys.path: sys.path.insert(0, str(ROOT))  # this checkout's litevllm, whatever the venv has installed
    os.environ['OMP_NUM_THREADS'] = '1'  # two notebooks at once on 2 cores (set before torch is first imported here)
    os.environ.setdefault('MPLBACKEND', 'agg')
    record_text_sizes()
    os.chdir(src.parent)  # as nbdev-test runs a notebook; nbdev's get_config() finds pyproject.toml from there
    from fastcore.nbio import read_nb, write_nb
    from nbdev.config import get_config
    from nbdev.test import nb_test_cells
    from nbdev.processors import FilterDefaults, rm_export, mv_exports, add_fold, exec_show_docs
    _add_site_dir_links()
    run_idx = {c.idx_ for c in nb_test_cells(src, skip_flags)}  # the cells nbdev-test runs, by position
    ex = _exec_all(src, run_idx, get_config(src.parent).cell_timeout or None)
    import nbdev.showdoc as sd
    if not hasattr(sd, '_book'): sd.BasicMarkdownRenderer, sd._book = _book_renderer(sd.BasicMarkdownRenderer), True
    class BookProcs(FilterDefaults):  # mv_exports misplaces show_docs after an exported cell with none: convert() reorders
        def base_procs(self):
            procs = [ex if p is exec_show_docs else p for p in super().base_procs()]
            if not show_source: return procs
            return [_rm_hidden if p is rm_export else p for p in procs if p not in (mv_exports, add_fold)]
    nb = read_nb(src)
    for c in nb.cells: c.src_idx_ = c.idx_  # processors renumber `idx_` as they add cells; keys ending in _ are not saved
    nb.path_ = src.name
    os.environ['IN_TEST'] = '1'  # as nbdev-test: library code may check it
    try: BookProcs()(nb)
    finally: del os.environ['IN_TEST']
    write_nb(nb, dst)
    if key: CACHE.mkdir(parents=True, exist_ok=True); shutil.copy(dst, cached)
    return str(dst)

def _hash_files(paths):
    h = hashlib.sha256()
    for f in sorted(paths):
        h.update(str(f.relative_to(ROOT)).encode()); h.update(f.read_bytes())
    return h.hexdigest()

def cache_key(src, show_source, skip_flags, common):
    "The executed notebook's cache key: its content, the library, nbs/images/, this script's part 1 and the build options."
    return hashlib.sha256(f'{common}|{_hash_files([src])}|{show_source}|{sorted(skip_flags)}'.encode()).hexdigest()[:32]

def _part1_source():
    "The source of part 1 of this script (what executes the notebooks): a change elsewhere in it re-runs no notebook."
    txt = Path(__file__).resolve().read_text()
    return txt[txt.index('# --- 1. '):txt.index('# --- 2. ')]

def common_hash():
    files = [f for d in ('litevllm', 'nbs/images') for f in (ROOT/d).rglob('*') if f.is_file() and '__pycache__' not in f.parts]
    return hashlib.sha256((_hash_files(files + [ROOT/'pyproject.toml']) + _part1_source()).encode()).hexdigest()

def find_notebooks():
    "[(source path, folder in site)] for every notebook nbdev would document, index first."
    from nbdev.doclinks import nbglob
    res = []
    for d, site_dir in NB_DIRS.items():
        if (ROOT/d).is_dir(): res += [(Path(f), site_dir) for f in sorted(nbglob(ROOT/d, as_path=True))]
    return sorted(res, key=lambda o: (o[1] != '', o[0].name != 'index.ipynb', str(o[0])))

# --- 2. from Quarto's dialect to mkdocs-jupyter's ---------------------------------------------------------------------

_re_dir = re.compile(r'^\s*#\|\s*([\w-]+)\s*:?\s*(.*?)\s*$')

def _directives(src):
    "Leading `#|` directive lines -> (dict, the rest of the source)."
    lines, d = src.splitlines(), {}
    while lines and (m := _re_dir.match(lines[0])): d[m[1]] = m[2]; lines.pop(0)
    return d, '\n'.join(lines)

def _front_matter(src):
    import yaml
    m = re.match(r'^\s*---\s*\n(.*?)\n---\s*$', src, flags=re.S)
    return (yaml.safe_load(m[1]) or {}) if m else None

def _source(c): return ''.join(c['source']) if isinstance(c.get('source'), list) else c.get('source', '')

_re_src_link = re.compile(r'^\[source\]\([^)]*\)(\{[^}]*\})?\s*$', re.M)  # show_doc's link to the code on GitHub
_re_attr_link = re.compile(r'\[([^\]]*)\]\(([^)\s]+)\)\{([^}]*)\}')

def _attr_links(md):
    "Pandoc's `[text](url){key=\"value\"}` (in show_doc's output) -> an HTML link, which Python-Markdown understands."
    def html(m):
        attrs = ''.join(f' {k}="{v}"' for k, v in re.findall(r'([\w-]+)="([^"]*)"', m[3]))
        return f'<a href="{m[2]}"{attrs}>{m[1]}</a>'
    return _re_attr_link.sub(html, md)

def _plain_headings(md):
    "Headings without inline code: the TOC entry of `### `schedule()`` is otherwise blank and its anchor (#_1) dead."
    lines, fence = md.split('\n'), False
    for i, l in enumerate(lines):
        if l.lstrip().startswith(('```', '~~~')): fence = not fence
        elif not fence and re.match(r'^#{1,6}\s', l): lines[i] = l.replace('`', '')
    return '\n'.join(lines)

_re_ansi = re.compile(r'\x1b\[[0-9;?]*[A-Za-z]')
_re_progress = re.compile(r'^[^\n|]*\d+%\|[^|]*\|\s*\d+(\.\d+)?[kMG]?/\d+(\.\d+)?[kMG]?\b')  # tqdm's bar: `desc:  45%|####  | 9/20 [...]`

def _terminal_text(txt):
    "What a terminal would show: colour codes dropped, each line as its last carriage return left it."
    return '\n'.join(next((p for p in reversed(l.split('\r')) if p), '') for l in _re_ansi.sub('', txt).split('\n'))

def book_streams(outputs, shows_error=False):
    """A cell's outputs as the book shows them. Progress bars (tqdm on stderr) are for a reader at a terminal: dropped.
    Other stderr (log lines, warnings) is the cell's output, not an error: shown as plain text, unless the cell says it
    shows an error (`#| error: true`, Quarto's directive). Streams left empty (a bare ANSI code) are dropped."""
    res = []
    for o in outputs:
        if o.get('output_type') != 'stream': res.append(o); continue
        lines = _terminal_text(_source({'source': o.get('text', '')})).split('\n')
        if o.get('name') == 'stderr': lines = [l for l in lines if not _re_progress.match(l)]
        txt = '\n'.join(lines)
        if not txt.strip(): continue
        name = 'stderr' if o.get('name') == 'stderr' and shows_error else 'stdout'
        if res and res[-1].get('output_type') == 'stream' and res[-1]['name'] == name:
            prev = _source({'source': res[-1]['text']})
            res[-1]['text'] = prev + ('' if prev.endswith('\n') else '\n') + txt
        else: res.append({'output_type': 'stream', 'name': name, 'text': txt})
    return res

def convert(nb_path, src_rel, page, pages, doc_url, show_source=True):
    "Rewrite the nbdev-processed notebook at `nb_path` for mkdocs-jupyter; returns the page title."
    nb = json.loads(nb_path.read_text())
    page_dir, src_dir = os.path.dirname(page), os.path.dirname(src_rel)
    def fix(md):
        def rel(target): return os.path.relpath(target, page_dir or '.').replace(os.sep, '/')
        if doc_url:  # nbdev's doc links: page.html#cls.method -> the page's id for that heading (nbconvert drops the dot)
            md = re.sub(re.escape(doc_url.rstrip('/')) + r'/([\w./-]+\.html)(#[\w.-]+)?', lambda m: rel(m[1]) + (m[2] or '').replace('.', ''), md)
        def nb_link(m):
            path, _, anchor = m[2].partition('#')
            if re.match(r'^[a-z]+:', path) or not path.endswith('.ipynb'): return m[0]
            tgt = pages.get(os.path.normpath(os.path.join(src_dir, path)))
            return m[0] if tgt is None else f'{m[1]}({rel(tgt)}{"#" + anchor if anchor else ""})'
        md = re.sub(r'\[(`_\w[^`]*`)\]\([\w./-]*#_[\w.-]*\)', r'\1', md)  # a private name has no show_doc: no anchor to link to
        return re.sub(r'(\[[^\]]*\])\(([^)\s]+)\)', nb_link, md)
    src_cells = nb['cells']
    i = 0
    while i < len(src_cells):  # nbdev inserts the show_docs of one cell in reverse: back to the order of definition
        j = i
        while j < len(src_cells) and src_cells[j].get('has_sd'): j += 1
        if j > i + 1: src_cells[i:j] = src_cells[i:j][::-1]
        i = max(j, i + 1)
    for i in range(len(src_cells)):  # exported source, then its show_docs -> the show_docs, then the source
        if src_cells[i].get('metadata', {}).pop('exported', None):
            j = i + 1
            while j < len(src_cells) and src_cells[j].get('has_sd'): j += 1
            src_cells[i:j] = src_cells[i + 1:j] + [src_cells[i]]
    title, cells = None, []
    for c in src_cells:
        has_sd = c.pop('has_sd', None)
        c.get('metadata', {}).pop('execution', None)
        if c['cell_type'] == 'code':
            c['execution_count'] = None
        src = _source(c)
        if c['cell_type'] == 'raw' and (fm := _front_matter(src)) is not None:
            title = fm.get('title')
            md = (f'# {title}\n' if title else '') + (f'\n> {fm["description"]}\n' if fm.get('description') else '')
            if md: cells.append({'cell_type': 'markdown', 'id': c.get('id', 'fm'), 'metadata': {}, 'source': md})
            continue
        if c['cell_type'] == 'markdown':
            if src.strip().startswith('<!-- WARNING: THIS FILE WAS AUTOGENERATED'): continue
            c['source'] = fix(_plain_headings(src))
        elif c['cell_type'] == 'code':
            d, body = _directives(src)
            if d.get('include') == 'false': continue
            if d.get('output') == 'false': c['outputs'] = []
            shows_error = d.get('error') == 'true'
            c['outputs'] = book_streams(c.get('outputs', []), shows_error)
            tags = c['metadata'].setdefault('tags', [])
            if shows_error: tags.append('shows_error')  # the page marks the cell: its red stderr box is meant
            if d.get('echo') == 'false' or not body.strip(): tags.append('remove_input')
            if not tags: c['metadata'].pop('tags')
            c['source'] = body
            for o in c.get('outputs', []):
                data = o.get('data', {})
                # a widget has no kernel on the site: its static HTML form (e.g. 05_scheduler's StepThrough) is shown instead
                if 'application/vnd.jupyter.widget-view+json' in data and 'text/html' in data:
                    del data['application/vnd.jupyter.widget-view+json']
                if 'text/markdown' in o.get('data', {}):
                    md = _source({'source': o['data']['text/markdown']})
                    if show_source: md = _re_src_link.sub('', md)  # the source is on the page already
                    o['data']['text/markdown'] = fix(_attr_links(md))
            if not body.strip() and not c.get('outputs'): continue
        cells.append(c)
    if not title:  # no front matter: the first heading
        title = next((m[1] for c in cells if c['cell_type'] == 'markdown' and (m := re.search(r'^#\s+(.+)$', _source(c), re.M))), None)
    nb['cells'] = cells
    # widgets metadata makes nbconvert load the widget manager from a CDN; jupytext's is noise
    nb['metadata'] = {'kernelspec': {'display_name': 'Python 3', 'language': 'python', 'name': 'python3'},
                      'language_info': {'name': 'python'}}
    nb_path.write_text(json.dumps(nb, indent=1, ensure_ascii=False))
    return title or Path(page).stem

# --- 3. mkdocs ------------------------------------------------------------------------------------------------------------

MATHJAX_CONFIG = """window.MathJax = {
  tex: {inlineMath: [['$', '$'], ['\\\\(', '\\\\)']], displayMath: [['$$', '$$'], ['\\\\[', '\\\\]']], processEscapes: true},
  options: {enableMenu: false, ignoreHtmlClass: 'mermaid'},
  startup: {typeset: true}
};
"""

EXTRA_CSS = """/* code cells are wide: give the content more room than mkdocs-material's default 61rem */
.md-grid { max-width: 90rem; }
/* code blocks in prose (and show_doc signatures) at the code cells' size, not 16px: a 100-character line fits the column */
.jupyter-wrapper .jp-RenderedMarkdown .highlight pre { font-size: var(--jp-code-font-size); }
"""

EMPTY_MACROS = {  # nbconvert's templates load these from CDNs; our pages get them from docs_assets/ instead
    'lab/mermaidjs.html.j2': '{%- macro mermaid_js(url="", elk_url="") -%}{%- endmacro %}\n',
    'base/mathjax.html.j2': '{%- macro mathjax(url="") -%}{%- endmacro %}\n',
}

def mkdocs_config(site_dir, docs_dir, nav, cfg, jupyter_cache):
    return {
        'site_name': cfg.get('title', 'litevllm'),
        'site_description': cfg.get('description', ''),
        'docs_dir': str(docs_dir), 'site_dir': str(site_dir),
        'use_directory_urls': False,  # pages are plain .html files: the site also opens from disk
        'theme': {'name': 'material', 'font': False,  # font: false, else Google Fonts
                  'features': ['navigation.sections', 'navigation.top', 'search.highlight', 'content.code.copy'],
                  'palette': {'primary': 'indigo'}},
        'plugins': [{'search': {'lang': 'en'}},
                    {'mkdocs-jupyter': {'include': ['*.ipynb'], 'execute': False, 'cache': True, 'cache_dir': str(jupyter_cache),
                                        'include_requirejs': False, 'ignore_h1_titles': False, 'toc_depth': 3, 'no_prompt': True,
                                        'remove_tag_config': {'remove_input_tags': ['remove_input']}}}],
        'markdown_extensions': [{'pymdownx.superfences': {'custom_fences': [
            {'name': 'mermaid', 'class': 'mermaid', 'format': '!!python/name:pymdownx.superfences.fence_code_format'}]}}],
        'extra_css': ['assets/extra.css'],
        'extra_javascript': ['assets/mathjax-config.js', 'assets/tex-svg-full.js', 'assets/mermaid.min.js'],
        'nav': nav,
    }

def jupyter_cache_dir(work:Path, use_cache=True) -> Path:
    """Where mkdocs-jupyter keeps each page's HTML, keyed by the notebook's bytes and its options: `.cache/docs/pages/`, in a
    folder named by this script and the converting libraries' versions (their templates are not in mkdocs-jupyter's key);
    without the cache, in `work`."""
    if not use_cache: return work/'pages'
    import importlib.metadata as md
    h = hashlib.sha256(Path(__file__).resolve().read_bytes() + repr([md.version(d) for d in ('mkdocs-jupyter', 'nbconvert', 'mistune')]).encode())
    d = CACHE/'pages'/h.hexdigest()[:16]
    if d.parent.is_dir():
        for old in d.parent.iterdir():
            if old != d: shutil.rmtree(old, ignore_errors=True)
    return d

def _jupyter_page(args):
    "A worker of `prefill_pages`: one notebook's page as mkdocs-jupyter's plugin renders it (`new_render`), into its cache file."
    nb, cache_path, c, env = args
    os.environ.update(env)  # JUPYTER_PATH: our empty CDN macros, as the mkdocs process sees them
    from mkdocs_jupyter import convert
    from mkdocs_jupyter.plugin import _get_nb_toc_tokens
    body = convert.nb2html(nb, execute=False, kernel_name=c['kernel_name'], theme=c['theme'], allow_errors=c['allow_errors'],
                           show_input=c['show_input'], no_input=c['no_input'], no_prompt=c['no_prompt'],
                           remove_tag_config=c['remove_tag_config'], highlight_extra_classes=c['highlight_extra_classes'],
                           include_requirejs=c['include_requirejs'], custom_mathjax_url=c['custom_mathjax_url'])
    toc_tokens, title = _get_nb_toc_tokens(nb, c['toc_depth'])
    tmp = Path(cache_path).with_suffix('.tmp')
    tmp.write_text(json.dumps({'content': body, 'toc_tokens': toc_tokens, 'title': title}), encoding='utf-8')
    tmp.rename(cache_path)

def prefill_pages(config_file:Path, env:dict, n_workers=2) -> int:
    """Render the notebooks' pages mkdocs-jupyter's cache lacks, `n_workers` at a time, before mkdocs runs: mkdocs renders
    page after page in one process (nbconvert, then BeautifulSoup: ~70% of its build), and finds each here instead. The
    cache file and its key are the plugin's own (`_compute_cache_key`, from its options as mkdocs resolves them). Returns
    how many were rendered."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    from mkdocs.config import load_config
    from mkdocs_jupyter.plugin import _compute_cache_key, _get_cache_path
    cfg = load_config(str(config_file))
    pc = cfg.plugins['mkdocs-jupyter'].config
    c = {k: pc[k] for k in ('kernel_name', 'theme', 'allow_errors', 'show_input', 'no_input', 'no_prompt', 'remove_tag_config',
                            'highlight_extra_classes', 'include_requirejs', 'custom_mathjax_url', 'toc_depth')}
    Path(pc['cache_dir']).mkdir(parents=True, exist_ok=True)
    todo = [(str(nb), str(cp), c, env) for nb in sorted(Path(cfg.docs_dir).glob('**/*.ipynb'))
            if not (cp := _get_cache_path(pc['cache_dir'], _compute_cache_key(str(nb), pc, pc['execute']))).exists()]
    if todo:
        with ProcessPoolExecutor(n_workers, mp_context=multiprocessing.get_context('spawn')) as ex: list(ex.map(_jupyter_page, todo))
    return len(todo)

def write_yaml(d, path):
    import yaml
    txt = yaml.safe_dump(d, sort_keys=False, allow_unicode=True, width=200)
    txt = txt.replace("'!!python/name:pymdownx.superfences.fence_code_format'", '!!python/name:pymdownx.superfences.fence_code_format')
    path.write_text(txt)

def skip_flags_of(flags=''):
    "nbdev-test's skip flags: `tst_flags` from pyproject.toml, less the `flags` named to run (`make nbtest NBFLAGS=slow`)."
    from nbdev.config import get_config
    tst = get_config(ROOT).get('tst_flags', '') or ''
    tst = tst.split() if isinstance(tst, str) else list(tst)
    return [f for f in tst if f not in flags.split()]

def plan(nbs, docs, show_source=True, use_cache=True, flags=''):
    """[(source, executed notebook in `docs`, show_source, skip flags, cache key)] for `_proc_one`, one per notebook of
    `find_notebooks()`: the one place the docs build and `--execute-only` take their cache keys from."""
    from nbdev.config import nbpath2html
    skip_flags, common = skip_flags_of(flags), common_hash() if use_cache else None
    items = []
    for src, site_dir in nbs:
        stem = 'index' if src.name == 'index.ipynb' else nbpath2html(src).stem  # Quarto's page name: config.html
        key = cache_key(src, show_source, skip_flags, common) if use_cache else None
        items.append((src, docs/site_dir/(stem + '.ipynb'), show_source, skip_flags, key))
    return items

def _turns_on_interpreter(nb) -> bool:
    """Does notebook `nb` turn on Triton's interpreter (`TRITON_INTERPRET`, on a machine without CUDA)? It must run first in
    its process: Triton reads that setting when its modules are first set up, and a notebook run before it in the same
    process may have done that without it (03_cpu_layer_ops, then 04_lora in the same process: 04's kernels failed in
    the interpreter, "Cannot call @triton.jit'd outside of the scope of a kernel")."""
    return 'TRITON_INTERPRET' in Path(nb).read_text()

def _per_folder(fn, items, n_workers):
    """`fn` over `items` folder by folder (`nbs/`, then `kernels_nbs/`), as `nbdev-test nbs; nbdev-test kernels_nbs` ran
    them: a kernel notebook must be the first to import triton in its process (it turns the interpreter on before, on a
    machine without CUDA). `n_workers` slots, each a spawned process (a fresh interpreter: the build's own imports never
    leak into notebooks) that runs the longest notebook left, then the next, and after TASKS_PER_WORKER gives way to a
    fresh one: a worker that ran many keeps what their engines allocated (the model runner asks glibc to keep freed
    memory), and two such workers outgrew a 24 GB machine. The slots never wait for each other (fixed batches of
    notebooks did: 30-50 s of a `make nbtest`). (A pool's max_tasks_per_child would do it, but hangs on Python 3.11.) A
    notebook that turns Triton's interpreter on always starts a fresh process (`_turns_on_interpreter`).
    Results in the order of `items`; the first exception `fn` raised is raised once every slot has stopped."""
    import multiprocessing, threading
    from collections import deque
    from concurrent.futures import ProcessPoolExecutor
    groups, expected = {}, expected_seconds()
    for i, it in enumerate(items): groups.setdefault(Path(it[0]).parent, []).append(i)
    res, errors, lock, ctx = [None] * len(items), [], threading.Lock(), multiprocessing.get_context('spawn')
    def next_index(todo):
        with lock: return todo.popleft() if todo and not errors else None
    fresh = [_turns_on_interpreter(it[0]) for it in items]
    def slot(todo):
        try:
            i = next_index(todo)
            while i is not None:
                with ProcessPoolExecutor(1, mp_context=ctx) as ex:  # a fresh process for the next few
                    for n in range(TASKS_PER_WORKER):
                        if n and fresh[i]: break  # it must be the first in its process: the next one starts with it
                        res[i] = ex.submit(fn, items[i]).result()
                        if (i := next_index(todo)) is None: break
        except BaseException as e:
            with lock: errors.append(e)
    with _scratch_tmpdir():
        for idx in groups.values():
            todo = deque(sorted(idx, key=lambda i: -expected.get(_shown(items[i][0]), UNKNOWN_SECONDS)))  # longest first
            threads = [threading.Thread(target=slot, args=(todo,)) for _ in range(min(n_workers, len(idx)))]
            for t in threads: t.start()
            for t in threads: t.join()
            if errors: raise errors[0]
    return res

@contextlib.contextmanager
def _scratch_tmpdir():
    """The workers' temporary folder (`TMPDIR`): one fresh folder, removed afterwards with all that is left in it. The book
    makes its random models, GGUF files and servers' logs with `tempfile.mkdtemp()` and leaves them for a reader to look
    at; run after run as tests they filled the disk (1,187 folders, 41 GB, in /tmp after a day of runs: a CI run's
    install then failed for want of space)."""
    old, d = os.environ.get('TMPDIR'), tempfile.mkdtemp(prefix='litevllm-nb-')
    os.environ['TMPDIR'] = d
    try: yield d
    finally:
        if old is None: os.environ.pop('TMPDIR', None)
        else: os.environ['TMPDIR'] = old
        shutil.rmtree(d, ignore_errors=True)

def _worker_env():
    # this checkout's litevllm in the workers (a venv may have another checkout installed, e.g. a git worktree's main)
    if str(ROOT) not in os.environ.get('PYTHONPATH', '').split(os.pathsep):
        os.environ['PYTHONPATH'] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get('PYTHONPATH')]))

def part_of(src:Path) -> str|None:
    "The part of the book a notebook of nbs/ belongs to, by its number (None: the index, or another folder's notebook)."
    if src.parent.name != 'nbs' or not (m := re.match(r'(\d+)', src.name)): return None
    return next((t for lo, hi, t in PARTS if lo <= int(m[1]) <= hi), None)

def build(out: Path, work: Path = ROOT/'_mkdocs', show_source=True, n_workers=2, quiet=False, use_cache=True, shots=True):
    "Build the site from the notebooks into `out` (and its screenshots into `out/_screenshots/`); returns the nav."
    t0, out, work = time.time(), Path(out).resolve(), Path(work).resolve()
    from nbdev.config import get_config
    os.chdir(ROOT)  # nbdev reads its settings from the cwd up
    cfg = get_config(ROOT)
    if work.exists(): shutil.rmtree(work)
    docs, tpl = work/'docs', work/'jupyter'/'nbconvert'/'templates'
    nbs = find_notebooks()
    if not nbs: sys.exit('no notebooks found in ' + ', '.join(NB_DIRS))
    pages, items = {}, plan(nbs, docs, show_source, use_cache)
    for (src, site_dir), it in zip(nbs, items): pages[os.path.relpath(src, ROOT)] = os.path.relpath(it[1], docs).replace('.ipynb', '.html')
    if len(set(pages.values())) != len(pages): sys.exit(f'two notebooks map to one page: {pages}')
    _worker_env()
    cached = sum(1 for it in items if it[-1] and (CACHE/f'{it[-1]}.ipynb').exists())
    _per_folder(_proc_one, items, n_workers)
    if not quiet: print(f'executed {len(items) - cached} of {len(items)} notebooks ({cached} from {os.path.relpath(CACHE, ROOT)}/)')
    if use_cache:  # keep only this build's executed notebooks: the cache does not grow with every change
        keep = {f'{it[-1]}.ipynb' for it in items}
        for f in CACHE.glob('*.ipynb'):
            if f.name not in keep: f.unlink()
    doc_url = (cfg.get('doc_host') or '').rstrip('/') + (cfg.get('doc_baseurl') or '')
    nav, sections, parts, module_files = [], {}, {}, {}
    for (src, site_dir), (_, dst, *_) in zip(nbs, items):
        src_rel = os.path.relpath(src, ROOT)
        title = convert(dst, src_rel, os.path.relpath(dst, docs), pages, doc_url, show_source)
        entry = {title: os.path.relpath(dst, docs).replace(os.sep, '/')}
        if SECTIONS.get(site_dir): sections.setdefault(site_dir, []).append(entry)
        elif (part := part_of(src)) is None: nav.append(entry)
        elif MODULE_FILES.search(src.stem): module_files.setdefault(part, []).append(entry)
        else: parts.setdefault(part, []).append(entry)
    for part, entries in module_files.items(): parts.setdefault(part, []).append({MODULE_FILES_TITLE: entries})
    for site_dir, entries in sections.items(): parts.setdefault(SECTION_IN[site_dir], []).insert(0, {SECTIONS[site_dir]: entries})
    nav += [{title: parts[title]} for *_, title in PARTS if title in parts]
    (docs/'assets').mkdir(parents=True, exist_ok=True)
    for d, site_dir in NB_DIRS.items():  # figures of cells the build does not run (`#| slow`), written by those cells
        if (ROOT/d/'images').is_dir(): shutil.copytree(ROOT/d/'images', docs/site_dir/'images', dirs_exist_ok=True)
    for f in ('mermaid.min.js', 'tex-svg-full.js'): shutil.copy(ASSETS/f, docs/'assets'/f)
    (docs/'assets'/'mathjax-config.js').write_text(MATHJAX_CONFIG)
    (docs/'assets'/'extra.css').write_text(EXTRA_CSS)
    for name, txt in EMPTY_MACROS.items():
        (tpl/name).parent.mkdir(parents=True, exist_ok=True)
        (tpl/name).write_text(txt)
    write_yaml(mkdocs_config(out.resolve(), docs, nav, cfg, jupyter_cache_dir(work, use_cache)), work/'mkdocs.yml')
    # JUPYTER_PATH comes first in nbconvert's template search: our empty macros shadow the CDN ones
    jp = {'NO_MKDOCS_2_WARNING': '1', 'JUPYTER_PATH': os.pathsep.join(filter(None, [str(work/'jupyter'), os.environ.get('JUPYTER_PATH')]))}
    env = dict(os.environ, **jp)
    rendered = prefill_pages(work/'mkdocs.yml', jp, n_workers)
    if not quiet: print(f'rendered {rendered} of {len(nbs)} pages ({len(nbs) - rendered} from {os.path.relpath(CACHE/"pages", ROOT)}/)')
    mkdocs = [sys.executable, '-m', 'mkdocs', 'build', '--clean', '--quiet', '-f', str(work/'mkdocs.yml')]
    subprocess.run(mkdocs, check=True, env=env, cwd=work)
    if not quiet: print(f'built {len(nbs)} notebooks into {out} in {time.time() - t0:.1f}s')
    if shots: screenshots(out, n_workers=n_workers, use_cache=use_cache, quiet=quiet)
    return nav

# --- 4. the pages as a reader sees them ---------------------------------------------------------------------------------

CHROMIUM = Path('/usr/bin/chromium')  # Debian's package (`make setup-browser`): nothing downloads a browser build
# offline: every host name fails to resolve except the local server's address
CHROMIUM_ARGS = ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
                 '--disable-component-update', '--disable-sync', '--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1']
SCREEN_WIDTH = 1400  # px: a laptop's browser window

class serve_site:
    "`with serve_site(site) as url:` the site over HTTP on a free local port (search and mermaid want http, not file:)."
    def __init__(self, site): self.site = Path(site)
    def __enter__(self):
        import functools, http.server, threading
        class Quiet(http.server.SimpleHTTPRequestHandler):
            def log_message(self, *args): pass
        self.httpd = http.server.ThreadingHTTPServer(('127.0.0.1', 0), functools.partial(Quiet, directory=str(self.site)))
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return f'http://127.0.0.1:{self.httpd.server_address[1]}'
    def __exit__(self, *exc): self.httpd.shutdown(); self.httpd.server_close()

def site_pages(site):
    "Every page of the built site, as a path in it (404.html and the search page aside)."
    site = Path(site)
    return sorted(str(f.relative_to(site)).replace(os.sep, '/') for f in site.glob('**/*.html')
                  if f.name != '404.html' and not f.relative_to(site).parts[0].startswith(('_', 'search', 'assets')))

def wait_rendered(page, timeout=20_000):
    "Until the page is as a reader sees it: images loaded, mermaid drawn (mkdocs-material swaps each pre.mermaid for a div), MathJax done."
    page.wait_for_load_state('load')
    page.wait_for_function("""() => [...document.querySelectorAll('article img')].every(i => i.complete)
        && !document.querySelector('article pre.mermaid')""", timeout=timeout)
    page.evaluate("() => window.MathJax && MathJax.startup && MathJax.startup.promise")  # evaluate awaits the promise

def _shot_key(site, name, width):
    "A page's screenshot is redone only when the page, a local file it shows, or this script changed."
    f = site/name
    html_text = f.read_bytes()
    h = hashlib.sha256(html_text + f'|{width}|'.encode() + Path(__file__).resolve().read_bytes())
    for src in sorted(set(re.findall(rb'<img[^>]+src="([^":]+)"', html_text))):
        img = (f.parent/src.decode()).resolve()
        if img.is_file(): h.update(img.read_bytes())
    return h.hexdigest()[:32]

# What a test can check of a rendered page without a person (tests/test_docs.py's `seen`), read while its screenshot is
# taken and kept beside it (`name.json`): each image's source, natural and shown width (a step-through's hidden frames as
# they show when chosen), its step-through; stderr boxes and whether the cell is marked as showing an error; code lines
# wider than their box.
SEEN_JS = """() => {
  const art = document.querySelector('article'), res = {images: [], stderr: []};
  for (const img of art.querySelectorAll('img')) {
    const hidden = img.style.display === 'none';
    if (hidden) img.style.display = '';
    const st = img.closest('.step-through');
    res.images.push({src: img.getAttribute('src'), natural: img.complete ? img.naturalWidth : 0,
                     shown: img.getBoundingClientRect().width, group: st ? st.id : null});
    if (hidden) img.style.display = 'none';
  }
  for (const e of art.querySelectorAll('[data-mime-type="application/vnd.jupyter.stderr"]'))
    res.stderr.push({text: e.innerText.slice(0, 300), marked: !!e.closest('.celltag_shows_error')});
  res.pre = [...art.querySelectorAll('pre')].filter(p => p.scrollWidth > p.clientWidth + 1)
    .map(p => p.innerText.split('\\n').reduce((a, b) => b.length > a.length ? b : a, ''));
  return res;
}"""

def _shoot(args):
    "Screenshots of some pages in one browser (a worker of `screenshots`), each with what `SEEN_JS` reads of it beside it: [(name, PNG path)]."
    site, url, names, out, width = args
    from playwright.sync_api import sync_playwright
    res = []
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        pg = b.new_page(viewport={'width': width, 'height': 900})
        # an empty search index: each page would load the 4 MB one and index it in a worker while it is shot (half the time)
        no_docs = json.dumps({'config': json.loads((site/'search'/'search_index.json').read_text())['config'], 'docs': []})
        pg.route('**/search/search_index.json', lambda r: r.fulfill(status=200, content_type='application/json', body=no_docs))
        cdp = pg.context.new_cdp_session(pg)
        for name, f in names:
            pg.goto(f'{url}/{name}')
            try: wait_rendered(pg)
            except Exception as e: print(f'screenshot of {name}: not fully rendered ({type(e).__name__}); taken as it is')
            w, h = pg.evaluate('[document.documentElement.scrollWidth, document.documentElement.scrollHeight]')
            # playwright's full-page shot, by the DevTools call it makes, with Chromium's faster PNG encoding (a larger file)
            shot = cdp.send('Page.captureScreenshot', {'format': 'png', 'captureBeyondViewport': True, 'optimizeForSpeed': True,
                                                       'clip': {'x': 0, 'y': 0, 'width': w, 'height': h, 'scale': 1}})
            f.write_bytes(base64.b64decode(shot['data']))
            f.with_suffix('.json').write_text(json.dumps(pg.evaluate(SEEN_JS)))
            res.append((name, f))
        b.close()
    return res

def screenshots(site, out=None, width=SCREEN_WIDTH, pages=None, n_workers=2, use_cache=True, quiet=False):
    """Full-page screenshots of the site's pages in headless Chromium, `width` px wide, into `out` (default
    `site/_screenshots/`; `kernels/x.html` -> `kernels__x.png`): the book as a reader sees it, page by page. Cached in
    `.cache/docs/screens/` by each page's content, so a rebuild only shoots the pages that changed. Returns the PNGs."""
    if not CHROMIUM.exists():
        if not quiet: print(f'no screenshots: {CHROMIUM} is missing (`make setup-browser`)')
        return []
    from concurrent.futures import ThreadPoolExecutor
    t0, site = time.time(), Path(site)
    out, cache = Path(out) if out else site/'_screenshots', CACHE/'screens'
    if out.exists(): shutil.rmtree(out)
    out.mkdir(parents=True); cache.mkdir(parents=True, exist_ok=True)
    todo, res = [], []
    for name in pages or site_pages(site):
        f, key = out/(name.removesuffix('.html').replace('/', '__') + '.png'), _shot_key(site, name, width)
        if use_cache and (cache/f'{key}.png').exists() and (cache/f'{key}.json').exists():
            shutil.copy(cache/f'{key}.png', f); shutil.copy(cache/f'{key}.json', f.with_suffix('.json'))
        else: todo.append((name, f, key))
        res.append(f)
    if todo:
        with serve_site(site) as url, ThreadPoolExecutor(n_workers) as ex:  # a browser per thread: playwright's sync API is per thread
            shards = [[(n, f) for n, f, _ in todo[i::n_workers]] for i in range(n_workers)]
            list(ex.map(_shoot, [(site, url, s, out, width) for s in shards if s]))
        for _, f, key in todo: shutil.copy(f, cache/f'{key}.png'); shutil.copy(f.with_suffix('.json'), cache/f'{key}.json')
    if use_cache:  # keep only this site's screenshots
        keep = {_shot_key(site, n, width) for n in (pages or site_pages(site))}
        for f in [*cache.glob('*.png'), *cache.glob('*.json')]:
            if f.stem not in keep and not pages: f.unlink()
    if not quiet: print(f'{len(res)} screenshots ({width} px wide, {len(todo)} new) in {out} in {time.time() - t0:.1f}s')
    return res

# --- 5. `make nbtest`: the notebooks' tests, by this build's executor -----------------------------------------------------

def _shown(f):
    "A notebook's path as a message names it: relative to the repository where it is in it."
    f = Path(f).resolve()
    return os.path.relpath(f, ROOT) if f.is_relative_to(ROOT) else str(f)

def _test_one(item):
    "A worker of `execute`: (passed, seconds); a failure is written to stderr as it happens, as nbdev-test does."
    import traceback
    t0 = time.time()
    try: _proc_one(item); return True, time.time() - t0
    except Exception as e:
        sys.__stderr__.write((str(e) if isinstance(e, NotebookError) else f'{item[0]}:\n{traceback.format_exc()}') + '\n')
        sys.__stderr__.flush()
        return False, time.time() - t0

def execute(paths=(), flags='', n_workers=2, timing=False, use_cache=True, show_source=True):
    """`nbdev-test` by this build's executor (`make nbtest`): every notebook of `paths` (notebooks or folders; default: the
    ones the site documents, `nbs/` and `kernels_nbs/`) is executed once, whatever the cache holds, in `n_workers`
    processes with one torch thread each; the cells `flags` names (`slow gpu`) run too. Each notebook that passes goes
    into `.cache/docs/` under the key the docs build (as `tests/test_docs.py` runs it) will look up, so that build
    executes nothing. Exit status 1, after every notebook has run, when one failed; each failure names its notebook and
    cell, with the cell's source and traceback."""
    from nbdev.config import get_config
    from nbdev.doclinks import nbglob
    from nbdev.test import nb_test_cells
    from nbdev.config import import_obj  # nbdev-test's `test_setup` hook, if pyproject.toml names one
    t0 = time.time()
    paths = [Path(p).resolve() for p in paths]  # from the caller's folder
    os.chdir(ROOT)
    documented = {src.resolve(): site_dir for src, site_dir in find_notebooks()}
    files = []
    for p in paths or [ROOT/d for d in NB_DIRS if (ROOT/d).is_dir()]:
        if not p.exists(): sys.exit(f'no such notebook or folder: {p}')
        files += [p] if p.is_file() else [Path(f).resolve() for f in sorted(nbglob(p, as_path=True))]
    files = [f for f in dict.fromkeys(files) if not (f.parent/'.notest').exists()]  # nbdev-test's ignore_fname
    if not files: return print('No files were eligible for testing')
    with tempfile.TemporaryDirectory(prefix='nbtest-') as tmp:
        docs = [f for f in files if f in documented and use_cache]  # the very items the docs build makes: same keys
        items = dict(zip(docs, plan([(f, documented[f]) for f in docs], Path(tmp), show_source, flags=flags)))
        items = [items.get(f) or (f, Path(tmp)/'other'/f'{i}_{f.name}', show_source, skip_flags_of(flags), None)
                 for i, f in enumerate(files)]
        items = [it[:5] + (False,) for it in items]  # always execute (a test): the cache is written, never read
        if setup := get_config(ROOT).get('test_setup'):
            import_obj(setup)([c for it in items for c in nb_test_cells(it[0], it[3])])
        _worker_env()
        res = _per_folder(_test_one, items, n_workers)
    passed, times = zip(*res)
    if use_cache:  # the next run's order (see TIMINGS)
        CACHE.mkdir(parents=True, exist_ok=True)
        (CACHE/'timings.json').write_text(json.dumps(expected_seconds() | {_shown(f): round(t, 1) for f, t in zip(files, times) if f in documented}, indent=0, sort_keys=True))
    if all(passed): print(f'Success: {len(files)} notebooks executed in {time.time() - t0:.0f}s'
                          + (f', saved to {os.path.relpath(CACHE, ROOT)}/ for the docs build' if use_cache else ''))
    if timing:
        for i in sorted(range(len(files)), key=lambda i: -times[i]): print(f'{_shown(files[i])}: {int(times[i])} secs')
    if not all(passed):
        failed = '\n\t'.join(_shown(f) for p, f in zip(passed, files) if not p)
        sys.stderr.write(f"\nnbdev Tests Failed On The Following Notebooks:\n{'=' * 50}\n\t{failed}\n")
        sys.exit(1)

if __name__ == '__main__':
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('--out', default=str(ROOT/'site'), help='where the site goes (default: site/)')
    p.add_argument('--work', default=str(ROOT/'_mkdocs'), help='scratch folder, wiped first (default: _mkdocs/, gitignored; '
                   "a name starting with '_' keeps it out of nbdev's globbing)")
    p.add_argument('--no-source', action='store_true', help="nbdev's default: show_doc only, no exported source")
    p.add_argument('--n-workers', type=int, default=2)
    p.add_argument('--no-cache', action='store_true', help='execute every notebook, ignoring .cache/docs/ (with --execute-only: save nothing there)')
    p.add_argument('--no-screenshots', action='store_true', help='skip the full-page screenshots (OUT/_screenshots/)')
    p.add_argument('--execute-only', action='store_true', help="`make nbtest`: nbdev-test by this build's executor: "
                   'execute every notebook (or PATHs) once, fill .cache/docs/ for the docs build, build no site')
    p.add_argument('--flags', default='', help='with --execute-only: test flags to run that are normally skipped ("slow gpu")')
    p.add_argument('--timing', action='store_true', help='with --execute-only: time each notebook')
    p.add_argument('paths', nargs='*', help='with --execute-only: notebooks or folders (default: nbs/ and kernels_nbs/)')
    a = p.parse_args()
    if not a.execute_only and (a.paths or a.flags or a.timing): p.error('PATHs, --flags and --timing go with --execute-only')
    # run as the module `build_docs`, not `__main__`, so spawned workers can unpickle `_proc_one` by name
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import build_docs
    if a.execute_only:
        build_docs.execute(a.paths, a.flags, n_workers=a.n_workers, timing=a.timing, use_cache=not a.no_cache,
                           show_source=not a.no_source)
    else:
        build_docs.build(Path(a.out).resolve(), Path(a.work).resolve(), show_source=not a.no_source, n_workers=a.n_workers,
                         use_cache=not a.no_cache, shots=not a.no_screenshots)
