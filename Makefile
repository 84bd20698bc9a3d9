# make train  — set up .venv and run GRPO on SmolLM2-135M-Instruct (two-digit arithmetic, CPU, ~9 min): it learns
# make smoke  — the tiny random-model pipeline run (python train.py: tiny_llama, length probe, ~1 min)
# make test   — set up .venv and run the whole test suite (slow end-to-end tests included; 2 pytest-xdist workers)
# make lint   — ruff (lint + format check) and mypy
PYTHON ?= python3.11
VENV ?= .venv
PY := $(VENV)/bin/python
# CPU wheel by default; on a GPU machine: make setup TORCH_SPEC="torch==2.8.0" EXTRAS=dev,gpu
TORCH_SPEC ?= torch==2.13.0
EXTRAS ?= dev
# pytest-xdist workers for make test / test-fast (one CPU thread each: tests/conftest.py); TEST_WORKERS=0: one process
TEST_WORKERS ?= 2

.PHONY: setup train smoke test test-fast lint format clean

# Two stages: make train and make smoke need only the package and its dependencies (.runtime, ~1 min); setup, test
# and lint add EXTRAS. pip byte-compiles file by file (~40 s of a ~70 s install here); compileall -j 0 does it on
# every core (its exit status is 1 for the few test-data files in site-packages that are not Python 3.11, hence || true)
$(VENV)/.runtime: pyproject.toml Makefile
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "need $(PYTHON) (set PYTHON=...)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q --no-compile "$(TORCH_SPEC)" -e .
	$(PY) -m compileall -qq -j 0 $(VENV)/lib >/dev/null || true
	touch $@

$(VENV)/.installed: $(VENV)/.runtime
	$(PY) -m pip install -q --no-compile -e ".[$(EXTRAS)]"
	$(PY) -m compileall -qq -j 0 $(VENV)/lib >/dev/null || true
	touch $@

setup: $(VENV)/.installed

train: $(VENV)/.runtime
	$(PY) train.py +experiment=grpo_smollm2_add $(ARGS)

smoke: $(VENV)/.runtime
	$(PY) train.py $(ARGS)

test: setup
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

test-fast: setup
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile -m "not slow" $(PYTEST_ARGS)

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

format: setup
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

clean:
	rm -rf $(VENV) runs multirun outputs .pytest_cache
