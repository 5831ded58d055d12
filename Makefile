# iterlin: the single entry point.
#   make env    create .venv (from python3) and install iterlin with its test and book extras
#   make test   unit tests, then the notebooks' stored outputs checked with nbval
#   make book   execute the notebooks at default scale (papermill), then build the site into _build/html
#   make bench  run the training benchmark
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
# nbval output sanitising: used when the notebooks provide the file.
NBVAL_SANITIZE := notebooks/nbval_sanitize.cfg
NBVAL_OPTS ?= $(if $(wildcard $(NBVAL_SANITIZE)),--nbval-sanitize-with $(NBVAL_SANITIZE))
PAPERMILL_OPTS ?=

.PHONY: help env test test-unit test-notebooks book notebooks bench clean distclean

help:
	@sed -n 's/^#   //p' Makefile

# The stamp makes `make env` quick once installed; editing pyproject.toml reinstalls.
$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --disable-pip-version-check -q -e ".[test,book]"
	@touch $@

env: $(STAMP)

test: test-unit test-notebooks

test-unit: env
	$(PY) -m pytest -q tests

# Runs only when notebooks exist; exit code 5 (nothing collected) is not a failure.
test-notebooks: env
ifneq ($(NOTEBOOKS),)
	$(PY) -m pytest -q --nbval $(NBVAL_OPTS) $(NOTEBOOKS) || { rc=$$?; [ $$rc -eq 5 ] || exit $$rc; echo "nbval: no cells collected"; }
else
	@echo "test-notebooks: no notebooks/*.ipynb yet, nothing to check"
endif

# Executed copies live in book/executed/ (git-ignored; jupyter-book always excludes _build/).
# A notebook is re-executed when it, the library or the environment changed; `make -B notebooks`
# forces it (e.g. after changing PAPERMILL_OPTS). Output goes to a partial file first, so a failed
# run leaves nothing that looks up to date.
EXECUTED := $(patsubst notebooks/%.ipynb,$(EXECUTED_DIR)/%.ipynb,$(NOTEBOOKS))

$(EXECUTED_DIR)/%.ipynb: notebooks/%.ipynb $(wildcard iterlin/*.py) $(STAMP)
	@mkdir -p $(@D)
	$(PY) -m papermill --no-progress-bar $(PAPERMILL_OPTS) $< $(@D)/.partial-$(@F)
	@mv $(@D)/.partial-$(@F) $@

notebooks: $(EXECUTED)

book: env notebooks
	$(VENV)/bin/jupyter-book build . --all -W -n --keep-going
	@test -f _build/html/index.html && echo "book: _build/html/index.html"

bench: env
	$(PY) benchmarks/bench_train.py

clean:
	rm -rf _build $(EXECUTED_DIR) .pytest_cache
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV)
