# Two commands on a fresh machine:  `make run` (set up + reproduce the default config)
# and `make test` (set up + run the test suite). `make help` lists the rest.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
CORES ?= 2
STAMP := $(VENV)/.installed

.PHONY: help setup run test lint paper clean-results

help:
	@echo "make run     set up .venv and run the default workflow (snakemake --cores $(CORES))"
	@echo "make test    set up .venv and run the test suite"
	@echo "make lint    ruff + snakemake --lint"
	@echo "make setup   only create .venv with pinned packages (requirements.txt)"

$(STAMP): pyproject.toml requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# torch first, from the CPU wheel pinned here, so that no CUDA build is fetched
	$(BIN)/pip install --quiet "torch==$$(sed -n 's/^torch==//p' requirements.txt)"
	$(BIN)/pip install --quiet -r requirements.txt
	$(BIN)/pip install --quiet --no-deps -e .
	touch $(STAMP)

setup: $(STAMP)

run: $(STAMP)
	$(BIN)/snakemake --cores $(CORES)

test: $(STAMP)
	$(BIN)/python -m pytest -q -n 2 --durations=15

lint: $(STAMP)
	$(BIN)/ruff check src tests
	$(BIN)/snakemake --lint

clean-results:
	rm -rf results/runs results/tables results/figures results/notebooks results/logs
