# The two commands of the README. Each sets up what it needs on a fresh machine.
VENV := .venv
BIN := $(VENV)/bin

.PHONY: test pipeline
$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(BIN)/pip install -q -U pip
	$(BIN)/pip install -q -e '.[test]'
	touch $@

test: $(VENV)/.installed
	$(BIN)/pytest -n 2

pipeline: $(VENV)/.installed
	$(BIN)/snakemake --cores 2 --config preset=small
