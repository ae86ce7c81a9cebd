# praxist_fs: `make demo` runs the tour, `make test` sets up and runs the tests.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test bench soak clean bytecode

$(STAMP): setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

# Compile the package once for every process a target starts (coordinators, shims, CLI
# calls): where PYTHONDONTWRITEBYTECODE is set, as on our development machines, each would compile
# it again, which doubled the CPU time of the end-to-end tests. Up-to-date files are skipped.
bytecode: $(STAMP)
	$(BIN)/python -m compileall -q praxist_fs

demo: bytecode
	$(BIN)/praxist-fs demo --run-dir .demo-run --config fixtures/tasks/example.yaml

# Two workers (pytest-xdist): the suite's tests are independent, and most of their time
# is waiting on real processes; PRAXIST_TEST_WORKERS=1 runs them one at a time.
test: bytecode
	$(BIN)/python -m pytest -q -n $${PRAXIST_TEST_WORKERS:-2} --dist loadgroup

# Side by side with task-spooler (installed with apt-get when missing): see bench/README.md
bench: bytecode
	$(BIN)/python bench/bench_all.py

# A long seeded soak outside CI: SEED=1 MINUTES=10 make soak (REAL=--real: real processes)
soak: bytecode
	PYTHONPATH=. $(BIN)/python tests/soak.py --seed $${SEED:-1} --minutes $${MINUTES:-10} $${REAL:-}

clean:
	rm -rf $(VENV) .demo-run .pytest_cache bench/results
