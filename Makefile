# One command runs the demo, one runs the tests; both do every set-up step themselves.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: install services services-down test test-unit test-integration demo bench clean

# A virtualenv with the package and its test extras; redone when pyproject.toml changes.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,bench]'
	touch $(STAMP)

install: $(STAMP)

services:
	scripts/services up

services-down:
	scripts/services down

# Everything: unit, contract and integration tests against real servers, started here and
# stopped afterwards (scripts/run-tests).
test: install
	PY=$(PY) scripts/run-tests

test-unit: install
	$(PY) -m pytest -q tests/unit

demo: install
	PY=$(PY) scripts/demo

bench: install
	PY=$(PY) scripts/run-bench

clean:
	rm -rf $(VENV) .pytest_cache dblog-state dblog-lake
