# Two entry points: `make demo` (Muster's main job on a local real control plane) and
# `make test` (the whole test suite). Each sets up everything it needs itself.
# `make image` builds the serving image without any registry (docs/install.md).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test venv controlplane image-tools promtool bench clean image chart-files

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,sim,ray]'
	@touch $(STAMP)

venv: $(STAMP)

controlplane:
	bash tests/e2e/controlplane/build.sh

# Prometheus's promtool, which the alert-rule tests run (cached under ~/.cache/muster).
promtool:
	bash tests/tools/promtool.sh

# mmdebstrap, podman and runc from Debian's packages, installed when missing (root + apt-get).
image-tools:
	bash packaging/image/tools.sh

demo: venv controlplane
	$(BIN)/muster demo

test: venv controlplane image-tools promtool
	$(BIN)/python -m pytest

# IMAGE=NAME to tag it otherwise (default localhost/muster:VERSION).
image: venv image-tools
	PYTHON=$(BIN)/python bash packaging/image/build.sh $(IMAGE)

# charts/muster's CRDs and monitoring files, copied again from manifests/, their source.
chart-files: venv
	$(BIN)/python -m tests.packaging.chartfiles

bench: venv
	@for b in tests/bench/bench_*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
