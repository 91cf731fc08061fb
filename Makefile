# Two set-up commands on a fresh machine: `make run` and `make test`.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | md5sum | cut -c1-8)

PROTOS := proto/common.proto proto/namesrv.proto proto/broker.proto proto/kv.proto proto/tiered.proto

.PHONY: venv test lint bench run proto clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,spark]' --config-settings editable_mode=compat
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

venv: $(STAMP)

test: venv
	$(PY) -m ruff check .
	$(PY) -m pytest -q

lint: venv
	$(PY) -m ruff check .

# Quick mode (< 3 min); bench-full adds the scale scenarios. Tables print; JSON goes to bench/results/.
bench: venv
	$(PY) -m bench

.PHONY: bench-full
bench-full: venv
	$(PY) -m bench --full

run: venv
	$(PY) -m cluster.local_cluster --data-dir run-data

# Generated code is committed so a plain install needs no protoc; tests check it matches the sources.
proto: venv
	$(PY) -m grpc_tools.protoc -I . --python_out=. --pyi_out=. --grpc_python_out=. $(PROTOS)

clean:
	rm -rf $(VENV) run-data .pytest_cache
