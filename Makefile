# The two commands of the README. Each sets up what it needs on a fresh machine.
VENV := .venv
BIN := $(VENV)/bin

.PHONY: test pipeline chromium tex
$(VENV)/.installed: pyproject.toml constraints.txt
	python3 -m venv $(VENV)
	$(BIN)/pip install -q -U pip
	$(BIN)/pip install -q -e '.[test]' -c constraints.txt  # the versions the tests ran with
	touch $@

# Every test, the end-to-end ones (marked e2e) included; the inner loop of daily work is
# `$(BIN)/pytest -n 2 -m "not e2e"` (about 6 minutes).
test: $(VENV)/.installed chromium tex
	$(BIN)/pytest -n 2 --dist loadfile

# The rules call `stacklm`, so the venv's bin/ goes first on PATH; profiles/cpu sets 2 cores.
# PTB and the SyntaxGym suites are downloaded into resources/ (ptb.mirror: null); offline, PTB_MIRROR
# names a folder of copies laid out as the reference ones: make pipeline PTB_MIRROR=../shared/upstream
# Then pdflatex typesets results/report/report.tex into report.pdf beside it.
PTB_MIRROR ?=
pipeline: $(VENV)/.installed tex
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/snakemake --profile profiles/cpu --config preset=small $(if $(PTB_MIRROR),'ptb={mirror: $(PTB_MIRROR)}')
	cd results/report && pdflatex -interaction=nonstopmode -halt-on-error report.tex > /dev/null

# The MLflow UI test loads the page in headless Chromium: Debian's package, installed once.
chromium:
	test -x /usr/bin/chromium || (apt-get update && apt-get install -y --no-install-recommends chromium)

# The report compiles with pdflatex (tested; `make pipeline` typesets it): Debian's TeX, installed once.
# The preamble needs geometry and graphicx (latex-base), booktabs (latex-recommended).
TEX_PACKAGES := texlive-latex-base texlive-latex-recommended texlive-fonts-recommended
tex:
	dpkg -s $(TEX_PACKAGES) > /dev/null 2>&1 || (apt-get update && apt-get install -y --no-install-recommends $(TEX_PACKAGES))
