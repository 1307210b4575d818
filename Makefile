# Set-up is part of every target: a fresh machine needs only python3, make, git and Go (see README).
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)

.PHONY: setup tools image plan test test-quick bench generated clean

# setup.py and _yamlwriter.pyx: the compiled YAML writer is built again from its source.
# One line per step while pip works (minutes on a fresh machine), pip's own output in $(VENV)/setup.log.
SETUP_STEPS := /^(Collecting|Obtaining)/ && !a { print "setup: downloading fleetops'"'"'s pinned dependencies from PyPI"; a = 1 } \
	/^Building (editable|wheel)/ && !b { print "setup: compiling the YAML writer (fleetops/_yamlwriter.pyx) with Cython"; b = 1 } \
	/^Installing collected packages:/ && !c { print "setup: installing " split($$0, p, ",") " packages into $(VENV)"; c = 1 } \
	{ fflush() }

$(STAMP): pyproject.toml setup.py fleetops/_yamlwriter.pyx
	@test -x $(PY) || { echo "setup: creating $(VENV) with $$(python3 --version)"; python3 -m venv $(VENV); }
	@echo "setup: installing fleetops into $(VENV) (a few minutes on a fresh machine; pip's log: $(VENV)/setup.log)"
	@{ $(PY) -m pip install --disable-pip-version-check --progress-bar off -e '.[test]' 2>&1; echo "exit $$?"; } \
		| tee $(VENV)/setup.log | awk '$(SETUP_STEPS)'
	@tail -n 1 $(VENV)/setup.log | grep -qx 'exit 0' || { tail -n 25 $(VENV)/setup.log; echo "setup: pip failed: $(VENV)/setup.log"; exit 1; }
	@rm -f $(VENV)/.installed-* && touch $@
	@echo "setup: ready: $$($(VENV)/bin/fleetops --version)"

setup: $(STAMP)  ## create .venv with fleetops and its pinned dependencies

tools:  ## build the real servers and readers the tests run against (OPA, etcd, kube-apiserver, kube-controller-manager, kube-scheduler, Kueue, Pulumi, kube-router, prometheus-adapter, prometheus-operator, Prometheus and promtool, grafana-foundation-sdk's strict decoder) into .tools/; cached
	tools/build.sh

image: $(STAMP)  ## the reconciler's OCI image in build/image (root and debootstrap; no container engine)
	$(PY) image/build.py --out build/image

plan: $(STAMP)  ## the main job on the bundled prod environment
	$(VENV)/bin/fleetops render --env prod -o build/prod --summary
	$(VENV)/bin/fleetops plan --env prod

test: $(STAMP) tools  ## the import contracts (.importlinter), then the whole test suite, the real-server tier included
	$(VENV)/bin/lint-imports
	$(VENV)/bin/pytest -n 2 -q --durations=25 --junitxml=build/junit.xml

test-quick: $(STAMP)  ## the import contracts, then everything but the real-server tier (no Go needed)
	$(VENV)/bin/lint-imports
	$(VENV)/bin/pytest -n 2 -q -m "not real"

bench: $(STAMP)  ## speed and memory figures (benchmarks/README.md)
	$(PY) benchmarks/run.py

generated: $(STAMP)  ## write again what validate reads instead of building it: the CRDs' strict schemas, the dashboards
	$(PY) -m fleetops.schema
	$(PY) -m modules.dashboards

clean:
	rm -rf build .pytest_cache
