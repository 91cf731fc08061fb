# Two set-up commands on a fresh machine: `make run` and `make test`.
PYTHON ?= python3.11
VENV ?= .venv
PY := $(VENV)/bin/python
PYPROJECT_HASH := $(shell md5sum < pyproject.toml | cut -c1-8)

PROTOS := proto/common.proto proto/namesrv.proto proto/broker.proto proto/kv.proto proto/tiered.proto proto/consumer.proto proto/ha.proto proto/controller.proto proto/pop.proto proto/v2/definition.proto proto/v2/service.proto proto/transaction.proto proto/acl.proto

.PHONY: venv base spark dev bench-extra test test-pythons lint bench run proto clean
.NOTPARALLEL:  # the stamps install into one venv: one pip at a time

# One venv, one stamp per part installed into it, so `make run` installs only what the cluster needs and
# `make test` adds the rest. A stamp is named by pyproject.toml's hash and depends on the file: an edit reinstalls.
BASE_STAMP := $(VENV)/.installed-base-$(PYPROJECT_HASH)
SPARK_STAMP := $(VENV)/.installed-spark-$(PYPROJECT_HASH)
DEV_STAMP := $(VENV)/.installed-dev-$(PYPROJECT_HASH)
BENCH_STAMP := $(VENV)/.installed-bench-$(PYPROJECT_HASH)

# $(call install,EXTRAS,STAMP-KIND): editable install of the package with those extras ("" for none).
# compat mode: a plain path entry, which subprocesses (daemons, Spark's Python workers) see as well.
define install
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.$(1)' --config-settings editable_mode=compat
	rm -f $(VENV)/.installed-$(2)-*
	touch $@
endef

$(BASE_STAMP): pyproject.toml
	$(call install,,base)

$(SPARK_STAMP): pyproject.toml
	$(call install,[spark],spark)

$(DEV_STAMP): pyproject.toml
	$(call install,[dev],dev)

$(BENCH_STAMP): pyproject.toml
	$(call install,[bench],bench)

base: $(BASE_STAMP)
spark: $(SPARK_STAMP)
dev: $(DEV_STAMP)
bench-extra: $(BENCH_STAMP)  # the peers the bench compares with (Redis, NATS): make bench only
venv: dev spark

# PYTEST_ARGS narrows a run (e.g. PYTEST_ARGS=tests/store); empty runs the whole suite. Its files run on
# TEST_WORKERS processes (pytest-xdist; a file's tests stay together, on one, in order: they share module
# fixtures). In one process the suite kept about one of CI's two cores busy: 41-44 minutes, against 19-25 on two.
# Two workers still left half of two cores idle (the tests mostly wait on their daemons): on one machine, 13:38
# with two, 11:42 with three beside a busy-looping process, 8:44 with four. Three, for a slower CI machine.
# TEST_WORKERS=0 runs the tests in pytest's own process (for --pdb).
# The tests start daemons and CLI runs as new Python processes. Where the environment forbids writing bytecode
# (PYTHONDONTWRITEBYTECODE, set on some images), each one compiled every module again: 16-22% of the time of
# the daemon-heavy files measured. Bytecode goes under the venv instead (PYTHONPYCACHEPREFIX): the tree stays
# clean either way.
TEST_WORKERS ?= 3
test: venv
	$(PY) -m ruff check .
	$(PY) -m mypy
	env -u PYTHONDONTWRITEBYTECODE PYTHONPYCACHEPREFIX=$(abspath $(VENV))/pycache \
	  $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

# The suite on each supported Python in its own venv (.venv-3.12, ...; PYTHON's version uses $(VENV)).
# A version found neither on PATH nor under pyenv is skipped; the exit status says whether all that ran passed.
TEST_PYTHON_VERSIONS ?= 3.11 3.12 3.13
test-pythons:
	@failed=""; ran=""; for v in $(TEST_PYTHON_VERSIONS); do \
	  py=$$(python$$v -c 'import sys; print(sys.executable)' 2>/dev/null \
	        || ls -d $${PYENV_ROOT:-$$HOME/.pyenv}/versions/$$v.*/bin/python$$v 2>/dev/null | sort -V | tail -n 1); \
	  if [ -z "$$py" ]; then echo "== python$$v: not found, skipped"; continue; fi; \
	  venv=.venv-$$v; [ "$(PYTHON)" = "python$$v" ] && venv=$(VENV); \
	  echo "== python$$v: $$py in $$venv"; ran="$$ran $$v"; \
	  $(MAKE) --no-print-directory test PYTHON=$$py VENV=$$venv || failed="$$failed $$v"; \
	done; \
	echo "== ran on:$${ran:- nothing}; failed on:$${failed:- none}"; [ -z "$$failed" ] && [ -n "$$ran" ]

lint: dev
	$(PY) -m ruff check .
	$(PY) -m mypy

# Quick mode (< 3 min); bench-full adds the scale scenarios. Tables print; JSON goes to bench/results/.
# The test venv (the Spark scenario needs PySpark) and the bench extra (the peers: Redis Streams, NATS JetStream).
bench: venv bench-extra
	$(PY) -m bench

.PHONY: bench-full
bench-full: venv bench-extra
	$(PY) -m bench --full

# The cluster alone needs only the base package. SPARK=1 also installs PySpark, for the Spark jobs.
# SLAVE=1 runs broker-a as a two-replica group under the name server's controller (broker-a and broker-a-s).
run: base $(if $(filter 1 true yes,$(SPARK)),spark)
	$(PY) -m cluster.local_cluster --data-dir run-data$(if $(filter 1 true yes,$(SLAVE)), --with-slave)

# Generated code is committed so a plain install needs no protoc; tests check it matches the sources.
proto: dev
	$(PY) -m grpc_tools.protoc -I . --python_out=. --pyi_out=. --grpc_python_out=. $(PROTOS)

clean:
	rm -rf $(VENV) .venv-3.* run-data .pytest_cache
