# iterlin: the single entry point.
#   make env    create .venv (from python3) and install iterlin with its test, book and site extras
#   make test   the package's layers (lint-imports), unit tests, the docstrings' examples (doctests),
#               then the notebooks' stored outputs checked with nbval
#   make book   execute the notebooks at default scale (papermill), then build the site into _build/html
#               (needs npm, for the MathJax served with the site)
#   make check-site  open every page of _build/html in headless Chromium (images, maths, local files)
#   make results  recompute the committed reference runs results/<name>/ that the pages show first:
#                 SCALE=cpu (default; this 2-core CPU, 10-75 minutes a notebook) or SCALE=gpu (on a GPU
#                 machine); NAMES="fig3 fig2" for some notebooks only (default: every one);
#                 RESULTS_OPTS=--skip-existing keeps those already at SCALE. Not part of `make book` or CI
#   make claims-refresh  re-derive results/*/claims.json from the stored results with today's claims
#                 code (no computation; NAMES as above)
#   make bench  run the benchmarks (five training ratios: step, end to end, sweep, ceiling, evaluation share; Gauss–Newton and NTK)
#   make clean  remove build outputs (keeps .venv; `make distclean` removes it too)

SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.iterlin-env

# Real CIFAR-10 data: use ITERLIN_CIFAR10 when set, else the shared subset beside the checkout.
SHARED_CIFAR10 := $(abspath ../shared/data/cifar10-subset)
ifeq ($(origin ITERLIN_CIFAR10),undefined)
ifneq ($(wildcard $(SHARED_CIFAR10)),)
ITERLIN_CIFAR10 := $(SHARED_CIFAR10)
endif
endif
ifdef ITERLIN_CIFAR10
export ITERLIN_CIFAR10
endif

