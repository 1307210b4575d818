# Set-up is part of every target: a fresh machine needs only python3 and make.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)

.PHONY: setup plan test bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[test]'
	rm -f $(VENV)/.installed-* && touch $@

setup: $(STAMP)  ## create .venv with fleetops and its pinned dependencies

plan: $(STAMP)  ## the main job on the bundled prod environment
	$(VENV)/bin/fleetops render --env prod -o build/prod --summary
	$(VENV)/bin/fleetops plan --env prod

test: $(STAMP)  ## the whole test suite
	$(VENV)/bin/pytest -n 2 -q

bench: $(STAMP)  ## speed and memory figures (benchmarks/README.md)
	$(PY) benchmarks/run.py

clean:
	rm -rf build .pytest_cache
