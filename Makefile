# One command runs the demo, one runs the tests; both do every set-up step themselves.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: install services services-down lint test soak test-unit test-integration demo bench clean dist

# A virtualenv with the package and its test extras; redone when pyproject.toml or the
# native rows decoder (native/, compiled by pip through setuptools-rust) changes. The package
# runs without the decoder (mysql-replication decodes the rows then), but here it must build.
NATIVE := native/Cargo.toml native/Cargo.lock $(wildcard native/src/*.rs)
$(STAMP): pyproject.toml $(NATIVE)
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,bench]'
	@$(PY) -c 'import airflow_provider_dblog._rows_native' || { \
	  echo "native/ (the binlog rows decoder) did not build: install Rust (cargo), then make install" >&2; exit 1; }
	touch $(STAMP)

install: $(STAMP)

services:
	scripts/services up

services-down:
	scripts/services down

# Lint, format and types (configured in pyproject.toml): ruff on all Python code, mypy
# --strict on the engine core and in normal mode on the whole package.
LINT_PATHS := airflow_provider_dblog tests bench scripts dags
lint: install
	$(VENV)/bin/ruff check $(LINT_PATHS)
	$(VENV)/bin/ruff format --check $(LINT_PATHS)
	$(VENV)/bin/mypy --strict airflow_provider_dblog/core
	$(VENV)/bin/mypy

# Everything: lint, then unit, contract and integration tests against real servers, started
# here and stopped afterwards (scripts/run-tests).
test: install lint
	PY=$(PY) scripts/run-tests

# The soak runs the bounded suite leaves out (tests marked soak): the convergence oracle with
# a fixed and more random seeds (DBLOG_SOAK_SEEDS, default 3) and a 120 s workload each (the
# fixed seed once more with its state on a ZooKeeper ensemble whose leader is killed, and
# with its lake on S3 and its landing on the Spark cluster; PostgreSQL's with read-only dumps),
# MariaDB's history mirror at each snapshot, a running landing's metrics endpoint, and
# dblog_land's dag.test() through spark-submit on both sources (the Airflow e2e covers it in make test), and
# the mirror check with a corruption planted in every column (and in a random half), and a
# Kafka broker down for 5 minutes, then past --output-outage-timeout, under a running capture
# (and 45 s under a MariaDB one), and
# Debezium's JDBC sink fed by a MariaDB capture; and
# the status page in Chromium, the five-source fleet, MariaDB's failover mid-flush, the mirror that never moves back and the
# TRUNCATE landing test, and the example DAGs' system tests (tests/system: dag.test() of each); the longest runs, kept out of make test so that it stays near half an hour (README).
soak: install
	DBLOG_SOAK=1 DBLOG_ORACLE_SECONDS=$${DBLOG_ORACLE_SECONDS:-120} PY=$(PY) scripts/run-tests -m soak

test-unit: install
	$(PY) -m pytest -q tests/unit

demo: install
	PY=$(PY) scripts/demo

bench: install
	PY=$(PY) scripts/run-bench

# The sdist, the manylinux wheels (x86_64, aarch64) and the pure-Python wheel, into dist/
# (scripts/dist, docs/install.md).
dist: install
	PY=$(PY) scripts/dist

clean:
	rm -rf build dist $(VENV) .pytest_cache dblog-state dblog-lake
