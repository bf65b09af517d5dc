# Two commands on a fresh machine:  `make run` (set up + reproduce the default config)
# and `make test` (set up + run the test suite). `make help` lists the rest.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
CORES ?= 2
STAMP := $(VENV)/.installed

.PHONY: help setup run test lint clean-results

help:
	@echo "make run     set up .venv and run the default workflow (snakemake --cores $(CORES))"
	@echo "make test    set up .venv and run the test suite"
	@echo "make lint    ruff + snakemake --lint"
	@echo "make setup   only create .venv with pinned packages (requirements.txt)"
	@echo "make clean-results   delete the generated results/ folders (snakemake rebuilds them)"

$(STAMP): pyproject.toml requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# torch first, at the version pinned in requirements.txt, so that the next line finds it installed;
	# on a CPU-only Linux machine set TORCH_INDEX=https://download.pytorch.org/whl/cpu to get the CPU
	# build (PyPI's default Linux wheel is the multi-GB CUDA one)
	$(BIN)/pip install --quiet $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX)) "torch==$$(sed -n 's/^torch==//p' requirements.txt)"
	$(BIN)/pip install --quiet -r requirements.txt
	$(BIN)/pip install --quiet --no-deps -e .
	touch $(STAMP)

setup: $(STAMP)

run: $(STAMP)
	$(BIN)/snakemake --cores $(CORES)

test: $(STAMP)
	$(BIN)/python -m pytest -q -n 2 --durations=15

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks scripts
	$(BIN)/snakemake --lint

clean-results:
	rm -rf results/runs results/tables results/figures results/notebooks results/logs results/paper
