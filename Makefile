# Set-up is part of every target: a fresh machine needs only python3, make, git and Go (see README).
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)

.PHONY: setup tools image plan test test-quick bench clean

# setup.py and _yamlwriter.pyx: the compiled YAML writer is built again from its source.
$(STAMP): pyproject.toml setup.py fleetops/_yamlwriter.pyx
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[test]'
	rm -f $(VENV)/.installed-* && touch $@

setup: $(STAMP)  ## create .venv with fleetops and its pinned dependencies

tools:  ## build the real servers the tests run against (OPA, etcd, kube-apiserver, Pulumi) into .tools/; cached
	tools/build.sh

image: $(STAMP)  ## the reconciler's OCI image in build/image (root and debootstrap; no container engine)
	$(PY) image/build.py --out build/image

plan: $(STAMP)  ## the main job on the bundled prod environment
	$(VENV)/bin/fleetops render --env prod -o build/prod --summary
	$(VENV)/bin/fleetops plan --env prod

test: $(STAMP) tools  ## the whole test suite, the real-server tier included
	$(VENV)/bin/pytest -n 2 -q

test-quick: $(STAMP)  ## everything but the real-server tier (no Go needed)
	$(VENV)/bin/pytest -n 2 -q -m "not real"

bench: $(STAMP)  ## speed and memory figures (benchmarks/README.md)
	$(PY) benchmarks/run.py

clean:
	rm -rf build .pytest_cache
