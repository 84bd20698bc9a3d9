# make train  — set up .venv and run GRPO on SmolLM2-135M-Instruct (two-digit arithmetic, CPU, ~10 min): it learns
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

$(VENV)/.installed: pyproject.toml Makefile
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "need $(PYTHON) (set PYTHON=...)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH_SPEC)"
	$(PY) -m pip install -q -e ".[$(EXTRAS)]"
	touch $@

setup: $(VENV)/.installed

train: setup
	$(PY) train.py +experiment=grpo_smollm2_add $(ARGS)

smoke: setup
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
