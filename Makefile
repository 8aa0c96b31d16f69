# The two commands of the README. Each sets up what it needs on a fresh machine.
VENV := .venv
BIN := $(VENV)/bin

.PHONY: test pipeline chromium
$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(BIN)/pip install -q -U pip
	$(BIN)/pip install -q -e '.[test]'
	touch $@

test: $(VENV)/.installed chromium
	$(BIN)/pytest -n 2 --dist loadfile

# The rules call `stacklm`, so the venv's bin/ goes first on PATH; profiles/cpu sets 2 cores.
pipeline: $(VENV)/.installed
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/snakemake --profile profiles/cpu --config preset=small

# The MLflow UI test loads the page in headless Chromium: Debian's package, installed once.
chromium:
	test -x /usr/bin/chromium || (apt-get update && apt-get install -y --no-install-recommends chromium)