NOTEBOOKS := $(sort $(wildcard notebooks/*.ipynb))
EXECUTED_DIR := book/executed
# nbval compares the outputs as notebooks/conftest.py says (sanitized by notebooks/nbval_sanitize.cfg,
# standard error not compared), exactly as the plain `pytest --nbval notebooks/` does; NBVAL_OPTS:
# extra options.
NBVAL_OPTS ?=
PAPERMILL_OPTS ?=

.PHONY: help env test test-imports test-unit test-doctest test-notebooks book notebooks pages mathjax check-site results \
	claims-refresh bench clean distclean

help:
	@sed -n 's/^#   //p' Makefile

# The stamp makes `make env` quick once installed; editing pyproject.toml reinstalls.
# uv (put into the venv by pip) installs the same versions as pip in seconds where pip takes about a
# minute; where uv cannot be had or cannot install (an index only pip is configured for), pip does it.
$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --disable-pip-version-check -q uv && $(VENV)/bin/uv pip install --python $(PY) -q -e ".[test,book,site]" \
	  || $(PY) -m pip install --disable-pip-version-check -q -e ".[test,book,site]"
	@touch $@

env: $(STAMP)

test: test-imports test-unit test-doctest test-notebooks

# The layers of the package: import-linter's contract in pyproject.toml ([tool.importlinter]).
test-imports: env
	$(VENV)/bin/lint-imports --no-cache

# PYTEST_OPTS: extra pytest arguments (CI passes --ignore=tests/test_site.py, run in its own phase).
PYTEST_OPTS ?=
# Unit tests run in TEST_WORKERS processes (pytest-xdist; most of their time is XLA compiling,
# one core each); TEST_WORKERS=0 runs them in this process.
TEST_WORKERS ?= 2

# nbval runs the notebooks in TEST_WORKERS processes too, each notebook's cells in order in one
# worker (--dist loadscope, as nbval's README asks).
NBVAL_WORKERS := $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadscope)

test-unit: env
	$(PY) -m pytest -q -n $(TEST_WORKERS) $(PYTEST_OPTS) tests

# The `>>>` examples in the library's docstrings (shown on the book's API page, book/api.md), run as
# doctests (options: pyproject.toml), on the CPU on every machine: the printed numbers are float32
# results on the CPU (a GPU may round matrix products differently). Collecting them imports every
# module of iterlin, so a module that no longer imports fails here too.
test-doctest: env
	JAX_PLATFORMS=cpu $(PY) -m pytest -q --doctest-modules iterlin

# Runs only when notebooks exist; exit code 5 (nothing collected) is not a failure.
test-notebooks: env
ifneq ($(NOTEBOOKS),)
	$(PY) -m pytest -q --nbval $(NBVAL_OPTS) $(NBVAL_WORKERS) $(NOTEBOOKS) || { rc=$$?; [ $$rc -eq 5 ] || exit $$rc; echo "nbval: no cells collected"; }
else
	@echo "test-notebooks: no notebooks/*.ipynb yet, nothing to check"
endif

# Executed copies live in book/executed/ (git-ignored; jupyter-book always excludes _build/).
# A notebook is re-executed when it, the library or the environment changed; `make -B notebooks`
# forces it (e.g. after changing PAPERMILL_OPTS). Output goes to a partial file first, so a failed
# run leaves nothing that looks up to date.
# Each notebook publishes its claims table to $(CLAIMS_DIR)/<name>.json (iterlin.repro.claims), so the
# claims page shows exactly the executed copies' claims.
# Every module of the library, subpackages included (a moved module must not be invisible here).
LIBRARY := $(shell find iterlin -name '*.py' -not -path '*/__pycache__/*')
EXECUTED := $(patsubst notebooks/%.ipynb,$(EXECUTED_DIR)/%.ipynb,$(NOTEBOOKS))
CLAIMS_DIR := $(EXECUTED_DIR)/claims

# A notebook shows its reference run first (results/<name>/, or $ITERLIN_RESULTS/<name>/), so a
# new reference run re-executes it too.
RESULTS_DIR := $(or $(ITERLIN_RESULTS),results)
.SECONDEXPANSION:
$(EXECUTED_DIR)/%.ipynb: notebooks/%.ipynb $(LIBRARY) $(STAMP) $$(wildcard $(RESULTS_DIR)/$$*/*.json $(RESULTS_DIR)/$$*/*.npz)
	@mkdir -p $(@D) $(CLAIMS_DIR)
	ITERLIN_CLAIMS=$(abspath $(CLAIMS_DIR)) $(PY) -m papermill --no-progress-bar $(PAPERMILL_OPTS) $< $(@D)/.partial-$(@F)
	@mv $(@D)/.partial-$(@F) $@

notebooks: $(EXECUTED)

# Pages generated from the executed notebooks and the committed reference runs (claims tables,
# reference runs' provenance, runtimes) into book/executed/; fails, naming it, if a notebook of
# _toc.yml was not executed, published no claims, has an unreadable reference run, or would show a
# progress bar or a local path of this machine (e.g. a warning naming an installed file).
pages: notebooks
	$(PY) book/generate.py

# MathJax 3 served with the site, so that the maths renders offline: package.json/package-lock.json
# pin mathjax (version and sha512); `npm ci` installs it into _build/npm (npm's own cache makes
# reinstalls offline), and what the pages load is copied to _build/vendor/mathjax, which
# _config.yml adds to the site's _static/ (mathjax_path: mathjax/tex-chtml-full.js).
NPM ?= npm
MATHJAX_ES5 := _build/npm/node_modules/mathjax/es5
MATHJAX := _build/vendor/mathjax/tex-chtml-full.js

$(MATHJAX): package.json package-lock.json
	@command -v $(NPM) >/dev/null || { echo "make: npm not found: the book vendors MathJax with npm (install Node.js and npm, e.g. apt-get install -y npm)" >&2; exit 1; }
	rm -rf _build/npm _build/vendor/.mathjax.partial
	mkdir -p _build/npm _build/vendor/.mathjax.partial/output
	cp package.json package-lock.json _build/npm/
	cd _build/npm && $(NPM) ci --prefer-offline --ignore-scripts --no-audit --no-fund --loglevel=error
	cp -R $(MATHJAX_ES5)/tex-chtml-full.js $(MATHJAX_ES5)/a11y $(MATHJAX_ES5)/adaptors $(MATHJAX_ES5)/input \
	  $(MATHJAX_ES5)/sre $(MATHJAX_ES5)/ui _build/npm/node_modules/mathjax/LICENSE _build/vendor/.mathjax.partial/
	cp -R $(MATHJAX_ES5)/output/chtml _build/vendor/.mathjax.partial/output/
	rm -rf _build/vendor/mathjax && mv _build/vendor/.mathjax.partial _build/vendor/mathjax

mathjax: $(MATHJAX)

book: env pages mathjax
	$(VENV)/bin/jupyter-book build . --all -W -n --keep-going
	@test -f _build/html/index.html && echo "book: _build/html/index.html"

# The browser check of the built site; ITERLIN_REQUIRE_SITE=1 turns its skips (no site, no
# Chromium, no Playwright) into failures. Needs /usr/bin/chromium (Debian: apt-get install chromium)
# or ITERLIN_CHROMIUM naming the browser.
check-site: env
	ITERLIN_REQUIRE_SITE=1 $(PY) -m pytest -q tests/test_site.py

# Reference runs (python -m iterlin.experiments.reference; see its docstring): each notebook's
# results.npz, claims.json and provenance.json (scale, device, seeds, commit, date, wall time), written
# atomically; an interrupted run resumes from its checkpoints (.cache/reference/) when rerun. Hours of
# computation in all, so neither `make book` nor CI runs them: the book shows what is committed.
SCALE ?= cpu
NAMES ?=
RESULTS_OPTS ?=

results: env
	$(PY) -m iterlin.experiments.reference --scale $(SCALE) $(RESULTS_OPTS) $(NAMES)

claims-refresh: env
	$(PY) -m iterlin.experiments.reference --claims-only $(NAMES)

bench: env
	$(PY) benchmarks/bench_train.py
	$(PY) benchmarks/bench_second_order.py

clean:
	rm -rf _build $(EXECUTED_DIR) .pytest_cache
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV)
